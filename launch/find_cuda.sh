#!/bin/sh
# Prints a CUDA toolkit directory whose include/ holds cuda_runtime.h, or nothing.
# Tries CUDA_PATH/CUDA_HOME, then the toolkit an `nvcc` wrapper script execs, then the usual places.
for d in "${CUDA_PATH:-}" "${CUDA_HOME:-}"; do
  [ -n "$d" ] && [ -f "$d/include/cuda_runtime.h" ] && { echo "$d"; exit 0; }
done
nvcc=$(command -v nvcc 2>/dev/null)
if [ -n "$nvcc" ]; then
  real=$(readlink -f "$nvcc")
  d=$(dirname "$(dirname "$real")")
  [ -f "$d/include/cuda_runtime.h" ] && { echo "$d"; exit 0; }
  # A wrapper script: take the toolkit path it names.
  for p in $(grep -ao '/[^ "]*/bin/nvcc' "$real" 2>/dev/null); do
    d=$(dirname "$(dirname "$p")")
    [ -f "$d/include/cuda_runtime.h" ] && { echo "$d"; exit 0; }
  done
fi
for d in /usr/local/cuda /usr/local/cuda-*; do
  [ -f "$d/include/cuda_runtime.h" ] && { echo "$d"; exit 0; }
done
exit 0

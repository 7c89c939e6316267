# Setup and the two commands a newcomer runs: `make quickstart` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MPI4JAX_VERSION := 0.9.1.post2
STAMP := $(VENV)/.installed

.PHONY: quickstart test lint bench venv clean

venv: $(STAMP)

# mpi4jax compiles against the installed jax and mpi4py. Its setup takes the directory above the
# first `nvcc` on PATH as the CUDA root; where that nvcc is a wrapper outside the toolkit the
# build misses cuda_runtime.h, so CUDA_PATH is set to a directory that really holds it (none
# found: the CPU bridge only). See shared/NOTES.md.
$(STAMP): requirements.txt Makefile launch/find_cuda.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	cuda=$$(sh launch/find_cuda.sh); \
	  if [ -n "$$cuda" ]; then echo "mpi4jax: CUDA_PATH=$$cuda"; export CUDA_PATH=$$cuda; \
	  else echo "mpi4jax: no CUDA toolkit found, building the CPU bridge only"; unset CUDA_PATH; fi; \
	  $(PY) -m pip install -q mpi4jax==$(MPI4JAX_VERSION)
	$(PY) -c "import jax, flax, optax, mpi4py, mpi4jax, tensorflow_datasets, sklearn" 2>/dev/null
	touch $(STAMP)

# CoCoD-SGD on 2 MPI ranks; the last line is the measured Tp, Tc and fraction of communication hidden.
quickstart: $(STAMP)
	launch/mpirun.sh -np 2 $(PY) -m cocod_jax.main --config=configs/quickstart.py \
	  --workdir=runs/quickstart

# The four algorithms on the simulated network (root only); writes runs/bench/bench.md.
bench: $(STAMP)
	$(PY) launch/bench.py --out=runs/bench

test: $(STAMP)
	$(PY) -m pytest -q tests

lint: $(STAMP)
	$(VENV)/bin/ruff check cocod_jax configs tests launch
	$(VENV)/bin/ruff format --check cocod_jax configs tests launch

clean:
	rm -rf $(VENV) runs

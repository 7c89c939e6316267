"""A rank that fails alone during the start ends the job in seconds (issue 41: a start-up error on
one rank hung the job, the others blocked in a collective and the failing rank in MPI_Finalize).
One rank of two is started with COCOD_START_FAULT (tests/start_faults.py) after mpirun's `:`.
"""

import sys

import pytest

from tests import mpi_helpers

pytestmark = pytest.mark.mpi


def _launch(tmp_path, fault):
  args = ['tests/start_faults.py', '--config=configs/test.py', f'--workdir={tmp_path}',
          '--config.backend=mpi']  # fmt: skip
  return mpi_helpers.mpirun('-np', '1', sys.executable, *args, ':', '-np', '1', 'env',
                            f'COCOD_START_FAULT={fault}', sys.executable, *args,
                            silent_s=90)  # fmt: skip


def test_exception_on_one_rank_during_the_start_ends_the_job(tmp_path):
  # Measured: the job ends 4.2 s after its launch (the start itself takes about 3 s).
  p = _launch(tmp_path, 'raise')
  print(f'exception at the start on rank 1: the job ended {p.elapsed:.1f} s after its launch')
  assert p.returncode != 0
  assert 'error: rank 1: RuntimeError: injected failure during the start' in p.stderr, p.stderr
  assert p.elapsed < 30
  assert not (tmp_path / 'results.json').exists()


def test_refusal_on_one_rank_alone_ends_the_job(tmp_path):
  # Rank 1 exits 2 alone; it waits start.EXIT_WAIT_S (10 s) for the others, then leaves without
  # MPI_Finalize. Measured: 16.2 s after the launch.
  p = _launch(tmp_path, 'exit')
  print(f'refusal on rank 1 alone: the job ended {p.elapsed:.1f} s after its launch')
  assert p.returncode != 0
  assert 'error: rank 1: injected refusal on this rank alone' in p.stderr, p.stderr
  assert 'error: rank 1: exiting with status 2 alone' in p.stderr
  assert p.elapsed < 40

"""Tests of cocod_jax/sweep/runner.py and its CLI (cocod_jax/sweep/__main__.py): a sweep with an
invalid point refused before anything is written, --parallel ignored for MPI points and
--link_rate refused without root, a stale point's directory moved aside when it is rerun.
"""

import os

import pytest

from cocod_jax.config import errors
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import runner
from tests.sweep_helpers import TINY
from tests.sweep_helpers import cli
from tests.sweep_helpers import results_json
from tests.sweep_helpers import write_json

# It runs sweeps of real runs: left out of make test-fast.
pytestmark = pytest.mark.slow


def test_an_invalid_point_refuses_the_sweep_and_creates_nothing(tmp_path):
  workdir = tmp_path / 'runs'
  p = cli(f'--config={TINY}:case=invalid', f'--workdir={workdir}')
  assert p.returncode == 2, p.stderr
  lines = p.stderr.splitlines()
  assert len(lines) == 4, p.stderr
  assert lines[0] == (
    'error: point 0 (s0.num_workers-0): num_workers=0 is invalid; allowed: an integer >= 1'
  )
  assert lines[1].startswith(
    "error: point 2 (s2.name-bogus.batch_size--1): algorithm.name='bogus' is invalid; allowed: "
  )
  assert lines[2] == (
    'error: point 2 (s2.name-bogus.batch_size--1): batch_size=-1 is invalid; allowed: an '
    'integer >= 1'
  )
  assert lines[3] == 'error: sweep refused (3 problem(s)); nothing was written'
  assert not workdir.exists()


def test_parallel_is_refused_for_mpi_points_and_link_rate_needs_root(tmp_path, capsys, monkeypatch):
  runner.run_sweep(f'{TINY}:case=mixed', str(tmp_path / 'w'), parallel=4, dry_run=True)
  assert '--parallel=4 ignored: this sweep has MPI points (timing)' in capsys.readouterr().out
  monkeypatch.setattr(runner.os, 'geteuid', lambda: 1000)
  with pytest.raises(errors.UsageError, match='--link_rate=1gbit needs root'):
    runner.run_sweep(f'{TINY}:case=mixed', str(tmp_path / 'w'), link_rate='1gbit')
  assert not (tmp_path / 'w').exists()


def test_rerun_stale_moves_the_old_directory_aside(tmp_path):
  config = f'{TINY}:case=missing'
  (point,) = points_lib.expand(config, str(tmp_path))
  write_json(f'{point.dir}/point.json', dict(hash=point.hash, commit='0ld' * 8))
  write_json(f'{point.dir}/results.json', results_json(point.config))
  (record,) = runner.run_sweep(config, str(tmp_path))
  assert record['state'] == 'DONE' and record['stale'] is True  # Kept, not rerun.
  (record,) = runner.run_sweep(config, str(tmp_path), rerun_stale=True)
  assert record['state'] == 'FAILED' and record['stale'] is False  # Its dataset is missing.
  assert os.path.exists(f'{point.dir}.stale-0ld0ld0l/results.json')

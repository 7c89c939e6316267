"""Tests of cocod_jax/sweep/state.py: a point's state read from hand-made files in its directory
(point.json, the lock of a live, dead or remote process or of a Slurm job asked of a stand-in
sacct, status.json, results.json), and which points a sweep runs.
"""

import os
import socket
import subprocess

import pytest

from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import state as state_lib
from tests.sweep_helpers import HEAD
from tests.sweep_helpers import TINY
from tests.sweep_helpers import fake_slurm
from tests.sweep_helpers import results_json
from tests.sweep_helpers import wait_for
from tests.sweep_helpers import write_json

# Slow with the sweep runner's other test modules: left out of make test-fast.
pytestmark = pytest.mark.slow


@pytest.fixture(name='point')
def _point(tmp_path):
  return points_lib.expand(TINY, str(tmp_path))[0]


def _dead_pid():
  p = subprocess.Popen(['true'])
  p.wait()
  return p.pid


def test_states(point, tmp_path, monkeypatch):
  d = point.dir
  host = socket.gethostname()
  assert state_lib.state(point, HEAD) == state_lib.State('PENDING')
  write_json(f'{d}/point.json', dict(hash=point.hash, commit=HEAD))
  assert state_lib.state(point, HEAD) == state_lib.State('INCOMPLETE', stale=False)
  assert state_lib.state(point, 'another').stale is True
  assert state_lib.state(point, 'unknown').stale is False  # No git: nothing to compare with.
  write_json(f'{d}/lock', dict(pid=os.getpid(), host=host))
  assert state_lib.state(point, HEAD).name == 'RUNNING'
  write_json(f'{d}/lock', dict(pid=_dead_pid(), child_pid=_dead_pid(), host=host))
  assert state_lib.state(point, HEAD).name == 'INCOMPLETE'
  write_json(f'{d}/lock', dict(pid=os.getpid(), host='elsewhere'))  # Cannot be checked from here.
  assert state_lib.state(point, HEAD).name == 'INCOMPLETE'
  zombie = subprocess.Popen(['true'])  # Ended, not waited for: not alive.
  wait_for(lambda: open(f'/proc/{zombie.pid}/stat').read().rsplit(')', 1)[1].split()[0] == 'Z')
  write_json(f'{d}/lock', dict(pid=zombie.pid, host=host))
  assert state_lib.state(point, HEAD).name == 'INCOMPLETE'
  zombie.wait()
  write_json(f'{d}/lock', dict(pid=None, host=host, job_id=str(os.getpid()), cluster='local'))
  assert state_lib.state(point, HEAD).detail == f'submitit local job {os.getpid()} on {host}'
  slurm_job = dict(pid=None, host='elsewhere', job_id='77_3', cluster='slurm')
  write_json(f'{d}/lock', slurm_job)
  monkeypatch.setattr(state_lib.shutil, 'which', lambda name: None)  # No sacct: trust the lock.
  assert state_lib.state(point, HEAD) == state_lib.State(
    'RUNNING', False, 'Slurm job 77_3 (UNKNOWN)'
  )
  monkeypatch.undo()
  fake_slurm(tmp_path, monkeypatch, {'77': 'RUNNING', '78': 'CANCELLED by 0'})
  assert state_lib.state(point, HEAD).detail == 'Slurm job 77_3 (RUNNING)'  # Asked sacct.
  own = state_lib.Job('77_3', 'slurm')
  assert state_lib.state(point, HEAD, own_job=own).name == 'INCOMPLETE'  # The job's own lock.
  write_json(f'{d}/lock', dict(slurm_job_id='78_1'))  # The earlier array script's record.
  assert state_lib.state(point, HEAD).name == 'INCOMPLETE'  # Slurm says the job ended.
  os.remove(f'{d}/lock')
  write_json(f'{d}/status.json', dict(rc=1))
  assert state_lib.state(point, HEAD) == state_lib.State('FAILED', False, 'exit status 1')
  write_json(f'{d}/status.json', dict(rc=75))
  assert state_lib.state(point, HEAD).name == 'INCOMPLETE'  # Preempted: a rerun resumes.
  write_json(f'{d}/results.json', results_json(point.config, 'diverged'))
  assert state_lib.state(point, HEAD).name == 'DIVERGED'
  write_json(f'{d}/results.json', results_json(point.config))
  assert state_lib.state(point, HEAD) == state_lib.State('DONE', False)
  broken = results_json(point.config)
  del broken['epochs'][0]['test_accuracy']  # Rerun it (--retry_failed) rather than plot it.
  write_json(f'{d}/results.json', broken)
  s = state_lib.state(point, HEAD)
  assert s.name == 'FAILED' and "epochs[0] has no 'test_accuracy'" in s.detail
  moved = dict(point.config, data_dir='/elsewhere')  # Left out of the hash: still DONE.
  write_json(f'{d}/results.json', results_json(moved))
  assert state_lib.state(point, HEAD).name == 'DONE'
  write_json(f'{d}/results.json', results_json(dict(point.config, seed=5)))
  s = state_lib.state(point, HEAD)
  assert s.name == 'MISMATCH' and 'differs at seed' in s.detail
  write_json(f'{d}/point.json', dict(hash='00000000', commit=HEAD))
  assert state_lib.state(point, HEAD).name == 'MISMATCH'


def test_which_points_run(point):
  to_run = state_lib.to_run

  def runs(name, stale=None, retry_failed=False, rerun_stale=False):
    states = {point.dir: state_lib.State(name, stale)}
    return bool(to_run([point, point], states, retry_failed, rerun_stale))

  assert runs('PENDING') and runs('INCOMPLETE') and runs('INCOMPLETE', stale=True)
  assert not runs('FAILED') and runs('FAILED', retry_failed=True)
  assert not runs('DONE') and not runs('DIVERGED') and not runs('DONE', stale=True)
  assert runs('DONE', stale=True, rerun_stale=True) and not runs('DONE', False, rerun_stale=True)
  assert not runs('RUNNING', stale=True, rerun_stale=True)
  assert not runs('MISMATCH', retry_failed=True, rerun_stale=True)
  states = {point.dir: state_lib.State('PENDING')}
  assert len(to_run([point, point], states, False, False)) == 1  # One run per directory.

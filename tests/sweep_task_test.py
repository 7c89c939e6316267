"""Tests of cocod_jax/sweep/task.py, a submitted job's tasks, under submitit's local executor: with
stand-in commands (an MPI point's ranks meet, a DONE point runs nothing, a run that exits 75 of
its own is requeued), and one real sweep through the slurm launcher whose held run is preempted,
requeued and resumed to DONE while its other point fails.
"""

import json
import os
import signal
import sys

import pytest
import submitit

from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import runner
from cocod_jax.sweep import state as state_lib
from cocod_jax.sweep import task as task_lib
from tests.sweep_helpers import TINY
from tests.sweep_helpers import results_json
from tests.sweep_helpers import wait_for
from tests.sweep_helpers import write_json

# It runs sweeps of real runs: left out of make test-fast.
pytestmark = pytest.mark.slow


def test_job_tasks_rendezvous_and_a_run_preempted_of_its_own(tmp_path):
  """Tasks of jobs run by submitit's local executor with stand-in commands (no training): an MPI
  point's second rank runs its command when rank 0 runs the point (and is stopped when it goes on
  past rank 0's end), and nothing when the point is DONE; a run that exits 75 of its own is
  requeued through submitit (its next attempt exits 0)."""
  a, b, c = points_lib.expand(TINY, str(tmp_path / 'w'))
  write_json(f'{b.dir}/results.json', results_json(b.config))
  marker = tmp_path / 'preempted'
  rank = 'import os, time; r = os.environ["SUBMITIT_LOCAL_GLOBALID"]; print("rank", r, flush=True)'
  echo = [sys.executable, '-c', rank + '; time.sleep(0 if r == "0" else 300)']
  once = f'import os, sys; m = {str(marker)!r}; e = os.path.exists(m); open(m, "w"); '
  once += 'sys.exit(0 if e else 75)'  # 75 the first time, then 0.
  ex = submitit.AutoExecutor(folder=str(tmp_path / 'submitit' / '%j'), cluster='local')
  ex.update_parameters(tasks_per_node=2, timeout_min=60, stderr_to_stdout=True)
  ranked = [ex.submit(task_lib.PointTask(p, echo, 2, ended_grace_s=0.5)) for p in (a, b)]
  ex.update_parameters(tasks_per_node=1)
  preempted = ex.submit(task_lib.PointTask(c, [sys.executable, '-c', once], 1))
  assert ranked[0].results() == [
    dict(point=os.path.basename(a.dir), state='INCOMPLETE', ran=True, rc=0),
    dict(rank=1, ran=True, rc=-signal.SIGTERM),  # Stopped 0.5 s after rank 0's run ended.
  ]
  assert 'rank 0' in open(f'{a.dir}/log.txt').read()
  assert open(f'{a.dir}/log.rank1.txt').read() == 'rank 1\n'
  assert ranked[1].results() == [
    dict(point=os.path.basename(b.dir), state='DONE', ran=False),
    dict(rank=1, ran=False),
  ]
  assert not os.path.exists(f'{b.dir}/log.rank1.txt') and not os.path.exists(f'{b.dir}/log.txt')
  assert preempted.result()['rc'] == 0
  assert 'Requeued job' in preempted.stdout()
  assert json.load(open(f'{c.dir}/point.json'))['attempt'] == 2
  assert not os.path.exists(f'{a.dir}/lock') and not os.path.exists(f'{c.dir}/lock')


def test_local_executor_preempts_requeues_and_resumes(tmp_path, monkeypatch):
  """One sweep through submitit's local executor: seed 0 runs tests/data/sweep/stall.py (the
  entry point, held at step 4 until a SIGTERM), its task gets SIGUSR2 there (submitit's
  preemption signal), passes SIGTERM on, and the run checkpoints and exits 75; submitit requeues
  the job and the next attempt resumes the run to DONE. The other point fails (exit status 2)."""
  command = points_lib.command

  def stalled(point, launcher='local', python=None):
    cmd = command(point, launcher, python)
    return cmd[:1] + ['tests/data/sweep/stall.py'] + cmd[3:]

  monkeypatch.setattr(points_lib, 'command', stalled)
  config, workdir = f'{TINY}:case=pair', str(tmp_path)
  records = runner.run_sweep(config, workdir, launcher='slurm', slurm_cluster='local')
  assert [r['state'] for r in records] == ['RUNNING', 'RUNNING']
  held, failing = points_lib.expand(config, workdir)
  log = os.path.join(held.dir, 'log.txt')
  wait_for(lambda: 'stalled at step 4' in open(log).read(), what='the run to reach step 4')
  lock = json.load(open(os.path.join(held.dir, 'lock')))
  os.kill(lock['pid'], signal.SIGUSR2)  # The task's pid; the run itself ignores SIGUSR2.
  wait_for(lambda: not {state_lib.state(p).name for p in (held, failing)} & {'RUNNING'})
  done, failed = runner.run_sweep(config, workdir, report_only=True)
  assert (done['state'], failed['state'], failed['rc']) == ('DONE', 'FAILED', 2)
  text = open(log).read()
  assert 'preempted at step 5: checkpoint written' in text
  assert 'resuming from the checkpoint at step 5' in text and text.count('=== ') == 2
  info = json.load(open(os.path.join(held.dir, 'point.json')))
  assert (info['attempt'], info['job_id'], info['cluster']) == (2, lock['job_id'], 'local')
  job = submitit.LocalJob(
    os.path.join(workdir, 'sweeps', 'tiny.pair', 'submitit', '%j'), lock['job_id']
  )
  assert job.result() == dict(point=os.path.basename(held.dir), state='DONE', ran=True, rc=0)
  assert 'Caught signal SIGUSR2' in job.stdout() and 'Requeued job' in job.stdout()

"""The Slurm paths against a real scheduler: the one-node cluster of launch/slurm_local.sh.

Marked `slurm`; each test skips with one line when no Slurm answers here (`launch/slurm_local.sh
up` starts one; .ci/run does). What runs:
- launch/slurm_example.sbatch with 2 tasks (`srun --mpi=pmix`, the venv's Open MPI) ends with
  exactly the model of the same run under launch/mpirun.sh;
- `scontrol requeue` on that job while it runs: the ranks checkpoint and exit 75, Slurm runs the
  job again, and the next attempt resumes and ends with the uninterrupted run's model;
- the sweep with --launcher=slurm submits through submitit to Slurm (a one-host point and a
  2-rank MPI point), the points finish, a second call submits nothing; a point whose job is
  cancelled before it ran is freed, and the next call submits and runs it.
"""

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from cocod_jax.record import provenance
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import runner
from cocod_jax.sweep import state as state_lib

pytestmark = pytest.mark.slurm

ROOT = provenance.ROOT
MPIRUN = os.path.join(ROOT, 'launch', 'mpirun.sh')
EXAMPLE = os.path.join(ROOT, 'launch', 'slurm_example.sbatch')
TINY = 'tests/data/sweep/tiny.py'
ENV = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
# The example's #SBATCH lines ask for 2 nodes x 8 GPUs x 32 CPUs: one node, 2 tasks here.
ONE_NODE = ['--nodes=1', '--ntasks-per-node=2', '--cpus-per-task=1', '--gpus-per-node=0']
# configs/test.py on 2 MPI ranks of one worker each, 4 epochs of 15 steps, a checkpoint an epoch.
RUN = ['--config.num_epochs=4', '--config.checkpoint.every_epochs=1', '--config.comm.timeout_s=20']
WAIT_S = 300


def _slurm_up() -> str:
  """'' when a Slurm controller answers with an idle (or busy) node, else why not."""
  if not shutil.which('sinfo') or not shutil.which('sbatch'):
    return 'no Slurm here (no sinfo/sbatch): launch/slurm_local.sh up starts a one-node cluster'
  p = subprocess.run(['sinfo', '-h', '-o', '%T'], capture_output=True, text=True, timeout=30)
  states = p.stdout.split()
  if p.returncode or not {'idle', 'mixed', 'allocated'} & set(states):
    said = (p.stderr or p.stdout).strip() or 'no node'
    return f'no Slurm up (sinfo: {said}): launch/slurm_local.sh up starts a one-node cluster'
  return ''


@pytest.fixture(scope='module', autouse=True)
def slurm():
  why = _slurm_up()
  if why:
    pytest.skip(why)


def _queue() -> set:
  return set(_run(['squeue', '-h', '-o', '%i']).stdout.split())


@pytest.fixture(autouse=True)
def cancel_left_jobs():
  """Cancels the jobs a test leaves in the queue (a failed one), so the next finds the node free."""
  before = _queue()
  yield
  left = sorted(_queue() - before)
  if left:
    _run(['scancel', *left])


def _run(cmd, timeout=120, **kwargs):
  return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout,
                        **kwargs)  # fmt: skip


def _job_state(job_id) -> str:
  """The job's state in Slurm's accounting (sacct), '' before it is recorded."""
  p = _run(['sacct', '-X', '-n', '-P', '-o', 'State', '-j', str(job_id)])
  return p.stdout.strip().split(' ')[0]


def _final_state(job_id, timeout=60) -> str:
  """The job's state once its end is accounted (slurmdbd hears of it a moment after squeue)."""
  end = time.monotonic() + timeout
  while (s := _job_state(job_id)) in ('', 'PENDING', 'REQUEUED', 'RUNNING', 'COMPLETING'):
    if time.monotonic() > end:
      break
    time.sleep(0.5)
  return s


def _queued(job_id) -> str:
  """The job's state in the queue (squeue), '' once it has left it."""
  return _run(['squeue', '-h', '-o', '%T', '-j', str(job_id)]).stdout.strip()


def _wait_for(predicate, what, timeout=WAIT_S):
  end = time.monotonic() + timeout
  while not predicate():
    assert time.monotonic() < end, f'no {what} after {timeout} s'
    time.sleep(0.5)


def _params(workdir):
  with np.load(os.path.join(workdir, 'final_params.npz')) as f:
    return {k: f[k] for k in f.files}


def _assert_same(got, expected):
  assert got.keys() == expected.keys()
  for k in expected:
    np.testing.assert_array_equal(got[k], expected[k], err_msg=k)


@pytest.fixture(scope='module')
def straight(tmp_path_factory):
  """The uninterrupted run under launch/mpirun.sh: its final model."""
  workdir = tmp_path_factory.mktemp('straight')
  cmd = [MPIRUN, '-np', '2', sys.executable, '-m', 'cocod_jax.main', '--config=configs/test.py',
         '--config.backend=mpi', '--config.num_workers=2', f'--workdir={workdir}',
         *RUN]  # fmt: skip
  p = _run(cmd, timeout=240)
  assert p.returncode == 0, p.stderr[-3000:]
  return _params(workdir)


def _sbatch(script, workdir, out, *extra):
  """Submits `script` (the example or a copy) for configs/test.py with RUN; returns the job id."""
  cmd = ['sbatch', '--parsable', *ONE_NODE, f'--output={out}', '--open-mode=append', *extra,
         script, 'configs/test.py', str(workdir), *RUN]  # fmt: skip
  p = _run(cmd, timeout=60)
  assert p.returncode == 0, p.stderr
  return p.stdout.strip().split(';')[0]


def test_sbatch_example_equals_mpirun(tmp_path, straight):
  workdir, out = tmp_path / 'run', tmp_path / 'job.out'
  job = _sbatch(EXAMPLE, workdir, out, '--wait')
  log = out.read_text()
  assert _final_state(job) == 'COMPLETED', log[-3000:]
  res = json.loads((workdir / 'results.json').read_text())
  assert res['backend'] == 'mpi' and res['layout']['processes'] == 2
  assert 'Sorry!' not in log and 'Traceback' not in log  # No PMIx help box, no crash.
  _assert_same(_params(workdir), straight)


def test_scontrol_requeue_checkpoints_and_the_next_attempt_resumes(tmp_path, straight):
  # The example as it is, but its ranks run tests/data/sweep/stall.py: the entry point, held at
  # step 4 until a SIGTERM. `scontrol requeue` there: Slurm sends SIGTERM to every task and to
  # the script; the ranks finish the round, checkpoint and exit 75; Slurm requeues the job.
  text = open(EXAMPLE).read()
  assert text.count('args=(-m cocod_jax.main ') == 1
  script = tmp_path / 'stalled.sbatch'
  script.write_text(text.replace('args=(-m cocod_jax.main ', 'args=(tests/data/sweep/stall.py '))
  workdir, out = tmp_path / 'run', tmp_path / 'job.out'
  job = _sbatch(str(script), workdir, out)
  _wait_for(lambda: out.exists() and out.read_text().count('stalled at step 4') == 2,
            'stalled ranks', timeout=120)  # fmt: skip
  p = _run(['scontrol', 'requeue', job])
  assert p.returncode == 0, p.stderr
  _wait_for(lambda: 'requeue' in out.read_text().split('stalled at step 4')[-1] and
            _queued(job) == 'PENDING', 'the job requeued', timeout=90)  # fmt: skip
  first = out.read_text()
  _wait_for(lambda: _queued(job) == '', 'the job to end')
  log = out.read_text()
  assert _final_state(job) == 'COMPLETED', log[-3000:]
  assert first.count('preempted at step 12: checkpoint written') == 2, first[-3000:]
  assert 'SIGTERM: every rank finishes its round' in first and 'Traceback' not in log
  assert 'resuming from the checkpoint at step 12 (epoch 1)' in log[len(first) :], log[-3000:]
  restarts = _run(['scontrol', 'show', 'job', job]).stdout
  assert 'Restarts=1' in restarts, restarts
  _assert_same(_params(workdir), straight)


def _states(config, workdir):
  return [r['state'] for r in runner.run_sweep(config, workdir, report_only=True)]


def _settled(config, workdir):
  state_lib.watch_jobs([p.dir for p in points_lib.expand(config, workdir)])
  return 'RUNNING' not in _states(config, workdir)


def test_sweep_through_submitit_on_slurm(tmp_path, capsys):
  config, workdir = f'{TINY}:case=mixed', str(tmp_path)
  records = runner.run_sweep(config, workdir, launcher='slurm')
  assert [r['state'] for r in records] == ['RUNNING', 'RUNNING']
  printed = capsys.readouterr().out
  jobs = [line.split(' job ')[1].split()[0] for line in printed.splitlines()
          if line.startswith('submitted ')]  # fmt: skip
  assert len(jobs) == 2, printed
  _wait_for(lambda: _settled(config, workdir), 'finished points')
  assert _states(config, workdir) == ['DONE', 'DONE']
  assert [_final_state(j) for j in jobs] == ['COMPLETED'] * 2
  mpi_point = points_lib.expand(config, workdir)[1]
  res = json.loads(open(os.path.join(mpi_point.dir, 'results.json')).read())
  assert res['backend'] == 'mpi' and res['layout']['processes'] == 2  # srun --mpi=pmix ranks.
  capsys.readouterr()
  runner.run_sweep(config, workdir, launcher='slurm')
  assert 'nothing to submit' in capsys.readouterr().out


def test_sweep_point_of_a_cancelled_job_is_freed_and_rerun(tmp_path, capsys):
  config, workdir = f'{TINY}:case=seed0', str(tmp_path)
  runner.run_sweep(config, workdir, launcher='slurm', slurm_args=('--hold',))
  (job,) = [line.split(' job ')[1].split()[0] for line in capsys.readouterr().out.splitlines()
            if line.startswith('submitted ')]  # fmt: skip
  assert _states(config, workdir) == ['RUNNING']  # Held in the queue: the job owns the point.
  assert _run(['scancel', job]).returncode == 0
  assert _final_state(job) == 'CANCELLED'
  _wait_for(lambda: _settled(config, workdir), 'the point freed', timeout=60)
  assert _states(config, workdir) == ['PENDING']  # Nothing of it ran: free to run.
  runner.run_sweep(config, workdir, launcher='slurm')
  (again,) = [line.split(' job ')[1].split()[0] for line in capsys.readouterr().out.splitlines()
              if line.startswith('submitted ')]  # fmt: skip
  assert again != job
  _wait_for(lambda: _settled(config, workdir), 'the rerun point')
  assert _states(config, workdir) == ['DONE']
  assert _final_state(again) == 'COMPLETED'


def test_sweep_job_preempted_by_slurm_requeues_and_resumes(tmp_path, monkeypatch, capsys):
  # A 2-rank MPI point through submitit, its ranks held at step 4 (tests/data/sweep/stall.py).
  # `scancel --signal=USR2` is what the time limit's `--signal=USR2@120` (slurm.SIGNAL_DELAY_S)
  # sends every task: rank 0's task passes SIGTERM to its run, the ranks checkpoint and exit 75,
  # submitit requeues the job (scontrol requeue), and the next attempt resumes the run to DONE.
  command = points_lib.command

  def stalled(point, launcher='local', python=None):
    cmd = command(point, launcher, python)
    return cmd[:1] + ['tests/data/sweep/stall.py'] + cmd[3:] if point.backend == 'mpi' else cmd

  monkeypatch.setattr(points_lib, 'command', stalled)
  config, workdir = f'{TINY}:case=mpi', str(tmp_path)
  (point,) = points_lib.expand(config, workdir)
  runner.run_sweep(config, workdir, launcher='slurm')
  (job,) = [line.split(' job ')[1].split()[0] for line in capsys.readouterr().out.splitlines()
            if line.startswith('submitted ')]  # fmt: skip
  log = os.path.join(point.dir, 'log.txt')
  logs = [log, os.path.join(point.dir, 'log.rank1.txt')]  # Both ranks held, not only rank 0.
  _wait_for(lambda: all(os.path.exists(f) and 'stalled at step 4' in open(f).read() for f in logs),
            'both ranks held at step 4', timeout=120)  # fmt: skip
  assert _run(['scancel', '--signal=USR2', job]).returncode == 0
  _wait_for(lambda: _queued(job) == 'PENDING', 'the job requeued', timeout=90)
  _wait_for(lambda: _settled(config, workdir), 'the point finished')
  assert _states(config, workdir) == ['DONE']
  text = open(log).read()
  assert 'preempted at step 12: checkpoint written' in text, text[-3000:]
  assert 'resuming from the checkpoint at step 12' in text and 'Traceback' not in text
  info = json.load(open(os.path.join(point.dir, 'point.json')))
  assert (info['attempt'], info['job_id'], info['cluster']) == (2, job, 'slurm')


def test_mpi_under_slurm_pmix_mpirun_and_pmi2(tmp_path):
  # How the venv's Open MPI meets srun (README, "MPI under srun"): --mpi=pmix with the narrowed
  # offer and mpirun inside the allocation make one world of 2; --mpi=pmi2 makes 2 worlds of 1.
  hello = (f'{sys.executable} -c "from mpi4py import MPI; w = MPI.COMM_WORLD; '
           "print('world', w.rank, w.size, flush=True)\"")  # fmt: skip
  narrowed = 'env PMIX_SECURITY_MODE=native PMIX_GDS_MODULE=hash'
  ways = dict(pmix=f'srun --mpi=pmix {narrowed} {hello}', pmi2=f'srun --mpi=pmi2 {hello}',
              mpirun=f'{MPIRUN} -np $SLURM_NTASKS {hello}')  # fmt: skip
  worlds = {}
  for name, line in ways.items():
    out = tmp_path / f'{name}.out'
    p = _run(['sbatch', '--wait', '-n', '2', f'--output={out}', f'--wrap={line}'], timeout=120)
    assert p.returncode == 0, p.stderr + out.read_text()
    text = out.read_text()
    worlds[name] = sorted(line for line in text.splitlines() if line.startswith('world '))
    if name != 'pmi2':
      assert 'Sorry!' not in text, text
  assert worlds['pmix'] == worlds['mpirun'] == ['world 0 2', 'world 1 2']
  assert worlds['pmi2'] == ['world 0 1', 'world 0 1']

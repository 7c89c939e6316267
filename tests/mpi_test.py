"""The MPI runtime under `mpirun` (subprocesses with timeouts): the same numbers as the one-host
cluster, the threaded communicator equal to its synchronous mode, and every failure ending the
job on every rank instead of hanging.
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from cocod_jax import results_schema
from cocod_jax import schedules
from cocod_jax import train
from tests import train_test

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = train_test.ALGOS
MPIRUN = os.path.join(ROOT, 'launch', 'mpirun.sh')


def _mpirun(np_, args, timeout=240, script=('-m', 'cocod_jax.main')):
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  cmd = [MPIRUN, '-np', str(np_), sys.executable, *script, *args]
  start = time.perf_counter()
  p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
  p.elapsed = time.perf_counter() - start
  return p


def _overrides(c):
  """`--config.x=y` for every field of the test config that the test changed."""
  flat = {
    'dataset.name': c.dataset.name,
    'dataset.path': c.dataset.path,
    'dataset.shuffle': c.dataset.shuffle,
    'algorithm.name': c.algorithm.name,
    'algorithm.period': c.algorithm.period,
    'num_workers': c.num_workers,
    'batch_size': c.batch_size,
    'num_epochs': c.num_epochs,
    'optimizer.learning_rate': c.optimizer.learning_rate,
    'optimizer.lr_scaling': c.optimizer.lr_scaling,
    'optimizer.warmup_epochs': c.optimizer.warmup_epochs,
    'optimizer.decay_epochs': f'({c.optimizer.decay_epochs[0]},)',
    'model.name': c.model.name,
    'worker_speeds': '(' + ''.join(f'{v},' for v in c.worker_speeds) + ')',
    'proportional_sampling': c.proportional_sampling,
    'emulate_speeds': c.emulate_speeds,
  }
  return [f'--config.{k}={v}' for k, v in flat.items()]


def _params(workdir):
  with np.load(os.path.join(workdir, 'final_params.npz')) as f:
    return {k: f[k] for k in f.files}


def _run_mpi(c, workdir, *extra, np_=None):
  args = ['--config=configs/test.py', f'--workdir={workdir}', '--config.backend=mpi']
  p = _mpirun(np_ or c.num_workers, args + _overrides(c) + list(extra))
  assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
  return p


def _linear_config(tmp_path, algorithm, workers):
  # Whole-shard batches (10 examples per worker) in file order: deterministic to the bit.
  path, _, _ = train_test._tiny_npz(tmp_path, n_train=10 * workers)
  return train_test._config(path, algorithm, workers=workers, batch=10, epochs=5, period=2)


# Two ranks of one worker each against the one-host cluster and the float64 reference, for every
# algorithm: tests/ranks_test.py (the 2 x 1 layout, in its one launch with 2 x 2 and 2 x 4).


@pytest.mark.parametrize('algorithm', ALGOS)
def test_mpi_equals_one_host_linear_four_unequal_ranks(tmp_path, algorithm):
  # Speeds (1, 2, 1, 2) with proportional sampling: batches M = (10, 20, 10, 20), each a whole
  # shard, so the MPI ranks must use the weights w_i = M_i / 60 exactly as the one-host cluster.
  path, _, _ = train_test._tiny_npz(tmp_path, n_train=60)
  c = train_test._config(
    path, algorithm, workers=4, batch=10, epochs=5, period=2, speeds=(1.0, 2.0, 1.0, 2.0)
  )
  assert schedules.batch_sizes(c) == [10, 20, 10, 20]
  train.train_and_evaluate(c, str(tmp_path / 'one'))
  _run_mpi(c, tmp_path / 'mpi')
  one, mpi = _params(tmp_path / 'one'), _params(tmp_path / 'mpi')
  for k in one:  # Four summands may be added in another order: float32 rounding only.
    np.testing.assert_allclose(mpi[k], one[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize('algorithm', ALGOS)
def test_mpi_close_to_one_host_cnn(tmp_path, algorithm):
  c = train_test.test_config.get_config()
  c.algorithm.name = algorithm
  c.model.name = 'cnn'
  c.batch_size = 25
  c.num_epochs = 1
  c.optimizer.learning_rate = 0.05
  train.train_and_evaluate(c, str(tmp_path / 'one'))
  _run_mpi(c, tmp_path / 'mpi')
  one, mpi = _params(tmp_path / 'one'), _params(tmp_path / 'mpi')
  assert any(k.startswith('batch_stats/') for k in one)
  for k in one:
    np.testing.assert_allclose(mpi[k], one[k], rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.parametrize('staging', ['host', 'device'])
def test_threaded_equals_synchronous(tmp_path, staging):
  c = _linear_config(tmp_path, 'cocod_sgd', workers=2)
  c.dataset.shuffle = True
  c.batch_size = 4
  _run_mpi(c, tmp_path / 'sync', '--config.comm.threaded=False')
  p = _run_mpi(c, tmp_path / 'thread', f'--config.comm.staging={staging}')
  sync, thread = _params(tmp_path / 'sync'), _params(tmp_path / 'thread')
  for k in sync:
    np.testing.assert_array_equal(thread[k], sync[k], err_msg=k)
  assert 'communication hidden' in p.stdout


def test_snapshot_survives_donation():
  # tests/mpi_snapshot.py holds the thread back until the tree given to `start` has been donated
  # and overwritten; the average is still that of the values at the call, for every staging, with
  # one worker per rank and two per rank on two devices; an Inf is named by its global worker.
  p = _mpirun(2, [], timeout=120, script=('tests/mpi_snapshot.py',))
  assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
  for staging in ('host', 'device'):
    for width in (1, 2):
      for rank in (0, 1):
        assert f'rank {rank}: {staging}: {width} per rank: ok' in p.stdout, p.stdout


def test_timeline_and_timing(tmp_path):
  c = _linear_config(tmp_path, 'cocod_sgd', workers=2)
  c.batch_size = 2
  _run_mpi(c, tmp_path / 'run')
  res = results_schema.load_results(str(tmp_path / 'run' / 'results.json'))
  assert res['backend'] == 'mpi'
  tm = res['timing']
  assert len(tm['ranks']) == 2 and tm['from_epoch'] == 2 and tm['steps'] == 4 * 5
  assert tm['Tp_s'] > 0 and tm['Tc_s'] > 0 and 0 <= tm['hidden_fraction'] <= 1
  assert 0 <= tm['drain_s'] <= tm['exposed_comm_s']
  # 20 measured steps in rounds of 2: 10 snapshot averages per rank.
  assert all(r['collectives'] == 10 for r in tm['ranks'])
  for rank in (0, 1):
    trace = json.loads((tmp_path / 'run' / f'timeline_rank{rank}.json').read_text())
    names = {(e['name'], e.get('tid')) for e in trace['traceEvents'] if e['ph'] == 'X'}
    assert {('step', 0), ('snapshot', 0), ('correct', 0), ('wait', 0), ('allreduce', 1)} <= names


def test_world_size_must_match_num_workers(tmp_path):
  p = _mpirun(2, ['--config=configs/test.py', f'--workdir={tmp_path}', '--config.backend=mpi',
                  '--config.num_workers=3'])  # fmt: skip
  assert p.returncode != 0
  assert p.stderr.count('num_workers=3') == 2, p.stderr  # Refused on both ranks.
  assert not os.listdir(tmp_path)


def test_config_mismatch_refused_on_every_rank(tmp_path):
  base = [sys.executable, '-m', 'cocod_jax.main', '--config=configs/test.py',
          f'--workdir={tmp_path}', '--config.backend=mpi']  # fmt: skip
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  cmd = [MPIRUN, '-np', '1', *base, '--config.seed=0', ':', '-np', '1', *base, '--config.seed=1']
  p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
  assert p.returncode != 0
  for rank in (0, 1):
    assert f'error: rank {rank}: the ranks were given different configs' in p.stderr, p.stderr
  assert 'rank 0 has config hash' in p.stderr and 'rank 1 has' in p.stderr
  assert not os.path.exists(tmp_path / 'results.json')


def _fault(tmp_path, fault, *extra, timeout=120):
  args = [f'--fault={fault}', '--config=configs/test.py', f'--workdir={tmp_path}',
          '--config.backend=mpi', '--config.num_epochs=3', *extra]  # fmt: skip
  return _mpirun(2, args, timeout=timeout, script=('tests/faults.py',))


def test_parameter_shape_mismatch_refused_on_every_rank(tmp_path):
  p = _fault(tmp_path, 'shape')
  assert p.returncode != 0
  for rank in (0, 1):
    assert f'error: rank {rank}: the ranks built different parameters' in p.stderr, p.stderr
  assert '(64, 10)' in p.stderr and '(64, 11)' in p.stderr  # Both values are shown.


def test_failure_in_thread_ends_the_job(tmp_path):
  p = _fault(tmp_path, 'raise_in_thread', '--fault_rank=0')
  assert p.returncode != 0
  assert 'error: rank 0: the allreduce of' in p.stderr, p.stderr
  assert 'injected failure in the allreduce thread' in p.stderr
  assert p.elapsed < 60
  assert not os.path.exists(tmp_path / 'results.json')


def test_stalled_collective_times_out(tmp_path):
  p = _fault(tmp_path, 'stall', '--config.comm.timeout_s=3')
  assert p.returncode != 0
  assert 'has not finished after' in p.stderr and 'comm.timeout_s=3' in p.stderr, p.stderr
  assert 'the round of steps' in p.stderr or 'the gradients of step' in p.stderr, p.stderr
  assert p.elapsed < 60


def test_killed_rank_ends_the_job(tmp_path):
  p = _fault(tmp_path, 'kill_rank', '--config.comm.timeout_s=20')
  assert p.returncode != 0
  assert p.elapsed < 60
  assert not os.path.exists(tmp_path / 'results.json')


def test_divergence_stops_every_rank(tmp_path):
  # As tests/train_test.py's divergence test, on 2 ranks: rank 1's shard overflows; the flag in
  # the allreduce tells every rank, before any takes the average in; all exit 3 with one line.
  path, x, y = train_test._tiny_npz(tmp_path, n_train=40)
  x = x.copy()
  x[20:40] *= 1e30
  np.savez(path, x_train=x, y_train=y, x_test=x[:5], y_test=y[:5])
  c = train_test._config(path, 'local_sgd', workers=2, batch=5, epochs=3, period=3)
  args = ['--config=configs/test.py', f'--workdir={tmp_path / "run"}', '--config.backend=mpi']
  p = _mpirun(2, args + _overrides(c))
  assert p.returncode == 3, p.stderr[-3000:]
  for rank in (0, 1):
    assert f'error: rank {rank}: training diverged: worker(s) [1]' in p.stderr, p.stderr
  assert 'Traceback' not in p.stderr
  res = json.loads((tmp_path / 'run' / 'results.json').read_text())
  assert res['status'] == 'diverged' and res['diverged']['workers'] == [1]
  assert res['diverged']['step'] == 2


def test_emulated_speeds_change_time_not_numbers(tmp_path):
  # Rank 0 at half speed waits after each local step; the model it ends with is the same.
  path, _, _ = train_test._tiny_npz(tmp_path, n_train=30)
  c = train_test._config(path, 'asynlocal_sgd', 2, 5, 3, 2, speeds=(1.0, 2.0), ps=False)
  c.dataset.shuffle = True
  _run_mpi(c, tmp_path / 'plain')
  c.emulate_speeds = True
  p = _run_mpi(c, tmp_path / 'slowed')
  plain, slowed = _params(tmp_path / 'plain'), _params(tmp_path / 'slowed')
  for k in plain:
    np.testing.assert_array_equal(slowed[k], plain[k], err_msg=k)
  res = json.loads((tmp_path / 'slowed' / 'results.json').read_text())
  assert res['config']['emulate_speeds'] and [w['local_steps'] for w in res['workers']] == [2, 4]
  assert 'communication hidden' in p.stdout


# Checkpoints under MPI: 2 ranks, CoCoD-SGD (a snapshot average in flight at most boundaries),
# 15 steps an epoch, rounds of 3, a checkpoint after every epoch; the final model of a run that
# was stopped and run again must equal the uninterrupted one bit for bit.
CKPT = ['--config=configs/test.py', '--config.backend=mpi', '--config.num_epochs=4',
        '--config.checkpoint.every_epochs=1', '--config.comm.timeout_s=20']  # fmt: skip


@pytest.fixture(scope='module')
def straight_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('straight')
  p = _mpirun(2, CKPT + [f'--workdir={workdir}'])
  assert p.returncode == 0, p.stderr[-3000:]
  return _params(workdir)


def _stopped_then_resumed(tmp_path, fault, step, expect_rc):
  workdir = tmp_path / 'run'
  args = [f'--fault={fault}', f'--fault_step={step}', f'--workdir={workdir}', *CKPT]
  p = _mpirun(2, args, timeout=120, script=('tests/faults.py',))
  assert p.returncode == expect_rc if expect_rc else p.returncode != 0, p.stderr[-3000:]
  assert p.elapsed < 60 and not (workdir / 'results.json').exists()
  again = _mpirun(2, CKPT + [f'--workdir={workdir}'])
  assert again.returncode == 0, again.stderr[-3000:]
  return p, again, _params(workdir)


def _assert_same(resumed, straight):
  assert resumed.keys() == straight.keys()
  for k in straight:
    np.testing.assert_array_equal(resumed[k], straight[k], err_msg=k)


def test_sigterm_on_one_rank_checkpoints_all_and_resumes_exactly(tmp_path, straight_run):
  # Rank 1 gets SIGTERM at step 20; the ranks agree at the end of the round 24-26 (at least 10
  # steps after the poll of the epoch end at 15), write a checkpoint at 27 and exit 75.
  p, again, resumed = _stopped_then_resumed(tmp_path, 'sigterm_at_step', 20, 75)
  assert p.stdout.count('preempted at step 27: checkpoint written') == 2, p.stdout
  assert 'resuming from the checkpoint at step 27 (epoch 2)' in again.stdout
  _assert_same(resumed, straight_run)


def test_killed_rank_then_rerun_resumes_exactly(tmp_path, straight_run):
  # SIGKILL on rank 1 at step 40: the job ends; the rerun starts from the checkpoint at 30.
  _, again, resumed = _stopped_then_resumed(tmp_path, 'kill_at_step', 40, None)
  assert 'resuming from the checkpoint at step 30 (epoch 3)' in again.stdout
  _assert_same(resumed, straight_run)


def test_kill_while_writing_a_checkpoint_is_ignored(tmp_path, straight_run):
  # Rank 1 dies after writing its part of the checkpoint at 30, before the commit.
  _, again, resumed = _stopped_then_resumed(tmp_path, 'kill_in_checkpoint', 30, None)
  assert 'skipping the incomplete checkpoint at step 30' in again.stdout
  assert 'resuming from the checkpoint at step 15 (epoch 2)' in again.stdout
  _assert_same(resumed, straight_run)


def test_checkpoint_of_another_world_size_is_refused(tmp_path):
  # A one-host run of 2 workers leaves a checkpoint of 1 process; 2 MPI ranks refuse it.
  one = train_test.test_config.get_config()
  one.checkpoint.every_epochs = 1
  train.train_and_evaluate(one, str(tmp_path))
  p = _mpirun(2, ['--config=configs/test.py', '--config.backend=mpi', f'--workdir={tmp_path}'])
  assert p.returncode == 2, p.stderr[-3000:]
  assert 'written by 1 processes (MPI ranks) and this run has 2' in p.stderr

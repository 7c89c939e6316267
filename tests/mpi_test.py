"""The MPI runtime under `mpirun` (subprocesses limited by their silence and ended whole:
tests/mpi_helpers.py): the same numbers as the one-host cluster, the threaded communicator equal
to its synchronous mode, and every failure ending the job on every rank instead of hanging.
"""

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

import numpy as np
import pytest

from cocod_jax import algorithms
from cocod_jax import shares
from cocod_jax import train
from cocod_jax.algorithms import base as algorithms_base
from cocod_jax.data import pipeline as input_pipeline
from cocod_jax.record import checkpoints
from cocod_jax.record import schema as results_schema
from cocod_jax.record import workdir as workdir_lib
from tests import helpers
from tests import mpi_helpers

pytestmark = pytest.mark.mpi  # Every test here launches mpirun.

ROOT, MPIRUN = mpi_helpers.ROOT, mpi_helpers.MPIRUN
ALGOS = helpers.ALGOS


def _mpirun(np_, args, silent_s=240, script=('-m', 'cocod_jax.main')):
  """`np_` ranks of `python SCRIPT ARGS` (the entry point by default) under launch/mpirun.sh, ended
  whole after `silent_s` seconds without a line of output (`mpi_helpers.mpirun`)."""
  return mpi_helpers.mpirun('-np', str(np_), sys.executable, *script, *args, silent_s=silent_s)


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
  if not issubclass(algorithms.ALGORITHMS[c.algorithm.name], algorithms_base.RoundAlgorithm):
    del flat['algorithm.period']  # Read by no algorithm that averages every step: main refuses it.
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
  path, _, _ = helpers.tiny_npz(tmp_path, n_train=10 * workers)
  return helpers.small_config(path, algorithm, workers=workers, batch=10, epochs=5, period=2)


# Two ranks of one worker each against the one-host cluster and the float64 reference, for every
# algorithm: tests/ranks_test.py (the 2 x 1 layout, in its one launch with 2 x 2 and 2 x 4).


@pytest.mark.parametrize('algorithm', ALGOS)
def test_mpi_equals_one_host_linear_four_unequal_ranks(tmp_path, algorithm):
  # Speeds (1, 2, 1, 2) with proportional sampling: batches M = (10, 20, 10, 20), each a whole
  # shard, so the MPI ranks must use the weights w_i = M_i / 60 exactly as the one-host cluster.
  path, _, _ = helpers.tiny_npz(tmp_path, n_train=60)
  c = helpers.small_config(
    path, algorithm, workers=4, batch=10, epochs=5, period=2, speeds=(1.0, 2.0, 1.0, 2.0)
  )
  assert shares.batch_sizes(c) == [10, 20, 10, 20]
  train.train_and_evaluate(c, str(tmp_path / 'one'))
  _run_mpi(c, tmp_path / 'mpi')
  one, mpi = _params(tmp_path / 'one'), _params(tmp_path / 'mpi')
  for k in one:  # Four summands may be added in another order: float32 rounding only.
    np.testing.assert_allclose(mpi[k], one[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize('algorithm', ALGOS)
def test_mpi_close_to_one_host_cnn(tmp_path, algorithm):
  c = helpers.test_config.get_config()
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
  p = _mpirun(2, [], silent_s=120, script=('tests/mpi_snapshot.py',))
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
  # Every epoch-end wait is in drain_s; in the exposed time only those of sampled rounds (below).
  assert tm['drain_s'] >= 0
  # 20 measured steps in rounds of 2: 10 snapshot averages per rank.
  assert all(r['collectives'] == 10 for r in tm['ranks'])
  # Every figure worked out again from the Chrome traces (the spans of epochs >= 2): a summary
  # that took the wrong spans, or a hidden fraction clipped into [0, 1] from a wrong ratio, fails.
  durations = []
  for rank, figures in enumerate(tm['ranks']):
    trace = json.loads((tmp_path / 'run' / f'timeline_rank{rank}.json').read_text())
    spans = [e for e in trace['traceEvents'] if e['ph'] == 'X']
    names = {(e['name'], e.get('tid')) for e in spans}
    assert {('step', 0), ('snapshot', 0), ('correct', 0), ('wait', 0), ('allreduce', 1)} <= names
    measured = [e for e in spans if e['args']['epoch'] >= 2]
    sampled = [e for e in measured if e['args']['sampled']]
    total = lambda es, cat: sum(e['dur'] for e in es if e['cat'] == cat) / 1e6
    comm = [e['dur'] / 1e6 for e in measured if e['cat'] == 'allreduce']
    durations.append(comm)
    # Both parts of an average count: the allreduce and the local mean (one worker per rank
    # here: its weighting); a background one's local mean is exposed, outside any wait span.
    local = [e for e in sampled if e['cat'] == 'local']
    assert local and all(e['tid'] == 2 and not e['args']['in_wait'] for e in local)
    np.testing.assert_allclose(
      figures['comm_s'], total(sampled, 'allreduce') + total(local, 'local'), rtol=1e-6
    )
    np.testing.assert_allclose(
      figures['exposed_comm_s'], total(sampled, 'wait') + total(local, 'local'), rtol=1e-6
    )
    np.testing.assert_allclose(figures['Tc_s'], np.mean(comm), rtol=1e-6)
    timed = [e for e in sampled if e['cat'] == 'step']
    assert timed and figures['sampled_steps'] == len(timed)
    np.testing.assert_allclose(figures['Tp_s'], total(timed, 'step') / len(timed), rtol=1e-6)
  exposed = sum(r['exposed_comm_s'] for r in tm['ranks'])
  comm_s = sum(r['comm_s'] for r in tm['ranks'])
  np.testing.assert_allclose(tm['hidden_fraction'], max(0.0, 1 - exposed / comm_s), rtol=1e-6)
  # Tc: per collective the shorter of the two ranks' spans (the other waited inside it).
  np.testing.assert_allclose(tm['Tc_s'], np.mean(np.minimum(*durations)), rtol=1e-6)
  assert tm['Tc_s'] <= tm['Tc_with_wait_s']


def test_world_size_must_match_num_workers(tmp_path):
  p = _mpirun(2, ['--config=configs/test.py', f'--workdir={tmp_path}', '--config.backend=mpi',
                  '--config.num_workers=3'])  # fmt: skip
  assert p.returncode != 0
  assert p.stderr.count('num_workers=3') == 2, p.stderr  # Refused on both ranks.
  assert not os.listdir(tmp_path)


def test_config_mismatch_refused_on_every_rank(tmp_path):
  base = [sys.executable, '-m', 'cocod_jax.main', '--config=configs/test.py',
          f'--workdir={tmp_path}', '--config.backend=mpi']  # fmt: skip
  p = mpi_helpers.mpirun('-np', '1', *base, '--config.seed=0', ':', '-np', '1', *base,
                         '--config.seed=1', silent_s=120)  # fmt: skip
  assert p.returncode != 0
  for rank in (0, 1):
    assert f'error: rank {rank}: the ranks were given different configs' in p.stderr, p.stderr
  assert 'rank 0 has config hash' in p.stderr and 'rank 1 has' in p.stderr
  assert not os.path.exists(tmp_path / 'results.json')


def _fault(tmp_path, fault, *extra, silent_s=120):
  args = [f'--fault={fault}', '--config=configs/test.py', f'--workdir={tmp_path}',
          '--config.backend=mpi', '--config.num_epochs=3', *extra]  # fmt: skip
  return _mpirun(2, args, silent_s=silent_s, script=('tests/faults.py',))


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
  path, x, y = helpers.tiny_npz(tmp_path, n_train=40)
  x = x.copy()
  x[20:40] *= 1e30
  np.savez(path, x_train=x, y_train=y, x_test=x[:5], y_test=y[:5])
  c = helpers.small_config(path, 'local_sgd', workers=2, batch=5, epochs=3, period=3)
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
  path, _, _ = helpers.tiny_npz(tmp_path, n_train=30)
  c = helpers.small_config(path, 'asynlocal_sgd', 2, 5, 3, 2, speeds=(1.0, 2.0), ps=False)
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
def straight_workdir(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('straight')
  p = _mpirun(2, CKPT + [f'--workdir={workdir}'])
  assert p.returncode == 0, p.stderr[-3000:]
  return workdir


@pytest.fixture(scope='module')
def straight_run(straight_workdir):
  return _params(straight_workdir)


def _stopped_then_resumed(tmp_path, fault, step, expect_rc):
  workdir = tmp_path / 'run'
  args = [f'--fault={fault}', f'--fault_step={step}', f'--workdir={workdir}', *CKPT]
  p = _mpirun(2, args, silent_s=120, script=('tests/faults.py',))
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


def test_workdir_of_another_runtime_is_refused(tmp_path):
  # A one-host run of 2 workers leaves its fingerprint and a checkpoint of 1 process; 2 MPI ranks
  # refuse the workdir, naming the field that differs (the checkpoint's world size would be
  # refused next: workdir_test.test_checkpoint_of_another_world_size_is_refused).
  one = helpers.test_config.get_config()
  one.checkpoint.every_epochs = 1
  train.train_and_evaluate(one, str(tmp_path))
  p = _mpirun(2, ['--config=configs/test.py', '--config.backend=mpi', f'--workdir={tmp_path}'])
  assert p.returncode == 2, p.stderr[-3000:]
  for rank in (0, 1):
    assert (
      f'error: rank {rank}: {tmp_path} holds a run of another config or data (config '
      "backend: 'one_host' -> 'mpi')" in p.stderr
    ), p.stderr[-3000:]


def test_sigterm_while_an_allreduce_is_in_flight_resumes_exactly(tmp_path, straight_run):
  # Rank 1 signals itself from inside its 8th background collective (the snapshot average of
  # the round 21-23), which then takes a second more: the main thread steps on with the average
  # in flight; the ranks agree at the next poll, the checkpoint drains and saves it.
  p, again, resumed = _stopped_then_resumed(tmp_path, 'sigterm_in_allreduce', 8, 75)
  assert (
    'fault: SIGTERM inside the allreduce of the snapshot at the start of the round of '
    'steps 21-23' in p.stdout
  ), p.stdout
  assert p.stdout.count('preempted at step 27: checkpoint written') == 2, p.stdout
  assert 'resuming from the checkpoint at step 27 (epoch 2)' in again.stdout
  assert again.stdout.count('epoch   2/4') == 1 and 'epoch   1/4' not in again.stdout
  _assert_same(resumed, straight_run)


def test_unreadable_part_on_one_rank_falls_back_on_all(tmp_path, straight_workdir, straight_run):
  # The newest checkpoint (step 60) has rank 1's part truncated: rank 0 reads its own part, rank
  # 1 cannot; both skip it, naming rank 1, and resume from step 45, ending equal.
  workdir = tmp_path / 'run'
  shutil.copytree(straight_workdir, workdir)
  (workdir / 'results.json').unlink()  # Stopped after its last checkpoint: a rerun resumes.
  part = workdir / 'checkpoints' / '0000000060' / 'rank_1'
  biggest = max((f for f in part.rglob('*') if f.is_file()), key=lambda f: f.stat().st_size)
  with open(biggest, 'r+b') as f:
    f.truncate(1)
  again = _mpirun(2, CKPT + [f'--workdir={workdir}'])
  assert again.returncode == 0, again.stderr[-3000:]
  assert 'skipping the unreadable checkpoint at step 60' in again.stdout, again.stdout
  assert '(rank 1: ' in again.stdout
  assert 'resuming from the checkpoint at step 45 (epoch 4)' in again.stdout
  _assert_same(_params(workdir), straight_run)


def test_held_workdir_refused_on_every_rank(tmp_path):
  # This process holds the workdir (a run in progress); rank 0 finds the lock taken and every
  # rank refuses with the same line, exit 2, nothing started.
  c = helpers.test_config.get_config()
  with workdir_lib.claim(str(tmp_path), c, input_pipeline.load(c.dataset, c.data_dir)):
    p = _mpirun(2, CKPT + [f'--workdir={tmp_path}'])
  assert p.returncode == 2, p.stderr[-3000:]
  for rank in (0, 1):
    assert f'error: rank {rank}: {tmp_path} is in use by another run (pid {os.getpid()}' in p.stderr
  assert not (tmp_path / 'metrics.jsonl').exists()


def test_one_host_run_under_mpirun_refused(tmp_path):
  # `mpirun -np 2` without backend=mpi would start two one-host runs in one workdir.
  p = _mpirun(2, ['--config=configs/test.py', f'--workdir={tmp_path / "run"}'])
  assert p.returncode != 0
  # Every rank refuses; mpirun ends the job when the first exits, so the other may be gone
  # before it prints (seen once in a fresh-clone CI run): at least one line, each the same.
  said = [line for line in p.stderr.splitlines() if line.startswith('error: ')]
  assert 1 <= len(said) <= 2 and len(set(said)) == 1, p.stderr[-3000:]
  assert said[0].startswith("error: backend='one_host' is invalid inside an MPI job of 2")
  assert 'OMPI_COMM_WORLD_SIZE=2' in p.stderr and 'Traceback' not in p.stderr
  assert not (tmp_path / 'run').exists()


def test_ctrl_c_on_mpirun_checkpoints_and_says_so(tmp_path):
  # Ctrl-C at a terminal: SIGINT to mpirun.sh's process group (stdin a terminal). Every rank
  # checkpoints, prints the line, and the job exits 75. A terminal's foreground job has SIGINT at
  # its default action; a suite started in the background of a shell has it ignored, which exec
  # keeps and bash then cannot trap, so mpirun.sh starts through `exec` with the default restored.
  workdir = tmp_path / 'run'
  env = mpi_helpers.env()
  args = ['--fault=pause_at_step', '--fault_step=20', f'--workdir={workdir}', *CKPT]
  default_sigint = 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); '
  default_sigint += 'os.execv(sys.argv[1], sys.argv[1:])'
  cmd = [sys.executable, '-c', default_sigint, MPIRUN, '-np', '2', sys.executable,
         'tests/faults.py', *args]  # fmt: skip
  terminal, tty = os.openpty()
  try:
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=tty, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while not (workdir / 'paused').exists() and p.poll() is None and time.monotonic() < deadline:
      time.sleep(0.1)
    os.killpg(p.pid, signal.SIGINT)
    try:
      out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # Not ended by Ctrl-C: end it whole, ranks included.
      mpi_helpers.end(p, group=True)
      raise
  finally:
    os.close(terminal)
    os.close(tty)
  assert p.returncode == 75, err[-3000:]
  assert 'Ctrl-C: every rank finishes its round, writes a checkpoint and exits 75' in err
  assert out.count('preempted at step ') == 2 and 'run the same command again' in out, out
  assert 'Traceback' not in err


def test_mpi_variants_match_reference(tmp_path):
  # As train_test.test_variants_match_reference on 3 ranks, in one launch, the richest case:
  # CoCoD-SGD with the period warm-up, BatchNorm statistics kept per worker and averaged momentum;
  # every rank's state at the end and the final model.
  algorithm, variant = 'cocod_sgd', 'bn_local'
  options = helpers.VARIANTS[variant]
  path, x, y = helpers.tiny_npz(tmp_path)
  c = helpers.variant_config(path, algorithm, **options)
  a = c.algorithm
  _run_mpi(c, tmp_path / 'mpi', f'--config.algorithm.warmup_period_epochs={a.warmup_period_epochs}',
           f'--config.algorithm.average_batch_stats={a.average_batch_stats}',
           f'--config.algorithm.average_momentum={a.average_momentum}',
           '--config.checkpoint.every_epochs=4')  # fmt: skip
  workers = []
  expected = helpers.variant_reference(x, y, algorithm, workers_out=workers, **options)
  _assert_ranks_match(tmp_path / 'mpi', workers, expected)


def _assert_ranks_match(workdir, workers, expected):
  """The final model, and each of 3 ranks' state in its checkpoint at step 8 (parameters,
  momentum, BatchNorm statistics), against the reference's `expected` and `workers`."""
  with np.load(workdir / 'final_params.npz') as f:
    names = ['params/Dense_0/kernel', 'params/Dense_0/bias']
    final = [f[n] for n in names + ['batch_stats/BatchNorm_0/mean', 'batch_stats/BatchNorm_0/var']]
  for rank in range(3):
    state = checkpoints.Checkpointer(str(workdir), rank, 3, None, 1).restore(8)[0]['state']
    # A rank's checkpoint holds its W workers on a leading axis (here W = 1).
    got = [state['params']['Dense_0'][k][0] for k in ('kernel', 'bias')]
    got += [state['momentum']['Dense_0'][k][0] for k in ('kernel', 'bias')]
    got += [state['batch_stats']['BatchNorm_0'][k][0] for k in ('mean', 'var')]
    for g, e in zip(got, workers[rank]):
      np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6, err_msg=f'rank {rank}')
  for g, e in zip(final, expected):
    np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6)


def test_mpi_outer_sgd_matches_reference(tmp_path):
  # A correction whose state outlives its round (the anchor, the outer Nesterov momentum), on 3
  # ranks: every rank's state at the end and the final model against the float64 reference.
  options = helpers.CORRECTIONS['outer_sgd']
  path, x, y = helpers.tiny_npz(tmp_path)
  c = helpers.correction_config(path, **options)
  a = c.algorithm
  _run_mpi(c, tmp_path / 'mpi', f'--config.algorithm.warmup_period_epochs={a.warmup_period_epochs}',
           f'--config.algorithm.correction={a.correction}',
           f'--config.algorithm.outer_lr={a.outer_lr}',
           f'--config.algorithm.outer_momentum={a.outer_momentum}',
           '--config.checkpoint.every_epochs=4')  # fmt: skip
  workers = []
  expected = helpers.variant_reference(
    x, y, 'cocod_sgd', workers_out=workers, **helpers.VARIANTS['bn_averaged'], **options
  )
  _assert_ranks_match(tmp_path / 'mpi', workers, expected)


def test_resumed_run_is_timed_like_an_uninterrupted_one(tmp_path):
  # CoCoD-SGD on 2 ranks, 5 epochs straight, and 3 epochs then continued to 5 from the
  # checkpoint at the end of epoch 3: the restart compiles every function again, which is left
  # out of the training time and of the timing figures (reported apart), so the continued
  # epoch 4 takes about what the others take (before: several times as long, the compilation
  # counted as training) and Tp, Tc and the step time stay those of the uninterrupted run.
  # Bounds of 3x, and 0.5 s for epoch 4: what JAX's compilation events do not cover (the
  # Python work of a function's first call between them, measured at 0.1-0.35 s here with the
  # machine loaded), far below the compilation's share (3.1 s of epoch 4's 3.1 s before).
  base = ['--config=configs/test.py', '--config.backend=mpi', '--config.num_workers=2',
          '--config.checkpoint.every_epochs=1', '--config.timeline.sample_every=1']  # fmt: skip
  straight = _mpirun(2, base + [f'--workdir={tmp_path / "straight"}', '--config.num_epochs=5'])
  assert straight.returncode == 0, straight.stdout[-2000:] + straight.stderr[-3000:]
  wd = tmp_path / 'resumed'
  for epochs in (3, 5):
    p = _mpirun(2, base + [f'--workdir={wd}', f'--config.num_epochs={epochs}'])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
  assert 'resuming from the checkpoint' in p.stdout
  runs = [results_schema.load_results(str(d / 'results.json')) for d in (tmp_path / 'straight', wd)]
  epoch_s = []
  for res in runs:
    times = [0.0] + [e['train_time_s'] for e in res['epochs']]
    epoch_s.append([b - a for a, b in zip(times, times[1:])])
  typical = statistics.median(epoch_s[0][1:])  # The straight run's epochs after the first.
  assert epoch_s[1][3] < 3 * typical + 0.5, (epoch_s, runs[1].get('restart_compile_s'))
  assert runs[1]['restart_compile_s'] > 0 and 'restart_compile_s' not in runs[0]
  for key in ('Tp_s', 'Tc_s', 'step_time_s'):
    a, b = runs[0]['timing'][key], runs[1]['timing'][key]
    assert b < 3 * a and a < 3 * b, (key, a, b)

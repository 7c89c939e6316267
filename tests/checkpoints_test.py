"""Checkpoints on the one-host cluster: a run stopped by SIGTERM anywhere resumes bit for bit.

Each case runs the same config twice: once straight through, once with SIGTERM sent to this
process at a chosen step, which makes the loop write a checkpoint at the next step boundary and
raise Preempted; a second call with the same workdir resumes and finishes. The final models must
be equal to the bit, and so must the per-epoch metrics (training time aside). The MPI runtime and
crashes (SIGKILL) are in tests/mpi_test.py and tests/main_test.py.

Interruption points, as the step boundary where the checkpoint is written (4 steps an epoch,
period 1 in epoch 1, then 3: rounds 4-6, 7-9, 10-11):
- `warmup_end`: boundary 4, the end of epoch 1 and of the period warm-up;
- `mid_epoch`: boundary 5, inside epoch 2 (for CoCoD-SGD and Local-SGD also inside a round);
- `mid_round`: boundary 9, inside the round 7-9 that started in epoch 2 and ends in epoch 3.
"""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from cocod_jax import algorithms
from cocod_jax import train
from cocod_jax.config import errors
from cocod_jax.record import checkpoints
from cocod_jax.record import workdir
from tests import helpers

# It trains and interrupts runs: left out of make test-fast.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = helpers.ALGOS + ('asynlocal_sgd',)
POINTS = {'warmup_end': 4, 'mid_epoch': 5, 'mid_round': 9}


def _config(tmp_path, algorithm):
  path, _, _ = helpers.tiny_npz(tmp_path, n_train=60)
  speeds = (1.0, 2.0, 1.0) if algorithm == 'asynlocal_sgd' else ()
  c = helpers.small_config(path, algorithm, 3, 5, 3, 3, speeds=speeds, ps=False)
  c.dataset.shuffle = True
  c.algorithm.warmup_period_epochs = 1
  c.checkpoint.every_epochs = 0  # Only the SIGTERM's checkpoint.
  helpers.lr_warmup(c)
  return c


def _sigterm_at(monkeypatch, boundary):
  """Sends SIGTERM to this process during the step that ends at `boundary`."""
  for cls in algorithms.ALGORITHMS.values():
    step = cls.step

    def step_then_signal(self, state, data, t, _step=step):
      if t + 1 == boundary:
        os.kill(os.getpid(), signal.SIGTERM)
      return _step(self, state, data, t)

    monkeypatch.setattr(cls, 'step', step_then_signal)


def _finals(workdir):
  with np.load(os.path.join(workdir, 'final_params.npz')) as f:
    params = {k: f[k] for k in f.files}
  with open(os.path.join(workdir, 'results.json')) as f:
    epochs = json.load(f)['epochs']
  return params, [{k: v for k, v in e.items() if k != 'train_time_s'} for e in epochs]


def _count_steps(monkeypatch):
  """Records every global step `t` that an algorithm computes (in a list it returns)."""
  seen = []
  for cls in algorithms.ALGORITHMS.values():

    def counted(self, state, data, t, _step=cls.step):
      seen.append(t)
      return _step(self, state, data, t)

    monkeypatch.setattr(cls, 'step', counted)
  return seen


@pytest.mark.parametrize('point', sorted(POINTS))
@pytest.mark.parametrize('algorithm', ALGOS)
def test_resume_after_sigterm_is_exact(tmp_path, monkeypatch, capsys, algorithm, point):
  c = _config(tmp_path, algorithm)
  train.train_and_evaluate(c, str(tmp_path / 'straight'))
  boundary = POINTS[point]
  with monkeypatch.context() as m:
    _sigterm_at(m, boundary)
    with pytest.raises(checkpoints.Preempted, match=f'step {boundary}'):
      train.train_and_evaluate(c, str(tmp_path / 'stopped'))
  assert not (tmp_path / 'stopped' / 'results.json').exists()
  capsys.readouterr()
  with monkeypatch.context() as m:
    seen = _count_steps(m)
    train.train_and_evaluate(c, str(tmp_path / 'stopped'))
  # It continued where it stopped: no step before the boundary computed again (4 steps an
  # epoch; 3 for AsynLocal-SGD, whose epochs count the slowest worker's steps).
  spe = json.loads((tmp_path / 'straight' / 'results.json').read_text())['steps_per_epoch']
  assert f'resuming from the checkpoint at step {boundary} (epoch {boundary // spe + 1})' in (
    capsys.readouterr().out
  )
  assert seen == list(range(boundary, 3 * spe))
  (straight, straight_epochs), (resumed, resumed_epochs) = (
    _finals(tmp_path / 'straight'),
    _finals(tmp_path / 'stopped'),
  )
  assert straight.keys() == resumed.keys()
  for k in straight:
    np.testing.assert_array_equal(resumed[k], straight[k], err_msg=k)
  assert resumed_epochs == straight_epochs


# CoCoD-SGD's options. The delays put the stop at step 9 of the round 7-9 before the snapshot
# (tau = 1: none in flight) and after it (tau = 2).
OPTIONS = {
  'blend': {'correction': 'blend', 'alpha': 0.5},
  'outer_sgd': {'correction': 'outer_sgd'},
  'eager': {'correction': 'eager', 'eager_lambda': 0.25, 'eager_gamma': 1.0},
  'anchor': {'correction': 'anchor', 'anchor_pull': 0.5, 'anchor_momentum': 0.7},
  'delay_1': {'delay': 1},
  'delay_2': {'delay': 2},
}


@pytest.mark.parametrize('point', ['warmup_end', 'mid_round'])
@pytest.mark.parametrize('option', sorted(OPTIONS))
def test_corrections_resume_exactly(tmp_path, monkeypatch, option, point):
  # Their state outlives a round: at `warmup_end` the state the next round sends (for outer_sgd
  # the anchor and the outer momentum, for eager C and E, for anchor the velocity), at
  # `mid_round` also the round's origin, anchor or snapshot.
  c = _config(tmp_path, 'cocod_sgd')
  c.algorithm.update(OPTIONS[option])
  train.train_and_evaluate(c, str(tmp_path / 'straight'))
  with monkeypatch.context() as m:
    _sigterm_at(m, POINTS[point])
    with pytest.raises(checkpoints.Preempted):
      train.train_and_evaluate(c, str(tmp_path / 'stopped'))
  train.train_and_evaluate(c, str(tmp_path / 'stopped'))
  straight, resumed = _finals(tmp_path / 'straight'), _finals(tmp_path / 'stopped')
  for k in straight[0]:
    np.testing.assert_array_equal(resumed[0][k], straight[0][k], err_msg=k)
  assert resumed[1] == straight[1]


def test_cnn_with_batchnorm_resumes_exactly(tmp_path, monkeypatch):
  # BatchNorm statistics and a shuffled, augmentation-free CNN on digits, CoCoD-SGD mid-round.
  c = helpers.test_config.get_config()
  c.model.name = 'cnn'
  c.num_epochs = 2
  c.batch_size = 25
  c.algorithm.period = 4
  c.checkpoint.every_epochs = 0
  train.train_and_evaluate(c, str(tmp_path / 'straight'))
  with monkeypatch.context() as m:
    _sigterm_at(m, 33)  # 30 steps an epoch: inside the round 32-35 of epoch 2.
    with pytest.raises(checkpoints.Preempted):
      train.train_and_evaluate(c, str(tmp_path / 'stopped'))
  train.train_and_evaluate(c, str(tmp_path / 'stopped'))
  straight, resumed = _finals(tmp_path / 'straight')[0], _finals(tmp_path / 'stopped')[0]
  assert any(k.startswith('batch_stats/') for k in straight)
  for k in straight:
    np.testing.assert_array_equal(resumed[k], straight[k], err_msg=k)


def test_more_epochs_continue_and_other_changes_are_refused(tmp_path, monkeypatch):
  c = _config(tmp_path, 'cocod_sgd')
  c.checkpoint.every_epochs = 1
  c.num_epochs = 2
  monkeypatch.chdir(tmp_path)  # A relative workdir, as `--workdir=runs/x` gives (Orbax wants
  train.train_and_evaluate(c, 'run')  # absolute paths: the checkpointer makes them so).
  assert len(os.listdir(tmp_path / 'run' / 'checkpoints')) == 2
  c.num_epochs = 3  # Running further is allowed; it continues from the last checkpoint.
  res = train.train_and_evaluate(c, 'run')
  assert [e['epoch'] for e in res['epochs']] == [1, 2, 3]
  straight = train.train_and_evaluate(c, str(tmp_path / 'straight'))
  assert res['final']['test_loss'] == straight['final']['test_loss']
  c.optimizer.learning_rate = 0.07  # The workdir's fingerprint refuses it before the checkpoint.
  with pytest.raises(workdir.WorkdirError, match=r'optimizer.learning_rate: 0.05 -> 0.07'):
    train.train_and_evaluate(c, str(tmp_path / 'run'))


def test_incomplete_checkpoint_is_skipped(tmp_path, capsys):
  c = _config(tmp_path, 'local_sgd')
  c.checkpoint.every_epochs = 1
  c.checkpoint.keep = 5
  train.train_and_evaluate(c, str(tmp_path / 'run'))
  root = tmp_path / 'run' / 'checkpoints'
  steps = sorted(os.listdir(root))
  assert steps == ['0000000004', '0000000008', '0000000012']
  os.remove(root / steps[-1] / checkpoints.COMMIT)  # As if the run died while writing it,
  os.remove(tmp_path / 'run' / 'results.json')  # before it wrote its results.
  train.train_and_evaluate(c, str(tmp_path / 'run'))
  out = capsys.readouterr().out
  assert 'skipping the incomplete checkpoint at step 12' in out
  assert 'resuming from the checkpoint at step 8 (epoch 3)' in out


def test_config_differences_ignore_what_cannot_change_results():
  a = {'num_epochs': 3, 'checkpoint': {'keep': 2}, 'optimizer': {'momentum': 0.9}, 'seed': 0}
  b = {'num_epochs': 9, 'checkpoint': {'keep': 4}, 'optimizer': {'momentum': 0.8}, 'seed': 0}
  assert checkpoints.config_differences(a, b) == ['optimizer.momentum: 0.9 -> 0.8']


def _main(script, workdir, *extra):
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  cmd = [sys.executable, *script, '--config=configs/test.py', f'--workdir={workdir}',
         '--config.num_epochs=3', '--config.checkpoint.every_epochs=1', *extra]  # fmt: skip
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_crash_then_rerun_resumes_exactly(tmp_path):
  # The one-host process is killed (SIGKILL) at step 20 of 45; the same command run again
  # continues from the checkpoint of epoch 1 (step 15) and ends with the uninterrupted model.
  p = _main(['-m', 'cocod_jax.main'], tmp_path / 'straight')
  assert p.returncode == 0, p.stderr[-3000:]
  killed = _main(
    ['tests/faults.py', '--fault=kill_at_step', '--fault_step=20', '--fault_rank=0'],
    tmp_path / 'run',
  )
  assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
  again = _main(['-m', 'cocod_jax.main'], tmp_path / 'run')
  assert again.returncode == 0, again.stderr[-3000:]
  assert 'resuming from the checkpoint at step 15 (epoch 2)' in again.stdout
  straight, resumed = _finals(tmp_path / 'straight'), _finals(tmp_path / 'run')
  for k in straight[0]:
    np.testing.assert_array_equal(resumed[0][k], straight[0][k], err_msg=k)
  assert resumed[1] == straight[1]
  with open(tmp_path / 'run' / 'metrics.jsonl') as f:
    assert [json.loads(line)['epoch'] for line in f] == [1, 2, 3]  # No epoch twice.


def test_two_signals_at_once_are_one_request_a_later_one_exits(monkeypatch):
  # Slurm's --signal reaches every process of the step while a submitit task passes a SIGTERM
  # on: both within moments must still end in a checkpoint; a second Ctrl-C seconds later ends
  # the run at once (143).
  guard = checkpoints.PreemptionGuard(deadline_s=600)
  clock = [100.0]

  class Exited(Exception):  # os._exit never returns; neither does its stand-in.
    pass

  def fake_exit(status):
    raise Exited(status)

  monkeypatch.setattr(checkpoints.os, '_exit', fake_exit)
  monkeypatch.setattr(checkpoints.time, 'monotonic', lambda: clock[0])
  try:
    guard._handle(signal.SIGUSR2, None)
    assert guard.requested
    clock[0] += 0.5
    guard._handle(signal.SIGTERM, None)  # Within the window: no exit.
    clock[0] += 5.0
    with pytest.raises(Exited) as exited:
      guard._handle(signal.SIGINT, None)
    assert exited.value.args == (errors.EXIT_KILLED,)
  finally:
    guard._timer.cancel()  # Else its deadline would end this pytest process 600 s later.

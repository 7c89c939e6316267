"""Trajectories of the algorithms on the one-host cluster against tests/reference.py.

The `linear` model starts at zero and every batch covers its worker's whole shard, so each run
is deterministic and the NumPy transcription of docs/algorithms.md gives the expected final model.
"""

import collections
import json
import os

import numpy as np
import pytest

from cocod_jax import algorithms
from cocod_jax import schedules
from cocod_jax import shares
from cocod_jax import steps
from cocod_jax import train
from cocod_jax.data import pipeline as input_pipeline
from configs import test as test_config
from tests import helpers
from tests import reference

# It trains every algorithm: left out of make test-fast.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize('algorithm', helpers.ALGOS)
def test_trajectory_matches_reference(tmp_path, tiny, algorithm):
  # 3 workers, 10 examples each, batch 10 (the whole shard), 7 steps with period 3, so the last
  # round is cut short by the end of training and closed by the final average.
  path, x, y = tiny
  c = helpers.small_config(path, algorithm, workers=3, batch=10, epochs=7, period=3)
  w, b = helpers.run(c, tmp_path / 'run')
  shards = [(x[i * 10 : (i + 1) * 10], y[i * 10 : (i + 1) * 10]) for i in range(3)]
  ew, eb = reference.run(algorithm, shards, 3, 7, 0.5, 0.9, 1e-4, 3, [10, 10, 10])
  np.testing.assert_allclose(w, ew, rtol=2e-5, atol=2e-6)
  np.testing.assert_allclose(b, eb, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize('algorithm', helpers.ALGOS)
def test_weighted_average_with_unequal_batches(tmp_path, tiny, algorithm):
  # Speeds 1 and 2 with proportional sampling: M = (10, 20), shards of 10 and 20 examples in
  # file order, weights (1/3, 2/3).
  path, x, y = tiny
  c = helpers.small_config(
    path, algorithm, workers=2, batch=10, epochs=5, period=2, speeds=(1.0, 2.0)
  )
  assert shares.batch_sizes(c) == [10, 20]
  w, b = helpers.run(c, tmp_path / 'run')
  shards = [(x[:10], y[:10]), (x[10:30], y[10:30])]
  ew, eb = reference.run(algorithm, shards, 3, 5, 0.5, 0.9, 1e-4, 2, [10, 20])
  np.testing.assert_allclose(w, ew, rtol=2e-5, atol=2e-6)
  np.testing.assert_allclose(b, eb, rtol=2e-5, atol=2e-6)
  # The weights matter: the plain mean gives a different model.
  plain = reference.run(algorithm, shards, 3, 5, 0.5, 0.9, 1e-4, 2, [10, 10])
  assert not np.allclose(w, plain[0], rtol=1e-3, atol=1e-4)


def test_local_sgd_period_one_equals_ssgd(tmp_path, tiny):
  a = helpers.run(helpers.small_config(tiny.path, 'local_sgd', 3, 10, 6, 1), tmp_path / 'a')
  b = helpers.run(helpers.small_config(tiny.path, 'ssgd', 3, 10, 6, 1), tmp_path / 'b')
  np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)  # The kernel,
  np.testing.assert_allclose(a[1], b[1], rtol=1e-5, atol=1e-6)  # and the bias.


def test_cocod_one_worker_equals_plain_sgd(tmp_path, tiny):
  a = helpers.run(helpers.small_config(tiny.path, 'cocod_sgd', 1, 30, 6, 3), tmp_path / 'a')
  b = helpers.run(helpers.small_config(tiny.path, 'ssgd', 1, 30, 6, 3), tmp_path / 'b')
  np.testing.assert_array_equal(a[0], b[0])
  np.testing.assert_array_equal(a[1], b[1])


def test_cocod_differs_from_local_sgd(tmp_path, tiny):
  a = helpers.run(helpers.small_config(tiny.path, 'cocod_sgd', 3, 10, 6, 3), tmp_path / 'a')
  b = helpers.run(helpers.small_config(tiny.path, 'local_sgd', 3, 10, 6, 3), tmp_path / 'b')
  assert np.max(np.abs(a[0] - b[0])) > 1e-4


def test_average_momentum_changes_local_sgd(tmp_path, tiny):
  # Local-SGD with k = 3, one step an epoch, 3 rounds: averaging the momentum with the parameters
  # (optax's trace, kept in the train state) ends elsewhere than keeping it local.
  c = helpers.small_config(tiny.path, 'local_sgd', 3, 10, 9, 3)
  local = helpers.run(c, tmp_path / 'local')
  c.algorithm.average_momentum = True
  averaged = helpers.run(c, tmp_path / 'averaged')
  assert np.all(np.isfinite(averaged[0])) and np.max(np.abs(averaged[0] - local[0])) > 1e-5


def test_learning_rate_schedule():
  c = test_config.get_config()
  c.num_workers = 4
  c.batch_size = 32
  c.optimizer.learning_rate = 0.01
  c.optimizer.warmup_epochs = 2
  c.optimizer.decay_epochs = (4,)
  lr = schedules.learning_rate_fn(c, shares.batch_sizes(c), steps_per_epoch=10)
  # Linear scaling to 0.04; warm-up from 0.01 over 20 steps; /10 from the start of epoch 4.
  np.testing.assert_allclose(
    [float(lr(t)) for t in (0, 10, 20, 29, 30)], [0.01, 0.025, 0.04, 0.04, 0.004], rtol=1e-6
  )
  c.optimizer.lr_scaling = 'none'
  assert float(schedules.learning_rate_fn(c, [32] * 4, 10)(25)) == pytest.approx(0.01)


def test_proportional_batches_and_heterogeneous_lr():
  c = test_config.get_config()
  c.num_workers = 4
  c.batch_size = 32
  c.worker_speeds = (1.0, 1.0, 2.0, 2.0)
  c.proportional_sampling = True
  sizes = shares.batch_sizes(c)
  assert sizes == [32, 32, 64, 64]
  assert schedules.peak_learning_rate(c, sizes) == pytest.approx(0.01 * 6)
  assert input_pipeline.shard_sizes(1200, sizes) == [200, 200, 400, 400]


def test_results_file(tmp_path):
  c = test_config.get_config()
  res = train.train_and_evaluate(c, str(tmp_path))
  on_disk = json.loads((tmp_path / 'results.json').read_text())
  assert on_disk['final'] == res['final']
  assert set(on_disk['epochs'][0]) == {
    'epoch',
    'train_loss',
    'test_loss',
    'test_accuracy',
    'train_time_s',
  }
  assert on_disk['config']['algorithm']['name'] == 'cocod_sgd'
  assert any(f.startswith('events.out.tfevents') for f in os.listdir(tmp_path))


def test_evaluated_model_on_training_examples(tmp_path, tiny):
  # eval_train_examples = 20 of 30: each epoch and the end also evaluate the averaged model on the
  # first 20 training examples; the final figures are the saved model's, computed here by hand.
  path, x, y = tiny
  c = helpers.small_config(path, 'cocod_sgd', workers=3, batch=10, epochs=3, period=2)
  c.eval_train_examples = 20
  res = train.train_and_evaluate(c, str(tmp_path / 'run'))
  w, b = helpers.read_final(tmp_path / 'run')
  logits = x[:20].astype(np.float64) @ w + b
  top = logits.max(axis=1, keepdims=True)
  nll = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0] - logits[np.arange(20), y[:20]]
  assert res['final']['avg_train_loss'] == pytest.approx(nll.mean(), rel=1e-5)
  assert res['final']['avg_train_accuracy'] == np.mean(logits.argmax(axis=1) == y[:20])
  assert all({'avg_train_loss', 'avg_train_accuracy'} <= set(e) for e in res['epochs'])
  assert res['epochs'][-1]['avg_train_loss'] == res['final']['avg_train_loss']


@pytest.mark.parametrize('algorithm', helpers.ALGOS)
def test_step_functions_compile_once(tmp_path, tiny, monkeypatch, algorithm):
  # A counter in the Python body of each step function moves only while JAX traces it: 3 epochs
  # with the period warm-up (rounds of 1, then of 3) and a fresh batch table every epoch must not
  # compile anything twice.
  traces = collections.Counter()
  make = steps.make_step_fns

  def counting(*args, **kwargs):
    fns = make(*args, **kwargs)

    def wrap(name, fn):
      def traced(*a):
        traces[name] += 1
        return fn(*a)

      return traced

    names = ('compute_grads', 'apply_update', 'local_step', 'skip_step')
    return fns._replace(**{n: wrap(n, getattr(fns, n)) for n in names})

  monkeypatch.setattr(steps, 'make_step_fns', counting)
  c = helpers.small_config(tiny.path, algorithm, workers=3, batch=5, epochs=3, period=3)
  c.dataset.shuffle = True
  c.algorithm.warmup_period_epochs = 1
  train.train_and_evaluate(c, str(tmp_path / 'run'))
  assert traces and max(traces.values()) == 1, traces


def test_loop_runs_under_the_transfer_guard(tmp_path, tiny, monkeypatch):
  # An implicit transfer inside a step (here: a NumPy array sent to the device each step, as the
  # old loop did with the batch indices) is an error between log points, so the loop never stalls
  # on one by accident. (On a CPU, JAX guards host-to-device transfers only: reading a CPU array
  # copies nothing.)
  step = algorithms.local_sgd.LocalSGD.step

  def leaky(self, state, data, t):
    state, loss = step(self, state, data, t)
    return state, loss + np.zeros(loss.shape, np.float32)

  monkeypatch.setattr(algorithms.local_sgd.LocalSGD, 'step', leaky)
  c = helpers.small_config(tiny.path, 'local_sgd', workers=3, batch=10, epochs=1, period=3)
  with pytest.raises(Exception, match='Disallowed host-to-device transfer'):
    train.train_and_evaluate(c, str(tmp_path / 'run'))


def test_divergence_names_the_worker_and_keeps_the_others_clean(tmp_path):
  # Worker 1's shard has features of 1e30: its first local step overflows, the others stay
  # finite. Local-SGD with period 3 finds it at the first average and stops there: the message
  # names worker 1 only, and results.json records where.
  path, x, y = helpers.tiny_npz(tmp_path, n_train=60)
  x = x.copy()
  x[20:40] *= 1e30
  np.savez(path, x_train=x, y_train=y, x_test=x[:5], y_test=y[:5])
  c = helpers.small_config(path, 'local_sgd', workers=3, batch=5, epochs=3, period=3)
  with pytest.raises(train.Diverged, match=r'worker\(s\) \[1\].*the end of the round.*step 2'):
    train.train_and_evaluate(c, str(tmp_path / 'run'))
  res = json.loads((tmp_path / 'run' / 'results.json').read_text())
  assert res['status'] == 'diverged' and res['diverged']['workers'] == [1]
  assert res['diverged']['step'] == 2 and res['diverged']['learning_rate'] == pytest.approx(0.5)
  assert not (tmp_path / 'run' / 'final_params.npz').exists()


def test_asynlocal_matches_reference(tmp_path):
  # Speeds (1, 2, 1, 2), k = 2: k_i = (2, 4, 2, 4); basic batch 5 for everyone; shards ~ M k_i =
  # (10, 20, 10, 20); 2 global steps an epoch, 3 epochs. The fast workers take two local steps per
  # global step, at learning rates lr_{t0} and lr_{t0 + 1} of a warm-up that changes every step.
  path, x, y = helpers.tiny_npz(tmp_path, n_train=60)
  c = helpers.small_config(path, 'asynlocal_sgd', 4, 5, 3, 2, speeds=(1.0, 2.0, 1.0, 2.0), ps=False)
  lr = helpers.lr_warmup(c)
  res = train.train_and_evaluate(c, str(tmp_path / 'run'))
  assert res['steps_per_epoch'] == 2 and res['weights'] == [0.25] * 4
  assert (res['train_examples'], res['test_examples']) == (60, 10)  # The tables' resolution.
  w, b = helpers.read_final(tmp_path / 'run')
  expected = reference.run(
    'asynlocal_sgd', helpers.shards_of(x, y, [10, 20, 10, 20]), 3, 6, lambda t: lr(t, 2), 0.9,
    1e-4, 2, [5, 5, 5, 5], speeds=(1.0, 2.0, 1.0, 2.0),
  )  # fmt: skip
  np.testing.assert_allclose(w, expected[0], rtol=2e-5, atol=2e-6)
  np.testing.assert_allclose(b, expected[1], rtol=2e-5, atol=2e-6)
  # The speeds matter: with equal speeds the reference ends elsewhere.
  local = reference.run(
    'asynlocal_sgd', helpers.shards_of(x, y, [10, 20, 10, 20]), 3, 6, lambda t: lr(t, 2), 0.9,
    1e-4, 2, [5, 5, 5, 5], speeds=(1.0, 1.0, 1.0, 1.0),
  )  # fmt: skip
  assert not np.allclose(w, local[0], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize('algorithm', helpers.ALGOS)
def test_proportional_sampling_matches_reference(tmp_path, algorithm):
  # Speeds (1, 2, 1, 2) with PS: M_i = (5, 10, 5, 10), shards (10, 20, 10, 20), weights M_i / 30,
  # the learning rate scaled to 6x the basic one through a warm-up; 2 steps an epoch, 3 epochs.
  path, x, y = helpers.tiny_npz(tmp_path, n_train=60)
  c = helpers.small_config(path, algorithm, 4, 5, 3, 2, speeds=(1.0, 2.0, 1.0, 2.0))
  lr = helpers.lr_warmup(c)
  assert shares.batch_sizes(c) == [5, 10, 5, 10]
  train.train_and_evaluate(c, str(tmp_path / 'run'))
  w, b = helpers.read_final(tmp_path / 'run')
  expected = reference.run(
    algorithm, helpers.shards_of(x, y, [10, 20, 10, 20]), 3, 6, lambda t: lr(t, 2), 0.9, 1e-4, 2,
    [5, 10, 5, 10],
  )  # fmt: skip
  np.testing.assert_allclose(w, expected[0], rtol=2e-5, atol=2e-6)
  np.testing.assert_allclose(b, expected[1], rtol=2e-5, atol=2e-6)


def test_asynlocal_with_equal_speeds_is_local_sgd(tmp_path):
  path, _, _ = helpers.tiny_npz(tmp_path, n_train=60)
  runs = {}
  for algorithm in ('asynlocal_sgd', 'local_sgd'):
    c = helpers.small_config(path, algorithm, 3, 5, 3, 2, speeds=(1.5, 1.5, 1.5), ps=False)
    c.dataset.shuffle = True
    helpers.lr_warmup(c)
    runs[algorithm] = helpers.run(c, tmp_path / algorithm)
  np.testing.assert_array_equal(runs['asynlocal_sgd'][0], runs['local_sgd'][0])
  np.testing.assert_array_equal(runs['asynlocal_sgd'][1], runs['local_sgd'][1])


# The period warm-up, averaged momentum and BatchNorm statistics (averaged or kept per worker)
# against the float64 reference: the `linear_bn` model (the linear model on BatchNorm-standardised
# inputs), 3 workers of 10 examples at batch 5 (2 steps an epoch), 4 epochs, the first with
# period 1 (rounds 0, 1), then period 3 (rounds 2-4, 5-7). The final model is an average, which
# averaging the statistics on the way does not change (their update is affine), so each worker's
# state in the checkpoint at the end is compared too. Each option changes the trajectory
# (test_variants_change_the_trajectory).
# S-SGD and Pipe-SGD have no period and keep every worker's momentum equal: only the statistics.
VARIANT_CASES = [(a, v) for a in ('local_sgd', 'cocod_sgd') for v in sorted(helpers.VARIANTS)] + [
  (a, v) for a in ('ssgd', 'pipe_sgd') for v in ('bn_averaged', 'bn_local')
]


@pytest.mark.parametrize('algorithm,variant', VARIANT_CASES)
def test_variants_match_reference(tmp_path, tiny, algorithm, variant):
  options = helpers.VARIANTS[variant]
  path, x, y = tiny
  c = helpers.variant_config(path, algorithm, **options)
  train.train_and_evaluate(c, str(tmp_path / 'run'))
  final, workers = helpers.read_variant(tmp_path / 'run')
  expected_workers = []
  expected = helpers.variant_reference(x, y, algorithm, workers_out=expected_workers, **options)
  assert len(final) == len(expected) and len(workers[0]) == len(expected_workers[0])
  for got, want in zip(final + sum(workers, []), expected + sum(expected_workers, [])):
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_variants_change_the_trajectory(tmp_path, tiny):
  # Each option moves what the reference ends with (the final model or a worker's state), so a
  # run that ignored it could not match.
  _, x, y = tiny

  def ends(algorithm, **options):
    workers = []
    final = helpers.variant_reference(x, y, algorithm, workers_out=workers, **options)
    return np.concatenate([a.ravel() for a in final + sum(workers, [])])

  for algorithm in ('local_sgd', 'cocod_sgd'):  # S-SGD and Pipe-SGD have no period.
    assert not np.allclose(ends(algorithm, warmup=1), ends(algorithm), rtol=1e-5)
    momentum = ends(algorithm, **helpers.VARIANTS['momentum'])
    assert not np.allclose(momentum, ends(algorithm, warmup=1), rtol=1e-5)
  for algorithm in ('pipe_sgd', 'local_sgd', 'cocod_sgd'):  # S-SGD's workers stay identical.
    options = {**helpers.VARIANTS['bn_local'], 'average_momentum': False}
    kept = ends(algorithm, **options)
    averaged = ends(algorithm, **{**options, 'average_batch_stats': True})
    assert not np.allclose(kept, averaged, rtol=1e-5), algorithm


# CoCoD-SGD's other corrections (algorithm.correction) against the float64 reference, on the
# variants' setting with BatchNorm statistics averaged: the period warm-up's rounds of one step,
# then rounds of 3, every worker's state at the end and the final model.
# The overlap options (docs/algorithms.md): a shorter delay tau (rounds of 3, so tau = 1 and 2
# take the snapshot inside the round), the eager update (lambda < 1 with and without the
# extrapolation gamma; with `warmup=0` the rounds are 0-2, 3-5 and 6-7, cut by the end of
# training, so the evaluated model counts a round in flight) and the anchor.
@pytest.mark.parametrize('correction', sorted(helpers.CORRECTIONS))
def test_corrections_match_reference(tmp_path, tiny, correction):
  options = helpers.CORRECTIONS[correction]
  path, x, y = tiny
  train.train_and_evaluate(helpers.correction_config(path, **options), str(tmp_path / 'run'))
  final, workers = helpers.read_variant(tmp_path / 'run')
  expected_workers = []
  expected = helpers.variant_reference(
    x,
    y,
    'cocod_sgd',
    workers_out=expected_workers,
    **{**helpers.VARIANTS['bn_averaged'], **options},
  )
  for got, want in zip(final + sum(workers, []), expected + sum(expected_workers, [])):
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_corrections_change_the_trajectory(tmp_path, tiny):
  # Every correction ends elsewhere than the paper's and than the others, so a run that ignored
  # the field, or mixed two up, could not match the reference.
  _, x, y = tiny

  def ends(**options):
    workers = []
    final = helpers.variant_reference(x, y, 'cocod_sgd', workers_out=workers, **options)
    return np.concatenate([a.ravel() for a in final + sum(workers, [])])

  seen = [ends(warmup=1)] + [ends(**{'warmup': 1, **o}) for o in helpers.CORRECTIONS.values()]
  seen.append(ends(warmup=1, correction='outer_sgd', outer=(0.7, 0.0, True)))  # No momentum.
  seen.append(ends(warmup=1, correction='outer_sgd', outer=(0.7, 0.9, False)))  # Heavy ball.
  for i in range(len(seen)):
    for j in range(i):
      assert not np.allclose(seen[i], seen[j], rtol=1e-5), (i, j)


@pytest.mark.parametrize('options', [dict(delay=3), dict(correction='eager', eager=(1.0, 0.0))])
def test_full_delay_and_eager_one_zero_are_cocod(tmp_path, tiny, options):
  # tau = k snapshots at the round's start (the paper's, to the bit); lambda = 1, gamma = 0 gives
  # C + (a - C) + (x - s), the paper's up to the rounding of C + (a - C) in float32.
  train.train_and_evaluate(helpers.correction_config(tiny.path, 'cocod'), str(tmp_path / 'cocod'))
  c = helpers.correction_config(tiny.path, **{'correction': 'cocod', **options})
  train.train_and_evaluate(c, str(tmp_path / 'option'))
  (f0, w0), (f1, w1) = (
    helpers.read_variant(tmp_path / 'cocod'),
    helpers.read_variant(tmp_path / 'option'),
  )
  for got, want in zip(f1 + sum(w1, []), f0 + sum(w0, [])):
    if 'delay' in options:
      np.testing.assert_array_equal(got, want)
    else:
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_blend_zero_is_reset_to_the_bit(tmp_path, tiny):
  runs = []
  for name, options in (('reset', {}), ('blend', {'alpha': 0.0})):
    c = helpers.correction_config(tiny.path, name, **options)
    train.train_and_evaluate(c, str(tmp_path / name))
    runs.append(helpers.read_variant(tmp_path / name))
  for got, want in zip(runs[1][0] + sum(runs[1][1], []), runs[0][0] + sum(runs[0][1], [])):
    np.testing.assert_array_equal(got, want)


def test_outer_sgd_at_lr_one_without_momentum_is_cocod(tmp_path, tiny):
  # g' = g - 1 * (g - a) = a, so x <- a + (x - s): the paper's correction, up to the rounding of
  # g - (g - a) in float32.
  train.train_and_evaluate(helpers.correction_config(tiny.path, 'cocod'), str(tmp_path / 'cocod'))
  c = helpers.correction_config(tiny.path, 'outer_sgd', outer=(1.0, 0.0, True))
  train.train_and_evaluate(c, str(tmp_path / 'outer'))
  (f0, w0), (f1, w1) = (
    helpers.read_variant(tmp_path / 'cocod'),
    helpers.read_variant(tmp_path / 'outer'),
  )
  for got, want in zip(f1 + sum(w1, []), f0 + sum(w0, [])):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_reset_with_period_one_is_pipe_sgd(tmp_path, tiny):
  # Reset sends a + d, d = -lr (momentum step of its gradient at a); the average of the next
  # snapshots is a + sum_i w_i d_i, the momentum step of the averaged gradient taken one round
  # earlier: Pipe-SGD's x_{t+1} = OPT(x_t, gbar_{t-1}), without weight decay (Pipe-SGD decays
  # x_t, reset the model the gradient was taken at) and without BatchNorm.
  finals = {}
  for algorithm in ('pipe_sgd', 'cocod_sgd'):
    c = helpers.small_config(tiny.path, algorithm, workers=3, batch=5, epochs=3, period=1)
    c.optimizer.weight_decay = 0.0
    c.algorithm.correction = 'reset' if algorithm == 'cocod_sgd' else 'cocod'
    finals[algorithm] = helpers.run(c, tmp_path / algorithm)
  for got, want in zip(finals['cocod_sgd'], finals['pipe_sgd']):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  c.algorithm.period = 2  # Not with longer rounds: the equality is the period's.
  assert not np.allclose(helpers.run(c, tmp_path / 'k2')[0], finals['pipe_sgd'][0], rtol=1e-3)

"""Streamed CoCoD-SGD (`algorithm.fragments` > 1, algorithms/streamed.py) on the one-host cluster:
the fragments and their schedule by hand, the trajectories against the float64 transcription of
docs/algorithms.md (tests/reference.py), P = 1 equal to CoCoD-SGD's delay rule to the bit, the
refusals, a resume with fragments in flight, and the communicator's queue of several collectives.
Its MPI cases (2 x 1, 2 x 2, 2 x 4, a resume with a fragment in flight) are in tests/ranks_test.py.
"""

import os
import signal
import threading

import numpy as np
import pytest

from cocod_jax import algorithms
from cocod_jax import train
from cocod_jax import validation
from cocod_jax.algorithms import cocod_sgd
from cocod_jax.algorithms import streamed
from cocod_jax.cluster import background
from cocod_jax.config import errors
from cocod_jax.config import loader as config_loader
from cocod_jax.record import checkpoints
from cocod_jax.record import schema
from tests import helpers

pytestmark = pytest.mark.slow  # It trains and interrupts runs: left out of make test-fast.


def test_fragments_are_contiguous_and_balanced():
  # Element g of N belongs to fragment floor(g P / N).
  for n, p in ((10, 3), (7, 7), (1000, 6), (5, 2)):
    bounds = streamed.edges(n, p)
    owner = [g * p // n for g in range(n)]
    assert [owner.index(f) for f in range(p)] + [n] == bounds
    sizes = np.diff(bounds)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == n
  assert streamed.edges(10, 3) == [0, 4, 7, 10]  # floor(3g/10): 0,0,0,0,1,1,1,2,2,2.


def test_pieces_cross_leaves():
  # Leaves of 4, 3 and 5 elements; the elements 2-8 take the tail of the first, all of the
  # second and the first two of the third.
  assert streamed.pieces([4, 3, 5], 2, 9) == ((0, 2, 4), (1, 0, 3), (2, 0, 2))
  assert streamed.pieces([4, 3, 5], 4, 7) == ((1, 0, 3),)


def test_schedule_by_hand():
  # A round of 5 steps, P = 2: fragment 0 ends at step floor(5/2) - 1 = 1, fragment 1 at 4;
  # tau = 1 takes each snapshot before its last step.
  assert streamed.schedule(5, 2, 1) == [(0, 1, 1), (1, 4, 4)]
  # tau = 2: a step earlier; fragment 0's snapshot at the round's start.
  assert streamed.schedule(5, 2, 2) == [(0, 0, 1), (1, 3, 4)]
  # P = k = 3, tau = 3: every snapshot at the start (three in flight at once).
  assert streamed.schedule(3, 3, 3) == [(0, 0, 0), (1, 0, 1), (2, 0, 2)]
  # P = 3 in a round of 4: ends at floor(4/3) - 1 = 0, floor(8/3) - 1 = 1, 3.
  assert streamed.schedule(4, 3, 1) == [(0, 0, 0), (1, 1, 1), (2, 3, 3)]
  # A round shorter than P (the period warm-up's rounds of 1): the whole model, CoCoD-SGD's rule.
  assert streamed.schedule(1, 3, 1) == [(streamed.WHOLE, 0, 0)]
  assert streamed.schedule(2, 3, 5) == [(streamed.WHOLE, 0, 1)]


# The library flattens the synced part as jax.tree.flatten orders its dict: batch_stats (mean,
# var), momentum (bias, kernel), params (bias, kernel); the reference lists w, b, [mean, var],
# [momentum of w, of b].
ORDERS = {
  'warmup': [1, 0],
  'momentum': [3, 2, 1, 0],
  'bn_averaged': [2, 3, 1, 0],
}
# (variant, P, tau, period): 4 epochs of 2 steps, the warm-up's rounds of one step where the
# variant has one (2 steps), then rounds of k.
CASES = {
  'p2_k3': ('warmup', 2, None, 3),  # P does not divide k; tau = 1 by default.
  'p3_tau2_bn': ('bn_averaged', 3, 2, 3),  # Two fragments in flight at once.
  'p2_momentum': ('momentum', 2, 1, 3),
  'p3_tau3': ('warmup', 3, 3, 3),  # Every snapshot at the round's start.
  'last_round_short': ('warmup', 4, None, 4),  # Rounds 2-5, then 6-9 cut after 2 steps < P.
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_one_host_matches_reference(tmp_path, tiny, case):
  variant, p, tau, k = CASES[case]
  options = helpers.VARIANTS[variant]
  c = helpers.variant_config(tiny.path, 'cocod_sgd', **options)
  c.algorithm.period, c.algorithm.fragments, c.algorithm.delay = k, p, tau
  validation.validate(c)
  helpers.run(c, tmp_path / 'run')
  final, workers = helpers.read_variant(tmp_path / 'run')
  got_workers = []
  data = helpers.shards_of(tiny.x, tiny.y, [10, 10, 10])
  rest = {k_: v for k_, v in options.items() if k_ != 'warmup'}
  warmup = 2 * options.get('warmup', 0)

  def reference(**more):
    return helpers.reference.run('cocod_sgd', data, 3, 8, 0.5, 0.9, 1e-4, k, [5, 5, 5],
                                 warmup_steps=warmup, **rest, **more)  # fmt: skip

  expected = reference(workers_out=got_workers, fragments=p, delay=tau, order=ORDERS[variant])
  for g, e in zip(final, expected):
    np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6)
  for i in range(3):  # Every worker's parameters, momentum (and statistics) at the end.
    for g, e in zip(workers[i], got_workers[i]):
      np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6, err_msg=f'worker {i}')
  # The test can fail: the paper's CoCoD-SGD (one fragment) ends elsewhere.
  whole = reference()
  assert max(np.abs(w - e).max() for w, e in zip(whole, expected)) > 1e-3
  res = schema.load_results(str(tmp_path / 'run' / 'results.json'))
  fig = res['snapshot_allreduce']
  assert fig['fragments'] == p and fig['delay'] == (tau or 1)
  assert sum(fig['fragment_elements']) == fig['elements']
  # One host: each collective would send its fragment's float32 elements.
  sizes = dict(zip(map(str, range(p)), fig['fragment_elements']))
  for name, nbytes in fig['bytes_per_collective'].items():
    assert nbytes == 4 * (fig['elements'] if name == 'whole' else sizes[name])


@pytest.mark.parametrize('delay', [1, 2, 3])
def test_one_fragment_is_cocod_sgd_with_its_delay(tmp_path, tiny, monkeypatch, delay):
  # The streamed machinery with P = 1 (forced: the config routes P = 1 to cocod_sgd.py) takes
  # the whole model's snapshot tau steps before the round's end and corrects it at the end: the
  # paper's CoCoD-SGD with that delay, to the bit.
  c = helpers.variant_config(tiny.path, 'cocod_sgd', **helpers.VARIANTS['bn_averaged'])
  c.algorithm.delay = delay
  validation.validate(c)
  helpers.run(c, tmp_path / 'paper')
  monkeypatch.setitem(algorithms.ALGORITHMS, 'cocod_sgd', streamed.StreamedCoCoDSGD)
  helpers.run(c, tmp_path / 'streamed')
  a, b = helpers.read_variant(tmp_path / 'paper'), helpers.read_variant(tmp_path / 'streamed')
  for x, y in zip(a[0] + sum(a[1], []), b[0] + sum(b[1], [])):
    np.testing.assert_array_equal(x, y)


def test_fragments_one_is_the_paper(tmp_path, tiny):
  # The default, and an explicit 1, run the paper's class, with the same hash as before the field.
  c = helpers.variant_config(tiny.path, 'cocod_sgd')
  assert c.algorithm.fragments == 1
  ctx = algorithms.base.Context(None, c.algorithm, type('T', (), {'fragments': 1})(), None)
  assert type(algorithms.get('cocod_sgd', ctx)) is cocod_sgd.CoCoDSGD
  before = c.to_dict()
  del before['algorithm']['fragments']
  assert config_loader.config_hash(c.to_dict()) == config_loader.config_hash(before)
  c.algorithm.fragments = 2
  assert config_loader.config_hash(c.to_dict()) != config_loader.config_hash(before)


REFUSED = [
  ({'fragments': 0}, 'algorithm.fragments=0 is invalid; allowed: an integer >= 1'),
  ({'fragments': 2, 'name': 'local_sgd'},
   "algorithm.fragments=2 is invalid with algorithm.name='local_sgd'"),
  ({'fragments': 4, 'period': 3},
   'algorithm.fragments=4 is invalid with algorithm.period=3: a round of k steps ends at most k '
   'fragments; allowed: an integer in [1, 3]'),
  ({'fragments': 2, 'correction': 'eager'},
   "algorithm.fragments=2 is invalid with algorithm.correction='eager'"),
  ({'fragments': 2, 'period': 'auto'}, "algorithm.fragments=2 is invalid with algorithm.period="),
]  # fmt: skip


@pytest.mark.parametrize('fields,message', REFUSED)
def test_refused_in_one_line(fields, message):
  c = helpers.test_config.get_config()
  c.backend = 'mpi'  # (period='auto' is an MPI option: only the fragments are refused.)
  c.algorithm.update(fields)
  problems = validation.errors(c)
  assert len(problems) == 1 and problems[0].startswith(message), problems


def test_refused_with_a_compressed_allreduce():
  c = helpers.test_config.get_config()
  c.algorithm.fragments, c.comm.dtype = 2, 'int8'
  assert validation.errors(c) == [
    "algorithm.fragments=2 is invalid with comm.dtype='int8' and comm.error_feedback=False: the "
    'compressed allreduce is defined for the whole model only; allowed: 1, or '
    "comm.dtype='float32' and comm.error_feedback=False"
  ]
  with pytest.raises(errors.UsageError):
    validation.validate(c)


def test_resume_with_fragments_in_flight_is_exact(tmp_path, tiny, monkeypatch):
  # P = 3, tau = 3, rounds of 3 steps after a warm-up of 2: every snapshot at a round's start.
  # A SIGTERM during step 5 stops at the boundary after it, step 1 of the round 5-7: fragments
  # 1 and 2 in flight (fragment 0 corrected). The resumed run ends with the straight run's model.
  c = helpers.variant_config(tiny.path, 'cocod_sgd', **helpers.VARIANTS['bn_averaged'])
  c.algorithm.fragments, c.algorithm.delay = 3, 3
  c.checkpoint.every_epochs = 0
  helpers.run(c, tmp_path / 'straight')
  step, seen = streamed.StreamedCoCoDSGD.step, {}

  def step_then_signal(self, state, data, t):
    if t == 5:
      os.kill(os.getpid(), signal.SIGTERM)
    out = step(self, state, data, t)
    seen[t] = len(self.queue)
    return out

  with monkeypatch.context() as m:
    m.setattr(streamed.StreamedCoCoDSGD, 'step', step_then_signal)
    with pytest.raises(checkpoints.Preempted):
      train.train_and_evaluate(c, str(tmp_path / 'stopped'))
  assert seen[5] == 2  # Two fragments in flight at the checkpoint.
  helpers.run(c, tmp_path / 'stopped')
  for name in ('straight', 'stopped'):
    with np.load(tmp_path / name / 'final_params.npz') as f:
      seen[name] = {k: f[k] for k in f.files}
  assert seen['straight'].keys() == seen['stopped'].keys()
  for k, v in seen['straight'].items():
    np.testing.assert_array_equal(seen['stopped'][k], v, err_msg=k)


def test_background_queue_runs_in_order_and_waits_in_order():
  worker = background.BackgroundWorker(True, 10.0, 0)
  gate, ran = threading.Event(), []

  def job(name, block=False):
    def fn(handle):
      if block:
        gate.wait(5)
      ran.append(name)
      return name

    return fn

  first = worker.submit(job('a', block=True), 'a', 0)
  second = worker.submit(job('b'), 'b', 1)
  third = worker.submit(job('c'), 'c', 2)
  with pytest.raises(RuntimeError, match='b waited for before a'):
    worker.wait(second)
  with pytest.raises(RuntimeError, match='a is still in flight'):
    worker.submit(job('d'), 'd', 3, inline=True)
  gate.set()
  assert [worker.wait(h) for h in (first, second, third)] == ['a', 'b', 'c']
  assert ran == ['a', 'b', 'c'] and worker.close()


def test_divergence_names_the_worker_and_the_fragment(tmp_path):
  # Worker 1's shard has features of 1e30: its first local step overflows. P = 2 in rounds of 3:
  # fragment 0's snapshot (before step 0) is still x_0, fragment 1's (before step 2) is not
  # finite, and its average stops the run before any worker takes it in.
  path, x, y = helpers.tiny_npz(tmp_path, n_train=60)
  x = x.copy()
  x[20:40] *= 1e30
  np.savez(path, x_train=x, y_train=y, x_test=x[:5], y_test=y[:5])
  c = helpers.small_config(path, 'cocod_sgd', workers=3, batch=5, epochs=3, period=3)
  c.algorithm.fragments = 2
  with pytest.raises(train.Diverged, match=r'worker\(s\) \[1\].*fragment 1 of 2 in the round of '
                     r'steps 0-2 at step 2'):  # fmt: skip
    train.train_and_evaluate(c, str(tmp_path / 'run'))
  res = schema.load_results(str(tmp_path / 'run' / 'results.json'))
  assert res['status'] == 'diverged' and res['diverged']['workers'] == [1]

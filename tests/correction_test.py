"""The corrections (cocod, reset, blend, outer_sgd, eager, anchor), by hand, and their state in a
checkpoint."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cocod_jax import shares
from cocod_jax.algorithms import correction


def test_correction_by_hand():
  # Two workers snapshot s = 1 and 5 (mean 3 with equal weights), then progress to 2 and 4:
  # worker 0: 3 + (2 - 1) = 4; worker 1: 3 + (4 - 5) = 2. The next snapshot is the corrected x.
  tx = correction.decoupled_correction()
  states = [tx.init({'w': jnp.array(1.0)}), tx.init({'w': jnp.array(5.0)})]
  avg = {'w': jnp.array(3.0)}
  out0, st0 = tx.update({'w': jnp.array(2.0)}, avg, states[0])
  out1, _ = tx.update({'w': jnp.array(4.0)}, avg, states[1])
  assert float(out0['w']) == 4.0 and float(out1['w']) == 2.0
  assert float(st0.snapshot['w']) == 4.0


def test_one_worker_correction_is_identity():
  # With one worker the average is the snapshot itself, so x is returned unchanged, bit for bit.
  tx = correction.decoupled_correction()
  s = {'w': jnp.array([0.1, 0.7, 1e-8])}
  st = tx.init(s)
  x = {'w': jnp.array([0.3, -2.0, 3.3])}
  out, _ = tx.update(x, st.snapshot, st)
  np.testing.assert_array_equal(np.asarray(out['w']), np.asarray(x['w']))


def test_worker_weights():
  assert shares.worker_weights([32, 64, 32]) == [0.25, 0.5, 0.25]


def _by_hand(tx, state, xs=(2.0, 4.0), average=3.0):
  """Two workers that sent 1 and 5 (equal weights: a = 3) and progressed to `xs`."""
  avg = {'w': jnp.array(average)}
  out = [tx.update({'w': jnp.array(x)}, avg, s) for x, s in zip(xs, state)]
  return [float(o[0]['w']) for o in out], [o[1] for o in out]


def _sent(values, tx):
  return [tx.init({'w': jnp.array(v)}) for v in values]


def test_reset_and_blend_by_hand():
  # Snapshots (and origins) 1 and 5, models 2 and 4, a = 3. Reset: x = 3, 3; the next round
  # sends a + (x - origin) = 3 + 1 = 4 and 3 - 1 = 2 (their mean 3 + mean progress 0).
  tx = correction.reset_correction()
  x, st = _by_hand(tx, _sent((1.0, 5.0), tx))
  assert x == [3.0, 3.0]
  assert [float(s.snapshot['w']) for s in st] == [4.0, 2.0]
  assert [float(s.origin['w']) for s in st] == [3.0, 3.0]
  # Blend 0.5: x = 0.5 * 3 + 0.5 * 2 = 2.5 and 3.5; sent as with reset; origin the blended x.
  tx = correction.blend_correction(0.5)
  x, st = _by_hand(tx, _sent((1.0, 5.0), tx))
  assert x == [2.5, 3.5]
  assert [float(s.snapshot['w']) for s in st] == [4.0, 2.0]
  assert [float(s.origin['w']) for s in st] == [2.5, 3.5]
  # A second round from origin 2.5 to 3.0 with a = 4: sent 4 + 0.5 = 4.5.
  _, st2 = _by_hand(tx, st[:1], xs=(3.0,), average=4.0)
  assert float(st2[0].snapshot['w']) == 4.5


def test_outer_sgd_by_hand():
  # Anchor g = 4 on both workers, outer momentum 0 (its start), snapshots 1 and 5 (a = 3),
  # models 2 and 4. Outer gradient g - a = 1; lr 0.5, momentum 0.5:
  # Nesterov: m = 1, u = 1 + 0.5 * 1 = 1.5, g' = 4 - 0.75 = 3.25; x = 3.25 + (2 - 1) = 4.25 and
  #   3.25 + (4 - 5) = 2.25, sent as such; heavy ball: u = m = 1, g' = 3.5.
  for nesterov, anchor in ((True, 3.25), (False, 3.5)):
    tx = correction.outer_sgd_correction(0.5, 0.5, nesterov)
    state = [s._replace(anchor={'w': jnp.array(4.0)}) for s in _sent((1.0, 5.0), tx)]
    x, st = _by_hand(tx, state)
    assert x == [anchor + 1.0, anchor - 1.0]
    assert [float(s.anchor['w']) for s in st] == [anchor, anchor]
    assert [float(s.snapshot['w']) for s in st] == x
    assert float(jax.tree.leaves(st[0].outer)[0]) == 1.0  # The momentum buffer.


def test_eager_by_hand():
  # lambda 0.5, gamma 1; C = 2 and E = 0.5 on both workers, snapshots 1 and 5, models 2 and 4,
  # a = 3. u = (3 - 2 - 0.5) / 0.5 = 1; C' = 3; E' = 1 * (1 - 0.5) * 1 = 0.5;
  # x = 3 + 0.5 * (2 - 1) + 0.5 = 4 and 3 + 0.5 * (4 - 5) + 0.5 = 3, sent as such.
  tx = correction.eager_correction(0.5, 1.0)
  shared = dict(anchor={'w': jnp.array(2.0)}, lookahead={'w': jnp.array(0.5)})
  state = [s._replace(**shared) for s in _sent((1.0, 5.0), tx)]
  x, st = _by_hand(tx, state)
  assert x == [4.0, 3.0]
  assert [float(s.snapshot['w']) for s in st] == x
  assert [(float(s.anchor['w']), float(s.lookahead['w'])) for s in st] == [(3.0, 0.5)] * 2
  # Evaluated from a mean model 3.5 in the same round: C + (a - C - E) / lambda + (3.5 - a)
  # = 2 + 1 + 0.5.
  got = tx.evaluate({'w': jnp.array(3.5)}, {'w': jnp.array(3.0)}, state[0])
  assert float(got['w']) == 3.5


def test_anchor_by_hand():
  # Pull 0.5, momentum 0.5, the round's last rate 0.25; velocities 2, models 2 and 4, the anchor
  # z = a = 3. Pulled: 2.5 and 3.5; v = 0.5 * 2 + (3 - 2.5) / 0.25 = 3 and 1 - 2 = -1;
  # sent z - 0.25 v = 2.25 and 3.25.
  tx = correction.anchor_correction(0.5, 0.5)
  state = [s._replace(velocity={'w': jnp.array(2.0)}) for s in _sent((1.0, 5.0), tx)]
  out = [tx.update({'w': jnp.array(v)}, {'w': jnp.array(3.0)}, s, 0.25)
         for v, s in zip((2.0, 4.0), state)]  # fmt: skip
  assert [float(o[0]['w']) for o in out] == [2.5, 3.5]
  assert [float(o[1].velocity['w']) for o in out] == [3.0, -1.0]
  assert [float(o[1].snapshot['w']) for o in out] == [2.25, 3.25]


def test_blend_zero_and_reset_agree_bit_for_bit():
  rs = np.random.RandomState(0)
  x, a, s = ({'w': jnp.asarray(rs.randn(50).astype(np.float32))} for _ in range(3))
  got = [tx.update(x, a, tx.init(s)) for tx in (correction.reset_correction(),
                                                 correction.blend_correction(0.0))]  # fmt: skip
  for u, v in zip(jax.tree.leaves(got[0]), jax.tree.leaves(got[1])):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
  np.testing.assert_array_equal(np.asarray(got[0][0]['w']), np.asarray(a['w']))


def test_state_round_trips_through_a_checkpoint_tree():
  for tx in (correction.outer_sgd_correction(0.7, 0.9, True),
             correction.outer_sgd_correction(0.7, 0.0, True), correction.blend_correction(0.3),
             correction.decoupled_correction(), correction.eager_correction(0.5, 1.0),
             correction.anchor_correction(0.6, 0.7)):  # fmt: skip
    state = tx.init({'w': jnp.arange(3.0)})
    state = tx.update({'w': jnp.ones(3)}, {'w': jnp.zeros(3)}, state, 0.5)[1]
    back = correction.from_tree(correction.to_tree(state), tx)
    assert jax.tree.structure(back) == jax.tree.structure(state)
    for u, v in zip(jax.tree.leaves(back), jax.tree.leaves(state)):
      np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


@pytest.mark.parametrize(
  'make,match',
  [
    (lambda: correction.blend_correction(1.5), 'alpha=1.5'),
    (lambda: correction.outer_sgd_correction(0.0, 0.9, True), 'learning_rate=0.0'),
    (lambda: correction.outer_sgd_correction(0.7, 1.0, True), 'momentum=1.0'),
    (lambda: correction.eager_correction(0.0, 0.0), 'lambda=0.0'),
    (lambda: correction.eager_correction(1.5, 0.0), 'lambda=1.5'),
    (lambda: correction.eager_correction(0.5, -1.0), 'gamma=-1.0'),
    (lambda: correction.anchor_correction(1.1, 0.0), 'pull=1.1'),
    (lambda: correction.anchor_correction(0.5, 1.0), 'momentum=1.0'),
  ],
)
def test_bad_hyperparameters_refused(make, match):
  with pytest.raises(ValueError, match=match):
    make()

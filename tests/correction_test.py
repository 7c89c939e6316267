"""The decoupled correction transform, by hand."""

import jax.numpy as jnp
import numpy as np

from cocod_jax import correction
from cocod_jax import schedules


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
  assert schedules.worker_weights([32, 64, 32]) == [0.25, 0.5, 0.25]

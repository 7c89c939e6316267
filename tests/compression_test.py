"""The compressed snapshot allreduce's rounding (compression.py) by hand, and the one-host
cluster's compressed average against a NumPy transcription of the module docstring."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from cocod_jax.cluster import compression
from cocod_jax.cluster import one_host


def test_int8_by_hand():
  # max|v| = 1.27, so scale = 0.01: 0.5 -> 50, -1.27 -> -127, 0.004 -> 0 (rounds to 0),
  # 0.006 -> 1; all zeros keep scale 1.
  q, scale = compression.encode_leaf(jnp.array([0.5, -1.27, 0.004, 0.006], jnp.float32), 'int8')
  assert np.asarray(q).tolist() == [50, -127, 0, 1] and q.dtype == jnp.int8
  np.testing.assert_allclose(float(scale), 0.01, rtol=1e-6)
  decoded = compression.decode_leaf(q, scale, 'int8')
  np.testing.assert_allclose(np.asarray(decoded), [0.5, -1.27, 0.0, 0.01], rtol=1e-6)
  q, scale = compression.encode_leaf(jnp.zeros(3, jnp.float32), 'int8')
  assert float(scale) == 1.0 and not np.asarray(q).any()


def test_bfloat16_rounds_to_nearest_even():
  # bfloat16 keeps 8 bits of mantissa: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 and rounds
  # to the even one, 1; 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
  v = jnp.array([1 + 2**-8, 1 + 3 * 2**-8], jnp.float32)
  q, _ = compression.encode_leaf(v, 'bfloat16')
  assert np.asarray(q.astype(jnp.float32)).tolist() == [1.0, 1 + 2**-6]


def test_error_feedback_sends_the_sum_of_the_updates():
  # Rounds of the same update u: without feedback every round loses the same rounding; with
  # it what was sent over n rounds is n u minus the last error, which stays below a step.
  codec = compression.Codec('int8', True)
  u = [jnp.array([1.0, 0.013, -0.0029], jnp.float32)]
  sent, error = np.zeros(3), None
  for _ in range(50):
    _, _, decoded, error = compression.encode(u, error, codec)
    sent += np.asarray(decoded[0], np.float64)
  np.testing.assert_allclose(sent + np.asarray(error[0]), 50 * np.asarray(u[0]), rtol=1e-5)
  assert np.abs(np.asarray(error[0])).max() <= 1.0 / 127
  _, _, once, _ = compression.encode(u, None, compression.Codec('int8', False))
  assert float(once[0][2]) == 0.0  # -0.0029 / (1 / 127) = -0.37: 0 every round, 0.145 lost.


def _transcribed(s, r, w, group, dtype):
  """The module docstring in NumPy: a = r + sum over senders of D(Q(sum w_i (s_i - r)))."""
  total = np.zeros(s.shape[1:], np.float32)
  for g in range(len(s) // group):
    part = range(g * group, (g + 1) * group)
    v = np.zeros(s.shape[1:], np.float32)
    for i in part:
      v = v + np.float32(w[i]) * (s[i] - r)
    if dtype == 'int8':
      scale = np.float32(np.abs(v).max() / 127)
      d = np.clip(np.round(v / scale), -127, 127).astype(np.float32) * scale
    else:
      d = v.astype(ml_dtypes.bfloat16).astype(np.float32)
    total = total + d
  return r + total


@pytest.mark.parametrize('dtype,group', [('int8', 1), ('int8', 2), ('bfloat16', 4)])
def test_one_host_average_matches_transcription(dtype, group):
  rs = np.random.RandomState(0)
  r = rs.randn(7).astype(np.float32)
  s = (r + 0.01 * rs.randn(4, 7)).astype(np.float32)
  w = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
  codec = compression.Codec(dtype, False)
  ref = np.broadcast_to(r, s.shape)
  (average, error, stats), bad = one_host._compressed_total(
    {'a': jnp.asarray(s)}, {'a': jnp.asarray(ref)}, None, jnp.asarray(w), codec, group
  )
  want = _transcribed(s, r, w, group, dtype)
  for row in np.asarray(average['a']):
    np.testing.assert_allclose(row, want, rtol=1e-6, atol=1e-7)
  assert error is None and not np.asarray(bad).any()
  exact = (w[:, None] * s).sum(0)
  err2 = float(np.sum((want - exact) ** 2))
  np.testing.assert_allclose(float(stats[0]), err2, rtol=1e-3, atol=1e-12)
  assert 0 < err2 < 1e-3 * float(stats[1])  # The rounding is small against the update.

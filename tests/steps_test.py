"""The local optimizer (`steps.optimizer`, optax) against the PyTorch-form SGD written by hand."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from cocod_jax import steps


def _config(momentum, weight_decay):
  return ml_collections.ConfigDict(
    dict(optimizer=dict(momentum=momentum, weight_decay=weight_decay))
  )


def test_optimizer_is_the_papers_sgd_bit_for_bit():
  # d = g + wd p; m <- mu m + d; p <- p - lr m, for two steps from a non-zero momentum.
  rs = np.random.RandomState(0)
  params = {'w': jnp.asarray(rs.randn(5, 3), jnp.float32), 'b': jnp.asarray(rs.randn(3))}
  momentum = jax.tree.map(lambda p: 0.3 * p, params)
  for mu, wd in ((0.9, 1e-4), (0.0, 0.0)):
    p, m, q, n = params, momentum, params, momentum
    tx = lambda lr, mu=mu, wd=wd: steps.optimizer(_config(mu, wd), lr)
    for lr in (jnp.float32(0.1), jnp.float32(0.0371)):
      g = jax.tree.map(lambda x: jnp.sin(x * 7.0), p)
      d = jax.tree.map(lambda g_, p_: g_ + wd * p_, g, p)
      m = jax.tree.map(lambda m_, d_: mu * m_ + d_, m, d)
      p = jax.tree.map(lambda p_, m_: p_ - lr * m_, p, m)
      state = optax.tree_utils.tree_set(tx(lr).init(q), trace=n)
      updates, state = tx(lr).update(jax.tree.map(lambda x: jnp.sin(x * 7.0), q), state, q)
      q, n = optax.apply_updates(q, updates), optax.tree_utils.tree_get(state, 'trace')
      for a, b in zip(jax.tree.leaves((p, m)), jax.tree.leaves((q, n))):
        np.testing.assert_array_equal(a, b)

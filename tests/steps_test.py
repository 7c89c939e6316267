"""The local optimizer (`steps.optimizer`, optax): SGD against the PyTorch form written by hand
(bit for bit), Adam against PyTorch's update rule, and the buffers the train state keeps."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from cocod_jax import steps


def _config(momentum, weight_decay, name='sgd'):
  return ml_collections.ConfigDict(
    dict(optimizer=dict(name=name, momentum=momentum, weight_decay=weight_decay))
  )


def test_optimizer_is_the_papers_sgd_bit_for_bit():
  # d = g + wd p; m <- mu m + d; p <- p - lr m, for two steps from a non-zero momentum.
  rs = np.random.RandomState(0)
  params = {'w': jnp.asarray(rs.randn(5, 3), jnp.float32), 'b': jnp.asarray(rs.randn(3))}
  momentum = jax.tree.map(lambda p: 0.3 * p, params)
  for mu, wd in ((0.9, 1e-4), (0.0, 0.0)):
    p, m, q, n = params, momentum, params, momentum
    tx = lambda lr, mu=mu, wd=wd: steps.optimizer(_config(mu, wd).optimizer, lr)
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


def test_adam_is_pytorchs_adam():
  # Three steps with weight decay, through the buffers the train state keeps (the step counter
  # is Adam's count), against torch.optim.Adam's rule in float64: d = g + wd p;
  # m <- b1 m + (1 - b1) d; v <- b2 v + (1 - b2) d^2; p <- p - lr (m / (1 - b1^t)) /
  # (sqrt(v / (1 - b2^t)) + eps).
  config = _config(0.0, 1e-2, 'adam')
  b1, b2 = steps.ADAM_BETAS
  grad = lambda p: {'w': p['w'] * np.array([1.0, 3.0, 0.1]), 'b': 4 * p['b'] ** 3}
  params = {'w': np.array([1.0, -2.0, 0.5]), 'b': np.array(0.3)}
  ref, m, v = (
    params,
    {k: 0.0 * x for k, x in params.items()},
    {k: 0.0 * x for k, x in params.items()},
  )
  ours = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
  buffers = {'mu': jax.tree.map(jnp.zeros_like, ours), 'nu': jax.tree.map(jnp.zeros_like, ours)}
  lr = 0.01
  for t in range(1, 4):
    d = {k: grad(ref)[k] + 1e-2 * ref[k] for k in ref}
    m = {k: b1 * m[k] + (1 - b1) * d[k] for k in ref}
    v = {k: b2 * v[k] + (1 - b2) * d[k] ** 2 for k in ref}
    denom = {k: np.sqrt(v[k] / (1 - b2**t)) + steps.ADAM_EPS for k in ref}
    ref = {k: ref[k] - lr * (m[k] / (1 - b1**t)) / denom[k] for k in ref}
    tx = steps.optimizer(config.optimizer, jnp.float32(lr))
    state = optax.tree_utils.tree_set(
      tx.init(ours), **steps.buffers_in('adam', buffers, jnp.int32(t - 1))
    )
    g = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), grad(jax.device_get(ours)))
    updates, state = tx.update(g, state, ours)
    ours, buffers = optax.apply_updates(ours, updates), steps.buffers_out('adam', state)
  for k in ref:
    np.testing.assert_allclose(np.asarray(ours[k]), ref[k], rtol=2e-5)


def test_adam_state_holds_both_moments():
  from cocod_jax import models

  model = models.get_model('mlp1d', 10)
  sgd = steps.create_train_state(model, jax.random.PRNGKey(0), (40, 1), 0)
  adam = steps.create_train_state(model, jax.random.PRNGKey(0), (40, 1), 0, 'adam')
  assert jax.tree.structure(sgd.momentum) == jax.tree.structure(sgd.params)
  assert set(adam.momentum) == {'mu', 'nu'}
  assert jax.tree.structure(adam.momentum['nu']) == jax.tree.structure(adam.params)


def test_unknown_optimizer_refused():
  from cocod_jax import validation as config_validation
  from configs import test as test_config

  c = test_config.get_config()
  c.optimizer.name = 'rmsprop'
  assert config_validation.errors(c) == [
    "optimizer.name='rmsprop' is invalid; allowed: ['sgd', 'adam']"
  ]

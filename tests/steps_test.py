"""The optimizers of the step functions: Adam (for MNIST-1D's published recipe) against optax."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from cocod_jax import steps


def test_adam_is_pytorchs_adam():
  # Three steps on a small quadratic: our moments and bias-corrected direction against optax's
  # adam (the same update rule as torch.optim.Adam without weight decay).
  params = {'w': jnp.array([1.0, -2.0, 0.5]), 'b': jnp.array(0.3)}
  grad_fn = jax.grad(lambda p: jnp.sum(p['w'] ** 2 * jnp.array([1.0, 3.0, 0.1])) + p['b'] ** 4)
  lr = 0.01
  zeros = jax.tree.map(jnp.zeros_like, params)
  ours, moments = params, {'mu': zeros, 'nu': zeros}
  opt = optax.adam(lr, b1=steps.ADAM_BETAS[0], b2=steps.ADAM_BETAS[1], eps=steps.ADAM_EPS)
  theirs, state = params, opt.init(params)
  for t in range(1, 4):
    moments = steps.adam_moments(moments, grad_fn(ours))
    direction = steps.adam_direction(moments, jnp.int32(t))
    ours = jax.tree.map(lambda p, u: p - lr * u, ours, direction)
    updates, state = opt.update(grad_fn(theirs), state)
    theirs = optax.apply_updates(theirs, updates)
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_adam_state_holds_both_moments():
  from cocod_jax import models

  model = models.get_model('mlp1d', 10)
  sgd = steps.create_train_state(model, jax.random.PRNGKey(0), (40, 1), 0)
  adam = steps.create_train_state(model, jax.random.PRNGKey(0), (40, 1), 0, 'adam')
  assert jax.tree.structure(sgd.momentum) == jax.tree.structure(sgd.params)
  assert set(adam.momentum) == {'mu', 'nu'}
  assert jax.tree.structure(adam.momentum['nu']) == jax.tree.structure(adam.params)


def test_unknown_optimizer_refused():
  from cocod_jax import config_validation
  from configs import test as test_config

  c = test_config.get_config()
  c.optimizer.name = 'rmsprop'
  assert config_validation.errors(c) == [
    "optimizer.name='rmsprop' is invalid; allowed: ['sgd', 'adam']"
  ]

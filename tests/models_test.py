"""Model shapes and one training step of the real models (tiny batches: they are slow on CPU)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cocod_jax import models


@pytest.mark.parametrize('name,params_m', [('resnet18', 11.17), ('vgg16', 14.73)])
def test_real_models_shape_and_one_step(name, params_m):
  model = models.get_model(name, 10)
  x = jnp.ones((2, 32, 32, 3))
  v = model.init(jax.random.PRNGKey(0), x, train=False)
  n_params = sum(a.size for a in jax.tree.leaves(v['params'])) / 1e6
  # The CIFAR variants (docs/design-notes.md figures).
  assert abs(n_params - params_m) < 0.05, n_params
  assert 'batch_stats' in v

  def loss(p):
    out, new = model.apply(
      {'params': p, 'batch_stats': v['batch_stats']}, x, train=True, mutable=['batch_stats']
    )
    return jnp.mean(out**2), new

  (loss_value, new), g = jax.value_and_grad(loss, has_aux=True)(v['params'])
  assert np.isfinite(float(loss_value))
  assert jax.tree.structure(g) == jax.tree.structure(v['params'])
  changed = jax.tree.leaves(
    jax.tree.map(lambda a, b: bool(jnp.any(a != b)), new['batch_stats'], v['batch_stats'])
  )
  assert any(changed)
  assert model.apply(v, x, train=False).shape == (2, 10)


def test_mask_keeps_padding_out_of_batchnorm():
  # Padded rows (mask 0) must not move the running statistics.
  model = models.get_model('cnn', 3)
  x = jax.random.normal(jax.random.PRNGKey(1), (4, 8, 8, 1))
  v = model.init(jax.random.PRNGKey(0), x, train=False)
  run = lambda xx, m: model.apply(v, xx, train=True, mask=m, mutable=['batch_stats'])[1]
  a = run(x[:2], None)
  b = run(jnp.concatenate([x[:2], 100 * x[2:]]), jnp.array([1.0, 1.0, 0.0, 0.0]))
  for u, w in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(u, w, rtol=1e-4, atol=1e-5)


def test_linear_starts_at_zero():
  v = models.get_model('linear', 4).init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
  assert all(float(jnp.abs(a).max()) == 0.0 for a in jax.tree.leaves(v))


def test_unknown_model_lists_known():
  with pytest.raises(ValueError, match='resnet18'):
    models.get_model('resnet50', 10)


@pytest.mark.parametrize(
  'name,params,has_stats',
  # The authors' ConvBase (5210 with its convolutions' biases; BatchNorm's offsets replace them)
  # and MLPBase of hidden width 100.
  [('cnn1d', 5285, True), ('mlp1d', 15210, False)],
)
def test_mnist1d_stand_ins(name, params, has_stats):
  model = models.get_model(name, 10)
  x = jax.random.normal(jax.random.PRNGKey(1), (4, 40, 1))
  v = model.init(jax.random.PRNGKey(0), x, train=False)
  assert sum(a.size for a in jax.tree.leaves(v['params'])) == params
  assert bool(v.get('batch_stats')) == has_stats
  out, new = model.apply(v, x, train=True, mutable=['batch_stats'])
  assert out.shape == (4, 10)
  if has_stats:  # Training moves the statistics the algorithms average.
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), new['batch_stats'], v['batch_stats'])
    assert all(jax.tree.leaves(moved))

"""Flax models: CIFAR ResNet18 and VGG16, small CNNs and MLPs for CPU runs (2-D for the 8x8 digits,
1-D for MNIST-1D), and zero-init linear models (one on BatchNorm-standardised inputs).

Every model takes `(x, train, mask)`; `mask` (one 0/1 weight per example, or None) keeps padded
examples out of BatchNorm statistics, so workers with unequal batch sizes can share one shape.
"""

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from cocod_jax.config import errors


def _conv_bn(x, features, train, mask, kernel=3, strides=1):
  """A bias-free convolution and its BatchNorm, created in the calling module's scope (so that
  their parameters keep the names `Conv_<i>`, `BatchNorm_<i>` of the module that calls this)."""
  pad = 1 if kernel == 3 else 'SAME'
  x = nn.Conv(features, (kernel, kernel), strides=strides, padding=pad, use_bias=False)(x)
  return nn.BatchNorm(use_running_average=not train, momentum=0.9)(x, mask=_bn_mask(mask, x))


class _BNReLUConv(nn.Module):
  features: int
  strides: int = 1

  @nn.compact
  def __call__(self, x, train, mask):
    return nn.relu(_conv_bn(x, self.features, train, mask, strides=self.strides))


def _bn_mask(mask, x):
  if mask is None:
    return None
  return jnp.broadcast_to(mask.reshape((-1,) + (1,) * (x.ndim - 1)) > 0, x.shape)


class BasicBlock(nn.Module):
  """ResNet basic block (two 3x3 convolutions) with a projection shortcut when the shape changes."""

  features: int
  strides: int = 1

  @nn.compact
  def __call__(self, x, train, mask):
    y = nn.relu(_conv_bn(x, self.features, train, mask, strides=self.strides))
    y = _conv_bn(y, self.features, train, mask)
    if x.shape != y.shape:
      x = _conv_bn(x, self.features, train, mask, kernel=1, strides=self.strides)
    return nn.relu(x + y)


class ResNet18(nn.Module):
  """CIFAR ResNet18: 3x3 stem, no max-pool, four stages of two basic blocks."""

  num_classes: int
  stage_features: Sequence[int] = (64, 128, 256, 512)

  @nn.compact
  def __call__(self, x, train=False, mask=None):
    x = _BNReLUConv(self.stage_features[0])(x, train, mask)
    for i, f in enumerate(self.stage_features):
      x = BasicBlock(f, strides=1 if i == 0 else 2)(x, train, mask)
      x = BasicBlock(f)(x, train, mask)
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.num_classes)(x)


VGG16_LAYOUT = (
  64,
  64,
  'M',
  128,
  128,
  'M',
  256,
  256,
  256,
  'M',
  512,
  512,
  512,
  'M',
  512,
  512,
  512,
  'M',
)


class VGG16(nn.Module):
  """VGG16 with BatchNorm and a CIFAR-sized classifier (one dense layer on the 512 features)."""

  num_classes: int

  @nn.compact
  def __call__(self, x, train=False, mask=None):
    for v in VGG16_LAYOUT:
      if v == 'M':
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
      else:
        x = _BNReLUConv(v)(x, train, mask)
    x = x.reshape((x.shape[0], -1))
    return nn.Dense(self.num_classes)(x)


class SmallCNN(nn.Module):
  """Two convolutions with BatchNorm, global pooling and a dense layer: fast on a CPU."""

  num_classes: int

  @nn.compact
  def __call__(self, x, train=False, mask=None):
    x = _BNReLUConv(32)(x, train, mask)
    x = _BNReLUConv(64, strides=2)(x, train, mask)
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.num_classes)(x)


class _TwoReLUMLP(nn.Module):
  """Flatten, two ReLU layers of `width` (the second added to the first when `residual`) and a
  dense output: the body of MLP and MLP1D, which differ only in their defaults."""

  num_classes: int
  width: int
  residual: bool

  @nn.compact
  def __call__(self, x, train=False, mask=None):
    x = x.reshape((x.shape[0], -1))
    h = nn.relu(nn.Dense(self.width)(x))
    g = nn.relu(nn.Dense(self.width)(h))
    return nn.Dense(self.num_classes)(h + g if self.residual else g)


class MLP(_TwoReLUMLP):
  """Two wide ReLU layers (2.1M parameters on 64 features): little compute per parameter, so the
  allreduce of the model is large next to a step, as in the paper's ResNet18 runs (benchmarks)."""

  width: int = 1400
  residual: bool = False


class CNN1D(nn.Module):
  """The MNIST-1D CNN (the authors' `ConvBase`: three convolutions of 25 channels, kernels 5, 3,
  3, stride 2, padding 1, ReLU, then one dense layer on the 5 x 25 flattened features), with
  BatchNorm after each convolution: it stands in for ResNet18, whose BatchNorm statistics the
  algorithms average with the parameters (`algorithm.average_batch_stats`), so the stand-in
  exercises that too. Inputs are [batch, length, 1] (length 40: 5.3k parameters)."""

  num_classes: int
  channels: int = 25

  @nn.compact
  def __call__(self, x, train=False, mask=None):
    for kernel in (5, 3, 3):
      x = nn.Conv(self.channels, (kernel,), strides=2, padding=((1, 1),), use_bias=False)(x)
      x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x, mask=_bn_mask(mask, x))
      x = nn.relu(x)
    x = x.reshape((x.shape[0], -1))
    return nn.Dense(self.num_classes)(x)


class MLP1D(_TwoReLUMLP):
  """The MNIST-1D MLP (the authors' `MLPBase`): a ReLU layer of `width`, a second one added to
  it as a residual, a dense output; it stands in for VGG16 (no BatchNorm, as the original)."""

  width: int = 100
  residual: bool = True


class Linear(nn.Module):
  """Flatten and one dense layer, kernel and bias initialised to zero (for exact-math tests)."""

  num_classes: int

  @nn.compact
  def __call__(self, x, train=False, mask=None):
    x = x.reshape((x.shape[0], -1))
    return nn.Dense(
      self.num_classes, kernel_init=nn.initializers.zeros, bias_init=nn.initializers.zeros
    )(x)


class LinearBN(nn.Module):
  """The linear model on its inputs standardised by BatchNorm without scale or bias: nothing to
  learn before the dense layer, yet BatchNorm running statistics to average or keep (the smallest
  model for the float64 reference of their averaging, tests/reference.py)."""

  num_classes: int

  @nn.compact
  def __call__(self, x, train=False, mask=None):
    x = x.reshape((x.shape[0], -1))
    norm = nn.BatchNorm(
      use_running_average=not train, momentum=0.9, use_scale=False, use_bias=False
    )
    x = norm(x, mask=_bn_mask(mask, x))
    zeros = nn.initializers.zeros
    return nn.Dense(self.num_classes, kernel_init=zeros, bias_init=zeros)(x)


MODELS = {
  'resnet18': ResNet18,
  'vgg16': VGG16,
  'cnn': SmallCNN,
  'mlp': MLP,
  'cnn1d': CNN1D,
  'mlp1d': MLP1D,
  'linear': Linear,
  'linear_bn': LinearBN,
}


def get_model(name: str, num_classes: int) -> nn.Module:
  """Returns the model called `name`; unknown names raise ValueError listing the known ones."""
  if name not in MODELS:
    raise ValueError(f'model.name={name!r} is unknown; known models: {sorted(MODELS)}')
  return MODELS[name](num_classes=num_classes)


# Models that start with a convolution: their examples must be images (height, width, channels).
IMAGE_MODELS = ('resnet18', 'vgg16', 'cnn')


def check_input(model: nn.Module, name: str, shape: tuple, where: str) -> None:
  """Refuses a model (`model.name` `name`) that cannot take examples of `shape` (from `where`,
  the data named as the config names it), found by building it on that shape (`jax.eval_shape`:
  no compute), before anything is written.

  Raises:
    errors.UsageError: one line naming the model, the data and the examples' shape.
  """
  if name in IMAGE_MODELS and len(shape) != 3:
    raise errors.UsageError(
      f'model.name={name!r} is invalid for {where}: its examples have shape {shape}, and this '
      'convolutional model needs images (height, width, channels); allowed: linear or mlp for '
      'flat features, or an .npz of images'
    )
  try:
    jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, *shape))))
  except Exception as e:  # pylint: disable=broad-except
    first = (str(e).strip().splitlines() or [''])[0][:160]
    raise errors.UsageError(
      f'model.name={name!r} is invalid for {where}: it cannot take examples of shape {shape} '
      f'({type(e).__name__}: {first}); allowed: a model for this data, or data for this model'
    ) from None

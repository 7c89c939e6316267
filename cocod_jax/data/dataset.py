"""What every source of data gives: a Dataset of in-memory arrays, or a DataError."""

import dataclasses

import numpy as np

from cocod_jax.config import errors


class DataError(errors.UsageError):
  """A dataset that cannot be used as configured (the message names the field)."""


@dataclasses.dataclass
class Dataset:
  """Arrays of one dataset. `x_*` are raw (uint8 images for CIFAR); `normalize` says how to scale.

  Attributes:
    normalize: 'cifar' (uint8 -> per-channel standardised) or 'none' (features used as given).
    augment_ok: whether random crop + flip makes sense (32x32 images).
  """

  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int
  normalize: str
  augment_ok: bool


def split_features(x, y, train: int, num_classes: int) -> Dataset:
  """A Dataset of features used as given (no normalisation, no augmentation) whose first `train`
  examples of `x`, `y` are the training set and the rest the test set."""
  return Dataset(
    x[:train],
    y[:train],
    x[train:],
    y[train:],
    num_classes=num_classes,
    normalize='none',
    augment_ok=False,
  )


def cause(e):
  """`Type: first line` of exception `e`, its module named when not a builtin (zlib.error)."""
  kind = type(e).__name__
  if type(e).__module__ != 'builtins':
    kind = f'{type(e).__module__}.{kind}'
  return f'{kind}: {(str(e).strip().splitlines() or [""])[0]}'

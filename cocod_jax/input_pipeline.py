"""Datasets as in-memory arrays, and their split into one disjoint shard per worker.

The whole training set is small enough to live in device memory, so the pipeline only loads
arrays once; batches are gathered and augmented inside the jitted step (see `train.py`).
"""

import dataclasses
import os

import numpy as np

DATASETS = ('cifar10', 'cifar100', 'digits', 'npz')
NPZ_KEYS = ('x_train', 'y_train', 'x_test', 'y_test')
# Per-channel CIFAR statistics (of the training set) used to normalise images inside the step.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


class DataError(ValueError):
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


def _load_tfds(name, data_dir):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  tf.config.set_visible_devices([], 'GPU')  # TF must not take the GPU memory JAX will use.
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  builder = tfds.builder(name, data_dir=data_dir or None)
  builder.download_and_prepare()
  out = {}
  for split in ('train', 'test'):
    # Iterate in batches: `batch_size=-1` aborts under `tfds.testing.mock_data` (NOTES.md).
    xs, ys = [], []
    for ex in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False).batch(4096)):
      xs.append(ex['image'])
      ys.append(ex['label'])
    out[split] = (np.concatenate(xs).astype(np.uint8), np.concatenate(ys).astype(np.int32))
  num_classes = builder.info.features['label'].num_classes
  return Dataset(
    *out['train'], *out['test'], num_classes=num_classes, normalize='cifar', augment_ok=True
  )


def _load_digits():
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top

  d = load_digits()  # 1797 8x8 images bundled with scikit-learn: no network needed.
  x = (d.images / 16.0).astype(np.float32)[..., None]
  y = d.target.astype(np.int32)
  perm = np.random.RandomState(0).permutation(len(x))  # The fixed train/test split.
  tr, te = perm[:1500], perm[1500:]
  return Dataset(x[tr], y[tr], x[te], y[te], num_classes=10, normalize='none', augment_ok=False)


def _load_npz(path):
  if not path:
    raise DataError(
      f"dataset.path='' but dataset.name='npz' needs a .npz file with arrays {list(NPZ_KEYS)}"
    )
  if not os.path.isfile(path):
    raise DataError(f'dataset.path={path!r} does not exist (dataset.name=npz)')
  with np.load(path) as f:
    missing = [k for k in NPZ_KEYS if k not in f.files]
    if missing:
      raise DataError(
        f'dataset.path={path!r} lacks arrays {missing}; it must hold {list(NPZ_KEYS)}'
      )
    arrays = {k: f[k] for k in NPZ_KEYS}
  for split in ('train', 'test'):
    x, y = arrays['x_' + split], arrays['y_' + split]
    if len(x) != len(y):
      raise DataError(f'dataset.path={path!r}: x_{split} has {len(x)} rows, y_{split} {len(y)}')
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
      raise DataError(
        f'dataset.path={path!r}: y_{split} must be a 1-D integer array, got '
        f'{y.dtype}{list(y.shape)}'
      )
  y_all = np.concatenate([arrays['y_train'], arrays['y_test']])
  if y_all.min() < 0:
    raise DataError(
      f'dataset.path={path!r}: label {int(y_all.min())} out of range; labels must be '
      '0..num_classes-1'
    )
  return Dataset(
    arrays['x_train'].astype(np.float32),
    arrays['y_train'].astype(np.int32),
    arrays['x_test'].astype(np.float32),
    arrays['y_test'].astype(np.int32),
    num_classes=int(y_all.max()) + 1,
    normalize='none',
    augment_ok=False,
  )


def load_dataset(name: str, path: str = '', num_classes: int = 0, data_dir: str = '') -> Dataset:
  """Loads dataset `name` ('cifar10', 'cifar100', 'digits' or 'npz' from `path`).

  Args:
    name: one of DATASETS.
    path: TFDS data_dir for CIFAR, the file for 'npz'.
    num_classes: for 'npz', the number of classes (0 means max label + 1); labels must be below it.

  Returns:
    a Dataset.
  """
  if name in ('cifar10', 'cifar100'):
    ds = _load_tfds(name, data_dir)
  elif name == 'digits':
    ds = _load_digits()
  elif name == 'npz':
    ds = _load_npz(path)
  else:
    raise DataError(f'dataset.name={name!r} is unknown; allowed: {list(DATASETS)}')
  if num_classes:
    top = int(max(ds.y_train.max(), ds.y_test.max()))
    if top >= num_classes:
      raise DataError(
        f'dataset.num_classes={num_classes} but the data has label {top}; labels '
        f'must be in 0..{num_classes - 1}'
      )
    ds.num_classes = num_classes
  return ds


def shard_sizes(num_examples: int, weights) -> list[int]:
  """Sizes of contiguous shards proportional to `weights`, summing to at most `num_examples`."""
  w = np.asarray(weights, dtype=np.float64)
  return [int(s) for s in np.floor(num_examples * w / w.sum())]


def shard_indices(num_examples: int, weights, shuffle: bool, seed: int) -> list[np.ndarray]:
  """Disjoint index sets, one per worker; unshuffled, worker i gets the i-th slice in order."""
  order = (
    np.random.RandomState(seed).permutation(num_examples) if shuffle else np.arange(num_examples)
  )
  sizes = shard_sizes(num_examples, weights)
  starts = np.cumsum([0] + sizes)
  return [order[starts[i] : starts[i + 1]] for i in range(len(sizes))]

"""Datasets as in-memory arrays, and their split into one disjoint shard per worker.

The whole training set is small enough to live in device memory, so the pipeline only loads
arrays once; batches are gathered and augmented inside the jitted step (see `train.py`). One
module a source: cifar.py (TFDS), mnist1d.py (generated, cached), small.py (digits,
clusters100), npz.py (the user's file); dataset.py the Dataset they all give.
"""

import numpy as np

from cocod_jax.data import cifar
from cocod_jax.data import mnist1d as mnist1d_data
from cocod_jax.data import npz
from cocod_jax.data import small
from cocod_jax.data.dataset import DataError
from cocod_jax.data.dataset import Dataset

DATASETS = ('cifar10', 'cifar100', 'digits', 'clusters100', 'npz') + tuple(
  mnist1d_data.MNIST1D_VARIANTS
)


def load_dataset(
  name: str,
  path: str = '',
  num_classes: int = 0,
  data_dir: str = '',
  train_examples: int = 0,
  test_examples: int = 0,
) -> Dataset:
  """Loads dataset `name` ('cifar10', 'cifar100', 'digits', 'clusters100', 'npz' from `path`, or
  an MNIST-1D variant: 'mnist1d', 'mnist1d_large', 'mnist1d_hard').

  CIFAR is read from a prepared TFDS directory only; this never downloads (see `prepare`).
  MNIST-1D is generated once and then read from its cache (`load_mnist1d`).

  Args:
    name: one of DATASETS.
    path: the .npz file of name='npz' (dataset.path).
    num_classes: the number of classes (0 means max label + 1); labels must be below it.
    data_dir: the TFDS data directory of CIFAR (config.data_dir; see `resolve_data_dir`).
    train_examples: MNIST-1D only: training examples (0: the variant's own number).
    test_examples: MNIST-1D only: test examples (0: the variant's own number).

  Returns:
    a Dataset.

  Raises:
    DataError: one line naming the field or the file, and what was expected.
  """
  if name in cifar.TFDS_DATASETS:
    ds = cifar.load_tfds(name, data_dir)
  elif name == 'digits':
    ds = small.load_digits()
  elif name == 'clusters100':
    ds = small.load_clusters100()
  elif name == 'npz':
    ds = npz.load_npz(path, num_classes)
  elif name in mnist1d_data.MNIST1D_VARIANTS:
    ds = mnist1d_data.load_mnist1d(name, train_examples, test_examples)
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


def load(d, data_dir: str = '') -> Dataset:
  """Loads the dataset of the config's `dataset` part (`d`; CIFAR from `data_dir`).

  Raises:
    DataError: the data cannot be loaded as configured (one line naming the field or the file).
  """
  return load_dataset(d.name, d.path, d.num_classes, data_dir, d.train_examples, d.test_examples)


def check_batches(num_examples: int, sizes, batch_size) -> None:
  """Refuses batches larger than the shards of `num_examples` proportional to them (`sizes`:
  every worker's M_i, from the config's `batch_size`), naming the batch and what fits."""
  for i, (m, s) in enumerate(zip(sizes, shard_sizes(num_examples, sizes))):
    if m > s:
      raise DataError(
        f'batch_size={batch_size!r} is invalid: worker {i} would use batch {m} but its shard has '
        f'only {s} examples; allowed: a batch size <= {s}'
      )


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

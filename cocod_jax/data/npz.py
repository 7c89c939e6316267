"""The user's own `.npz` (x_train, y_train, x_test, y_test), every problem refused with one line
naming the file and what was expected."""

import os
import zipfile
import zlib

import numpy as np

from cocod_jax.data.dataset import DataError
from cocod_jax.data.dataset import Dataset
from cocod_jax.data.dataset import cause

NPZ_KEYS = ('x_train', 'y_train', 'x_test', 'y_test')
_NPY_MAGIC = b'\x93NUMPY'
_ZIP_MAGICS = (b'PK\x03\x04', b'PK\x05\x06')  # A zip's first entry, or an empty zip.
_NPZ_EXPECTED = f'a .npz archive written by np.savez with arrays {list(NPZ_KEYS)}'


def _read_npz(path):
  """The four arrays of `path`, or a DataError saying why the file is not a usable archive."""
  if not os.path.exists(path):
    raise DataError(f'dataset.path={path!r} does not exist (dataset.name=npz)')
  if not os.path.isfile(path):
    raise DataError(f'dataset.path={path!r} is not a file; expected {_NPZ_EXPECTED}')
  try:
    with open(path, 'rb') as fh:
      head = fh.read(len(_NPY_MAGIC))
  except OSError as e:
    raise DataError(f'dataset.path={path!r} cannot be read ({e.strerror or e})') from None
  # Told apart up front: numpy would take any other file for a pickle and say only that.
  if head.startswith(_NPY_MAGIC):
    raise DataError(
      f'dataset.path={path!r} is a .npy file (a single array), not a .npz archive; expected '
      f'{_NPZ_EXPECTED}'
    )
  if not head.startswith(_ZIP_MAGICS):
    raise DataError(
      f'dataset.path={path!r} is not a .npz archive (not a zip file); expected {_NPZ_EXPECTED}'
    )
  if not zipfile.is_zipfile(path):  # The zip's directory sits at its end: a cut file lacks it.
    raise DataError(
      f'dataset.path={path!r} is a truncated or damaged zip (its central directory is missing); '
      f'expected {_NPZ_EXPECTED}'
    )
  key = None
  try:
    # Never allow_pickle: an object array would run arbitrary code from the file.
    with np.load(path, allow_pickle=False) as f:
      missing = [k for k in NPZ_KEYS if k not in f.files]
      if missing:
        raise DataError(
          f'dataset.path={path!r} lacks arrays {missing}; it must hold {list(NPZ_KEYS)}'
        )
      arrays = {}
      for key in NPZ_KEYS:
        arrays[key] = f[key]
  except DataError:
    raise
  except ValueError as e:
    if key and 'allow_pickle' in str(e):  # numpy's refusal of an object (pickled) array.
      raise DataError(
        f'dataset.path={path!r}: {key} is an object (pickled) array, which is never loaded; '
        'save numeric arrays (e.g. np.asarray(x, np.float32), labels as integers)'
      ) from None
    raise DataError(_damaged(path, key, e)) from None
  except (zipfile.BadZipFile, EOFError, OSError, zlib.error, KeyError) as e:
    raise DataError(_damaged(path, key, e)) from None
  return arrays


def _damaged(path, key, e):
  where = f' (reading {key})' if key else ''
  return (
    f'dataset.path={path!r} is a truncated or damaged .npz archive{where}: {cause(e)}; '
    f'expected {_NPZ_EXPECTED}'
  )


def _check_npz_shapes(a, name):
  """Numeric features of at least 2-D, 1-D integer labels, matching lengths and example shapes,
  no empty set."""
  for split in ('train', 'test'):
    x, y = a['x_' + split], a['y_' + split]
    if x.dtype.kind not in 'biuf':
      raise DataError(
        f'{name}: x_{split} has dtype {x.dtype}; features must be numeric (bool, integer or float)'
      )
    if x.ndim < 2:
      raise DataError(
        f'{name}: x_{split} has shape {list(x.shape)}; expected [examples, features...] (at '
        'least 2-D)'
      )
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
      raise DataError(
        f'{name}: y_{split} must be a 1-D integer array, got {y.dtype}{list(y.shape)} (float '
        'labels are refused even when they hold whole numbers: save y.astype(np.int64))'
      )
    if len(x) != len(y):
      raise DataError(f'{name}: x_{split} has {len(x)} rows, y_{split} {len(y)}; they must match')
  if a['x_train'].shape[1:] != a['x_test'].shape[1:]:
    raise DataError(
      f'{name}: x_train holds examples of shape {list(a["x_train"].shape[1:])} but x_test of '
      f'shape {list(a["x_test"].shape[1:])}; they must match'
    )
  for split in ('train', 'test'):
    if not len(a['x_' + split]):
      raise DataError(f'{name}: x_{split} holds no examples; the {split} set must not be empty')


def _finite_features(a, name) -> dict:
  """{split: float32 features}, refusing NaN and Inf (checked after the cast: a finite float64
  beyond float32's range turns to Inf)."""
  xs = {}
  for split in ('train', 'test'):
    with np.errstate(over='ignore', invalid='ignore'):  # Counted below instead.
      x = xs[split] = a['x_' + split].astype(np.float32)
    bad = int(x.size - np.count_nonzero(np.isfinite(x)))
    if bad:
      raise DataError(
        f'{name}: x_{split} holds {bad} NaN or Inf value(s) (as float32) of {x.size}; features '
        'must be finite'
      )
  return xs


def _check_labels(a, name, num_classes):
  for split in ('train', 'test'):
    y = a['y_' + split]  # Not empty: _check_npz_shapes refused empty sets.
    if y.min() < 0:
      raise DataError(
        f'{name}: y_{split} holds {int((y < 0).sum())} label(s) out of range below 0 (smallest '
        f'{int(y.min())}); labels must be in 0..num_classes-1'
      )
    if num_classes and y.max() >= num_classes:
      raise DataError(
        f'{name}: y_{split} holds {int((y >= num_classes).sum())} label(s) out of range for '
        f'dataset.num_classes={num_classes} (largest {int(y.max())}); labels must be in '
        f'0..{num_classes - 1}'
      )


def load_npz(path, num_classes=0):
  """Reads and checks an .npz dataset; every problem is a DataError naming the file.

  Args:
    path: the file (dataset.path).
    num_classes: dataset.num_classes; labels must be below it (0: any label >= 0).

  Returns:
    a Dataset with float32 features and int32 labels.
  """
  if not path:
    raise DataError(
      f"dataset.path='' but dataset.name='npz' needs a .npz file with arrays {list(NPZ_KEYS)}"
    )
  a = _read_npz(path)
  name = f'dataset.path={path!r}'
  _check_npz_shapes(a, name)
  xs = _finite_features(a, name)
  _check_labels(a, name, num_classes)
  top = int(max(a['y_train'].max(), a['y_test'].max()))
  return Dataset(
    xs['train'],
    a['y_train'].astype(np.int32),
    xs['test'],
    a['y_test'].astype(np.int32),
    num_classes=num_classes or top + 1,
    normalize='none',
    augment_ok=False,
  )

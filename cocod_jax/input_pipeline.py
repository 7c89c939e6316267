"""Datasets as in-memory arrays, and their split into one disjoint shard per worker.

The whole training set is small enough to live in device memory, so the pipeline only loads
arrays once; batches are gathered and augmented inside the jitted step (see `train.py`).

CIFAR comes from TFDS and is read only from a prepared TFDS data directory (`resolve_data_dir`):
loading never downloads, so a cluster without internet gets one line naming the directory and the
command that prepares it (`make data`, i.e. `cocod_jax/prepare_data.py`) instead of a hang in
download retries. `prepare` downloads where there is a network (`network_reachable`).
"""

import contextlib
import dataclasses
import logging
import os
import shlex
import socket
import threading
import urllib.parse
import urllib.request
import zipfile
import zlib

import numpy as np

from cocod_jax import errors

DATASETS = ('cifar10', 'cifar100', 'digits', 'clusters100', 'npz')
TFDS_DATASETS = ('cifar10', 'cifar100')  # Need a prepared TFDS data directory.
# Bundled with scikit-learn, made from a fixed seed, or the user's own file.
NO_PREPARATION = ('digits', 'clusters100', 'npz')
NPZ_KEYS = ('x_train', 'y_train', 'x_test', 'y_test')
# Per-channel CIFAR statistics (of the training set) used to normalise images inside the step.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
# Set to 1 to make `network_reachable` answer False without trying (tests, air-gapped clusters).
OFFLINE_ENV = 'COCOD_OFFLINE'
# The CIFAR archives' host, for when the TFDS builder lists no download URL.
DOWNLOAD_HOST = 'www.cs.toronto.edu'

_NPY_MAGIC = b'\x93NUMPY'
_ZIP_MAGICS = (b'PK\x03\x04', b'PK\x05\x06')  # A zip's first entry, or an empty zip.


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


def resolve_data_dir(data_dir: str) -> str:
  """The TFDS data directory that CIFAR is read from and prepared into.

  Args:
    data_dir: `config.data_dir`; '' falls back to $TFDS_DATA_DIR, then ~/tensorflow_datasets
      (TFDS's own default).

  Returns:
    the directory, `~` expanded and made absolute (remote URLs such as gs://... kept as given).
  """
  d = data_dir or os.environ.get('TFDS_DATA_DIR', '') or os.path.join('~', 'tensorflow_datasets')
  d = os.path.expanduser(d)
  return d if '://' in d else os.path.abspath(d)


def prepare_command(name: str, data_dir: str) -> str:
  """The `make` command that prepares a dataset.

  Args:
    name: 'cifar10' or 'cifar100'.
    data_dir: `config.data_dir` ('' resolves as in `resolve_data_dir`).

  Returns:
    `make data DATASET=name DATA_DIR=dir` with the resolved directory, quoted for a shell.
  """
  return f'make data DATASET={name} DATA_DIR={shlex.quote(resolve_data_dir(data_dir))}'


def _cause(e):
  """`Type: first line` of exception `e`, its module named when not a builtin (zlib.error)."""
  kind = type(e).__name__
  if type(e).__module__ != 'builtins':
    kind = f'{type(e).__module__}.{kind}'
  return f'{kind}: {(str(e).strip().splitlines() or [""])[0]}'


def _check_tfds_name(name):
  if name not in TFDS_DATASETS:
    raise DataError(
      f'dataset {name!r} is not a TFDS dataset; allowed: {list(TFDS_DATASETS)} '
      f'({" and ".join(NO_PREPARATION)} need no preparation)'
    )


def _hide_gpus():
  """Imports TensorFlow with no GPU visible: TF must not take the GPU memory JAX will use."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  tf.config.set_visible_devices([], 'GPU')
  return tf


def _builder(name, data_dir):
  # Constructing a builder reads only local files: TFDS 4.9 keeps its GCS lookups disabled, so
  # this neither waits on a network nor imports TensorFlow.
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  return tfds.builder(name, data_dir=resolve_data_dir(data_dir))


@contextlib.contextmanager
def _quiet_absl():
  # `is_prepared` logs a warning for every missing file; our own error says it in one line.
  logger = logging.getLogger('absl')
  level = logger.level
  logger.setLevel(logging.ERROR)
  try:
    yield
  finally:
    logger.setLevel(level)


def _builder_prepared(builder):
  with _quiet_absl():
    return builder.is_prepared()


def is_prepared(name: str, data_dir: str) -> bool:
  """Whether `name` can be loaded from `data_dir` without a download (local files only).

  Args:
    name: a dataset name; 'digits' and 'npz' need no preparation (True).
    data_dir: `config.data_dir` ('' resolves as in `resolve_data_dir`).

  Returns:
    whether the TFDS directory of `name` (data_dir/name/version) is prepared.

  Raises:
    DataError: for a name that is none of DATASETS.
  """
  if name in NO_PREPARATION:
    return True
  _check_tfds_name(name)
  return _builder_prepared(_builder(name, data_dir))


def download_url(name: str) -> str:
  """The URL TFDS downloads a dataset from (from its registered checksums; no network).

  Reading the checksums locates the builder's code through `importlib_resources`, the import
  TFDS makes lazily on its download path; a missing package fails here, without a network.

  Args:
    name: 'cifar10' or 'cifar100'.

  Returns:
    the first registered URL, or '' if the builder lists none.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  _check_tfds_name(name)
  urls = sorted(tfds.builder_cls(name).url_infos or ())
  return urls[0] if urls else ''


def _endpoint(url):
  """(host, port) a download of `url` connects to first: the proxy when one is configured."""
  parts = urllib.parse.urlsplit(url)
  host = parts.hostname or DOWNLOAD_HOST
  scheme = parts.scheme or 'https'
  proxy = urllib.request.getproxies().get(scheme)
  if proxy and not urllib.request.proxy_bypass(host):
    p = urllib.parse.urlsplit(proxy if '://' in proxy else 'http://' + proxy)
    if p.hostname:
      return p.hostname, p.port or 80
  return host, parts.port or (80 if scheme == 'http' else 443)


def network_reachable(name: str, timeout_s: float = 3.0) -> bool:
  """Whether a TCP connection to the download host of `name` opens within `timeout_s`.

  The name lookup and the connection run on a daemon thread that is given up after `timeout_s`,
  so this returns within that time even where DNS or a firewall would make a download hang.

  Args:
    name: 'cifar10' or 'cifar100'.
    timeout_s: the longest wait in seconds.

  Returns:
    False when $COCOD_OFFLINE is set (other than '' or '0') or no connection opened in time.
  """
  if os.environ.get(OFFLINE_ENV, '') not in ('', '0'):
    return False
  host, port = _endpoint(download_url(name) or f'https://{DOWNLOAD_HOST}/')
  done, opened = threading.Event(), []

  def attempt():
    try:
      with socket.create_connection((host, port), timeout=timeout_s):
        opened.append(True)
    except OSError:  # No route, refused, unknown host (gaierror), timed out: no network.
      pass
    finally:
      done.set()  # A quick refusal answers at once instead of after the whole timeout.

  threading.Thread(target=attempt, name=f'network_reachable {host}', daemon=True).start()
  done.wait(timeout_s)
  return bool(opened)


def not_prepared_message(name: str, data_dir: str, builder=None) -> str:
  """The refusal of an unprepared TFDS dataset.

  Args:
    name: 'cifar10' or 'cifar100'.
    data_dir: `config.data_dir` ('' resolves as in `resolve_data_dir`).
    builder: its TFDS builder, if already made.

  Returns:
    one line naming the dataset, the directory searched and the commands that prepare it.
  """
  root = resolve_data_dir(data_dir)
  builder = builder or _builder(name, data_dir)
  variant = builder.data_path
  others = []
  if os.path.isdir(variant.parent):  # e.g. another TFDS version's directory was copied.
    others = sorted(p.name for p in variant.parent.iterdir() if p.name != variant.name)
  found = f'; {variant.parent} holds only {others}' if others else ''
  return (
    f'dataset {name} is not prepared in {root} (looked for {variant}{found}); prepare it once '
    f'where there is internet with `{prepare_command(name, data_dir)}` (or `python -m '
    f'cocod_jax.prepare_data --dataset={name} --data_dir={shlex.quote(root)}`) and copy that '
    'directory here, or set --config.data_dir / TFDS_DATA_DIR'
  )


def prepare(name: str, data_dir: str) -> str:
  """Downloads and prepares `name` into `data_dir` (needs the network; a no-op when prepared).

  Check `network_reachable` first: without a network TFDS retries the download for minutes
  (measured: 225 s with the name lookup failing) before this fails.

  Args:
    name: 'cifar10' or 'cifar100'.
    data_dir: `config.data_dir` ('' resolves as in `resolve_data_dir`).

  Returns:
    the prepared dataset's directory (data_dir/name/version).

  Raises:
    DataError: one line naming the dataset, the directory and the cause, if preparing failed.
  """
  _check_tfds_name(name)
  _hide_gpus()
  builder = _builder(name, data_dir)
  try:
    builder.download_and_prepare()
  except Exception as e:  # pylint: disable=broad-except
    # Any failure (network, disk, checksum) leaves nothing usable; say which and where.
    raise DataError(
      f'preparing dataset {name} in {resolve_data_dir(data_dir)} failed: {_cause(e)}'
    ) from e
  return os.fspath(builder.data_path)


def example_counts(name: str, data_dir: str) -> dict[str, int]:
  """The number of examples of each split of a prepared TFDS dataset (from its metadata).

  Args:
    name: 'cifar10' or 'cifar100'.
    data_dir: `config.data_dir` ('' resolves as in `resolve_data_dir`).

  Returns:
    {split: examples}, train and test first.
  """
  _check_tfds_name(name)
  builder = _builder(name, data_dir)
  splits = builder.info.splits
  order = [s for s in ('train', 'test') if s in splits] + sorted(set(splits) - {'train', 'test'})
  return {split: int(splits[split].num_examples) for split in order}


def _load_tfds(name, data_dir):
  builder = _builder(name, data_dir)
  # Never download here: without a network TFDS would retry for minutes before failing.
  if not _builder_prepared(builder):
    raise DataError(not_prepared_message(name, data_dir, builder))
  tf = _hide_gpus()
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  out = {}
  try:
    for split in ('train', 'test'):
      # Iterate in batches: `batch_size=-1` aborts under `tfds.testing.mock_data` (NOTES.md).
      xs, ys = [], []
      for ex in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False).batch(4096)):
        xs.append(ex['image'])
        ys.append(ex['label'])
      out[split] = (np.concatenate(xs).astype(np.uint8), np.concatenate(ys).astype(np.int32))
  except (OSError, ValueError, KeyError, tf.errors.OpError) as e:
    # A partial copy (missing or cut record files) is prepared on paper but cannot be read.
    raise DataError(
      f'dataset {name} in {builder.data_path} cannot be read ({_cause(e)}); '
      f'copy it again or prepare it again with `{prepare_command(name, data_dir)}`'
    ) from e
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


def _load_clusters100(classes=100, train=3000, test=1000):
  """100 classes of 8x8 single-channel images, the same on every machine (seed 0): each class
  is a random 3x3 texture tiled over the image, an example its class's texture plus Gaussian
  noise of 0.5 a pixel. The CPU-scale stand-in for CIFAR-100: as many classes, on digits-sized
  inputs, that both a convolution (local texture) and an MLP (pixels) can learn, neither to
  100%."""
  rs = np.random.RandomState(0)
  textures = rs.rand(classes, 3, 3)
  prototypes = np.tile(textures, (1, 3, 3))[:, :8, :8, None]  # [classes, 8, 8, 1]
  y = np.concatenate([np.arange(classes)] * ((train + test) // classes))
  y = y[rs.permutation(len(y))].astype(np.int32)
  x = (prototypes[y] + 0.5 * rs.randn(len(y), 8, 8, 1)).astype(np.float32)
  return Dataset(
    x[:train],
    y[:train],
    x[train:],
    y[train:],
    num_classes=classes,
    normalize='none',
    augment_ok=False,
  )


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
    f'dataset.path={path!r} is a truncated or damaged .npz archive{where}: {_cause(e)}; '
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


def _load_npz(path, num_classes=0):
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


def load_dataset(name: str, path: str = '', num_classes: int = 0, data_dir: str = '') -> Dataset:
  """Loads dataset `name` ('cifar10', 'cifar100', 'digits', 'clusters100' or 'npz' from `path`).

  CIFAR is read from a prepared TFDS directory only; this never downloads (see `prepare`).

  Args:
    name: one of DATASETS.
    path: the .npz file of name='npz' (dataset.path).
    num_classes: the number of classes (0 means max label + 1); labels must be below it.
    data_dir: the TFDS data directory of CIFAR (config.data_dir; see `resolve_data_dir`).

  Returns:
    a Dataset.

  Raises:
    DataError: one line naming the field or the file, and what was expected.
  """
  if name in TFDS_DATASETS:
    ds = _load_tfds(name, data_dir)
  elif name == 'digits':
    ds = _load_digits()
  elif name == 'clusters100':
    ds = _load_clusters100()
  elif name == 'npz':
    ds = _load_npz(path, num_classes)
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


def load_checked(config) -> Dataset:
  """Loads `config.dataset` and checks it against the config, before anything is written.

  Args:
    config: a validated config (`config_validation.errors` found nothing).

  Returns:
    The Dataset.

  Raises:
    DataError: the data cannot be loaded as configured, or a worker's shard holds less than one
      of its batches (the batch size named, and the largest that fits).
  """
  from cocod_jax import schedules  # pylint: disable=g-import-not-at-top

  d = config.dataset
  ds = load_dataset(d.name, d.path, d.num_classes, config.data_dir)
  sizes = schedules.batch_sizes(config)
  for i, (m, s) in enumerate(zip(sizes, shard_sizes(len(ds.x_train), sizes))):
    if m > s:
      raise DataError(
        f'batch_size={config.batch_size!r} is invalid: worker {i} would use batch {m} but its '
        f'shard has only {s} examples; allowed: a batch size <= {s}'
      )
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

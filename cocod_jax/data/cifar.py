"""CIFAR-10/100 through TFDS, read only from a prepared TFDS data directory (`resolve_data_dir`):
loading never downloads, so a cluster without internet gets one line naming the directory and the
command that prepares it (`make data`, i.e. `cocod_jax/prepare_data.py`) instead of a hang in
download retries. `prepare` downloads where there is a network (`network_reachable`)."""

import contextlib
import logging
import os
import shlex
import socket
import threading
import urllib.parse
import urllib.request

import numpy as np

from cocod_jax.data import mnist1d
from cocod_jax.data.dataset import DataError
from cocod_jax.data.dataset import Dataset
from cocod_jax.data.dataset import cause

TFDS_DATASETS = ('cifar10', 'cifar100')  # Need a prepared TFDS data directory.
# Bundled with scikit-learn, made from a fixed seed, generated (and cached), or the user's file.
NO_PREPARATION = ('digits', 'clusters100', 'npz') + tuple(mnist1d.MNIST1D_VARIANTS)
# Per-channel CIFAR statistics (of the training set) used to normalise images inside the step.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
# Set to 1 to make `network_reachable` answer False without trying (tests, air-gapped clusters).
OFFLINE_ENV = 'COCOD_OFFLINE'
# The CIFAR archives' host, for when the TFDS builder lists no download URL.
DOWNLOAD_HOST = 'www.cs.toronto.edu'


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
      f'preparing dataset {name} in {resolve_data_dir(data_dir)} failed: {cause(e)}'
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


def load_tfds(name, data_dir):
  builder = _builder(name, data_dir)
  # Never download here: without a network TFDS would retry for minutes before failing.
  if not _builder_prepared(builder):
    raise DataError(not_prepared_message(name, data_dir, builder))
  tf = _hide_gpus()
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  out = {}
  try:
    for split in ('train', 'test'):
      # Iterate in batches: `batch_size=-1` aborts under `tfds.testing.mock_data`
      # (docs/design-notes.md).
      xs, ys = [], []
      for ex in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False).batch(4096)):
        xs.append(ex['image'])
        ys.append(ex['label'])
      out[split] = (np.concatenate(xs).astype(np.uint8), np.concatenate(ys).astype(np.int32))
  except (OSError, ValueError, KeyError, tf.errors.OpError) as e:
    # A partial copy (missing or cut record files) is prepared on paper but cannot be read.
    raise DataError(
      f'dataset {name} in {builder.data_path} cannot be read ({cause(e)}); '
      f'copy it again or prepare it again with `{prepare_command(name, data_dir)}`'
    ) from e
  num_classes = builder.info.features['label'].num_classes
  return Dataset(
    *out['train'], *out['test'], num_classes=num_classes, normalize='cifar', augment_ok=True
  )

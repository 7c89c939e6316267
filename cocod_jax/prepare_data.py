"""Downloads and prepares the TFDS datasets (CIFAR) once, where there is internet.

  make data DATASET=cifar10 DATA_DIR=dir
  .venv/bin/python -m cocod_jax.prepare_data --dataset=cifar10,cifar100 --data_dir=dir

`--data_dir` '' means $TFDS_DATA_DIR, else ~/tensorflow_datasets (as `config.data_dir`). A
dataset that is already prepared is only reported. Otherwise the network is checked first: without
it the command exits 1 within seconds with one `error:` line (no traceback) instead of retrying a
download. Afterwards copy DIR/<dataset> to the same place under the data dir of a cluster without
internet; training there reads it and never downloads. Exit status 2 for a bad command line.
"""

import os
import shlex
import sys
import urllib.parse

from absl import app
from absl import flags
from absl import logging

from cocod_jax.config import errors
from cocod_jax.config import flags as cocod_flags
from cocod_jax.data import cifar
from cocod_jax.data import pipeline as input_pipeline

FLAGS = flags.FLAGS


EXIT_NO_NETWORK, EXIT_USAGE = errors.EXIT_NOT_FINISHED, errors.EXIT_USAGE


def _error(message, status):
  errors.report(message)
  return status


def _allowed():
  return (
    f'allowed: {list(cifar.TFDS_DATASETS)} ({", ".join(cifar.NO_PREPARATION)} need no preparation)'
  )


def _copy_hint(root, name):
  return (
    f'copy {os.path.join(root, name)} to <data dir>/{name} on the cluster without internet '
    '(<data dir>: its --config.data_dir, $TFDS_DATA_DIR or ~/tensorflow_datasets); '
    f'{os.path.join(root, "downloads")} is not needed there'
  )


def _counts(name, data_dir):
  counts = cifar.example_counts(name, data_dir)
  return ', '.join(f'{split} {n}' for split, n in counts.items()) + ' examples'


def _prepare_one(name, data_dir, out) -> int:
  """Prepares one TFDS dataset (or reports it prepared); the exit status (0 when ready)."""
  root = cifar.resolve_data_dir(data_dir)
  if cifar.is_prepared(name, data_dir):
    where = os.path.join(root, name)
    print(f'{name}: already prepared in {where} ({_counts(name, data_dir)})', file=out)
    print(f'{name}: {_copy_hint(root, name)}', file=out, flush=True)
    return 0
  url = cifar.download_url(name) or f'https://{cifar.DOWNLOAD_HOST}/'
  host = urllib.parse.urlsplit(url).hostname
  print(f'{name}: not prepared in {root}; checking the network ({url})', file=out, flush=True)
  if not cifar.network_reachable(name):
    offline = (
      f' (${cifar.OFFLINE_ENV} is set)'
      if os.environ.get(cifar.OFFLINE_ENV, '') not in ('', '0')
      else ''
    )
    return _error(
      f'dataset {name} is not prepared in {root} and preparing it needs internet, but '
      f'{host} cannot be reached{offline}; run `make data DATASET={name} '
      f'DATA_DIR={shlex.quote(root)}` where there is internet and copy {os.path.join(root, name)} '
      'here',
      EXIT_NO_NETWORK,
    )
  print(
    f'{name}: downloading {url} into {os.path.join(root, "downloads")} and preparing it in '
    f'{os.path.join(root, name)} (about 170 MB; minutes)',
    file=out,
    flush=True,
  )
  try:
    path = cifar.prepare(name, data_dir)
  except input_pipeline.DataError as e:
    return _error(str(e), EXIT_NO_NETWORK)
  if not cifar.is_prepared(name, data_dir):  # Read back as training will read it.
    return _error(
      f'dataset {name}: preparing finished but {path} is not a prepared dataset; remove it and '
      'run this again',
      EXIT_NO_NETWORK,
    )
  print(f'{name}: prepared in {path} ({_counts(name, data_dir)})', file=out)
  print(f'{name}: {_copy_hint(root, name)}', file=out, flush=True)
  return 0


def run(names, data_dir: str, out=None) -> int:
  """Prepares each dataset of `names` in `data_dir`; errors are one `error:` line on stderr.

  Args:
    names: dataset names (from --dataset).
    data_dir: the TFDS data dir ('' resolves as in `cifar.resolve_data_dir`).
    out: where progress lines go (default stdout).

  Returns:
    the exit status: 0 all prepared, 1 no network (or preparing failed), 2 a bad name.
  """
  out = out or sys.stdout
  names = list(dict.fromkeys(n.strip() for n in names if n.strip()))  # Once each, in order.
  if not names:
    return _error(f'--dataset is empty; {_allowed()}', EXIT_USAGE)
  known = cifar.TFDS_DATASETS + cifar.NO_PREPARATION
  unknown = [n for n in names if n not in known]
  if unknown:  # Every name is checked before anything is downloaded.
    return _error(f'--dataset: unknown {unknown}; {_allowed()}', EXIT_USAGE)
  for name in names:
    if name in cifar.NO_PREPARATION:
      why = 'bundled with scikit-learn' if name == 'digits' else 'it reads dataset.path as given'
      print(f'{name}: needs no preparation ({why})', file=out, flush=True)
      continue
    status = _prepare_one(name, data_dir, out)
    if status:
      return status
  return 0


def parse_flags(argv):
  """absl's flag parsing, with a refusal turned into one line and exit status 2."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    sys.exit(_error(cocod_flags.flag_problem(e, 'prepare_data'), EXIT_USAGE))


def main(argv):
  """Prepares --dataset in --data_dir and exits with `run`'s status."""
  if len(argv) > 1:
    sys.exit(
      _error(f'unexpected arguments {argv[1:]}; use --dataset=... --data_dir=...', EXIT_USAGE)
    )
  logging.set_verbosity(logging.WARNING)
  sys.exit(run(FLAGS.dataset, FLAGS.data_dir))


if __name__ == '__main__':
  cocod_flags.define_prepare_data_flags(cifar.TFDS_DATASETS)
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')  # TF's start-up INFO lines are noise here.
  app.run(main, flags_parser=parse_flags)

"""Checks every user-facing value before any training or output starts.

`errors(config)` lists every invalid field, one line each, naming the field, the value and what
is allowed; `validate` raises `ConfigError` with them. `main.py` prints each as `error: ...` and
exits with status 2 (no traceback for user errors). `unknown_field` turns a misspelt override into
a line that names the closest valid field.
"""

import difflib
import numbers

from cocod_jax import algorithms
from cocod_jax import input_pipeline
from cocod_jax import models
from cocod_jax import schedules
from cocod_jax.cluster import mpi

ALGORITHMS = tuple(algorithms.ALGORITHMS)
BACKENDS = ('one_host', 'mpi')
STAGINGS = mpi.STAGINGS
LR_SCALINGS = ('linear', 'none')


class ConfigError(ValueError):
  """Invalid configuration values; `str()` is one line per problem."""

  def __init__(self, problems):
    self.problems = [problems] if isinstance(problems, str) else list(problems)
    super().__init__('\n'.join(self.problems))


def _is_int(v):
  return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(v):
  return isinstance(v, numbers.Real) and not isinstance(v, bool)


def errors(config) -> list[str]:
  """Every invalid field of `config`, one line each (empty when the config is valid)."""
  out = []

  def check(ok, field, value, allowed):
    if not ok:
      out.append(f'{field}={value!r} is invalid; allowed: {allowed}')

  def integer(field, value, low):
    check(_is_int(value) and value >= low, field, value, f'an integer >= {low}')

  def number(field, value, low, strict=True):
    ok = _is_number(value) and (value > low if strict else value >= low)
    check(ok, field, value, f'a number {">" if strict else ">="} {low}')

  a, o, c = config.algorithm, config.optimizer, config.comm
  check(a.name in ALGORITHMS, 'algorithm.name', a.name, list(ALGORITHMS))
  integer('algorithm.period', a.period, 1)
  integer('algorithm.warmup_period_epochs', a.warmup_period_epochs, 0)
  check(config.backend in BACKENDS, 'backend', config.backend, list(BACKENDS))
  integer('one_host.devices', config.one_host.devices, 0)
  check(c.staging in STAGINGS, 'comm.staging', c.staging, list(STAGINGS))
  number('comm.timeout_s', c.timeout_s, 0)
  integer('timeline.sample_every', config.timeline.sample_every, 0)
  k = config.checkpoint
  integer('checkpoint.every_epochs', k.every_epochs, 0)
  number('checkpoint.interval_s', k.interval_s, 0, strict=False)
  integer('checkpoint.keep', k.keep, 1)
  number('checkpoint.preempt_deadline_s', k.preempt_deadline_s, 0)
  check(config.model.name in models.MODELS, 'model.name', config.model.name, sorted(models.MODELS))
  d = config.dataset
  check(d.name in input_pipeline.DATASETS, 'dataset.name', d.name, list(input_pipeline.DATASETS))
  integer('dataset.num_classes', d.num_classes, 0)
  if d.name == 'npz' and not d.path:
    out.append(f"dataset.path='' is invalid for dataset.name='npz'; allowed: a .npz file with "
               f'arrays {list(input_pipeline.NPZ_KEYS)}')  # fmt: skip
  integer('num_workers', config.num_workers, 1)
  integer('batch_size', config.batch_size, 1)
  integer('num_epochs', config.num_epochs, 1)
  integer('seed', config.seed, 0)
  number('optimizer.learning_rate', o.learning_rate, 0)
  check(_is_number(o.momentum) and 0 <= o.momentum < 1, 'optimizer.momentum', o.momentum, '[0, 1)')
  number('optimizer.weight_decay', o.weight_decay, 0, strict=False)
  check(o.lr_scaling in LR_SCALINGS, 'optimizer.lr_scaling', o.lr_scaling, list(LR_SCALINGS))
  number('optimizer.warmup_epochs', o.warmup_epochs, 0, strict=False)
  check(
    _is_number(o.decay_factor) and 0 < o.decay_factor <= 1,
    'optimizer.decay_factor',
    o.decay_factor,
    '0 < factor <= 1',
  )
  check(
    all(_is_int(e) and e >= 1 for e in o.decay_epochs),
    'optimizer.decay_epochs',
    tuple(o.decay_epochs),
    'a tuple of 1-based epoch numbers >= 1, e.g. (81,)',
  )
  speeds = tuple(config.worker_speeds)
  if speeds:
    check(
      _is_int(config.num_workers) and len(speeds) == config.num_workers,
      'worker_speeds',
      speeds,
      f'empty or one entry per worker (num_workers={config.num_workers})',
    )
    check(all(_is_number(s) and s > 0 for s in speeds), 'worker_speeds', speeds, 'numbers > 0')
  if a.name == 'asynlocal_sgd' and config.proportional_sampling:
    out.append(
      "proportional_sampling=True is invalid with algorithm.name='asynlocal_sgd': AsynLocal-SGD "
      'gives every worker the basic batch and lets the fast ones take more local steps instead; '
      'allowed: proportional_sampling=False, or PS with ssgd, pipe_sgd, local_sgd, cocod_sgd'
    )
  if config.emulate_speeds:
    if config.backend != 'mpi':
      out.append(
        f'emulate_speeds=True is invalid with backend={config.backend!r}: the one-host cluster '
        "reproduces numbers, not time; allowed: backend='mpi'"
      )
    if not speeds:
      out.append('emulate_speeds=True is invalid without worker_speeds; allowed: False, or set '
                 'worker_speeds (one speed per worker)')  # fmt: skip
  return out


def validate(config) -> None:
  """Raises ConfigError listing every invalid field of `config`."""
  problems = errors(config)
  if problems:
    raise ConfigError(problems)


def field_paths(config, prefix='') -> list[str]:
  """Every leaf field of a (nested) ConfigDict as a dotted path."""
  out = []
  for key, value in config.items():
    path = prefix + key
    if hasattr(value, 'items'):
      out += field_paths(value, path + '.')
    else:
      out.append(path)
  return out


def unknown_field(config, path: str) -> str | None:
  """A one-line message if `path` names no field of `config` (with the closest valid one)."""
  paths = field_paths(config)
  if path in paths:
    return None
  close = difflib.get_close_matches(path, paths, n=1, cutoff=0.5)
  hint = f"did you mean '{close[0]}'?" if close else 'see configs/common.py for the fields'
  return f"--config.{path}: the config has no field '{path}'; {hint}"


def check_world(config, world_size: int) -> None:
  """Under MPI the world size is the number of workers: refuses a `num_workers` that differs."""
  if world_size != config.num_workers:
    raise ConfigError(
      f'num_workers={config.num_workers!r} is invalid for this job of {world_size} MPI ranks; '
      f'allowed: {world_size} (launch with `mpirun -np {config.num_workers}` or set '
      f'--config.num_workers={world_size})'
    )


def check_data(config, dataset) -> None:
  """Checks that every worker's shard holds at least one batch."""
  sizes = schedules.batch_sizes(config)
  shards = input_pipeline.shard_sizes(len(dataset.x_train), sizes)
  for i, (m, s) in enumerate(zip(sizes, shards)):
    if m > s:
      raise ConfigError(
        f'batch_size={config.batch_size!r} is invalid: worker {i} would use batch '
        f'{m} but its shard has only {s} examples; allowed: a batch size <= {s}'
      )


def load_checked_dataset(config):
  """Loads `config.dataset` and checks it against the config; raises ConfigError."""
  try:
    ds = input_pipeline.load_dataset(
      config.dataset.name, config.dataset.path, config.dataset.num_classes, config.data_dir
    )
  except input_pipeline.DataError as e:
    raise ConfigError(str(e)) from None
  check_data(config, ds)
  return ds

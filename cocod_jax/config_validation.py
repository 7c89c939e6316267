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
from cocod_jax.cluster import ranks

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


class _Checks:
  """Collects one line per invalid value: the field, the value and what is allowed."""

  def __init__(self):
    self.out = []

  def check(self, ok, field, value, allowed):
    if not ok:
      self.out.append(f'{field}={value!r} is invalid; allowed: {allowed}')

  def integer(self, field, value, low):
    self.check(_is_int(value) and value >= low, field, value, f'an integer >= {low}')

  def number(self, field, value, low, strict=True):
    ok = _is_number(value) and (value > low if strict else value >= low)
    self.check(ok, field, value, f'a number {">" if strict else ">="} {low}')


def _run_fields(config, v: _Checks) -> None:
  """The algorithm, the runtimes and the run's own bookkeeping."""
  a, c, k = config.algorithm, config.comm, config.checkpoint
  v.check(a.name in ALGORITHMS, 'algorithm.name', a.name, list(ALGORITHMS))
  v.integer('algorithm.period', a.period, 1)
  v.integer('algorithm.warmup_period_epochs', a.warmup_period_epochs, 0)
  v.check(config.backend in BACKENDS, 'backend', config.backend, list(BACKENDS))
  v.integer('one_host.devices', config.one_host.devices, 0)
  v.integer('mpi.devices', config.mpi.devices, 0)
  width = config.mpi.workers_per_rank
  v.integer('mpi.workers_per_rank', width, 0)
  if _is_int(width) and width > 0 and _is_int(config.num_workers) and config.num_workers % width:
    v.out.append(
      f'mpi.workers_per_rank={width} is invalid for num_workers={config.num_workers}; allowed: '
      f'0 (num_workers / the MPI ranks) or a divisor of {config.num_workers}'
    )
  v.check(c.staging in STAGINGS, 'comm.staging', c.staging, list(STAGINGS))
  v.number('comm.timeout_s', c.timeout_s, 0)
  v.integer('timeline.sample_every', config.timeline.sample_every, 0)
  v.integer('checkpoint.every_epochs', k.every_epochs, 0)
  v.number('checkpoint.interval_s', k.interval_s, 0, strict=False)
  v.integer('checkpoint.keep', k.keep, 1)
  v.number('checkpoint.preempt_deadline_s', k.preempt_deadline_s, 0)
  v.integer('num_workers', config.num_workers, 1)
  v.integer('num_epochs', config.num_epochs, 1)
  v.integer('seed', config.seed, 0)


def _learning_fields(config, v: _Checks) -> None:
  """The model, the data and the optimizer."""
  d, o = config.dataset, config.optimizer
  v.check(
    config.model.name in models.MODELS, 'model.name', config.model.name, sorted(models.MODELS)
  )
  v.check(d.name in input_pipeline.DATASETS, 'dataset.name', d.name, list(input_pipeline.DATASETS))
  v.integer('dataset.num_classes', d.num_classes, 0)
  if d.name == 'npz' and not d.path:
    v.out.append(f"dataset.path='' is invalid for dataset.name='npz'; allowed: a .npz file with "
                 f'arrays {list(input_pipeline.NPZ_KEYS)}')  # fmt: skip
  v.integer('batch_size', config.batch_size, 1)
  v.number('optimizer.learning_rate', o.learning_rate, 0)
  ok = _is_number(o.momentum) and 0 <= o.momentum < 1
  v.check(ok, 'optimizer.momentum', o.momentum, '[0, 1)')
  v.number('optimizer.weight_decay', o.weight_decay, 0, strict=False)
  v.check(o.lr_scaling in LR_SCALINGS, 'optimizer.lr_scaling', o.lr_scaling, list(LR_SCALINGS))
  v.number('optimizer.warmup_epochs', o.warmup_epochs, 0, strict=False)
  ok = _is_number(o.decay_factor) and 0 < o.decay_factor <= 1
  v.check(ok, 'optimizer.decay_factor', o.decay_factor, '0 < factor <= 1')
  v.check(
    all(_is_int(e) and e >= 1 for e in o.decay_epochs),
    'optimizer.decay_epochs',
    tuple(o.decay_epochs),
    'a tuple of 1-based epoch numbers >= 1, e.g. (81,)',
  )


def _cluster_fields(config, v: _Checks) -> None:
  """Worker speeds and what may be combined with them."""
  speeds = tuple(config.worker_speeds)
  if speeds:
    v.check(
      _is_int(config.num_workers) and len(speeds) == config.num_workers,
      'worker_speeds',
      speeds,
      f'empty or one entry per worker (num_workers={config.num_workers})',
    )
    v.check(all(_is_number(s) and s > 0 for s in speeds), 'worker_speeds', speeds, 'numbers > 0')
  if config.algorithm.name == 'asynlocal_sgd' and config.proportional_sampling:
    v.out.append(
      "proportional_sampling=True is invalid with algorithm.name='asynlocal_sgd': AsynLocal-SGD "
      'gives every worker the basic batch and lets the fast ones take more local steps instead; '
      'allowed: proportional_sampling=False, or PS with ssgd, pipe_sgd, local_sgd, cocod_sgd'
    )
  if config.emulate_speeds:
    if config.backend != 'mpi':
      v.out.append(
        f'emulate_speeds=True is invalid with backend={config.backend!r}: the one-host cluster '
        "reproduces numbers, not time; allowed: backend='mpi'"
      )
    if not speeds:
      v.out.append('emulate_speeds=True is invalid without worker_speeds; allowed: False, or set '
                   'worker_speeds (one speed per worker)')  # fmt: skip


def errors(config) -> list[str]:
  """Every invalid field of `config`, one line each (empty when the config is valid)."""
  v = _Checks()
  for part in (_run_fields, _learning_fields, _cluster_fields):
    part(config, v)
  return v.out


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


def field_hint(config, path: str) -> str:
  """For a dotted `path` that names no field of `config`: the closest valid field, or where the
  fields are listed."""
  close = difflib.get_close_matches(path, field_paths(config), n=1, cutoff=0.5)
  return f"did you mean '{close[0]}'?" if close else 'see configs/common.py for the fields'


def unknown_field(config, path: str) -> str | None:
  """A one-line message if `path` names no field of `config` (with the closest valid one)."""
  if path in field_paths(config):
    return None
  return f"--config.{path}: the config has no field '{path}'; {field_hint(config, path)}"


def check_world(config, world_size: int) -> None:
  """Under MPI every rank holds num_workers / world size workers: refuses a `num_workers` that
  the world size does not divide, or a world size other than `mpi.workers_per_rank` asks for."""
  try:
    ranks.workers_per_rank(config.num_workers, world_size, config.mpi.workers_per_rank)
  except ValueError as e:
    raise ConfigError(str(e)) from None


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

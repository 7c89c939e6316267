"""Checks every user-facing value before any training or output starts.

Each failure is a `ConfigError` whose message is one line naming the field, the value and what
is allowed; `main.py` prints it and exits with status 2 (no traceback for user errors).
"""

from cocod_jax import input_pipeline
from cocod_jax import models
from cocod_jax import mpi_comm

ALGORITHMS = ('ssgd', 'pipe_sgd', 'local_sgd', 'cocod_sgd')
BACKENDS = ('emulated', 'mpi')
STAGINGS = mpi_comm.STAGINGS
LR_SCALINGS = ('linear', 'none')


class ConfigError(ValueError):
  """An invalid configuration value."""


def _check(ok, field, value, allowed):
  if not ok:
    raise ConfigError(f'{field}={value!r} is invalid; allowed: {allowed}')


def validate(config) -> None:
  """Raises ConfigError on the first invalid field of `config`."""
  a, o = config.algorithm, config.optimizer
  _check(a.name in ALGORITHMS, 'algorithm.name', a.name, list(ALGORITHMS))
  _check(config.backend in BACKENDS, 'backend', config.backend, list(BACKENDS))
  _check(config.comm.staging in STAGINGS, 'comm.staging', config.comm.staging, list(STAGINGS))
  _check(config.comm.timeout_s > 0, 'comm.timeout_s', config.comm.timeout_s, 'a number > 0')
  _check(config.model.name in models.MODELS, 'model.name', config.model.name, sorted(models.MODELS))
  _check(
    config.dataset.name in input_pipeline.DATASETS,
    'dataset.name',
    config.dataset.name,
    list(input_pipeline.DATASETS),
  )
  _check(
    isinstance(a.period, int) and a.period >= 1, 'algorithm.period', a.period, 'an integer >= 1'
  )
  _check(
    a.warmup_period_epochs >= 0,
    'algorithm.warmup_period_epochs',
    a.warmup_period_epochs,
    'an integer >= 0',
  )
  _check(
    isinstance(config.num_workers, int) and config.num_workers >= 1,
    'num_workers',
    config.num_workers,
    'an integer >= 1',
  )
  _check(
    isinstance(config.batch_size, int) and config.batch_size >= 1,
    'batch_size',
    config.batch_size,
    'an integer >= 1',
  )
  _check(
    isinstance(config.num_epochs, int) and config.num_epochs >= 1,
    'num_epochs',
    config.num_epochs,
    'an integer >= 1',
  )
  _check(o.learning_rate > 0, 'optimizer.learning_rate', o.learning_rate, 'a number > 0')
  _check(0 <= o.momentum < 1, 'optimizer.momentum', o.momentum, '0 <= momentum < 1')
  _check(o.weight_decay >= 0, 'optimizer.weight_decay', o.weight_decay, 'a number >= 0')
  _check(o.lr_scaling in LR_SCALINGS, 'optimizer.lr_scaling', o.lr_scaling, list(LR_SCALINGS))
  _check(o.warmup_epochs >= 0, 'optimizer.warmup_epochs', o.warmup_epochs, 'a number >= 0')
  _check(0 < o.decay_factor <= 1, 'optimizer.decay_factor', o.decay_factor, '0 < factor <= 1')
  _check(
    all(int(e) >= 1 for e in o.decay_epochs),
    'optimizer.decay_epochs',
    tuple(o.decay_epochs),
    '1-based epoch numbers >= 1',
  )
  speeds = list(config.worker_speeds)
  if speeds:
    _check(
      len(speeds) == config.num_workers,
      'worker_speeds',
      tuple(speeds),
      f'empty or one entry per worker (num_workers={config.num_workers})',
    )
    _check(all(s > 0 for s in speeds), 'worker_speeds', tuple(speeds), 'entries > 0')


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
  from cocod_jax import train  # pylint: disable=g-import-not-at-top

  sizes = train.batch_sizes(config)
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
      config.dataset.name, config.dataset.path, config.dataset.num_classes
    )
  except input_pipeline.DataError as e:
    raise ConfigError(str(e)) from None
  check_data(config, ds)
  return ds

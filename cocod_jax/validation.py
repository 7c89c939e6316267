"""Checks every user-facing value of a config before any training or output starts.

`errors(config)` lists every invalid field, one line each, naming the field, the value and what
is allowed; `validate` raises `errors.UsageError` with them (main.py prints each as `error: ...`
and exits with status 2). The allowed names are read from the registries where they are defined:
`algorithms.ALGORITHMS`, `correction.CORRECTIONS`, `compression.DTYPES`, `defaults.BACKENDS`,
`cluster.mpi.STAGINGS`, `models.MODELS`, `input_pipeline.DATASETS`, `schedules.LR_SCALINGS`. No
data is loaded here: the checks of the data against the config (a batch larger than a worker's
shard, a model that cannot take the examples) are the plan's (`plan.make_plan`), still before
anything is written.

Given the config as its file gives it (`errors(config, as_given)`), a field that an override
changed and that the chosen algorithm does not use is refused as well: `algorithm.period` for an
algorithm that averages every step (not a `base.RoundAlgorithm`: S-SGD, Pipe-SGD), which would
change nothing but the run's hash. A config file that sets such a field stays valid.
"""

import numbers

from cocod_jax import algorithms
from cocod_jax import models
from cocod_jax import schedules
from cocod_jax import steps
from cocod_jax.algorithms import base as algorithms_base
from cocod_jax.algorithms import correction
from cocod_jax.cluster import compression
from cocod_jax.cluster import mpi
from cocod_jax.cluster import period_auto
from cocod_jax.config import defaults
from cocod_jax.config import errors as errors_lib
from cocod_jax.data import mnist1d as mnist1d_data
from cocod_jax.data import npz as npz_data
from cocod_jax.data import pipeline as input_pipeline


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
  v.check(a.name in algorithms.ALGORITHMS, 'algorithm.name', a.name, list(algorithms.ALGORITHMS))
  _period_field(config, v)
  v.integer('algorithm.warmup_period_epochs', a.warmup_period_epochs, 0)
  _correction_fields(a, v)
  _delay_field(config, v)
  _fragments_field(config, v)
  v.check(c.dtype in compression.DTYPES, 'comm.dtype', c.dtype, list(compression.DTYPES))
  v.check(isinstance(c.error_feedback, bool), 'comm.error_feedback', c.error_feedback,
          'True or False')  # fmt: skip
  if (c.dtype != 'float32' or c.error_feedback is True) and a.name != 'cocod_sgd':
    v.out.append(
      f'comm.dtype={c.dtype!r} with comm.error_feedback={c.error_feedback!r} is invalid with '
      f"algorithm.name={a.name!r}: what is compressed is CoCoD-SGD's snapshot allreduce; allowed: "
      "comm.dtype='float32' and comm.error_feedback=False, or algorithm.name='cocod_sgd'"
    )
  v.check(config.backend in defaults.BACKENDS, 'backend', config.backend, list(defaults.BACKENDS))
  v.integer('one_host.devices', config.one_host.devices, 0)
  v.integer('mpi.devices', config.mpi.devices, 0)
  width = config.mpi.workers_per_rank
  v.integer('mpi.workers_per_rank', width, 0)
  if _is_int(width) and width > 0 and _is_int(config.num_workers) and config.num_workers % width:
    v.out.append(
      f'mpi.workers_per_rank={width} is invalid for num_workers={config.num_workers}; allowed: '
      f'0 (num_workers / the MPI ranks) or a divisor of {config.num_workers}'
    )
  v.check(c.staging in mpi.STAGINGS, 'comm.staging', c.staging, list(mpi.STAGINGS))
  v.number('comm.timeout_s', c.timeout_s, 0)
  v.integer('timeline.sample_every', config.timeline.sample_every, 0)
  v.integer('checkpoint.every_epochs', k.every_epochs, 0)
  v.number('checkpoint.interval_s', k.interval_s, 0, strict=False)
  v.integer('checkpoint.keep', k.keep, 1)
  v.number('checkpoint.preempt_deadline_s', k.preempt_deadline_s, 0)
  v.integer('num_workers', config.num_workers, 1)
  v.integer('num_epochs', config.num_epochs, 1)
  v.integer('eval_train_examples', config.eval_train_examples, 0)
  v.integer('seed', config.seed, 0)


def _period_field(config, v: _Checks) -> None:
  """k >= 1, or 'auto' where a measured time can choose it (period_auto.py)."""
  k, name, auto = config.algorithm.period, config.algorithm.name, period_auto.AUTO
  if k != auto:
    v.check(_is_int(k) and k >= 1, 'algorithm.period', k, f"an integer >= 1, or '{auto}'")
  elif config.backend != 'mpi':
    v.out.append(
      f"algorithm.period='{auto}' is invalid with backend={config.backend!r}: k is chosen from "
      'measured step and allreduce times, and the one-host cluster has no real communication '
      "time; allowed: backend='mpi', or algorithm.period an integer >= 1"
    )
  elif name not in period_auto.SUPPORTED:
    v.out.append(
      f"algorithm.period='{auto}' is invalid with algorithm.name={name!r} (no period of one "
      "length for every worker to choose: S-SGD and Pipe-SGD have none, AsynLocal-SGD's shards "
      f'depend on it); allowed: algorithm.name in {list(period_auto.SUPPORTED)}, or '
      'algorithm.period an integer >= 1'
    )


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
                 f'arrays {list(npz_data.NPZ_KEYS)}')  # fmt: skip
  _split_fields(d, v)
  v.integer('batch_size', config.batch_size, 1)
  v.check(o.name in steps.OPTIMIZERS, 'optimizer.name', o.name, list(steps.OPTIMIZERS))
  v.number('optimizer.learning_rate', o.learning_rate, 0)
  ok = _is_number(o.momentum) and 0 <= o.momentum < 1
  v.check(ok, 'optimizer.momentum', o.momentum, '[0, 1)')
  v.number('optimizer.weight_decay', o.weight_decay, 0, strict=False)
  scalings = schedules.LR_SCALINGS
  v.check(o.lr_scaling in scalings, 'optimizer.lr_scaling', o.lr_scaling, list(scalings))
  v.number('optimizer.warmup_epochs', o.warmup_epochs, 0, strict=False)
  ok = _is_number(o.decay_factor) and 0 < o.decay_factor <= 1
  v.check(ok, 'optimizer.decay_factor', o.decay_factor, '0 < factor <= 1')
  v.check(
    all(_is_int(e) and e >= 1 for e in o.decay_epochs),
    'optimizer.decay_epochs',
    tuple(o.decay_epochs),
    'a tuple of 1-based epoch numbers >= 1, e.g. (81,)',
  )


def _split_fields(d, v: _Checks) -> None:
  """The sizes of a generated split: MNIST-1D only, and as many examples of every class."""
  v.integer('dataset.train_examples', d.train_examples, 0)
  v.integer('dataset.test_examples', d.test_examples, 0)
  if not (_is_int(d.train_examples) and _is_int(d.test_examples)):
    return
  if d.name in mnist1d_data.MNIST1D_VARIANTS:
    if d.train_examples >= 0 and d.test_examples >= 0:
      problem = mnist1d_data.mnist1d_size_problem(d.name, d.train_examples, d.test_examples)
      if problem:
        v.out.append(problem)
  elif d.name in input_pipeline.DATASETS and (d.train_examples or d.test_examples):
    v.out.append(
      f'dataset.train_examples={d.train_examples!r}, dataset.test_examples={d.test_examples!r} '
      f'are invalid for dataset.name={d.name!r}: only a generated MNIST-1D split has a size to '
      f'choose; allowed: 0 (the data as it is), or dataset.name in '
      f'{list(mnist1d_data.MNIST1D_VARIANTS)}'
    )


def _correction_fields(a, v: _Checks) -> None:
  """CoCoD-SGD's correction and its hyperparameters."""
  allowed = list(correction.CORRECTIONS)
  v.check(a.correction in allowed, 'algorithm.correction', a.correction, allowed)
  if a.correction != 'cocod' and a.name != 'cocod_sgd':
    v.out.append(
      f'algorithm.correction={a.correction!r} is invalid with algorithm.name={a.name!r}: the '
      "correction is CoCoD-SGD's; allowed: 'cocod', or algorithm.name='cocod_sgd'"
    )
  ok = _is_number(a.alpha) and 0 <= a.alpha <= 1
  v.check(ok, 'algorithm.alpha', a.alpha, 'a number in [0, 1]')
  v.number('algorithm.outer_lr', a.outer_lr, 0)
  ok = _is_number(a.outer_momentum) and 0 <= a.outer_momentum < 1
  v.check(ok, 'algorithm.outer_momentum', a.outer_momentum, 'a number in [0, 1)')
  v.check(isinstance(a.outer_nesterov, bool), 'algorithm.outer_nesterov', a.outer_nesterov,
          'True or False')  # fmt: skip
  ok = _is_number(a.eager_lambda) and 0 < a.eager_lambda <= 1
  v.check(ok, 'algorithm.eager_lambda', a.eager_lambda, 'a number in (0, 1]')
  v.number('algorithm.eager_gamma', a.eager_gamma, 0, strict=False)
  ok = _is_number(a.anchor_pull) and 0 <= a.anchor_pull <= 1
  v.check(ok, 'algorithm.anchor_pull', a.anchor_pull, 'a number in [0, 1]')
  ok = _is_number(a.anchor_momentum) and 0 <= a.anchor_momentum < 1
  v.check(ok, 'algorithm.anchor_momentum', a.anchor_momentum, 'a number in [0, 1)')
  for field, (owner, default) in correction.OPTION_DEFAULTS.items():
    value = a[field]
    if value != default and a.correction != owner:
      v.out.append(
        f'algorithm.{field}={value!r} is invalid with algorithm.correction={a.correction!r}: only '
        f'the {owner} correction uses it; allowed: {default!r} (the default), or '
        f"algorithm.correction='{owner}'"
      )
  if a.correction in ('eager', 'anchor') and a.average_momentum is True:
    v.out.append(
      f'algorithm.average_momentum=True is invalid with algorithm.correction={a.correction!r}: '
      'its momentum buffers stay local; allowed: False, or another correction'
    )


def _delay_field(config, v: _Checks) -> None:
  """tau: None (the whole round), 1 <= tau <= k, or 'auto' (measured, MPI only), for CoCoD-SGD's
  own correction only."""
  a, auto = config.algorithm, period_auto.AUTO
  if a.delay is None:
    return
  if a.delay == auto and config.backend != 'mpi':
    v.out.append(
      f"algorithm.delay='{auto}' is invalid with backend={config.backend!r}: tau is chosen from "
      'measured step and allreduce times, and the one-host cluster has no real communication '
      "time; allowed: backend='mpi', or algorithm.delay None or an integer >= 1"
    )
  elif a.delay != auto and not (_is_int(a.delay) and a.delay >= 1):
    allowed = f"None (the whole round), an integer >= 1, or '{auto}'"
    v.check(False, 'algorithm.delay', a.delay, allowed)
  elif a.name != 'cocod_sgd':
    v.out.append(
      f'algorithm.delay={a.delay!r} is invalid with algorithm.name={a.name!r}: the delay is '
      "CoCoD-SGD's; allowed: None, or algorithm.name='cocod_sgd'"
    )
  elif a.correction != 'cocod':
    v.out.append(
      f'algorithm.delay={a.delay!r} is invalid with algorithm.correction={a.correction!r}: the '
      "others send a state made at the round's end, not a snapshot taken tau steps before it; "
      "allowed: None, or algorithm.correction='cocod'"
    )
  elif _is_int(a.period) and _is_int(a.delay) and a.delay > a.period:
    v.out.append(
      f'algorithm.delay={a.delay} is invalid with algorithm.period={a.period}; allowed: None or '
      f'an integer in [1, {a.period}]'
    )


def _fragments_field(config, v: _Checks) -> None:
  """P: an integer >= 1; above 1 only for CoCoD-SGD with the paper's correction, the float32
  allreduce and a fixed period of at least P (streamed CoCoD-SGD, algorithms/streamed.py)."""
  a, c = config.algorithm, config.comm
  p = a.fragments
  if not (_is_int(p) and p >= 1):
    v.check(False, 'algorithm.fragments', p, 'an integer >= 1 (1: the whole model at once)')
    return
  if p == 1:
    return
  why = None
  if a.name != 'cocod_sgd':
    why = (
      f'with algorithm.name={a.name!r}: only CoCoD-SGD streams its snapshot allreduce in '
      "fragments; allowed: 1, or algorithm.name='cocod_sgd'"
    )
  elif a.correction != 'cocod':
    why = (
      f"with algorithm.correction={a.correction!r}: a fragment is corrected by the paper's "
      "x <- x + (a - s) alone; allowed: 1, or algorithm.correction='cocod'"
    )
  elif c.dtype != 'float32' or c.error_feedback is True:
    why = (
      f'with comm.dtype={c.dtype!r} and comm.error_feedback={c.error_feedback!r}: the compressed '
      "allreduce is defined for the whole model only; allowed: 1, or comm.dtype='float32' and "
      'comm.error_feedback=False'
    )
  elif a.period == period_auto.AUTO:
    why = (
      f"with algorithm.period='{period_auto.AUTO}': a round of k < P steps could not stream P "
      'fragments; allowed: 1, or an integer algorithm.period >= the fragments'
    )
  elif _is_int(a.period) and p > a.period:
    why = (
      f'with algorithm.period={a.period}: a round of k steps ends at most k fragments; '
      f'allowed: an integer in [1, {a.period}]'
    )
  if why:
    v.out.append(f'algorithm.fragments={p!r} is invalid {why}')


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


def _overridden_fields(config, as_given, v: _Checks) -> None:
  """A field that the command line's overrides changed from `as_given` (the config as its file
  gives it) and that the chosen algorithm does not use: refused, naming the file's value."""
  a = config.algorithm
  cls = algorithms.ALGORITHMS.get(a.name)
  if cls is None or issubclass(cls, algorithms_base.RoundAlgorithm):
    return
  given = as_given.algorithm.period
  if a.period != given and _is_int(a.period) and a.period >= 1:  # (Else _period_field says.)
    periodic = [n for n, c in algorithms.ALGORITHMS.items()
                if issubclass(c, algorithms_base.RoundAlgorithm)]  # fmt: skip
    v.out.append(
      f'algorithm.period={a.period!r} is invalid with algorithm.name={a.name!r}: it averages '
      "every step and has no period, so the override would change nothing but the run's hash; "
      f"allowed: {given!r} (the config file's), or algorithm.name in {periodic}"
    )


def errors(config, as_given=None) -> list[str]:
  """Every invalid field of `config`, one line each (empty when the config is valid).

  Args:
    config: the config to run, its overrides applied.
    as_given: the same config as its file gives it, before the command line's overrides; None
      (not known) leaves out the check of the overridden fields that the algorithm does not use.
  """
  v = _Checks()
  for part in (_run_fields, _learning_fields, _cluster_fields):
    part(config, v)
  if as_given is not None:
    _overridden_fields(config, as_given, v)
  return v.out


def validate(config, as_given=None) -> None:
  """Raises errors.UsageError listing every invalid field of `config` (`errors`' arguments)."""
  problems = errors(config, as_given)
  if problems:
    raise errors_lib.UsageError(problems)

"""Config validation: one line per invalid field, naming it and what is allowed."""

import pytest

from cocod_jax import validation as config_validation
from configs import test as test_config


@pytest.mark.parametrize(
  'fields,line',
  [
    ({'correction': 'lookahead'}, "algorithm.correction='lookahead' is invalid; allowed: ['cocod'"),
    ({'correction': 'reset', 'name': 'local_sgd'}, "correction='reset' is invalid with algorithm"),
    ({'correction': 'blend', 'alpha': 1.2}, 'algorithm.alpha=1.2 is invalid; allowed: a number in'),
    ({'correction': 'outer_sgd', 'outer_lr': 0.0}, 'algorithm.outer_lr=0.0 is invalid'),
    ({'correction': 'outer_sgd', 'outer_momentum': 1.0}, 'algorithm.outer_momentum=1.0 is'),
    (
      {'correction': 'eager', 'eager_lambda': 0.0},
      'algorithm.eager_lambda=0.0 is invalid; allowed: a number in (0, 1]',
    ),
    ({'correction': 'eager', 'eager_lambda': 1.5}, 'algorithm.eager_lambda=1.5 is invalid'),
    (
      {'correction': 'eager', 'eager_gamma': -0.5},
      'algorithm.eager_gamma=-0.5 is invalid; allowed: a number >= 0',
    ),
    ({'correction': 'anchor', 'anchor_pull': 1.5}, 'algorithm.anchor_pull=1.5 is invalid'),
    (
      {'correction': 'anchor', 'anchor_momentum': 1.0},
      'algorithm.anchor_momentum=1.0 is invalid; allowed: a number in [0, 1)',
    ),
    (
      {'eager_lambda': 0.5},
      'algorithm.eager_lambda=0.5 is invalid with algorithm.correction='
      "'cocod': only the eager correction uses it; allowed: 1.0 (the default), or "
      "algorithm.correction='eager'",
    ),
    (
      {'correction': 'eager', 'anchor_pull': 0.5},
      "algorithm.anchor_pull=0.5 is invalid with algorithm.correction='eager'",
    ),
    (
      {'correction': 'anchor', 'average_momentum': True},
      'algorithm.average_momentum=True is '
      "invalid with algorithm.correction='anchor': its momentum buffers stay local",
    ),
    (
      {'delay': 0},
      "algorithm.delay=0 is invalid; allowed: None (the whole round), an integer >= 1, or 'auto'",
    ),
    (
      {'delay': 'auto'},
      "algorithm.delay='auto' is invalid with backend='one_host': tau is "
      'chosen from measured step and allreduce times',
    ),
    ({'delay': 'half'}, "algorithm.delay='half' is invalid"),
    (
      {'period': 4, 'delay': 5},
      'algorithm.delay=5 is invalid with algorithm.period=4; allowed: None or an integer in [1, 4]',
    ),
    (
      {'delay': 1, 'name': 'local_sgd'},
      "algorithm.delay=1 is invalid with algorithm.name='local_sgd': the delay is CoCoD-SGD's",
    ),
    (
      {'delay': 1, 'correction': 'eager'},
      "algorithm.delay=1 is invalid with algorithm.correction='eager'",
    ),
  ],
)
def test_correction_fields(fields, line):
  c = test_config.get_config()
  for k, v in fields.items():
    setattr(c.algorithm, k, v)
  problems = config_validation.errors(c)
  assert len(problems) == 1 and line in problems[0], problems


def test_every_correction_is_valid_with_cocod_sgd():
  c = test_config.get_config()
  for name in ('cocod', 'reset', 'blend', 'outer_sgd', 'eager', 'anchor'):
    c.algorithm.correction = name
    assert config_validation.errors(c) == []


@pytest.mark.parametrize(
  'fields,line',
  [
    ({'dtype': 'fp8'}, "comm.dtype='fp8' is invalid; allowed: ['float32', 'bfloat16', 'int8']"),
  ],
)
def test_comm_fields(fields, line):
  c = test_config.get_config()
  for k, v in fields.items():
    setattr(c.comm, k, v)
  assert config_validation.errors(c) == [line]


def test_compression_only_for_cocod_sgd():
  c = test_config.get_config()
  c.algorithm.name, c.comm.dtype = 'local_sgd', 'int8'
  (line,) = config_validation.errors(c)
  assert line.startswith("comm.dtype='int8' with comm.error_feedback=False is invalid with "
                         "algorithm.name='local_sgd'")  # fmt: skip


@pytest.mark.parametrize(
  'name,period,refused',
  [
    ('ssgd', 4, True),
    ('pipe_sgd', 4, True),
    ('local_sgd', 4, False),
    ('cocod_sgd', 4, False),
    ('asynlocal_sgd', 4, False),
    ('ssgd', 3, False),  # The name alone overridden: the period is the file's.
  ],
)
def test_an_override_of_the_period_of_an_algorithm_without_one_is_refused(name, period, refused):
  # `--config=configs/test.py --config.algorithm.name=NAME --config.algorithm.period=PERIOD`:
  # the file gives cocod_sgd with period 3.
  as_given = test_config.get_config()
  c = test_config.get_config()
  c.algorithm.name, c.algorithm.period = name, period
  problems = config_validation.errors(c, as_given)
  if not refused:
    assert problems == []
    return
  assert problems == [
    f"algorithm.period=4 is invalid with algorithm.name='{name}': it averages every step and has "
    "no period, so the override would change nothing but the run's hash; allowed: 3 (the config "
    "file's), or algorithm.name in ['local_sgd', 'cocod_sgd', 'asynlocal_sgd']"
  ]
  with pytest.raises(config_validation.errors_lib.UsageError):
    config_validation.validate(c, as_given)
  assert config_validation.errors(c) == []  # Not known to be an override: as a file gives it.


def test_a_file_that_sets_the_period_stays_valid_with_every_algorithm():
  # The smoke scale sets period 3 for every cell, S-SGD's included (configs/scales.py): a config
  # file that carries a period is valid whatever its algorithm, with or without overrides.
  from configs import table1  # pylint: disable=g-import-not-at-top

  for name in table1.ALGOS:
    c = table1.get_config(f'algo={name},scale=smoke')
    assert c.algorithm.period == 3
    assert config_validation.errors(c) == []
    assert config_validation.errors(c, table1.get_config(f'algo={name},scale=smoke')) == []
    c.num_epochs = 2  # Another field overridden.
    assert config_validation.errors(c, table1.get_config(f'algo={name},scale=smoke')) == []


def test_auto_for_an_algorithm_without_a_period_is_said_once():
  as_given = test_config.get_config()
  c = test_config.get_config()
  c.algorithm.name, c.algorithm.period, c.backend = 'ssgd', 'auto', 'mpi'
  (line,) = config_validation.errors(c, as_given)
  assert line.startswith("algorithm.period='auto' is invalid with algorithm.name='ssgd'")

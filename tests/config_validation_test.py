"""Config validation: one line per invalid field, naming it and what is allowed."""

import pytest

from cocod_jax import config_validation
from configs import test as test_config


@pytest.mark.parametrize(
  'fields,line',
  [
    ({'correction': 'lookahead'}, "algorithm.correction='lookahead' is invalid; allowed: ['cocod'"),
    ({'correction': 'reset', 'name': 'local_sgd'}, "correction='reset' is invalid with algorithm"),
    ({'correction': 'blend', 'alpha': 1.2}, 'algorithm.alpha=1.2 is invalid; allowed: a number in'),
    ({'correction': 'outer_sgd', 'outer_lr': 0.0}, 'algorithm.outer_lr=0.0 is invalid'),
    ({'correction': 'outer_sgd', 'outer_momentum': 1.0}, 'algorithm.outer_momentum=1.0 is'),
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
  for name in ('cocod', 'reset', 'blend', 'outer_sgd'):
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

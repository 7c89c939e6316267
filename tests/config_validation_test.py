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

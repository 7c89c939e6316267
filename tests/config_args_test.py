"""Tests of cocod_jax/config/args.py: the typed `key=value` argument after `:` in --config."""

import dataclasses

import pytest

from cocod_jax.config import args as config_args

DEFAULTS = dict(algo='cocod_sgd', seed=0, lr=0.1, timing=False)


def test_parse_defaults_and_types():
  assert config_args.parse(None, DEFAULTS) == config_args.parse('', DEFAULTS)
  a = config_args.parse(' algo=ssgd , seed=-3,lr=1e-3,timing=TRUE,', DEFAULTS)
  assert (a.algo, a.seed, a.lr, a.timing) == ('ssgd', -3, 1e-3, True)
  assert type(a.seed) is int and type(a.lr) is float
  assert config_args.parse('lr=2', DEFAULTS).lr == 2.0
  for text, value in (('true', True), ('1', True), ('false', False), ('0', False)):
    assert config_args.parse(f'timing={text}', DEFAULTS).timing is value
  with pytest.raises(dataclasses.FrozenInstanceError):
    a.seed = 1


@pytest.mark.parametrize(
  'arg, message',
  [
    ('algoo=ssgd', "'algoo' is unknown; did you mean 'algo'? valid keys: algo, seed, lr, timing"),
    ('seed=1.5', "seed='1.5' is invalid; allowed: an int"),
    ('lr=fast', "lr='fast' is invalid; allowed: a float"),
    ('timing=yes', "timing='yes' is invalid; allowed: a bool (true, false, 1 or 0)"),
    ('seed=1,seed=2', "'seed' is given twice (seed=1, seed=2); give it once"),
    ('seed', "'seed' is invalid; expected key=value items"),
  ],
)
def test_parse_refuses(arg, message):
  with pytest.raises(config_args.ConfigArgError) as e:
    config_args.parse(arg, DEFAULTS)
  assert message in str(e.value)
  assert '\n' not in str(e.value)


def test_parse_refuses_a_default_of_another_type():
  with pytest.raises(TypeError, match='default xs=.*give the default one of these types'):
    config_args.parse('', dict(xs=(1, 2)))


def test_choice():
  assert config_args.choice('algo', 'ssgd', ('ssgd', 'cocod_sgd')) == 'ssgd'
  with pytest.raises(config_args.ConfigArgError) as e:
    config_args.choice('algo', 'cocod', ('ssgd', 'cocod_sgd'))
  assert str(e.value) == (
    "config argument algo='cocod' is invalid; did you mean 'cocod_sgd'? allowed: ssgd, cocod_sgd"
  )

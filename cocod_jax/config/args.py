"""The typed `key=value,key=value` argument after `:` in `--config=FILE:ARG`.

ml_collections hands the text after the colon to the config file's `get_config(arg)` as one
string. Experiment files parse it here against their defaults, so that every cell of a sweep is
named by a short, checked argument:

  def get_config(arg=None):
    a = config_args.parse(arg, dict(algo='cocod_sgd', seed=0, timing=False))
    config_args.choice('algo', a.algo, ALGOS)

The type of each default is the key's type (str, int, float or bool). Booleans are strict (true,
false, 1 or 0, any case), so that `timing=yes` is refused rather than read as true. An unknown
key, a value of the wrong type or a key given twice raises `ConfigArgError`, one line naming the
key, the value and what is allowed (an `errors.UsageError`: one `error:` line, exit status 2).
"""

import dataclasses
import difflib
import functools
import re
from typing import Any
from typing import Iterable

from cocod_jax.config import errors

TYPES = (str, int, float, bool)
_TRUE, _FALSE = ('true', '1'), ('false', '0')
_INT = re.compile(r'[+-]?\d+')


class ConfigArgError(errors.UsageError):
  """A `:`-argument that does not fit the config file's keys and types."""


def _closest(word: str, candidates: Iterable[str]) -> str:
  close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.5)
  return f"did you mean '{close[0]}'? " if close else ''


def _convert(key: str, text: str, kind: type) -> Any:
  """`text` as a value of `kind`, or ConfigArgError naming the key, the value and the type."""
  if kind is str:
    return text
  if kind is bool:
    if text.lower() in _TRUE + _FALSE:
      return text.lower() in _TRUE
    raise ConfigArgError(
      f'config argument {key}={text!r} is invalid; allowed: a bool (true, false, 1 or 0)'
    )
  if kind is int:
    if _INT.fullmatch(text):
      return int(text)
    raise ConfigArgError(
      f'config argument {key}={text!r} is invalid; allowed: an int, e.g. {key}=1'
    )
  try:
    return float(text)
  except ValueError:
    raise ConfigArgError(
      f'config argument {key}={text!r} is invalid; allowed: a float, e.g. {key}=0.5'
    ) from None


@functools.lru_cache(maxsize=None)
def _args_class(fields: tuple) -> type:
  # One class per set of keys, so that two parses of the same file's argument compare equal.
  return dataclasses.make_dataclass('ConfigArgs', fields, frozen=True)


def split(arg: str | None) -> list[tuple[str, str]]:
  """The `(key, text)` pairs of `arg` in order, unconverted; empty items are skipped.

  Args:
    arg: `key=value,key=value`, '' or None.

  Returns:
    The pairs, keys and values stripped of surrounding spaces.

  Raises:
    ConfigArgError: an item without `=` or with an empty key.
  """
  pairs = []
  for item in (arg or '').split(','):
    if not item.strip():
      continue
    key, sep, text = item.partition('=')
    if not sep or not key.strip():
      raise ConfigArgError(
        f'config argument {item.strip()!r} is invalid; expected key=value items separated by '
        "commas, e.g. 'algo=cocod_sgd,seed=0'"
      )
    pairs.append((key.strip(), text.strip()))
  return pairs


def parse(arg: str | None, defaults: dict[str, Any]):
  """Parses `arg` (`key=value,key=value`) against `defaults`.

  Args:
    arg: the text after `:` in `--config=FILE:ARG`; '' or None gives the defaults.
    defaults: key -> default value; the default's type (str, int, float, bool) is the key's type.

  Returns:
    A frozen dataclass instance with one attribute per key of `defaults`.

  Raises:
    ConfigArgError: an unknown key (the closest valid key suggested), a value that is not of the
      key's type, a key given twice, or a malformed item.
    TypeError: a default of another type (a mistake in the config file, not in the argument).
  """
  for key, value in defaults.items():
    if type(value) not in TYPES:
      raise TypeError(
        f'default {key}={value!r} has type {type(value).__name__}; config arguments take '
        f'{", ".join(t.__name__ for t in TYPES)}: give the default one of these types'
      )
  values, seen = dict(defaults), {}
  for key, text in split(arg):
    if key not in defaults:
      raise ConfigArgError(
        f"config argument '{key}' is unknown; {_closest(key, defaults)}valid keys: "
        f'{", ".join(defaults)}'
      )
    if key in seen:
      raise ConfigArgError(
        f"config argument '{key}' is given twice ({key}={seen[key]}, {key}={text}); give it once"
      )
    seen[key] = text
    values[key] = _convert(key, text, type(defaults[key]))
  return _args_class(tuple((k, type(v)) for k, v in defaults.items()))(**values)


def choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
  """Returns `value` when it is one of `allowed`, else raises ConfigArgError listing them.

  Args:
    name: the key, for the message.
    value: the parsed value.
    allowed: the valid values.

  Returns:
    `value`, unchanged.

  Raises:
    ConfigArgError: `value` is not in `allowed` (the closest allowed value suggested).
  """
  allowed = tuple(allowed)
  if value in allowed:
    return value
  hint = _closest(str(value), [str(a) for a in allowed])
  raise ConfigArgError(
    f'config argument {name}={value!r} is invalid; {hint}allowed: '
    f'{", ".join(str(a) for a in allowed)}'
  )

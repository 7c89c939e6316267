"""Config files and what every tool does to the configs they make, each in one place.

- `load(spec)`: `FILE[:ARG]` executed as ml_collections' `--config` does (`get_config(ARG)`).
- `set_field(config, path, value)`: a dotted override, from a value or from command-line text
  read by the field's type exactly as the entry point's `--config.<path>=<text>` reads it, with
  one line naming the override and what is allowed when it cannot be set.
- `flatten(config)`: dotted path -> leaf value of a nested ConfigDict or dict.
- `config_hash(config)`: the hash of a resolved config as a dict: the sweep's point directories
  (sweep/points.py), and the MPI ranks' preflight before their first collective, on the run's
  config as the workdir's claim records it (cluster/ranks.py).

Nothing here imports JAX: the sweep runner and the entry point's error path use it cheaply.
"""

import ast
import hashlib
import importlib.util
import json
import os
import re
from typing import Any

from cocod_jax.config import errors


def split(spec: str) -> tuple[str, str]:
  """`FILE[:ARG]` -> (FILE, ARG), as ml_collections splits `--config`."""
  path, _, arg = spec.partition(':')
  return path, arg


def load_module(path: str):
  """Executes the config or experiment file at `path` as a fresh module and returns it."""
  name = '_config_' + re.sub(r'\W', '_', os.path.basename(path))
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def get_config(module, arg: str = ''):
  """`module.get_config(arg)`, or `get_config()` without an argument (as ml_collections calls),
  checked (`checked`)."""
  config = module.get_config(arg) if arg else module.get_config()
  return checked(config, f'{module.__file__}:{arg}' if arg else module.__file__)


def checked(config, spec: str):
  """`config`, what the config file `spec` made, when it is an ml_collections.ConfigDict with
  every field of base_config (config/defaults.py; their values may differ).

  Raises:
    errors.UsageError: another type, or a field missing (the first named, with how many more).
  """
  import ml_collections  # pylint: disable=g-import-not-at-top

  from cocod_jax.config import defaults  # pylint: disable=g-import-not-at-top

  allowed = 'allowed: a config file whose get_config() builds on configs/common.py base_config()'
  if not isinstance(config, ml_collections.ConfigDict):
    raise errors.UsageError(
      f'--config={spec}: get_config() returned a {type(config).__name__}, not an '
      f'ml_collections.ConfigDict; {allowed}'
    )
  missing = []  # The highest missing node of each path: `algorithm`, not all its fields.
  for path in flatten(defaults.base_config()):
    gap = _gap(config, path)
    if gap and gap not in missing:
      missing.append(gap)
  if missing:
    more = f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''
    raise errors.UsageError(
      f'--config={spec}: the config lacks the required field {missing[0]}{more}; {allowed}'
    )
  return config


def _gap(config, path: str) -> str:
  """The first prefix of the dotted `path` that `config` lacks ('' when it has the whole)."""
  node, parts = config, path.split('.')
  for i, part in enumerate(parts):
    if not hasattr(node, 'keys') or part not in node.keys():
      return '.'.join(parts[: i + 1])
    node = node[part]
  return ''


def load(spec: str):
  """The ConfigDict of `--config=FILE[:ARG]`.

  Raises:
    errors.UsageError: no such file, or the file failed to load (the exception named).
  """
  path, arg = split(spec)
  if not os.path.isfile(path):
    raise errors.UsageError(f'--config={spec}: no such config file')
  try:
    return get_config(load_module(path), arg)
  except Exception as e:  # pylint: disable=broad-except
    raise errors.UsageError(f'--config={spec} could not be loaded: {type(e).__name__}: {e}') from e


def flatten(config, prefix: str = '') -> dict[str, Any]:
  """Every leaf of a nested ConfigDict or dict as {dotted path: value}, in the tree's order."""
  out = {}
  for key, value in config.items():
    if hasattr(value, 'items'):
      out.update(flatten(value, f'{prefix}{key}.'))
    else:
      out[prefix + key] = value
  return out


def as_json(value):
  """`value` as JSON sees it (tuples become lists), so that hashes of a config and of its copy
  in results.json agree."""
  return json.loads(json.dumps(value))


# Fields added after runs were made whose default changes nothing those runs computed: left out
# of every hash at their default, so the points made before them keep their names.
LATER_FIELDS = {'eval_train_examples': 0, 'algorithm.fragments': 1}

# Dotted fields (leaves or whole groups) that change no number a run computes, its timings
# included: where data is read from, how long a collective may take before the job is ended, how
# often rounds are timed, when checkpoints are written (a resumed run continues bit for bit).
# Left out of a sweep point's hash (sweep/points.py).
NON_RESULT_FIELDS = ('data_dir', 'comm.timeout_s', 'timeline.sample_every', 'checkpoint')
# And those that may change how fast or how long a run goes, never a number of the training
# itself: a checkpoint resumes under a run that differs from it only in these
# (checkpoints.result_fields, the workdir's fingerprint).
NON_TRAINING_FIELDS = NON_RESULT_FIELDS + (
  'num_epochs',
  'timeline',
  'comm.threaded',
  'emulate_speeds',
)


def at_later_default(field: str, value) -> bool:
  """Whether `field` (dotted) is one of LATER_FIELDS holding its default: left out, as if absent,
  of the hash and of a run's fingerprint."""
  return field in LATER_FIELDS and value == LATER_FIELDS[field]


def config_hash(config: dict, leave_out=(), extra: dict | None = None, digits: int = 8) -> str:
  """Hex digits of the SHA-256 of a resolved config as JSON, without the fields `leave_out`.

  Args:
    config: a resolved config as a nested dict (ConfigDict.to_dict(), or results.json's).
    leave_out: dotted fields (leaves or whole groups) left out of the hash.
    extra: when given, hashed beside the config as {'config': ..., **extra} (e.g. the simulated
      link of a timing run, which changes its times).
    digits: how many hex digits.

  Returns:
    The hash.
  """
  kept = as_json(config)
  for field in LATER_FIELDS:
    *parents, leaf = field.split('.')
    node = kept
    for part in parents:
      node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and leaf in node and at_later_default(field, node[leaf]):
      del node[leaf]
  for path in leave_out:
    *parents, leaf = path.split('.')
    node = kept
    for part in parents:
      node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
      node.pop(leaf, None)
  if extra:
    kept = {'config': kept, **extra}
  text = json.dumps(kept, sort_keys=True, separators=(',', ':'))
  return hashlib.sha256(text.encode()).hexdigest()[:digits]


def value_text(value) -> str:
  """`value` as the entry point's command line takes it (`--config.<path>=<text>`)."""
  if isinstance(value, bool):
    return 'true' if value else 'false'
  if isinstance(value, (tuple, list)):
    return repr(tuple(value))
  return str(value) if isinstance(value, str) else repr(value)


def parse_text(kind: type, text: str):
  """`text` as ml_collections' command line reads it for a field of type `kind`.

  Raises:
    ValueError: the text is not a value of that type.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections.config_flags import tuple_parser  # pylint: disable=g-import-not-at-top

  parsers = {
    bool: flags.BooleanParser(),
    int: flags.IntegerParser(),
    float: flags.FloatParser(),
    tuple: tuple_parser.TupleParser(),
  }
  if kind is str:
    return text
  if kind in parsers:
    return parsers[kind].parse(text)
  try:
    return ast.literal_eval(text)
  except (SyntaxError, ValueError):
    return text


def field_hint(config, path: str) -> str:
  """For a dotted `path` that names no field of `config`: the closest valid field, or where the
  fields are listed."""
  import difflib  # pylint: disable=g-import-not-at-top

  close = difflib.get_close_matches(path, list(flatten(config)), n=1, cutoff=0.5)
  return f"did you mean '{close[0]}'?" if close else 'see configs/common.py for the fields'


def _node(config, path: str, label: str):
  """(the group holding dotted `path`, its last part), or UsageError naming the closest field."""
  *parents, leaf = path.split('.')
  node = config
  for part in parents:
    node = node[part] if hasattr(node, 'items') and part in node else None
  if not hasattr(node, 'items') or leaf not in node:
    hint = field_hint(config, path)
    raise errors.UsageError(f"{label}: the config has no field '{path}'; {hint}")
  if hasattr(node[leaf], 'items'):
    raise errors.UsageError(f"{label}: '{path}' is a group of fields; set its fields one by one")
  return node, leaf


def set_field(config, path: str, value, from_text: bool = False, label: str = '') -> str:
  """Sets dotted field `path` of the ConfigDict `config` to `value`.

  Args:
    config: the ConfigDict (locked or not: only existing fields are set).
    path: the dotted field, e.g. 'optimizer.learning_rate'.
    value: the value, or (from_text) its command-line text.
    from_text: read `value` by the field's type, as the entry point's command line does.
    label: how the override is named in messages (default `--config.<path>=<value>`).

  Returns:
    The value as the entry point's command line takes it (`value_text`).

  Raises:
    errors.UsageError: no such field (the closest one named), a group of fields, a value of
      another type, or a value that would not read back as itself from the command line.
  """
  label = label or f'--config.{path}={value}'
  node, leaf = _node(config, path, label)
  kind = node.get_type(leaf)
  allowed = f'allowed: a value of type {kind.__name__}'
  try:
    node[leaf] = parse_text(kind, value) if from_text else value
  except TypeError:  # ConfigDict's refusal of another type.
    raise errors.UsageError(f'{label} is invalid; {allowed}') from None
  except ValueError as e:  # The command-line parser's refusal of a text.
    why = '; '.join(str(a) for a in e.args)
    raise errors.UsageError(f'{label} is invalid; {allowed} ({why})') from None
  value = node[leaf]
  text = value_text(value)
  # The entry point receives the override as text: it must read back as this very value, or the
  # run's config (and so its hash) would differ from the one checked here.
  try:
    back = parse_text(kind, text)
  except (TypeError, ValueError):
    back = None
  if value is None or back != value or type(back) is not type(value):
    raise errors.UsageError(
      f'{label} cannot be passed to the entry point as --config.{path}={text}; give a value of '
      f'type {kind.__name__}'
    )
  return text


def get_field(config, path: str):
  """The value of dotted field `path` of a nested ConfigDict or dict."""
  for part in path.split('.'):
    config = config[part]
  return config

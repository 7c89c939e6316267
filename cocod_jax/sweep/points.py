"""A sweep's points: expanded from its experiment file, resolved, validated, named and hashed.

An experiment file holds `get_config(arg)` (one cell) and `sweep(add, arg)` (every cell).
`sweep` calls `add` once per point with the point's `:`-argument and, optionally, overrides of
config fields by their dotted path, as a dict or as keywords with `__` for the dots:

  add(config_arg='algo=cocod_sgd,task=c10_r18,scale=cpu,seed=0')
  add(config_arg='algo=ssgd,scale=smoke', overrides={'optimizer.learning_rate': 0.1})
  add(config_arg='algo=ssgd,scale=smoke', optimizer__learning_rate=0.1, seed=1)

A file without `sweep` is a sweep of one point, its own argument. Each point lives in
`DIR/points/<slug>-<hash>`: the slug is readable (`cocod_sgd.c10_r18.cpu.s0`), the hash is 8 hex
digits of the resolved config without config_loader.NON_RESULT_FIELDS, so points of several
sweeps with equal configs share a directory.
"""

import dataclasses
import glob
import os
import re
import sys

from cocod_jax.config import args as config_args
from cocod_jax.config import errors
from cocod_jax.config import loader as config_loader
from cocod_jax.record import provenance

SLUG_MAX = 100
_NUMBER = re.compile(r'[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?')


@dataclasses.dataclass
class Point:
  """One point of a sweep, resolved and validated.

  `overrides` are the dotted fields set on top of `get_config(config_arg)` (the point's own from
  `add`, then the sweep-wide ones), `texts` the same values as the entry point's command line
  takes them, `config` the resolved config as JSON (what results.json records).
  """

  index: int
  config_file: str  # Relative to provenance.ROOT when inside it (the runs' working directory).
  config_arg: str
  overrides: dict
  texts: dict
  config: dict
  slug: str
  hash: str
  dir: str
  link_rate: str = ''  # Simulated link of an MPI point (launch/simnet.sh); '' for none.

  @property
  def backend(self) -> str:
    return self.config.get('backend', 'one_host')

  @property
  def num_workers(self) -> int:
    return int(self.config.get('num_workers', 1))

  @property
  def ranks(self) -> int:
    """MPI processes: num_workers / mpi.workers_per_rank (one per worker when that is 0)."""
    width = int((self.config.get('mpi') or {}).get('workers_per_rank', 0) or 0)
    return self.num_workers // width if width else self.num_workers


def config_hash(config: dict, link_rate: str = '') -> str:
  """8 hex digits of the SHA-256 of `config` without config_loader.NON_RESULT_FIELDS.

  Args:
    config: a resolved config as JSON (a nested dict), e.g. results.json's "config".
    link_rate: the simulated link an MPI point ran on ('' for none); it changes the timings.

  Returns:
    The hash that names the point's directory.
  """
  timed = link_rate and config.get('backend') == 'mpi'
  extra = {'link_rate': link_rate} if timed else None
  return config_loader.config_hash(config, config_loader.NON_RESULT_FIELDS, extra)


def slug(config_arg: str, overrides: dict | None = None) -> str:
  """A readable, filesystem-safe name of a point: its argument's values, then its overrides.

  Text values stand as they are, numbers behind the key's first letter (seed=0 -> s0), true as
  the key and false as no_<key>; an override is `<last part of its path>-<value>`:
  'algo=cocod_sgd,task=c10_r18,scale=cpu,seed=0' -> 'cocod_sgd.c10_r18.cpu.s0'. The hash beside
  the slug, not the slug, tells points apart.

  Args:
    config_arg: the point's `key=value,...` argument.
    overrides: dotted field -> value.

  Returns:
    The slug ('default' when both are empty).
  """
  parts = []
  try:
    pairs = config_args.split(config_arg)
  except config_args.ConfigArgError:
    pairs = [('', config_arg)]
  for key, text in pairs:
    if text.lower() == 'true':
      parts.append(key)
    elif text.lower() == 'false':
      parts.append(f'no_{key}')
    elif key and _NUMBER.fullmatch(text):
      parts.append(key[0] + text)
    elif text:
      parts.append(text)
  for path, value in (overrides or {}).items():
    is_seq = isinstance(value, (tuple, list))
    shown = '_'.join(map(str, value)) if is_seq else config_loader.value_text(value)
    parts.append(f'{path.rsplit(".", 1)[-1]}-{shown}')
  text = re.sub(r'[^A-Za-z0-9._+-]+', '_', '.'.join(parts)).strip('._-')
  return text[:SLUG_MAX].rstrip('._-') or 'default'


def sweep_name(config: str) -> str:
  """The name of a sweep's summary folder: the experiment file's stem and the sweep argument."""
  path, arg = config_loader.split(config)
  stem = os.path.splitext(os.path.basename(path))[0]
  return stem if not arg else f'{stem}.{slug(arg)}'


def command_path(path: str) -> str:
  """`path` as the runs (working directory provenance.ROOT) name it: relative when inside it."""
  full = os.path.abspath(path)
  rel = os.path.relpath(full, provenance.ROOT)
  return full if rel.startswith('..') else rel


def _point_dir(workdir: str, name: str, digest: str) -> str:
  """The directory of a point: its own `<slug>-<hash>`, or one already holding the same hash."""
  points = os.path.join(workdir, 'points')
  own = os.path.join(points, f'{name}-{digest}')
  if os.path.isdir(own):
    return own
  shared = sorted(glob.glob(os.path.join(glob.escape(points), f'*-{digest}')))
  return shared[0] if shared else own


def _calls(config: str):
  """Loads the experiment file and runs its `sweep(add, arg)`; returns (module, [(config_arg,
  {dotted field: value})]) in the order `add` was called."""
  path, arg = config_loader.split(config)
  if not os.path.isfile(path):
    raise errors.UsageError(f'--config={config}: no such experiment file {path!r}')
  try:
    module = config_loader.load_module(path)
  except Exception as e:  # pylint: disable=broad-except
    raise errors.UsageError(f'--config={config} could not be loaded: {type(e).__name__}: {e}')
  calls = []

  def add(config_arg: str = '', overrides: dict | None = None, **dotted):
    """Adds one point: `config_arg`, and overrides as a dict and/or keywords (`a__b` = `a.b`)."""
    merged = dict(overrides or {})
    for key, value in dotted.items():
      field = key.replace('__', '.')
      if field in merged:
        raise errors.UsageError(f'add(config_arg={config_arg!r}): {field} is given twice')
      merged[field] = value
    calls.append((str(config_arg), merged))

  if not hasattr(module, 'sweep'):
    add(arg)
  else:
    try:
      module.sweep(add, arg or None)
    except errors.UsageError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise errors.UsageError(f'{path}: sweep(add, {arg!r}) failed: {type(e).__name__}: {e}')
  if not calls:
    raise errors.UsageError(
      f'--config={config}: the sweep has no points (sweep(add, arg) never added)'
    )
  return module, calls


def _resolve(module, config_arg: str, point_overrides: dict, sweep_overrides: dict, from_text):
  """One point's get_config, overrides and validation.

  Returns:
    (the ConfigDict, path -> command-line text of each override, the point's problems, the
    problems of the sweep-wide overrides).
  """
  from cocod_jax import validation as config_validation  # pylint: disable=g-import-not-at-top

  try:
    config = config_loader.get_config(module, config_arg)
  except errors.UsageError as e:  # The wrong type, a required field missing: says which.
    return None, {}, e.problems, []
  except Exception as e:  # pylint: disable=broad-except
    return None, {}, [f'get_config({config_arg!r}) failed: {type(e).__name__}: {e}'], []
  config.lock()  # As the entry point (lock_config=True): an override cannot add a field.
  texts, problems = {}, ([], [])
  for overrides, is_text, out in (
    (point_overrides, False, problems[0]),
    (sweep_overrides, from_text, problems[1]),
  ):
    for path, value in overrides.items():
      try:
        text = config_loader.set_field(config, path, value, is_text, f'override {path}={value!r}')
      except errors.UsageError as e:
        out.extend(e.problems)
        continue
      texts.pop(path, None)  # A sweep-wide override replaces the point's own.
      texts[path] = text
  # As main refuses them: an override of a field the point's algorithm does not read.
  as_given = config_loader.get_config(module, config_arg) if texts else None
  return config, texts, problems[0] + config_validation.errors(config, as_given), problems[1]


def _make_point(i, path, config_arg, name, resolved, texts, workdir, link_rate) -> Point:
  """The Point of a resolved, valid config."""
  as_json = config_loader.as_json(resolved.to_dict())
  rate = link_rate if as_json.get('backend') == 'mpi' else ''
  digest = config_hash(as_json, rate)
  # The values as set (a float field turns 1 into 1.0), the point's own then the sweep-wide.
  values = {p: config_loader.as_json(config_loader.get_field(resolved, p)) for p in texts}
  return Point(
    index=i,
    config_file=command_path(path),
    config_arg=config_arg,
    overrides=values,
    texts=texts,
    config=as_json,
    slug=name,
    hash=digest,
    dir=_point_dir(workdir, name, digest),
    link_rate=rate,
  )


def expand(
  config: str,
  workdir: str,
  overrides: dict | None = None,
  link_rate: str = '',
  overrides_as_text: bool = False,
) -> list[Point]:
  """Every point of the sweep `config`, resolved and validated; writes nothing.

  Args:
    config: `FILE[:ARG]`, the experiment file and the argument of its `sweep(add, arg)`.
    workdir: the sweep's working directory (need not exist).
    overrides: dotted field -> value set on every point after its own overrides.
    link_rate: the simulated link for MPI points (launch/simnet.sh --rate), '' for none.
    overrides_as_text: `overrides`' values are command-line text, read by each field's type.

  Returns:
    The points in the order `sweep` added them.

  Raises:
    errors.UsageError: every problem: a missing file, a failing `sweep`, duplicates, unknown
      override fields, invalid configs (each line names the point and the field).
  """
  module, calls = _calls(config)
  path = config_loader.split(config)[0]
  workdir = os.path.abspath(workdir)
  problems, points, seen, sweep_wide = [], [], {}, {}
  for i, (config_arg, point_overrides) in enumerate(calls):
    name = slug(config_arg, point_overrides)
    key = (config_arg, repr(sorted(point_overrides.items())))
    if key in seen:
      problems.append(
        f'point {i} ({name}) duplicates point {seen[key]}: config_arg={config_arg!r}, overrides='
        f'{point_overrides}; add each point once'
      )
      continue
    seen[key] = i
    resolved, texts, reasons, wide = _resolve(
      module, config_arg, point_overrides, overrides or {}, overrides_as_text
    )
    sweep_wide.update(dict.fromkeys(wide))  # Said once, not once per point.
    problems += [f'point {i} ({name}): {reason}' for reason in reasons]
    if not (reasons or wide):
      points.append(_make_point(i, path, config_arg, name, resolved, texts, workdir, link_rate))
  problems += [f'every point: {problem}' for problem in sweep_wide]
  if problems:
    raise errors.UsageError(problems)
  return points


def command(point: Point, launcher: str = 'local', python: str | None = None) -> list[str]:
  """The command that runs `point` from provenance.ROOT.

  Args:
    point: the point.
    launcher: 'local' (MPI points under launch/mpirun.sh, on launch/simnet.sh with a link
      rate) or 'slurm' (the entry point alone: every task of the point's job runs it as one MPI
      rank, the tasks started by submitit's `srun --mpi=pmix`); `point.ranks` ranks either way.
    python: the interpreter; sys.executable by default.

  Returns:
    The argument list.
  """
  config = f'{point.config_file}:{point.config_arg}' if point.config_arg else point.config_file
  cmd = [python or sys.executable, '-m', 'cocod_jax.main', f'--config={config}']
  cmd += [f'--workdir={point.dir}'] + [f'--config.{p}={t}' for p, t in point.texts.items()]
  if point.backend != 'mpi' or launcher == 'slurm':
    return cmd
  cmd = ['launch/mpirun.sh', '-np', str(point.ranks)] + cmd
  return simnet_args(point.link_rate) + cmd if point.link_rate else cmd


LINK_PATTERN = r'[0-9.]+[kmg]?bit(/[0-9]+[kmg]?b?(/[0-9]+)?)?'  # RATE[/BURST[/MTU]]


def simnet_args(link: str) -> list[str]:
  """launch/simnet.sh's arguments for a link `RATE[/BURST[/MTU]]` (tc units; MTU in bytes),
  e.g. '1gbit' or '50mbit/8kb/8000' (a small bucket and MTU shape messages of a few kB)."""
  rate, burst, mtu = (link.split('/') + ['', ''])[:3]
  args = ['launch/simnet.sh', '--rate', rate]
  args += ['--burst', burst] if burst else []
  args += ['--mtu', mtu] if mtu else []
  return args + ['--']

"""The resumable sweep runner: `python -m cocod_jax.sweep --config=FILE[:ARG] --workdir=DIR`.

An experiment file holds `get_config(arg)` (one cell) and `sweep(add, arg)` (every cell). `sweep`
calls `add` once per point with the point's `:`-argument and, optionally, overrides of config
fields by their dotted path, either as a dict or as keywords with `__` for the dots:

  add(config_arg='algo=cocod_sgd,task=c10_r18,scale=cpu,seed=0')
  add(config_arg='algo=ssgd,scale=smoke', overrides={'optimizer.learning_rate': 0.1})
  add(config_arg='algo=ssgd,scale=smoke', optimizer__learning_rate=0.1, seed=1)

A file without `sweep` is a sweep of one point, its own argument. Every point is expanded,
resolved (`get_config(config_arg)`, then the overrides) and validated before anything is written;
duplicates and invalid points refuse the whole sweep with every reason and exit status 2.

Each point lives in `DIR/points/<slug>-<hash>`: the slug is readable (`cocod_sgd.c10_r18.cpu.s0`),
the hash is 8 hex digits of the SHA-256 of the resolved config without NON_RESULT_FIELDS, so
points of several sweeps with equal configs share a directory and a second invocation runs
nothing that is done. States, read from disk (`state`):

  DONE        results.json completed, its config hashing to the point's hash
  DIVERGED    results.json diverged (finished: not rerun)
  RUNNING     a lock holding a live pid on this host, or a Slurm job id still queued
  FAILED      status.json with a non-zero exit status, or a results.json that does not follow
              `results_schema` (rerun with --retry_failed)
  INCOMPLETE  point.json but none of the above, e.g. a killed or preempted run (rerun into the
              same directory: the entry point resumes from its checkpoint)
  PENDING     nothing yet
  MISMATCH    the directory holds another config (never touched: move it aside)

and the flag STALE: point.json's commit is not HEAD (kept; --rerun_stale moves such directories
aside and runs the points again). Points run as subprocesses of the entry point (`launch/
mpirun.sh -np R` in front for the MPI backend, R = num_workers / mpi.workers_per_rank, one rank
per worker when that is 0), stdout and stderr in the point's log.txt, with
point.json written before and status.json after. The summary table goes to the terminal and to
`DIR/sweeps/<name>/sweep.md` and `sweep.json`, where <name> is the experiment file's name and
the sweep argument (`table1.cpu.s1`): sweeps that share a workdir keep their own summaries.

Exit status: 0 when every point is DONE or DIVERGED (and after a dry run or writing a Slurm
array), 1 otherwise, 2 for a refused sweep. `--launcher=slurm` writes `pending.json` and an
array script `sweep.sbatch` beside the summary, whose tasks run one point each
(`--run_index=$SLURM_ARRAY_TASK_ID`, ranks through `srun`).

Library use (the entry points of cocod_jax/experiments): `records = run_sweep('configs/x.py:arg',
workdir=...)` runs what is missing and returns `collect(points)`: one dict per point with its
state, directory, hash and parsed results.json. `SweepError` is raised for a refused sweep.
"""

import ast
import dataclasses
import datetime
import glob
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # Experiment files import `configs.*` from the repository root.
  sys.path.insert(0, ROOT)

from cocod_jax import config_args  # noqa: E402
from cocod_jax import files  # noqa: E402
from cocod_jax import results_schema  # noqa: E402

# Dotted fields left out of a point's hash: they cannot change its results (where data is read
# from, how long a collective may take before the job is ended, how often rounds are timed, when
# checkpoints are written: a resumed run continues bit for bit).
NON_RESULT_FIELDS = ('data_dir', 'comm.timeout_s', 'timeline.sample_every', 'checkpoint')
FINISHED = ('DONE', 'DIVERGED')
EXIT_USAGE = 2
EXIT_PREEMPTED = 75  # checkpoints.EXIT_PREEMPTED; not imported, as that module starts JAX.
EXIT_TIMED_OUT = 124  # Recorded when --timeout_s ended the run (the `timeout` command's status).
DEFAULT_TIMEOUT_S = 7 * 24 * 3600.0
KILL_GRACE_S = 120.0  # After SIGTERM a run checkpoints and exits 75; then SIGKILL.
LOG_TAIL_LINES = 40
SLUG_MAX = 100
_NUMBER = re.compile(r'[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?')


class SweepError(ValueError):
  """A sweep refused before anything was written; `problems` holds one line per reason."""

  def __init__(self, problems):
    self.problems = [problems] if isinstance(problems, str) else list(problems)
    super().__init__('\n'.join(self.problems))


@dataclasses.dataclass
class Point:
  """One point of a sweep, resolved and validated.

  `overrides` are the dotted fields set on top of `get_config(config_arg)` (the point's own from
  `add`, then the sweep-wide ones), `texts` the same values as the entry point's command line
  takes them, `config` the resolved config as JSON (what results.json records).
  """

  index: int
  config_file: str  # Relative to ROOT when inside it (the runs' working directory).
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


@dataclasses.dataclass
class State:
  """A point's state on disk; `detail` says why when it is not obvious."""

  name: str
  stale: bool | None = None  # None: no point.json to compare with.
  detail: str = ''


# --------------------------------------------------------------------------- expansion


def _json(value):
  """`value` as JSON sees it (tuples become lists), so that hashes of a config and of its copy
  in results.json agree."""
  return json.loads(json.dumps(value))


def config_hash(config: dict, link_rate: str = '') -> str:
  """8 hex digits of the SHA-256 of `config` without NON_RESULT_FIELDS.

  Args:
    config: a resolved config as JSON (a nested dict), e.g. results.json's "config".
    link_rate: the simulated link an MPI point ran on ('' for none); it changes the timings.

  Returns:
    The hash that names the point's directory.
  """
  kept = _json(config)
  for path in NON_RESULT_FIELDS:
    *parents, leaf = path.split('.')
    node = kept
    for part in parents:
      node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
      node.pop(leaf, None)
  if link_rate and kept.get('backend') == 'mpi':
    kept = {'config': kept, 'link_rate': link_rate}
  text = json.dumps(kept, sort_keys=True, separators=(',', ':'))
  return hashlib.sha256(text.encode()).hexdigest()[:8]


def _value_text(value) -> str:
  if isinstance(value, bool):
    return 'true' if value else 'false'
  if isinstance(value, (tuple, list)):
    return repr(tuple(value))
  return str(value) if isinstance(value, str) else repr(value)


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
    shown = '_'.join(map(str, value)) if isinstance(value, (tuple, list)) else _value_text(value)
    parts.append(f'{path.rsplit(".", 1)[-1]}-{shown}')
  text = re.sub(r'[^A-Za-z0-9._+-]+', '_', '.'.join(parts)).strip('._-')
  return text[:SLUG_MAX].rstrip('._-') or 'default'


def split_config(config: str) -> tuple[str, str]:
  """`FILE[:ARG]` -> (FILE, ARG), as ml_collections splits `--config`."""
  path, _, arg = config.partition(':')
  return path, arg


def _command_path(path: str) -> str:
  """`path` as the runs (working directory ROOT) name it: relative to ROOT when inside it."""
  full = os.path.abspath(path)
  rel = os.path.relpath(full, ROOT)
  return full if rel.startswith('..') else rel


def sweep_name(config: str) -> str:
  """The name of a sweep's summary folder: the experiment file's stem and the sweep argument."""
  path, arg = split_config(config)
  stem = os.path.splitext(os.path.basename(path))[0]
  return stem if not arg else f'{stem}.{slug(arg)}'


def load_experiment(path: str):
  """Executes the experiment file at `path` as a fresh module."""
  spec = importlib.util.spec_from_file_location(
    '_sweep_' + re.sub(r'\W', '_', os.path.basename(path)), path
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _parse_text(kind: type, text: str):
  """`text` as the entry point's command line reads it for a field of type `kind`."""
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


def _set(config, path: str, value, from_text: bool) -> tuple[str | None, str | None]:
  """Sets dotted field `path` of the ConfigDict `config` to `value`.

  Returns:
    (the value as the entry point's command line takes it, None) or (None, the problem).
  """
  *parents, leaf = path.split('.')
  node = config
  for part in parents:
    node = node[part] if hasattr(node, 'items') and part in node else None
  if not hasattr(node, 'items') or leaf not in node:
    from cocod_jax import config_validation  # pylint: disable=g-import-not-at-top

    hint = config_validation.field_hint(config, path)
    return None, f"override {path}={value!r}: the config has no field '{path}'; {hint}"
  if hasattr(node[leaf], 'items'):
    return None, f"override {path}: '{path}' is a group of fields; set its fields one by one"
  kind = node.get_type(leaf)
  try:
    if from_text:
      value = _parse_text(kind, value)
    node[leaf] = value
  except TypeError:  # ConfigDict's refusal of another type.
    return None, f'override {path}={value!r} is invalid; allowed: a value of type {kind.__name__}'
  except ValueError as e:  # The command-line parser's refusal of a text.
    return None, f'override {path}={value!r} is invalid for a field of type {kind.__name__}: {e}'
  value = node[leaf]
  text = _value_text(value)
  # The entry point receives the override as text: it must read back as this very value, or the
  # run's config (and so its hash) would differ from the one validated here.
  try:
    back = _parse_text(kind, text)
  except (TypeError, ValueError):
    back = None
  if value is None or back != value or type(back) is not type(value):
    return None, (
      f'override {path}={value!r} cannot be passed to the entry point as --config.{path}='
      f'{text}; give a value of type {kind.__name__}'
    )
  return text, None


def _resolve(module, config_arg: str, point_overrides: dict, global_overrides: dict, from_text):
  """One point's get_config, overrides and validation.

  Returns:
    (the ConfigDict, path -> command-line text of each override, the point's problems, the
    problems of the sweep-wide overrides).
  """
  from cocod_jax import config_validation  # pylint: disable=g-import-not-at-top

  try:
    config = module.get_config(config_arg) if config_arg else module.get_config()
  except Exception as e:  # pylint: disable=broad-except
    return None, {}, [f'get_config({config_arg!r}) failed: {type(e).__name__}: {e}'], []
  config.lock()  # As the entry point (lock_config=True): an override cannot add a field.
  texts, problems = {}, ([], [])
  for overrides, is_text, out in (
    (point_overrides, False, problems[0]),
    (global_overrides, from_text, problems[1]),
  ):
    for path, value in overrides.items():
      text, problem = _set(config, path, value, is_text)
      if problem:
        out.append(problem)
      else:
        texts.pop(path, None)  # A sweep-wide override replaces the point's own.
        texts[path] = text
  return config, texts, problems[0] + config_validation.errors(config), problems[1]


def _point_dir(workdir: str, name: str, digest: str) -> str:
  """The directory of a point: its own `<slug>-<hash>`, or one already holding the same hash."""
  points = os.path.join(workdir, 'points')
  own = os.path.join(points, f'{name}-{digest}')
  if os.path.isdir(own):
    return own
  shared = sorted(glob.glob(os.path.join(glob.escape(points), f'*-{digest}')))
  return shared[0] if shared else own


def _calls(config: str, path: str, arg: str):
  """Loads the experiment file and runs its `sweep(add, arg)`; returns (module, [(config_arg,
  {dotted field: value})]) in the order `add` was called."""
  if not os.path.isfile(path):
    raise SweepError(f'--config={config}: no such experiment file {path!r}')
  try:
    module = load_experiment(path)
  except Exception as e:  # pylint: disable=broad-except
    raise SweepError(f'--config={config} could not be loaded: {type(e).__name__}: {e}') from e
  calls = []

  def add(config_arg: str = '', overrides: dict | None = None, **dotted):
    """Adds one point: `config_arg`, and overrides as a dict and/or keywords (`a__b` = `a.b`)."""
    merged = dict(overrides or {})
    for key, value in dotted.items():
      path_ = key.replace('__', '.')
      if path_ in merged:
        raise SweepError(f'add(config_arg={config_arg!r}): {path_} is given twice')
      merged[path_] = value
    calls.append((str(config_arg), merged))

  if hasattr(module, 'sweep'):
    try:
      module.sweep(add, arg or None)
    except SweepError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise SweepError(f'{path}: sweep(add, {arg!r}) failed: {type(e).__name__}: {e}') from e
  else:
    add(arg)
  if not calls:
    raise SweepError(f'--config={config}: the sweep has no points (sweep(add, arg) never added)')
  return module, calls


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
    SweepError: every problem: a missing file, a failing `sweep`, duplicates, unknown override
      fields, invalid configs (each line names the point and the field).
  """
  path, arg = split_config(config)
  module, calls = _calls(config, path, arg)
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
    if reasons or wide:
      problems += [f'point {i} ({name}): {reason}' for reason in reasons]
      continue
    as_json = _json(resolved.to_dict())
    rate = link_rate if as_json.get('backend') == 'mpi' else ''
    digest = config_hash(as_json, rate)
    # The values as set (a float field turns 1 into 1.0), the point's own then the sweep-wide.
    values = {p: _json(_get(resolved, p)) for p in texts}
    points.append(
      Point(
        index=i,
        config_file=_command_path(path),
        config_arg=config_arg,
        overrides=values,
        texts=texts,
        config=as_json,
        slug=name,
        hash=digest,
        dir=_point_dir(workdir, name, digest),
        link_rate=rate,
      )
    )
  problems += [f'every point: {problem}' for problem in sweep_wide]
  if problems:
    raise SweepError(problems)
  return points


def _get(config, path):
  for part in path.split('.'):
    config = config[part]
  return config


# --------------------------------------------------------------------------- commands


def command(point: Point, launcher: str = 'local', python: str | None = None) -> list[str]:
  """The command that runs `point` from ROOT.

  Args:
    point: the point.
    launcher: 'local' (MPI points under launch/mpirun.sh, on launch/simnet.sh with a link
      rate) or 'slurm' (MPI points under `srun --mpi=pmix` inside the array task).
    python: the interpreter; sys.executable by default.

  Returns:
    The argument list.
  """
  config = f'{point.config_file}:{point.config_arg}' if point.config_arg else point.config_file
  cmd = [python or sys.executable, '-m', 'cocod_jax.main', f'--config={config}']
  cmd += [f'--workdir={point.dir}'] + [f'--config.{p}={t}' for p, t in point.texts.items()]
  if point.backend != 'mpi':
    return cmd
  n = str(point.ranks)
  if launcher == 'slurm':
    return ['srun', '--mpi=pmix', '-n', n] + cmd
  cmd = ['launch/mpirun.sh', '-np', n] + cmd
  return ['launch/simnet.sh', '--rate', point.link_rate, '--'] + cmd if point.link_rate else cmd


# --------------------------------------------------------------------------- state


def git_head() -> str:
  """HEAD's commit in ROOT, or 'unknown' without git."""
  try:
    p = subprocess.run(
      ['git', 'rev-parse', 'HEAD'], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
  except (OSError, subprocess.SubprocessError):
    return 'unknown'
  return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else 'unknown'


def _git_dirty() -> bool | None:
  try:
    p = subprocess.run(
      ['git', 'status', '--porcelain', '--untracked-files=no'],
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=30,
    )
  except (OSError, subprocess.SubprocessError):
    return None
  return bool(p.stdout.strip()) if p.returncode == 0 else None


def _read_json(path: str):
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def _pid_alive(pid) -> bool:
  if not isinstance(pid, int) or pid <= 0:
    return False
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # Someone else's live process.
  return True


def _slurm_job_alive(job_id: str) -> bool:
  """Whether Slurm still has `job_id` (queued or running); True when squeue cannot tell."""
  if not shutil.which('squeue'):
    return True
  try:
    p = subprocess.run(
      ['squeue', '-h', '-j', str(job_id), '-o', '%T'], capture_output=True, text=True, timeout=30
    )
  except (OSError, subprocess.SubprocessError):
    return True
  if p.returncode != 0:
    return 'invalid job id' not in p.stderr.lower()
  return bool(p.stdout.strip())


def lock_holder(directory: str) -> str | None:
  """Who holds the point's lock ('pid 12 on host', 'Slurm job 7_3'), None when nobody live does.

  A lock with a Slurm job id holds while Slurm knows the job (without squeue: always); one with
  pids holds while one of them lives on this host. Another host's pids cannot be checked here:
  that lock does not hold (its run shows as INCOMPLETE).
  """
  lock = _read_json(os.path.join(directory, 'lock'))
  if not isinstance(lock, dict):
    return None
  job = lock.get('slurm_job_id')
  if job:
    return f'Slurm job {job}' if _slurm_job_alive(job) else None
  if lock.get('host') != socket.gethostname():
    return None
  for key in ('pid', 'child_pid'):
    if _pid_alive(lock.get(key)):
      return f'pid {lock[key]} on {lock["host"]}'
  return None


def state(point: Point, head: str | None = None) -> State:
  """The state of `point` from its directory (see the module docstring for the rules).

  Args:
    point: the point.
    head: HEAD's commit (git_head()), for the STALE flag; None leaves the flag unset.

  Returns:
    The State.
  """
  d = point.dir
  info = _read_json(os.path.join(d, 'point.json'))
  stale = None
  if isinstance(info, dict) and head:
    recorded = info.get('commit', 'unknown')
    stale = head != 'unknown' and recorded != head
  holder = lock_holder(d)
  if holder:
    return State('RUNNING', stale, holder)
  if isinstance(info, dict) and info.get('hash') not in (None, point.hash):
    return State(
      'MISMATCH', stale, f"point.json's hash {info.get('hash')} is not the point's {point.hash}"
    )
  results = _read_json(os.path.join(d, 'results.json'))
  if isinstance(results, dict) and results.get('status') in ('completed', 'diverged'):
    try:
      results_schema.check_results(results, os.path.join(d, 'results.json'))
    except results_schema.SchemaError as e:
      return State('FAILED', stale, str(e))
    recorded = config_hash(results.get('config') or {}, point.link_rate)
    if recorded != point.hash:
      fields = _differences(results.get('config') or {}, point.config)
      return State(
        'MISMATCH',
        stale,
        f"results.json's config hashes to {recorded}, not {point.hash} "
        f'(differs at {", ".join(fields[:5]) or "fields left out of the hash"})',
      )
    return State('DONE' if results['status'] == 'completed' else 'DIVERGED', stale)
  status = _read_json(os.path.join(d, 'status.json'))
  if isinstance(status, dict):
    rc = status.get('rc')
    if rc == EXIT_PREEMPTED:
      return State('INCOMPLETE', stale, 'preempted (a rerun resumes from its checkpoint)')
    if rc != 0:
      return State('FAILED', stale, f'exit status {rc}')
  if isinstance(info, dict):
    return State('INCOMPLETE', stale)
  return State('PENDING')


def _differences(a, b, prefix='') -> list[str]:
  """Dotted fields whose values differ between nested dicts `a` and `b`."""
  out = []
  for key in sorted(set(a) | set(b)):
    x, y = a.get(key), b.get(key)
    if isinstance(x, dict) and isinstance(y, dict):
      out += _differences(x, y, f'{prefix}{key}.')
    elif x != y:
      out.append(prefix + key)
  return out


def collect(points: list[Point], head: str | None = None) -> list[dict]:
  """Per-point records read from disk, in the sweep's order.

  Args:
    points: from `expand`.
    head: HEAD's commit; git_head() when None.

  Returns:
    One dict per point: slug, dir, hash, state, stale (bool or None), detail, config_file,
    config_arg, overrides, rc and wall_s (status.json, or None), metrics (results.json's
    "final", or None) and results (the parsed results.json of a DONE or DIVERGED point, else
    None).
  """
  head = git_head() if head is None else head
  records = []
  for p in points:
    s = state(p, head)
    results = _read_json(os.path.join(p.dir, 'results.json')) if s.name in FINISHED else None
    status = _read_json(os.path.join(p.dir, 'status.json')) or {}
    records.append(
      dict(
        slug=p.slug,
        dir=p.dir,
        hash=p.hash,
        state=s.name,
        stale=s.stale,
        detail=s.detail,
        config_file=p.config_file,
        config_arg=p.config_arg,
        overrides=p.overrides,
        rc=status.get('rc'),
        wall_s=status.get('wall_s'),
        metrics=(results or {}).get('final'),
        results=results,
      )
    )
  return records


# --------------------------------------------------------------------------- the summary


def _number(value, fmt: str) -> str:
  return '-' if not isinstance(value, (int, float)) or isinstance(value, bool) else fmt % value


def render(records: list[dict], head: str = 'unknown') -> str:
  """The fixed-width summary: one row per point (a missing value is '-'), then the counts and
  the warnings (STALE, FAILED, RUNNING, MISMATCH)."""
  header = ('point', 'state', 'stale', 'wall (s)', 'test acc', 'train time (s)')
  rows = []
  for r in records:
    m = r.get('metrics') or {}
    stale = '-' if r.get('stale') is None else ('yes' if r['stale'] else 'no')
    rows.append(
      (
        os.path.basename(r['dir']),
        r['state'],
        stale,
        _number(r.get('wall_s'), '%.1f'),
        _number(m.get('test_accuracy'), '%.4f'),
        _number(m.get('train_time_s'), '%.1f'),
      )
    )
  widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
  left = (True, True, True, False, False, False)

  def line(cells):
    out = [str(c).ljust(w) if lft else str(c).rjust(w) for c, w, lft in zip(cells, widths, left)]
    return '| ' + ' | '.join(out) + ' |'

  rule = [':' + '-' * (w + 1) if lft else '-' * (w + 1) + ':' for w, lft in zip(widths, left)]
  lines = [line(header), '|' + '|'.join(rule) + '|'] + [line(r) for r in rows]
  counts = {}
  for r in records:
    counts[r['state']] = counts.get(r['state'], 0) + 1
  order = ('DONE', 'DIVERGED', 'RUNNING', 'FAILED', 'INCOMPLETE', 'PENDING', 'MISMATCH')
  shown = ', '.join(f'{counts[s]} {s}' for s in order if s in counts)
  lines += ['', f'{len(records)} point{"s" * (len(records) != 1)}: {shown}']
  stale = [r for r in records if r.get('stale')]
  if stale:
    lines.append(
      f'warning: {len(stale)} point{"s were" if len(stale) > 1 else " was"} run at another '
      f'commit than HEAD ({head[:12]}): kept and not rerun; --rerun_stale runs '
      f'{"them" if len(stale) > 1 else "it"} again'
    )
  for name, advice in (
    ('FAILED', 'see log.txt and status.json in the point directory; --retry_failed runs it again'),
    ('RUNNING', 'another runner or a Slurm job is on it; run this command again later'),
    ('MISMATCH', 'the directory holds another config; move it aside and run again'),
  ):
    for r in records:
      if r['state'] == name:
        why = f' ({r["detail"]})' if r.get('detail') else ''
        lines.append(f'{name}: {os.path.basename(r["dir"])}{why}: {advice}')
  return '\n'.join(lines) + '\n'


def _summary_dir(workdir: str, config: str) -> str:
  return os.path.join(os.path.abspath(workdir), 'sweeps', sweep_name(config))


def write_summary(config: str, workdir: str, records: list[dict], head: str) -> str:
  """Writes sweep.md and sweep.json of `records` atomically; returns the rendered table."""
  table = render(records, head)
  out = _summary_dir(workdir, config)
  os.makedirs(out, exist_ok=True)
  files.write_atomic(
    os.path.join(out, 'sweep.md'),
    f'# Sweep {sweep_name(config)}\n\n`--config={config}`, commit {head}\n\n{table}',
  )
  kept = [{k: v for k, v in r.items() if k != 'results'} for r in records]
  files.write_json_atomic(
    os.path.join(out, 'sweep.json'),
    dict(config=config, workdir=os.path.abspath(workdir), commit=head, points=kept),
  )
  return table


# --------------------------------------------------------------------------- running


@dataclasses.dataclass
class _Run:
  point: Point
  label: str
  proc: subprocess.Popen
  log: Any
  offset: int
  start: float
  deadline: float
  timed_out: bool = False
  killed_at: float | None = None


def _now() -> str:
  return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')


def _take_lock(point: Point, slurm_job_id: str | None) -> bool:
  """Creates the point's lock (atomically; a lock nobody live holds is replaced)."""
  path = os.path.join(point.dir, 'lock')
  body = json.dumps(
    dict(pid=os.getpid(), host=socket.gethostname(), slurm_job_id=slurm_job_id, started=_now())
  )
  for _ in range(2):
    try:
      fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      if lock_holder(point.dir):
        return False
      os.remove(path)
      continue
    with os.fdopen(fd, 'w') as f:
      f.write(body)
    return True
  return False


def _log_tail(path: str, offset: int) -> list[str]:
  try:
    with open(path, 'rb') as f:
      f.seek(offset)
      text = f.read().decode(errors='replace')
  except OSError:
    return []
  return text.splitlines()[-LOG_TAIL_LINES:]


def _move_aside(directory: str, commit: str) -> str:
  base = f'{directory}.stale-{(commit or "unknown")[:8]}'
  target, n = base, 1
  while os.path.exists(target):
    n += 1
    target = f'{base}-{n}'
  os.rename(directory, target)
  return target


def _launch(
  point: Point, launcher: str, head: str, slurm_job_id: str | None, label: str, timeout_s
):
  """Starts `point` (point.json, lock, log) and returns its _Run, or None when it is locked."""
  os.makedirs(point.dir, exist_ok=True)
  if not _take_lock(point, slurm_job_id):
    return None
  cmd = command(point, launcher)
  previous = _read_json(os.path.join(point.dir, 'point.json')) or {}
  files.write_json_atomic(
    os.path.join(point.dir, 'point.json'),
    dict(
      config_file=point.config_file,
      config_arg=point.config_arg,
      overrides=point.overrides,
      config=point.config,
      hash=point.hash,
      slug=point.slug,
      link_rate=point.link_rate,
      commit=head,
      dirty=_git_dirty(),
      command=cmd,
      command_line=shlex.join(cmd),
      created=_now(),
      host=socket.gethostname(),
      launcher=launcher,
      slurm_job_id=slurm_job_id,
      attempt=int(previous.get('attempt', 0)) + 1,
    ),
  )
  # An old status would make a run killed before it ends look FAILED instead of INCOMPLETE.
  if os.path.exists(os.path.join(point.dir, 'status.json')):
    os.remove(os.path.join(point.dir, 'status.json'))
  log_path = os.path.join(point.dir, 'log.txt')
  log = open(log_path, 'ab')  # Appended: a resumed run keeps the killed one's log above.
  offset = log.tell()
  log.write(f'=== {_now()} on {socket.gethostname()}: {shlex.join(cmd)}\n'.encode())
  log.flush()
  env = dict(os.environ)
  # The test suite's and the user's XLA_FLAGS (emulated devices) must not reach the run: the
  # entry point sets the device count from the config.
  env.pop('XLA_FLAGS', None)
  env['PYTHONUNBUFFERED'] = '1'
  proc = subprocess.Popen(
    cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
  )
  lock = _read_json(os.path.join(point.dir, 'lock')) or {}
  files.write_json_atomic(os.path.join(point.dir, 'lock'), dict(lock, child_pid=proc.pid))
  start = time.monotonic()
  return _Run(point, label, proc, log, offset, start, start + timeout_s)


def _finish(run: _Run, head: str) -> State:
  """Writes status.json of an ended run, releases its lock; returns the point's new state."""
  run.log.close()
  rc = run.proc.returncode
  wall = time.monotonic() - run.start
  status = dict(
    rc=EXIT_TIMED_OUT if run.timed_out else rc,
    wall_s=round(wall, 3),
    host=socket.gethostname(),
    finished=_now(),
  )
  if run.timed_out:
    status.update(timed_out=True, child_rc=rc)
  if status['rc'] != 0:
    status['log_tail'] = _log_tail(os.path.join(run.point.dir, 'log.txt'), run.offset)
  files.write_json_atomic(os.path.join(run.point.dir, 'status.json'), status)
  try:
    os.remove(os.path.join(run.point.dir, 'lock'))
  except FileNotFoundError:
    pass
  return state(run.point, head)


def _progress(run: _Run, s: State) -> str:
  p, wall = run.point, time.monotonic() - run.start
  name = os.path.basename(p.dir)
  if s.name == 'DONE':
    results = _read_json(os.path.join(p.dir, 'results.json')) or {}
    acc = (results.get('final') or {}).get('test_accuracy')
    return f'{run.label} {name} ... done in {wall:.0f} s, test acc {_number(acc, "%.3f")}'
  if s.name == 'DIVERGED':
    return f'{run.label} {name} ... diverged in {wall:.0f} s (results.json: diverged)'
  if s.name == 'MISMATCH':
    return f'{run.label} {name} ... finished, but {s.detail}'
  status = _read_json(os.path.join(p.dir, 'status.json')) or {}
  tail = [line for line in status.get('log_tail', []) if line.strip()]
  why = f': {tail[-1].strip()}' if tail else ''
  if status.get('timed_out'):
    return f'{run.label} {name} ... timed out after {wall:.0f} s{why}; log {p.dir}/log.txt'
  if s.name == 'INCOMPLETE':
    return f'{run.label} {name} ... stopped after {wall:.0f} s ({s.detail or "incomplete"})'
  return (
    f'{run.label} {name} ... FAILED (exit status {status.get("rc")}) in {wall:.0f} s{why}; '
    f'log {p.dir}/log.txt'
  )


def _signal_groups(runs, sig):
  for r in runs:
    try:
      os.killpg(r.proc.pid, sig)
    except (ProcessLookupError, PermissionError):
      pass


def _run_points(todo, parallel, launcher, head, timeout_s, fail_fast, slurm_job_id=None):
  """Runs `todo` (up to `parallel` at once); returns {dir: State} of those that ran."""
  queue, running, ended = list(todo), [], {}
  stop = {'signals': 0, 'failed': False}
  handlers = {}

  def on_signal(signum, frame):  # pylint: disable=unused-argument
    # The children run in sessions of their own (so that a timeout can end mpirun and its ranks
    # together) and do not see the terminal's Ctrl-C: pass it on. On SIGTERM a run checkpoints
    # and exits 75 (INCOMPLETE, resumed by the next invocation); a second signal kills it.
    stop['signals'] += 1
    _signal_groups(running, signal.SIGKILL if stop['signals'] > 1 else signal.SIGTERM)

  try:
    for sig in (signal.SIGINT, signal.SIGTERM):
      handlers[sig] = signal.signal(sig, on_signal)
  except ValueError:
    handlers = {}  # Not the main thread: no handlers; the children see the signals themselves.
  total, started = len(queue), 0
  try:
    while queue or running:
      while queue and len(running) < parallel and not stop['signals'] and not stop['failed']:
        point = queue.pop(0)
        started += 1
        label = f'[{started}/{total}]'
        now = state(point, head)  # Another runner may have taken or finished it meanwhile.
        if now.name in FINISHED or now.name in ('RUNNING', 'MISMATCH'):
          print(f'{label} {os.path.basename(point.dir)} ... {now.name}, skipped', flush=True)
          continue
        run = _launch(point, launcher, head, slurm_job_id, label, timeout_s)
        if run is None:
          print(f'{label} {os.path.basename(point.dir)} ... locked by another runner, skipped',
                flush=True)  # fmt: skip
          continue
        print(f'{label} {os.path.basename(point.dir)} ... running (log {point.dir}/log.txt)')
        sys.stdout.flush()
        running.append(run)
      for run in list(running):
        now = time.monotonic()
        if run.proc.poll() is None:
          if not run.timed_out and now > run.deadline:
            run.timed_out, run.killed_at = True, now
            _signal_groups([run], signal.SIGTERM)
          elif run.killed_at is not None and now > run.killed_at + KILL_GRACE_S:
            _signal_groups([run], signal.SIGKILL)
            run.killed_at = float('inf')
          continue
        running.remove(run)
        s = _finish(run, head)
        ended[run.point.dir] = s
        print(_progress(run, s), flush=True)
        if s.name not in FINISHED and fail_fast:
          stop['failed'] = True
      if running:
        time.sleep(0.2)
      if (stop['signals'] or stop['failed']) and not running:
        break
  finally:
    for sig, handler in handlers.items():
      signal.signal(sig, handler)
  if queue:
    why = 'a point failed (--fail_fast)' if stop['failed'] else 'stopped by a signal'
    print(f'{why}: {len(queue)} point(s) not started', flush=True)
  return ended


def _to_run(points, states, retry_failed, rerun_stale) -> list[Point]:
  """The points a run starts (one per directory), in order."""
  out, dirs = [], set()
  for p in points:
    s = states[p.dir]
    wanted = s.name in ('PENDING', 'INCOMPLETE') or (s.name == 'FAILED' and retry_failed)
    wanted = wanted or (rerun_stale and s.stale and s.name not in ('RUNNING', 'MISMATCH'))
    if wanted and p.dir not in dirs:
      dirs.add(p.dir)
      out.append(p)
  return out


# --------------------------------------------------------------------------- Slurm


def _runner_flags(retry_failed, rerun_stale, timeout_s, overrides, overrides_as_text) -> list:
  flags = []
  for path, value in (overrides or {}).items():
    flags.append(f'--set={path}={value if overrides_as_text else _value_text(value)}')
  if retry_failed:
    flags.append('--retry_failed')
  if rerun_stale:
    flags.append('--rerun_stale')
  if timeout_s != DEFAULT_TIMEOUT_S:
    flags.append(f'--timeout_s={timeout_s:g}')
  return flags


def slurm_script(config, workdir, pending, parallel, runner_flags=(), slurm_args=()) -> str:
  """The array job that runs each point of `pending` (from pending.json) as one task.

  Args:
    config: the sweep's `FILE[:ARG]`.
    workdir: the sweep's working directory.
    pending: the points of pending.json (dicts with workers and backend).
    parallel: tasks at once (`%K` of --array).
    runner_flags: flags the tasks pass on to the runner (--set, --retry_failed, ...).
    slurm_args: extra `#SBATCH` options (e.g. '--partition=gpu', '--time=24:00:00').

  Returns:
    The script's text.
  """
  workdir = os.path.abspath(workdir)
  out = _summary_dir(workdir, config)
  ranks = max([p.get('ranks', p['workers']) for p in pending if p['backend'] == 'mpi'] or [1])
  task = [sys.executable, '-m', 'cocod_jax.sweep', f'--config={config}', f'--workdir={workdir}']
  task = shlex.join(task + list(runner_flags)) + ' --run_index="$SLURM_ARRAY_TASK_ID"'
  lines = [
    '#!/bin/bash',
    f'# Sweep {sweep_name(config)}: {len(pending)} points of {config}, one per array task',
    '# (written by cocod_jax.sweep from pending.json beside this file). Submit it with',
    f'#   sbatch {os.path.join(out, "sweep.sbatch")}',
    '# then run the runner again (same --config and --workdir) for the states and the table.',
    '# A preempted task (SIGTERM 120 s before the end) checkpoints, exits 75 and requeues itself.',
    f'#SBATCH --job-name={sweep_name(config)}',
    f'#SBATCH --array=0-{len(pending) - 1}%{parallel}',
    f'#SBATCH --output={os.path.join(out, "%x-%A_%a.out")}',
    f'#SBATCH --ntasks={ranks}',
    '#SBATCH --signal=B:TERM@120',
    '#SBATCH --requeue',
    *[f'#SBATCH {a}' for a in slurm_args],
    'set -euo pipefail',
    f'cd {shlex.quote(ROOT)}',
    '# Several processes may share a node; do not let each JAX process take 75% of a GPU.',
    'export XLA_PYTHON_CLIENT_PREALLOCATE=false',
    f'exec {task}',
  ]
  return '\n'.join(lines) + '\n'


def _pending_entries(points: list[Point], states) -> list[dict]:
  return [
    dict(
      index=i,
      slug=p.slug,
      dir=p.dir,
      hash=p.hash,
      state=states[p.dir].name,
      backend=p.backend,
      workers=p.num_workers,
      ranks=p.ranks,
      command=command(p, 'slurm'),
    )
    for i, p in enumerate(points)
  ]


def _slurm_job_id() -> str | None:
  array, task = os.environ.get('SLURM_ARRAY_JOB_ID'), os.environ.get('SLURM_ARRAY_TASK_ID')
  if array and task:
    return f'{array}_{task}'
  return os.environ.get('SLURM_JOB_ID')


def run_task(
  config: str,
  workdir: str,
  index: int,
  *,
  retry_failed: bool = False,
  rerun_stale: bool = False,
  timeout_s: float = DEFAULT_TIMEOUT_S,
  overrides: dict | None = None,
  overrides_as_text: bool = False,
) -> int:
  """One task of the Slurm array: runs entry `index` of pending.json, MPI ranks through srun.

  Args:
    config: the sweep's `FILE[:ARG]`, as the script passes it.
    workdir: the sweep's working directory.
    index: the entry of pending.json ($SLURM_ARRAY_TASK_ID).
    retry_failed, rerun_stale, timeout_s, overrides, overrides_as_text: as in run_sweep; the
      script passes on those the array was written with.

  Returns:
    The exit status: 0 when the point is DONE or DIVERGED (now or already), 75 when it was
    preempted (the task is requeued), 1 otherwise.

  Raises:
    SweepError: a refused sweep, no pending.json, an index out of range, or an entry that is no
      longer a point of the sweep.
  """
  points = expand(config, workdir, overrides, '', overrides_as_text)
  head = git_head()
  path = os.path.join(_summary_dir(workdir, config), 'pending.json')
  pending = _read_json(path)
  if not isinstance(pending, dict) or not isinstance(pending.get('points'), list):
    raise SweepError(f'--run_index={index}: no pending.json at {path}; write it first with '
                     '--launcher=slurm')  # fmt: skip
  entries = pending['points']
  if not 0 <= index < len(entries):
    raise SweepError(f'--run_index={index} is invalid; allowed: 0..{len(entries) - 1} ({path})')
  entry = entries[index]
  point = next((p for p in points if p.hash == entry['hash'] and p.dir == entry['dir']), None)
  if point is None:
    raise SweepError(
      f"--run_index={index}: pending.json's point {entry['slug']}-{entry['hash']} is not in the "
      'sweep any more (the sweep or the code changed since it was written); write it again '
      'with --launcher=slurm'
    )
  s = state(point, head)
  if not _to_run([point], {point.dir: s}, retry_failed, rerun_stale):
    print(f'{os.path.basename(point.dir)} is {s.name}: nothing to do', flush=True)
    return 0 if s.name in FINISHED or s.name == 'RUNNING' else 1
  if rerun_stale and s.stale and os.path.isdir(point.dir):
    info = _read_json(os.path.join(point.dir, 'point.json')) or {}
    print(f'moved aside: {_move_aside(point.dir, info.get("commit"))}')
  ended = _run_points([point], 1, 'slurm', head, timeout_s, False, _slurm_job_id())
  s = ended.get(point.dir, state(point, head))
  if s.name in FINISHED:
    return 0
  status = _read_json(os.path.join(point.dir, 'status.json')) or {}
  if status.get('rc') == EXIT_PREEMPTED and _slurm_job_id() and shutil.which('scontrol'):
    subprocess.run(['scontrol', 'requeue', _slurm_job_id()], check=False)
    return EXIT_PREEMPTED
  return 1


# --------------------------------------------------------------------------- the runner


def run_sweep(
  config: str,
  workdir: str,
  *,
  parallel: int = 1,
  launcher: str = 'local',
  dry_run: bool = False,
  report_only: bool = False,
  retry_failed: bool = False,
  rerun_stale: bool = False,
  fail_fast: bool = False,
  timeout_s: float = DEFAULT_TIMEOUT_S,
  link_rate: str = '',
  overrides: dict | None = None,
  overrides_as_text: bool = False,
  slurm_args: tuple = (),
) -> list[dict]:
  """Completes the sweep `config` in `workdir` and returns `collect` of its points.

  Args:
    config: `FILE[:ARG]`: the experiment file and the argument of its `sweep(add, arg)`.
    workdir: where `points/` and `sweeps/<name>/` go.
    parallel: points at once; only for sweeps whose points all use the one-host backend.
    launcher: 'local' (run here) or 'slurm' (write pending.json and sweep.sbatch; run nothing).
    dry_run: print the states and commands (and the Slurm script); write nothing.
    report_only: re-render sweep.md and sweep.json from disk; run nothing.
    retry_failed: run FAILED points again.
    rerun_stale: move the directories of STALE points aside and run them again.
    fail_fast: start no further point after one fails.
    timeout_s: a run taking longer gets SIGTERM (then SIGKILL) and is FAILED (status 124).
    link_rate: run MPI points on the simulated link at this rate (launch/simnet.sh; root).
    overrides: dotted field -> value set on every point (after the point's own).
    overrides_as_text: `overrides`' values are command-line text (the CLI's --set).
    slurm_args: extra `#SBATCH` options of the array script.

  Returns:
    collect(points) after the runs (or as found, for dry runs, reports and Slurm).

  Raises:
    SweepError: the sweep was refused (every reason, one a line); nothing was written.
  """
  _check_options(launcher, parallel, timeout_s, link_rate)
  points = expand(config, workdir, overrides, link_rate, overrides_as_text)
  has_mpi = any(p.backend == 'mpi' for p in points)
  running_here = not (dry_run or report_only or launcher == 'slurm')
  if link_rate and has_mpi and running_here and os.geteuid() != 0:
    raise SweepError(
      f'--link_rate={link_rate} needs root (a network namespace and tc, launch/simnet.sh); run '
      'as root, or drop --link_rate to time on the real network'
    )
  head = git_head()
  if parallel > 1 and has_mpi:
    print(
      f'--parallel={parallel} ignored: this sweep has MPI points (timing), which run one at a '
      "time (concurrent runs on shared cores or a shared link spoil each other's times)",
      flush=True,
    )
    parallel = 1
  states = {p.dir: state(p, head) for p in points}
  todo = _to_run(points, states, retry_failed, rerun_stale)
  flags = _runner_flags(retry_failed, rerun_stale, timeout_s, overrides, overrides_as_text)
  slurm = (config, workdir, flags, parallel, slurm_args)
  if dry_run:
    _print_dry_run(points, states, todo, launcher, slurm)
    return collect(points, head)
  if report_only:
    records = collect(points, head)
  elif launcher == 'slurm':
    records = collect(points, head)
    _submit_slurm(todo, states, len(points), head, slurm)
  else:
    n_finished = sum(s.name in FINISHED for s in states.values())
    print(
      f'sweep {sweep_name(config)}: {len(points)} points ({n_finished} finished, {len(todo)} to '
      f'run) in {os.path.abspath(workdir)}; commit {head[:12]}',
      flush=True,
    )
    for p in todo:
      s = states[p.dir]
      if rerun_stale and s.stale and os.path.isdir(p.dir) and s.name not in ('PENDING',):
        info = _read_json(os.path.join(p.dir, 'point.json')) or {}
        print(f'moved aside (stale): {_move_aside(p.dir, info.get("commit"))}')
    _run_points(todo, parallel, 'local', head, timeout_s, fail_fast)
    records = collect(points, head)
  print(write_summary(config, workdir, records, head), end='', flush=True)
  return records


def _check_options(launcher, parallel, timeout_s, link_rate) -> None:
  if launcher not in ('local', 'slurm'):
    raise SweepError(f"--launcher={launcher!r} is invalid; allowed: 'local', 'slurm'")
  if not isinstance(parallel, int) or parallel < 1:
    raise SweepError(f'--parallel={parallel!r} is invalid; allowed: an integer >= 1')
  if not timeout_s > 0:
    raise SweepError(f'--timeout_s={timeout_s!r} is invalid; allowed: a number of seconds > 0')
  if link_rate and launcher == 'slurm':
    raise SweepError(f'--link_rate={link_rate} is for local runs (launch/simnet.sh); a Slurm '
                     'cluster runs on its own network: drop --link_rate')  # fmt: skip


def _print_dry_run(points, states, todo, launcher, slurm) -> None:
  """Each point's state and command (and the Slurm script that would be written); writes
  nothing. `slurm`: (config, workdir, runner flags, parallel, extra #SBATCH options)."""
  config, workdir, flags, parallel, slurm_args = slurm
  print(f'sweep {sweep_name(config)}: {len(points)} points, {len(todo)} to run (dry run: '
        'nothing written)')  # fmt: skip
  runs = {p.dir for p in todo}
  for p in points:
    s = states[p.dir]
    flag = ' STALE' if s.stale else ''
    mark = 'run ' if p.dir in runs else '    '
    print(f'{mark}{os.path.basename(p.dir)}  {s.name}{flag}  {shlex.join(command(p, launcher))}')
  if launcher == 'slurm' and todo:
    script = slurm_script(config, workdir, _pending_entries(todo, states), parallel, flags,
                          slurm_args)  # fmt: skip
    print(f'\nthe Slurm script it would write ({_summary_dir(workdir, config)}/sweep.sbatch):')
    print(script, end='')


def _submit_slurm(todo, states, n_points, head, slurm) -> None:
  """Writes pending.json and the array script sweep.sbatch over the points to run."""
  config, workdir, flags, parallel, slurm_args = slurm
  name = sweep_name(config)
  if not todo:
    print(f'sweep {name}: nothing to submit (no point to run: see the table)')
    return
  out = _summary_dir(workdir, config)
  os.makedirs(out, exist_ok=True)
  entries = _pending_entries(todo, states)
  files.write_json_atomic(
    os.path.join(out, 'pending.json'),
    dict(config=config, workdir=os.path.abspath(workdir), commit=head, points=entries),
  )
  script = slurm_script(config, workdir, entries, parallel, flags, slurm_args)
  files.write_atomic(os.path.join(out, 'sweep.sbatch'), script)
  print(f'sweep {name}: {len(todo)} of {n_points} points pending; wrote {out}/pending.json')
  print(f'submit with: sbatch {os.path.join(out, "sweep.sbatch")}')


def finished(records: list[dict]) -> bool:
  """Whether every point is DONE or DIVERGED."""
  return all(r['state'] in FINISHED for r in records)


def _define_flags():
  # Defined only when run as a program: the entry points of cocod_jax/experiments import this
  # module as a library and define flags of the same names.
  from absl import flags  # pylint: disable=g-import-not-at-top

  flags.DEFINE_string('config', None, 'The experiment file and its sweep argument: FILE[:ARG].')
  flags.DEFINE_string('workdir', None, 'Where points/ and sweeps/<name>/ go.')
  flags.DEFINE_integer('parallel', 1, 'Points at once (sweeps of one-host points only).')
  flags.DEFINE_enum('launcher', 'local', ['local', 'slurm'], 'Run here, or write a Slurm array.')
  flags.DEFINE_bool('dry_run', False, 'Print the states and commands; write nothing.')
  flags.DEFINE_bool('report_only', False, 'Re-render sweep.md and sweep.json; run nothing.')
  flags.DEFINE_bool('retry_failed', False, 'Run FAILED points again.')
  flags.DEFINE_bool('rerun_stale', False, 'Move STALE points aside and run them again.')
  flags.DEFINE_bool('fail_fast', False, 'Start no further point after one fails.')
  flags.DEFINE_float('timeout_s', DEFAULT_TIMEOUT_S, 'Seconds a point may run.')
  flags.DEFINE_string('link_rate', '', 'MPI points on the simulated link (launch/simnet.sh).')
  flags.DEFINE_multi_string('set', [], 'FIELD=VALUE set on every point, e.g. data_dir=/data.')
  flags.DEFINE_multi_string('slurm_arg', [], 'Extra #SBATCH option, e.g. --partition=gpu.')
  flags.DEFINE_integer('run_index', None, 'Run only this entry of pending.json (Slurm task).')
  flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  from absl import flags  # pylint: disable=g-import-not-at-top

  f = flags.FLAGS
  if len(argv) > 1:
    print(f'error: unexpected arguments {argv[1:]}', file=sys.stderr)
    return EXIT_USAGE
  overrides = {}
  for item in f.set:
    path, sep, text = item.partition('=')
    if not sep or not path:
      print(f'error: --set={item} is invalid; allowed: FIELD=VALUE, e.g. --set=data_dir=/data',
            file=sys.stderr)  # fmt: skip
      return EXIT_USAGE
    overrides[path] = text
  try:
    if f.run_index is not None:
      return run_task(
        f.config,
        f.workdir,
        f.run_index,
        retry_failed=f.retry_failed,
        rerun_stale=f.rerun_stale,
        timeout_s=f.timeout_s,
        overrides=overrides,
        overrides_as_text=True,
      )
    records = run_sweep(
      f.config,
      f.workdir,
      parallel=f.parallel,
      launcher=f.launcher,
      dry_run=f.dry_run,
      report_only=f.report_only,
      retry_failed=f.retry_failed,
      rerun_stale=f.rerun_stale,
      fail_fast=f.fail_fast,
      timeout_s=f.timeout_s,
      link_rate=f.link_rate,
      overrides=overrides,
      overrides_as_text=True,
      slurm_args=tuple(f.slurm_arg),
    )
  except SweepError as e:
    for line in e.problems:
      print(f'error: {line}', file=sys.stderr)
    print(f'error: sweep refused ({len(e.problems)} problem(s)); nothing was written',
          file=sys.stderr)  # fmt: skip
    return EXIT_USAGE
  if f.dry_run or f.launcher == 'slurm':
    return 0
  return 0 if finished(records) else 1


if __name__ == '__main__':
  from absl import app  # pylint: disable=g-import-not-at-top

  _define_flags()
  app.run(lambda argv: sys.exit(main(argv)))

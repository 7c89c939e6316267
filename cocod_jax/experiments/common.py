"""What the per-artefact entry points share: the sweep, aggregation, provenance, rendering, figures.

Each entry point (`table1` ... `fig6`, `ablation`, `paper`, `overlap`, `long_schedule`) names an
experiment file of configs/ and an argument; `run` completes that sweep through the resumable runner
(`cocod_jax.sweep`), reads every point's results and returns them as `Outcome`s; the renderers turn
them into the artefact's Markdown table, JSON (every number with its provenance: point
directories, config hashes, the commit, scale, hardware, backend, r) and PNG. Files are written
atomically into `--workdir`. Accuracies are in percent; "best" is the highest test accuracy of
the averaged model over the epochs, as the paper's "final best test accuracy".
"""

import contextlib
import dataclasses
import io
import os
import statistics
from typing import Any

from absl import flags
from absl import logging

from cocod_jax import sweep
from cocod_jax.config import errors
from cocod_jax.experiments import published
from cocod_jax.experiments import stats
from cocod_jax.record import files
from cocod_jax.record import provenance as provenance_lib

FLAGS = flags.FLAGS  # experiments/flags.py define_experiment_flags() defines what is read here.

MARGIN = stats.MARGIN  # Accuracy points: the paper's parity claim, within half a point of S-SGD.
COLORS = {
  'ssgd': '#1f77b4',
  'pipe_sgd': '#ff7f0e',
  'local_sgd': '#2ca02c',
  'asynlocal_sgd': '#9467bd',
  'cocod_sgd': '#d62728',
}


@dataclasses.dataclass
class Outcome:
  """What the experiments read of one point of a sweep (sweep/points.py's Point), finished or
  not: its cell (the `:`-argument's values), state, results and provenance."""

  arg: dict
  state: str
  directory: str
  hash: str
  results: dict | None
  wall_s: float | None = None  # The run's wall time, as the runner recorded it.

  @property
  def best(self) -> float | None:
    if not self.results or not self.results.get('epochs'):
      return None
    return 100.0 * max(e['test_accuracy'] for e in self.results['epochs'])


def parse_arg(text: str) -> dict:
  return dict(part.split('=', 1) for part in text.split(',') if part)


def hardware() -> str:
  import jax  # pylint: disable=g-import-not-at-top

  devices = jax.devices()
  return (
    f'{provenance_lib.machine()}; {len(devices)} {devices[0].platform} device(s) '
    f'({devices[0].device_kind})'
  )


def run(
  experiment, arg: str, timing: bool = False, link: str | None = None, check_empty: bool = True
) -> list[Outcome] | None:
  """Completes the sweep of the experiment file `experiment` (a module of configs/) with the
  sweep argument `arg`, and returns its points. Timing sweeps run on `link` (default
  --link_rate). With --report_only a sweep none of whose runs has results is refused unless
  `check_empty` is False (a later sweep of an artefact whose first one has results).

  None when the sweep did not run (a dry run, a Slurm submission): the runner has printed what
  it would do, and the artefact is not rendered.
  """
  if _PLAN is not None:  # `planned`: note the sweep, run nothing (as a dry run answers).
    _PLAN.append((f'{experiment.__file__}:{arg}', (FLAGS.link_rate if link is None else link)
                  if timing else ''))  # fmt: skip
    return None
  logging.set_verbosity(logging.WARNING)  # JAX's backend probing is not the user's business.
  options = dict(
    workdir=FLAGS.workdir,
    parallel=1 if timing else FLAGS.parallel,
    launcher=FLAGS.launcher,
    dry_run=FLAGS.dry_run,
    report_only=FLAGS.report_only,
    retry_failed=FLAGS.retry_failed,
    link_rate=(FLAGS.link_rate if link is None else link) if timing else '',
    overrides={'data_dir': FLAGS.data_dir} if FLAGS.data_dir else {},
  )
  config = f'{experiment.__file__}:{arg}'
  try:
    if FLAGS.report_only and check_empty:
      _check_something_to_report(config)
    records = sweep.run_sweep(config, **options)
  except errors.UsageError as e:  # Invalid points: every reason, nothing created.
    errors.fail(e)
  if FLAGS.dry_run or FLAGS.launcher == 'slurm':
    return None
  return [
    Outcome(
      parse_arg(r['config_arg']), r['state'], r['dir'], r['hash'], r.get('results'), r.get('wall_s')
    )  # fmt: skip
    for r in records
  ]


_PLAN = None  # While `planned` runs: the sweeps `run` was asked for, (FILE:ARG, link).


def planned(make) -> tuple[list[tuple[str, str]], bool]:
  """The sweeps the experiment function `make` starts with, found without running or writing
  anything: `run` notes each sweep and answers None, as to a dry run, so each artefact stops at
  its first sweep (a later one that needs an earlier one's results, or another timing link, is
  not seen). Returns ([(FILE:ARG, link)], whether `make` went through without an error)."""
  global _PLAN
  _PLAN, dry_run = [], FLAGS.dry_run
  FLAGS.dry_run = True  # (Nothing that reads it may write or refuse a missing input.)
  try:
    with contextlib.redirect_stdout(io.StringIO()):
      make()
    whole = True
  except (Exception, SystemExit):  # pylint: disable=broad-except
    whole = False
  finally:
    sweeps, _PLAN, FLAGS.dry_run = _PLAN, None, dry_run
  return sweeps, whole


def announce(name: str, make) -> str:
  """Prints (and returns) how many runs experiment `name` will make and how many of them are
  already done in --workdir, before it starts: the points of the sweeps `planned(make)` finds,
  each counted once (Figures 2 and 5 reuse the tables' runs)."""
  from cocod_jax.sweep import points as points_lib  # pylint: disable=g-import-not-at-top
  from cocod_jax.sweep import state as state_lib  # pylint: disable=g-import-not-at-top

  sweeps, whole = planned(make)
  overrides = {'data_dir': FLAGS.data_dir} if FLAGS.data_dir else {}
  head, seen, done = provenance_lib.commit(), set(), 0
  try:
    for config, link in dict.fromkeys(sweeps):
      points = [p for p in points_lib.expand(config, FLAGS.workdir, overrides, link)
                if p.dir not in seen]  # fmt: skip
      seen.update(p.dir for p in points)
      states = state_lib.states(points, head)
      done += sum(states[p.dir].name in state_lib.FINISHED for p in points)
  except errors.UsageError:  # The sweep itself will say what is wrong.
    whole = False
  count = len(dict.fromkeys(sweeps))
  line = (
    f'{name}: {len(seen)} runs in {count} sweep{"s" if count != 1 else ""} planned ahead, {done} '
    f"already done, {len(seen) - done} to make; a sweep that needs these runs' results (a "
    'timing link, a later stage) prints its own count when it starts'
  )
  if not whole:
    line += ' (at least: the rest could not be planned ahead)'
  print(line, flush=True)
  return line


def _check_something_to_report(config: str) -> None:
  """--report_only renders runs that exist: refused before anything is written when none of the
  sweep's points has results in --workdir.

  Raises:
    errors.UsageError: no point of `config` has run in --workdir.
  """
  from cocod_jax.sweep import points as points_lib  # pylint: disable=g-import-not-at-top

  points = points_lib.expand(config, FLAGS.workdir)
  if not any(os.path.exists(os.path.join(p.dir, 'results.json')) for p in points):
    raise errors.UsageError(
      f'--report_only: nothing to report in --workdir={FLAGS.workdir}: none of the '
      f'{len(points)} runs of {os.path.basename(config.split(":")[0])} has results there; '
      'run without --report_only first, or name the workdir that holds them'
    )


def write(name: str, text: str | None = None, data: Any = None):
  """Writes `name`.md and/or `name`.json into --workdir, atomically."""
  os.makedirs(FLAGS.workdir, exist_ok=True)
  for suffix, content in (('.md', text), ('.json', data)):
    if content is None:
      continue
    path = os.path.join(FLAGS.workdir, name + suffix)
    if suffix == '.md':
      files.write_atomic(path, content)
    else:
      files.write_json_atomic(path, content)


def write_npz(name: str, arrays: dict):
  """Writes `name`.npz (compressed) into --workdir, atomically."""
  import numpy as np  # pylint: disable=g-import-not-at-top

  os.makedirs(FLAGS.workdir, exist_ok=True)
  path = os.path.join(FLAGS.workdir, name + '.npz')
  np.savez_compressed(path + '.tmp.npz', **arrays)
  os.replace(path + '.tmp.npz', path)


EXPERIMENT_FLAGS = ('seeds', 'task', 'link_rate', 'timing_links', 'timing_tasks', 'timing_seeds')


def run_commits(points: list[Outcome]) -> list[dict]:
  """The commits the points' finished runs were made at, from each point's own point.json (what
  the runner recorded when it started the run): [{'commit', 'dirty', 'runs'}], most runs first.
  Points without results (not run, or still running) are not counted."""
  counts = {}
  for p in points:
    if not p.results:
      continue
    info = files.read_json(os.path.join(p.directory, 'point.json')) or {}
    key = (info.get('commit') or 'unknown', info.get('dirty'))
    counts[key] = counts.get(key, 0) + 1
  out = [{'commit': c, 'dirty': d, 'runs': n} for (c, d), n in counts.items()]
  return sorted(out, key=lambda r: -r['runs'])


def not_run(points: list[Outcome], label) -> tuple[list[str], str]:
  """The registered runs of `points` that did not finish (neither done nor diverged): each as
  `label(point)` + its seed, and one line for the md that groups them by label ('cocod c100_r18
  seeds 0-4'); 'Every registered run finished.' when none is missing."""
  missing, groups = [], {}
  for p in points:
    if p.state not in ('DONE', 'DIVERGED'):
      missing.append(f'{label(p)} seed {p.arg["seed"]}')
      groups.setdefault(label(p), []).append(int(p.arg['seed']))
  if not missing:
    return missing, 'Every registered run finished.'
  parts = []
  for name, seeds in groups.items():
    seeds = sorted(seeds)
    contiguous = len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1))
    which = f'{seeds[0]}-{seeds[-1]}' if contiguous else ', '.join(map(str, seeds))
    parts.append(f'{name} seed{"s" if len(seeds) > 1 else ""} {which}')
  return missing, f'Not run ({len(missing)} of {len(points)} registered runs): {"; ".join(parts)}.'


def provenance_line(data: dict) -> str:
  """One line for an artefact's md: the commit(s) its runs were made at beside the render's."""
  runs = data.get('run_commits') or []
  made = '; '.join(
    f'{r["commit"][:12]}{" (dirty)" if r["dirty"] else ""}: {r["runs"]} run(s)' for r in runs
  )
  render = f'{data["commit"][:12]}{" (dirty)" if data["dirty"] else ""}'
  same = len(runs) == 1 and runs[0]['commit'] == data['commit'] and not runs[0]['dirty']
  mixed = ' (the runs mix commits)' if len(runs) > 1 else ''
  if same and not data['dirty']:
    return f'Runs and render at commit {render}.'
  return f'Rendered at {render}; the runs were made at {made or "(none)"}{mixed}.'


def provenance(points: list[Outcome], backend: str) -> dict:
  return {
    'scale': FLAGS.scale,
    'commit': provenance_lib.commit(),
    'dirty': provenance_lib.dirty(),
    'run_commits': run_commits(points),
    'command': provenance_lib.command(),
    # The experiment flags in effect, the registered ones included (configs/scales.py
    # `artefact_flags`), which the command does not show.
    'flags': {name: FLAGS[name].value for name in EXPERIMENT_FLAGS if name in FLAGS},
    'hardware': hardware(),
    'backend': backend,
    # The runs' wall time as the runner recorded it (their sum: the compute the artefact took,
    # whatever ran side by side); None for runs recorded before the runner kept it.
    'runs_wall_s': round(sum(p.wall_s or 0.0 for p in points), 1),
    'points': [
      {
        'arg': p.arg,
        'dir': os.path.relpath(p.directory, FLAGS.workdir),
        'hash': p.hash,
        'state': p.state,
        'wall_s': p.wall_s,
      }
      for p in points  # (directories relative to --workdir: no path of the machine that ran)
    ],
  }


# --------------------------------------------------------------------------- figures


def _pyplot():
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  return plt


def style(algo: str) -> dict:
  """Fixed colours per algorithm across figures; +PS variants dashed."""
  base = algo.removesuffix('+ps')
  return {'color': COLORS[base], 'linestyle': '--' if algo.endswith('+ps') else '-'}


def save_figure(fig, name: str) -> str:
  path = os.path.join(FLAGS.workdir, name + '.png')
  fig.savefig(path + '.tmp.png', dpi=120)
  os.replace(path + '.tmp.png', path)
  _pyplot().close(fig)
  return path


def curves(
  points, algos, tasks, task_title, x_key, y_key, y_scale, title, name, ylabel, xlabel, lines=None
):
  """A 2x2 (or 1x1) panel figure: one line per algorithm (the mean over seeds), a band from the
  lowest to the highest seed, `x_key`/`y_key` fields of each epoch record; `lines`: {task:
  (y, label)} drawn across the task's panel (a time figure's target)."""
  plt = _pyplot()
  cols = 2 if len(tasks) > 1 else 1
  rows = (len(tasks) + 1) // 2 if len(tasks) > 1 else 1
  fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
  for ax, task in zip(axes.flat, tasks):
    for algo in algos:
      runs = [
        p.results['epochs']
        for p in points
        if p.arg['algo'] == algo and p.arg['task'] == task and p.results
      ]
      if not runs:
        continue
      length = min(len(r) for r in runs)
      xs = [statistics.mean(r[i][x_key] for r in runs) for i in range(length)]
      ys = [[r[i][y_key] * y_scale for r in runs] for i in range(length)]
      ax.plot(xs, [statistics.mean(y) for y in ys], label=published.NAMES[algo], **style(algo))
      if len(runs) > 1:
        low, high = [min(y) for y in ys], [max(y) for y in ys]
        ax.fill_between(xs, low, high, color=style(algo)['color'], alpha=0.15)
    if lines and lines.get(task) is not None:
      y, label = lines[task]
      ax.axhline(y, color='k', ls='--', lw=0.8, label=label)
    ax.set_title(task_title(task, FLAGS.scale), fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
  axes.flat[0].legend(fontsize=7)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  return save_figure(fig, name)

"""What the per-artefact entry points share: the sweep, aggregation, provenance, rendering, figures.

Each entry point (`table1` ... `fig6`, `ablation`, `paper`, `overlap`, `long_schedule`) names an
experiment file of configs/ and an argument; `run` completes that sweep through the resumable runner
(`cocod_jax.sweep`), reads every point's results and returns them as `Point`s; the renderers turn
them into the artefact's Markdown table, JSON (every number with its provenance: point
directories, config hashes, the commit, scale, hardware, backend, r) and PNG. Files are written
atomically into `--workdir`. Accuracies are in percent; "best" is the highest test accuracy of
the averaged model over the epochs, as the paper's "final best test accuracy".
"""

import dataclasses
import os
import statistics
from typing import Any

from absl import logging

from cocod_jax import sweep
from cocod_jax import timeline
from cocod_jax.config import errors
from cocod_jax.config import flags as cocod_flags
from cocod_jax.experiments import correctness
from cocod_jax.experiments import published
from cocod_jax.experiments import stats
from cocod_jax.record import files
from cocod_jax.record import provenance as provenance_lib

FLAGS = cocod_flags.FLAGS  # cocod_flags.define_experiment_flags() defines what is read here.

MARGIN = stats.MARGIN  # Accuracy points: the paper's parity claim, within half a point of S-SGD.
COLORS = {
  'ssgd': '#1f77b4',
  'pipe_sgd': '#ff7f0e',
  'local_sgd': '#2ca02c',
  'asynlocal_sgd': '#9467bd',
  'cocod_sgd': '#d62728',
}


@dataclasses.dataclass
class Point:
  """One finished point: its cell (the `:`-argument's values), results and provenance."""

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
) -> list[Point] | None:
  """Completes the sweep of the experiment file `experiment` (a module of configs/) with the
  sweep argument `arg`, and returns its points. Timing sweeps run on `link` (default
  --link_rate). With --report_only a sweep none of whose runs has results is refused unless
  `check_empty` is False (a later sweep of an artefact whose first one has results).

  None when the sweep did not run (a dry run, a Slurm submission): the runner has printed what
  it would do, and the artefact is not rendered.
  """
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
    Point(
      parse_arg(r['config_arg']), r['state'], r['dir'], r['hash'], r.get('results'), r.get('wall_s')
    )  # fmt: skip
    for r in records
  ]


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


def run_commits(points: list[Point]) -> list[dict]:
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


def not_run(points: list[Point], label) -> tuple[list[str], str]:
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


def provenance(points: list[Point], backend: str) -> dict:
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


def targets_from(table: dict, reference: str = 'ssgd') -> dict:
  """The registered target of each task (docs/paper-cpu/PREREGISTRATION.md): the mean final
  accuracy of `reference`'s runs in the accuracy table's JSON, minus MARGIN; {task: %}."""
  return {
    c['task']: c['mean'] - MARGIN
    for c in table['cells']
    if c['algo'] == reference and c.get('mean') is not None
  }


def first_epoch_at(results: dict, target: float) -> dict | None:
  """The record of the first epoch whose test accuracy reaches `target` (%); None when none does."""
  return next((e for e in results['epochs'] if 100.0 * e['test_accuracy'] >= target), None)


def time_to_target(results: dict, target: float) -> float | None:
  """Training time (evaluation excluded) at the end of the first epoch whose test accuracy
  reaches `target` (%); None when no epoch does."""
  epoch = first_epoch_at(results, target)
  return epoch['train_time_s'] if epoch else None


def where_the_time_goes(results: dict, target: float | None) -> dict:
  """A timing run's time to target taken apart (descriptive; not a registered statistic): the
  training time at the end of epoch 1 (compilation included) and at the end of the period-1
  warm-up (`algorithm.warmup_period_epochs`), the seconds per epoch after that warm-up, and the
  epoch at which the run first reached `target` (None when it never did)."""
  times = [e['train_time_s'] for e in results.get('epochs', [])]
  warmup = min(int(results['config']['algorithm'].get('warmup_period_epochs', 0) or 0), len(times))
  warmup_s = times[warmup - 1] if warmup else 0.0
  reached = first_epoch_at(results, target) if target is not None else None
  after = len(times) - warmup
  return {
    'first_epoch_s': times[0] if times else None,
    'warmup_epochs': warmup,
    'warmup_s': warmup_s,
    'after_warmup_epoch_s': (times[-1] - warmup_s) / after if after > 0 else None,
    'epoch_reached': reached['epoch'] if reached else None,
  }


def _median(values):
  values = [v for v in values if v is not None]
  return statistics.median(values) if values else None


def _span(values):
  """[lowest, highest] of the values that are there; None when none is."""
  values = [v for v in values if v is not None]
  return [min(values), max(values)] if values else None


def timing_summary(runs: dict, base: dict, target: float | None) -> dict:
  """An algorithm's timing runs summed up: `runs` and `base` (S-SGD's) are {seed: results}.

  Times, r, Tp, Tc and the hidden fraction are medians over the runs, each with its [lowest,
  highest] (`*_range`); a speedup is the median of the ratios to S-SGD's run of the same seed.
  `time_s` (and `speedup`) is None unless every run reached `target` (`reached` says how many
  did): a median over the runs that did would favour the lucky ones.
  """

  def to_target(results):
    return time_to_target(results, target) if target is not None else None

  times = {s: to_target(r) for s, r in runs.items()}
  epochs = {s: epoch_time(r) for s, r in runs.items()}
  base_times = {s: to_target(r) for s, r in base.items()}
  base_epochs = {s: epoch_time(r) for s, r in base.items()}
  speedups = [base_times[s] / t for s, t in times.items() if t and base_times.get(s)]
  epoch_speedups = [base_epochs[s] / e for s, e in epochs.items() if e and base_epochs.get(s)]
  timing = [r.get('timing') or {} for r in runs.values()]
  reached = sum(t is not None for t in times.values())
  everyone = reached == len(runs)
  finals = [100.0 * correctness.reported_accuracy(r) for r in runs.values()
            if r.get('status') == 'completed']  # fmt: skip
  return {
    'runs': len(runs),
    'seeds': sorted(runs, key=int),
    'final': statistics.mean(finals) if finals else None,
    'reached': reached,
    'time_s': _median(times.values()) if everyone else None,
    'time_range': _span(times.values()),
    'speedup': _median(speedups) if everyone and len(speedups) == len(runs) else None,
    'speedup_range': _span(speedups),
    'epoch_s': _median(epochs.values()),
    'epoch_range': _span(epochs.values()),
    'epoch_speedup': _median(epoch_speedups),
    'epoch_speedup_range': _span(epoch_speedups),
    'r': _median(t.get('r') for t in timing),
    'r_range': _span(t.get('r') for t in timing),
    'tp_s': _median(t.get('Tp_s') for t in timing),
    'tc_s': _median(t.get('Tc_s') for t in timing),
    'hidden': _median(t.get('hidden_fraction') for t in timing),
    'by_seed': {s: {**where_the_time_goes(r, target), 'time_s': times[s]} for s, r in runs.items()},
  }


def spread(value, span, f: str) -> str:
  """`value` formatted with `f`, and its [lowest, highest] in brackets when they differ."""
  if value is None:
    return '-'
  if not span or f.format(span[0]) == f.format(span[1]):
    return f.format(value)
  return f'{f.format(value)} [{f.format(span[0])}, {f.format(span[1])}]'


def time_to_accuracy(by_link, algos, tasks, setting, task_title, name, title, targets):
  """Figures 3/6: accuracy against training time, for each link of `by_link` ({link: its timing
  points}, one run per seed); per algorithm its time to the registered target of the task
  (`targets`, from the accuracy table) and that time's speedup over S-SGD, its time per epoch
  and that speedup beside the Section 4.2 model and the paper's, r and the hidden fraction
  (`timing_summary`). The model of a seed's run takes Tp and Tc from S-SGD's runs of the other
  seeds (calibration runs, not the run predicted); with one seed, from its own S-SGD run, and the
  text says so. One figure per link: `name`.png, then `name`_2.png ... Returns (Markdown, JSON).
  """
  seeds = sorted({p.arg['seed'] for points in by_link.values() for p in points}, key=int)
  calibrated = 'the S-SGD runs of the other seeds' if len(seeds) > 1 else 'the same S-SGD run'
  lines = [
    f'# {title}',
    '',
    "Target of a task (registered before the runs): S-SGD's mean final accuracy over the "
    f"accuracy table's seeds - {MARGIN} point. Time to target: training time (evaluation "
    'excluded) at the end of the first epoch at or above it; "not reached" when no epoch is '
    '("n of m reached" when some runs did). With more than one run (seeds '
    f'{", ".join(seeds)}): the median and, in brackets, the lowest and highest; a speedup is the '
    "median of the ratios to S-SGD's run of the same seed. Model: Section 4.2's time per step "
    f'at the period and at Tp and Tc measured in {calibrated}; it predicts the epoch speedup.',
  ]
  rows = []
  fmt = lambda v, f: '-' if v is None else f.format(v)
  for i, (link, points) in enumerate(by_link.items()):
    png = name if i == 0 else f'{name}_{i + 1}'
    target_lines = {
      t: (targets[t], f'target {targets[t]:.2f}%') for t in tasks if targets.get(t) is not None
    }
    curves(
      points, algos, tasks, task_title, 'train_time_s', 'test_accuracy', 100.0,
      f'{title}, {link}', png, 'test accuracy (%)', 'training time (s), evaluation excluded',
      lines=target_lines,
    )  # fmt: skip
    lines += [
      '',
      f'## Link {link}',
      '',
      f'![{png}]({png}.png)',
      '',
      '| task | algorithm | runs | final % | target % | time to target (s) | speedup over S-SGD '
      '| s / epoch | epoch speedup | model | epoch speedup / model | paper | r | hidden |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ]
    link_rows = []
    for task in tasks:
      done = [p for p in points if p.arg['task'] == task and p.results]
      for row in _time_rows(done, algos, task, setting, targets.get(task)):
        row['link'] = link
        link_rows.append(row)
        reached = spread(row['time_s'], row['time_range'], '{:.1f}')
        if row['reached'] < row['runs']:
          some = f'{row["reached"]} of {row["runs"]} reached'
          reached = 'not reached' if not row['reached'] else some
        lines.append(
          f'| {task_title(task, FLAGS.scale)} | {published.NAMES[row["algo"]]} | {row["runs"]} '
          f'| {fmt(row["final"], "{:.2f}")} | {fmt(row["target"], "{:.2f}")} | {reached} '
          f'| {spread(row["speedup"], row["speedup_range"], "{:.2f}x")} '
          f'| {spread(row["epoch_s"], row["epoch_range"], "{:.3f}")} '
          f'| {spread(row["epoch_speedup"], row["epoch_speedup_range"], "{:.2f}x")} '
          f'| {fmt(row["model"], "{:.2f}x")} | {fmt(row["of_model"], "{:.2f}")} '
          f'| {fmt(row["paper"], "{:.1f}x")} | {spread(row["r"], row["r_range"], "{:.2f}")} '
          f'| {fmt(row["hidden"], "{:.0%}")} |'
        )
    rows += link_rows
    lines += _breakdown(link_rows, task_title)
  data = {'rows': rows, 'target_margin': MARGIN, 'links': list(by_link), 'model_from': calibrated}
  return '\n'.join(lines) + '\n', data


def _breakdown(rows, task_title) -> list[str]:
  """The Markdown of where each row's time to target goes, seed by seed (`where_the_time_goes`)."""
  lines = [
    '',
    'Where the time to target goes, run by run (seeds in order, separated by /; descriptive, '
    'not a registered statistic): training time at the end of epoch 1 (compilation included) '
    'and at the end of the period-1 warm-up, the seconds per epoch after it, the epoch at which '
    'the run first reached the target, and its time to target.',
    '',
    '| task | algorithm | epoch 1 (s) | warm-up end (s) | after it, s / epoch | epoch at target '
    '| time to target (s) |',
    '|---|---|---|---|---|---|---|',
  ]
  for row in rows:
    runs = [row['by_seed'][s] for s in row['seeds']]

    def each(key, f, runs=runs):
      return ' / '.join('-' if r[key] is None else f.format(r[key]) for r in runs)

    lines.append(
      f'| {task_title(row["task"], FLAGS.scale)} | {published.NAMES[row["algo"]]} '
      f'| {each("first_epoch_s", "{:.2f}")} | {each("warmup_s", "{:.2f}")} '
      f'| {each("after_warmup_epoch_s", "{:.3f}")} | {each("epoch_reached", "{}")} '
      f'| {each("time_s", "{:.2f}")} |'
    )
  return lines


def _time_rows(done, algos, task, setting, target) -> list[dict]:
  """One row per algorithm of a task's finished timing points (one per seed):
  `timing_summary` against S-SGD (the first of `algos`), the target, the paper's speedup and
  the Section 4.2 model's (`model`, the median over seeds of the model at the period and the Tp
  and Tc of S-SGD's runs of the other seeds, or of the same seed when it is alone), and
  `of_model`: the measured epoch speedup over the model's."""
  by_algo = {}
  for p in done:
    by_algo.setdefault(p.arg['algo'], {})[p.arg['seed']] = p.results
  base = by_algo.get(algos[0], {})
  model_name = 'resnet18' if task.endswith('r18') else 'vgg16'
  rows = []
  for algo in algos:
    runs = by_algo.get(algo)
    if not runs:
      continue
    plain = algo.removesuffix('+ps')
    summary = timing_summary(runs, base, target)
    model = model_speedup(runs, base, plain)
    rows.append({
      'task': task,
      'algo': algo,
      'target': target,
      **summary,
      'model': model,
      'of_model': summary['epoch_speedup'] / model if model and summary['epoch_speedup'] else None,
      'paper': published.SPEEDUP[setting][model_name] if algo.startswith('cocod') else None,
    })  # fmt: skip
  return rows


def model_speedup(runs: dict, base: dict, algorithm: str | None = None) -> float | None:
  """The time model's epoch speedup over S-SGD (Section 4.2, `timeline.model_step_time`) of an
  algorithm's timing runs `runs` ({seed: results}): the median over the seeds, each at the Tp and
  Tc of S-SGD's runs `base` of the other seeds (of its own seed where it is alone), so that the
  calibration is kept apart from the run it predicts. `algorithm`: the model's name (default:
  each run's algorithm.name); a run's delay tau (algorithm.delay, or what delay=auto chose) gives
  the delay's form. None where no run has a calibration."""
  models = []
  for seed, results in runs.items():
    calibration = [r.get('timing') or {} for s, r in base.items() if s != seed] or [
      base[seed].get('timing') or {} if seed in base else {}
    ]  # fmt: skip
    tp = _median(t.get('Tp_s') for t in calibration)
    tc = _median(t.get('Tc_s') for t in calibration)
    algo = results['config']['algorithm']
    name = algorithm or algo.get('name')
    if not tp or tc is None or name is None:
      continue
    delay = (results.get('period_auto') or {}).get('delay') or algo.get('delay')
    delay = delay if isinstance(delay, int) else None
    k = algo['period']
    models.append(
      timeline.model_step_time('ssgd', tp, tc, k) / timeline.model_step_time(name, tp, tc, k, delay)
    )  # fmt: skip
  return _median(models)


def epoch_time(results) -> float | None:
  """Seconds of training per epoch over the epochs after the first (compilation)."""
  times = [e['train_time_s'] for e in results.get('epochs', [])]
  return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None


def ring_tc(tc_measured: float, n_measured: int, n: int) -> float:
  """Tc at n workers from Tc at n_measured, for a ring allreduce (time ~ 2 (n - 1) / n)."""
  if n <= 1:
    return 0.0
  return tc_measured * (2 * (n - 1) / n) / (2 * (n_measured - 1) / n_measured)


def _speedup_rows(algo, runs, ns, calibrated) -> tuple[list[dict], dict]:
  """Figure 4 for one algorithm, from its results by worker count: the measured rows (epoch
  time, speedup, Tp, Tc, r) and the model's curve over `ns` from the calibration runs'
  `calibrated` (Tp, Tc, workers of Tc), Tc scaled as a ring allreduce."""
  base = epoch_time(runs[1])
  tp, tc, top = calibrated
  k = runs[max(runs)]['config']['algorithm']['period']
  model = {n: n * tp / timeline.model_step_time(algo, tp, ring_tc(tc, top, n), k) for n in ns}
  rows = [
    dict(
      algo=algo,
      workers=n,
      epoch_s=epoch_time(r),
      speedup=base / epoch_time(r),
      model=model[n],
      Tp_s=r['timing']['Tp_s'],
      Tc_s=r['timing']['Tc_s'],
      r=r['timing']['r'],
    )
    for n, r in sorted(runs.items())
  ]
  model_row = {
    'algo': algo,
    'Tp_s': tp,
    'Tc_s': tc,
    'workers_measured': top,
    'from': 'calibration runs (S-SGD, role=calibration)',
    'model': {str(n): v for n, v in model.items()},
  }
  return rows, model_row


def speedup(points, algos, link, largest=16):
  """Figure 4: (Markdown, JSON) and the PNG of speedup(N) = epoch time at 1 / at N, measured,
  beside the model N * Tp / step_model(Tp, Tc(N)) with Tp and Tc from the separate calibration
  runs of the sweep (`calibration.py`), never from the runs plotted."""
  from cocod_jax.experiments import calibration  # pylint: disable=g-import-not-at-top

  points, calibration_points = calibration.split(points)
  calibrated = calibration.tp_tc(calibration_points)
  rows, model_rows = [], []
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(6, 4.2))
  ns = list(range(1, largest + 1))
  # Drawn on the measured range only (the model beyond it is in the JSON, not on the axis).
  measured = sorted({int(p.arg['workers']) for p in points if p.results}) or [1]
  shown = list(range(1, measured[-1] + 1))
  ax.plot(shown, shown, ':', color='0.5', lw=0.8, label='ideal')
  lines = [
    '# Figure 4: time speedup against workers',
    '',
    '![fig4](fig4.png)',
    '',
    '| algorithm | workers | s / epoch | speedup | model speedup | Tp ms | Tc ms | r |',
    '|---|---|---|---|---|---|---|---|',
  ]
  for algo in algos:
    runs = {int(p.arg['workers']): p.results for p in points if p.arg['algo'] == algo and p.results}
    if 1 not in runs or len(runs) < 2 or calibrated is None:
      continue
    algo_rows, model_row = _speedup_rows(algo, runs, ns, calibrated)
    rows += algo_rows
    model_rows.append(model_row)
    for row in algo_rows:
      lines.append(
        f'| {published.NAMES[algo]} | {row["workers"]} | {row["epoch_s"]:.2f} '
        f'| {row["speedup"]:.2f}x | {row["model"]:.2f}x | {row["Tp_s"] * 1e3:.1f} '
        f'| {row["Tc_s"] * 1e3:.1f} | {row["r"]:.2f} |'
      )
    name, color = published.NAMES[algo], COLORS[algo]
    ax.plot([r['workers'] for r in algo_rows], [r['speedup'] for r in algo_rows], 'o-',
            color=color, label=name)  # fmt: skip
    model = model_row['model']
    ax.plot(shown, [model[str(n)] for n in shown], '--', color=color, lw=1, label=f'{name} (model)')
  ax.set_xlabel('workers')
  ax.set_ylabel('speedup (epoch time at 1 / at N)')
  ax.set_xticks(shown)
  ax.set_title(f'{FLAGS.scale} scale, MPI, {link}; markers measured, dashed: model', fontsize=9)
  ax.legend(fontsize=6, ncol=2)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  png = save_figure(fig, 'fig4')
  lines += [
    '',
    'Model: N Tp / step(Tp, Tc(N)) with Tp and Tc from separate S-SGD calibration runs (Tp '
    'at 1 worker, Tc at the most workers, scaled as a ring allreduce, 2 (N - 1) / N), never '
    'from the runs in the table; measured speedups use epochs after the first.',
  ]
  return '\n'.join(lines) + '\n', {'rows': rows, 'model': model_rows, 'png': png, 'link': link}

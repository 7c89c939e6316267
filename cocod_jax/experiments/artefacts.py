"""The artefacts themselves: each a function of the flags that runs its sweep and renders it.

Artefacts of the same shape are one function with an argument: `table(1)` and `table(2)`,
`loss_figure(2)` and `loss_figure(5)`, `time_figure(3)` and `time_figure(6)`; `ARTEFACTS`
names each with what it prints, and `main(name)` is the entry point of every one of them (the
modules `table1.py` ... `fig6.py`, `paper.py` keep the command names users know). Each returns 0
when its sweep finished (every point done or diverged) and 1 otherwise; a sweep that did not
run (a dry run, a Slurm submission) renders nothing and returns 0.
"""

import contextlib
import functools
import json
import os
import sys

from absl import app

from cocod_jax.config import errors
from cocod_jax.experiments import accuracy
from cocod_jax.experiments import common
from cocod_jax.experiments import correctness
from cocod_jax.experiments import flags as experiment_flags
from cocod_jax.experiments import published
from cocod_jax.experiments import timing
from configs import ablation as ablation_config
from configs import figure4
from configs import scales
from configs import table1
from configs import table2

FLAGS = common.FLAGS


def _tasks(points):
  return sorted({p.arg['task'] for p in points}, key=list(scales.TASKS).index)


def _algos(points, order):
  return [a for a in order if any(p.arg['algo'] == a for p in points)]


def _workers(points) -> int | str:
  """The cluster size of the points (from their results; '?' before any finished)."""
  sizes = {p.results['config']['num_workers'] for p in points if p.results}
  return sizes.pop() if len(sizes) == 1 else '?'


def _finished(points) -> int:
  return 0 if all(p.state in ('DONE', 'DIVERGED') for p in points) else 1


def table(number: int) -> int:
  """Tables 1 and 2: accuracy per cell over the seeds, and the paired verdicts against S-SGD;
  table<n>.md, .json and table<n>_correct.npz (every run's per-example correctness, as bits)."""
  exp, paper = (table1, published.TABLE1) if number == 1 else (table2, published.TABLE2)
  points = common.run(exp, f'scale={FLAGS.scale},seeds={FLAGS.seeds}')
  if points is None:  # A dry run or a Slurm submission: the runner said what it would do.
    return 0
  n = _workers(points)
  title = (
    f'Table 1: test accuracy, {n} homogeneous workers'
    if number == 1
    else f'Table 2: test accuracy, {n} workers, {n // 2} at half speed'
  )
  text, data, arrays = accuracy.accuracy_table(
    title, points, _algos(points, exp.ALGOS), _tasks(points), paper, scales.task_title,
    FLAGS.scale,
  )  # fmt: skip
  print(text)
  common.write(f'table{number}', text, {**data, **common.provenance(points, 'one_host')})
  common.write_npz(f'table{number}_correct', correctness.pack(arrays))
  return _finished(points)


def loss_figure(number: int) -> int:
  """Figures 2 and 5: training loss against epochs (the runs of Tables 1 and 2)."""
  table_number, exp = (1, table1) if number == 2 else (2, table2)
  points = common.run(exp, f'scale={FLAGS.scale},seeds={FLAGS.seeds}')
  if points is None:  # A dry run or a Slurm submission: the runner said what it would do.
    return 0
  n = _workers(points)
  setting = f'{n} workers' if number == 2 else f'{n} workers, half of them at half speed'
  title = f'Figure {number}: training loss, {setting}, {FLAGS.scale} scale, one-host cluster'
  algos, tasks = _algos(points, exp.ALGOS), _tasks(points)
  png = common.curves(
    points,
    algos,
    tasks,
    scales.task_title,
    'epoch',
    'train_loss',
    1.0,
    title,
    f'fig{number}',
    "training loss (the workers' own models)",
    'epoch',
  )
  lines = [
    f'# {title}',
    '',
    f'![fig{number}](fig{number}.png)',
    '',
    "The training loss here is the mean of the workers' own step losses over the epoch (each "
    'worker on its own model, as the paper plots it), not the averaged model the tables '
    "evaluate: between averages the workers' models spread, which raises it for the algorithms "
    "that average less often. The averaged model's training loss is in the long-schedule "
    'artefact (long_schedule.md, `eval_train_examples`).',
    '',
    '| task | algorithm | final training loss (mean of seeds) |',
    '|---|---|---|',
  ]
  rows = []
  for task in tasks:
    finals = {}
    for algo in algos:
      values = [
        p.results['epochs'][-1]['train_loss']
        for p in points
        if p.arg['algo'] == algo and p.arg['task'] == task and p.results
      ]
      if values:
        finals[algo] = sum(values) / len(values)
        lines.append(
          f'| {scales.task_title(task, FLAGS.scale)} | {published.NAMES[algo]} '
          f'| {finals[algo]:.4f} |'
        )
    gap = max(finals.values()) - min(finals.values()) if finals else None
    rows.append(
      {'task': task, 'final_train_loss': finals, 'largest_gap': gap, 'curves': _loss_curves(
        [p for p in points if p.arg['task'] == task and p.results], algos)}
    )  # fmt: skip
    if gap is not None:
      lines.append(f'| {scales.task_title(task, FLAGS.scale)} | largest gap | {gap:.4f} |')
  text = '\n'.join(lines) + '\n'
  print(text)
  common.write(
    f'fig{number}', text, {'rows': rows, 'png': png, **common.provenance(points, 'one_host')}
  )
  return _finished(points)


def _loss_curves(points, algos) -> dict:
  """{algo: {'seeds': n, 'train_loss': the mean over seeds per epoch}}: the plotted lines."""
  out = {}
  for algo in algos:
    runs = [p.results['epochs'] for p in points if p.arg['algo'] == algo]
    if runs:
      length = min(len(r) for r in runs)
      mean = [sum(r[i]['train_loss'] for r in runs) / len(runs) for i in range(length)]
      out[algo] = {'seeds': len(runs), 'train_loss': mean}
  return out


def time_figure(number: int) -> int:
  """Figures 3 and 6: accuracy against measured training time (MPI, timing runs, --seeds of them,
  default 1), on each link of --timing_links (default --link_rate), and the time to each task's
  registered target, read from table1.json (table2.json) in --workdir."""
  table_number, exp = (1, table1) if number == 3 else (2, table2)
  table_path = os.path.join(FLAGS.workdir, f'table{table_number}.json')
  if not FLAGS.dry_run and FLAGS.launcher != 'slurm':
    if not os.path.exists(table_path):
      errors.fail(
        f'{table_path} is missing: Figure {number} times each task to a target taken from '
        f'Table {table_number} (docs/paper-cpu/PREREGISTRATION.md); run '
        f'`python -m cocod_jax.experiments.table{table_number} --scale={FLAGS.scale} '
        f'--workdir={FLAGS.workdir}` first'
      )
  arg = f'scale={FLAGS.scale},seeds={FLAGS.seeds or 1},timing=true'
  if FLAGS.timing_tasks:
    arg += f',tasks={";".join(FLAGS.timing_tasks)}'
  by_link = {}
  for link in FLAGS.timing_links or [FLAGS.link_rate]:
    points = common.run(exp, arg, timing=True, link=link)
    if points is None:  # A dry run or a Slurm submission: the runner said what it would do.
      return 0
    by_link[link or 'no simulated link'] = points
  everything = [p for points in by_link.values() for p in points]
  with open(table_path) as f:
    targets = timing.targets_from(json.load(f))
  setting = 'homogeneous' if number == 3 else 'heterogeneous'
  title = (
    f'Figure {number}: test accuracy against training time, {setting}, {FLAGS.scale} '
    f'scale, MPI ({_workers(everything)} workers)'
  )
  text, data = timing.time_to_accuracy(
    by_link, _algos(everything, exp.ALGOS), _tasks(everything), setting, scales.task_title,
    f'fig{number}', title, targets,
  )  # fmt: skip
  print(text)
  common.write(f'fig{number}', text, {**data, **common.provenance(everything, 'mpi')})
  return _finished(everything)


def speedup_figure() -> int:
  """Figure 4: speedup against workers, measured, with the Section 4.2 model beside it."""
  workers = '1-2' if FLAGS.scale != 'paper' else '1;2;4;8;16'
  points = common.run(figure4, f'scale={FLAGS.scale},workers={workers}', timing=True)
  if points is None:  # A dry run or a Slurm submission: the runner said what it would do.
    return 0
  text, data = timing.speedup(points, figure4.ALGOS, FLAGS.link_rate or 'no simulated link')
  print(text)
  common.write('fig4', text, {**data, **common.provenance(points, 'mpi')})
  return _finished(points)


def ablation() -> int:
  """Why CoCoD-SGD trails S-SGD (configs/ablation.py): each variant against its S-SGD pair."""
  seeds = FLAGS.seeds or (1 if FLAGS.scale == 'smoke' else 3)  # 3 registered; smoke: the tests
  at = '' if FLAGS.scale == 'cpu' else f',scale={FLAGS.scale}'  # The cpu points keep their args.
  arg = f'task={FLAGS.task},seeds={seeds}{at}'
  points = common.run(ablation_config, arg)
  if points is None:  # A dry run or a Slurm submission: the runner said what it would do.
    return 0
  for p in points:  # The accuracy tables group runs by `algo`: here each variant is a row.
    p.arg['algo'] = p.arg['variant']
  title = f'Ablation: CoCoD-SGD one change at a time, {scales.task_title(FLAGS.task, "cpu")}'
  lines = [
    f'# {title}',
    '',
    'Each row against its S-SGD pair (`ssgd`; `ssgd_lr_half` for `cocod_lr_half`), paired by '
    'seed and test example, the registered procedure of the tables (margin 0.5 point, 90% '
    "interval). A diagnosis: the tables keep the paper's settings for every algorithm.",
    '',
    '| variant | seeds | final % (mean) | difference to its S-SGD | 90% interval | verdict |',
    '|---|---|---|---|---|---|',
  ]
  rows = []
  for variant, reference in ablation_config.REFERENCE.items():
    if variant.startswith('ssgd'):
      continue
    runs = accuracy.by_seed(points, variant, FLAGS.task)
    check = accuracy.compare_cell(runs, accuracy.by_seed(points, reference, FLAGS.task))
    finals = [accuracy.final(p) for p in runs.values()]
    mean = sum(finals) / len(finals) if finals else None
    rows.append({'variant': variant, 'reference': reference, 'final_mean': mean, **check})
    if check['verdict'] == 'no pairs':
      lines.append(f'| {variant} | 0 | - | - | - | no pairs |')
      continue
    lines.append(
      f'| {variant} | {check["seeds"]} | {mean:.2f} | {check["difference"]:+.2f} '
      f'| [{check["lo"]:+.2f}, {check["hi"]:+.2f}] | {check["verdict"]} |'
    )
  text = '\n'.join(lines) + '\n'
  print(text)
  common.write('ablation', text, {'rows': rows, **common.provenance(points, 'one_host')})
  return _finished(points)


def paper() -> int:
  """Every artefact in order (Figures 2 and 5 reuse the tables' runs, the ablation six of
  Table 1's), each with its registered flags; 0 when all finished."""
  return max(make(name) for name in experiment_flags.PAPER)


@contextlib.contextmanager
def registered(name: str):
  """While artefact `name` runs: its registered flags at --scale (configs/scales.py
  `artefact_flags`) in place of the defaults of the flags the command line left unset; the
  defaults again afterwards (`paper` runs the artefacts one after the other)."""
  saved = {}
  for flag, value in scales.artefact_flags(name, FLAGS.scale).items():
    if not FLAGS[flag].present:
      saved[flag] = FLAGS[flag].value
      FLAGS[flag].value = value
  try:
    yield
  finally:
    for flag, value in saved.items():
      FLAGS[flag].value = value


def make(name: str) -> int:
  """Artefact `name` with its registered flags; its exit status."""
  with registered(name):
    return ARTEFACTS[name]()


# name -> the function that makes it (what each prints: its docstring): each artefact `paper`
# makes (experiments/flags.py PAPER, the one list of them), and `paper`.
_MAKERS = {
  **{f'table{n}': functools.partial(table, n) for n in (1, 2)},
  **{f'fig{n}': functools.partial(loss_figure, n) for n in (2, 5)},
  **{f'fig{n}': functools.partial(time_figure, n) for n in (3, 6)},
  'fig4': speedup_figure,
  'ablation': ablation,
}
ARTEFACTS = {**{name: _MAKERS[name] for name in experiment_flags.PAPER}, 'paper': paper}


def main(name: str) -> None:
  """The entry point of artefact `name`: defines the flags, runs it, exits with its status."""
  entry(name, lambda: make(name))


def figures(name: str, plot, plot_frontier, timed):
  """`plot(data, dry_run)` for `entry`/`replot` of an experiment with a figure and a frontier:
  <name>.png, and <name>_frontier.png where `timed(data)` (it has timing runs), into --workdir;
  returns their paths (with `dry_run` only the paths, nothing drawn)."""

  def draw(data: dict, dry_run: bool = False) -> list[str]:
    made = [(name, plot)] + ([(f'{name}_frontier', plot_frontier)] if timed(data) else [])
    if dry_run:
      return [os.path.join(FLAGS.workdir, f'{n}.png') for n, _ in made]
    return [fn(data) for _, fn in made]

  return draw


def replot(name: str, plot) -> int:
  """--replot of experiment `name`: its figures again from <workdir>/<name>.json alone, by
  `plot(data, dry_run)` (which returns the paths it drew or, with --dry_run, would draw); nothing
  else written, and with --dry_run nothing at all."""
  path = os.path.join(FLAGS.workdir, f'{name}.json')
  if not os.path.exists(path):
    errors.fail(errors.UsageError(f'{name}: --replot reads {path}, which does not exist'))
  with open(path, encoding='utf-8') as f:
    data = json.load(f)
  for written in plot(data, dry_run=FLAGS.dry_run):
    print(f'dry run: would draw {written}' if FLAGS.dry_run else written)
  return 0


def entry(name: str, make_it, plot=None) -> None:
  """The entry point of experiment `name`: defines the flags (--replot too with `plot`), runs
  `make_it()` with the registered flags of `name` after saying how many runs it will make, or
  replots (`replot`), and exits with the status."""
  experiment_flags.define_experiment_flags(replot=plot is not None)

  def run(argv):
    del argv
    if plot is not None and FLAGS.replot:
      sys.exit(replot(name, plot))
    with registered(name):  # The registered flags (configs/scales.py), if it has any.
      common.announce(name, make_it)
      sys.exit(make_it())

  app.run(run, flags_parser=lambda a: experiment_flags.parse(a, name))

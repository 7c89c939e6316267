"""Tables 1 and 2: each algorithm's accuracy over its seeds, and its verdict against S-SGD.

What is compared was registered before the runs (docs/paper-cpu/PREREGISTRATION.md): the test
accuracy of the final averaged model of each run (`final`), paired with S-SGD's run of the same
seed and scored on the same test examples, through the equivalence procedure of
experiments/stats.py (two one-sided tests, margin 0.5 point, 90% interval). The best accuracy
over the epochs, the paper's "final best", is printed beside it but not tested: a maximum picked
on the test set is biased upwards, by more for a noisier curve.

A run's per-example correctness comes from experiments/correctness.py (its final model scored
again, checked against the accuracy it reported). Where a run has no final model on disk (a
result copied without its directory), the pairs are by seed alone and `paired_by` says so.
"""

import os
import statistics

from cocod_jax.experiments import correctness
from cocod_jax.experiments import published
from cocod_jax.experiments import stats

MARGIN = stats.MARGIN


def final(point) -> float:
  """The final averaged model's test accuracy of a finished point, in %."""
  return 100.0 * correctness.reported_accuracy(point.results)


def by_seed(points, algo: str, task: str) -> dict:
  """{seed: point} of the finished points of a cell."""
  return {
    int(p.arg['seed']): p
    for p in points
    if p.arg['algo'] == algo and p.arg['task'] == task and p.results and p.results.get('epochs')
  }


def of_point(point):
  """Per-example correctness of a point's final model, or None without its final model."""
  if not os.path.exists(os.path.join(point.directory, 'final_params.npz')):
    return None
  return correctness.of_run(point.directory, point.results)


def _cell(runs: dict, paper: float) -> dict:
  seeds = sorted(runs)
  finals = [final(runs[s]) for s in seeds]
  bests = [runs[s].best for s in seeds]
  return {
    'seeds': seeds,
    'final': finals,
    'best': bests,
    'n': len(seeds),
    'mean': statistics.mean(finals) if finals else None,
    'std': statistics.stdev(finals) if len(finals) > 1 else None,
    'best_mean': statistics.mean(bests) if bests else None,
    'paper': paper,
  }


def compare_cell(runs: dict, reference: dict, correct_of=of_point) -> dict:
  """The verdict of one algorithm's runs against S-SGD's of one task, paired by the seeds both
  have (and by test example when every run's final model is on disk)."""
  seeds = sorted(set(runs) & set(reference))
  if not seeds:
    return {'verdict': 'no pairs', 'pairs': [], 'paired_by': 'none'}
  correct = [(correct_of(runs[s]), correct_of(reference[s])) for s in seeds]
  if all(a is not None and b is not None for a, b in correct):
    c = stats.compare([a for a, _ in correct], [b for _, b in correct])
    paired_by = 'seed and test example'
  else:
    c = stats.compare([final(runs[s]) for s in seeds], [final(reference[s]) for s in seeds])
    paired_by = 'seed'
  return {**c.to_dict(), 'pairs': seeds, 'paired_by': paired_by}


def _fmt(v, f):
  return '-' if v is None or v != v else f.format(v)  # v != v: NaN.


def _cell_text(cell) -> str:
  if not cell['n']:
    return f'- / {cell["paper"]:.2f}'
  spread = f' ± {cell["std"]:.2f}' if cell['std'] is not None else ''
  return (
    f'{cell["mean"]:.2f}{spread} ({cell["n"]}); best {cell["best_mean"]:.2f} / {cell["paper"]:.2f}'
  )


def _check_line(name, title, check) -> str:
  if check['verdict'] == 'no pairs':
    return f'| {name} | {title} | 0 | - | - | no pairs | - | - |'
  return (
    f'| {name} | {title} | {check["seeds"]} | {check["difference"]:+.2f} '
    f'| [{_fmt(check["lo"], "{:+.2f}")}, {_fmt(check["hi"], "{:+.2f}")}] '
    f'| **{check["verdict"]}** | {"yes" if check["noninferior"] else "no"} '
    f'| {_needed(check)} |'
  )


def _needed(check) -> str:
  """Seeds an inconclusive cell would need; '> 1000' when no number would (a difference at the
  margin); '-' otherwise."""
  if check['seeds_needed'] is not None:
    return str(check['seeds_needed'])
  if check['verdict'] == 'inconclusive' and check['seeds'] > 1:
    return f'> {stats.MAX_SEEDS}'
  return '-'


def accuracy_table(
  title, points, algos, tasks, paper_table, task_title, scale, correct_of=of_point
):
  """(Markdown, JSON, {algo.task: [seeds, examples] correctness}) of an accuracy table."""
  known = {}  # Each run's correctness, read once: S-SGD's runs pair with every other row.

  def correct_once(point):
    if point.directory not in known:
      known[point.directory] = correct_of(point)
    return known[point.directory]

  grid = {
    (a, t): _cell(by_seed(points, a, t), published.accuracy(paper_table, a, t))
    for a in algos
    for t in tasks
  }
  lines = [
    f'# {title} ({scale} scale)',
    '',
    'Each cell: test accuracy (%) of the final averaged model, mean ± sd over the seeds (how '
    'many); the best over the epochs (mean); / the paper'
    + (
      ''
      if scale == 'paper'
      else "'s number for its own task (the stand-ins differ: compare the relations between rows)"
    )
    + '.',
    '',
    '| algorithm | ' + ' | '.join(task_title(t, scale) for t in tasks) + ' |',
    '|---|' + '---|' * len(tasks),
  ]
  for algo in algos:
    row = ' | '.join(_cell_text(grid[(algo, t)]) for t in tasks)
    lines.append(f'| {published.NAMES[algo]} | {row} |')
  lines += [
    '',
    f'Against {published.NAMES[algos[0]]}, the procedure registered before the runs '
    '(experiments/stats.py): the final accuracy paired by seed and by test example, two '
    f'one-sided tests with margin {MARGIN} point, the 90% interval of the difference; '
    '"not worse": the interval lies above -0.5; "seeds needed": how many seeds an '
    'inconclusive cell would need at the observed difference and spread.',
    '',
    '| algorithm | task | seeds | difference | 90% interval | verdict | not worse | seeds needed |',
    '|---|---|---|---|---|---|---|---|',
  ]
  checks, arrays = [], {}
  for algo in algos[1:]:
    for t in tasks:
      runs, reference = by_seed(points, algo, t), by_seed(points, algos[0], t)
      check = {'algo': algo, 'task': t, **compare_cell(runs, reference, correct_once)}
      checks.append(check)
      lines.append(_check_line(published.NAMES[algo], task_title(t, scale), check))
  for (algo, t), cell in grid.items():
    runs = by_seed(points, algo, t)
    got = [correct_once(runs[s]) for s in cell['seeds']]
    if got and all(g is not None for g in got):
      arrays[f'{algo}.{t}'] = got
  data = {
    'artefact': title,
    'statistic': 'final averaged model accuracy, paired TOST (experiments/stats.py)',
    'margin': MARGIN,
    'cells': [dict(algo=a, task=t, **grid[(a, t)]) for a in algos for t in tasks],
    'checks': checks,
  }
  return '\n'.join(lines) + '\n', data, arrays

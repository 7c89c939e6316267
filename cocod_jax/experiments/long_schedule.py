"""`python -m cocod_jax.experiments.long_schedule`: Claim 1 on the paper's own 120-epoch schedule
and the drift control at 24 epochs (issue 31; configs/long_schedule.py; registered in
docs/paper-cpu/PREREGISTRATION.md, amendment 4).

    python -m cocod_jax.experiments.long_schedule --parallel=2 --workdir=runs/long

The runs, in the registered order: the long stage's hard columns, the drift control, the long
stage's mnist1d_large - mlp1d, then its mnist1d_large - cnn1d. Then, per column:

- the verdicts against S-SGD at 120 epochs on the final accuracy (the registered statistic:
  paired by seed and test example) and, labelled apart, on the best accuracy over the epochs
  (paired by seed), beside the 24-epoch verdicts (the drift stage's runs on the hard columns,
  Table 1's from docs/paper-cpu/table1.json on the large ones);
- the curves: the evaluated model's test accuracy minus S-SGD's against the epoch (mean over the
  seeds, their range shaded) and its training loss on 10,000 training examples;
- the drift control's readings (amendment 4: (a) Local-SGD with period 10 against CoCoD-SGD,
  (b) period 2 and (c) the long warm-up against CoCoD-SGD, paired by seed).

Writes long_schedule.md, .json (the commits the runs were made at, every run's curves) and .png
into --workdir.
"""

import json
import os
import statistics

import numpy as np

from cocod_jax.experiments import accuracy
from cocod_jax.experiments import artefacts
from cocod_jax.experiments import common
from cocod_jax.experiments import corrections
from cocod_jax.experiments import stats
from configs import long_schedule as config
from configs import scales

FLAGS = common.FLAGS
# The registered order of the sweeps: (stage, columns).
ORDER = (
  ('long', config.HARD),
  ('drift', config.HARD),
  ('long', ('c10_v16',)),
  ('long', ('c10_r18',)),
)
TABLE1 = os.path.join(os.path.dirname(__file__), '..', '..', 'docs', 'paper-cpu', 'table1.json')
TABLE1_ALGOS = {'local_sgd': 'local_sgd', 'cocod': 'cocod_sgd'}
# The drift readings: (name, variant, against, what it reads).
READINGS = (
  ('a', 'local_sgd_k10', 'cocod', 'Local-SGD with period 10 minus CoCoD-SGD (k = 5)'),
  ('b', 'cocod_k2', 'cocod', 'CoCoD-SGD with period 2 minus CoCoD-SGD'),
  ('c', 'cocod_long_warmup', 'cocod', 'CoCoD-SGD with the long warm-up minus CoCoD-SGD'),
)


def _stage(points, stage: str) -> list:
  return [p for p in points if p.arg['stage'] == stage]


def verdicts(points, task: str, variants) -> dict:
  """{variant: {'final': the registered verdict row, 'best': the best-over-epochs one}}."""
  rows, _ = corrections.accuracy_rows(points, task, variants)
  reference = accuracy.by_seed(points, config.REFERENCE, task)
  out = {}
  for row in rows:
    runs = accuracy.by_seed(points, row['variant'], task)
    seeds = sorted(set(runs) & set(reference))
    best = {'verdict': 'no pairs'}
    if seeds and row['verdict'] != 'diverged':
      c = stats.compare([runs[s].best for s in seeds], [reference[s].best for s in seeds])
      best = {**c.to_dict(), 'pairs': seeds, 'paired_by': 'seed'}
    out[row['variant']] = {'final': row, 'best': best}
  return out


def table1_verdicts(task: str) -> dict:
  """{variant: Table 1's verdict row} of Local-SGD and CoCoD-SGD on `task` (the committed
  artefact, its own build and seeds); {} where it is not there."""
  if not os.path.exists(TABLE1):
    return {}
  with open(TABLE1) as f:
    table = json.load(f)
  checks = {c['algo']: c for c in table.get('checks', []) if c.get('task') == task}
  return {v: checks[a] for v, a in TABLE1_ALGOS.items() if a in checks}


def reading(points, task: str, variant: str, against: str) -> dict | None:
  """`variant`'s final accuracy minus `against`'s, paired by seed: difference, 90% interval and
  which side of 0 the interval lies ('above', 'below', 'across'); None without pairs."""
  mine = accuracy.by_seed(points, variant, task)
  other = accuracy.by_seed(points, against, task)
  seeds = sorted(set(mine) & set(other))
  if len(seeds) < 2:
    return None
  c = stats.compare([accuracy.final(mine[s]) for s in seeds],
                    [accuracy.final(other[s]) for s in seeds]).to_dict()  # fmt: skip
  side = 'above' if c['lo'] > 0 else ('below' if c['hi'] < 0 else 'across')
  return {'seeds': seeds, 'difference': c['difference'], 'lo': c['lo'], 'hi': c['hi'], 'side': side}


def outcome(name: str, r: dict | None, own: dict | None, cocod: dict | None) -> str | None:
  """What amendment 4 fixed for reading `name` in one column: (a) 'kept' where Local-SGD with
  period 10 is no better than CoCoD-SGD (the interval reaches 0 or below), 'dropped' where it is
  better; (b), (c) 'kept' where the variant beats CoCoD-SGD (interval above 0) and its own
  difference to S-SGD is no worse than half of CoCoD-SGD's, 'reworded' otherwise. None without
  the runs."""
  if r is None:
    return None
  if name == 'a':
    return 'dropped' if r['side'] == 'above' else 'kept'
  if not own or not cocod or own.get('difference') is None or cocod.get('difference') is None:
    return None
  most = r['side'] == 'above' and own['difference'] >= cocod['difference'] / 2
  return 'kept' if most else 'reworded'


def curves(points) -> dict:
  """{task: {variant: {seed: {field: [per epoch]}}}} of the long stage's runs (5 digits)."""
  out = {}
  for p in points:
    if not p.results or not p.results.get('epochs'):
      continue
    epochs = p.results['epochs']
    rec = {
      field: [round(e[field], 5) if e.get(field) is not None else None for e in epochs]
      for field in ('test_accuracy', 'avg_train_loss', 'train_loss')
    }
    out.setdefault(p.arg['task'], {}).setdefault(p.arg['variant'], {})[p.arg['seed']] = rec
  return out


def gap_curve(runs: dict, reference: dict):
  """(mean, lowest, highest) over the seeds both have of the per-epoch test accuracy minus
  S-SGD's, in points; None without a pair."""
  seeds = sorted(set(runs) & set(reference), key=int)
  if not seeds:
    return None
  n = min(min(len(runs[s]['test_accuracy']), len(reference[s]['test_accuracy'])) for s in seeds)
  gaps = np.array([
    100 * (np.array(runs[s]['test_accuracy'][:n]) - np.array(reference[s]['test_accuracy'][:n]))
    for s in seeds
  ])  # fmt: skip
  return gaps.mean(axis=0), gaps.min(axis=0), gaps.max(axis=0)


def _cell(row) -> str:
  if not row or row.get('difference') is None:
    return (row or {}).get('verdict', 'not run').replace('no pairs', 'not run')
  return f'{row["difference"]:+.2f} [{row["lo"]:+.2f}, {row["hi"]:+.2f}] {row["verdict"]}'


def render(data: dict) -> str:
  tasks = config.STAGE_TASKS['long']
  title = lambda t: scales.task_title(t, 'cpu')  # noqa: E731
  lines = [
    "# Claim 1 on the paper's schedule: 120 epochs against 24 (cpu scale, 16 workers, one-host "
    'cluster)',
    '',
    '![long schedule](long_schedule.png)',
    '',
    common.provenance_line(data),
    '',
    "Each cell: the final accuracy minus S-SGD's, in points, paired by seed and test example, its "
    '90% interval and the registered verdict (margin 0.5 point). "best": the best test accuracy '
    'over the epochs (the paper\'s "final best"), paired by seed alone: a second statistic, not '
    "the registered one. 24 epochs: the drift control's runs on the hard columns, Table 1's "
    '(docs/paper-cpu/table1.json, its build and seeds) on the large ones. Registered before the '
    'runs: docs/paper-cpu/PREREGISTRATION.md, amendment 4.',
    '',
    '| column | algorithm | 24 epochs, final | 120 epochs, final | 120 epochs, best |',
    '|---|---|---|---|---|',
  ]
  for t in tasks:
    ssgd = data['ssgd'].get(t)
    ref = f' (S-SGD {ssgd["mean"]:.2f}%, best {ssgd["best_mean"]:.2f}%)' if ssgd else ''
    for v in ('local_sgd', 'cocod'):
      long = data['long'].get(t, {}).get(v, {})
      short = data['short'].get(t, {}).get(v)
      lines.append(
        f'| {title(t)}{ref} | {v} | {_cell(short)} | {_cell(long.get("final"))} '
        f'| {_cell(long.get("best"))} |'
      )
  lines += [
    '',
    '## The drift control (24 epochs, the hard columns, seeds 0-4)',
    '',
    '| column | variant | difference to S-SGD |',
    '|---|---|---|',
  ]
  for t in config.HARD:
    for v, row in data['drift'].get(t, {}).items():
      lines.append(f'| {title(t)} | {v} | {_cell(row)} |')
  lines += [
    '',
    'The registered readings (paired by seed, 90% interval) and what amendment 4 fixed for '
    'each: (a) "the staleness is the drift" is kept where Local-SGD with period 10 is no better '
    'than CoCoD-SGD, dropped where it is better; (b) "period 2 recovers most of the gap" and '
    '(c) the same of the long warm-up are kept where the variant beats CoCoD-SGD and its own '
    "difference to S-SGD is no worse than half of CoCoD-SGD's, reworded otherwise.",
    '',
    '| reading | ' + ' | '.join(title(t) for t in config.HARD) + ' |',
    '|---|' + '---|' * len(config.HARD),
  ]
  for name, _, _, what in READINGS:
    cells = []
    for t in config.HARD:
      r = data['readings'].get(t, {}).get(name)
      said = data['outcomes'].get(t, {}).get(name)
      text = f'{r["difference"]:+.2f} [{r["lo"]:+.2f}, {r["hi"]:+.2f}] ({r["side"]} 0)' if r else ''
      cells.append(f'{text}: {said}' if text and said else text or 'not run')
    lines.append(f'| ({name}) {what} | ' + ' | '.join(cells) + ' |')
  lines += ['', data['not_run_line']]
  return '\n'.join(lines) + '\n'


def plot(data: dict):
  """Per column: the test accuracy minus S-SGD's against the epoch (top; mean over seeds, range
  shaded) and the evaluated model's training loss (bottom; mean over seeds), lr decay marked."""
  plt = common._pyplot()  # pylint: disable=protected-access
  tasks = config.STAGE_TASKS['long']
  fig, axes = plt.subplots(2, len(tasks), figsize=(4.2 * len(tasks), 7), squeeze=False)
  colors = {'ssgd': 'C0', 'local_sgd': 'C2', 'cocod': 'C3'}
  decay = data['decay_epoch']
  for j, t in enumerate(tasks):
    runs = data['curves'].get(t, {})
    top, bottom = axes[0][j], axes[1][j]
    if not runs:
      for ax in (top, bottom):
        ax.text(0.5, 0.5, 'not run', transform=ax.transAxes, ha='center', color='gray')
        ax.set_xlim(0, data['num_epochs'])
        ax.set_yticks([])
    for v in ('local_sgd', 'cocod'):
      g = gap_curve(runs.get(v, {}), runs.get('ssgd', {}))
      if g is None:
        continue
      x = np.arange(1, len(g[0]) + 1)
      top.plot(x, g[0], color=colors[v], label=v, lw=1)
      top.fill_between(x, g[1], g[2], color=colors[v], alpha=0.2)
    for v, color in colors.items():
      seeds = runs.get(v, {})
      losses = [r['avg_train_loss'] for r in seeds.values() if None not in r['avg_train_loss']]
      if losses:
        n = min(len(x) for x in losses)
        bottom.plot(np.arange(1, n + 1), np.mean([x[:n] for x in losses], axis=0), color=color,
                    label=v, lw=1)  # fmt: skip
    for ax in (top, bottom):
      ax.axvline(decay, color='gray', ls=':', lw=1)
      ax.grid(alpha=0.3)
      ax.set_xlabel('epoch (dotted: lr / 10)')
    top.axhline(0, color='gray', lw=0.8)
    top.axhspan(-accuracy.MARGIN, accuracy.MARGIN, color='green', alpha=0.08)
    top.set_ylim(-6, 3)
    top.set_title(scales.task_title(t, 'cpu'), fontsize=8)
    if runs:
      bottom.set_yscale('log')
    if j == 0:
      top.set_ylabel("test accuracy - S-SGD's (points)")
      bottom.set_ylabel('averaged model, training loss')
    if top.get_legend_handles_labels()[1]:
      top.legend(fontsize=7)
      bottom.legend(fontsize=7)
  fig.suptitle("120 epochs (the paper's schedule), cpu scale: the evaluated (averaged) model")
  fig.tight_layout()
  return common.save_figure(fig, 'long_schedule')


def assemble(points) -> dict:
  """The artefact's data from every run of both stages (`corrections.as_rows` applied)."""
  long_points, drift_points = _stage(points, 'long'), _stage(points, 'drift')
  data = {'long': {}, 'short': {}, 'drift': {}, 'readings': {}, 'outcomes': {}, 'ssgd': {}}
  for t in config.STAGE_TASKS['long']:
    data['long'][t] = verdicts(long_points, t, ['local_sgd', 'cocod'])
    reference = accuracy.by_seed(long_points, config.REFERENCE, t)
    if reference:
      data['ssgd'][t] = {
        'mean': statistics.mean(accuracy.final(p) for p in reference.values()),
        'best_mean': statistics.mean(p.best for p in reference.values()),
        'seeds': sorted(reference),
      }
    if t in config.HARD:
      rows, _ = corrections.accuracy_rows(drift_points, t, list(config.VARIANTS['drift']))
      data['drift'][t] = {r['variant']: r for r in rows}
      data['short'][t] = {v: data['drift'][t].get(v) for v in ('local_sgd', 'cocod')}
      data['readings'][t] = {
        name: reading(drift_points, t, v, against) for name, v, against, _ in READINGS
      }
      data['outcomes'][t] = {
        name: outcome(
          name, data['readings'][t][name], data['drift'][t].get(v), data['drift'][t].get('cocod')
        )  # fmt: skip
        for name, v, _, _ in READINGS
      }
    else:
      data['short'][t] = table1_verdicts(t)
  data['not_run'], data['not_run_line'] = common.not_run(
    points, lambda p: f'{p.arg["stage"]} {p.arg["variant"]} {p.arg["task"]}'
  )
  data['curves'] = curves(long_points)
  schedule = config.get_config('stage=long')
  data['decay_epoch'], data['num_epochs'] = schedule.optimizer.decay_epochs[0], schedule.num_epochs
  data.update(common.provenance(points, 'one_host'))
  return data


def make() -> int:
  """Runs (or reads) the registered sweeps in order, then writes the artefact."""
  points = []
  for i, (stage, tasks) in enumerate(ORDER):  # --report_only: something in the first sweep.
    run = common.run(config, f'stage={stage},tasks={";".join(tasks)}', check_empty=i == 0)
    if run is None:  # A dry run or a Slurm submission: the runner said what it would do.
      return 0
    points += corrections.as_rows(run)
  data = assemble(points)
  text = render(data)
  print(text)
  plot(data)
  common.write('long_schedule', text, data)
  return 0 if not data['not_run'] else 1


def main():
  artefacts.entry('long_schedule', make)


if __name__ == '__main__':
  main()

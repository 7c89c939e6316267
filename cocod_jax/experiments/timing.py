"""Time to the registered target (Figures 3 and 6, the overlap timing): each run's training time
to the target accuracy, its speedup over S-SGD, where that time goes, and the time model of
Section 4.2; and Figure 4's speedup against workers."""

import statistics

from cocod_jax import timeline
from cocod_jax.experiments import common
from cocod_jax.experiments import correctness
from cocod_jax.experiments import published
from cocod_jax.experiments.common import COLORS
from cocod_jax.experiments.common import FLAGS
from cocod_jax.experiments.common import MARGIN


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
  reaches `target` (%), plus the seconds a run with `period` or `delay='auto'` spent measuring
  Tp and Tc before its first step (`period_auto.measure_s`: the step compiles there instead of
  in epoch 1), so every run counts its compilation alike; None when no epoch reaches it."""
  epoch = first_epoch_at(results, target)
  if epoch is None:
    return None
  return epoch['train_time_s'] + (results.get('period_auto') or {}).get('measure_s', 0.0)


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
    common.curves(
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
  plt = common._pyplot()
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
  png = common.save_figure(fig, 'fig4')
  lines += [
    '',
    'Model: N Tp / step(Tp, Tc(N)) with Tp and Tc from separate S-SGD calibration runs (Tp '
    'at 1 worker, Tc at the most workers, scaled as a ring allreduce, 2 (N - 1) / N), never '
    'from the runs in the table; measured speedups use epochs after the first.',
  ]
  return '\n'.join(lines) + '\n', {'rows': rows, 'model': model_rows, 'png': png, 'link': link}

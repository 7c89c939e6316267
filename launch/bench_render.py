"""bench.md from a report (what launch/bench.py measures, or its bench.json): one table and its
targets a section, medians with [min, max] over the runs, and where each section was measured.

Pure text from the report's numbers; `overlap_lines` also keeps its targets in the report
(`report['targets']`), as `ranks_lines` does (`ranks['target']`).
"""

import statistics

from launch import bench_model

# The sections, in bench.md's order (`--sections` chooses among them).
SECTIONS = ('overhead', 'comm', 'checkpoint', 'overlap', 'streamed', 'hetero', 'ranks')


def spread(values, fmt='{:.1f}', scale=1.0):
  """`median [min, max]` of the values that are not None, scaled and formatted; '-' if none."""
  v = [x * scale for x in values if x is not None]
  if not v:
    return '-'
  return f'{fmt.format(statistics.median(v))} [{fmt.format(min(v))}, {fmt.format(max(v))}]'


def table(rows):
  lines = [
    '| target r | link | algorithm | r = Tc/Tp (S-SGD run) | ms / step | speedup vs S-SGD '
    '| model ms / step (calibration) | hidden |',
    '|---|---|---|---|---|---|---|---|',
  ]
  for row in rows:
    lines.append(
      f'| {row["target_r"]:g} | {row["rate_mbit"]:.0f} Mbit/s '
      f'| {bench_model.NAMES[row["algorithm"]]} '
      f'| {spread(row["r_measured"], "{:.2f}")} | {spread(row["step_time_s"], scale=1e3)} '
      f'| {spread(row["speedup_vs_ssgd"], "{:.2f}")}x '
      f'| {spread(row["predicted_step_s"], scale=1e3)} '
      f'| {spread(row["hidden_fraction"], "{:.0%}")} |'
    )
  return lines


def pipe_table(report):
  """Pipe-SGD against max(Tp, Tc) of its own run, plus the pipeline refilled once per epoch.

  The loop waits at each epoch end for the gradient average still in flight (evaluation never
  runs beside a collective), so the first step of the next epoch has no allreduce to hide behind:
  over an epoch of S steps that costs min(Tp, Tc) once, min(Tp, Tc) / S per step.
  """
  lines = [
    '| target r | ms / step | Tp, Tc of the run ms | max(Tp, Tc) | epoch-end wait ms / step '
    '| + refill min(Tp, Tc) / S | measured / (max + refill) |',
    '|---|---|---|---|---|---|---|',
  ]
  for ratio in report['ratios']:
    runs = ratio['runs']['pipe_sgd']
    own = [max(r['Tp_s'], r['Tc_s']) for r in runs]
    refill = [min(r['Tp_s'], r['Tc_s']) / r['steps_per_epoch'] for r in runs]
    vs = [r['step_time_s'] / (m + f) for r, m, f in zip(runs, own, refill)]
    lines.append(
      f'| {ratio["target_r"]:g} | {spread([r["step_time_s"] for r in runs], scale=1e3)} '
      f'| {spread([r["Tp_s"] for r in runs], scale=1e3)}, '
      f'{spread([r["Tc_s"] for r in runs], scale=1e3)} | {spread(own, scale=1e3)} '
      f'| {spread([r["drain_s"] / r["steps"] for r in runs], scale=1e3)} '
      f'| {spread(refill, scale=1e3)} | {spread(vs, "{:.2f}")} |'
    )
  return lines


def _verdict(ok):
  return 'met' if ok else 'MISSED'


def target_lines(report):
  """The overlap targets, as ratios measured in the same repeat."""
  all_rows = [row for ratio in report['ratios'] for row in ratio['rows']]
  targets = []
  for row in all_rows:
    if row['algorithm'] == 'cocod_sgd':
      limit = 1.10 if row['target_r'] <= 1 else 1.15
      ok = statistics.median(row['round_vs_ideal']) <= limit
      targets.append(
        f'- r = {row["target_r"]:g}: CoCoD round time / max(k*Tp, Tc) = '
        f'{spread(row["round_vs_ideal"], "{:.2f}")} (target <= {limit:.2f}): {_verdict(ok)}'
      )
  by = {(r['target_r'], r['algorithm']): r for r in all_rows}
  ratios = [ratio['target_r'] for ratio in report['ratios']]
  for target in ratios:
    cocod, local = by[(target, 'cocod_sgd')], by[(target, 'local_sgd')]
    vs_local = [lo / co for lo, co in zip(local['step_time_s'], cocod['step_time_s'])]
    targets.append(
      f'- r = {target:g}: Local-SGD / CoCoD-SGD time per step = {spread(vs_local, "{:.2f}")} '
      f'(target > 1 in every run): {_verdict(min(vs_local) > 1.0)}'
    )
    if target == min(ratios):
      sp = cocod['speedup_vs_ssgd']
      targets.append(
        f'- r = {target:g}: CoCoD-SGD speedup over S-SGD = {spread(sp, "{:.2f}")}x '
        f'(target >= 1.6): {_verdict(statistics.median(sp) >= 1.6)}'
      )
  return targets


def overlap_lines(report):
  repeats = len(report['ratios'][0]['runs']['ssgd'])
  top = max(ratio['target_r'] for ratio in report['ratios'])
  lines = [f'## Overlap on the simulated link ({repeats} runs per row)', '']
  lines += table([row for ratio in report['ratios'] for row in ratio['rows']])
  lines += ['', f'### Where the background allreduce runs (CoCoD-SGD, r = {top:g})', '']
  lines += ['| comm.staging | ms / step | Tc ms | hidden |', '|---|---|---|---|']
  for staging, runs in report['stagings'].items():
    lines.append(
      f'| {staging} | {spread([r["step_time_s"] for r in runs], scale=1e3)} '
      f'| {spread([r["Tc_s"] for r in runs], scale=1e3)} '
      f'| {spread([r["hidden_fraction"] for r in runs], "{:.0%}")} |'
    )
  lines += ['', '### Pipe-SGD against its model', '']
  lines += pipe_table(report)
  lines += ['', '### Targets (ratios measured in the same repeat)', '']
  report['targets'] = target_lines(report)
  return lines + report['targets']


def streamed_lines(streamed, calibration):
  """Streamed CoCoD-SGD's rounds against max(k Tp, Tc) of the S-SGD run of the same repeat, the
  tau each run used, the hidden fraction and the time model; the targets (tau = 1 at r <= 3)."""
  k, p = bench_model.K, bench_model.FRAGMENTS
  repeats = len(streamed[0]['runs']['S-SGD'])
  lines = [f'## Streamed CoCoD-SGD: P = {p} fragments of k = {k} ({repeats} runs per row)', '']
  lines += [
    '| target r | link | variant | r = Tc/Tp (S-SGD run) | tau | ms / step | round / max(k Tp, '
    'Tc) | Tc of a fragment ms | hidden | model ms / step (calibration) |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ]
  targets = []
  for entry in streamed:
    ssgd = entry['runs']['S-SGD']
    tp, tc = bench_model.calibrated(calibration, entry['rate_kbit'])
    for name, algorithm, _ in bench_model.STREAMED:
      runs = entry['runs'][name]
      ideal = [max(k * s['Tp_s'], s['Tc_s']) for s in ssgd]
      ratio = [r['round_time_s'] / i if r.get('round_time_s') else None
               for r, i in zip(runs, ideal)]  # fmt: skip
      taus = sorted({r['tau'] for r in runs if r.get('tau')})
      model = [bench_model.predicted_streamed(algorithm, tp, tc, r.get('tau')) for r in runs]
      streamed_run = algorithm == 'cocod_sgd'
      lines.append(
        f'| {entry["target_r"]:g} | {entry["rate_kbit"] / 1000:.0f} Mbit/s | {name} '
        f'| {spread([s["Tc_s"] / s["Tp_s"] for s in ssgd], "{:.2f}")} '
        f'| {", ".join(map(str, taus)) or "-"} '
        f'| {spread([r["step_time_s"] for r in runs], scale=1e3)} '
        f'| {spread(ratio, "{:.2f}") if streamed_run else "-"} '
        f'| {spread([r.get("Tc_fragment_s") for r in runs], scale=1e3) if streamed_run else "-"} '
        f'| {spread([r["hidden_fraction"] for r in runs], "{:.0%}")} '
        f'| {spread(model, scale=1e3)} |'
      )
      if name == 'streamed tau=1' and entry['target_r'] <= 3:
        ok = statistics.median(ratio) <= bench_model.STREAMED_TARGET
        targets.append(
          f'- r = {entry["target_r"]:g}: streamed (tau = 1) round time / max(k*Tp, Tc) = '
          f'{spread(ratio, "{:.2f}")} (target <= {bench_model.STREAMED_TARGET:.2f}): '
          f'{_verdict(ok)}'
        )
  lines += ['', '### Targets (ratios to the S-SGD run of the same repeat)', ''] + targets
  return lines


def overhead_lines(overhead):
  runs = overhead['runs']
  ratios = [r['ratio'] for r in runs]
  ok = statistics.median(ratios) <= 1.05
  return [
    f'## Loop overhead ({len(runs)} repeats, epochs 2-{overhead["epochs"]})',
    '',
    '| bare jitted loop ms / step | train_and_evaluate ms / step | ratio |',
    '|---|---|---|',
    f'| {spread([r["bare_ms"] for r in runs], "{:.3f}")} '
    f'| {spread([r["framework_ms"] for r in runs], "{:.3f}")} | {spread(ratios, "{:.3f}")} |',
    '',
    f'- framework / bare step time = {spread(ratios, "{:.3f}")} (target <= 1.05): {_verdict(ok)}',
  ]


def comm_lines(comm):
  lines = [
    '## The communicator beside raw mpi4py (2 ranks, median of the calls)',
    '',
    '| link | payload | MB | leaves | raw ms | weighted_mean ms | over raw | thread ms |',
    '|---|---|---|---|---|---|---|---|',
  ]
  targets = []
  for result in comm:
    for row in result['rows']:
      over = row['blocking_ms'] - row['raw_ms']
      lines.append(
        f'| {result["link"]} | {row["payload"]} | {row["bytes"] / 1e6:.2f} | {row["leaves"]} '
        f'| {row["raw_ms"]:.3f} | {row["blocking_ms"]:.3f} | +{over:.3f} ms '
        f'({row["blocking_ms"] / row["raw_ms"]:.2f}x) | {row["thread_ms"]:.3f} |'
      )
      if row['payload'] == 'cnn' and result['link'] == 'shared memory':
        targets.append(
          f'- fixed cost, {row["bytes"] / 1e3:.0f} KB over shared memory: '
          f'+{over:.3f} ms over raw (target <= 0.3 ms): {_verdict(over <= 0.3)}'
        )
      if row['payload'] == 'resnet18':
        ratio = row['blocking_ms'] / row['raw_ms']
        goal = result['link'] != 'shared memory'
        targets.append(
          f'- {row["bytes"] / 1e6:.1f} MB over {result["link"]}: {ratio:.2f}x raw '
          + (
            f'(target <= 1.10): {_verdict(ratio <= 1.10)}' if goal else '(no target: memory-bound)'
          )
        )
  return lines + [''] + targets


def checkpoint_lines(result):
  lines = [
    '## Checkpoint cost (ResNet18 train state: parameters, momentum, BatchNorm statistics)',
    '',
    '| workers | MB on disk | write s | restore s |',
    '|---|---|---|---|',
  ]
  for row in result['rows']:
    lines.append(
      f'| {row["workers"]} | {row["bytes"] / 1e6:.0f} | {spread(row["write_s"], "{:.2f}")} '
      f'| {spread(row["restore_s"], "{:.2f}")} |'
    )
  return lines


def hetero_lines(hetero, calibration):
  """The mixed cluster's rows; the model from `calibration` (the slow rank's Tp: twice the
  calibrated one, as emulate_speeds makes it), never from the runs it predicts."""
  runs = hetero['runs']
  base = runs['S-SGD']
  tp, tc = bench_model.calibrated(calibration, hetero['rate_kbit'])
  lines = [
    f'## Mixed cluster: rank 0 at half speed, {hetero["rate_kbit"] / 1000:.0f} Mbit/s '
    f'({len(base)} runs per row; model from the calibration: Tp_slow {2 * tp * 1e3:.1f} ms, '
    f'Tc {tc * 1e3:.1f} ms, r = {tc / (2 * tp):.2f})',
    '',
    '| algorithm | r = Tc/Tp_slow | ms / step | steps / epoch | s / epoch | epoch speedup vs S-SGD '
    '| model ms / step (calibration) | model epoch speedup | hidden |',
    '|---|---|---|---|---|---|---|---|---|',
  ]
  rows = {}
  for name, algorithm, ps in bench_model.HETERO:
    rs = runs[name]
    slow = [b['ranks'][0]['Tp_s'] for b in base]
    tcs = [b['Tc_s'] for b in base]
    epoch = [r['step_time_s'] * r['steps_per_epoch'] for r in rs]
    base_epoch = [b['step_time_s'] * b['steps_per_epoch'] for b in base]
    model = [bench_model.predicted_hetero(algorithm, 2 * tp, tc)] * len(rs)
    ssgd_step = bench_model.predicted_hetero('ssgd', 2 * tp, tc)
    model_speedup = [
      ssgd_step * b['steps_per_epoch'] / (m * r['steps_per_epoch'])
      for m, r, b in zip(model, rs, base)
    ]
    rows[name] = speedup = [b / e for b, e in zip(base_epoch, epoch)]
    lines.append(
      f'| {name} | {spread([tc / tp for tc, tp in zip(tcs, slow)], "{:.2f}")} '
      f'| {spread([r["step_time_s"] for r in rs], scale=1e3)} | {rs[0]["steps_per_epoch"]} '
      f'| {spread(epoch, "{:.2f}")} | {spread(speedup, "{:.2f}")}x '
      f'| {spread(model, scale=1e3)} | {spread(model_speedup, "{:.2f}")}x '
      f'| {spread([r["hidden_fraction"] for r in rs], "{:.0%}")} |'
    )
  co = rows['CoCoD-SGD+PS']
  return lines + [
    '',
    f'- CoCoD-SGD+PS epoch speedup over S-SGD without PS: {spread(co, "{:.2f}")}x (the model '
    f'column beside it; target: ahead, > 1): {_verdict(statistics.median(co) > 1.0)}',
  ]


def ranks_lines(ranks):
  """The multi-worker ranks' table and target: rows with medians and [min, max] over the runs,
  each speedup against the S-SGD run of the same repeat."""
  runs = ranks['runs']
  base = runs['ssgd']
  lines = [
    f'## Multi-worker ranks: 2 ranks x {ranks["workers_per_rank"]} workers, '
    f'{ranks["rate_kbit"] / 1000:.0f} Mbit/s ({len(base)} runs per row)',
    '',
    '| algorithm | r = Tc/Tp (S-SGD run) | ms / step | speedup vs S-SGD | Tp ms | local mean ms '
    '| Tc ms | hidden |',
    '|---|---|---|---|---|---|---|---|',
  ]
  speedups = {}
  for algo in bench_model.RANKS_ALGOS:
    rs = runs[algo]
    speedups[algo] = [b['step_time_s'] / r['step_time_s'] for b, r in zip(base, rs)]
    lines.append(
      f'| {bench_model.NAMES[algo]} '
      f'| {spread([b["Tc_s"] / b["Tp_s"] for b in base], "{:.2f}")} '
      f'| {spread([r["step_time_s"] for r in rs], scale=1e3)} '
      f'| {spread(speedups[algo], "{:.2f}")}x | {spread([r["Tp_s"] for r in rs], scale=1e3)} '
      f'| {spread([r.get("Tl_s") for r in rs], scale=1e3)} '
      f'| {spread([r["Tc_s"] for r in rs], scale=1e3)} '
      f'| {spread([r["hidden_fraction"] for r in rs], "{:.0%}")} |'
    )
  sp = speedups['cocod_sgd']
  ranks['target'] = (
    f'- 2 x {ranks["workers_per_rank"]}: CoCoD-SGD speedup over S-SGD per step = '
    f'{spread(sp, "{:.2f}")}x (target >= 1.6): {_verdict(statistics.median(sp) >= 1.6)}'
  )
  return lines + ['', ranks['target']]


def provenance_lines(report):
  """Where each section was measured: one line when every section shares commit, tree, command
  and machine, else one line a section (`--sections=` measures some again and keeps the
  others)."""
  made = report.get('provenance') or {}
  if not made:
    return ['Measured: no provenance recorded (a bench.json from before it was kept).']

  def where(p):
    tree = {True: 'dirty', False: 'clean'}.get(p.get('dirty'), 'unknown')
    return f'commit {p["commit"][:12]} (tree {tree}), `{p["command"]}`, {p["machine"]}'

  sections = [s for s in SECTIONS if s in made]
  wheres = {where(made[s]) for s in sections}
  if len(wheres) == 1:
    dates = sorted(made[s]['date'] for s in sections)
    span = dates[0] if dates[0] == dates[-1] else f'{dates[0]} to {dates[-1]}'
    return [f'Measured at {wheres.pop()}; {span}.']
  return ['Measured section by section (the sections mix commits or machines):', ''] + [
    f'- {s}: {where(made[s])}; {made[s]["date"]}' for s in sections
  ]


def render(report):
  """bench.md's text from a report (what `measure` returns, or bench.json)."""
  lines = ['# Benchmark (median [min, max] over the runs)', '']
  lines += provenance_lines(report) + ['']
  if 'overhead' in report:
    lines += overhead_lines(report['overhead']) + ['']
  if 'comm' in report:
    lines += comm_lines(report['comm']) + ['']
  if 'checkpoint' in report:
    lines += checkpoint_lines(report['checkpoint']) + ['']
  if 'ratios' in report:
    lines += overlap_lines(report) + ['']
  if 'streamed' in report:
    lines += streamed_lines(report['streamed'], report['calibration']) + ['']
  if 'hetero' in report:
    lines += hetero_lines(report['hetero'], report['calibration']) + ['']
  if 'ranks' in report:
    lines += ranks_lines(report['ranks']) + ['']
  return '\n'.join(lines)

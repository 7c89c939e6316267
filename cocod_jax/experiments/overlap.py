"""`python -m cocod_jax.experiments.overlap`: CoCoD-SGD's overlap options (the shorter delay, the
eager update, the anchor) against S-SGD, Local-SGD and CoCoD-SGD (issue 30; configs/overlap.py;
registered in docs/paper-cpu/PREREGISTRATION.md, amendment 3).

    python -m cocod_jax.experiments.overlap --parallel=2 --workdir=runs/overlap

Two stages, each on the one-host cluster of 16 workers at the cpu scale:

1. The pilot: the two hard columns, seeds 100-102, S-SGD, CoCoD-SGD and every setting of every
   option. Each option's best setting is the one with the highest mean difference to S-SGD over
   the two columns (a setting with a diverged run or no verdict in a column is out).
2. The full runs: the four columns (the hard ones first), seeds 0-4 (none of the pilot's),
   S-SGD, Local-SGD, CoCoD-SGD and each option's chosen setting.

Every difference is the registered paired procedure of the tables (by seed and test example,
90% interval, margin 0.5 point). Beside it, the accuracy part of the issue's target: an option's
final accuracy minus Local-SGD's, paired by seed, at least -0.25 point in every column.

Writes overlap.md, .json (with the commits the runs were made at) and .png into --workdir.
"""

import statistics
import sys

from absl import app

from cocod_jax.config import flags as cocod_flags
from cocod_jax.experiments import accuracy
from cocod_jax.experiments import artefacts
from cocod_jax.experiments import common
from cocod_jax.experiments import corrections
from cocod_jax.experiments import correctness
from cocod_jax.experiments import timing
from configs import overlap as config
from configs import scales

FLAGS = common.FLAGS
TARGET_VS_LOCAL = -0.25  # The accuracy target: no worse than Local-SGD's - 0.25 point.
SPEEDUP_R1, HIDDEN_R1 = 1.6, 0.9  # Item 5 at r ~ 1: time to target 1.6x S-SGD's, 90% hidden.
SPEEDUP_R3 = 2.5  # At r ~ 3: 2.5x.


def stage_rows(points, tasks, variants) -> dict:
  """{task: {variant: row}} of the paired verdicts against S-SGD (`corrections.accuracy_rows`)."""
  out = {}
  for task in tasks:
    rows, _ = corrections.accuracy_rows(points, task, variants)
    out[task] = {r['variant']: r for r in rows}
  return out


def choose(pilot: dict) -> dict:
  """{option: its best setting}: the highest mean difference to S-SGD over the hard columns; a
  setting with no difference in some column (diverged, no pairs) is out; None where none is in."""
  chosen = {}
  for option in config.OPTIONS:
    scored = {}
    for v in config.settings(option):
      diffs = [pilot.get(t, {}).get(v, {}).get('difference') for t in config.HARD]
      if all(d is not None for d in diffs):
        scored[v] = statistics.mean(diffs)
    chosen[option] = max(scored, key=scored.get) if scored else None
  return chosen


def versus_local(points, task: str, variant: str) -> dict | None:
  """The variant's final accuracy minus Local-SGD's, paired by seed (mean over the seeds both
  finished), and whether it meets TARGET_VS_LOCAL; None without a pair."""
  mine = accuracy.by_seed(points, variant, task)
  local = accuracy.by_seed(points, 'local_sgd', task)
  seeds = sorted(set(mine) & set(local))
  if not seeds:
    return None
  gaps = [accuracy.final(mine[s]) - accuracy.final(local[s]) for s in seeds]
  gap = statistics.mean(gaps)
  return {'seeds': seeds, 'gap': gap, 'meets': gap >= TARGET_VS_LOCAL}


def _by_variant(points) -> dict:
  """{variant: {seed: results}} of the finished points."""
  out = {}
  for p in points:
    if p.results and p.results.get('epochs'):
      out.setdefault(p.arg['variant'], {})[p.arg['seed']] = p.results
  return out


def _paired_final_gap(runs: dict, base: dict) -> float | None:
  """Mean over the seeds both have of the final accuracy minus S-SGD's, in points."""
  seeds = sorted(set(runs) & set(base))
  if not seeds:
    return None
  return statistics.mean(
    100 * (correctness.reported_accuracy(runs[s]) - correctness.reported_accuracy(base[s]))
    for s in seeds
  )  # fmt: skip


def timing_rows(points, target, accuracy_rows: dict, variants) -> list[dict]:
  """One row per timed variant of one column on one link: `timing.timing_summary` against S-SGD
  (time to `target`, epoch speedup, r, hidden), the tau delay=auto chose, and the accuracy the
  frontier draws: the full runs' difference to S-SGD with its interval (`accuracy_rows`), or for
  a variant without full runs its timing runs' mean paired difference (no interval)."""
  by_variant = _by_variant(points)
  base = by_variant.get(config.REFERENCE, {})
  rows = []
  for v in variants:
    runs = by_variant.get(v)
    if not runs:
      continue
    taus = sorted({(r.get('period_auto') or {}).get('delay') for r in runs.values()} - {None})
    acc = accuracy_rows.get(v) or {}
    if v == config.REFERENCE:
      accuracy_of = {'difference': 0.0, 'lo': 0.0, 'hi': 0.0, 'source': 'reference'}
    elif acc.get('difference') is not None:
      accuracy_of = {k: acc[k] for k in ('difference', 'lo', 'hi', 'verdict')}
      accuracy_of['source'] = f'full runs ({len(acc.get("pairs", []))} seeds)'
    else:
      accuracy_of = {'difference': _paired_final_gap(runs, base), 'lo': None, 'hi': None,
                     'source': f'its {len(runs)} timing runs (no interval)'}  # fmt: skip
    summary = timing.timing_summary(runs, base, target)
    model = timing.model_speedup(runs, base)
    rows.append({'variant': v, **summary, 'tau': taus, 'accuracy': accuracy_of, 'model': model,
                 'of_model': summary['epoch_speedup'] / model if model and summary['epoch_speedup']
                 else None})  # fmt: skip
  return rows


def frontier_x(row) -> tuple[float | None, bool]:
  """The frontier's x of a timing row: (time-to-target speedup, True) where every seed reached
  the target, else (the epoch speedup, False)."""
  if row.get('speedup') is not None:
    return row['speedup'], True
  return row.get('epoch_speedup'), False


def pareto(rows) -> list[str]:
  """The variants no other row beats on both axes (speedup and accuracy; at least as good on
  both and better on one), of the rows with an interval."""
  pts = {}
  for r in rows:
    x, _ = frontier_x(r)
    if x is not None and r['accuracy'].get('lo') is not None:
      pts[r['variant']] = (x, r['accuracy']['difference'])
  return [
    v for v, (x, y) in pts.items()
    if not any(x2 >= x and y2 >= y and (x2, y2) != (x, y) for x2, y2 in pts.values())
  ]  # fmt: skip


def target_check(rows, vs_local: dict) -> dict:
  """Issue 30's item-5 target on one link: the speedup it asks (1.6x where S-SGD's measured r is
  below 2, r ~ 1, with at least 90% hidden; 2.5x otherwise, r ~ 3), and per option whether it
  has the accuracy condition against Local-SGD in every column and the speedup with every seed."""
  base = next((r for r in rows if r['variant'] == config.REFERENCE), None)
  r_link = base.get('r') if base else None
  low = r_link is not None and r_link < 2
  need, need_hidden = (SPEEDUP_R1, HIDDEN_R1) if low else (SPEEDUP_R3, None)
  out = []
  for r in rows:
    if r['variant'] in (config.REFERENCE, 'local_sgd'):
      continue
    checks = [vs_local.get(t, {}).get(r['variant']) for t in config.TASKS]
    accurate = None if any(c is None for c in checks) else all(c['meets'] for c in checks)
    span = r.get('speedup_range')
    fast = bool(span and r['reached'] == r['runs'] and span[0] >= need)
    hidden = need_hidden is None or (r.get('hidden') is not None and r['hidden'] >= need_hidden)
    out.append({'variant': r['variant'], 'accuracy': accurate, 'speedup_range': span,
                'reached': [r['reached'], r['runs']],
                'fast': fast, 'hidden': r.get('hidden'), 'hidden_ok': hidden,
                'meets': bool(accurate and fast and hidden)})  # fmt: skip
  return {'r': r_link, 'speedup': need, 'hidden': need_hidden, 'rows': out,
          'met_by': [o['variant'] for o in out if o['meets']]}  # fmt: skip


def reach_counts(points, task: str, variants, target: float | None) -> dict:
  """{variant: [seeds whose final accuracy reaches `target`, seeds]} of the full runs."""
  out = {}
  for v in variants:
    runs = accuracy.by_seed(points, v, task)
    if runs and target is not None:
      out[v] = [sum(accuracy.final(p) >= target for p in runs.values()), len(runs)]
  return out


def _cell(row) -> str:
  if not row or row.get('difference') is None:
    verdict = (row or {}).get('verdict', 'not run')
    return verdict if verdict != 'no pairs' else 'not run'
  return f'{row["difference"]:+.2f} [{row["lo"]:+.2f}, {row["hi"]:+.2f}] {row["verdict"]}'


def _table(rows: dict, tasks, variants, reference_finals: dict) -> list[str]:
  head = ' | '.join(scales.task_title(t, 'cpu') for t in tasks)
  lines = [f'| variant | {head} |', '|---|' + '---|' * len(tasks)]
  ref = ' | '.join(
    f'{statistics.mean(reference_finals[t]):.2f}% ({len(reference_finals[t])} seeds)'
    if reference_finals.get(t) else 'not run' for t in tasks
  )  # fmt: skip
  lines.append(f'| ssgd (final accuracy) | {ref} |')
  for v in variants:
    if v != config.REFERENCE:
      lines.append(f'| {v} | ' + ' | '.join(_cell(rows.get(t, {}).get(v)) for t in tasks) + ' |')
  return lines


def render(data: dict) -> str:
  pilot, full, chosen = data['pilot'], data['full'], data['chosen']
  lines = [
    f"# CoCoD-SGD's overlap options against S-SGD ({data['scale']} scale, 16 workers, one-host "
    'cluster)',
    '',
    '![overlap](overlap.png)',
    '',
    common.provenance_line(data),
    '',
    "Each cell: final accuracy minus S-SGD's, in points, paired by seed and test example (by "
    'seed where the final models are not on disk), its 90% interval and the registered verdict '
    "(margin 0.5 point). 'not run': no run of that cell is on disk. Registered before the runs: "
    'docs/paper-cpu/PREREGISTRATION.md, amendment 3.',
    '',
    f'## Pilot: the hard columns, seeds {", ".join(map(str, config.PILOT_SEEDS))}, every setting',
    '',
    *_table(pilot['rows'], config.HARD, config.stage_variants('pilot', []), pilot['ssgd']),
    '',
    'Chosen (the highest mean difference over the two columns): '
    + ', '.join(f'{o}: {v or "none"}' for o, v in chosen.items())
    + '. Settings given: '
    + ', '.join(f'{o} {len(config.settings(o))}' for o in config.OPTIONS)
    + '.',
    '',
    f'## Full runs: seeds {", ".join(map(str, config.FULL_SEEDS))}, the four columns',
    '',
    *_table(full['rows'], config.TASKS, full['variants'], full['ssgd']),
    '',
    f"Against Local-SGD (the issue's accuracy target: final accuracy minus Local-SGD's, paired "
    f'by seed, at least {TARGET_VS_LOCAL:+.2f} in every column):',
    '',
    '| variant | ' + ' | '.join(scales.task_title(t, 'cpu') for t in config.TASKS) + ' | meets |',
    '|---|' + '---|' * (len(config.TASKS) + 1),
  ]
  for v in full['variants']:
    if v in (config.REFERENCE, 'local_sgd'):
      continue
    checks = [full['vs_local'].get(t, {}).get(v) for t in config.TASKS]
    cells = [f'{c["gap"]:+.2f} ({len(c["seeds"])} seeds)' if c else 'not run' for c in checks]
    meets = 'yes' if all(c and c['meets'] for c in checks) else (
      'no' if any(c and not c['meets'] for c in checks) else 'undecided')  # fmt: skip
    lines.append(f'| {v} | ' + ' | '.join(cells) + f' | {meets} |')
  lines += _render_reach(full)
  if data.get('timing'):
    lines += ['', '## Timing on the shaped link and the frontier', '',
              '![frontier](overlap_frontier.png)']  # fmt: skip
  for link, by_task in data.get('timing', {}).items():
    for task, part in by_task.items():
      lines += _render_timing(link, task, part)
  lines += _render_mixed(data.get('mixed') or {})
  lines += ['', data['not_run_line']]
  return '\n'.join(lines) + '\n'


def _f(v, f='{:.2f}') -> str:
  return '-' if v is None else f.format(v)


def _render_reach(full: dict) -> list[str]:
  if not any(full.get('reach', {}).values()):
    return []
  lines = [
    '',
    "Seeds of the full runs whose final accuracy reaches the column's target (S-SGD's mean - "
    '0.5 point; the timing runs time the large CNN column only):',
    '',
    '| variant | ' + ' | '.join(scales.task_title(t, 'cpu') for t in config.TASKS) + ' |',
    '|---|' + '---|' * len(config.TASKS),
  ]
  for v in full['variants']:
    cells = [full['reach'].get(t, {}).get(v) for t in config.TASKS]
    lines.append(f'| {v} | ' + ' | '.join(f'{c[0]} of {c[1]}' if c else '-' for c in cells) + ' |')
  return lines


def _render_timing(link: str, task: str, part: dict) -> list[str]:
  if not part['rows']:
    return ['', f'### {link}, {scales.task_title(task, "cpu")}: not run']
  check = part['check']
  r_class = 'r ~ 1' if check['speedup'] == SPEEDUP_R1 else 'r ~ 3'  # From S-SGD's measured r.
  lines = [
    '',
    f'### {link} ({r_class}; S-SGD measured r = {_f(check["r"])}), '
    f'{scales.task_title(task, "cpu")}',
    '',
    f'Real MPI, 2 ranks of 8 workers, one run a seed. Target: {_f(part["target"])}%. Times and '
    'ratios: the median over the seeds and, in brackets, the lowest and highest; a speedup is the '
    "ratio to S-SGD's run of the same seed. Accuracy: the difference to S-SGD the frontier draws "
    '(the full runs, 90% interval; delay_auto: its timing runs, no interval). Model: the time '
    "model's epoch speedup at the Tp and Tc of S-SGD's run of the other seed (with a delay tau < "
    'k the round is (k - tau) Tp + max(tau Tp, Tc)).',
    '',
    '| variant | tau | accuracy - S-SGD | s / epoch | epoch speedup | model | time to target (s) | '
    'speedup to target | hidden | r |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ]
  for r in part['rows']:
    acc = r['accuracy']
    interval = f' [{acc["lo"]:+.2f}, {acc["hi"]:+.2f}]' if acc.get('lo') is not None else ''
    accuracy_text = '-' if acc.get('difference') is None else f'{acc["difference"]:+.2f}{interval}'
    reached = (
      timing.spread(r['time_s'], r['time_range'], '{:.1f}')
      if r['time_s'] is not None
      else f'{r["reached"]} of {r["runs"]} reached'
    )
    lines.append(
      f'| {r["variant"]} | {", ".join(map(str, r["tau"])) or "-"} | {accuracy_text} '
      f'| {timing.spread(r["epoch_s"], r["epoch_range"], "{:.3f}")} '
      f'| {timing.spread(r["epoch_speedup"], r["epoch_speedup_range"], "{:.2f}x")} '
      f'| {_f(r.get("model"), "{:.2f}x")} '
      f'| {reached} | {timing.spread(r["speedup"], r["speedup_range"], "{:.2f}x")} '
      f'| {_f(r["hidden"], "{:.0%}")} | {_f(r["r"])} |'
    )
  need = f'a time-to-target speedup of at least {check["speedup"]}x with both seeds'
  if check['hidden'] is not None:
    need += f', at least {check["hidden"]:.0%} hidden'
  verdicts = []
  for o in check['rows']:
    why = []
    if o['accuracy'] is not True:
      why.append('accuracy target not met' if o['accuracy'] is False else 'accuracy not measured')
    if not o['fast']:
      span, (reached, runs) = o['speedup_range'], o['reached']
      why.append(f'speedup {_f(span[0], "{:.2f}x")}-{_f(span[1], "{:.2f}x")}' if reached == runs
                 else f'target reached by {reached} of {runs} seeds')  # fmt: skip
    if not o['hidden_ok']:
      why.append(f'{_f(o["hidden"], "{:.1%}")} hidden')
    verdict = 'meets' if o['meets'] else 'no (' + '; '.join(why) + ')'
    verdicts.append(f'{o["variant"]}: {verdict}')
  lines += [
    '',
    f'Pareto front (no other point both faster and more accurate): {", ".join(part["pareto"])}.',
    '',
    f"Issue 30's target on this link ({need}, and the accuracy target against Local-SGD in every "
    f'column): ' + '; '.join(verdicts) + '.',
  ]
  return lines


def _render_mixed(mixed: dict) -> list[str]:
  ran = [r for rows in (mixed or {}).get('rows', {}).values() for r in rows.values()]
  if not any(r.get('difference') is not None for r in ran):
    return []
  lines = [
    '',
    "## Table 2's mixed cluster (8 of 16 workers at half speed), seeds "
    + ', '.join(map(str, mixed['seeds'])),
    '',
    *_table(mixed['rows'], config.TASKS, list(config.MIXED), mixed['ssgd']),
  ]
  for task, part in mixed.get('timing', {}).items():
    lines += [
      '',
      f'Timing on {mixed["link"]} (emulated speeds, real MPI, 2 ranks of 8 workers), '
      f'{scales.task_title(task, "cpu")}, target {_f(part["target"])}%:',
      '',
      '| variant | s / epoch | epoch speedup | time to target (s) | speedup to target | hidden |',
      '|---|---|---|---|---|---|',
    ]
    for r in part['rows']:
      reached = (timing.spread(r['time_s'], r['time_range'], '{:.1f}') if r['time_s'] is not None
                 else f'{r["reached"]} of {r["runs"]} reached')  # fmt: skip
      lines.append(
        f'| {r["variant"]} | {timing.spread(r["epoch_s"], r["epoch_range"], "{:.3f}")} '
        f'| {timing.spread(r["epoch_speedup"], r["epoch_speedup_range"], "{:.2f}x")} '
        f'| {reached} | {timing.spread(r["speedup"], r["speedup_range"], "{:.2f}x")} '
        f'| {_f(r["hidden"], "{:.0%}")} |'
      )
  return lines


def plot_frontier(data: dict):
  """One panel per link: each timed variant's accuracy difference to S-SGD (90% interval)
  against its time-to-target speedup (hollow: the epoch speedup, a seed missed the target), the
  Pareto front joined."""
  plt = common._pyplot()  # pylint: disable=protected-access
  parts = [(link, task, part) for link, by_task in data['timing'].items()
           for task, part in by_task.items()]  # fmt: skip
  fig, axes = plt.subplots(1, len(parts), figsize=(6 * len(parts), 4.8), squeeze=False)
  for ax, (link, task, part) in zip(axes[0], parts):
    front = []
    for i, r in enumerate(part['rows']):
      x, reached = frontier_x(r)
      acc = r['accuracy']
      if x is None or acc.get('difference') is None:
        continue
      y = acc['difference']
      err = None if acc.get('lo') is None else [[y - acc['lo']], [acc['hi'] - y]]
      fmt = 'o' if acc.get('lo') is not None else 's'
      face = f'C{i}' if reached else 'none'
      ax.errorbar(x, y, yerr=err, fmt=fmt, capsize=3, color=f'C{i}', mfc=face, label=r['variant'])
      if r['variant'] in part['pareto']:
        front.append((x, y))
    if front:
      front.sort()
      ax.plot(*zip(*front), color='black', lw=0.8, ls='--', label='Pareto front')
    ax.axhspan(-accuracy.MARGIN, accuracy.MARGIN, color='green', alpha=0.08)
    ax.axhline(0, color='gray', lw=0.8)
    r_link = part['check']['r']
    ax.set_title(f'{link} (S-SGD r = {_f(r_link)}), {scales.task_title(task, "cpu")}', fontsize=8)
    ax.set_xlabel('speedup over S-SGD to the target (hollow: epoch speedup, target missed)')
    ax.set_ylabel('final accuracy - S-SGD (points), 90% interval')
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[1]:
      ax.legend(fontsize=7)
  fig.suptitle("CoCoD-SGD's overlap options: accuracy against speed, per link")
  fig.tight_layout()
  return common.save_figure(fig, 'overlap_frontier')


def plot(data: dict):
  """A panel per column: every variant's difference to S-SGD with its 90% interval (pilot
  hollow, full runs filled), the equivalence margin shaded."""
  plt = common._pyplot()  # pylint: disable=protected-access
  fig, axes = plt.subplots(2, 2, figsize=(11, 8), squeeze=False)
  variants = [v for v in config.VARIANTS if v != config.REFERENCE]
  for ax, task in zip(axes.ravel(), config.TASKS):
    for stage, fill, dy, color in (('pilot', 'none', 0.15, 'C1'), ('full', 'C0', -0.15, 'C0')):
      rows = data[stage]['rows'].get(task, {})
      label = f'{stage} runs'
      for y, v in enumerate(variants):
        r = rows.get(v)
        if not r or r.get('difference') is None:
          continue
        d = r['difference']
        ax.errorbar(d, y + dy, xerr=[[d - r['lo']], [r['hi'] - d]], fmt='o', capsize=2,
                    color=color, mfc=fill, label=label)  # fmt: skip
        label = None
    ax.axvspan(-accuracy.MARGIN, accuracy.MARGIN, color='green', alpha=0.1)
    ax.axvline(0, color='gray', lw=0.8)
    ax.set_yticks(list(range(len(variants))), variants, fontsize=7)
    ax.set_title(scales.task_title(task, 'cpu'), fontsize=9)
    ax.set_xlabel('final accuracy - S-SGD (points), 90% interval')
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[1]:
      ax.legend(fontsize=7)
  fig.suptitle("CoCoD-SGD's overlap options against S-SGD (pilot hollow, full runs filled)")
  fig.tight_layout()
  return common.save_figure(fig, 'overlap')


def _target(finals) -> float | None:
  return statistics.mean(finals) - accuracy.MARGIN if finals else None


def assemble_timing(timed: dict, full: dict) -> dict:
  """{link: {task: timing points}} -> {link: {task: target, rows, the Pareto front and the
  item-5 check}}, each variant's accuracy from the full runs (`full`: the artefact's part)."""
  out = {}
  for link, by_task in timed.items():
    out[link] = {}
    for task, points in by_task.items():
      target = _target(full['ssgd'].get(task))
      rows = timing_rows(points, target, full['rows'].get(task, {}), config.TIMED)
      out[link][task] = {
        'target': target,
        'rows': rows,
        'pareto': pareto(rows),
        'check': target_check(rows, full['vs_local']),
      }
  return out


def assemble_mixed(points, timed_points, link: str | None) -> dict:
  """Table 2's cluster: each MIXED variant's verdict against S-SGD per column, and the timing
  rows on `link` of the column timed."""
  rows = stage_rows(points, config.TASKS, list(config.MIXED))
  finals = _finals(points, config.TASKS)
  timing = {}
  for task in sorted({p.arg['task'] for p in timed_points}):
    mine = [p for p in timed_points if p.arg['task'] == task]
    target = _target(finals.get(task))
    timing[task] = {'target': target, 'rows': timing_rows(mine, target, rows.get(task, {}),
                                                          list(config.MIXED))}  # fmt: skip
  return {'rows': rows, 'ssgd': finals, 'seeds': list(config.MIXED_SEEDS), 'link': link,
          'timing': timing}  # fmt: skip


def _finals(points, tasks) -> dict:
  return {t: [accuracy.final(p) for p in accuracy.by_seed(points, 'ssgd', t).values()]
          for t in tasks}  # fmt: skip


def assemble(pilot_points, pilot_rows: dict, full_points, chosen: dict, timed=None, mixed=None):
  """The artefact's data from the two stages' points (`corrections.as_rows` applied), the
  pilot's rows (`stage_rows`, as the choice read them) and the choice; `timed` ({link: {task:
  points}}) and `mixed` ((accuracy points, timing points, link)) when they ran."""
  full_variants = config.stage_variants('full', [v for v in chosen.values() if v])
  vs_local = {
    t: {v: versus_local(full_points, t, v) for v in full_variants if v not in ('ssgd', 'local_sgd')}
    for t in config.TASKS
  }
  timed, mixed = timed or {}, mixed or ([], [], None)
  timed_points = [p for by_task in timed.values() for pts in by_task.values() for p in pts]
  everything = pilot_points + full_points + timed_points + mixed[0] + mixed[1]
  missing, not_run = common.not_run(
    everything, lambda p: f'{p.arg["variant"]} {p.arg["task"]}{_where(p)}'
  )
  full = {
    'rows': stage_rows(full_points, config.TASKS, full_variants),
    'ssgd': _finals(full_points, config.TASKS),
    'variants': full_variants,
    'seeds': list(config.FULL_SEEDS),
    'vs_local': vs_local,
  }
  full['reach'] = {
    t: reach_counts(full_points, t, full_variants, _target(full['ssgd'].get(t)))
    for t in config.TASKS
  }
  left_out = [
    what
    for what, there in (
      ('the timing runs on the shaped link and the frontier', timed_points),
      ('the mixed cluster', mixed[0] + mixed[1]),
    )
    if not there
  ]
  return {
    'pilot': {
      'rows': pilot_rows,
      'ssgd': _finals(pilot_points, config.HARD),
      'seeds': list(config.PILOT_SEEDS),
    },
    'chosen': chosen,
    'full': full,
    'timing': assemble_timing(timed, full),
    'mixed': assemble_mixed(*mixed),
    'not_run': missing,
    'not_run_line': not_run
    + (f' Not part of this artefact: {" and ".join(left_out)}.' if left_out else ''),
    **common.provenance(everything, 'one_host'),
  }


def _where(p) -> str:
  if p.arg.get('mixed') == 'true':
    return ' (mixed cluster, timing)' if p.arg.get('timing') == 'true' else ' (mixed cluster)'
  return ' (timing)' if p.arg.get('timing') == 'true' else ''


def make() -> int:
  """Runs (or reads) the pilot, chooses, runs (or reads) the full runs, writes the artefact."""
  pilot_points = common.run(config, f'stage=pilot,scale={FLAGS.scale}')
  if pilot_points is None:  # A dry run or a Slurm submission: the runner said what it would do.
    return 0
  pilot_points = corrections.as_rows(pilot_points)
  pilot_rows = stage_rows(pilot_points, config.HARD, config.stage_variants('pilot', []))
  chosen = choose(pilot_rows)
  picked = ';'.join(v for v in chosen.values() if v)
  full_points = common.run(config, f'stage=full,scale={FLAGS.scale},chosen={picked}')
  if full_points is None:
    return 0
  timed = {}
  for link in FLAGS.timing_links:
    timed[link] = {}
    for task in FLAGS.timing_tasks:
      arg = f'stage=timing,task={task},seeds={FLAGS.timing_seeds},scale={FLAGS.scale}'
      run = common.run(config, arg, timing=True, link=link, check_empty=False)
      if run is None:
        return 0
      timed[link][task] = corrections.as_rows(run)
  mixed = None
  if FLAGS.timing_links:  # The mixed cluster comes after the timing runs (amendment 5).
    accuracy_points = common.run(config, f'stage=mixed,scale={FLAGS.scale}', check_empty=False)
    arg = f'stage=mixed_timing,task={FLAGS.timing_tasks[0]},seeds={FLAGS.timing_seeds}'
    timed_points = common.run(config, f'{arg},scale={FLAGS.scale}', timing=True,
                              check_empty=False)  # fmt: skip
    if accuracy_points is None or timed_points is None:
      return 0
    mixed = (corrections.as_rows(accuracy_points), corrections.as_rows(timed_points),
             FLAGS.link_rate)  # fmt: skip
  data = assemble(pilot_points, pilot_rows, corrections.as_rows(full_points), chosen, timed, mixed)
  text = render(data)
  print(text)
  plot(data)
  if data['timing']:
    plot_frontier(data)
  common.write('overlap', text, data)
  return 0 if not data['not_run'] else 1


def main():
  cocod_flags.define_experiment_flags()

  def run(argv):
    del argv
    with artefacts.registered('overlap'):  # The registered timing flags (configs/scales.py).
      sys.exit(make())

  app.run(run, flags_parser=lambda a: cocod_flags.parse(a, 'overlap'))


if __name__ == '__main__':
  main()

"""overlap.md from the overlap experiment's data (`overlap_analysis.assemble`): the pilot and
full-run tables against S-SGD, the check against Local-SGD, the seeds at the target, each link's
timing table with the frontier and item-5 verdicts, and Table 2's mixed cluster."""

import statistics

from cocod_jax.experiments import common
from cocod_jax.experiments import overlap_analysis as analysis
from cocod_jax.experiments import timing
from configs import overlap as config
from configs import scales


def cell(row) -> str:
  """A verdict cell: difference [90% interval] verdict, or why there is none."""
  if not row or row.get('difference') is None:
    verdict = (row or {}).get('verdict', 'not run')
    return verdict if verdict != 'no pairs' else 'not run'
  return f'{row["difference"]:+.2f} [{row["lo"]:+.2f}, {row["hi"]:+.2f}] {row["verdict"]}'


def table(rows: dict, tasks, variants, reference_finals: dict) -> list[str]:
  """A table of verdicts against S-SGD: a row per variant of `variants` (S-SGD's own row its mean
  final accuracy, `reference_finals`), a column per task of `tasks`."""
  head = ' | '.join(scales.task_title(t, 'cpu') for t in tasks)
  lines = [f'| variant | {head} |', '|---|' + '---|' * len(tasks)]
  ref = ' | '.join(
    f'{statistics.mean(reference_finals[t]):.2f}% ({len(reference_finals[t])} seeds)'
    if reference_finals.get(t) else 'not run' for t in tasks
  )  # fmt: skip
  lines.append(f'| ssgd (final accuracy) | {ref} |')
  for v in variants:
    if v != config.REFERENCE:
      lines.append(f'| {v} | ' + ' | '.join(cell(rows.get(t, {}).get(v)) for t in tasks) + ' |')
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
    *table(pilot['rows'], config.HARD, config.stage_variants('pilot', []), pilot['ssgd']),
    '',
    'Chosen (the highest mean difference over the two columns): '
    + ', '.join(f'{o}: {v or "none"}' for o, v in chosen.items())
    + '. Settings given: '
    + ', '.join(f'{o} {len(config.settings(o))}' for o in config.OPTIONS)
    + '.',
    '',
    f'## Full runs: seeds {", ".join(map(str, config.FULL_SEEDS))}, the four columns',
    '',
    *table(full['rows'], config.TASKS, full['variants'], full['ssgd']),
    '',
    f"Against Local-SGD (the issue's accuracy target: final accuracy minus Local-SGD's, paired "
    f'by seed, at least {analysis.TARGET_VS_LOCAL:+.2f} in every column):',
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
  lines += render_mixed(data.get('mixed') or {})
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


def timing_cells(row) -> tuple[str, str]:
  """A timing row's accuracy cell (its difference to S-SGD, with the 90% interval where it has
  one) and time-to-target cell (the time, or how many of its runs reached the target)."""
  acc = row['accuracy']
  interval = f' [{acc["lo"]:+.2f}, {acc["hi"]:+.2f}]' if acc.get('lo') is not None else ''
  accuracy_text = '-' if acc.get('difference') is None else f'{acc["difference"]:+.2f}{interval}'
  reached = (
    timing.spread(row['time_s'], row['time_range'], '{:.1f}')
    if row['time_s'] is not None
    else f'{row["reached"]} of {row["runs"]} reached'
  )
  return accuracy_text, reached


def _render_timing(link: str, task: str, part: dict) -> list[str]:
  if not part['rows']:
    return ['', f'### {link}, {scales.task_title(task, "cpu")}: not run']
  check = part['check']
  r_class = (
    'r ~ 1' if check['speedup'] == analysis.SPEEDUP_R1 else 'r ~ 3'
  )  # From S-SGD's measured r.
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
    accuracy_text, reached = timing_cells(r)
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


def render_mixed(mixed: dict, tasks=config.TASKS, variants=tuple(config.MIXED)) -> list[str]:
  """Table 2's cluster (`overlap_analysis.assemble_mixed`): the verdicts of `variants` on `tasks`
  and the timing rows; nothing where no verdict is there."""
  ran = [r for rows in (mixed or {}).get('rows', {}).values() for r in rows.values()]
  if not any(r.get('difference') is not None for r in ran):
    return []
  lines = [
    '',
    "## Table 2's mixed cluster (8 of 16 workers at half speed), seeds "
    + ', '.join(map(str, mixed['seeds'])),
    '',
    *table(mixed['rows'], tasks, list(variants), mixed['ssgd']),
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

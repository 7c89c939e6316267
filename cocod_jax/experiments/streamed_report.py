"""streamed.md from the streamed experiment's data (`streamed_analysis.assemble`): targets (a)-(d)
with their numbers and verdicts, the 24- and 120-epoch verdicts against S-SGD and differences to
Local-SGD, the 120-epoch reruns against the committed long_schedule runs, each link's timing rows,
Table 2's mixed cluster, the runs' commits and machines, and the runs not made. Whatever stage has
no runs renders as not run."""

import collections

from cocod_jax.experiments import common
from cocod_jax.experiments import overlap_report
from cocod_jax.experiments import streamed_targets as targets
from cocod_jax.experiments import timing
from configs import scales
from configs import streamed as config


def _f(v, f='{:.2f}') -> str:
  return '-' if v is None else f.format(v)


def _title(task: str) -> str:
  return scales.task_title(task, 'cpu')


def _seeds(seeds) -> str:
  return ', '.join(map(str, seeds)) or 'none'


def render(data: dict) -> str:
  acc, long = data['accuracy'], data['long']
  lines = [
    f'# Streamed CoCoD-SGD against S-SGD, Local-SGD and the whole-model delay ({data["scale"]} '
    'scale, 16 workers, one-host cluster)',
    '',
    '![streamed](streamed.png)',
    '',
    common.provenance_line(data),
    '',
    f'Streamed CoCoD-SGD: `algorithm.fragments` = P = {config.FRAGMENTS}, one fragment of the '
    'model a step, each corrected tau steps after its snapshot (docs/algorithms.md). Each verdict '
    "cell: final accuracy minus S-SGD's, in points, paired by seed and test example (by seed where "
    'the final models are not on disk), its 90% interval and the registered verdict (margin 0.5 '
    "point). 'not run': no run of that cell is on disk. Registered before the runs: "
    'docs/paper-cpu/PREREGISTRATION.md, amendment 6.',
    '',
    '## The registered targets',
    '',
    *_render_targets(data['targets']),
    '',
    f'## 24 epochs: seeds {_seeds(acc["seeds"])}',
    '',
    *overlap_report.table(acc['rows'], acc['tasks'], acc['variants'], acc['ssgd']),
    '',
    *_render_vs_local(acc),
    '',
    f"## 120 epochs (amendment 4's schedule): seeds {_seeds(long['seeds'])}",
    '',
    *overlap_report.table(long['rows'], long['tasks'], long['variants'], long['ssgd']),
    '',
    *_render_vs_local(long),
    '',
    *_render_committed(long.get('committed')),
  ]
  if data.get('timing'):
    lines += ['', '## Timing on the shaped links and the frontier']
    if has_timing_runs(data):
      lines += ['', '![frontier](streamed_frontier.png)']
  for link, by_task in data.get('timing', {}).items():
    for task, part in by_task.items():
      lines += _render_timing(link, task, part)
  lines += overlap_report.render_mixed(data.get('mixed') or {}, config.TASKS, tuple(config.MIXED))
  lines += ['', *_render_runs(data), '', data['not_run_line']]
  return '\n'.join(lines) + '\n'


def has_timing_runs(data: dict) -> bool:
  """Whether some timing row is there (the frontier is drawn from them)."""
  return any(part['rows'] for by_task in data.get('timing', {}).values()
             for part in by_task.values())  # fmt: skip


def _render_vs_local(part: dict) -> list[str]:
  tasks = part['tasks']
  lines = [
    "Against Local-SGD: final accuracy minus Local-SGD's, paired by seed (the mean over the seeds "
    f'both finished); target (a) asks at least {targets.TARGET_VS_LOCAL:+.2f} of streamed at 24 '
    'epochs.',
    '',
    '| variant | ' + ' | '.join(_title(t) for t in tasks) + ' |',
    '|---|' + '---|' * len(tasks),
  ]
  for v in part['variants']:
    if v in (config.REFERENCE, 'local_sgd'):
      continue
    checks = [part['vs_local'].get(t, {}).get(v) for t in tasks]
    cells = [f'{c["gap"]:+.2f} ({len(c["seeds"])} seeds)' if c else 'not run' for c in checks]
    lines.append(f'| {v} | ' + ' | '.join(cells) + ' |')
  return lines


def _render_targets(t: dict) -> list[str]:
  a, b, c, d = t['a'], t['b'], t['c'], t['d']
  gaps = '; '.join(f'{_title(k)} {_f(g, "{:+.2f}")}' for k, g in a['numbers'].items())
  lines = [
    f'- **(a)** At 24 epochs, streamed (P = {config.FRAGMENTS}, tau = 1) minus Local-SGD, paired '
    f'by seed, at least {targets.TARGET_VS_LOCAL:+.2f} point in every column: {gaps}. '
    f'**{a["verdict"]}**.',
  ]
  cols = []
  for k, col in b['columns'].items():
    local = {True: 'worse', False: 'not worse', None: 'no verdict'}[col['local_worse']]
    cols.append(f'{_title(k)} upper end {_f(col["streamed_hi"], "{:+.2f}")} (Local-SGD {local})')
  lines.append(
    '- **(b)** At 120 epochs, streamed not worse than S-SGD beyond the margin (its interval not '
    'entirely below -0.50) in any column where Local-SGD is not: ' + '; '.join(cols)
    + f'. **{b["verdict"]}**.'
  )  # fmt: skip
  links = []
  for link, x in c['links'].items():
    why = (f', tau {", ".join(map(str, x["tau_used"])) or "-"}, a fragment\'s Tc '
           f'{_f(x["tc_fragment_s"] and 1e3 * x["tc_fragment_s"], "{:.1f}")} ms against Tp '
           f'{_f(x["tp_s"] and 1e3 * x["tp_s"], "{:.1f}")} ms (its r '
           f'{_f(x["r_fragment"])})')  # fmt: skip
    links.append(f'{link} (r ~ {x["r"]}) {_f(x["hidden"], "{:.1%}")} hidden{why}')
  lines.append(
    f'- **(c)** At least {targets.HIDDEN:.0%} of the communication hidden (the median over '
    "streamed's runs) at r ~ 1 and r ~ 3: " + ('; '.join(links) or 'no timing run')
    + f'. **{c["verdict"]}**.'
  )  # fmt: skip
  links = []
  for link, x in d['links'].items():
    seeds = ', '.join(f'seed {s} {_f(v, "{:.2f}x")}' for s, v in x['speedups'].items())
    at = ', '.join(f'{_f(e, "{}")} (S-SGD {_f(x["ssgd_epochs_reached"].get(s), "{}")})'
                   for s, e in x['epochs_reached'].items())  # fmt: skip
    links.append(f'{link} (r ~ {x["r"]}, at least {x["need"]}x): {seeds}; epoch speedup '
                 f'{_f(x["epoch_speedup"], "{:.2f}x")}; epoch at the target {at}')  # fmt: skip
  need = ' and '.join(f'{v}x at r ~ {r}' for r, v in targets.SPEEDUP.items())
  lines.append(
    f"- **(d)** Time to target over S-SGD's run of the same seed at least {need}, with both "
    'seeds: ' + ('; '.join(links) or 'no timing run') + f'. **{d["verdict"]}**.'
  )  # fmt: skip
  return lines


def _render_committed(committed: dict | None) -> list[str]:
  if committed is None:
    return [
      'The reruns against the committed long_schedule runs: not compared (they are the cpu '
      "scale's; this artefact's scale differs, or docs/paper-cpu/long_schedule.json is absent)."
    ]
  lines = [
    '### The reruns against the committed long_schedule runs (docs/paper-cpu/long_schedule.json)',
    '',
    'Each rerun of S-SGD, Local-SGD and CoCoD-SGD beside the committed run of its cell and seed: '
    'the mean final accuracy over the seeds, how many seeds equal the committed run to the last '
    "digit it gives (the final accuracy to 0.001 point, and every epoch's test accuracy and "
    "training losses to 5 digits), and the largest difference of an epoch's test accuracy.",
    '',
    '| column | variant | rerun mean | committed mean | seeds equal | largest difference |',
    '|---|---|---|---|---|---|',
  ]
  equal, differ = [], []
  for t, by_variant in committed.items():
    for v, x in by_variant.items():
      if not x['seeds']:
        lines.append(f'| {_title(t)} | {v} | not run | {_f(x["committed_mean"], "{:.3f}")} | - '
                     '| - |')  # fmt: skip
        continue
      same = sum(s['final_equal'] and s['curves_equal'] for s in x['seeds'])
      gaps = [s['largest_difference'] for s in x['seeds'] if s['largest_difference'] is not None]
      lines.append(
        f'| {_title(t)} | {v} | {_f(x["mean"], "{:.3f}")} | {_f(x["committed_mean"], "{:.3f}")} '
        f'| {same} of {len(x["seeds"])} | {_f(max(gaps, default=None), "{:.3f}")} |'
      )
      (equal if x['equal'] else differ).append(f'{v} {_title(t)}')
  if not equal and not differ:
    return lines + ['', 'No rerun has finished yet.']
  lines += [
    '',
    'Equal to the last digit, every seed: ' + (', '.join(equal) or 'none') + '. Not equal (or '
    'not every seed rerun): ' + (', '.join(differ) or 'none') + '.',
  ]
  return lines


def _render_timing(link: str, task: str, part: dict) -> list[str]:
  if not part['rows']:
    return ['', f'### {link}, {_title(task)}: not run']
  check = part['check']
  lines = [
    '',
    f'### {link} (r ~ {_f(check["r_class"], "{}")}; S-SGD measured r = {_f(check["r"])}), '
    f'{_title(task)}',
    '',
    f"Real MPI, 2 ranks of 8 workers, one run a seed. Target: {_f(part['target'])}% (S-SGD's "
    'mean final accuracy at 24 epochs - 0.5 point). Times and ratios: the median over the seeds '
    "and, in brackets, the lowest and highest; a speedup is the ratio to S-SGD's run of the same "
    'seed; the time to target counts every second of training, the measurement of delay=auto '
    'included. Accuracy: the 24-epoch difference to S-SGD (90% interval; the auto variants: their '
    "timing runs, no interval). Tc: a fragment's allreduce (streamed runs).",
    '',
    '| variant | tau used | accuracy - S-SGD | s / epoch | epoch speedup | time to target (s) | '
    "speedup to target | hidden | r | a fragment's Tc (ms) |",
    '|---|---|---|---|---|---|---|---|---|---|',
  ]
  for r in part['rows']:
    accuracy_text, reached = overlap_report.timing_cells(r)
    tc = r.get('tc_fragment_s')
    lines.append(
      f'| {r["variant"]} | {", ".join(map(str, r.get("tau_used") or [])) or "-"} '
      f'| {accuracy_text} | {timing.spread(r["epoch_s"], r["epoch_range"], "{:.3f}")} '
      f'| {timing.spread(r["epoch_speedup"], r["epoch_speedup_range"], "{:.2f}x")} '
      f'| {reached} | {timing.spread(r["speedup"], r["speedup_range"], "{:.2f}x")} '
      f'| {_f(r["hidden"], "{:.0%}")} | {_f(r["r"])} | {_f(tc and 1e3 * tc, "{:.1f}")} |'
    )
  lines += ['', 'Pareto front (no other point both faster and more accurate): '
            f'{", ".join(part["pareto"]) or "none"}.']  # fmt: skip
  return lines


def _render_runs(data: dict) -> list[str]:
  machines = collections.Counter(r['machine'] or 'unknown' for r in data.get('runs', []))
  lines = [
    '## The runs',
    '',
    f"Made with `{data['command']}`; rendered on {data['hardware']}. Every run's stage, link, "
    "config argument, commit, dirty flag, command and machine: streamed.json's `runs`.",
    '',
    '| commit | dirty | runs |',
    '|---|---|---|',
  ]
  lines += [f'| {r["commit"]} | {"yes" if r["dirty"] else "no"} | {r["runs"]} |'
            for r in data.get('run_commits', [])] or ['| (none) | - | 0 |']  # fmt: skip
  lines += ['', 'Machines: ' + (', '.join(f'{m} ({n} runs)' for m, n in machines.items())
                                or 'none') + '.']  # fmt: skip
  return lines

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

from cocod_jax import flags as cocod_flags
from cocod_jax.experiments import accuracy
from cocod_jax.experiments import common
from cocod_jax.experiments import corrections
from configs import overlap as config
from configs import scales

FLAGS = common.FLAGS
TARGET_VS_LOCAL = -0.25  # The accuracy target: no worse than Local-SGD's - 0.25 point.


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
  lines += ['', data['not_run_line']]
  return '\n'.join(lines) + '\n'


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


def _finals(points, tasks) -> dict:
  return {t: [accuracy.final(p) for p in accuracy.by_seed(points, 'ssgd', t).values()]
          for t in tasks}  # fmt: skip


def assemble(pilot_points, pilot_rows: dict, full_points, chosen: dict) -> dict:
  """The artefact's data from the two stages' points (`corrections.as_rows` applied), the
  pilot's rows (`stage_rows`, as the choice read them) and the choice."""
  full_variants = config.stage_variants('full', [v for v in chosen.values() if v])
  vs_local = {
    t: {v: versus_local(full_points, t, v) for v in full_variants if v not in ('ssgd', 'local_sgd')}
    for t in config.TASKS
  }
  everything = pilot_points + full_points
  missing = [
    f'{p.arg["variant"]} {p.arg["task"]} seed {p.arg["seed"]}'
    for p in everything
    if p.state not in ('DONE', 'DIVERGED')
  ]
  not_run = (
    f'Not run ({len(missing)} of {len(everything)} registered runs): ' + ', '.join(missing) + '.'
    if missing
    else 'Every registered run finished.'
  )
  return {
    'pilot': {
      'rows': pilot_rows,
      'ssgd': _finals(pilot_points, config.HARD),
      'seeds': list(config.PILOT_SEEDS),
    },
    'chosen': chosen,
    'full': {
      'rows': stage_rows(full_points, config.TASKS, full_variants),
      'ssgd': _finals(full_points, config.TASKS),
      'variants': full_variants,
      'seeds': list(config.FULL_SEEDS),
      'vs_local': vs_local,
    },
    'not_run': missing,
    'not_run_line': not_run + ' Not part of this artefact: the timing runs on the shaped link, '
    'the frontier figure and the mixed cluster (issue 30, items 3-6).',
    **common.provenance(everything, 'one_host'),
  }


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
  data = assemble(pilot_points, pilot_rows, corrections.as_rows(full_points), chosen)
  text = render(data)
  print(text)
  plot(data)
  common.write('overlap', text, data)
  return 0 if not data['not_run'] else 1


def main():
  cocod_flags.define_experiment_flags()
  app.run(lambda argv: sys.exit(make()))


if __name__ == '__main__':
  main()

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

Writes overlap.md, .json (with the commits the runs were made at) and .png into --workdir;
`--replot` draws the .png files again from that overlap.json alone, running nothing (with
`--dry_run` it names them and writes nothing). The
analysis: overlap_analysis.py; overlap.md: overlap_report.py; the figures: overlap_plots.py.
"""

from cocod_jax.experiments import artefacts
from cocod_jax.experiments import common
from cocod_jax.experiments import corrections
from cocod_jax.experiments import overlap_analysis as analysis
from cocod_jax.experiments import overlap_plots
from cocod_jax.experiments import overlap_report
from configs import overlap as config

FLAGS = common.FLAGS


def make() -> int:
  """Runs (or reads) the pilot, chooses, runs (or reads) the full runs, writes the artefact."""
  pilot_points = common.run(config, f'stage=pilot,scale={FLAGS.scale}')
  if pilot_points is None:  # A dry run or a Slurm submission: the runner said what it would do.
    return 0
  pilot_points = corrections.as_rows(pilot_points)
  pilot_rows = analysis.stage_rows(pilot_points, config.HARD, config.stage_variants('pilot', []))
  chosen = analysis.choose(pilot_rows)
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
  full_points = corrections.as_rows(full_points)
  data = analysis.assemble(pilot_points, pilot_rows, full_points, chosen, timed, mixed)
  text = overlap_report.render(data)
  print(text)
  _plot(data)
  common.write('overlap', text, data)
  return 0 if not data['not_run'] else 1


# overlap.png and, with timing runs, overlap_frontier.png (artefacts.figures).
_plot = artefacts.figures(
  'overlap', overlap_plots.plot, overlap_plots.plot_frontier, lambda data: data['timing']
)


def main():
  artefacts.entry('overlap', make, _plot)


if __name__ == '__main__':
  main()

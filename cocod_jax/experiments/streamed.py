"""`python -m cocod_jax.experiments.streamed`: streamed CoCoD-SGD (`algorithm.fragments`) beside
the whole-model delay, S-SGD, Local-SGD and CoCoD-SGD (issue 40; configs/streamed.py; registered
in docs/paper-cpu/PREREGISTRATION.md, amendment 6).

    python -m cocod_jax.experiments.streamed --scale=cpu --parallel=2 --workdir=runs/streamed

The stages, in the registered order (a later one starts when the one before has finished):

1. accuracy: 24 epochs, the four Table 1 columns (the hard ones first), seeds 0-4, on the
   one-host cluster of 16 workers: streamed (P = 5, tau = 1 and 2), the whole-model delay 1-4,
   S-SGD, Local-SGD and CoCoD-SGD;
2. long: the 120-epoch schedule (`cpu_long`), streamed (tau = 1) beside S-SGD, Local-SGD and
   CoCoD-SGD, each rerun of the last three compared with the committed
   docs/paper-cpu/long_schedule.json run of its cell and seed;
3. timing: on each link of --timing_links, each column of --timing_tasks, --timing_seeds seeds:
   real MPI, 2 ranks of 8 workers, the seven variants of `configs.streamed.TIMED`;
4. mixed and 5. mixed_timing: Table 2's cluster (8 of 16 workers at half speed), its verdicts
   on the four columns and its timing on --link_rate. Both come after the timing runs (with no
   --timing_links, as at the smoke scale, neither runs).

Every difference is the registered paired procedure of the tables (by seed and test example, 90%
interval, margin 0.5 point); beside it the difference to Local-SGD paired by seed. Targets (a)-(d)
of the amendment each with its numbers and verdict.

Writes streamed.md, .json (every run's commit, dirty flag, command and machine) and .png, and with
timing runs streamed_frontier.png, into --workdir; what did not run is listed as not run (with
--report_only the artefact renders whatever runs are there). `--replot` draws the .png files again
from that streamed.json alone (with `--dry_run` it names them and writes nothing). The analysis:
streamed_analysis.py and streamed_targets.py; streamed.md: streamed_report.py; the figures:
streamed_plots.py.
"""

from cocod_jax.experiments import artefacts
from cocod_jax.experiments import common
from cocod_jax.experiments import corrections
from cocod_jax.experiments import streamed_analysis as analysis
from cocod_jax.experiments import streamed_plots
from cocod_jax.experiments import streamed_report
from configs import streamed as config

FLAGS = common.FLAGS
TIMED_TASK = 'c10_r18'  # Amendment 6's timed column, where --timing_tasks names none.


def _run(arg: str, **kwargs):
  """One stage's sweep (`common.run`), its points as rows of their variant; None: not run (a dry
  run or a Slurm submission, the runner has said what it would do)."""
  points = common.run(config, f'{arg},scale={FLAGS.scale}', **kwargs)
  return None if points is None else corrections.as_rows(points)


def make() -> int:
  """Runs (or reads) the stages in order, then writes the artefact."""
  stages = {'accuracy': _run('stage=accuracy')}
  if stages['accuracy'] is None:
    return 0
  stages['long'] = _run('stage=long', check_empty=False)
  if stages['long'] is None:
    return 0
  if FLAGS.timing_links:
    stages['timing'] = {}
    tasks = FLAGS.timing_tasks or [TIMED_TASK]
    for link in FLAGS.timing_links:
      stages['timing'][link] = {}
      for task in tasks:
        arg = f'stage=timing,task={task},seeds={FLAGS.timing_seeds}'
        points = _run(arg, timing=True, link=link, check_empty=False)
        if points is None:
          return 0
        stages['timing'][link][task] = points
    stages['mixed'] = _run('stage=mixed', check_empty=False)
    arg = f'stage=mixed_timing,task={tasks[0]},seeds={FLAGS.timing_seeds}'
    stages['mixed_timing'] = _run(arg, timing=True, check_empty=False)
    if stages['mixed'] is None or stages['mixed_timing'] is None:
      return 0
  committed = analysis.committed_runs() if FLAGS.scale == 'cpu' else None
  data = analysis.assemble(stages, committed, FLAGS.link_rate if 'mixed' in stages else None)
  text = streamed_report.render(data)
  print(text)
  _plot(data)
  common.write('streamed', text, data)
  return 0 if not data['not_run'] else 1


# streamed.png and, with timing runs, streamed_frontier.png (artefacts.figures).
_plot = artefacts.figures(
  'streamed', streamed_plots.plot, streamed_plots.plot_frontier, streamed_report.has_timing_runs
)


def main():
  artefacts.entry('streamed', make, _plot)


if __name__ == '__main__':
  main()

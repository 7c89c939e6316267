"""The flags of the experiments' entry points (`python -m cocod_jax.experiments.<name>`), and
which of them each experiment reads.

Each entry point calls its `define_*` before `app.run` and parses with `parse` (never at import:
the modules are also imported as libraries, and absl refuses a flag defined twice):

- `define_experiment_flags`: the per-artefact entry points, the corrections, long-schedule,
  overlap and streamed experiments; the runner's flags (--parallel, --launcher, --dry_run, ...)
  come from config/flags.py, which the sweep runner shares.
- `define_mnist1d_check_flags`: `python -m cocod_jax.experiments.mnist1d_check`.

The experiments share one set of flags, and not every experiment reads every one of them:
`EXPERIMENT_READS` names, per experiment entry point, those of `CHOOSES` it reads (the others,
--workdir, --launcher, --dry_run, --report_only, --retry_failed, --data_dir, every experiment
reads). `parse` refuses one given on the command line to an entry point that does not read it,
and --helpshort lists only those that apply. `PAPER` is the artefacts `paper` makes, in order
(experiments/artefacts.py makes each by that name).
"""

import functools

from absl import flags

from cocod_jax.config import flags as cocod_flags
from configs import scales

FLAGS = flags.FLAGS
# The --scale choices: configs/scales.py's but `cpu_long`, which only the long-schedule experiment
# sets (its config fixes it).
SCALES = scales.SHORT_SCALES


def define_experiment_flags(replot: bool = False) -> None:
  """The flags of the per-artefact entry points (`cocod_jax.experiments.<name>`); with `replot`
  (an entry point that can draw its figures from its json alone) --replot too."""
  cocod_flags.define_runner_flags('runs/paper', 'Where the points and the artefacts go.')
  flags.DEFINE_enum('scale', 'cpu', list(SCALES), 'configs/scales.py.')
  flags.DEFINE_integer(
    'seeds', 0, 'Seeds per cell; 0: the registered ones (configs/scales.py).', lower_bound=0
  )
  flags.DEFINE_string('data_dir', '', 'TFDS data dir for CIFAR (paper scale).')
  flags.DEFINE_string(
    'task', 'c100_r18', 'The ablation and the corrections experiment: the Table 1 column.'
  )
  flags.DEFINE_list(
    'timing_links',
    [],
    'The links of the timing runs (RATE[/BURST[/MTU]] each, see --link_rate): Figures 3 and 6 '
    '(empty: --link_rate alone), the corrections, overlap and streamed experiments (empty: their '
    'accuracy runs alone).',
  )
  flags.DEFINE_list(
    'timing_tasks',
    [],
    'Figures 3 and 6 and the overlap and streamed experiments: the tasks of the timing runs '
    '(configs/scales.py TASKS); empty: the registered ones.',
  )
  flags.DEFINE_integer(
    'timing_seeds',
    1,
    'The corrections, overlap and streamed experiments: timing runs per variant and link (seeds '
    '0, 1, ...); with more than one the table gives the median and the range.',
    lower_bound=1,
  )
  if replot:
    flags.DEFINE_bool(
      'replot', False, 'Redraw the .png files from <workdir>/<name>.json alone; run nothing.'
    )


# The experiment flags that some experiments do not read: what each sets (said when one is given
# to an experiment that does not read it).
CHOOSES = {
  'parallel': 'how many untimed runs go at once',
  'link_rate': 'the simulated link of the timing runs',
  'scale': 'the scale of the runs',
  'seeds': 'the seeds per cell',
  'task': 'the Table 1 column',
  'timing_links': 'the links of the timing runs',
  'timing_tasks': 'the tasks of the timing runs',
  'timing_seeds': 'the timing runs per variant and link',
}
_TABLE = ('parallel', 'scale', 'seeds')  # One-host sweeps at --scale with --seeds.
_TIMED = ('link_rate', 'scale', 'seeds', 'timing_links', 'timing_tasks')  # Timed sweeps alone.
# Experiment entry point -> the flags of CHOOSES it reads (the timed sweeps run one point at a
# time, whatever --parallel says; the corrections experiment and the timed sweeps of Figures 3 and
# 6 name their links; long_schedule and corrections fix their own scale and the first its seeds).
EXPERIMENT_READS = {
  'table1': _TABLE,
  'table2': _TABLE,
  'ablation': (*_TABLE, 'task'),
  'fig2': _TABLE,
  'fig3': _TIMED,
  'fig4': ('link_rate', 'scale'),
  'fig5': _TABLE,
  'fig6': _TIMED,
  'corrections': ('parallel', 'seeds', 'task', 'timing_links', 'timing_seeds'),
  'overlap': ('link_rate', 'parallel', 'scale', 'timing_links', 'timing_seeds', 'timing_tasks'),
  'streamed': ('link_rate', 'parallel', 'scale', 'timing_links', 'timing_seeds', 'timing_tasks'),
  'long_schedule': ('parallel',),
}
# `paper` makes these artefacts (experiments/artefacts.py), so it reads what any of them reads.
PAPER = ('table1', 'table2', 'ablation', 'fig2', 'fig5', 'fig3', 'fig6', 'fig4')
EXPERIMENT_READS['paper'] = tuple(
  f for f in CHOOSES if any(f in EXPERIMENT_READS[n] for n in PAPER)
)


def not_applying(name: str) -> list[str]:
  """The flags of CHOOSES that experiment entry point `name` does not read (none for an entry
  point that is not an experiment of EXPERIMENT_READS)."""
  reads = EXPERIMENT_READS.get(name, tuple(CHOOSES))
  return [flag for flag in CHOOSES if flag not in reads]


def _refusal(flag: str, name: str) -> str:
  readers = [n for n, reads in EXPERIMENT_READS.items() if flag in reads]
  listed = ', '.join(readers[:-1]) + f' and {readers[-1]}' if len(readers) > 1 else readers[0]
  return f'--{flag} does not apply to {name} (it sets {CHOOSES[flag]}, for {listed} only)'


def define_mnist1d_check_flags(models) -> None:
  """The flags of `python -m cocod_jax.experiments.mnist1d_check`; `models`: those it checks."""
  flags.DEFINE_string('workdir', 'runs/mnist1d_check', 'Where the runs go.')
  flags.DEFINE_string('out', 'runs/mnist1d_check', 'Where mnist1d_check.json and .md go.')
  flags.DEFINE_integer('seeds', 5, 'Seeds per model.')
  flags.DEFINE_list('models', list(models), 'Models to check.')


def parse(argv, name: str):
  """`cocod_flags.parse` for experiment entry point `name` (app.run's `flags_parser`): every
  refusal one line, exit status 2, and a flag of CHOOSES that `name` does not read refused when
  given: `error: --task does not apply to table1 (it sets ...)`."""
  return cocod_flags.parse(
    argv,
    name,
    left_out=not_applying(name),
    refusal=functools.partial(_refusal, name=name),
    module=__name__,
  )

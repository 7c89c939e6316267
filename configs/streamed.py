"""Issue 40: streamed CoCoD-SGD (`algorithm.fragments`) beside the whole-model options and the
baselines, each paired with S-SGD by seed and test example (docs/paper-cpu/PREREGISTRATION.md,
amendment 6).

    python -m cocod_jax.experiments.streamed --scale=cpu --parallel=2 --workdir=runs/streamed
    python -m cocod_jax.main --workdir=runs/streamed1 \
        --config=configs/streamed.py:variant=streamed_5_1,task=c100_r18,seed=0

Arguments after `:`: `variant` (below), `task` (a Table 1 column), `seed`, `scale` (cpu, the
24-epoch cell; cpu_long, the paper's 120-epoch schedule of amendment 4; smoke for tests),
`timing` and `mixed`. Every variant is the Table 1 cell of `task` (configs/table1.py, the
paper's settings, period 5) with only its own fields changed:

- `ssgd`, `local_sgd`, `cocod`: the table's S-SGD, Local-SGD and CoCoD-SGD;
- `delay_<tau>`: CoCoD-SGD with the whole model's snapshot tau steps before the round's end
  (`algorithm.delay`), tau in 1-4;
- `streamed_5_<tau>`: streamed CoCoD-SGD, P = 5 fragments (one a step of the period 5), each
  snapshot tau steps before its correction, tau in 1, 2.

At `scale=cpu_long` every run also evaluates the averaged model on the first 10,000 training
examples each epoch, as amendment 4's runs did (configs/long_schedule.py), so that a rerun of
their cells can equal them to the last digit.

`timing=true`: the real-MPI run of `scales.timed` (2 ranks of 8 workers), where `delay_auto`
(tau from the measured Tp and Tc of the whole model) and `streamed_auto` (P = 5, tau from one
fragment's measured Tc) are variants too. `mixed=true`: Table 2's cell (configs/table2.py: 8 of
16 workers at half speed) of the `MIXED` variant instead.

`sweep` takes `stage`: `accuracy` (the four columns, hard first, seeds 0-4, `ACCURACY`), `long`
(`cpu_long`, the four columns in amendment 4's order, seeds 0-4, `LONG`; at `scale=smoke` both
take one column and one seed), `timing` (`task`,
default c10_r18; `seeds`, default 2: `TIMED` over MPI on the experiment's link), `mixed` (the four
columns, seeds 0-2, `MIXED`) or `mixed_timing` (`task`, `seeds` as `timing`); and `scale`.
"""

from cocod_jax.config import args as config_args
from configs import common
from configs import long_schedule
from configs import scales
from configs import table1
from configs import table2

FRAGMENTS = 5


def _streamed(tau) -> dict:
  return {'algorithm.fragments': FRAGMENTS, 'algorithm.delay': tau}


# variant -> (algorithm, dotted overrides of the Table 1 cell)
VARIANTS = {
  'ssgd': ('ssgd', {}),
  'local_sgd': ('local_sgd', {}),
  'cocod': ('cocod_sgd', {}),
  **{f'delay_{tau}': ('cocod_sgd', {'algorithm.delay': tau}) for tau in (1, 2, 3, 4)},
  **{f'streamed_5_{tau}': ('cocod_sgd', _streamed(tau)) for tau in (1, 2)},
}
# Timed only: 'auto' is measured on MPI and refused on the one-host cluster.
TIMING_ONLY = {
  'delay_auto': ('cocod_sgd', {'algorithm.delay': 'auto'}),
  'streamed_auto': ('cocod_sgd', _streamed('auto')),
}
ACCURACY = ('ssgd', 'local_sgd', 'cocod', 'delay_1', 'delay_2', 'delay_3', 'delay_4',
            'streamed_5_1', 'streamed_5_2')  # fmt: skip
LONG = ('ssgd', 'local_sgd', 'cocod', 'streamed_5_1')
TIMED = ('ssgd', 'local_sgd', 'cocod', 'delay_1', 'delay_auto', 'streamed_5_1', 'streamed_auto')
TIMING_SEEDS = 2
# Table 2's mixed cluster: variant -> (Table 2 row, overrides).
MIXED = {
  'ssgd': ('ssgd', {}),
  'cocod_sgd+ps': ('cocod_sgd+ps', {}),
  'asynlocal_sgd': ('asynlocal_sgd', {}),
  'delay_1+ps': ('cocod_sgd+ps', {'algorithm.delay': 1}),
  'streamed_5_1+ps': ('cocod_sgd+ps', _streamed(1)),
}
MIXED_SEEDS = (0, 1, 2)
REFERENCE = 'ssgd'  # The variant every other is paired with.
STREAMED = 'streamed_5_1'  # The variant the targets are about.
HARD = ('c100_r18', 'c100_v16')  # mnist1d_hard: where CoCoD-SGD loses the most.
TASKS = HARD + ('c10_r18', 'c10_v16')  # The 24-epoch runs' order: the hard columns first.
LONG_TASKS = long_schedule.STAGE_TASKS['long']  # Amendment 4's order.
SEEDS = (0, 1, 2, 3, 4)
STAGES = ('accuracy', 'long', 'timing', 'mixed', 'mixed_timing')


def get_config(arg=None):
  a = config_args.parse(
    arg,
    dict(
      variant='streamed_5_1', task='c100_r18', seed=0, scale='cpu', timing=False, mixed=False
    ),  # fmt: skip
  )
  config_args.choice('scale', a.scale, ('cpu', 'cpu_long', 'smoke'))
  if a.mixed:  # Table 2's cell of the row.
    config_args.choice('variant', a.variant, tuple(MIXED))
    (algo, overrides), table = MIXED[a.variant], table2
  else:
    config_args.choice('variant', a.variant, tuple(VARIANTS) + (tuple(TIMING_ONLY) * a.timing))
    (algo, overrides), table = {**VARIANTS, **TIMING_ONLY}[a.variant], table1
  config_args.choice('task', a.task, TASKS)
  timing = ',timing=true' if a.timing else ''
  cell = table.get_config(f'algo={algo},task={a.task},scale={a.scale},seed={a.seed}{timing}')
  if a.scale == 'cpu_long':
    cell.eval_train_examples = long_schedule.EVAL_TRAIN_EXAMPLES
  if a.scale == 'smoke':  # Its period of 3 would refuse 5 fragments.
    cell.algorithm.period = FRAGMENTS
  return common.apply(cell, overrides)


def sweep(add, arg=None):
  a = config_args.parse(arg, dict(stage='accuracy', scale='cpu', task='c10_r18', seeds=0))
  config_args.choice('stage', a.stage, STAGES)
  config_args.choice('scale', a.scale, scales.SHORT_SCALES)
  config_args.choice('task', a.task, TASKS)
  timed_seeds = range(a.seeds or TIMING_SEEDS)
  if a.stage in ('mixed', 'mixed_timing'):  # Table 2's cluster: the four columns, or one timed.
    tasks, seeds = (TASKS, MIXED_SEEDS) if a.stage == 'mixed' else ((a.task,), timed_seeds)
    timing = ',timing=true' if a.stage == 'mixed_timing' else ''
    for task in tasks:
      for variant in MIXED:
        for seed in seeds:
          add(config_arg=f'variant={variant},task={task},seed={seed},scale={a.scale},mixed=true'
              f'{timing}')  # fmt: skip
    return
  if a.stage == 'timing':  # MPI, 2 ranks of 8 workers, on the experiment's link.
    for variant in TIMED:
      for seed in timed_seeds:
        add(config_arg=f'variant={variant},task={a.task},seed={seed},scale={a.scale},timing=true')
    return
  long = a.stage == 'long'
  scale = 'cpu_long' if long and a.scale == 'cpu' else a.scale
  tasks = LONG_TASKS if long else TASKS
  # At smoke one column and one seed: the pipeline, not an answer.
  tasks, seeds = (tasks[:1], SEEDS[:1]) if a.scale == 'smoke' else (tasks, SEEDS)
  for task in tasks:
    for variant in LONG if long else ACCURACY:
      for seed in seeds:
        add(config_arg=f'variant={variant},task={task},seed={seed},scale={scale}')

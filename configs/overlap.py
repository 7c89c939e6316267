"""Issue 30: CoCoD-SGD's overlap options side by side, each paired with S-SGD by seed and test
example on the Table 1 columns at the cpu scale (docs/paper-cpu/PREREGISTRATION.md, amendment 3).

    python -m cocod_jax.experiments.overlap --parallel=2
    python -m cocod_jax.main --workdir=runs/overlap \
        --config=configs/overlap.py:variant=eager_4_g1,task=c100_r18,seed=100

Arguments after `:`: `variant` (below), `task` (a Table 1 column), `seed`, `scale` (default
cpu; smoke for tests). Every variant is the
Table 1 cell of `task` at the cpu scale (configs/table1.py, the paper's settings) with only its
own option changed:

- `ssgd`, `local_sgd`, `cocod`: the table's S-SGD, Local-SGD and CoCoD-SGD;
- `delay_1`, `delay_2`: CoCoD-SGD with the snapshot tau = 1 or 2 steps before the round's end
  (`algorithm.delay`; the period is 5);
- `eager_<n>_g<gamma>`: the eager update with lambda = 1/n (n in 2, 4, 16) and gamma 0 or 1;
- `anchor_06_07`, `anchor_05_00`: the anchor with (pull, momentum) (0.6, 0.7), Overlap
  Local-SGD's published setting, and (0.5, 0).

`timing=true`: the real-MPI run of `scales.timed` (2 ranks of 8 workers), where `delay_auto`
(tau from the measured Tp and Tc) is a variant too.

`mixed=true`: Table 2's cell (configs/table2.py: 8 of 16 workers at half speed) of the `MIXED`
variant instead, with `timing` as there (emulated speeds over MPI).

`sweep` takes `stage`: `mixed` (the four columns, seeds 0-2, the `MIXED` variants),
`mixed_timing` (`task`, `seeds` as `timing`), `timing` (`task`, default c10_r18; `seeds`,
default 2: the variants of `TIMED` over MPI on the experiment's link), `pilot` (the two hard
columns, seeds 100-102, S-SGD, CoCoD-SGD and every setting) or `full` (the four columns, hard
first, seeds 0-4, S-SGD, Local-SGD, CoCoD-SGD and the settings named by `chosen`,
`;`-separated: the pilot's best of each option), and `scale`.
"""

from cocod_jax.config import args as config_args
from configs import common
from configs import scales
from configs import table1
from configs import table2

# variant -> (algorithm, the option it belongs to (None: a baseline), dotted overrides)
VARIANTS = {
  'ssgd': ('ssgd', None, {}),
  'local_sgd': ('local_sgd', None, {}),
  'cocod': ('cocod_sgd', None, {}),
  'delay_1': ('cocod_sgd', 'delay', {'algorithm.delay': 1}),
  'delay_2': ('cocod_sgd', 'delay', {'algorithm.delay': 2}),
}
for _n in (2, 4, 16):
  for _gamma in (0, 1):
    VARIANTS[f'eager_{_n}_g{_gamma}'] = (
      'cocod_sgd',
      'eager',
      {
        'algorithm.correction': 'eager',
        'algorithm.eager_lambda': 1.0 / _n,
        'algorithm.eager_gamma': float(_gamma),
      },
    )
for _name, (_pull, _beta) in (('anchor_06_07', (0.6, 0.7)), ('anchor_05_00', (0.5, 0.0))):
  VARIANTS[_name] = (
    'cocod_sgd',
    'anchor',
    {
      'algorithm.correction': 'anchor',
      'algorithm.anchor_pull': _pull,
      'algorithm.anchor_momentum': _beta,
    },
  )
# Timed only (on MPI: delay='auto' takes tau from the measured Tp and Tc, refused on the one-host
# cluster): the smallest tau with tau Tp >= Tc, at most the period.
TIMING_ONLY = {'delay_auto': ('cocod_sgd', 'delay', {'algorithm.delay': 'auto'})}
# The timing runs' variants (amendment 5, fixed after the full runs, before any timing run): the
# full runs' and delay_auto.
TIMED = ('ssgd', 'local_sgd', 'cocod', 'delay_1', 'delay_auto', 'eager_2_g0', 'anchor_06_07')
TIMING_SEEDS = 2
# Table 2's mixed cluster (8 of 16 workers at half speed; amendment 5): the option that met the
# accuracy target in the full runs (delay 1), with proportional sampling, beside the table's
# S-SGD, CoCoD-SGD+PS and AsynLocal-SGD, on the table's seeds; variant -> (Table 2 row, overrides)
MIXED = {
  'ssgd': ('ssgd', {}),
  'cocod_sgd+ps': ('cocod_sgd+ps', {}),
  'asynlocal_sgd': ('asynlocal_sgd', {}),
  'delay_1+ps': ('cocod_sgd+ps', {'algorithm.delay': 1}),
}
MIXED_SEEDS = (0, 1, 2)
REFERENCE = 'ssgd'  # The variant every other is paired with.
OPTIONS = ('delay', 'eager', 'anchor')
HARD = ('c100_r18', 'c100_v16')  # mnist1d_hard: where CoCoD-SGD loses the most.
TASKS = HARD + ('c10_r18', 'c10_v16')  # The full runs' order: the hard columns first.
PILOT_SEEDS = (100, 101, 102)
FULL_SEEDS = (0, 1, 2, 3, 4)


def option_of(variant: str) -> str | None:
  return VARIANTS[variant][1]


def settings(option: str) -> list[str]:
  """The variants of one option, in VARIANTS' order."""
  return [v for v in VARIANTS if option_of(v) == option]


def get_config(arg=None):
  a = config_args.parse(
    arg, dict(variant='cocod', task='c100_r18', seed=0, scale='cpu', timing=False, mixed=False)
  )
  if a.mixed:  # Table 2's cell of the row.
    config_args.choice('variant', a.variant, tuple(MIXED))
    (algo, overrides), table = MIXED[a.variant], table2
  else:
    config_args.choice('variant', a.variant, tuple(VARIANTS) + (tuple(TIMING_ONLY) * a.timing))
    (algo, _, overrides), table = {**VARIANTS, **TIMING_ONLY}[a.variant], table1
  config_args.choice('task', a.task, TASKS)
  config_args.choice('scale', a.scale, scales.SHORT_SCALES)
  timing = ',timing=true' if a.timing else ''
  cell = table.get_config(f'algo={algo},task={a.task},scale={a.scale},seed={a.seed}{timing}')
  return common.apply(cell, overrides)


def stage_variants(stage: str, chosen: list[str]) -> list[str]:
  """The variants a stage runs: the pilot every setting, the full runs one per option."""
  if stage == 'pilot':
    return ['ssgd', 'cocod'] + [v for v in VARIANTS if option_of(v)]
  return ['ssgd', 'local_sgd', 'cocod'] + chosen


def sweep(add, arg=None):
  a = config_args.parse(arg, dict(stage='pilot', chosen='', scale='cpu', task='c10_r18', seeds=0))
  config_args.choice('stage', a.stage, ('pilot', 'full', 'timing', 'mixed', 'mixed_timing'))
  config_args.choice('scale', a.scale, scales.SHORT_SCALES)
  if a.stage in ('mixed', 'mixed_timing'):  # Table 2's cluster: the four columns, or one timed.
    tasks = TASKS if a.stage == 'mixed' else (a.task,)
    seeds = MIXED_SEEDS if a.stage == 'mixed' else range(a.seeds or TIMING_SEEDS)
    timing = ',timing=true' if a.stage == 'mixed_timing' else ''
    for task in tasks:
      for variant in MIXED:
        for seed in seeds:
          add(config_arg=f'variant={variant},task={task},seed={seed},scale={a.scale},mixed=true'
              f'{timing}')  # fmt: skip
    return
  if a.stage == 'timing':  # MPI, 2 ranks of 8 workers, on the experiment's link.
    config_args.choice('task', a.task, TASKS)
    for variant in TIMED:
      for seed in range(a.seeds or TIMING_SEEDS):
        add(config_arg=f'variant={variant},task={a.task},seed={seed},scale={a.scale},timing=true')
    return
  chosen = [v for v in a.chosen.split(';') if v]
  for v in chosen:
    config_args.choice('chosen', v, tuple(v for v in VARIANTS if option_of(v)))
  tasks, seeds = (HARD, PILOT_SEEDS) if a.stage == 'pilot' else (TASKS, FULL_SEEDS)
  for task in tasks:
    for variant in stage_variants(a.stage, chosen):
      for seed in seeds:
        add(config_arg=f'variant={variant},task={task},seed={seed},scale={a.scale}')

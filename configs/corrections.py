"""Issue 23: CoCoD-SGD's corrections (cocod_jax/algorithms/correction.py) and its compressed
snapshot allreduce side by side, each paired with S-SGD by seed and test example on one Table 1
column.

    python -m cocod_jax.experiments.corrections --parallel=2 --task=c100_r18
    python -m cocod_jax.experiments.corrections --task=c100_r18 --timing_links=12mbit/8kb/8000
    python -m cocod_jax.main --workdir=runs/corr \
        --config=configs/corrections.py:variant=outer_sgd,task=c100_r18,seed=0

Arguments after `:`: `variant` (below), `task` (a Table 1 column at the cpu scale; default
c100_r18), `seed`, `timing` (true: the real-MPI run of `scales.timed`, 2 ranks of 8 workers);
`sweep` takes `task`, `seeds` (default 5) and `timing` (then the variants of `TIMED` only).
Every variant is the Table 1 cell of `task` (configs/table1.py, the paper's settings) with one
change:

- `ssgd`, `cocod`: S-SGD and CoCoD-SGD as in the table (`ssgd` is every row's pair);
- `reset`: the local model set to the average (PCCL's async DiLoCo);
- `blend`: `x <- 0.5 a + 0.5 x` (torchft's streaming DiLoCo merge at alpha 0.5; its default
  alpha 0 is `reset`);
- `outer_sgd`: DiLoCo's outer step, lr 0.7 and Nesterov momentum 0.9 as DiLoCo publishes them
  (tuned there for hundreds of AdamW steps a round, not 5 SGD steps);
- `outer_sgd_mild`: outer lr 1 and Nesterov momentum 0.5, the nearest outer step to `cocod`
  that still has momentum.

- `cocod_bf16`, `cocod_int8`, `cocod_int8_ef`: the paper's correction with the snapshot
  allreduce in bfloat16, in int8, and in int8 with error feedback (`comm.dtype`).

None is tuned on these runs: the settings are the published ones, fixed before the runs.
"""

from cocod_jax.config import args as config_args
from configs import common
from configs import scales
from configs import table1

# variant -> (algorithm, dotted overrides of the Table 1 cell)
VARIANTS = {
  'ssgd': ('ssgd', {}),
  'cocod': ('cocod_sgd', {}),
  'reset': ('cocod_sgd', {'algorithm.correction': 'reset'}),
  'blend': ('cocod_sgd', {'algorithm.correction': 'blend', 'algorithm.alpha': 0.5}),
  'outer_sgd': (
    'cocod_sgd',
    {
      'algorithm.correction': 'outer_sgd',
      'algorithm.outer_lr': 0.7,
      'algorithm.outer_momentum': 0.9,
      'algorithm.outer_nesterov': True,
    },
  ),
  'outer_sgd_mild': (
    'cocod_sgd',
    {
      'algorithm.correction': 'outer_sgd',
      'algorithm.outer_lr': 1.0,
      'algorithm.outer_momentum': 0.5,
      'algorithm.outer_nesterov': True,
    },
  ),
}
# The snapshot allreduce compressed (compression.py), with the paper's correction. On the one-host
# cluster every worker is a sender (the paper's 16 GPUs, each its own rank); the timing runs send
# one message per rank of 8 workers.
VARIANTS.update(
  {
    'cocod_bf16': ('cocod_sgd', {'comm.dtype': 'bfloat16'}),
    'cocod_int8': ('cocod_sgd', {'comm.dtype': 'int8'}),
    'cocod_int8_ef': ('cocod_sgd', {'comm.dtype': 'int8', 'comm.error_feedback': True}),
  }
)
REFERENCE = 'ssgd'  # The variant every other is paired with.
# The variants of the timing runs, fixed after the accuracy runs and before any timing run:
# `reset` and `outer_sgd` (DiLoCo's published outer step) ended at chance accuracy in those, so
# they could never reach a target.
TIMED = ('ssgd', 'cocod', 'blend', 'outer_sgd_mild', 'cocod_bf16', 'cocod_int8', 'cocod_int8_ef')


def get_config(arg=None):
  a = config_args.parse(arg, dict(variant='cocod', task='c100_r18', seed=0, timing=False))
  config_args.choice('variant', a.variant, tuple(VARIANTS))
  config_args.choice('task', a.task, tuple(scales.TASKS))
  algo, overrides = VARIANTS[a.variant]
  return common.apply(
    table1.get_config(f'algo={algo},task={a.task},scale=cpu,seed={a.seed},timing={a.timing}'),
    overrides,
  )


def sweep(add, arg=None):
  a = config_args.parse(arg, dict(task='c100_r18', seeds=5, timing=False))
  config_args.choice('task', a.task, tuple(scales.TASKS))
  for variant in TIMED if a.timing else VARIANTS:
    for seed in range(a.seeds):
      add(config_arg=f'variant={variant},task={a.task},seed={seed},timing={a.timing}')

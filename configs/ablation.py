"""Why CoCoD-SGD trails S-SGD at the cpu scale (issue 21): one Table 1 column, CoCoD-SGD with one
thing changed at a time, every variant paired with S-SGD by seed and test example.

    python -m cocod_jax.experiments.ablation --parallel=2     (21 runs, about 15 minutes on 2 cores)
    python -m cocod_jax.main --workdir=runs/ab \
        --config=configs/ablation.py:variant=cocod_avg_momentum,seed=0

Arguments after `:`: `variant` (below), `task` (a Table 1 column at the cpu scale; default
c100_r18, where the pilot saw the largest gap), `seed`, `scale` (cpu; smoke for the tests);
`sweep` takes `task`, `seeds` (default 3) and `scale`. Every variant is the Table 1 cell of
`task` (configs/table1.py) with one change:

- `ssgd`, `cocod`: S-SGD and CoCoD-SGD as in the table (the pair every other row is judged by);
- `cocod_avg_momentum`: the momentum buffers averaged with the parameters each round;
- `cocod_k2`: period 2 instead of 5 (a staler average is a shorter way behind);
- `cocod_long_warmup`: period 1 for 6 epochs instead of 2 (the paper's 10/120 is 2 here);
- `cocod_lr_half`: lr_1 halved (0.005); `ssgd_lr_half` the same for S-SGD, its pair.

A diagnosis, not a tuning: the table's rows keep the paper's settings for every algorithm.
"""

from cocod_jax.config import args as config_args
from configs import common
from configs import scales
from configs import table1

# variant -> (algorithm, dotted overrides of the Table 1 cell)
VARIANTS = {
  'ssgd': ('ssgd', {}),
  'cocod': ('cocod_sgd', {}),
  'cocod_avg_momentum': ('cocod_sgd', {'algorithm.average_momentum': True}),
  'cocod_k2': ('cocod_sgd', {'algorithm.period': 2}),
  'cocod_long_warmup': ('cocod_sgd', {'algorithm.warmup_period_epochs': 6}),
  'cocod_lr_half': ('cocod_sgd', {'optimizer.learning_rate': 0.005}),
  'ssgd_lr_half': ('ssgd', {'optimizer.learning_rate': 0.005}),
}
# variant -> the S-SGD variant it is paired with
REFERENCE = {v: ('ssgd_lr_half' if v == 'cocod_lr_half' else 'ssgd') for v in VARIANTS}


def get_config(arg=None):
  a = config_args.parse(arg, dict(variant='cocod', task='c100_r18', seed=0, scale='cpu'))
  config_args.choice('variant', a.variant, tuple(VARIANTS))
  config_args.choice('task', a.task, tuple(scales.TASKS))
  config_args.choice('scale', a.scale, ('cpu', 'smoke'))
  algo, overrides = VARIANTS[a.variant]
  return common.apply(
    table1.get_config(f'algo={algo},task={a.task},scale={a.scale},seed={a.seed}'), overrides
  )


def sweep(add, arg=None):
  a = config_args.parse(arg, dict(task='c100_r18', seeds=3, scale='cpu'))
  config_args.choice('task', a.task, tuple(scales.TASKS))
  config_args.choice('scale', a.scale, ('cpu', 'smoke'))
  at = '' if a.scale == 'cpu' else f',scale={a.scale}'  # The cpu points keep their arguments.
  for variant in VARIANTS:
    for seed in range(a.seeds):
      add(config_arg=f'variant={variant},task={a.task},seed={seed}{at}')

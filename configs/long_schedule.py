"""Issue 31: Claim 1 on the paper's own schedule, and the drift control at 24 epochs
(docs/paper-cpu/PREREGISTRATION.md, amendment 4).

    python -m cocod_jax.experiments.long_schedule --parallel=2 --workdir=runs/long
    python -m cocod_jax.main --workdir=runs/long1 \
        --config=configs/long_schedule.py:stage=long,variant=cocod,task=c100_v16,seed=0

Arguments after `:`: `stage`, `variant`, `task` (a Table 1 column), `seed`, `scale` (default:
the stage's; smoke for tests). Every run is the Table 1 cell of `task` (configs/table1.py, the
paper's settings) and also evaluates the averaged model on the first 10,000 training examples
each epoch (`eval_train_examples`: the evaluated model's training loss beside the workers' own).

- `stage=long`: the `cpu_long` scale (configs/scales.py: 120 epochs of 97 steps, lr warm-up 5
  epochs, period 1 for 10 epochs then 5, lr /10 from epoch 81); `variant` ssgd, local_sgd or
  cocod; the four columns, the hard ones first.
- `stage=drift`: the cpu scale (24 epochs); `variant` ssgd, local_sgd, cocod as in Table 1,
  `local_sgd_k10` (Local-SGD with period 10: its workers drift up to 10 steps from the average,
  as CoCoD-SGD's drift up to 2 x 5), `cocod_k2` (period 2) and `cocod_long_warmup` (period 1
  for 6 epochs instead of 2); the two hard columns.

`sweep` takes `stage`, `seeds` (default 5: seeds 0-4), `tasks` (`;`-separated, a subset of the
stage's, in its order) and `scale`.
"""

from cocod_jax.config import args as config_args
from cocod_jax.config import errors
from configs import common
from configs import table1

EVAL_TRAIN_EXAMPLES = 10_000
# stage -> variant -> (algorithm, dotted overrides of the Table 1 cell)
VARIANTS = {
  'long': {
    'ssgd': ('ssgd', {}),
    'local_sgd': ('local_sgd', {}),
    'cocod': ('cocod_sgd', {}),
  },
  'drift': {
    'ssgd': ('ssgd', {}),
    'local_sgd': ('local_sgd', {}),
    'local_sgd_k10': ('local_sgd', {'algorithm.period': 10}),
    'cocod': ('cocod_sgd', {}),
    'cocod_k2': ('cocod_sgd', {'algorithm.period': 2}),
    'cocod_long_warmup': ('cocod_sgd', {'algorithm.warmup_period_epochs': 6}),
  },
}
STAGE_SCALE = {'long': 'cpu_long', 'drift': 'cpu'}
HARD = ('c100_r18', 'c100_v16')  # mnist1d_hard: where CoCoD-SGD loses the most at 24 epochs.
STAGE_TASKS = {'long': HARD + ('c10_v16', 'c10_r18'), 'drift': HARD}
REFERENCE = 'ssgd'


def get_config(arg=None):
  a = config_args.parse(arg, dict(stage='long', variant='cocod', task='c100_r18', seed=0, scale=''))
  config_args.choice('stage', a.stage, tuple(VARIANTS))
  config_args.choice('variant', a.variant, tuple(VARIANTS[a.stage]))
  config_args.choice('task', a.task, STAGE_TASKS[a.stage])
  scale = a.scale or STAGE_SCALE[a.stage]
  config_args.choice('scale', scale, (STAGE_SCALE[a.stage], 'smoke'))
  algo, overrides = VARIANTS[a.stage][a.variant]
  cell = table1.get_config(f'algo={algo},task={a.task},scale={scale},seed={a.seed}')
  cell.eval_train_examples = EVAL_TRAIN_EXAMPLES
  return common.apply(cell, overrides)


def sweep(add, arg=None):
  a = config_args.parse(arg, dict(stage='long', seeds=5, tasks='', scale=''))
  config_args.choice('stage', a.stage, tuple(VARIANTS))
  if a.seeds < 1:
    raise errors.UsageError(f'seeds={a.seeds} is invalid; allowed: 1 or more')
  chosen = [t for t in a.tasks.split(';') if t]
  for task in chosen:
    config_args.choice('tasks', task, STAGE_TASKS[a.stage])
  scale = f',scale={a.scale}' if a.scale else ''
  for task in STAGE_TASKS[a.stage]:
    if chosen and task not in chosen:
      continue
    for variant in VARIANTS[a.stage]:
      for seed in range(a.seeds):
        add(config_arg=f'stage={a.stage},variant={variant},task={task},seed={seed}{scale}')

"""The scales of the paper's experiments, shared by configs/table1.py, table2.py, figure4.py.

- `paper`: the paper's setting (Section 5): 16 workers, CIFAR-10/100, ResNet18/VGG16, basic batch
  32, lr 0.01 scaled by the total batch with a 5-epoch warm-up, /10 from epoch 81, period 1 for
  10 epochs then 5, 120 epochs. The accuracy tables run on one GPU through the one-host cluster.
- `cpu`: the paper's regime on tasks this 2-core machine runs in minutes (issue 21,
  docs/paper-cpu/PREREGISTRATION.md): 16 workers of the basic batch 32 (total 512), MNIST-1D
  generated with 50,000 training examples (97 steps an epoch, CIFAR has 98) and 20,000 test
  examples; `mnist1d_large` (1.2x the generator's noise) stands in for CIFAR-10 and
  `mnist1d_hard` (2x) for CIFAR-100, the 1-D CNN `cnn1d` for ResNet18 and the MLP `mlp1d` for
  VGG16. The paper's schedule as fractions of 24 epochs: lr warm-up 1 epoch (5/120), period 1 for
  2 epochs (10/120) then 5, lr /10 from epoch 17 (81/120). Tables print these real names.
- `cpu_long`: the cpu scale's tasks and workers on the paper's whole schedule: 120 epochs of 97
  steps, lr warm-up 5 epochs, period 1 for 10 epochs then 5, lr /10 from epoch 81 (issue 31,
  docs/paper-cpu/PREREGISTRATION.md, amendment 4).
- `smoke`: the whole pipeline in seconds for the tests: 2 workers of batch 50, the linear model
  on digits, 1 epoch.

Seeds per cell are registered here (`registered_seeds`), fixed before any table run from the
pilot's spread and the power of the procedure (docs/paper-cpu/pilot.md): at the cpu scale 10
seeds for the CNN columns of Table 1 (the pilot's sd of a paired difference, ~0.4 point, needs
10 for a 90% chance to find equal algorithms equivalent), 5 for its MLP columns, 3 for Table 2
(the issue's minimum where time forbids; its table says so).
"""

from cocod_jax.config import args as config_args
from cocod_jax.config import errors

SCALES = ('paper', 'cpu', 'cpu_long', 'smoke')
SHORT_SCALES = ('paper', 'cpu', 'smoke')  # Figure 4 times a few epochs: no long schedule.
# scale -> (epochs, epochs at period 1, lr warm-up epochs, lr decay epochs) of the stand-in tasks:
# the paper's schedule as fractions of 24 epochs (`cpu`) and whole (`cpu_long`, issue 31).
CPU_SCHEDULES = {'cpu': (24, 2, 1.0, (17,)), 'cpu_long': (120, 10, 5.0, (81,))}
# task -> (dataset, model) at the paper's scale
TASKS = {
  'c10_r18': ('cifar10', 'resnet18'),
  'c10_v16': ('cifar10', 'vgg16'),
  'c100_r18': ('cifar100', 'resnet18'),
  'c100_v16': ('cifar100', 'vgg16'),
}
TASK_TITLES = {
  'c10_r18': 'CIFAR10 - ResNet18',
  'c10_v16': 'CIFAR10 - VGG16',
  'c100_r18': 'CIFAR100 - ResNet18',
  'c100_v16': 'CIFAR100 - VGG16',
}
CPU_STAND_INS = {
  'cifar10': 'mnist1d_large',
  'cifar100': 'mnist1d_hard',
  'resnet18': 'cnn1d',
  'vgg16': 'mlp1d',
}
# table -> task -> seeds per cell at the cpu scale (fixed before the runs; see the docstring).
CPU_SEEDS = {
  1: {'c10_r18': 10, 'c10_v16': 5, 'c100_r18': 10, 'c100_v16': 5},
  2: {'c10_r18': 3, 'c10_v16': 3, 'c100_r18': 3, 'c100_v16': 3},
}

# artefact -> the experiment flags it runs with at the cpu scale, registered with the
# preregistration's amendments (docs/paper-cpu/PREREGISTRATION.md) and applied by
# `cocod_jax.experiments.<artefact>` and `.paper` to every flag the command line leaves unset,
# so that `make paper-cpu` makes the committed artefacts: Figure 3 on the CNN columns at r ~ 1
# and r ~ 3 with two seeds (amendment 2), Figure 6 on the 50 Mbit/s link (amendment 1), Figure 4
# on 1 Gbit/s, where the clusters100 MLP's allreduce weighs as communication does in the paper.
CPU_ARTEFACT_FLAGS = {
  'fig3': {
    'seeds': 2,
    'timing_tasks': ['c10_r18', 'c100_r18'],
    'timing_links': ['50mbit/8kb/8000', '18mbit/8kb/8000'],
  },
  'fig6': {'link_rate': '50mbit/8kb/8000'},
  'fig4': {'link_rate': '1gbit'},
  'overlap': {  # Amendment 5: the overlap options timed at r ~ 1 and r ~ 3.
    'timing_tasks': ['c10_r18'],
    'timing_links': ['50mbit/8kb/8000', '18mbit/8kb/8000'],
    'timing_seeds': 2,
    'link_rate': '50mbit/8kb/8000',  # The mixed cluster's timing: Figure 6's link.
  },
  'streamed': {  # Amendment 6: streamed CoCoD-SGD timed at r ~ 1, r ~ 3 and r ~ 6.
    'timing_tasks': ['c10_r18'],
    'timing_links': ['50mbit/8kb/8000', '18mbit/8kb/8000', '8mbit/8kb/8000'],
    'timing_seeds': 2,
    'link_rate': '50mbit/8kb/8000',  # The mixed cluster's timing: Figure 6's link.
  },
}


def artefact_flags(name: str, scale: str) -> dict:
  """The registered experiment flags of artefact `name` at `scale` (CPU_ARTEFACT_FLAGS at the cpu
  scale; none at the others, whose flags are the command line's)."""
  return dict(CPU_ARTEFACT_FLAGS.get(name, {})) if scale == 'cpu' else {}


def registered_seeds(table: int, task: str, scale: str) -> int:
  """Seeds per cell of `table` (1 or 2) when a sweep asks for the registered number (seeds=0):
  CPU_SEEDS at the cpu scale, 1 at the paper's (a GPU-day per run) and at smoke."""
  return CPU_SEEDS[table][task] if scale == 'cpu' else 1


def task_title(task: str, scale: str) -> str:
  """The column title: the paper's names at its scale, the stand-ins' real names otherwise."""
  if scale == 'paper':
    return TASK_TITLES[task]
  dataset, model = TASKS[task]
  if scale == 'smoke':
    return f'digits - linear (for {TASK_TITLES[task]})'
  return f'{CPU_STAND_INS[dataset]} - {CPU_STAND_INS[model]} (for {TASK_TITLES[task]})'


def apply(c, task: str, scale: str):
  """Sets the data, model, cluster size and schedule of `task` at `scale` on config `c`."""
  dataset, model = TASKS[task]
  c.dataset.name, c.model.name = dataset, model
  if scale == 'paper':
    return c  # configs/common.py holds the paper's hyperparameters.
  c.dataset.augment = False  # 1-D signals and 8x8 digits: no crops or flips.
  if scale in CPU_SCHEDULES:
    c.dataset.name, c.model.name = CPU_STAND_INS[dataset], CPU_STAND_INS[model]
    c.num_workers = 16
    c.batch_size = 32
    epochs, period_warmup, lr_warmup, decay = CPU_SCHEDULES[scale]
    c.num_epochs, c.algorithm.warmup_period_epochs = epochs, period_warmup
    c.optimizer.warmup_epochs, c.optimizer.decay_epochs = lr_warmup, decay
  else:  # smoke
    c.dataset.name, c.model.name = 'digits', 'linear'
    c.num_workers = 2
    c.batch_size = 50
    c.num_epochs = 1
    c.algorithm.warmup_period_epochs = 0
    c.algorithm.period = 3
    c.optimizer.warmup_epochs = 0
  c.checkpoint.every_epochs = 0
  return c


def timed(c, scale: str):
  """The timing runs of Figures 3 and 6: real MPI, every round timed, and otherwise the accuracy
  run's config (the same 16 workers, batches, learning rate and schedule: the same algorithm to
  the bit, tests/ranks_test.py). Below the paper's scale, 2 ranks (this machine's cores) of 8
  workers each; at the paper's, the job's ranks (one per GPU host, `mpi.workers_per_rank` from
  the job)."""
  c.backend = 'mpi'
  if scale != 'paper':
    c.mpi.workers_per_rank = c.num_workers // 2
  c.timeline.sample_every = 1
  return c


def parse_cell(arg, algos, default_algo: str):
  """The `:`-argument of one cell of a table: `algo` (one of `algos`), `task`, `scale`, `seed`
  and `timing`, each checked."""
  defaults = dict(algo=default_algo, task='c10_r18', scale='cpu', seed=0, timing=False)
  a = config_args.parse(arg, defaults)
  config_args.choice('algo', a.algo, algos)
  config_args.choice('task', a.task, tuple(TASKS))
  config_args.choice('scale', a.scale, SCALES)
  return a


def sweep_cells(add, arg, points):
  """The sweep of a table's experiment file: `points(scale, seeds, timing)` gives (algo, task,
  seed) of each run; the argument takes `scale`, `seeds` (0: the registered seeds), `timing` and
  `tasks` (`;`-separated, a subset of those runs' tasks; empty: all of them)."""
  a = config_args.parse(arg, dict(scale='cpu', seeds=0, timing=False, tasks=''))
  if a.seeds < 0:
    raise errors.UsageError(f'seeds={a.seeds} is invalid; allowed: 0 (the registered ones) or more')
  config_args.choice('scale', a.scale, SCALES)
  cells = points(a.scale, a.seeds, a.timing)
  registered = tuple(dict.fromkeys(task for _, task, _ in cells))
  chosen = [t for t in a.tasks.split(';') if t]
  for task in chosen:
    config_args.choice('tasks', task, registered)
  timing = ',timing=true' if a.timing else ''
  for algo, task, seed in cells:
    if not chosen or task in chosen:
      add(config_arg=f'algo={algo},task={task},scale={a.scale},seed={seed}{timing}')

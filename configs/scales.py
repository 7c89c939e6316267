"""The three scales of the paper's experiments, shared by configs/table1.py, table2.py, figure4.py.

- `paper`: the paper's setting (Section 5): 16 workers, CIFAR-10/100, ResNet18/VGG16, basic batch
  32, lr 0.01 scaled by the total batch with a 5-epoch warm-up, /10 from epoch 81, period 1 for
  10 epochs then 5, 120 epochs. The accuracy tables run on one GPU through the one-host cluster.
- `cpu`: the same rows, columns and schedule fractions on data and models that fit this 2-core
  machine: 16 workers of batch 8, 12 epochs (period 1 for the first 1 = 10/120 of them, lr
  warm-up 0.5 = 5/120, /10 from epoch 9 = 81/120); scikit-learn's 8x8 digits stand in for
  CIFAR-10 and `clusters100` (100 Gaussian classes, deterministic) for CIFAR-100; the small CNN
  for ResNet18 and the 2.1M-parameter MLP for VGG16 (the larger model keeps the larger
  allreduce). Tables print these real names. Minutes a table.
- `smoke`: the whole pipeline in seconds for the tests: 2 workers of batch 50, the linear model
  on digits, 1 epoch.
"""

from cocod_jax import config_args

SCALES = ('paper', 'cpu', 'smoke')
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
CPU_STAND_INS = {'cifar10': 'digits', 'cifar100': 'clusters100', 'resnet18': 'cnn', 'vgg16': 'mlp'}


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
  c.dataset.augment = False  # 8x8 digits and 64-feature clusters: no crops or flips.
  if scale == 'cpu':
    c.dataset.name, c.model.name = CPU_STAND_INS[dataset], CPU_STAND_INS[model]
    c.num_workers = 16
    c.batch_size = 8
    c.num_epochs = 12
    c.algorithm.warmup_period_epochs = 1
    c.optimizer.warmup_epochs = 0.5
    c.optimizer.decay_epochs = (9,)
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
  """The timing runs of Figures 3 and 6: real MPI, one process per worker, every round timed;
  16 workers at the paper's scale; below it 2 (this machine's cores), each with 8 times the
  basic batch, so the total batch, the steps per epoch and the learning rate stay those of the
  16-worker accuracy runs."""
  c.backend = 'mpi'
  if scale != 'paper':
    factor = c.num_workers // 2
    c.batch_size *= factor
    c.optimizer.learning_rate *= factor  # lr_1 scales with the basic batch (linear scaling).
    c.num_workers = 2
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
  """The sweep of a table's experiment file: `points(scale, seeds)` gives (algo, task, seed) of
  each cell; the argument takes `scale`, `seeds` and `timing`."""
  a = config_args.parse(arg, dict(scale='cpu', seeds=1, timing=False))
  config_args.choice('scale', a.scale, SCALES)
  timing = ',timing=true' if a.timing else ''
  for algo, task, seed in points(a.scale, a.seeds):
    add(config_arg=f'algo={algo},task={task},scale={a.scale},seed={seed}{timing}')

"""Table 2 of the paper (and the runs behind Figures 5 and 6): final best test accuracy in a
heterogeneous cluster of 16 workers, 8 of them at half speed (`worker_speeds` 1 for the slow and
2 for the fast workers), ResNet18/VGG16 on CIFAR-10/100.

One cell:

    python -m cocod_jax.main --workdir=runs/t2 \
        --config=configs/table2.py:algo=cocod_sgd+ps,task=c10_r18,scale=cpu,seed=0

The whole table: `python -m cocod_jax.experiments.table2 --scale=cpu`.

Rows (`algo`): ssgd and pipe_sgd (every worker at the basic batch: the fast ones wait every
step), ssgd+ps and pipe_sgd+ps (proportional sampling: batch 32 for the slow, 64 for the fast
workers, lr 0.01 x (8 + 8 x 2)), asynlocal_sgd (the fast workers take twice the local steps),
cocod_sgd+ps (the paper's CoCoD-SGD row uses PS). On the one-host cluster the speeds change the
numbers (batches, shards, local steps), not the time; the time of a mixed cluster is measured
under MPI with `emulate_speeds` (`make bench`, Figures 5/6). `task`, `scale`, `seed` as in
configs/table1.py. At `paper` scale (never run here) the paper reports CoCoD-SGD+PS within a few
tenths of S-SGD; what the `cpu` scale gives (72 runs) is the committed artefact
docs/paper-cpu/table2.md, with its verdicts.
"""

from configs import common
from configs import scales

ALGOS = ('ssgd', 'ssgd+ps', 'pipe_sgd', 'pipe_sgd+ps', 'asynlocal_sgd', 'cocod_sgd+ps')
# Figure 6's timing runs at the cpu scale (one at a time on 2 cores): the rows without the
# Pipe-SGD pair, on the two CNN columns.
CPU_TIMED_ALGOS = ('ssgd', 'ssgd+ps', 'asynlocal_sgd', 'cocod_sgd+ps')
CPU_TIMED_TASKS = ('c10_r18', 'c100_r18')


def get_config(arg=None):
  a = scales.parse_cell(arg, ALGOS, 'cocod_sgd+ps')
  c = common.base_config()
  c.algorithm.name = a.algo.removesuffix('+ps')
  c.proportional_sampling = a.algo.endswith('+ps')
  c.seed = a.seed
  scales.apply(c, a.task, a.scale)
  if a.timing:
    scales.timed(c, a.scale)
    c.emulate_speeds = True
  half = c.num_workers // 2
  c.worker_speeds = (1.0,) * half + (2.0,) * (c.num_workers - half)
  return c


def points(scale, seeds, timing=False):
  """(algo, task, seed) of every run at `scale` (smoke: S-SGD and CoCoD-SGD+PS, 1 task); `seeds`
  per cell, 0: the registered number (scales.registered_seeds)."""
  algos = ('ssgd', 'cocod_sgd+ps') if scale == 'smoke' else ALGOS
  tasks = ('c10_r18',) if scale == 'smoke' else tuple(scales.TASKS)
  if timing and scale == 'cpu':  # Figure 6 on 2 cores: registered in PREREGISTRATION.md.
    algos, tasks = CPU_TIMED_ALGOS, CPU_TIMED_TASKS
  return [(algo, task, seed) for task in tasks for algo in algos
          for seed in range(seeds or scales.registered_seeds(2, task, scale))]  # fmt: skip


def sweep(add, arg=None):
  scales.sweep_cells(add, arg, points)

"""Table 1 of the paper (and the runs behind Figures 2 and 3): final best test accuracy of S-SGD,
Pipe-SGD, Local-SGD and CoCoD-SGD, 16 homogeneous workers, ResNet18/VGG16 on CIFAR-10/100.

One cell:

    python -m cocod_jax.main --workdir=runs/t1 \
        --config=configs/table1.py:algo=cocod_sgd,task=c10_r18,scale=cpu,seed=0

The whole table through the sweep runner, then the table beside the paper's numbers:

    python -m cocod_jax.experiments.table1 --scale=cpu --seeds=1 --workdir=runs/paper
    python -m cocod_jax.sweep --config=configs/table1.py:scale=cpu,seeds=1 --workdir=runs/paper

Arguments after `:` (all optional): `algo` (ssgd, pipe_sgd, local_sgd, cocod_sgd), `task`
(c10_r18, c10_v16, c100_r18, c100_v16), `scale` (paper, cpu, smoke: configs/scales.py), `seed`;
`timing` (true: the real-MPI timing runs of Figure 3, `scales.timed`); `sweep` takes
`scale`, `seeds` and `timing`. At `paper` scale (one GPU, the one-host cluster, a day or more
a cell; never run here) the paper reports CoCoD-SGD within a few tenths of S-SGD in every column.
What the `cpu` scale gives (its 120 runs, about half an hour on 2 cores) is the committed
artefact docs/paper-cpu/table1.md, with its verdicts; `smoke` runs 2 algorithms of 1 column in
seconds (the tests).
"""

from configs import common
from configs import scales

ALGOS = ('ssgd', 'pipe_sgd', 'local_sgd', 'cocod_sgd')


def get_config(arg=None):
  a = scales.parse_cell(arg, ALGOS, 'cocod_sgd')
  c = common.base_config()
  c.algorithm.name = a.algo
  c.seed = a.seed
  scales.apply(c, a.task, a.scale)
  return scales.timed(c, a.scale) if a.timing else c


def points(scale, seeds, timing=False):
  """(algo, task, seed) of every run of the table at `scale` (smoke: 2 algorithms, 1 task);
  `seeds` per cell, 0: the registered number (scales.registered_seeds). The timing runs
  (`timing`) are the same cells."""
  del timing
  algos, tasks = (ALGOS[::3], ('c10_r18',)) if scale == 'smoke' else (ALGOS, tuple(scales.TASKS))
  return [(algo, task, seed) for task in tasks for algo in algos
          for seed in range(seeds or scales.registered_seeds(1, task, scale))]  # fmt: skip


def sweep(add, arg=None):
  scales.sweep_cells(add, arg, points)

"""Figure 4 of the paper: time speedup against the number of workers, homogeneous cluster.

speedup(N) = time per epoch on 1 worker / time per epoch on N workers, from the epochs after the
first (compilation), measured with real MPI (one process per worker), beside the Section 4.2
time model drawn from the measured Tp and Tc.

    python -m cocod_jax.experiments.fig4 --scale=cpu --link_rate=1gbit   (root: simulated link)
    python -m cocod_jax.main --workdir=runs/f4 \
        --config=configs/figure4.py:algo=cocod_sgd,workers=2,scale=cpu      (under mpirun -np 2)

Arguments after `:`: `algo` (ssgd, pipe_sgd, local_sgd, cocod_sgd), `workers` (the MPI world
size), `scale`, `seed`, `role` (`measure`, or `calibration`: an S-SGD run at seed + 1000, a run
of its own apart from those it helps predict); `sweep` takes `scale` and `workers` (`1-2`: a
range, or `1;2;4`) and adds the two calibration runs (S-SGD at 1 worker for Tp, at the most
workers for Tc), from which the model is drawn: the model never takes the Tp or Tc of a run it
is drawn beside.
Scales: `paper` runs ResNet18 on CIFAR-10 on N GPUs for 3 epochs (time per epoch needs no
more; the paper ran 120), period 5 throughout (the steady state; the paper's first 10 epochs
have period 1); `cpu` runs the 2.1M-parameter MLP on `clusters100` at batch 256 a worker for 3
epochs on up to 2 ranks (this machine's cores; the model continues beyond; the measured speedups
are the committed artefact docs/paper-cpu/fig4.md); `smoke` the linear model on digits for 2
epochs. About 3 minutes at `cpu` scale.
"""

from cocod_jax.config import args as config_args
from configs import common
from configs import scales

ALGOS = ('ssgd', 'pipe_sgd', 'local_sgd', 'cocod_sgd')
ROLES = ('measure', 'calibration')
CALIBRATION_SEED_OFFSET = 1000  # A calibration run's seed: apart from every measured run's.


def get_config(arg=None):
  a = config_args.parse(arg, dict(algo='cocod_sgd', workers=2, scale='cpu', seed=0, role='measure'))
  config_args.choice('algo', a.algo, ALGOS)
  config_args.choice('scale', a.scale, scales.SHORT_SCALES)
  config_args.choice('role', a.role, ROLES)
  if a.role == 'calibration':
    config_args.choice('algo (of a calibration run)', a.algo, ('ssgd',))
  c = common.base_config()
  c.algorithm.name = a.algo
  c.seed = a.seed + (CALIBRATION_SEED_OFFSET if a.role == 'calibration' else 0)
  scales.apply(c, 'c10_r18', a.scale)
  c.backend = 'mpi'
  c.num_workers = a.workers
  c.timeline.sample_every = 1
  common.without_checkpoints(c)
  c.algorithm.warmup_period_epochs = 0
  c.optimizer.warmup_epochs = 0.0
  if a.scale == 'paper':
    c.num_epochs = 3
  elif a.scale == 'cpu':
    c.dataset.name, c.model.name = 'clusters100', 'mlp'
    c.batch_size = 256
    c.num_epochs = 3
  else:
    c.num_epochs = 2
  return c


def workers_list(text: str) -> list[int]:
  """Worker counts from '1-4' (a range) or '1;2;4' (a list)."""
  if '-' in text:
    low, high = (int(x) for x in text.split('-'))
    return list(range(low, high + 1))
  return [int(x) for x in text.replace(';', ',').split(',') if x]


def sweep(add, arg=None):
  a = config_args.parse(arg, dict(scale='cpu', workers='1-2', seed=0))
  config_args.choice('scale', a.scale, scales.SHORT_SCALES)
  algos = ALGOS[::3] if a.scale == 'smoke' else ALGOS
  ns = workers_list(a.workers)
  for n in ns:
    for algo in algos:
      add(config_arg=f'algo={algo},workers={n},scale={a.scale},seed={a.seed}')
  for n in sorted({1, max(ns)}):
    add(config_arg=f'algo=ssgd,workers={n},scale={a.scale},seed={a.seed},role=calibration')

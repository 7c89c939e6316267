"""Quickstart: CoCoD-SGD on 2 MPI ranks, the small CNN on scikit-learn's 8x8 digits.

    launch/mpirun.sh -np 2 python -m cocod_jax.main --config=configs/quickstart.py \
        --workdir=runs/quickstart

(`make quickstart` runs exactly this.) Needs no network: the digits ship inside scikit-learn.
1500 training and 297 test images, batch 16 per worker, period 1 for the first epoch then 5,
10 epochs. The snapshot allreduce runs in the background thread while the local steps run; the
last line gives the measured Tp, Tc and the fraction of communication hidden. More workers than
ranks: `--config.num_workers=16` gives each rank 8 (any multiple of the ranks). Without MPI:
`--config.backend=one_host` (then any `--config.num_workers`). Expected: final test accuracy of
the averaged model >= 0.95 (tests/main_test.py holds it to that on the one-host cluster, which
computes what the 2 ranks compute), about 15 s on 2 CPU cores.
"""

from configs import common


def get_config():
  c = common.small_config('cnn', 'digits', num_workers=2, batch_size=16, num_epochs=10)
  c.backend = 'mpi'
  c.algorithm.warmup_period_epochs = 1
  c.optimizer.learning_rate = 0.02
  c.optimizer.warmup_epochs = 1
  c.optimizer.decay_epochs = (8,)
  return c

"""Quickstart: CoCoD-SGD, 4 emulated workers, the small CNN on scikit-learn's 8x8 digits.

    python -m cocod_jax.main --config=configs/quickstart.py --workdir=/tmp/quickstart

Needs no network (the digits ship inside scikit-learn). 1500 training and 297 test images,
batch 16 per worker, period 1 for the first epoch then 5, 10 epochs. Expected: final test
accuracy of the averaged model >= 0.9 (see README for the measured figure), about a minute on
2 CPU cores.
"""

from configs import common


def get_config():
  c = common.base_config()
  c.num_workers = 4
  c.model.name = 'cnn'
  c.dataset.name = 'digits'
  c.dataset.augment = False
  c.batch_size = 16
  c.algorithm.warmup_period_epochs = 1
  c.optimizer.learning_rate = 0.02
  c.optimizer.warmup_epochs = 1
  c.optimizer.decay_epochs = (8,)
  c.num_epochs = 10
  return c

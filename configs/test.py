"""Tiny config for the test suite: 2 workers, the linear model on digits, 1 epoch, seconds.

python -m cocod_jax.main --config=configs/test.py --workdir=/tmp/test_run
"""

from configs import common


def get_config():
  c = common.base_config()
  c.num_workers = 2
  c.model.name = 'linear'
  c.dataset.name = 'digits'
  c.dataset.augment = False
  c.batch_size = 50
  c.algorithm.warmup_period_epochs = 0
  c.algorithm.period = 3
  c.optimizer.warmup_epochs = 0
  c.num_epochs = 1
  return c

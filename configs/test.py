"""Tiny config for the test suite: 2 workers, the linear model on digits, 1 epoch, seconds.

python -m cocod_jax.main --config=configs/test.py --workdir=/tmp/test_run
"""

from configs import common


def get_config():
  c = common.small_config('linear', 'digits', num_workers=2, batch_size=50, num_epochs=1)
  c.algorithm.period = 3
  return c

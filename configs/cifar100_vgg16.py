"""CIFAR-100, VGG16, CoCoD-SGD on 16 workers: the paper's Table 1 setting.

Same hyperparameters as configs/default.py (batch 32 per worker, lr 0.01 scaled to 0.16 with a
5-epoch warm-up, /10 at epoch 81, period 1 for 10 epochs then 5, 120 epochs) on CIFAR-100, VGG16.

    python -m cocod_jax.main --config=configs/cifar100_vgg16.py --workdir=/tmp/cifar100_vgg16

Needs the dataset through tensorflow-datasets (`--config.dataset.path=DATA_DIR`); a GPU run
(not yet measured here; a CPU step of the real models takes seconds).
"""

from configs import common


def get_config():
  c = common.base_config()
  c.dataset.name = 'cifar100'
  c.model.name = 'vgg16'
  return c

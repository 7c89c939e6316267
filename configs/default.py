"""CIFAR-10, ResNet18, CoCoD-SGD on 16 workers: the paper's Section 5 homogeneous setting.

Reproduces the ResNet18/CIFAR-10 row of Table 1 (CoCoD-SGD column; switch
`--config.algorithm.name` to ssgd, pipe_sgd or local_sgd for the others): batch 32 per worker,
lr 0.01 scaled linearly to 0.16 with a 5-epoch warm-up, /10 at epoch 81, momentum 0.9,
weight decay 1e-4, period 1 for 10 epochs then 5, 120 epochs.

    python -m cocod_jax.main --config=configs/default.py --workdir=/tmp/r18_c10

Needs CIFAR-10 through tensorflow-datasets (`--config.dataset.path=DATA_DIR`). On the emulated
backend all 16 workers share one host: GPU-cluster runtimes come with the MPI backend. The paper
reports about 95% final test accuracy for this row; not yet reproduced here (ResNet18 takes
~1.3 s a step on a 2-core CPU).
"""

from configs import common


def get_config():
  return common.base_config()

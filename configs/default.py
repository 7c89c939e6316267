"""CIFAR-10, ResNet18, CoCoD-SGD on 16 workers: the paper's Section 5 homogeneous setting.

The CoCoD-SGD cell of Table 1's first column at the paper's scale (configs/table1.py, where the
other rows and columns are): batch 32 per worker, lr 0.01 scaled to 0.16 with a 5-epoch warm-up,
/10 from epoch 81, momentum 0.9, weight decay 1e-4, period 1 for 10 epochs then 5, 120 epochs.

    python -m cocod_jax.main --config=configs/default.py --workdir=runs/r18_c10

Needs CIFAR-10 prepared for TFDS (`make data DATASET=cifar10`). On the one-host cluster the 16
workers share one device (a GPU: ResNet18 takes about 1.3 s a step of one worker on a 2-core CPU);
`--config.backend=mpi` runs one process per GPU under mpirun or srun. The paper reports 94.41%.
"""

from configs import table1


def get_config():
  return table1.get_config('algo=cocod_sgd,task=c10_r18,scale=paper')

"""The published MNIST-1D check: S-SGD with one worker on the default 4000/1000 split, trained
with the recipe of MNIST-1D's authors, should reach their published test accuracy (CNN 94%,
MLP 68%; Greydanus 2020) within 3 points, mean of 5 seeds.

One run:

    python -m cocod_jax.main --workdir=runs/check/cnn1d.s0 \\
        --config=configs/mnist1d_check.py:model=cnn1d,seed=0

All ten runs and the artefact (docs/paper-cpu/mnist1d_check.{json,md}):

    python -m cocod_jax.experiments.mnist1d_check --workdir=runs/mnist1d_check

The authors' recipe (their `train.py` / `get_model_args`): Adam at a constant learning rate of
1e-2, no weight decay, batch 100, 6000 steps (150 epochs of the 40 batches of 4000 examples),
the batches taken in the data's order (`dataset.shuffle=False`: step s uses examples
100 s mod 4000 onwards, as theirs), the final model's test accuracy. Ours differs only in
initialisation (Flax's, not PyTorch's) and in the CNN's BatchNorm (the stand-in keeps it; see
models.CNN1D). Arguments after `:`: `model` (cnn1d, mlp1d), `seed`. About 10-20 s a run on
2 CPU cores.
"""

from cocod_jax.config import args as config_args
from configs import common

MODELS = ('cnn1d', 'mlp1d')
STEPS, BATCH, TRAIN_EXAMPLES = 6000, 100, 4000


def get_config(arg=None):
  a = config_args.parse(arg, dict(model='cnn1d', seed=0))
  config_args.choice('model', a.model, MODELS)
  c = common.base_config()
  c.algorithm.name = 'ssgd'
  c.algorithm.warmup_period_epochs = 0
  c.num_workers = 1
  c.model.name = a.model
  c.dataset.name = 'mnist1d'
  c.dataset.augment = False
  c.dataset.shuffle = False
  c.batch_size = BATCH
  c.optimizer.name = 'adam'
  c.optimizer.learning_rate = 1e-2
  c.optimizer.weight_decay = 0.0
  c.optimizer.lr_scaling = 'none'
  c.optimizer.warmup_epochs = 0.0
  c.optimizer.decay_epochs = ()
  c.num_epochs = STEPS * BATCH // TRAIN_EXAMPLES
  c.checkpoint.every_epochs = 0
  c.seed = a.seed
  return c

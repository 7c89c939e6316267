"""What several test modules share: a tiny dataset, a small config of the `linear` model, a learning
rate that changes every step, the final model read back, and the configs of the algorithms'
variants and corrections with their float64 references (tests/reference.py)."""

import os
from typing import NamedTuple

import numpy as np

from cocod_jax import shares
from cocod_jax import train
from cocod_jax import validation as config_validation
from cocod_jax.record import checkpoints
from configs import test as test_config
from tests import reference

ALGOS = ('ssgd', 'pipe_sgd', 'local_sgd', 'cocod_sgd')  # Those that take proportional sampling.


class Tiny(NamedTuple):
  """A tiny dataset written to `path` (tiny.npz) and its training examples."""

  path: str
  x: np.ndarray
  y: np.ndarray


def tiny_npz(tmp_path, n_train=30, dim=5, classes=3, seed=0) -> Tiny:
  """`n_train` training and 10 test examples of `dim` Gaussian features and labels in
  `range(classes)`, written to tmp_path/tiny.npz (the `tiny` fixture of tests/conftest.py)."""
  rs = np.random.RandomState(seed)
  x = rs.randn(n_train + 10, dim).astype(np.float32)
  y = rs.randint(0, classes, n_train + 10).astype(np.int32)
  path = os.path.join(tmp_path, 'tiny.npz')
  np.savez(path, x_train=x[:n_train], y_train=y[:n_train], x_test=x[n_train:], y_test=y[n_train:])
  return Tiny(path, x[:n_train], y[:n_train])


def small_config(path, algorithm, workers, batch, epochs, period, speeds=(), ps=True):
  c = test_config.get_config()
  c.dataset.name = 'npz'
  c.dataset.path = path
  c.dataset.shuffle = False
  c.algorithm.name = algorithm
  c.algorithm.period = period
  c.num_workers = workers
  c.batch_size = batch
  c.num_epochs = epochs
  c.optimizer.learning_rate = 0.5
  c.optimizer.lr_scaling = 'none'
  c.optimizer.decay_epochs = (1000,)
  if speeds:
    c.worker_speeds = speeds
    c.proportional_sampling = ps
  config_validation.validate(c)
  return c


def lr_warmup(c, base=0.05, epochs=2):
  """A learning rate that changes every step: linear scaling to sum(M_i) / M times `base`,
  reached after a linear warm-up of `epochs` epochs; returns lr(t) written from
  docs/algorithms.md."""
  c.optimizer.learning_rate = base
  c.optimizer.lr_scaling = 'linear'
  c.optimizer.warmup_epochs = epochs
  peak = base * sum(shares.batch_sizes(c)) / c.batch_size

  def lr(t, steps_per_epoch):
    warm = epochs * steps_per_epoch
    return base + (peak - base) * t / warm if t < warm else peak

  return lr


def read_final(workdir):
  with np.load(os.path.join(workdir, 'final_params.npz')) as f:
    return f['params/Dense_0/kernel'], f['params/Dense_0/bias']


def run(c, workdir):
  train.train_and_evaluate(c, str(workdir))
  return read_final(workdir)


def shards_of(x, y, sizes):
  """Contiguous shards in file order, as the library makes them without shuffling."""
  starts = np.cumsum([0] + list(sizes))
  return [(x[a:b], y[a:b]) for a, b in zip(starts[:-1], starts[1:])]


VARIANTS = {
  'warmup': dict(warmup=1),
  'momentum': dict(warmup=1, average_momentum=True),
  'bn_averaged': dict(warmup=1, bn=True, average_batch_stats=True),
  'bn_local': dict(warmup=1, bn=True, average_batch_stats=False, average_momentum=True),
}


def variant_config(path, algorithm, warmup=0, bn=False, average_batch_stats=True,
                   average_momentum=False):  # fmt: skip
  c = small_config(path, algorithm, workers=3, batch=5, epochs=4, period=3)
  c.algorithm.warmup_period_epochs = warmup
  c.algorithm.average_batch_stats = average_batch_stats
  c.algorithm.average_momentum = average_momentum
  c.model.name = 'linear_bn' if bn else 'linear'
  c.checkpoint.every_epochs = 4  # One checkpoint: every worker's state at the end.
  return c


def variant_reference(x, y, algorithm, warmup=0, workers_out=None, **options):
  """The reference's final [w, b] (and [mean, var]) for `variant_config`'s run."""
  data = shards_of(x, y, [10, 10, 10])
  return reference.run(algorithm, data, 3, 8, 0.5, 0.9, 1e-4, 3, [5, 5, 5],
                       warmup_steps=2 * warmup, workers_out=workers_out, **options)  # fmt: skip


def read_variant(workdir):
  """(final [w, b, (mean, var)], each worker's [w, b, momentum w, momentum b, (mean, var)])."""
  with np.load(os.path.join(workdir, 'final_params.npz')) as f:
    names = ['params/Dense_0/kernel', 'params/Dense_0/bias']
    names += [n for n in ('batch_stats/BatchNorm_0/mean', 'batch_stats/BatchNorm_0/var') if n in f]
    final = [f[n] for n in names]
  ckpt = checkpoints.Checkpointer(str(workdir), 0, 1, lambda: None, 1)
  state = ckpt.restore(8)[0]['state']
  leaves = [state['params']['Dense_0'][k] for k in ('kernel', 'bias')]
  leaves += [state['momentum']['Dense_0'][k] for k in ('kernel', 'bias')]
  if state['batch_stats']:
    leaves += [state['batch_stats']['BatchNorm_0'][k] for k in ('mean', 'var')]
  return final, [[leaf[i] for leaf in leaves] for i in range(3)]


CORRECTIONS = {
  'reset': dict(correction='reset'),
  'blend': dict(correction='blend', alpha=0.5),
  'outer_sgd': dict(correction='outer_sgd', outer=(0.7, 0.9, True)),
  'delay_1': dict(correction='cocod', delay=1),
  'delay_2': dict(correction='cocod', delay=2),
  'eager_half_gamma_1': dict(correction='eager', eager=(0.5, 1.0)),
  'eager_sixteenth': dict(correction='eager', eager=(1 / 16, 0.0)),
  'eager_in_flight': dict(correction='eager', eager=(0.25, 1.0), warmup=0),
  'anchor': dict(correction='anchor', anchor=(0.6, 0.7)),
  'anchor_no_momentum': dict(correction='anchor', anchor=(0.5, 0.0)),
}


def correction_config(path, correction, alpha=0.0, outer=(0.7, 0.9, True), eager=(1.0, 0.0),
                      anchor=(0.6, 0.7), delay=None, warmup=1):  # fmt: skip
  c = variant_config(path, 'cocod_sgd', **{**VARIANTS['bn_averaged'], 'warmup': warmup})
  c.algorithm.correction = correction
  c.algorithm.alpha = alpha
  c.algorithm.outer_lr, c.algorithm.outer_momentum, c.algorithm.outer_nesterov = outer
  c.algorithm.eager_lambda, c.algorithm.eager_gamma = eager
  c.algorithm.anchor_pull, c.algorithm.anchor_momentum = anchor
  c.algorithm.delay = delay
  config_validation.validate(c)
  return c

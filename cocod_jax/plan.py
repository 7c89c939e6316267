"""The plan of a run: what follows from the config and the data before anything runs (pure),
built once by `make_plan` and passed down; and each epoch's batches of a worker (`batch_table`).

The loop and the algorithms read the plan, not the config: the batch sizes and weights, the
shards, the steps of an epoch, the model and its compiled step functions, the learning-rate
schedule (built here alone), each worker's local steps for a period k, and the few settings of
the loop itself. `make_plan` also refuses a config the data cannot serve (a batch larger than a
worker's shard, a model that cannot take the examples), so that an entry point finds out before
anything is written.
"""

from typing import Any
from typing import Callable
from typing import NamedTuple

import numpy as np

from cocod_jax import models
from cocod_jax import schedules
from cocod_jax import shares
from cocod_jax import steps as steps_lib
from cocod_jax.data import pipeline as input_pipeline

AUTO = 'auto'  # algorithm.period (and delay) measured on the cluster: cluster/period_auto.py


class Plan(NamedTuple):
  """What follows from the config and the data before anything runs (pure)."""

  sizes: list[int]  # M_i
  weights: list[float]  # w_i
  shards: list[np.ndarray]  # indices of each worker's examples
  rows: list[int]  # batches in each worker's shard: its local steps in an epoch
  steps_per_epoch: int  # global steps
  num_epochs: int
  model: Any
  fns: steps_lib.StepFns
  lr_fn: Callable  # lr_t of a global step (schedules.learning_rate_fn), the only one built
  local_periods: Callable[[int], list[int]]  # k -> k_i of every worker (shares.local_periods)
  speeds: list[float]  # C_i
  seed: int
  shuffle: bool  # dataset.shuffle: each epoch's batches drawn in a new order
  optimizer: str  # optimizer.name: the shape of the momentum buffers
  eval_train_examples: int
  sample_every: int  # timeline.sample_every
  checkpoint: Any  # the config's `checkpoint` part


def make_plan(config, dataset) -> Plan:
  """The plan of a run of `config` on `dataset`.

  With `algorithm.period='auto'` (k measured once the cluster is up: cluster/period_auto.py) the
  plan is made for k = 1: for the algorithms that allow it every worker's local period is k, so
  the steps of an epoch are the batches of the shortest shard whatever k is, and the shard
  weights `M_i k` are proportional to `M_i` (exact integers in float64: the same shards to the
  bit). The same plan serves every k.

  Raises:
    DataError: a worker's shard holds less than one of its batches (pipeline.check_batches).
    errors.UsageError: the model cannot take the dataset's examples (models.check_input).
    Each one line, before anything is written.
  """
  k = 1 if config.algorithm.period == AUTO else config.algorithm.period
  sizes = shares.batch_sizes(config)
  input_pipeline.check_batches(len(dataset.x_train), sizes, config.batch_size)
  model = models.get_model(config.model.name, dataset.num_classes)
  d = config.dataset
  where = f'dataset.path={d.path!r}' if d.name == 'npz' else f'dataset.name={d.name!r}'
  models.check_input(model, config.model.name, tuple(dataset.x_train.shape[1:]), where)
  periods = shares.local_periods(config, k)
  shards = input_pipeline.shard_indices(
    len(dataset.x_train), shares.shard_weights(sizes, periods), d.shuffle, config.seed
  )
  rows = [len(s) // m for s, m in zip(shards, sizes)]
  # An epoch ends when the first worker has used its whole shard (k_i = k: its rows).
  steps_per_epoch = min(r * k // k_i for r, k_i in zip(rows, periods))
  lr_fn = schedules.learning_rate_fn(config, sizes, steps_per_epoch)
  augment_on = bool(config.dataset.augment) and dataset.augment_ok
  fns = steps_lib.make_step_fns(model, config.optimizer, lr_fn, dataset.normalize, augment_on)
  return Plan(
    sizes=sizes,
    weights=shares.worker_weights(sizes),
    shards=shards,
    rows=rows,
    steps_per_epoch=steps_per_epoch,
    num_epochs=config.num_epochs,
    model=model,
    fns=fns,
    lr_fn=lr_fn,
    local_periods=lambda k: shares.local_periods(config, k),
    speeds=shares.speeds(config),
    seed=config.seed,
    shuffle=bool(d.shuffle),
    optimizer=config.optimizer.name,
    eval_train_examples=config.eval_train_examples,
    sample_every=config.timeline.sample_every,
    checkpoint=config.checkpoint,
  )


def batch_table(plan: Plan, epoch: int, worker: int, width: int) -> np.ndarray:
  """[rows_i, width] indices into `worker`'s shard for one epoch (columns >= M_i unused).

  Drawn from a generator of its own per (seed, epoch, worker), so every runtime and every process
  draws the same batches without sharing a random stream.
  """
  size, m_i, rows = len(plan.shards[worker]), plan.sizes[worker], plan.rows[worker]
  if plan.shuffle:
    order = np.random.default_rng([plan.seed, epoch, worker]).permutation(size)
  else:
    order = np.arange(size)
  out = np.zeros((rows, width), np.int32)
  out[:, :m_i] = order[: rows * m_i].reshape(rows, m_i)
  return out

"""The plan of a run: what follows from the config and the data before anything runs (pure),
built once by `make_plan` and passed down; and each epoch's batches of a worker (`batch_table`)."""

from typing import Any
from typing import Callable
from typing import NamedTuple

import numpy as np

from cocod_jax import models
from cocod_jax import schedules
from cocod_jax import steps as steps_lib
from cocod_jax.data import pipeline as input_pipeline


class Plan(NamedTuple):
  """What follows from the config and the data before anything runs (pure)."""

  sizes: list[int]  # M_i
  weights: list[float]  # w_i
  shards: list[np.ndarray]  # indices of each worker's examples
  rows: list[int]  # batches in each worker's shard: its local steps in an epoch
  steps_per_epoch: int  # global steps
  model: Any
  fns: steps_lib.StepFns
  lr_fn: Callable


def make_plan(config, dataset) -> Plan:
  sizes = schedules.batch_sizes(config)
  shards = input_pipeline.shard_indices(
    len(dataset.x_train), schedules.shard_weights(config), config.dataset.shuffle, config.seed
  )
  rows = [len(s) // m for s, m in zip(shards, sizes)]
  k = config.algorithm.period
  periods = schedules.local_periods(config, k)
  # An epoch ends when the first worker has used its whole shard (k_i = k: its rows).
  steps_per_epoch = min(r * k // k_i for r, k_i in zip(rows, periods))
  augment_on = bool(config.dataset.augment) and dataset.augment_ok
  model = models.get_model(config.model.name, dataset.num_classes)
  fns = steps_lib.make_step_fns(
    model, config, sizes, steps_per_epoch, dataset.normalize, augment_on
  )
  lr_fn = schedules.learning_rate_fn(config, sizes, steps_per_epoch)
  return Plan(
    sizes,
    schedules.worker_weights(sizes),
    shards,
    rows,
    steps_per_epoch,
    model,
    fns,
    lr_fn,
  )


def batch_table(config, plan: Plan, epoch: int, worker: int, width: int) -> np.ndarray:
  """[rows_i, width] indices into `worker`'s shard for one epoch (columns >= M_i unused).

  Drawn from a generator of its own per (seed, epoch, worker), so every runtime and every process
  draws the same batches without sharing a random stream.
  """
  size, m_i, rows = len(plan.shards[worker]), plan.sizes[worker], plan.rows[worker]
  if config.dataset.shuffle:
    order = np.random.default_rng([config.seed, epoch, worker]).permutation(size)
  else:
    order = np.arange(size)
  out = np.zeros((rows, width), np.int32)
  out[:, :m_i] = order[: rows * m_i].reshape(rows, m_i)
  return out

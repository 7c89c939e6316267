"""AsynLocal-SGD (Yu, Yang & Zhu 2019; docs/algorithms.md, "Heterogeneous clusters"), period k.

Every worker uses the basic batch M. A round lasts as long as the slowest worker needs for k
steps; worker i runs `k_i = max(1, floor(k * C_i / C_min))` local steps in it (the fast workers
keep running local SGD instead of waiting); then all workers block and set `x_i <- mean_j x_j`
(equal batches, so equal weights). Local step s of worker i in the round that starts at global
step t0 uses `lr_{t0 + floor(s * k / k_i)}`; global steps count the slowest worker's steps, and
epochs, schedules and the period warm-up are in global steps. The text of the original algorithm
was not available: this is the reading "faster workers continue local SGD". With all speeds
equal it is Local-SGD, bit for bit.

Global step t0 + j therefore holds, for worker i, the local steps s with floor(s * k / k_i) = j
(at least one, since k_i >= k), all at learning rate lr_{t0 + j}. On the one-host cluster the
workers step together, so a global step runs as many masked steps as the busiest worker needs
there and the others sit out (`steps.masked_step` with `active` False); under MPI each rank runs
its own count. The training loss reported is that of each worker's first local step of every
global step.
"""

import numpy as np

from cocod_jax import schedules
from cocod_jax import steps
from cocod_jax.algorithms import base


def steps_at(k: int, periods: list[int], j: int) -> list[int]:
  """How many local steps each worker (k_i = periods[i]) takes at offset j of a round of k."""
  return [sum(1 for s in range(k_i) if s * k // k_i == j) for k_i in periods]


class AsynLocalSGD(base.RoundAlgorithm):
  name = 'asynlocal_sgd'

  def __init__(self, ctx):
    super().__init__(ctx)
    self.round_k = 1
    self._active = {}  # (k, j) -> the `active` flags of each substep, on the devices

  def round_length(self, t):
    self.round_k = super().round_length(t)
    return self.round_k

  def host_state(self):
    return dict(super().host_state(), round_k=self.round_k)

  def load_host_state(self, d):
    super().load_host_state(d)
    self.round_k = d['round_k']

  def _substeps(self, j):
    key = (self.round_k, j)
    if key not in self._active:
      counts = steps_at(self.round_k, self.plan.local_periods(self.round_k), j)
      here = self.cluster.workers
      self._active[key] = [
        self.cluster.put({i: np.bool_(u < counts[i]) for i in here})
        for u in range(max(counts[i] for i in here))
      ]
    return self._active[key]

  def step(self, state, data, t):
    lr_step = self.cluster.put({i: np.int32(t) for i in self.cluster.workers})
    first_loss = None
    for active in self._substeps(t - self.round_start):
      with self.tl.span('step', 'step'):
        state, loss = self.tl.ready(self.cluster.masked_step(state, data, lr_step, active))
      first_loss = loss if first_loss is None else first_loss
    if self.closes_round(t):
      label = 'the model at the end of ' + self.round_label()
      averaged = self.average(steps.synced_part(state, self.options), label, t)
      state = steps.with_part(state, averaged)
    return state, first_loss

  def worker_steps(self, t):
    done = np.zeros(self.cluster.num_workers, np.int64)
    start = 0
    while start < t:
      k = schedules.period_at(self.options, start, self.plan.steps_per_epoch)
      periods = self.plan.local_periods(k)
      end = start + k
      for j in range(min(end, t) - start):
        done += steps_at(k, periods, j)
      start = end
    return done.tolist()

"""Local-SGD (Stich 2018; docs/algorithms.md), period k.

Each worker runs `x_i <- OPT(x_i, g_i(x_i))`; after the last step of every round (k steps, 1
during the period warm-up) the workers block and set `x_i <- sum_j w_j x_j`. A round that training
ends in the middle of needs no average of its own: the final average of the loop is that average.
"""

from cocod_jax import steps
from cocod_jax.algorithms import base


class LocalSGD(base.RoundAlgorithm):
  name = 'local_sgd'

  def step(self, state, data, t):
    with self.tl.span('step', 'step'):
      state, loss = self.tl.ready(self.cluster.local_step(state, data))
    if self.closes_round(t):
      label = 'the model at the end of ' + self.round_label()
      averaged = self.average(steps.synced_part(state, self.options), label, t)
      state = steps.with_part(state, averaged)
    return state, loss

"""Pipe-SGD (Li et al., NeurIPS 2018; docs/algorithms.md) with gradient staleness 1.

Step t computes g_i(x_t) and starts its allreduce in the background; meanwhile it applies the
average that finished, `x_{t+1} = OPT(x_t, gbar_{t-1})`. Step 0 only fills the pipeline
(`x_1 = x_0`); the average still in flight after the last step is waited for and dropped.
"""

from cocod_jax import steps
from cocod_jax.algorithms import base


class PipeSGD(base.Algorithm):
  name = 'pipe_sgd'

  def __init__(self, ctx):
    super().__init__(ctx)
    self.pending = None  # The gradient average of step t-1, in flight (or waited for).

  def step(self, state, data, t):
    with self.tl.span('grads', 'step'):
      grads, new_bs, loss = self.tl.ready(self.cluster.compute_grads(state, data))
    averaged = None if self.pending is None else self.wait(self.pending)  # gbar_{t-1}
    # g_t's allreduce runs while x_{t+1} is applied and g_{t+1} computed (its local mean, under
    # MPI, first: it is timed apart from the update).
    payload = steps.gradient_payload(grads, new_bs, self.options)
    self.pending = self.start(payload, f'the gradients of step {t}', t)
    with self.tl.span('update', 'step'):
      if averaged is None:
        state = self.cluster.skip_step(state)  # Step 0 only fills the pipeline.
      else:
        state = self.cluster.apply_update(state, averaged['g'], averaged.get('bs', new_bs))
      state = self.tl.ready(state)
    return state, loss

  def drain(self, state):
    if self.pending is not None:
      self.pending = base.Waited(self.wait(self.pending, drain=True), self.pending.label)
    return state

  def state_dict(self):
    return {} if self.pending is None else {'pending': self.pending.value}

  def load_state_dict(self, tree):
    if 'pending' in tree:
      self.pending = base.Waited(tree['pending'], 'the gradients of the step before the restart')

  def finish(self):
    if self.pending is not None and not isinstance(self.pending, base.Waited):
      self.cluster.wait(self.pending)  # The last average is dropped, but never left in flight.
    self.pending = None

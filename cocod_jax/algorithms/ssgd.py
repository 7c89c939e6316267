"""S-SGD (docs/algorithms.md): every step, the weighted average of the workers' gradients, blocking.

    gbar = sum_i w_i g_i(x_t);  x_{t+1} = OPT(x_t, gbar)   on every worker

Workers stay identical. BatchNorm statistics travel with the gradients when they are averaged.
"""

from cocod_jax import steps
from cocod_jax.algorithms import base


class SSGD(base.Algorithm):
  name = 'ssgd'

  def step(self, state, data, t):
    with self.tl.span('grads', 'step'):
      grads, new_bs, loss = self.tl.ready(self.cluster.compute_grads(state, data))
    payload = steps.gradient_payload(grads, new_bs, self.options)
    averaged = self.average(payload, f'the gradients of step {t}', t)
    with self.tl.span('update', 'step'):
      state = self.cluster.apply_update(state, averaged['g'], averaged.get('bs', new_bs))
      state = self.tl.ready(state)
    return state, loss

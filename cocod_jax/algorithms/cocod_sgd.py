"""CoCoD-SGD (Shen et al., IJCAI 2019; ALGORITHMS.md), period k: computation and communication
decoupled.

At the start of a round a worker snapshots `s_i = x_i` and starts the weighted allreduce
`a = sum_j w_j s_j` in the background (Step I); meanwhile it runs the round's k local steps
(Step II); when both are done it applies the decoupled correction `x_i <- a + (x_i - s_i)`
(`correction.decoupled_correction`, an optax-style transform whose state is the snapshot). One
allreduce is in flight at a time, and it overlaps the k local steps.
"""

from cocod_jax import correction
from cocod_jax import steps
from cocod_jax.algorithms import base


class CoCoDSGD(base.RoundAlgorithm):
  name = 'cocod_sgd'

  def __init__(self, ctx):
    super().__init__(ctx)
    self.pending = None  # (the snapshot average in flight or waited for, the snapshot)

  def step(self, state, data, t):
    if self.pending is None:  # Step I: snapshot, and its allreduce in the background.
      with self.tl.span('snapshot', 'merge'):
        snap = self.tl.ready(self.cluster.snapshot(steps.synced_part(state, self.config)))
      label = 'the snapshot at the start of ' + self.round_label()
      self.pending = (self.start(snap.snapshot, label, t), snap)
    with self.tl.span('step', 'step'):  # Step II: the local steps.
      state, loss = self.tl.ready(self.cluster.local_step(state, data))
    if self.closes_round(t):
      handle, snap = self.pending
      averaged = self.wait(handle)
      with self.tl.span('correct', 'merge'):
        corrected = self.cluster.correct(steps.synced_part(state, self.config), averaged, snap)
        state = self.tl.ready(steps.with_part(state, corrected))
      self.pending = None
    return state, loss

  def drain(self, state):
    if self.pending is not None:
      handle, snap = self.pending
      self.pending = (base.Waited(self.wait(handle, drain=True), handle.label), snap)
    return state

  def state_dict(self):
    if self.pending is None:
      return {}
    waited, snap = self.pending
    return {'average': waited.value, 'snapshot': snap.snapshot}

  def load_state_dict(self, tree):
    if 'average' in tree:
      label = 'the snapshot of the round in progress at the restart'
      self.pending = (
        base.Waited(tree['average'], label),
        correction.CorrectionState(tree['snapshot']),
      )

  def finish(self):
    # A round that training ends in the middle of is not corrected: the final average that
    # follows gives sum_i w_i x_i either way, since with a = sum_i w_i s_i the corrected models
    # average to a + sum_i w_i x_i - sum_i w_i s_i = sum_i w_i x_i. Not cutting the round short
    # keeps a run that is continued for more epochs equal to one that ran them straight.
    if self.pending is not None and not isinstance(self.pending[0], base.Waited):
      self.cluster.wait(self.pending[0])
    self.pending = None

"""CoCoD-SGD (Shen et al., IJCAI 2019; ALGORITHMS.md), period k: computation and communication
decoupled.

At the start of a round a worker snapshots `s_i = x_i` and starts the weighted allreduce
`a = sum_j w_j s_j` in the background (Step I); meanwhile it runs the round's k local steps
(Step II); when both are done it applies the decoupled correction `x_i <- a + (x_i - s_i)`
(`correction.decoupled_correction`, an optax-style transform whose state is the snapshot). One
allreduce is in flight at a time, and it overlaps the k local steps.

`algorithm.correction` swaps the correction for another (`correction.py`: reset, blend,
outer_sgd); those return, with the corrected x, the state that the next round sends (`carried`
here), where the paper's snapshots the corrected x afresh.
"""

from cocod_jax import correction
from cocod_jax import steps
from cocod_jax.algorithms import base


class CoCoDSGD(base.RoundAlgorithm):
  name = 'cocod_sgd'

  def __init__(self, ctx):
    super().__init__(ctx)
    self.pending = None  # (the snapshot average in flight or waited for, the snapshot)
    self.carried = None  # The state the next round sends (corrections other than the paper's).

  def step(self, state, data, t):
    if self.pending is None:  # Step I: snapshot, and its allreduce in the background.
      with self.tl.span('snapshot', 'merge'):
        if self.carried is None:
          snap = self.tl.ready(self.cluster.snapshot(steps.synced_part(state, self.config)))
        else:
          snap, self.carried = self.carried, None
      label = 'the snapshot at the start of ' + self.round_label()
      self.pending = (self.start(snap.snapshot, label, t), snap)
    with self.tl.span('step', 'step'):  # Step II: the local steps.
      state, loss = self.tl.ready(self.cluster.local_step(state, data))
    if self.closes_round(t):
      handle, snap = self.pending
      averaged = self.wait(handle)
      with self.tl.span('correct', 'merge'):
        x = steps.synced_part(state, self.config)
        corrected, self.carried = self.cluster.correct(x, averaged, snap)
        state = self.tl.ready(steps.with_part(state, corrected))
      self.pending = None
    return state, loss

  def drain(self, state):
    if self.pending is not None:
      handle, snap = self.pending
      self.pending = (base.Waited(self.wait(handle, drain=True), handle.label), snap)
    return state

  def state_dict(self):
    tree = {}
    if self.pending is not None:
      waited, snap = self.pending
      tree['average'] = waited.value
      tree['snapshot'] = snap.snapshot
      rest = correction.to_tree(snap)
      del rest['snapshot']
      if rest:
        tree['round'] = rest
    if self.carried is not None:
      tree['carried'] = correction.to_tree(self.carried)
    return tree

  def load_state_dict(self, tree):
    tx = self.cluster.correction
    if 'average' in tree:
      label = 'the snapshot of the round in progress at the restart'
      snap = {'snapshot': tree['snapshot'], **tree.get('round', {})}
      self.pending = (base.Waited(tree['average'], label), correction.from_tree(snap, tx))
    if 'carried' in tree:
      self.carried = correction.from_tree(tree['carried'], tx)

  def finish(self):
    # A round that training ends in the middle of is not corrected: the final average that
    # follows gives sum_i w_i x_i either way, since with a = sum_i w_i s_i the corrected models
    # average to a + sum_i w_i x_i - sum_i w_i s_i = sum_i w_i x_i. Not cutting the round short
    # keeps a run that is continued for more epochs equal to one that ran them straight. With
    # the other corrections the final model is sum_i w_i x_i as well (ALGORITHMS.md): the local
    # models as they stand, the average in flight dropped.
    if self.pending is not None and not isinstance(self.pending[0], base.Waited):
      self.cluster.wait(self.pending[0])
    self.pending = None
    self.carried = None

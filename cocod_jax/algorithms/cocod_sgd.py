"""CoCoD-SGD (Shen et al., IJCAI 2019; docs/algorithms.md), period k: computation and communication
decoupled.

At the start of a round a worker snapshots `s_i = x_i` and starts the weighted allreduce
`a = sum_j w_j s_j` in the background (Step I); meanwhile it runs the round's k local steps
(Step II); when both are done it applies the decoupled correction `x_i <- a + (x_i - s_i)`
(`correction.decoupled_correction`, an optax-style transform whose state is the snapshot). One
allreduce is in flight at a time, and it overlaps the k local steps.

`algorithm.correction` swaps the correction for another (`correction.py`: reset, blend,
outer_sgd, eager, anchor); those return, with the corrected x, the state that the next round
sends (`carried` here), where the paper's snapshots the corrected x afresh.

`algorithm.delay` (tau, 1 <= tau <= k; None: k, the paper's) takes the snapshot tau steps before
the round's end instead of at its start: the allreduce then overlaps the round's last tau steps,
and the correction `x_i <- a + (x_i - s_i)` brings in the others' progress up to tau steps old
instead of k. A round shorter than tau (the period warm-up) takes its snapshot at its start.
"""

import jax
import numpy as np

from cocod_jax import steps
from cocod_jax.algorithms import base
from cocod_jax.algorithms import correction


class CoCoDSGD(base.RoundAlgorithm):
  name = 'cocod_sgd'

  def __init__(self, ctx):
    super().__init__(ctx)
    self.pending = None  # (the snapshot average in flight or waited for, the snapshot)
    self.carried = None  # The state the next round sends (corrections other than the paper's).
    # The compressed snapshot allreduce (comm.dtype, comm.error_feedback; compression.py).
    self.codec = getattr(self.cluster, 'codec', None)
    self.reference = None  # The last average: what the next message is taken against.
    self.error = None  # This sender's rounding error (error feedback), on the worker axis.
    self.stats, self.stat_sums, self.rounds, self.bytes = [], [0.0, 0.0, 0.0], 0, 0
    self.delay = self.options.delay  # tau (None: the whole round).
    self.rates = None
    if self.options.correction == 'anchor':  # It divides by the round's last rate.
      steps_total = self.plan.num_epochs * self.plan.steps_per_epoch
      with jax.transfer_guard('allow'):  # Once: lr_t of every step, on the host (a constant
        # rate comes back as one number: one entry a step all the same).
        rates = np.asarray(jax.device_get(self.plan.lr_fn(np.arange(steps_total))))
        self.rates = np.broadcast_to(rates, (steps_total,))
    self.no_rate = None

  def snapshot_step(self) -> int:
    """The step before which the current round takes its snapshot: tau steps before its end."""
    length = self.round_end - self.round_start
    return self.round_end - (length if self.delay is None else min(self.delay, length))

  def _rate(self, t):
    """The learning rate of step `t` on the devices (an explicit transfer); only `anchor` uses
    it, the other corrections get a zero placed once."""
    if self.rates is None:
      if self.no_rate is None:
        self.no_rate = jax.device_put(np.float32(0.0), self.cluster.replicated)
      return self.no_rate
    return jax.device_put(self.rates[t], self.cluster.replicated)

  def step(self, state, data, t):
    if self.pending is None and t >= self.snapshot_step():  # Step I: snapshot, and its
      # allreduce in the background.
      with self.tl.span('snapshot', 'merge'):
        if self.carried is None:
          snap = self.tl.ready(self.cluster.snapshot(steps.synced_part(state, self.options)))
        else:
          snap, self.carried = self.carried, None
      label = 'the snapshot at the start of ' + self.round_label()
      self.pending = (self._start(snap, label, t), snap)
    with self.tl.span('step', 'step'):  # Step II: the local steps.
      state, loss = self.tl.ready(self.cluster.local_step(state, data))
    if self.closes_round(t):
      handle, snap = self.pending
      averaged = self.wait(handle)
      if not isinstance(handle, base.Waited):
        averaged = self._arrived(averaged)
      with self.tl.span('correct', 'merge'):
        x = steps.synced_part(state, self.options)
        corrected, self.carried = self.cluster.correct(x, averaged, snap, self._rate(t))
        state = self.tl.ready(steps.with_part(state, corrected))
      self.pending = None
    return state, loss

  def evaluated(self, mean):
    """The model to evaluate from the weighted mean of the workers' models: the mean itself, or
    the eager correction's count of every worker's progress at full weight. After `drain`: a
    round in flight has its average here; at a round's end the next snapshots would be the
    models themselves, so their average is the mean."""
    if self.cluster.evaluated is None:
      return mean
    if self.pending is not None:
      waited, snap = self.pending
      part = {k: mean[k] for k in waited.value}
      average = waited.value
    else:
      snap = self.carried
      if snap is None:  # After `finish`: the models are the final model already.
        return mean
      part = {k: mean[k] for k in snap.snapshot}
      average = part
    return {**mean, **self.cluster.evaluated(part, average, snap)}

  def drain(self, state):
    if self.pending is not None:
      handle, snap = self.pending
      if not isinstance(handle, base.Waited):  # (a checkpoint may follow an epoch's end)
        value = self._arrived(self.wait(handle, drain=True))
        self.pending = (base.Waited(value, handle.label), snap)
    return state

  # ------------------------------------------------------------------ the compressed allreduce

  def _start(self, snap, label, t):
    """Starts the round's snapshot average: the float32 one, or the compressed one against the
    reference (outer_sgd's anchor, else the last average; in the first round every worker's
    snapshot is x_0, so each is its own reference and sends zeros)."""
    if self.codec is None:
      return self.start(snap.snapshot, label, t)
    ref = snap.anchor if snap.anchor is not None else self.reference
    ref = snap.snapshot if ref is None else ref
    self.bytes = self.bytes or self.cluster.payload_bytes(snap.snapshot)

    def via(tree, label, t, timed):
      return self.cluster.start_compressed(tree, ref, self.error, label, t, timed=timed)

    return self.start(snap.snapshot, label, t, via=via)

  def _arrived(self, value):
    """The average out of a collective's value (the compressed one also brings the next error
    and, on the one-host cluster, the rounding statistics)."""
    if self.codec is None:
      return value
    averaged, self.error, stats = value
    self.reference = averaged
    self.rounds += 1
    if stats is not None:
      self.stats.append(stats)
    return averaged

  def _fold_stats(self):
    if self.stats:  # An explicit transfer, at a checkpoint or the end (never inside a round).
      sums = np.sum(np.asarray(jax.device_get(self.stats), np.float64), axis=0)
      self.stat_sums = [a + float(b) for a, b in zip(self.stat_sums, sums)]
      self.stats = []

  def summary(self):
    """The compressed allreduce's figures for results.json (None for the float32 one)."""
    if self.codec is None:
      return None
    self._fold_stats()
    err, update, model = self.stat_sums
    out = {
      'dtype': self.codec.dtype,
      'error_feedback': self.codec.error_feedback,
      'rounds': self.rounds,
      'payload_bytes': self.bytes,  # What one sender sends a round (the payload, scales and
      # flags as handed to MPI; on the one-host cluster the payload and scales it would send).
    }
    if update > 0:  # Only the one-host cluster computes the float32 average beside it.
      out['update_rel_error'] = (err / update) ** 0.5
      out['model_rel_error'] = (err / model) ** 0.5
    return out

  def host_state(self) -> dict:
    self._fold_stats()
    return {**super().host_state(), 'compression': [self.stat_sums, self.rounds, self.bytes]}

  def load_host_state(self, d: dict):
    super().load_host_state(d)
    if 'compression' in d:
      self.stat_sums, self.rounds, self.bytes = d['compression']

  def state_dict(self):
    tree = {}
    if self.reference is not None:
      tree['reference'] = self.reference
    if self.error is not None:
      tree['error'] = self.error
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
    self.reference, self.error = tree.get('reference'), tree.get('error')
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
    # the other corrections the final model is sum_i w_i x_i as well (docs/algorithms.md): the local
    # models as they stand, the average in flight dropped.
    if self.pending is not None and not isinstance(self.pending[0], base.Waited):
      self.cluster.wait(self.pending[0])
    self.pending = None
    self.carried = None

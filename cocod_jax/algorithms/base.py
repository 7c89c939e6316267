"""The small interface that the training loop drives, whichever algorithm runs.

The loop (`train.py`) calls, for every local iteration `t`, `state, loss = algorithm.step(state,
data, t)`; at the end of an epoch `state = algorithm.drain(state)` (a collective still in flight
is waited for, as training time, so that the evaluation average never runs beside it); after the
last step `algorithm.finish()`. What a step computes, which collective it starts and which one it
waits for is the algorithm's own business, written once in its file with the cluster's compiled
per-worker functions and its `start` / `wait` / `weighted_mean`; the same code runs on the
one-host cluster and under MPI.

Rounds: `round_length(t)` is the number of steps of the round that starts at step `t` (1 for
algorithms that communicate every step). The loop starts rounds (`begin_round`), the algorithm
keeps the round's position, and the timeline times whole rounds.
"""

from typing import Any
from typing import NamedTuple

from cocod_jax import schedules
from cocod_jax import timeline as timeline_lib


class Waited(NamedTuple):
  """The value of a collective that was already waited for (at an epoch end) but not yet used."""

  value: Any
  label: str


class Context(NamedTuple):
  """What an algorithm works with: the cluster, its options, the timeline and the run's plan."""

  cluster: Any  # cluster.one_host.OneHostCluster or cluster.ranks.RanksCluster
  options: Any  # the config's `algorithm` part, with the period k the run uses
  timeline: timeline_lib.Timeline
  plan: Any  # plan.Plan: steps per epoch, the rates, the workers' local periods


class Algorithm:
  """Base class: one local iteration at a time, collectives through the cluster.

  Subclasses set `name` and implement `step`; algorithms with a collective in flight across
  steps also implement `drain` and `finish`.
  """

  name = ''

  def __init__(self, ctx: Context):
    self.ctx = ctx
    self.cluster = ctx.cluster
    self.options = ctx.options
    self.plan = ctx.plan
    self.tl = ctx.timeline
    # Set by the loop: the first step of the current round and the first step after it.
    self.round_start = 0
    self.round_end = 0

  def round_length(self, t: int) -> int:
    """Steps in the round that starts at step `t`."""
    del t
    return 1

  def begin_round(self, t: int) -> int:
    """The loop starts a round at step `t`; returns its length. Training may end inside it."""
    self.round_start, self.round_end = t, t + self.round_length(t)
    return self.round_end - self.round_start

  def step(self, state, data, t: int):
    """Local iteration `t`: returns (new state, this step's training loss per worker)."""
    raise NotImplementedError

  def drain(self, state):
    """End of an epoch: nothing in flight by default."""
    return state

  def finish(self):
    """After the last step: nothing in flight by default."""

  def evaluated(self, mean):
    """The model to evaluate (and to save at the end), from the weighted mean of the workers'
    model parts (stacked on the worker axis): the mean itself by default."""
    return mean

  # ------------------------------------------------------------------ checkpoints

  def host_state(self) -> dict:
    """The loop's round position (JSON), for a checkpoint."""
    return {'round_start': self.round_start, 'round_end': self.round_end}

  def load_host_state(self, d: dict):
    self.round_start, self.round_end = d['round_start'], d['round_end']

  def state_dict(self) -> dict:
    """Arrays of a collective in flight, after `drain` (the value it will apply); none here."""
    return {}

  def load_state_dict(self, tree: dict):
    """Takes back `state_dict()`'s arrays, already placed on the cluster's devices."""
    del tree

  def summary(self) -> dict | None:
    """Figures of the algorithm's own for results.json (None: none)."""
    return None

  def worker_steps(self, t: int) -> list[int]:
    """Each worker's local step counter before global step `t` (one local step per step)."""
    return [t] * self.cluster.num_workers

  # ------------------------------------------------------------------ helpers for subclasses

  def closes_round(self, t: int) -> bool:
    return t + 1 == self.round_end

  def start(self, tree, label: str, t: int, via=None):
    """Starts a collective in the background. Under MPI its first part, the local mean over the
    rank's workers, runs on the rank's devices in line with the steps; sampled rounds wait for it
    here, to time it (a `local_mean` span, communication that the main thread does not hide).
    `via(tree, label, t, timed)`: another collective than the cluster's weighted average."""
    via = via or (lambda tree, label, t, timed: self.cluster.start(tree, label, t, timed=timed))
    handle = via(tree, label, t, self.tl.sampling)
    local = getattr(handle, 'local_span', None)
    if local is not None:
      self.tl.add('local_mean', 'local', *local, thread=timeline_lib.LOCAL, in_wait=False)
    return handle

  def wait(self, handle, drain=False):
    """Waits for a collective, recorded as a `wait` span (communication exposed to training).

    `drain`: the wait at the end of an epoch for a collective still in flight, which steps of
    the same epoch would otherwise have hidden.
    """
    if isinstance(handle, Waited):
      return handle.value
    with self.tl.span('wait', 'wait', label=handle.label, drain=drain):
      value = self.tl.ready(self.cluster.wait(handle))
    self._record(handle)
    return value

  def average(self, tree, label: str, t: int):
    """A blocking weighted average: all of it is exposed, so all of it is one `wait` span."""
    with self.tl.span('wait', 'wait', label=label, drain=False):
      handle = self.cluster.start(tree, label, t, blocking=True)
      value = self.tl.ready(self.cluster.wait(handle))
    self._record(handle, blocking=True)
    return value

  def collective_args(self, handle) -> dict:
    """What the timeline notes beside a collective's allreduce span (nothing by default)."""
    del handle
    return {}

  def _record(self, handle, blocking=False):
    span = getattr(handle, 'span', None)
    if span is not None:  # The MPI communicator times the staging and the allreduce.
      args = self.collective_args(handle)
      self.tl.add('allreduce', 'allreduce', *span, thread=timeline_lib.COMM, **args)
    local = getattr(handle, 'local_span', None)
    if blocking and local is not None:  # Inside the `wait` span: exposed there already.
      self.tl.add('local_mean', 'local', *local, thread=timeline_lib.LOCAL, in_wait=True)


class RoundAlgorithm(Algorithm):
  """Algorithms that communicate once per round of k local steps (the period warm-up aside)."""

  def round_length(self, t: int) -> int:
    return schedules.period_at(self.options, t, self.plan.steps_per_epoch)

  def round_label(self) -> str:
    return f'the round of steps {self.round_start}-{self.round_end - 1}'

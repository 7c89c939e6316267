"""Streamed CoCoD-SGD (docs/algorithms.md, "Streamed CoCoD-SGD"): the synced part in P fragments,
one fragment's snapshot allreduce a step, each corrected tau steps after its snapshot.

`algorithm.fragments` = P > 1 with `algorithm.name='cocod_sgd'` (P = 1 is the paper's CoCoD-SGD,
`cocod_sgd.py`). The synced part is flattened in `jax.tree.flatten` order, each leaf row-major,
into N elements; element g belongs to fragment floor(g P / N) (`edges`). In a round of L steps
(`schedule`), fragment f ends at step e_f = floor((f + 1) L / P) - 1 of the round and its snapshot
is taken before step max(0, e_f - tau + 1); at the end of step e_f every worker's elements of the
fragment get `x_i <- x_i + (a - s_i)`, `a = sum_j w_j s_j`. A round shorter than P (the period
warm-up's rounds of one step) averages the whole model as one fragment by CoCoD-SGD's delay rule:
its snapshot before step L - min(tau, L), its correction at the end of step L - 1. At a step
boundary the corrections due come first, then the snapshots due. tau = `algorithm.delay`,
1 when not given; with tau > 1 up to tau fragments are in flight, queued in order on the
communicator's one thread.

Each average is one fragment's elements only, so under MPI only that slice is staged to the host
and sent. Every element is still averaged once a round, and the correction keeps the weighted mean
of the workers' models, so the model evaluated and saved (the weighted mean) needs no correction
of its own. A round that training ends in the middle of is closed, as CoCoD-SGD's is, by nothing
but the final average: the fragments still in flight are dropped, and rounds never depend on
where training ends (a run continued for more epochs equals one that ran them straight).
"""

import functools
import math

import jax
import jax.numpy as jnp

from cocod_jax import steps
from cocod_jax.algorithms import base

WHOLE = -1  # The fragment index of a round shorter than P: the whole synced part at once.
WHOLE_LABEL = 'the whole model'  # How its collective's label starts.


def edges(n: int, p: int) -> list[int]:
  """The first element of each of the `p` fragments of `n` elements, and `n`: fragment f holds
  the elements g with floor(g p / n) = f, [ceil(f n / p), ceil((f + 1) n / p))."""
  return [-(-f * n // p) for f in range(p + 1)]


def schedule(length: int, p: int, tau: int) -> list[tuple[int, int, int]]:
  """(fragment, step before which its snapshot is taken, step after which it is corrected) of
  every fragment of a round of `length` steps, counted from the round's start, in the order their
  snapshots are taken (and their corrections made)."""
  if length < p:
    return [(WHOLE, length - min(tau, length), length - 1)]
  out = []
  for f in range(p):
    end = (f + 1) * length // p - 1
    out.append((f, max(0, end - tau + 1), end))
  return out


def pieces(sizes: list[int], lo: int, hi: int) -> tuple[tuple[int, int, int], ...]:
  """Where the elements [lo, hi) of the flattened leaves (of `sizes` elements each) are:
  (leaf, first, end) within each leaf they touch, in order."""
  out, offset = [], 0
  for j, size in enumerate(sizes):
    a, b = max(lo, offset), min(hi, offset + size)
    if a < b:
      out.append((j, a - offset, b - offset))
    offset += size
  return tuple(out)


def take(leaves, where):
  """The fragment `where` (`pieces`) of every worker: [W, n] (pure, jittable; a fresh buffer)."""
  width = leaves[0].shape[0]
  parts = [leaves[j].reshape(width, -1)[:, a:b] for j, a, b in where]
  return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=1)


def correct(touched, average, snapshot, where):
  """The leaves that the fragment `where` touches, with its elements moved to `x + (a - s)`
  (pure, jittable): `touched` those leaves in order, `average` and `snapshot` [W, n]."""
  delta = average - snapshot
  out, c = [], 0
  for leaf, (_, a, b) in zip(touched, where):
    flat = leaf.reshape(leaf.shape[0], -1)
    out.append(flat.at[:, a:b].add(delta[:, c : c + b - a]).reshape(leaf.shape))
    c += b - a
  return out


class StreamedCoCoDSGD(base.RoundAlgorithm):
  """CoCoD-SGD with `algorithm.fragments` > 1 (see the module docstring)."""

  name = 'cocod_sgd'

  def __init__(self, ctx):
    super().__init__(ctx)
    self.fragments = int(self.options.fragments)
    self.delay = 1 if self.options.delay is None else int(self.options.delay)
    self.started = 0  # Entries of the current round's schedule whose snapshot was taken.
    # In flight or waited for, oldest first: (schedule entry, handle or base.Waited, snapshot).
    self.queue = []
    self.layout = None  # The synced part's leaf sizes (per worker), at the first snapshot.
    self._fns = {}  # fragment -> (its pieces, compiled take, compiled correct)
    self.bytes = {}  # fragment -> bytes one collective of it hands to the communicator
    self._queued = []  # A checkpoint's queued schedule entries, until its arrays are loaded.
    self.tl.fragments = self.fragments

  def begin_round(self, t: int) -> int:
    self.started = 0
    return super().begin_round(t)

  def round_schedule(self):
    return schedule(self.round_end - self.round_start, self.fragments, self.delay)

  def _compiled(self, fragment: int, leaves):
    """The pieces of `fragment` and its compiled take and correct (built once each)."""
    if self.layout is None:
      self.layout = [math.prod(a.shape[1:]) for a in leaves]
    if fragment not in self._fns:
      n = sum(self.layout)
      lo, hi = (0, n) if fragment == WHOLE else edges(n, self.fragments)[fragment : fragment + 2]
      where = pieces(self.layout, lo, hi)
      self._fns[fragment] = (
        where,
        jax.jit(functools.partial(take, where=where)),
        jax.jit(functools.partial(correct, where=where), donate_argnums=0),
      )
    return self._fns[fragment]

  def _label(self, fragment: int) -> str:
    what = WHOLE_LABEL if fragment == WHOLE else f'fragment {fragment} of {self.fragments}'
    return f'{what} in {self.round_label()}'

  def step(self, state, data, t):
    r = t - self.round_start
    plan = self.round_schedule()
    while self.started < len(plan) and plan[self.started][1] <= r:  # The snapshots due.
      fragment = plan[self.started][0]
      with self.tl.span('snapshot', 'merge'):
        leaves = jax.tree.leaves(steps.synced_part(state, self.options))
        snap = self.tl.ready(self._compiled(fragment, leaves)[1](leaves))
      tree = {'fragment': snap}
      if fragment not in self.bytes:
        self.bytes[fragment] = self.cluster.staged_bytes(tree)
      self.queue.append((self.started, self.start(tree, self._label(fragment), t), snap))
      self.started += 1
    with self.tl.span('step', 'step'):
      state, loss = self.tl.ready(self.cluster.local_step(state, data))
    while self.queue and plan[self.queue[0][0]][2] == r:  # The corrections due.
      entry, handle, snap = self.queue.pop(0)
      averaged = self.wait(handle)['fragment']
      with self.tl.span('correct', 'merge'):
        state = self.tl.ready(self._correct(state, plan[entry][0], averaged, snap))
    return state, loss

  def _correct(self, state, fragment, averaged, snap):
    part = steps.synced_part(state, self.options)
    leaves, treedef = jax.tree.flatten(part)
    where, _, fn = self._compiled(fragment, leaves)
    new = fn([leaves[j] for j, _, _ in where], averaged, snap)
    for (j, _, _), leaf in zip(where, new):
      leaves[j] = leaf
    return steps.with_part(state, jax.tree.unflatten(treedef, leaves))

  def collective_args(self, handle) -> dict:
    """A fragment's allreduce span is marked as one: `timeline`'s Tc of a fragment leaves out the
    whole-model averages of rounds shorter than P."""
    return {'fragment': not handle.label.startswith(WHOLE_LABEL)}

  def drain(self, state):
    """Waits for every fragment in flight, oldest first (the epoch's end, a checkpoint)."""
    for n, (entry, handle, snap) in enumerate(self.queue):
      if not isinstance(handle, base.Waited):
        value = self.wait(handle, drain=True)
        self.queue[n] = (entry, base.Waited(value, handle.label), snap)
    return state

  def finish(self):
    # Training ended inside a round: the fragments in flight are dropped (the final average is
    # sum_i w_i x_i either way; see the module docstring).
    for _, handle, _ in self.queue:
      if not isinstance(handle, base.Waited):
        self.cluster.wait(handle)
    self.queue = []

  def summary(self):
    """The streamed allreduce's figures for results.json."""
    n = sum(self.layout) if self.layout else 0
    bounds = edges(n, self.fragments)
    return {
      'fragments': self.fragments,
      'delay': self.delay,  # tau, as the run used it (a measured one where delay='auto').
      'elements': n,
      'fragment_elements': [b - a for a, b in zip(bounds, bounds[1:])],
      # What one collective of each fragment hands to the communicator (under MPI the staged
      # send vector: the fragment's float32 elements and one divergence flag per worker).
      'bytes_per_collective': {
        ('whole' if f == WHOLE else str(f)): b for f, b in sorted(self.bytes.items())
      },
    }

  # ------------------------------------------------------------------ checkpoints

  def host_state(self) -> dict:
    queued = [entry for entry, _, _ in self.queue]
    return {**super().host_state(), 'started': self.started, 'queued': queued}

  def load_host_state(self, d: dict):
    super().load_host_state(d)
    self.started = d['started']
    self._queued = d['queued']

  def state_dict(self):
    """After `drain`: each queued fragment's average and snapshot."""
    if not self.queue:
      return {}
    return {
      'fragments': {
        f'q{n}': {'average': handle.value['fragment'], 'snapshot': snap}
        for n, (_, handle, snap) in enumerate(self.queue)
      }
    }

  def load_state_dict(self, tree):
    queued, self._queued = self._queued, []
    self.queue = []
    for n, entry in enumerate(queued):
      got = tree['fragments'][f'q{n}']
      value = base.Waited({'fragment': got['average']}, 'a fragment in flight at the restart')
      self.queue.append((entry, value, got['snapshot']))

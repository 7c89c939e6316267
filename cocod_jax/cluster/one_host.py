"""The one-host cluster: N workers in one process, stacked on a leading axis, vmapped, sharded.

The workers are placed as `stacked.StackedWorkers` places them (the worker axis, the mesh of
local devices, the vmapped step functions), all N of them here: the paper's 16-worker accuracy
runs fit on one GPU. `OneHostCluster` adds the average over all N workers: `stacked.weighted_sum`
in worker order, the same bits on any device count (see stacked.py), broadcast back to every
worker; and CoCoD-SGD's compressed snapshot average with one message per `mpi.workers_per_rank`
workers, as MPI ranks of that many workers would send them.

With the average, each worker's contribution is tested for NaN and Inf; `wait` raises
`background.NonFinite` naming the workers before any state takes the average in.

This runtime reproduces the numbers of a cluster, not its time: workers that share a device run
one after the other inside one vmapped program, and communication is a copy between devices.
Wall-clock results (Tp, Tc, speedups) come from the MPI runtime (`cluster/ranks.py`).
"""

from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cocod_jax import steps as steps_lib
from cocod_jax.algorithms import correction
from cocod_jax.cluster import background
from cocod_jax.cluster import compression
from cocod_jax.cluster import stacked


class Done(NamedTuple):
  """A collective of the one-host cluster: dispatched at `start`, checked at `wait`."""

  value: Any
  bad: jax.Array  # [N] 1 where a worker's contribution was not finite.
  label: str
  step: int


def _weighted_total(tree, w):
  """`weighted_sum`, broadcast back to every worker; and the bad workers."""
  total, bad = stacked.weighted_sum(tree, w)
  return jax.tree.map(lambda t, a: jnp.broadcast_to(t, a.shape), total, tree), bad


def _compressed_total(tree, ref, error, w, codec, group):
  """The compressed average of the one-host cluster: one message per `group` workers, as MPI
  ranks of that many workers would send them; also the float32 average's rounding statistics
  (`compression.error_stats`), and the next error (None without error feedback)."""
  leaves, treedef = jax.tree.flatten(tree)
  ref_leaves = jax.tree.leaves(ref)
  n = leaves[0].shape[0]
  decoded, errors, bad = [], [], []
  for g in range(n // group):
    part = slice(g * group, (g + 1) * group)
    row = None if error is None else [e[g * group] for e in jax.tree.leaves(error)]
    _, _, got, err, flags = stacked.encode_sender(
      [a[part] for a in leaves], [r[part] for r in ref_leaves], row, w[part], codec
    )
    decoded.append(got)
    errors.append(err)
    bad.append(flags)
  averaged = stacked.average_of(decoded, ref_leaves)
  exact, _ = stacked.weighted_sum(leaves, w)
  stats = compression.error_stats(averaged, exact, [r[0] for r in ref_leaves])
  spread = lambda xs: jax.tree.unflatten(
    treedef, [jnp.broadcast_to(x, a.shape) for x, a in zip(xs, leaves)]
  )
  new_error = None
  if codec.error_feedback:
    new_error = jax.tree.unflatten(treedef, stacked.error_rows(errors, leaves, group))
  return (spread(averaged), new_error, stats), jnp.concatenate(bad)


class OneHostCluster(stacked.StackedWorkers):
  """All workers in this process (see the module docstring).

  Args:
    fns: the per-worker step functions.
    config: the validated config (`num_workers`, `one_host.devices`).
    weights: `w_i` of every worker.
  """

  backend = 'one_host'
  rank = 0
  processes = 1
  is_chief = True

  def __init__(self, fns: steps_lib.StepFns, config, weights):
    self.num_workers = config.num_workers
    devices = stacked.choose_devices(self.num_workers, config.one_host.devices, jax.devices())
    tx = correction.from_config(config.algorithm)
    super().__init__(fns, range(self.num_workers), weights, devices, tx)
    self._w = jax.device_put(np.asarray(weights, np.float32), self.replicated)
    self._total = jax.jit(_weighted_total, out_shardings=(self.sharded, self.replicated))
    self.codec = compression.from_config(config)
    # Senders of the compressed snapshot allreduce: groups of mpi.workers_per_rank workers, as
    # MPI ranks of that many workers would send (0: one worker each, a rank per worker).
    self.group = config.mpi.workers_per_rank or 1
    self._compressed = jax.jit(
      _compressed_total,
      static_argnums=(4, 5),
      out_shardings=((self.sharded, self.sharded, self.replicated), self.replicated),
    )

  def any(self, *flags: bool) -> tuple[bool, ...]:
    """For each flag, whether any process raised it (here: the one process)."""
    return tuple(bool(f) for f in flags)

  def agree(self, value):
    """The value every process holds (here: the one process's)."""
    return value

  # ------------------------------------------------------------------ collectives

  def start(self, tree, label='', step=-1, blocking=False, timed=False):
    """Dispatches `sum_i w_i tree_i` (JAX runs it asynchronously); `wait` returns it."""
    del blocking, timed  # Nothing runs in the background here, and nothing is timed.
    value, bad = self._total(jax.device_put(tree, self.replicated), self._w)
    return Done(value, bad, label, step)

  def start_compressed(self, tree, ref, error, label='', step=-1, timed=False):
    """Dispatches CoCoD-SGD's compressed snapshot average (`self.codec`, `compression.py`) of
    `tree` against the reference `ref` with the senders' `error` (None: zeros); `wait`
    returns (the average, the next error, [3] rounding statistics)."""
    del timed  # Nothing is timed here.
    args = (tree, ref, error, self._w, self.codec, self.group)
    value, bad = self._compressed(*jax.device_put(args[:3], self.replicated), *args[3:])
    return Done(value, bad, label, step)

  def payload_bytes(self, tree) -> int:
    """Bytes of one sender's compressed message of `tree` ([N, ...] leaves)."""
    shapes = [a.shape[1:] for a in jax.tree.leaves(tree)]
    return compression.payload_bytes(shapes, self.codec.dtype)

  def staged_bytes(self, tree) -> int:
    """Bytes of one worker's copy of `tree` ([N, ...] leaves): what a sender would send."""
    return int(sum(a.nbytes // a.shape[0] for a in jax.tree.leaves(tree)))

  def wait(self, handle: Done):
    """The average of a started collective; raises NonFinite if a contribution was not finite."""
    bad = np.asarray(jax.device_get(handle.bad))
    if bad.any():
      raise background.NonFinite(np.flatnonzero(bad).tolist(), handle.step, handle.label)
    return handle.value

  def weighted_mean(self, tree, label='', step=-1):
    return self.wait(self.start(tree, label, step))

  # ------------------------------------------------------------------ the rest of the interface

  def mean_loss(self, losses) -> tuple[float, list[int]]:
    """The epoch's training loss `sum_i w_i mean_t loss_i,t`, and the workers whose mean loss
    is not finite (one transfer of the [steps, N] losses)."""
    per_worker, bad = self.local_losses(losses)
    return float(per_worker @ np.asarray(self.weights)), bad

  def preflight(self, record, state):
    pass  # One process: one config, one state.

  def barrier(self):
    pass

  def gather(self, obj):
    return [obj]

  def close(self):
    pass

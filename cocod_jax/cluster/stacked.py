"""Workers stacked on a leading axis, vmapped, sharded: what both clusters build on.

Every per-worker array carries a leading worker axis of length W, the workers this process
holds (all N on the one-host cluster, `one_host.py`; one rank's N / R under MPI, `ranks.py`).
The step functions of `steps.py` are `jax.vmap`ped over it and jitted once; the axis is sharded
over a mesh of D local devices (D divides W): 16 workers on one GPU (D = 1), 2 per device on 8
GPUs, one per XLA CPU device in the multi-device tests. `StackedWorkers` is that placement (the
mesh, the vmapped functions, putting per-worker values onto the worker axis); `choose_devices`
picks its devices.

The sums over the worker axis are here too, the one place where workers' copies are added up:
`weighted_sum`, and for CoCoD-SGD's compressed snapshot allreduce, `encode_sender` (one
sender's message), `average_of` and `error_rows`. The weighted sum `sum_i w_i x_i` is a compiled
sum in a fixed order (worker 0 first), after every device has received every worker's copy: a
resharding copy from the worker axis to all devices, then the same program on each device. No
device gathers for the others, the result is bit for bit the same on 1 device and on N devices,
and a sum of two workers is the same `w_0 x_0 + w_1 x_1` that MPI's allreduce computes on 2
ranks. Why not a device collective inside the program (`psum`, or an all-gather from a sharding
constraint): XLA:CPU runs those through an in-process rendezvous that deadlocked here with more
emulated devices than cores (measured: 8 devices on 2 cores, "Expected 8 threads to join the
rendezvous, but only 7 of them arrived").
"""

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from cocod_jax import steps as steps_lib
from cocod_jax.algorithms import correction
from cocod_jax.cluster import compression

AXIS = 'workers'


def choose_devices(
  num_workers: int, requested: int, available: list, field='one_host.devices', whose=None
):
  """The devices of the mesh: `requested` of them (0: the most, up to all, that divide N).

  Args:
    num_workers: the workers to place (all of them, or one rank's).
    requested: the config's device count (`field`), 0 for automatic.
    available: the devices to choose from, in order.
    field: the config field named in the error.
    whose: how the error names the workers (default: `num_workers=N`).

  Returns:
    the first `requested` (or the automatic count) of `available`.

  Raises:
    ValueError: `requested` does not divide `num_workers` or exceeds the devices available.
  """
  if requested:
    if requested > len(available) or num_workers % requested:
      raise ValueError(
        f'{field}={requested} is invalid for {whose or f"num_workers={num_workers}"} with '
        f'{len(available)} {available[0].platform} device(s); allowed: 0 (automatic) or a '
        f'divisor of {num_workers} that is at most {len(available)}'
      )
    return available[:requested]
  count = max(d for d in range(1, min(num_workers, len(available)) + 1) if num_workers % d == 0)
  return available[:count]


def weighted_sum(tree, w):
  """The weighted sum over the leading worker axis: the one place where workers' copies are
  added up (pure, jittable).

  Args:
    tree: leaves of shape [W, ...].
    w: [W] weights.

  Returns:
    (`sum_i w_i tree_i` in worker order, each term rounded to the leaves' dtype first, as a sum
    over MPI ranks would be; [W] flags of the workers whose contribution holds NaN or Inf).
  """

  def one(a):
    total = (a[0] * w[0]).astype(a.dtype)
    for i in range(1, a.shape[0]):
      total = total + (a[i] * w[i]).astype(a.dtype)
    return total

  finite = [jnp.all(jnp.isfinite(a.reshape(a.shape[0], -1)), axis=1) for a in jax.tree.leaves(tree)]
  bad = ~jnp.all(jnp.stack(finite), axis=0) if finite else jnp.zeros(w.shape, bool)
  return jax.tree.map(one, tree), bad


def encode_sender(leaves, ref_leaves, error_row, w, codec: compression.Codec):
  """One sender's compressed message (`compression.py`): its workers' `w_i (s_i - r)` summed in
  worker order, plus its error. The one place both runtimes build a message (pure, jittable).

  Args:
    leaves: the sender's workers' snapshot leaves, [W, ...] each.
    ref_leaves: the reference, [W, ...] (every row alike: the first is used).
    error_row: the sender's error leaves (no worker axis); None: none yet (zeros with error
      feedback).
    w: [W] weights.
    codec: the wire format.

  Returns:
    (payloads, [L] scales, the values they decode to, the next error leaves or None, [W] flags
    of the workers whose snapshot holds NaN or Inf).
  """
  delta = [a - r[0] for a, r in zip(leaves, ref_leaves)]
  partial, bad = weighted_sum(delta, w)
  if error_row is None and codec.error_feedback:  # The first round: nothing lost yet.
    error_row = [jnp.zeros_like(p) for p in partial]
  return (*compression.encode(partial, error_row, codec), bad)


def average_of(decoded_by_sender, ref_leaves):
  """The average `r + sum over senders of what they sent`, senders in rank order (pure)."""
  return [r[0] + t for r, t in zip(ref_leaves, compression.total(decoded_by_sender))]


def error_rows(errors, like, group: int):
  """[N, ...] leaves holding each sender's error in the row of its first worker, zeros
  elsewhere (pure): how the error is kept on the worker axis."""
  out = []
  for j, a in enumerate(like):
    rows = jnp.zeros_like(a)
    for g, err in enumerate(errors):
      rows = rows.at[g * group].set(err[j])
    out.append(rows)
  return out


class StackedWorkers:
  """Workers of this process on a leading axis, vmapped, sharded over local devices.

  Args:
    fns: the per-worker step functions.
    workers: the (global) indices of the workers this process holds, in order.
    weights: `w_i` of every worker of the cluster (indexed globally).
    devices: the local devices the worker axis is sharded over (their number divides W).
    tx: CoCoD-SGD's correction (`correction.from_config`; default: the paper's).
    slowed: wraps the compiled functions that compute a local step (time emulation; identity
      by default).
  """

  def __init__(
    self, fns: steps_lib.StepFns, workers, weights, devices, tx=None, slowed=lambda f: f
  ):
    self.workers = list(workers)
    self.weights = weights
    self.devices = list(devices)
    mesh = jax.sharding.Mesh(np.array(self.devices), (AXIS,))
    self.sharded = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
    self.replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    self.device = self.devices[0]  # Where the averaged model is evaluated.
    tx = tx or correction.decoupled_correction()

    def vmapped(f, donate=()):
      return jax.jit(jax.vmap(f), donate_argnums=donate)

    self.compute_grads = slowed(vmapped(fns.compute_grads))
    self.apply_update = vmapped(fns.apply_update, donate=0)
    self.local_step = slowed(vmapped(fns.local_step, donate=0))
    self.skip_step = vmapped(fns.skip_step, donate=0)
    self.masked_step = slowed(vmapped(fns.masked_step, donate=0))
    self.correction = tx
    self.snapshot = vmapped(tx.init)
    # correct(x, averaged, snap, lr): the round's learning rate is one scalar for every worker.
    per_worker = lambda f: jax.jit(jax.vmap(f, in_axes=(0, 0, 0, None)))
    if tx.carries:  # (corrected x, the state the next round sends)
      self.correct = per_worker(tx.update)
    else:
      # The corrected x alone: CoCoD-SGD snapshots it again at the next round's start, and a
      # second output of the same value is a second buffer that XLA writes (measured: 8 workers
      # of the 2.1M-parameter MLP on one CPU device, 89 ms with it, 45 ms without).
      corrected = per_worker(lambda x, averaged, snap, lr: tx.update(x, averaged, snap, lr)[0])
      self.correct = lambda x, averaged, snap, lr: (corrected(x, averaged, snap, lr), None)
    # The model to evaluate from the weighted mean (the eager correction's; None: the mean).
    self.evaluated = vmapped(tx.evaluate) if tx.evaluate is not None else None
    self.eval_step = jax.jit(fns.eval_step)

  def layout(self) -> dict:
    """Where the workers run: processes, workers and devices per process (results.json)."""
    return {
      'processes': self.processes,
      'workers_per_process': len(self.workers),
      'devices_per_process': len(self.devices),
      'platform': self.device.platform,
    }

  def put(self, per_worker):
    """Stacks per-worker values (a list or a dict by global worker index; arrays or pytrees) of
    the workers here onto the worker axis. Arrays whose first axes differ (unequal shards) are
    padded with zeros to the longest."""

    def stack(*arrays):
      arrays = [np.asarray(a) for a in arrays]
      if arrays[0].ndim:
        longest = max(len(a) for a in arrays)
        pad = lambda a: np.zeros((longest - len(a),) + a.shape[1:], a.dtype)
        arrays = [np.concatenate([a, pad(a)]) for a in arrays]
      return np.stack(arrays)

    stacked = jax.tree.map(stack, *[per_worker[i] for i in self.workers])
    return jax.device_put(stacked, self.sharded)

  def put_stacked(self, tree):
    """A tree of [W, ...] arrays (this process's workers, as its checkpoint part holds them)."""
    return jax.device_put(tree, self.sharded)

  def init_state(self, make: Callable):
    """The state of every worker here, `make(i)` for global index i, stacked."""
    return self.put({i: jax.device_get(make(i)) for i in self.workers})

  def first(self, tree):
    """The first worker's copy of a tree that all workers hold alike, on `self.device`."""
    return jax.device_put(jax.tree.map(lambda a: a[0], tree), self.device)

  def local_losses(self, losses):
    """Each worker's mean training loss over `losses` ([steps] of [W]), as NumPy (one transfer),
    and the global indices of those that are not finite."""
    per_worker = np.mean(jax.device_get(jnp.stack(losses)), axis=0)
    bad = [self.workers[j] for j in np.flatnonzero(~np.isfinite(per_worker))]
    return per_worker, bad

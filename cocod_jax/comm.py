"""Communicators: how workers average pytrees. The algorithms only ever call `weighted_mean`.

`EmulatedCommunicator` runs every worker in one process, one XLA CPU device each, with the
average as a device collective (`lax.psum` over the worker axis). The MPI runtime provides the
same interface over mpi4jax, so the step functions are shared.
"""

import jax
import numpy as np

AXIS = 'workers'


class EmulatedCommunicator:
  """Weighted averages across emulated workers; pytrees carry a leading worker axis."""

  def __init__(self, devices, weights):
    self.devices = list(devices)
    self.num_workers = len(self.devices)
    mesh = jax.sharding.Mesh(np.array(self.devices), (AXIS,))
    self._sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
    self.weights = self.shard([np.float32(w) for w in weights])

    def _mean(tree, w):
      return jax.lax.psum(jax.tree.map(lambda a: (a * w).astype(a.dtype), tree), AXIS)

    self._mean = jax.pmap(_mean, axis_name=AXIS, devices=self.devices)

  def weighted_mean(self, tree):
    """`sum_i w_i tree_i`, returned to every worker (blocking only when the result is read)."""
    return self._mean(tree, self.weights)

  def replicate(self, tree):
    """Puts the same pytree on every worker (a leading worker axis is added)."""
    return jax.tree.map(lambda a: self.shard([a] * self.num_workers), tree)

  def shard(self, per_worker):
    """Stacks a list of per-worker arrays (same shape) onto the workers' devices."""
    return jax.device_put(np.stack([np.asarray(a) for a in per_worker]), self._sharding)

  def first(self, tree):
    """Worker 0's copy of a pytree that all workers hold."""
    return jax.tree.map(lambda a: a[0], tree)

  def close(self):
    pass


def stack_padded(arrays, length):
  """Pads each array along axis 0 to `length` (zeros) so the workers' shards share one shape."""
  out = []
  for a in arrays:
    pad = np.zeros((length - len(a),) + a.shape[1:], a.dtype)
    out.append(np.concatenate([a, pad]))
  return out




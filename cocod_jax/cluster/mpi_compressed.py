"""CoCoD-SGD's compressed snapshot average between MPI ranks (`comm.dtype`, `compression.py`).

A sum of int8 tensors with scales of their own cannot be an MPI reduction, so the ranks
exchange their messages whole: each rank builds its message on its first device (the one-host
cluster's `encode_sender`: its workers' `w_i (s_i - r)` summed in worker order, plus its error,
rounded), one MPI `Allgather` of bytes hands every rank every message, and every rank decodes
and adds them in rank order (`average_of`), the same program as the one-host cluster's, so the
two runtimes agree. A rank sends its payload, the per-tensor scales (int8 only) and one
divergence flag per worker of the cluster (float32); `payload_bytes` is that size.

With 2 ranks an allgather sends what an allreduce would (each rank's buffer once); with R ranks
each rank receives R - 1 messages, against about 2 (R - 1) / R of the float32 vector for a ring
allreduce: int8 still sends fewer bytes up to R of about 8, bfloat16 up to about 4. For many
ranks a reduce-scatter that re-rounds every partial sum would scale better; it would not agree
with the one-host cluster's numbers, and is not implemented.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from cocod_jax.cluster import background
from cocod_jax.cluster import compression
from cocod_jax.cluster import stacked

WIRE = {
  'float32': np.float32,
  'bfloat16': jnp.bfloat16,
  'int8': np.int8,
}  # What a value travels as.


class Coder:
  """The staging of one tree structure's compressed average on one rank.

  Args:
    tree: a tree of [W, ...] float32 leaves, as the rank's workers hold it.
    weights: `w_i` of the rank's W workers.
    slots: the global index of each of the rank's workers (its divergence flag).
    num_slots: the workers of the cluster.
    ranks: the processes of the job.
    sharding: where the rank's [W, ...] trees live.
    codec: the wire format.
  """

  def __init__(self, tree, weights, slots, num_slots, ranks, sharding, codec):
    leaves, self.treedef = jax.tree.flatten(tree)
    self.width, self.codec, self.sharding = len(weights), codec, sharding
    self.shapes = [x.shape[1:] for x in leaves]
    self.wire = np.dtype(WIRE[codec.dtype])
    self.counts = [int(np.prod(s)) for s in self.shapes]
    sizes = [n * self.wire.itemsize for n in self.counts]
    self.offsets = [int(o) for o in np.cumsum([0] + sizes)]
    scaled = codec.dtype == 'int8'  # Only int8 has scales to send.
    self.scales = slice(self.offsets[-1], self.offsets[-1] + (4 * len(leaves) if scaled else 0))
    self.ones = np.ones(len(leaves), np.float32)
    self.flags = slice(self.scales.stop, self.scales.stop + 4 * num_slots)
    self.slots = np.asarray(slots, np.int64)
    self.send = np.zeros(self.flags.stop, np.uint8)
    self.recv = np.empty((ranks, self.flags.stop), np.uint8)
    self.device = sharding.mesh.devices.flat[0]
    self.single = sharding.mesh.devices.size == 1
    w = jax.device_put(np.asarray(weights, np.float32), self.device)
    width = self.width

    def encode(tree, ref, error):
      leaves, ref_leaves = jax.tree.leaves(tree), jax.tree.leaves(ref)
      row = None if error is None else [e[0] for e in jax.tree.leaves(error)]
      payloads, scales, _, err, bad = stacked.encode_sender(leaves, ref_leaves, row, w, codec)
      rows = None if err is None else stacked.error_rows([err], leaves, width)
      return payloads, scales, rows, bad

    self._encode = jax.jit(encode)

    def combine(payloads_by_rank, scales_by_rank, ref):
      decoded = [
        [compression.decode_leaf(p, s[j], codec.dtype) for j, p in enumerate(payloads)]
        for payloads, s in zip(payloads_by_rank, scales_by_rank)
      ]
      ref_leaves = jax.tree.leaves(ref)
      average = stacked.average_of(decoded, ref_leaves)
      return [jnp.broadcast_to(a, r.shape) for a, r in zip(average, ref_leaves)]

    self._combine = jax.jit(combine, out_shardings=sharding)
    self.replicated = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())

  @property
  def payload_bytes(self) -> int:
    return self.send.nbytes

  def _here(self, tree):
    return tree if self.single else jax.device_put(tree, self.device)

  def encode(self, tree, ref, error):
    """(payloads, scales, the next error on the rank's devices or None, [W] flags), dispatched
    on the rank's first device (fresh buffers: later steps cannot touch them)."""
    payloads, scales, rows, bad = self._encode(*self._here((tree, ref, error)))
    if rows is not None:
      rows = jax.tree.unflatten(self.treedef, rows)
      rows = rows if self.single else jax.device_put(rows, self.sharding)
    return payloads, scales, rows, bad

  def exchange(self, comm, job, payloads, scales, bad, ref):
    """Allgathers the messages and returns the average on the rank's devices (in `job`'s
    thread); raises NonFinite naming the workers whose snapshot was not finite."""
    jax.block_until_ready((payloads, scales, bad))
    start = time.perf_counter()
    for p, o, n in zip(payloads, self.offsets, self.counts):
      self.send[o : o + n * self.wire.itemsize] = np.asarray(p).reshape(-1).view(np.uint8)
    if self.scales.stop > self.scales.start:
      self.send[self.scales] = np.asarray(scales, np.float32).view(np.uint8)
    flags = np.zeros((self.flags.stop - self.flags.start) // 4, np.float32)
    flags[self.slots] = np.asarray(bad, np.float32)
    self.send[self.flags] = flags.view(np.uint8)
    comm.Allgather(self.send, self.recv)
    everyone = self.recv[:, self.flags].copy().view(np.float32).sum(axis=0)
    if everyone.any():
      job.span = (start, time.perf_counter())
      raise background.NonFinite(np.flatnonzero(everyone).tolist(), job.step, job.label)
    by_rank, scales_by_rank = [], []
    for row in self.recv:
      parts = zip(self.offsets, self.counts, self.shapes)
      by_rank.append(
        [row[o : o + n * self.wire.itemsize].view(self.wire).reshape(s) for o, n, s in parts]
      )
      scaled = self.scales.stop > self.scales.start
      scales_by_rank.append(row[self.scales].view(np.float32) if scaled else self.ones)
    by_rank, scales_by_rank = jax.device_put((by_rank, scales_by_rank), self.replicated)
    average = self._combine(by_rank, scales_by_rank, ref)
    job.span = (start, time.perf_counter())
    return jax.tree.unflatten(self.treedef, jax.block_until_ready(average))

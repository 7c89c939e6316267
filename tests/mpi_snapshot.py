"""Under `mpirun -np 2`: what `MPICommunicator.start` sends is the tree as it was at the call, with
one worker per rank and with two workers per rank on two devices each; a non-finite contribution
is named by its global worker index on every rank.

The communicator's thread is held back until the caller has donated the tree to a jitted step
that overwrites it three times (as the training steps after a snapshot do); the average must
still be that of the original values, with every staging. Run by tests/mpi_test.py.
"""

import os
import threading

# Two XLA CPU devices per process, before JAX starts: the two-worker case shards over them.
os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=2'

import jax  # noqa: E402
import numpy as np  # noqa: E402

from cocod_jax.cluster import background  # noqa: E402
from cocod_jax.cluster import mpi  # noqa: E402
from cocod_jax.cluster import stacked  # noqa: E402

# Two ranks of one worker; two ranks of two workers (rank 0: workers 0, 1; rank 1: 2, 3).
WEIGHTS = {1: (0.25, 0.75), 2: (0.1, 0.2, 0.3, 0.4)}


def _sharding(width):
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:width]), (stacked.AXIS,))
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(stacked.AXIS))


def check(staging, rank, width):
  weights = WEIGHTS[width]
  workers = [rank * width + j for j in range(width)]
  sharding = _sharding(width)
  comm = mpi.MPICommunicator(
    weights, workers, threaded=True, staging=staging, timeout_s=60, sharding=sharding
  )
  try:
    gate = threading.Event()
    reduce_ = comm._reduce

    def held_back(*args, **kwargs):
      if not gate.wait(30):
        raise RuntimeError('the main thread never opened the gate')
      return reduce_(*args, **kwargs)

    comm._reduce = held_back
    scales = np.asarray([i + 1.0 for i in workers], np.float32)  # Worker i holds i + 1.
    # 1.2 MB in all: above SMALL_PAYLOAD_BYTES, so the sum comes back leaf by leaf.
    tree = {
      'a': scales[:, None] * np.ones((width, 300_000), np.float32),
      'b': scales[:, None, None] * np.arange(6.0, dtype=np.float32).reshape(1, 2, 3),
    }
    tree = jax.device_put(tree, sharding)
    handle = comm.start(tree, 'the donated tree', timed=True)
    assert handle.local_span is not None and handle.local_span[1] >= handle.local_span[0]
    overwrite = jax.jit(lambda t: jax.tree.map(lambda x: x * 0 - 99.0, t), donate_argnums=0)
    for _ in range(3):
      tree = overwrite(tree)
    jax.block_until_ready(tree)
    gate.set()
    out = comm.wait(handle)
    comm._reduce = reduce_
    # A blocking average where worker 3 (rank 1's second with two workers) sends an Inf.
    bad = np.ones((width, 4), np.float32)
    if rank == 1:
      bad[-1, 2] = np.inf
    try:
      comm.weighted_mean({'c': jax.device_put(bad, sharding)}, 'the bad tree', step=5)
      raise AssertionError('a non-finite contribution was averaged')
    except background.NonFinite as e:
      assert e.workers == [2 * width - 1] and e.step == 5, (e.workers, e.step)
  finally:
    comm.close()
  mean_scale = sum(w * (i + 1.0) for i, w in enumerate(weights))  # 1.75 and 3.0
  assert out['a'].shape == (width, 300_000) and out['a'].sharding.is_equivalent_to(sharding, 2)
  np.testing.assert_allclose(out['a'], np.full((width, 300_000), mean_scale), rtol=1e-6)
  expected = np.broadcast_to(np.arange(6.0).reshape(2, 3) * mean_scale, (width, 2, 3))
  np.testing.assert_allclose(out['b'], expected, rtol=1e-6)
  print(f'rank {rank}: {staging}: {width} per rank: ok', flush=True)


def main():
  rank, size = mpi.world()
  assert size == 2, size
  for width in (1, 2):
    for staging in mpi.STAGINGS:
      check(staging, rank, width)


if __name__ == '__main__':
  mpi.abort_on_error(main)

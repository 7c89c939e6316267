"""Under `mpirun -np 2`: what `MPICommunicator.start` sends is the tree as it was at the call.

The communicator's thread is held back until the caller has donated the tree to a jitted step
that overwrites it three times (as the training steps after a snapshot do); the average must
still be that of the original values, with every staging. Run by tests/mpi_test.py.
"""

import threading

import jax
import jax.numpy as jnp
import numpy as np

from cocod_jax.cluster import mpi

WEIGHTS = (0.25, 0.75)


def check(staging, rank):
  comm = mpi.MPICommunicator(WEIGHTS, threaded=True, staging=staging, timeout_s=60)
  try:
    gate = threading.Event()
    reduce_ = comm._reduce

    def held_back(*args, **kwargs):
      if not gate.wait(30):
        raise RuntimeError('the main thread never opened the gate')
      return reduce_(*args, **kwargs)

    comm._reduce = held_back
    scale = rank + 1.0
    tree = {'a': jnp.full((1000,), scale), 'b': jnp.arange(6.0).reshape(2, 3) * scale}
    handle = comm.start(tree, 'the donated tree')
    overwrite = jax.jit(lambda t: jax.tree.map(lambda x: x * 0 - 99.0, t), donate_argnums=0)
    for _ in range(3):
      tree = overwrite(tree)
    jax.block_until_ready(tree)
    gate.set()
    out = comm.wait(handle)
  finally:
    comm.close()
  mean_scale = sum(w * (r + 1.0) for r, w in enumerate(WEIGHTS))  # 1.75
  np.testing.assert_allclose(out['a'], np.full((1000,), mean_scale), rtol=1e-6)
  np.testing.assert_allclose(out['b'], np.arange(6.0).reshape(2, 3) * mean_scale, rtol=1e-6)
  print(f'rank {rank}: {staging}: ok', flush=True)


def main():
  rank, size = mpi.world()
  assert size == len(WEIGHTS), size
  for staging in mpi.STAGINGS:
    check(staging, rank)


if __name__ == '__main__':
  mpi.abort_on_error(main)

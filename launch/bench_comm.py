"""The MPI communicator beside raw mpi4py on the same bytes and ranks (run under mpirun).

    launch/mpirun.sh -np 2 .venv/bin/python launch/bench_comm.py --out=runs/bench/comm.json
    launch/simnet.sh --rate 1gbit -- launch/mpirun.sh -np 2 .venv/bin/python \
        launch/bench_comm.py --out=runs/bench/comm_link.json

Payloads: the parameters of the small CNN on digits (19.6k floats, 78 KB: the fixed cost) and of
ResNet18 for CIFAR (11.2M floats, 44.7 MB: the bandwidth), as the trees the training loop hands
over (the models' real leaf shapes, from `jax.eval_shape`, on a worker axis of one: one worker
per rank). For each, the median time of one call
of: raw `comm.Allreduce` of a NumPy vector of the same number of floats; the communicator's
blocking `weighted_mean` of the tree (host staging: pack, allreduce, back on the device); and a
`start` + `wait` through its background thread. Ranks meet at a barrier before each timed call.
"""

import json
import os
import statistics
import time

from absl import app
from absl import flags

flags.DEFINE_string('out', '', 'Where rank 0 writes the JSON (none: print only).')
flags.DEFINE_string('staging', 'host', 'comm.staging of the communicator.')
FLAGS = flags.FLAGS
CALLS = {'cnn': 200, 'resnet18': 12}


def _tree(name):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from cocod_jax import models  # pylint: disable=g-import-not-at-top

  shape = (1, 8, 8, 1) if name == 'cnn' else (1, 32, 32, 3)
  model = models.get_model(name, 10)
  abstract = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros(shape)))['params']
  return jax.tree.map(lambda s: jnp.full((1, *s.shape), 0.5, s.dtype), abstract)


def _median_ms(comm, fn, calls):
  fn()  # Warm-up: compiles and allocates.
  times = []
  for _ in range(calls):
    comm.Barrier()
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times) * 1e3


def main(argv):
  del argv
  os.environ.setdefault('OMPI_MCA_mpi_yield_when_idle', '1')
  import jax  # pylint: disable=g-import-not-at-top
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from cocod_jax.cluster import mpi  # pylint: disable=g-import-not-at-top

  world = MPI.COMM_WORLD
  raw_comm = world.Clone()
  size = world.Get_size()
  comm = mpi.MPICommunicator([1.0 / size] * size, staging=FLAGS.staging, timeout_s=600)
  rows = []
  try:
    for name, calls in CALLS.items():
      tree = _tree(name)
      floats = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))
      send, recv = np.full(floats, 0.5, np.float32), np.empty(floats, np.float32)
      raw = _median_ms(raw_comm, lambda: raw_comm.Allreduce(send, recv, op=MPI.SUM), calls)
      blocking = _median_ms(
        raw_comm, lambda: jax.block_until_ready(comm.weighted_mean(tree)), calls
      )
      thread = _median_ms(
        raw_comm, lambda: jax.block_until_ready(comm.wait(comm.start(tree))), calls
      )
      leaves = len(jax.tree.leaves(tree))
      rows.append(dict(payload=name, bytes=4 * floats, leaves=leaves, calls=calls, raw_ms=raw,
                       blocking_ms=blocking, thread_ms=thread))  # fmt: skip
      if world.Get_rank() == 0:
        print(
          f'{name}: {4 * floats / 1e6:.2f} MB in {rows[-1]["leaves"]} leaves: raw {raw:.3f} ms, '
          f'weighted_mean {blocking:.3f} ms (+{blocking - raw:.3f}), thread {thread:.3f} ms',
          flush=True,
        )
  finally:
    comm.close()
  if world.Get_rank() == 0 and FLAGS.out:
    link = os.environ.get('SIMNET_RATE', 'shared memory')
    with open(FLAGS.out, 'w') as f:
      json.dump({'link': link, 'ranks': size, 'staging': FLAGS.staging, 'rows': rows}, f, indent=2)


if __name__ == '__main__':
  app.run(main)

"""The cost of a checkpoint of ResNet18-sized state (`make bench`, section `checkpoint`).

    .venv/bin/python launch/bench_checkpoint.py --out=runs/bench/checkpoint.json

Writes what the training loop writes, through `checkpoints.Checkpointer`: the train state of
ResNet18 for CIFAR (parameters, momentum, BatchNorm statistics: 22.4M floats, 89.6 MB a worker)
for 1 worker (one MPI rank's part) and for 16 workers stacked (the paper's cluster on the one-host
runtime, one part of 1.4 GB), `--repeats` times each into a fresh directory, and reads it back.
Prints seconds per checkpoint (write, and restore) and the bytes on disk.
"""

import json
import os
import shutil
import statistics
import tempfile
import time

from absl import app
from absl import flags

flags.DEFINE_integer('repeats', 3, 'Checkpoints written per size.')
flags.DEFINE_string('out', '', 'Where to write the JSON (none: print only).')
FLAGS = flags.FLAGS


def _state(workers):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from cocod_jax import models  # pylint: disable=g-import-not-at-top
  from cocod_jax import steps  # pylint: disable=g-import-not-at-top

  model = models.get_model('resnet18', 10)
  one = jax.eval_shape(
    lambda: steps.create_train_state(model, jax.random.PRNGKey(0), (32, 32, 3), 0)
  )
  leaves, treedef = jax.tree.flatten(one)
  keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))

  def fill(key, s):  # Random values: a constant array would compress to nothing on disk.
    if jnp.issubdtype(s.dtype, jnp.floating):
      return jax.random.normal(key, (workers,) + s.shape, s.dtype)
    return jnp.zeros((workers,) + s.shape, s.dtype)

  return jax.tree.unflatten(treedef, [fill(k, s) for k, s in zip(keys, leaves)])


def _du(path):
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main(argv):
  del argv
  import jax  # pylint: disable=g-import-not-at-top

  from cocod_jax.record import checkpoints  # pylint: disable=g-import-not-at-top

  rows = []
  for workers in (1, 16):
    tree = {'state': jax.block_until_ready(_state(workers))}
    writes, reads, size = [], [], 0
    for _ in range(FLAGS.repeats):
      tmp = tempfile.mkdtemp(prefix='ckptbench')
      try:
        ckpt = checkpoints.Checkpointer(tmp, 0, 1, lambda: None, keep=1)
        start = time.perf_counter()
        ckpt.save(1, tree, {'bench': True})
        writes.append(time.perf_counter() - start)
        size = _du(tmp)
        start = time.perf_counter()
        ckpt.restore(1)
        reads.append(time.perf_counter() - start)
      finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows.append(dict(workers=workers, bytes=size, write_s=writes, restore_s=reads))
    print(
      f'{workers:2d} worker(s): {size / 1e6:.0f} MB, write {statistics.median(writes):.2f} s, '
      f'restore {statistics.median(reads):.2f} s (median of {FLAGS.repeats})',
      flush=True,
    )
  if FLAGS.out:
    with open(FLAGS.out, 'w') as f:
      json.dump({'rows': rows}, f, indent=2)


if __name__ == '__main__':
  app.run(main)

"""The loop's overhead: `train_and_evaluate` against a bare jitted loop of the same local step.

    .venv/bin/python launch/bench_overhead.py --repeats=5 --out=runs/bench/overhead.json

Both run the small CNN on the embedded digits, one worker, batch 16 (93 steps an epoch), on the
one-host cluster: the framework as Local-SGD with a period longer than the run (so nothing is
ever averaged), the bare loop as a Python `for` over `jax.jit(local_step)` with the epoch's
batch indices put on the device once per epoch, the loss of every step kept on the device, one
`block_until_ready` per epoch. Each repeat runs both, alternating which goes first; each measures
epochs 2 to `--epochs` (epoch 1 compiles). Both clocks run over the same span of each epoch:
from after the epoch's batch table is on the device to the end of its last step (the
framework's training clock starts there, and the evaluation after each epoch is not training
time); the bare loop's clock is stopped while it uploads its table, as the framework's is.
Prints and writes ms per step for each and their ratio, per repeat.
"""

import json
import statistics
import time

from absl import app
from absl import flags

flags.DEFINE_integer('repeats', 5, 'Repeats (each runs both loops).')
flags.DEFINE_integer('epochs', 6, 'Epochs per run; the first is left out (compilation).')
flags.DEFINE_string('out', '', 'Where to write the JSON (none: print only).')
FLAGS = flags.FLAGS


def _config():
  from configs import common  # pylint: disable=g-import-not-at-top

  c = common.small_config('cnn', 'digits', num_workers=1, batch_size=16, num_epochs=FLAGS.epochs)
  c.algorithm.name = 'local_sgd'
  c.algorithm.period = 10**6
  return common.without_checkpoints(c)


def framework(workdir):
  """ms per step of `train_and_evaluate` over epochs 2..E (its own training clock)."""
  from cocod_jax import train  # pylint: disable=g-import-not-at-top

  res = train.train_and_evaluate(_config(), workdir)
  times = [e['train_time_s'] for e in res['epochs']]
  return (times[-1] - times[0]) / (res['steps_per_epoch'] * (len(times) - 1)) * 1e3


def bare():
  """ms per step of a plain Python loop over the same jitted local step, epochs 2..E."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from cocod_jax import plan as plan_lib  # pylint: disable=g-import-not-at-top
  from cocod_jax import steps  # pylint: disable=g-import-not-at-top
  from cocod_jax.data import pipeline as input_pipeline  # pylint: disable=g-import-not-at-top

  config = _config()
  dataset = input_pipeline.load(config.dataset, config.data_dir)
  plan = plan_lib.make_plan(config, dataset)
  step = jax.jit(plan.fns.local_step, donate_argnums=0)
  shard = plan.shards[0]
  data = steps.WorkerData(
    *jax.device_put((dataset.x_train[shard], dataset.y_train[shard])),
    mask=jax.device_put(np.ones(plan.sizes[0], np.float32)),
    batches=None,
    rows=jax.device_put(np.int32(plan.rows[0])),
    first_step=None,
  )
  state = jax.device_put(steps.create_train_state(plan.model, jax.random.PRNGKey(0), (8, 8, 1), 0))
  spe = plan.steps_per_epoch
  elapsed = 0.0
  for epoch in range(1, config.num_epochs + 1):
    data = data._replace(
      batches=jax.device_put(plan_lib.batch_table(plan, epoch, 0, plan.sizes[0])),
      first_step=jax.device_put(np.int32((epoch - 1) * spe)),
    )
    start = time.perf_counter()  # Where train_and_evaluate's clock starts: after the upload.
    losses = []
    for _ in range(spe):
      state, loss = step(state, data)
      losses.append(loss)
    jax.block_until_ready(state)
    if epoch >= 2:
      elapsed += time.perf_counter() - start
  return elapsed / (spe * (config.num_epochs - 1)) * 1e3


def main(argv):
  del argv
  import tempfile  # pylint: disable=g-import-not-at-top

  runs = []
  for rep in range(FLAGS.repeats):
    with tempfile.TemporaryDirectory() as tmp:
      if rep % 2 == 0:
        b, f = bare(), framework(tmp)
      else:
        f, b = framework(tmp), bare()
    runs.append({'bare_ms': b, 'framework_ms': f, 'ratio': f / b})
    print(f'repeat {rep}: bare {b:.3f} ms/step, framework {f:.3f} ms/step, ratio {f / b:.3f}',
          flush=True)  # fmt: skip
  ratios = [r['ratio'] for r in runs]
  print(f'ratio median {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]')
  if FLAGS.out:
    with open(FLAGS.out, 'w') as f:
      json.dump({'runs': runs, 'epochs': FLAGS.epochs}, f, indent=2)


if __name__ == '__main__':
  app.run(main)

"""The pilot of the CPU-scale regime (issue 21): runs MNIST-1D cells on the one-host cluster at
the paper's regime (16 workers x batch 32, its schedule fractions) and records, per run, the
accuracy curve, the final model's correctness on every test example and the wall time.

    nice -n 5 .venv/bin/python launch/pilot_cpu_scale.py --out=runs/pilot \\
        --cells=large_cnn,large_mlp,hard_cnn,hard_mlp --algos=ssgd,cocod_sgd,local_sgd,pipe_sgd \\
        --seeds=0,1,2 --epochs=30

Runs one after the other in this process (one JAX start-up for all); a run already recorded in
`<out>/runs.jsonl` (same cell, algorithm, seed and settings) is not run again, so an interrupted
pilot resumes. Per run: `<out>/<slug>/` (the run's results.json, final_params.npz) and
`<out>/<slug>.correct.npy` (1 where the final averaged model classifies that test example
correctly). `--summary` prints the tables of docs/paper-cpu/pilot.md from what is recorded.
"""

import json
import os
import time

from absl import app
from absl import flags
from absl import logging
import flax
import jax
import numpy as np

from cocod_jax import models
from cocod_jax import steps
from cocod_jax import train
from cocod_jax import validation as config_validation
from cocod_jax.data import mnist1d as mnist1d_data
from cocod_jax.data import pipeline as input_pipeline
from cocod_jax.experiments import stats
from configs import common

CELLS = {
  'large_cnn': ('mnist1d_large', 'cnn1d'),
  'large_mlp': ('mnist1d_large', 'mlp1d'),
  'hard_cnn': ('mnist1d_hard', 'cnn1d'),
  'hard_mlp': ('mnist1d_hard', 'mlp1d'),
}

flags.DEFINE_string('out', 'runs/pilot', 'Where the runs and runs.jsonl go.')
flags.DEFINE_list('cells', list(CELLS), f'Cells: {list(CELLS)}.')
flags.DEFINE_list('algos', ['ssgd', 'cocod_sgd', 'local_sgd', 'pipe_sgd'], 'Algorithms.')
flags.DEFINE_list('seeds', ['0'], 'Seeds.')
flags.DEFINE_integer('epochs', 30, "Epochs; the schedule is the paper's fractions of them.")
flags.DEFINE_float('lr', 0.01, 'lr_1, scaled linearly by the total batch as in the paper.')
flags.DEFINE_integer('workers', 16, 'Workers.')
flags.DEFINE_integer('batch', 32, 'Basic batch per worker.')
flags.DEFINE_integer('train_examples', 0, "0: the variant's.")
flags.DEFINE_integer('test_examples', 0, "0: the variant's.")
flags.DEFINE_list('set', [], 'Extra dotted overrides field=value (python literals), all runs.')
flags.DEFINE_string('tag', '', 'A name for the settings of --set, part of the slug.')
flags.DEFINE_string(
  'generator', '', 'Exploration only: JSON of MNIST-1D generator arguments for every cell.'
)
flags.DEFINE_bool('summary', False, 'Print the summary of runs.jsonl and run nothing.')
FLAGS = flags.FLAGS


def schedule(c, epochs):
  """The paper's schedule as fractions of its 120 epochs: lr warm-up 5/120, period 1 for
  10/120, /10 from the start of epoch 81 of 120 (after 80/120 of the run)."""
  c.num_epochs = epochs
  c.optimizer.warmup_epochs = epochs * 5 / 120
  c.algorithm.warmup_period_epochs = max(1, round(epochs * 10 / 120))
  c.optimizer.decay_epochs = (round(epochs * 80 / 120) + 1,)
  return c


def make_config(cell, algo, seed):
  dataset, model = CELLS[cell]
  c = common.base_config()
  c.algorithm.name = algo
  c.model.name = model
  c.dataset.name = dataset
  c.dataset.augment = False
  c.dataset.train_examples = FLAGS.train_examples
  c.dataset.test_examples = FLAGS.test_examples
  c.num_workers = FLAGS.workers
  c.batch_size = FLAGS.batch
  c.optimizer.learning_rate = FLAGS.lr
  c.checkpoint.every_epochs = 0
  c.seed = seed
  schedule(c, FLAGS.epochs)
  for item in FLAGS.set:
    key, value = item.split('=', 1)
    node = c
    *parents, leaf = key.split('.')
    for p in parents:
      node = node[p]
    node[leaf] = type(node[leaf])(eval(value))  # pylint: disable=eval-used
  return c


def slug(cell, algo, seed):
  tag = f'.{FLAGS.tag}' if FLAGS.tag else ''
  return f'{cell}.{algo}.e{FLAGS.epochs}.lr{FLAGS.lr:g}{tag}.s{seed}'


def per_example_correct(results_dir, dataset, model_name):
  """1/0 per test example: the final averaged model of the run classifies it correctly."""
  with np.load(os.path.join(results_dir, 'final_params.npz')) as f:
    flat = {k: f[k] for k in f.files}
  variables = flax.traverse_util.unflatten_dict(flat, sep='/')
  model = models.get_model(model_name, dataset.num_classes)
  if not variables.get('batch_stats'):
    variables = {'params': variables['params']}
  predict = jax.jit(lambda v, x: model.apply(v, steps.preprocess(x, 'none'), train=False))
  out = []
  for b in range(0, len(dataset.x_test), 5000):
    logits = predict(variables, dataset.x_test[b : b + 5000])
    out.append(np.asarray(jax.device_get(logits)).argmax(-1) == dataset.y_test[b : b + 5000])
  return np.concatenate(out).astype(np.uint8)


def recorded(path):
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return {r['slug']: r for r in rows}


def plateau_epoch(curve, within=0.005):
  """The first epoch from which the accuracy stays within `within` of its final value."""
  final = curve[-1]
  for i in range(len(curve)):
    if all(abs(a - final) <= within for a in curve[i:]):
      return i + 1
  return len(curve)


def summary(out):
  """The pilot's tables (Markdown) from `<out>/runs.jsonl` and the per-example files."""
  rows = list(recorded(os.path.join(out, 'runs.jsonl')).values())
  lines = [
    '| cell | algorithm | seeds | final accuracy % (per seed) | mean | paired difference to '
    'S-SGD (per seed) | sd of the difference | verdict at these seeds | seeds needed | '
    'wall s / run |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ]
  for cell in CELLS:
    here = [r for r in rows if r['cell'] == cell]
    if not here:
      continue
    ref = {r['seed']: r for r in here if r['algo'] == 'ssgd'}
    for algo in ('ssgd', 'cocod_sgd', 'local_sgd', 'pipe_sgd'):
      runs = sorted((r for r in here if r['algo'] == algo), key=lambda r: r['seed'])
      if not runs:
        continue
      accs = [100 * r['final_accuracy'] for r in runs]
      walls = [r['wall_s'] for r in runs]
      diff_text = sd_text = verdict = needed = ''
      paired = [r for r in runs if r['seed'] in ref]
      if algo != 'ssgd' and paired:
        a = np.stack([np.load(os.path.join(out, r['slug'] + '.correct.npy')) for r in paired])
        b = np.stack(
          [np.load(os.path.join(out, ref[r['seed']]['slug'] + '.correct.npy')) for r in paired]
        )
        d = 100 * (a.mean(1) - b.mean(1))
        diff_text = ', '.join(f'{x:+.2f}' for x in d)
        c = stats.compare(a, b)
        sd_text = f'{np.std(d, ddof=1):.2f}' if len(d) > 1 else 'n/a'
        verdict = f'{c.verdict} [{c.lo:+.2f}, {c.hi:+.2f}]' if len(d) > 1 else c.verdict
        needed = str(c.seeds_needed) if c.seeds_needed else ('-' if len(d) > 1 else 'n/a')
      lines.append(
        f'| {cell} | {algo} | {len(runs)} | {", ".join(f"{x:.2f}" for x in accs)} | '
        f'{np.mean(accs):.2f} | {diff_text} | {sd_text} | {verdict} | {needed} | '
        f'{np.mean(walls):.0f} [{min(walls):.0f}, {max(walls):.0f}] |'
      )
  lines += ['', '| cell | S-SGD curve (test accuracy % per epoch, seed 0) | plateau epoch |']
  lines.append('|---|---|---|')
  for cell in CELLS:
    r = next((r for r in rows if r['cell'] == cell and r['algo'] == 'ssgd'), None)
    if r:
      curve = ' '.join(f'{100 * a:.1f}' for a in r['curve'])
      lines.append(f'| {cell} | {curve} | {plateau_epoch(r["curve"])} |')
  return '\n'.join(lines) + '\n'


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  if FLAGS.summary:
    print(summary(FLAGS.out))
    return
  os.makedirs(FLAGS.out, exist_ok=True)
  index = os.path.join(FLAGS.out, 'runs.jsonl')
  done = recorded(index)
  if FLAGS.generator:
    for name, (tr, te, _) in list(mnist1d_data.MNIST1D_VARIANTS.items()):
      mnist1d_data.MNIST1D_VARIANTS[name] = (tr, te, json.loads(FLAGS.generator))
  for cell in FLAGS.cells:
    config0 = make_config(cell, FLAGS.algos[0], 0)
    dataset = input_pipeline.load(config0.dataset, config0.data_dir)
    for seed in [int(s) for s in FLAGS.seeds]:
      for algo in FLAGS.algos:
        name = slug(cell, algo, seed)
        if name in done:
          continue
        config = make_config(cell, algo, seed)
        config_validation.validate(config)
        workdir = os.path.join(FLAGS.out, name)
        start = time.perf_counter()
        results = train.train_and_evaluate(config, workdir, dataset)
        wall = time.perf_counter() - start
        correct = per_example_correct(workdir, dataset, config.model.name)
        np.save(os.path.join(FLAGS.out, name + '.correct.npy'), correct)
        row = dict(
          slug=name,
          cell=cell,
          algo=algo,
          seed=seed,
          epochs=FLAGS.epochs,
          lr=FLAGS.lr,
          tag=FLAGS.tag,
          overrides=list(FLAGS.set),
          steps_per_epoch=results['steps_per_epoch'],
          train_examples=results['train_examples'],
          test_examples=results['test_examples'],
          final_accuracy=results['final']['test_accuracy'],
          final_from_correct=float(correct.mean()),
          best_accuracy=max(e['test_accuracy'] for e in results['epochs']),
          curve=[e['test_accuracy'] for e in results['epochs']],
          train_loss=[e['train_loss'] for e in results['epochs']],
          train_time_s=results['final']['train_time_s'],
          wall_s=wall,
        )
        with open(index, 'a') as f:
          f.write(json.dumps(row) + '\n')
        print(
          f'{name}: final {row["final_accuracy"]:.4f} best {row["best_accuracy"]:.4f} '
          f'wall {wall:.1f}s',
          flush=True,
        )


if __name__ == '__main__':
  app.run(main)

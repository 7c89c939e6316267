"""The published MNIST-1D check: our pipeline and models against the authors' figures.

    .venv/bin/python -m cocod_jax.experiments.mnist1d_check --workdir=runs/mnist1d_check \\
        --out=runs/mnist1d_check

S-SGD with one worker on the default 4000/1000 split with the authors' recipe
(configs/mnist1d_check.py: Adam 1e-2, batch 100, 6000 steps), 5 seeds per model, one run after
the other in this process; passes when the mean final test accuracy of each model is within
TOLERANCE points of the published one (CNN 94%, MLP 68%). Writes `mnist1d_check.json` and `.md`
into `--out` with the provenance (commit, whether the tree was dirty, the command, the machine,
the wall time). Exit status 0 when both models pass, 1 otherwise. About 4 minutes on 2 cores.
"""

import os
import platform
import shlex
import statistics
import sys
import time

from absl import app
from absl import flags
from absl import logging

from cocod_jax import train
from cocod_jax import validation as config_validation
from cocod_jax.experiments import flags as experiment_flags
from cocod_jax.record import files
from cocod_jax.record import provenance
from configs import mnist1d_check

PUBLISHED = {'cnn1d': 94.0, 'mlp1d': 68.0}  # Greydanus 2020, MNIST-1D's README and paper.
TOLERANCE = 3.0  # Points.

FLAGS = flags.FLAGS


def hardware() -> dict:
  """The check's hardware, field by field (record/provenance.py `machine` says the machine in one
  line)."""
  import jax  # pylint: disable=g-import-not-at-top

  device = jax.devices()[0]
  return {
    'cpu_cores': os.cpu_count(),
    'platform': platform.machine(),
    'device': f'{len(jax.devices())} {device.platform} ({device.device_kind})',
  }


def check(results: dict) -> dict:
  """Per model: the accuracies over the seeds, their mean and sd, the published figure, pass."""
  out = {}
  for model, accs in results.items():
    mean = statistics.mean(accs)
    out[model] = dict(
      accuracies=accs,
      seeds=len(accs),
      mean=mean,
      sd=statistics.stdev(accs) if len(accs) > 1 else None,
      published=PUBLISHED[model],
      difference=mean - PUBLISHED[model],
      passed=abs(mean - PUBLISHED[model]) <= TOLERANCE,
    )
  return out


def render(summary: dict, meta: dict) -> str:
  lines = [
    '# MNIST-1D: our pipeline and models against the published figures',
    '',
    "S-SGD with one worker on the default 4000/1000 split (`dataset.name=mnist1d`), the authors'"
    ' recipe (`configs/mnist1d_check.py`: Adam, learning rate 1e-2, batch 100, 6000 steps, '
    "batches in the data's order), final test accuracy; passes within "
    f'{TOLERANCE:g} points of the published figure, mean of the seeds.',
    '',
    '| model | seeds | accuracies (%) | mean | sd | published | difference | verdict |',
    '|---|---|---|---|---|---|---|---|',
  ]
  for model, r in summary.items():
    accs = ', '.join(f'{a:.1f}' for a in r['accuracies'])
    sd = f'{r["sd"]:.2f}' if r['sd'] is not None else 'n/a'
    lines.append(
      f'| {model} | {r["seeds"]} | {accs} | {r["mean"]:.2f} | {sd} | {r["published"]:.0f} '
      f'| {r["difference"]:+.2f} | {"pass" if r["passed"] else "FAIL"} |'
    )
  lines += [
    '',
    f'Commit {meta["commit"]} (tree {"dirty" if meta["dirty"] else "clean"}), '
    f'`{meta["command"]}`, {meta["machine"]["cpu_cores"]} CPU cores, '
    f'{meta["machine"]["device"]}, wall time {meta["wall_s"]:.0f} s.',
    '',
  ]
  return '\n'.join(lines)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  start = time.perf_counter()
  meta = dict(
    commit=provenance.commit(),
    dirty=provenance.dirty(),
    command=shlex.join(['python', '-m', __spec__.name] + sys.argv[1:]),
  )
  results = {}
  for model in FLAGS.models:
    if model not in PUBLISHED:
      print(f'error: --models={model!r} is invalid; allowed: {list(PUBLISHED)}', file=sys.stderr)
      return 2
    results[model] = []
    for seed in range(FLAGS.seeds):
      config = mnist1d_check.get_config(f'model={model},seed={seed}')
      config_validation.validate(config)
      workdir = os.path.join(FLAGS.workdir, f'{model}.s{seed}')
      r = train.train_and_evaluate(config, workdir)
      results[model].append(100.0 * r['final']['test_accuracy'])
  summary = check(results)
  meta.update(machine=hardware(), wall_s=time.perf_counter() - start)
  os.makedirs(FLAGS.out, exist_ok=True)
  files.write_json_atomic(
    os.path.join(FLAGS.out, 'mnist1d_check.json'),
    dict(models=summary, tolerance=TOLERANCE, config='configs/mnist1d_check.py', **meta),
  )
  text = render(summary, meta)
  files.write_atomic(os.path.join(FLAGS.out, 'mnist1d_check.md'), text)
  print(text)
  return 0 if all(r['passed'] for r in summary.values()) else 1


if __name__ == '__main__':
  experiment_flags.define_mnist1d_check_flags(PUBLISHED)
  app.run(main, flags_parser=lambda a: experiment_flags.parse(a, 'mnist1d_check'))

"""Per-example correctness of a finished run's final model: what the paired statistics compare.

The tables' verdicts (experiments/stats.py) pair two algorithms by seed and by test example, so
they need, per run, a 0/1 per test example: does the final averaged model (`final_params.npz`)
classify it correctly. `of_run` computes it from the run's own config (the same dataset, model
and preprocessing as its evaluation), checks that its mean is the accuracy the run reported
(a mismatch is an error, never a silent substitute), and caches it beside the run as
`test_correct.npy`. `pack` / `unpack` store a table's [seeds, examples] arrays as bits in one
committed .npz, so a test can recompute every verdict of a committed table.
"""

import functools
import os

import numpy as np

CACHE = 'test_correct.npy'
EVAL_CHUNK = 5000


class CorrectnessError(RuntimeError):
  """A run whose final model does not reproduce the accuracy it reported."""


@functools.lru_cache(maxsize=4)
def _dataset(name, path, num_classes, data_dir, train_examples, test_examples):
  from cocod_jax.data import pipeline as input_pipeline  # pylint: disable=g-import-not-at-top

  return input_pipeline.load_dataset(
    name, path, num_classes, data_dir, train_examples, test_examples
  )


def _predict(config: dict, dataset, params_path: str) -> np.ndarray:
  import flax  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top

  from cocod_jax import models  # pylint: disable=g-import-not-at-top
  from cocod_jax import steps  # pylint: disable=g-import-not-at-top

  with np.load(params_path) as f:
    variables = flax.traverse_util.unflatten_dict({k: f[k] for k in f.files}, sep='/')
  if not variables.get('batch_stats'):
    variables = {'params': variables['params']}
  model = models.get_model(config['model']['name'], dataset.num_classes)
  apply = jax.jit(
    lambda v, x: model.apply(v, steps.preprocess(x, dataset.normalize), train=False).argmax(-1)
  )
  out = [
    np.asarray(apply(variables, dataset.x_test[b : b + EVAL_CHUNK]))
    for b in range(0, len(dataset.x_test), EVAL_CHUNK)
  ]
  return (np.concatenate(out) == dataset.y_test).astype(np.uint8)


def reported_accuracy(results: dict) -> float:
  """The test accuracy (0..1) a run reported for its final averaged model."""
  return (results.get('final') or results['epochs'][-1])['test_accuracy']


def of_run(directory: str, results: dict) -> np.ndarray:
  """1/0 per test example for the final averaged model of the run in `directory`.

  Args:
    directory: the run's workdir (holding final_params.npz).
    results: its results.json (config and the final test accuracy).

  Returns:
    uint8 [test examples].

  Raises:
    CorrectnessError: the model's accuracy differs from the one the run reported by more than
      one example in 10,000 (float summation order aside, they are the same computation).
  """
  cached = os.path.join(directory, CACHE)
  params = os.path.join(directory, 'final_params.npz')
  if os.path.exists(cached) and os.path.getmtime(cached) >= os.path.getmtime(params):
    return np.load(cached)
  c = results['config']
  d = c['dataset']
  dataset = _dataset(
    d['name'], d['path'], d['num_classes'], c.get('data_dir', ''),
    d.get('train_examples', 0), d.get('test_examples', 0),
  )  # fmt: skip
  correct = _predict(c, dataset, params)
  reported = reported_accuracy(results)
  if abs(correct.mean() - reported) > 1e-4:
    raise CorrectnessError(
      f'{directory}: the final model scores {correct.mean():.6f} on the test set, the run '
      f'reported {reported:.6f}'
    )
  tmp = cached + '.tmp.npy'
  np.save(tmp, correct)
  os.replace(tmp, cached)
  return correct


def pack(arrays: dict) -> dict:
  """{name: [seeds, examples] 0/1} -> arrays for np.savez: packed bits and each shape."""
  out = {}
  for name, a in arrays.items():
    a = np.asarray(a, np.uint8)
    out[name] = np.packbits(a, axis=-1)
    out[name + '.shape'] = np.asarray(a.shape)
  return out


def unpack(npz) -> dict:
  """The inverse of `pack`, from a loaded .npz."""
  names = [k for k in npz.files if not k.endswith('.shape')]
  return {
    n: np.unpackbits(npz[n], axis=-1, count=int(npz[n + '.shape'][-1])).astype(np.uint8)
    for n in names
  }

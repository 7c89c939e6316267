"""The published MNIST-1D check's verdict and its artefact text, on given accuracies."""

from cocod_jax.experiments import mnist1d_check


def test_check_and_render():
  summary = mnist1d_check.check({'cnn1d': [95.7, 94.7, 95.1], 'mlp1d': [66.2, 63.0, 64.0]})
  assert summary['cnn1d']['passed'] and summary['cnn1d']['difference'] > 0
  # 64.4 is 3.6 below the published 68: outside the 3 points.
  assert not summary['mlp1d']['passed']
  meta = dict(
    commit='abc',
    dirty=True,
    command='python -m cocod_jax.experiments.mnist1d_check',
    machine={'cpu_cores': 2, 'device': '1 cpu (cpu)'},
    wall_s=12.0,
  )
  text = mnist1d_check.render(summary, meta)
  assert '| cnn1d | 3 | 95.7, 94.7, 95.1 | 95.17 | 0.50 | 94 | +1.17 | pass |' in text
  assert '| FAIL |' in text and 'tree dirty' in text and '2 CPU cores' in text

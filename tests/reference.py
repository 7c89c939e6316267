"""An independent NumPy transcription of ALGORITHMS.md for the `linear` model (softmax regression).

Written from the document, not from the library, so that the library's trajectories can be
checked against it. Every worker's batch is its whole shard (deterministic), lr is constant.
"""

import numpy as np


def grad(w, b, x, y, num_classes):
  """Gradient of the mean cross-entropy of softmax(x @ w + b) over the batch."""
  z = x @ w + b
  z = z - z.max(1, keepdims=True)
  p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
  p[np.arange(len(y)), y] -= 1.0
  return x.T @ p / len(y), p.mean(0)


def opt(params, mom, g, lr, mu, wd):
  """PyTorch-style SGD: d = g + wd p; m = mu m + d; p = p - lr m."""
  new_p, new_m = [], []
  for p, m, gi in zip(params, mom, g):
    d = gi + wd * p
    m = mu * m + d
    new_p.append(p - lr * m)
    new_m.append(m)
  return new_p, new_m


def wavg(trees, weights):
  return [sum(w * t[j] for w, t in zip(weights, trees)) for j in range(len(trees[0]))]


def run(algorithm, shards, num_classes, steps, lr, mu, wd, period, batch_sizes):
  """Returns the final averaged [w, b] after `steps` local iterations of `algorithm`."""
  n = len(shards)
  weights = [m / sum(batch_sizes) for m in batch_sizes]
  d = shards[0][0].shape[1]
  zero = [np.zeros((d, num_classes)), np.zeros(num_classes)]
  x = [[a.copy() for a in zero] for _ in range(n)]
  m = [[a.copy() for a in zero] for _ in range(n)]
  g = lambda i: grad(x[i][0], x[i][1], shards[i][0], shards[i][1], num_classes)
  pending = None
  snapshot = None
  for t in range(steps):
    if algorithm == 'ssgd':
      gbar = wavg([g(i) for i in range(n)], weights)
      for i in range(n):
        x[i], m[i] = opt(x[i], m[i], gbar, lr, mu, wd)
    elif algorithm == 'pipe_sgd':
      gs = [g(i) for i in range(n)]
      if pending is not None:  # Step 0 only fills the pipeline.
        for i in range(n):
          x[i], m[i] = opt(x[i], m[i], pending, lr, mu, wd)
      pending = wavg(gs, weights)
    elif algorithm == 'local_sgd':
      for i in range(n):
        x[i], m[i] = opt(x[i], m[i], g(i), lr, mu, wd)
      if (t + 1) % period == 0 or t + 1 == steps:
        avg = wavg(x, weights)
        x = [[a.copy() for a in avg] for _ in range(n)]
    elif algorithm == 'cocod_sgd':
      if t % period == 0:
        snapshot = [[a.copy() for a in xi] for xi in x]
        average = wavg(snapshot, weights)
      for i in range(n):
        x[i], m[i] = opt(x[i], m[i], g(i), lr, mu, wd)
      if (t + 1) % period == 0 or t + 1 == steps:
        x = [[a + (xi - si) for a, xi, si in zip(average, x[i], snapshot[i])] for i in range(n)]
  return wavg(x, weights)

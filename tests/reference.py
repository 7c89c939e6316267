"""An independent NumPy transcription of ALGORITHMS.md for the `linear` model (softmax regression).

Written from the document, not from the library, so that the library's trajectories can be
checked against it. Deterministic: worker i's shard is read in order, M_i examples a local step
(its whole shard when M_i equals the shard's size), wrapping around; float64 throughout.
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


def run(algorithm, shards, num_classes, steps, lr, mu, wd, period, batch_sizes, speeds=None):
  """Returns the final averaged [w, b] after `steps` global iterations of `algorithm`.

  `lr` is a number or a function of the global step; `speeds` (C_i) matter to AsynLocal-SGD.
  """
  n = len(shards)
  lr_at = lr if callable(lr) else (lambda t: lr)
  weights = [m / sum(batch_sizes) for m in batch_sizes]
  d = shards[0][0].shape[1]
  zero = [np.zeros((d, num_classes)), np.zeros(num_classes)]
  x = [[a.copy() for a in zero] for _ in range(n)]
  m = [[a.copy() for a in zero] for _ in range(n)]
  used = [0] * n  # Local steps taken by each worker: which rows of its shard come next.

  def g(i):
    rows = len(shards[i][1]) // batch_sizes[i]
    r = used[i] % rows
    part = slice(r * batch_sizes[i], (r + 1) * batch_sizes[i])
    used[i] += 1
    return grad(x[i][0], x[i][1], shards[i][0][part], shards[i][1][part], num_classes)

  pending = None
  snapshot = None
  for t in range(steps):
    lr = lr_at(t)
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
    elif algorithm == 'asynlocal_sgd':
      # Round of k = period global steps from t: worker i takes k_i = max(1, floor(k C_i / C_min))
      # local steps, local step s at lr_{t + floor(s k / k_i)}; then the plain mean (equal M).
      if t % period == 0:
        end = min(t + period, steps)
        for i in range(n):
          k_i = max(1, int(period * speeds[i] / min(speeds) + 1e-9))
          for s in range(k_i):
            if t + s * period // k_i >= end:
              break  # The round is cut short by the end of training.
            gi = g(i)
            x[i], m[i] = opt(x[i], m[i], gi, lr_at(t + s * period // k_i), mu, wd)
        mean = wavg(x, [1.0 / n] * n)
        x = [[a.copy() for a in mean] for _ in range(n)]
  return wavg(x, weights)

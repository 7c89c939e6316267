"""An independent NumPy transcription of docs/algorithms.md for the `linear` and `linear_bn` models
(softmax regression, on the raw features or on their BatchNorm standardisation).

Written from the document, not from the library, so that the library's trajectories can be
checked against it. Deterministic: worker i's shard is read in order, M_i examples a local step
(its whole shard when M_i equals the shard's size), wrapping around; float64 throughout.

What the options transcribe (docs/algorithms.md, "Notation", and the config fields named):
- `warmup_steps` (`algorithm.warmup_period_epochs` x steps per epoch): rounds of one step until
  then, rounds of `period` after, counted from the end of the warm-up; the last round is cut by
  the end of training.
- `bn` (model `linear_bn`): each worker's `x` holds BatchNorm running statistics (mean, var)
  besides the parameters. A training step standardises its batch with the batch's mean and
  (biased) variance, `(z - mean) / sqrt(var + 1e-5)`, and moves the running statistics to
  `0.9 stat + 0.1 batch_stat`. Without scale or bias the standardisation has no parameters, so
  the gradient is the linear model's on the standardised batch.
- `average_batch_stats`: the statistics are averaged with the model (Local-SGD, CoCoD-SGD) or
  with the gradient (S-SGD, Pipe-SGD: the averaged statistics replace each worker's; for Pipe-SGD
  those of the step before, as its gradient); otherwise each worker keeps its own.
- `average_momentum`: the momentum buffers are averaged with the model (Local-SGD, CoCoD-SGD).
- `correction` (CoCoD-SGD's `algorithm.correction`), with `a` the average of the snapshots `s`,
  `x` a worker's model at the round's end and `c` where its round started:
  `cocod` x <- a + (x - s), the next round sends x; `blend` (`alpha`) x <- (1 - alpha) a +
  alpha x and `reset` x <- a, the next round sending a + (x - c); `outer_sgd` (`outer`: lr,
  momentum, nesterov) a shared anchor g moves by SGD on the outer gradient g - a (PyTorch-style
  Nesterov: m = mu m + d, u = d + mu m), g' = g - lr u, and x <- g' + (x - s), sent next;
  `eager` (`eager`: lambda, gamma) with a shared C (x_0) and E (0): u = (a - C - E) / lambda,
  C <- C + u, E <- gamma (1 - lambda) u, x <- C + lambda (x - s) + E, sent next; `anchor`
  (`anchor`: pull p, momentum beta) with z = a: x <- (1 - p) x + p z, v <- beta v + (z - x) / eta
  (the pulled x, eta the learning rate of the round's last step), the next round sending z - eta v.
- `delay` (tau): a round of L steps takes its snapshot (the synced values as they stand) before
  its step L - min(tau, L) instead of its first; `cocod` only.
- `fragments` (P > 1, streamed CoCoD-SGD, `cocod` only; tau = `delay`, 1 when None): the synced
  values flattened in order (w row-major, b, then the statistics, then the momentum: the order in
  which the library's tree sorts them is checked by the tests, not assumed here; `order` gives
  it) into N elements, element g in fragment floor(g P / N). A round of L >= P steps: fragment f
  ends at step e_f = floor((f + 1) L / P) - 1 of the round, its snapshot is taken before step
  max(0, e_f - tau + 1), and after step e_f every worker's elements of it get x + (a - s), a the
  weighted average of its snapshots; a round of L < P steps: the whole model as one fragment,
  snapshot before step L - min(tau, L), corrected after step L - 1. At a step boundary the
  corrections due come first, then the snapshots.
The final model is the weighted average of every worker's parameters and statistics; with
`eager`, of the synced values C + (A - C - E) / lambda + (mean x - A), with A the average of the
snapshots of the round in flight (at a round's end: mean x). A round that training ends in the
middle of is closed by nothing but that final average.
"""

import numpy as np

BN_MOMENTUM, BN_EPS = 0.9, 1e-5


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


def run(algorithm, shards, num_classes, steps, lr, mu, wd, period, batch_sizes, speeds=None,
        warmup_steps=0, bn=False, average_batch_stats=True, average_momentum=False,
        correction='cocod', alpha=0.0, outer=(0.7, 0.9, True), eager=(1.0, 0.0),
        anchor=(0.6, 0.7), delay=None, workers_out=None, fragments=1, order=None):  # fmt: skip
  """Returns the final averaged [w, b] (and [mean, var] with `bn`) after `steps` global
  iterations of `algorithm`.

  `lr` is a number or a function of the global step; `speeds` (C_i) matter to AsynLocal-SGD;
  the other options are described in the module docstring. `workers_out`, a list, receives each
  worker's [w, b, momentum of w, momentum of b] (and [mean, var]) before the final average.
  `order`: with `fragments`, the positions in `synced(i)` of the arrays in the order they are
  flattened (default: as `synced` lists them).
  """
  n = len(shards)
  lr_at = lr if callable(lr) else (lambda t: lr)
  weights = [m / sum(batch_sizes) for m in batch_sizes]
  d = shards[0][0].shape[1]
  zero = [np.zeros((d, num_classes)), np.zeros(num_classes)]
  x = [[a.copy() for a in zero] for _ in range(n)]
  m = [[a.copy() for a in zero] for _ in range(n)]
  stats = [[np.zeros(d), np.ones(d)] for _ in range(n)]  # BatchNorm (mean, var) per worker.
  used = [0] * n  # Local steps taken by each worker: which rows of its shard come next.

  def g(i):
    """Worker i's gradient at its x on its next batch, and the batch's (mean, var) with `bn`."""
    rows = len(shards[i][1]) // batch_sizes[i]
    r = used[i] % rows
    part = slice(r * batch_sizes[i], (r + 1) * batch_sizes[i])
    used[i] += 1
    feats, labels = shards[i][0][part].astype(np.float64), shards[i][1][part]
    batch = None
    if bn:
      batch = [feats.mean(0), feats.var(0)]
      feats = (feats - batch[0]) / np.sqrt(batch[1] + BN_EPS)
    return grad(x[i][0], x[i][1], feats, labels, num_classes), batch

  def moved(old, batch):
    return [BN_MOMENTUM * o + (1 - BN_MOMENTUM) * s for o, s in zip(old, batch)]

  def local_step(i, lr):
    gi, batch = g(i)
    x[i], m[i] = opt(x[i], m[i], gi, lr, mu, wd)
    if bn:
      stats[i] = moved(stats[i], batch)

  def synced(i):
    """What the model averages hold for worker i: parameters, statistics, momentum."""
    return (
      x[i] + (stats[i] if bn and average_batch_stats else []) + (m[i] if average_momentum else [])
    )

  def set_synced(i, values):
    values = list(values)
    x[i] = values[:2]
    rest = values[2:]
    if bn and average_batch_stats:
      stats[i], rest = rest[:2], rest[2:]
    if average_momentum:
      m[i] = rest[:2]

  def round_start(t):
    return t < warmup_steps or (t - warmup_steps) % period == 0

  def round_end(t):
    return t + 1 <= warmup_steps or (t + 1 - warmup_steps) % period == 0

  def correct(i, xi, a, si, ci, outer_state, eta):
    """Worker i's corrected synced values, what it sends next, where it starts from next, and
    the outer (anchor, momentum), or (C, E) with `eager`, or its velocity with `anchor`."""
    if correction == 'eager':
      lam, gamma = eager
      common, ahead = outer_state
      u = [(aj - cj - ej) / lam for aj, cj, ej in zip(a, common, ahead)]
      common = [cj + uj for cj, uj in zip(common, u)]
      ahead = [gamma * (1 - lam) * uj for uj in u]
      new = [cj + lam * (xj - sj) + ej for cj, xj, sj, ej in zip(common, xi, si, ahead)]
      return new, new, new, (common, ahead)
    if correction == 'anchor':
      pull, beta = anchor
      new = [(1 - pull) * xj + pull * zj for xj, zj in zip(xi, a)]
      velocity = [beta * v + (zj - xj) / eta for v, zj, xj in zip(outer_state, a, new)]
      return new, [zj - eta * v for zj, v in zip(a, velocity)], new, velocity
    if correction == 'cocod':
      new = [aj + (xj - sj) for aj, xj, sj in zip(a, xi, si)]
      return new, new, new, outer_state
    if correction in ('reset', 'blend'):
      w = 0.0 if correction == 'reset' else alpha
      new = [(1 - w) * aj + w * xj for aj, xj in zip(a, xi)]
      return new, [aj + (xj - cj) for aj, xj, cj in zip(a, xi, ci)], new, outer_state
    lr_out, mu_out, nesterov = outer
    shared, mom = outer_state
    grad = [g - aj for g, aj in zip(shared, a)]
    mom = [mu_out * m + d for m, d in zip(mom, grad)]
    step = [d + mu_out * m for d, m in zip(grad, mom)] if nesterov else mom
    shared = [g - lr_out * u for g, u in zip(shared, step)]
    new = [g + (xj - sj) for g, xj, sj in zip(shared, xi, si)]
    return new, new, new, (shared, mom)

  def flat(i):
    """Worker i's synced values as one vector, in the flattening order."""
    values = synced(i)
    return np.concatenate([values[j].reshape(-1) for j in (order or range(len(values)))])

  def set_flat(i, vector):
    values = [v.copy() for v in synced(i)]
    at = 0
    for j in order or range(len(values)):
      size = values[j].size
      values[j] = vector[at : at + size].reshape(values[j].shape)
      at += size
    set_synced(i, values)

  stream = []  # Streamed CoCoD-SGD: [(end step, element slice, snapshots)] in flight, in order.
  stream_plan = {}  # step -> [(end step, element slice)] whose snapshots are taken before it.

  pending = None
  snapshot = None
  sent = origin = outers = None  # CoCoD-SGD: what each worker sends next, its round's origin.
  snap_at, in_flight = None, False  # CoCoD-SGD: the step its round snapshots before.
  for t in range(steps):
    lr = lr_at(t)
    if algorithm in ('ssgd', 'pipe_sgd'):
      computed = [g(i) for i in range(n)]
      gbar = wavg([c[0] for c in computed], weights)
      new_stats = [moved(stats[i], c[1]) for i, c in enumerate(computed)] if bn else None
      if bn and average_batch_stats:
        mean_stats = wavg(new_stats, weights)
        new_stats = [[a.copy() for a in mean_stats] for _ in range(n)]
      if algorithm == 'ssgd':
        for i in range(n):
          x[i], m[i] = opt(x[i], m[i], gbar, lr, mu, wd)
          stats[i] = new_stats[i] if bn else stats[i]
      else:
        if pending is not None:  # Step 0 only fills the pipeline.
          for i in range(n):
            x[i], m[i] = opt(x[i], m[i], pending[0], lr, mu, wd)
            if bn:  # The statistics travel with the gradient: those of the step before.
              stats[i] = pending[1][i] if average_batch_stats else new_stats[i]
        pending = (gbar, new_stats)
    elif algorithm == 'local_sgd':
      for i in range(n):
        local_step(i, lr)
      if round_end(t):
        avg = wavg([synced(i) for i in range(n)], weights)
        for i in range(n):
          set_synced(i, [a.copy() for a in avg])
    elif algorithm == 'cocod_sgd' and fragments > 1:
      tau = 1 if delay is None else delay
      if round_start(t):
        length = 1 if t < warmup_steps else period
        total = len(flat(0))
        if length < fragments:
          items = [(t + length - min(tau, length), t + length - 1, slice(0, total))]
        else:
          items = []
          for f in range(fragments):
            e = (f + 1) * length // fragments - 1
            lo, hi = -(-f * total // fragments), -(-(f + 1) * total // fragments)
            items.append((t + max(0, e - tau + 1), t + e, slice(lo, hi)))
        for at, end, part in items:
          stream_plan.setdefault(at, []).append((end, part))
      for end, part in stream_plan.pop(t, []):
        stream.append((end, part, [flat(i)[part].copy() for i in range(n)]))
      for i in range(n):
        local_step(i, lr)
      while stream and stream[0][0] == t:
        _, part, snaps = stream.pop(0)
        a = sum(w * s_ for w, s_ in zip(weights, snaps))
        for i in range(n):
          vector = flat(i)
          vector[part] = vector[part] + (a - snaps[i])
          set_flat(i, vector)
    elif algorithm == 'cocod_sgd':
      if sent is None:  # The first round: every worker sends, and starts from, its x_0.
        sent = [[a.copy() for a in synced(i)] for i in range(n)]
        origin = [[a.copy() for a in synced(i)] for i in range(n)]
        outers = [([a.copy() for a in synced(i)], [0.0 * a for a in synced(i)]) for i in range(n)]
        if correction == 'eager':  # (C, E), the same on every worker.
          outers = [([a.copy() for a in synced(0)], [0.0 * a for a in synced(0)])] * n
        if correction == 'anchor':  # The velocities.
          outers = [[0.0 * a for a in synced(i)] for i in range(n)]
      if round_start(t):
        length = 1 if t < warmup_steps else period
        snap_at = t + length - (length if delay is None else min(delay, length))
      if t == snap_at:
        snapshot = sent if delay is None else [[a.copy() for a in synced(i)] for i in range(n)]
        average = wavg(snapshot, weights)
        in_flight = True
      for i in range(n):
        local_step(i, lr)
      if round_end(t):
        out = [correct(i, synced(i), average, snapshot[i], origin[i], outers[i], lr)
               for i in range(n)]  # fmt: skip
        for i in range(n):
          set_synced(i, out[i][0])
        sent = [o[1] for o in out]
        origin = [o[2] for o in out]
        outers = [o[3] for o in out]
        in_flight = False
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
            gi, _ = g(i)
            x[i], m[i] = opt(x[i], m[i], gi, lr_at(t + s * period // k_i), mu, wd)
        mean = wavg(x, [1.0 / n] * n)
        x = [[a.copy() for a in mean] for _ in range(n)]
  if workers_out is not None:
    workers_out.extend(x[i] + m[i] + (stats[i] if bn else []) for i in range(n))
  if algorithm == 'cocod_sgd' and correction == 'eager':
    lam = eager[0]
    common, ahead = outers[0]
    mean = wavg([synced(i) for i in range(n)], weights)
    now = average if in_flight else mean
    evaluated = [c + (a - c - e) / lam + (m - a) for c, a, e, m in zip(common, now, ahead, mean)]
    for i in range(n):  # Every worker then holds it (the momentum is not synced: refused).
      set_synced(i, [a.copy() for a in evaluated])
  final = wavg(x, weights)
  return final + (wavg(stats, weights) if bn else [])

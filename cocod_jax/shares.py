"""Each worker's share of the work: its speed C_i, batch size M_i, local steps k_i in a round,
shard and weight w_i; pure functions of the config.

Derived values are computed only here, so that an override (`--config.batch_size=64`) changes
every quantity that follows from it consistently (docs/algorithms.md, "Heterogeneous clusters").
The schedules in time (the learning rate, the period's warm-up) are schedules.py's.
"""


def batch_sizes(config) -> list[int]:
  """Per-worker batch sizes M_i: proportional to `worker_speeds` under proportional sampling."""
  n = config.num_workers
  speeds = list(config.worker_speeds) or [1.0] * n
  if not config.proportional_sampling:
    return [config.batch_size] * n
  slowest = min(speeds)
  return [max(1, int(round(config.batch_size * s / slowest))) for s in speeds]


def speeds(config) -> list[float]:
  """C_i of every worker (`worker_speeds`; all 1 when not given)."""
  return [float(c) for c in config.worker_speeds] or [1.0] * config.num_workers


def local_periods(config, k: int) -> list[int]:
  """k_i: local steps of each worker in a round of k global steps.

  AsynLocal-SGD: `max(1, floor(k * C_i / C_min))` (the fast workers keep running local SGD while
  the slowest makes its k steps); every other algorithm: k for everyone.
  """
  if config.algorithm.name != 'asynlocal_sgd':
    return [k] * config.num_workers
  c = speeds(config)
  # The small tolerance keeps k * C_i / C_min = 2.0000000001 or 1.9999999999 from a float
  # ratio like 0.6 / 0.3 on the integer it means.
  return [max(1, int(k * ci / min(c) + 1e-9)) for ci in c]


def shard_weights(sizes: list[int], periods: list[int]) -> list[float]:
  """|D_i| ~ M_i * k_i: what each worker consumes in a round (docs/algorithms.md), so that all
  workers finish an epoch together; `sizes` the M_i, `periods` the k_i after the warm-up."""
  return [float(m * k) for m, k in zip(sizes, periods)]


def worker_table(c: list[float], sizes: list[int], periods: list[int]) -> list[dict]:
  """Per worker: speed C_i, batch M_i, local steps k_i per round, and the share of every round it
  spends waiting for the slowest by the time model (docs/algorithms.md): worker i needs time
  ~ M_i k_i / C_i for a round, and the round lasts as long as the longest of these. With PS or
  AsynLocal-SGD the workers are balanced; without, the faster ones wait `1 - C_min / C_i`.
  `c`, `sizes`, `periods`: every worker's C_i, M_i and k_i."""
  need = [m * k / ci for m, k, ci in zip(sizes, periods, c)]
  return [
    dict(
      worker=i,
      speed=c[i],
      batch=sizes[i],
      local_steps=periods[i],
      idle_fraction_model=round(1.0 - need[i] / max(need), 6),
    )  # fmt: skip
    for i in range(len(c))
  ]


def worker_weights(sizes) -> list[float]:
  """`w_i = M_i / sum_j M_j` (docs/algorithms.md): every average in the project uses these
  weights."""
  total = float(sum(sizes))
  return [m / total for m in sizes]

"""The procedure of stats.py on simulated cells of known truth: per-example correctness on a
common test set, and how often each verdict comes out (the power of the procedure).

tests/stats_test.py checks with these that the crossed standard error counts the test set's part
and that the verdicts come out as often as planned at the spread measured in the pilot
(docs/paper-cpu/pilot.md).
"""

import numpy as np

from cocod_jax.experiments import stats


def simulate_correctness(
  rng: np.random.Generator,
  seeds: int,
  examples: int,
  accuracy: float,
  seed_sd: float,
  shift: float = 0.0,
  difficulty: np.ndarray | None = None,
) -> np.ndarray:
  """Simulated [seeds, examples] 0/1 correctness of one algorithm on a common test set.

  Example j has a difficulty (a logit, the same for every algorithm and seed: `difficulty`);
  run s gets a logit offset b_s ~ N(0, tau^2) (its seed's luck), and is right on j with
  probability sigmoid(difficulty_j + b_s + shift). tau is set so that the run's accuracy moves
  from seed to seed by about `seed_sd` points; `shift` moves the algorithm's accuracy.

  Args:
    rng: the random generator.
    seeds: runs (rows).
    examples: test examples (columns), when `difficulty` is not given.
    accuracy: the mean accuracy (fraction) that sets the difficulties when they are not given.
    seed_sd: the seed-to-seed standard deviation of a run's accuracy, points.
    shift: a logit offset of this algorithm (0: the same as the reference).
    difficulty: the examples' logits, shared between the algorithms compared.

  Returns:
    uint8 [seeds, examples].
  """
  if difficulty is None:
    difficulty = example_difficulty(rng, examples, accuracy)
  p = 1.0 / (1.0 + np.exp(-difficulty))
  # d accuracy / d offset = mean p (1 - p): the offset's sd that moves the accuracy by seed_sd.
  tau = (seed_sd / 100.0) / max(float(np.mean(p * (1 - p))), 1e-9)
  offsets = rng.normal(0.0, tau, size=(seeds, 1)) + shift
  prob = 1.0 / (1.0 + np.exp(-(difficulty[None, :] + offsets)))
  return (rng.random(prob.shape) < prob).astype(np.uint8)


def example_difficulty(rng: np.random.Generator, examples: int, accuracy: float) -> np.ndarray:
  """Logits of `examples` test examples whose mean probability of being right is `accuracy`:
  most examples easy, some hard (a logistic-normal spread of sd 3), centred to that mean."""
  z = rng.normal(0.0, 3.0, size=examples)
  lo, hi = -20.0, 20.0
  for _ in range(60):  # Bisection on the centre: the mean of sigmoid(z + c) is monotone in c.
    c = (lo + hi) / 2
    if np.mean(1.0 / (1.0 + np.exp(-(z + c)))) < accuracy:
      lo = c
    else:
      hi = c
  return z + (lo + hi) / 2


def shift_for(difficulty: np.ndarray, points: float) -> float:
  """The logit offset that changes the mean accuracy over `difficulty` by `points`."""
  base = np.mean(1.0 / (1.0 + np.exp(-difficulty)))
  lo, hi = -10.0, 10.0
  for _ in range(60):
    c = (lo + hi) / 2
    if 100.0 * (np.mean(1.0 / (1.0 + np.exp(-(difficulty + c)))) - base) < points:
      lo = c
    else:
      hi = c
  return (lo + hi) / 2


def verdict_rates(
  rng: np.random.Generator,
  true_difference: float,
  seeds: int,
  sd_difference: float,
  trials: int,
  margin: float = stats.MARGIN,
) -> dict[str, float]:
  """How often each verdict comes out for an algorithm `true_difference` points from S-SGD,
  when the paired difference moves from seed to seed with sd `sd_difference` (as measured: it
  holds the training noise and the flips of test examples between runs).

  Each trial draws S-SGD's accuracies and the algorithm's, `seeds` pairs, and runs
  `stats.compare` on them (the paired t-test over seeds).

  Args:
    rng: the random generator.
    true_difference: the algorithm's accuracy minus S-SGD's, points.
    seeds: seeds per algorithm.
    sd_difference: the seed-to-seed sd of a pair's difference, points.
    trials: simulated cells.
    margin: the equivalence margin.

  Returns:
    {verdict: fraction of the trials}.
  """
  counts = dict.fromkeys(stats.VERDICTS, 0)
  for _ in range(trials):
    ref = 90.0 + rng.normal(0.0, 1.0, seeds)  # Its own level and spread cancel in the pairs.
    alg = ref + true_difference + rng.normal(0.0, sd_difference, seeds)
    counts[stats.compare(alg, ref, margin).verdict] += 1
  return {k: v / trials for k, v in counts.items()}

"""The paired equivalence procedure behind the tables' parity verdicts (issue 21, item 3).

Decided before any table run; the tables apply it as written here. The question per cell: does
an algorithm reach the test accuracy of S-SGD, to within the paper's tolerance of MARGIN = 0.5
point?

The design. Every algorithm of a cell runs with the same seeds as S-SGD; a seed fixes x_0, the
shards and every epoch's batch order (plan.batch_table), so run s of the algorithm and run s of
S-SGD differ only by the algorithm: they are a pair. Both are scored on the same test examples.
The quantity compared is the difference d = accuracy(algorithm) - accuracy(S-SGD) in points,
averaged over the seeds, of the final averaged model of each run (the tables also print the
best accuracy over the epochs, as the paper does, but a maximum over epochs picked on the test
set is biased upwards, by more for a noisier curve, so it is not what is tested).

Its standard error, from the per-example 0/1 correctness of both algorithms, a [seeds, examples]
table D = correct(algorithm) - correct(S-SGD) of a crossed design (seeds x test examples):

  Var(mean D) = var_seed / S + var_example / n + var_residual / (S n),

- var_seed: how much the difference moves from seed to seed (training noise, on these examples);
- var_example: how much the algorithms' difference depends on which examples the test set
  holds (the test set as a sample of the task: it does not shrink with more seeds, only with a
  larger test set, which MNIST-1D can generate);
- var_residual: the rest (which examples flip in a given pair of runs).

estimated with the mean squares of a two-way analysis without replication,
(MS_seed + MS_example - MS_residual) / (S n), degrees of freedom by Satterthwaite; an example
part estimated below zero is taken as zero (then it is the paired t-test over seeds, df S - 1).
Given per-seed accuracies only, the standard error is the paired t-test's (s_d / sqrt(S),
df S - 1), which conditions on this test set (its example part is then not counted).

The verdict, from the two one-sided tests (TOST) at ALPHA = 0.05, i.e. the 90% confidence
interval [lo, hi] of the mean difference:

- equivalent: -MARGIN < lo and hi < MARGIN (both one-sided tests reject: the difference is
  within the margin either way);
- worse: hi < -MARGIN (the algorithm is below S-SGD by more than the margin, at 95% confidence);
- better: lo > MARGIN (above S-SGD by more than the margin);
- inconclusive: anything else (the interval crosses -MARGIN or +MARGIN): these seeds cannot
  tell; `seeds_needed` says how many would, if the observed difference and spreads held.

`noninferior` (lo > -MARGIN) is reported beside it: the paper's claim is one-sided (not worse),
and an interval such as [-0.3, +0.7] supports it though it is not "equivalent".

With one seed (the paper's tables: one number per cell) nothing can be concluded: there is no
estimate of the seed-to-seed spread, so every verdict is inconclusive; `paper_table` shows what
a single run could conclude if that spread were known (`python -m cocod_jax.experiments.stats`).
How the procedure fares on simulated cells of known truth: stats_simulation.py.
"""

import dataclasses
import math
import sys

import numpy as np
from scipy import stats as scipy_stats

MARGIN = 0.5  # Accuracy points: the paper's parity claim, within half a point of S-SGD.
ALPHA = 0.05  # Each one-sided test; the interval is the 1 - 2 ALPHA = 90% one.
POWER = 0.8  # The power `seeds_needed` plans for.
MAX_SEEDS = 1000
VERDICTS = ('equivalent', 'worse', 'better', 'inconclusive')


@dataclasses.dataclass
class Comparison:
  """One algorithm against S-SGD in one cell (accuracies and differences in points).

  Attributes:
    verdict: one of VERDICTS (see the module docstring).
    difference: mean over the seeds of accuracy(algorithm) - accuracy(S-SGD).
    se: its standard error.
    df: degrees of freedom of the t distribution (inf: the spreads were given, not estimated).
    lo, hi: the 90% confidence interval of the difference.
    p_not_below: p of the one-sided test of H0: difference <= -margin.
    p_not_above: p of the one-sided test of H0: difference >= +margin.
    noninferior: lo > -margin.
    seeds: seeds compared (pairs).
    test_examples: examples each run was scored on (None: only accuracies were given).
    var_seed, var_example, var_residual: the estimated parts (points^2; see the module).
    seeds_needed: for an inconclusive verdict, the seeds that would reach a verdict with 80%
      power if the observed difference and spreads held (None: none would, within MAX_SEEDS,
      or the spread cannot be estimated).
  """

  verdict: str
  difference: float
  se: float
  df: float
  lo: float
  hi: float
  p_not_below: float
  p_not_above: float
  noninferior: bool
  seeds: int
  test_examples: int | None
  var_seed: float
  var_example: float
  var_residual: float
  seeds_needed: int | None
  margin: float = MARGIN

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


def verdict_of(lo: float, hi: float, margin: float = MARGIN) -> str:
  """The verdict of a 90% interval [lo, hi] of the difference (module docstring)."""
  if -margin < lo and hi < margin:
    return 'equivalent'
  if hi < -margin:
    return 'worse'
  if lo > margin:
    return 'better'
  return 'inconclusive'


def _mean_squares(diff):
  """(MS_seed, MS_example, MS_residual) of a [S, n] table, residual from the totals (no [S, n]
  temporary of residuals)."""
  s, n = diff.shape
  grand = diff.mean()
  ms_seed = n * np.sum((diff.mean(axis=1) - grand) ** 2) / (s - 1)
  ms_example = s * np.sum((diff.mean(axis=0) - grand) ** 2) / (n - 1)
  ss_total = np.sum((diff - grand) ** 2)
  ss_residual = ss_total - (s - 1) * ms_seed - (n - 1) * ms_example
  return ms_seed, ms_example, max(ss_residual, 0.0) / ((s - 1) * (n - 1))


def variance_parts(diff: np.ndarray) -> tuple[float, float, float]:
  """(var_seed, var_example, var_residual) of a [seeds, examples] table of differences.

  Mean squares of the two-way analysis without replication, turned into the parts of
  Var(mean) = var_seed / S + var_example / n + var_residual / (S n) (module docstring);
  var_example is clipped at zero.

  Args:
    diff: [S, n] per-seed, per-example differences (points: +-100 or 0), S >= 2, n >= 2.

  Returns:
    the three parts in points^2.
  """
  s, n = diff.shape
  ms_seed, ms_example, ms_residual = _mean_squares(diff)
  # D_sj = mu + a_s + b_j + e_sj: E[MS_seed] = var_e + n var_a, E[MS_example] = var_e + S var_b,
  # E[MS_residual] = var_e; Var(mean) = var_a / S + var_b / n + var_e / (S n).
  var_seed = max(ms_seed - ms_residual, 0.0) / n
  var_example = max(ms_example - ms_residual, 0.0) / s
  return float(var_seed), float(var_example), float(ms_residual)


def _se_crossed(diff):
  """(se, df) of the mean of a [S, n] table of differences (module docstring)."""
  s, n = diff.shape
  ms_seed, ms_example, ms_residual = _mean_squares(diff)
  extra = ms_example - ms_residual  # S n var_example / n: the test set's part, if any.
  if extra <= 0:
    return math.sqrt(ms_seed / (s * n)), float(s - 1)
  var = (ms_seed + extra) / (s * n)
  # Satterthwaite: the df of a sum of mean squares with coefficients +1, +1, -1.
  terms = [(ms_seed, s - 1), (ms_example, n - 1), (ms_residual, (s - 1) * (n - 1))]
  denom = sum(m * m / d for m, d in terms if d > 0)
  df = (ms_seed + extra) ** 2 / denom if denom > 0 else float('inf')
  return math.sqrt(var), float(df)


def _t(df, q):
  return float(scipy_stats.norm.ppf(q)) if math.isinf(df) else float(scipy_stats.t.ppf(q, df))


def seeds_needed(
  difference: float,
  var_seed: float,
  var_example: float = 0.0,
  var_residual: float = 0.0,
  test_examples: int | None = None,
  margin: float = MARGIN,
  alpha: float = ALPHA,
  power: float = POWER,
) -> int | None:
  """The fewest seeds with which a cell of this true difference and these spreads reaches a
  verdict (equivalent if |difference| < margin, else worse or better) with `power`.

  Uses the t quantile of S - 1 degrees of freedom for the test and the normal one for the power:
  the seeds S with |margin - |difference|| >= (t_{1-alpha, S-1} + z_power) se(S), where
  se(S)^2 = var_seed / S + var_example / n + var_residual / (S n).

  Args:
    difference: the (assumed true) mean difference, points.
    var_seed, var_example, var_residual: the parts of the variance (points^2).
    test_examples: n (needed when var_example or var_residual is not 0).
    margin: the equivalence margin.
    alpha: each one-sided test's level.
    power: the probability of reaching the verdict.

  Returns:
    S >= 2, or None when no number up to MAX_SEEDS suffices (a difference at the margin, or a
    test set whose own part of the variance leaves no room).
  """
  room = abs(margin - abs(difference))
  n = test_examples or 1
  z = float(scipy_stats.norm.ppf(power))
  for s in range(2, MAX_SEEDS + 1):
    se = math.sqrt(var_seed / s + var_example / n + var_residual / (s * n))
    if room > (_t(s - 1, 1 - alpha) + z) * se:
      return s
  return None


def compare(
  algo, reference, margin: float = MARGIN, alpha: float = ALPHA, test_examples: int | None = None
) -> Comparison:
  """The verdict of an algorithm against S-SGD in one cell, paired by seed (and by example).

  Args:
    algo: the algorithm's results, one row per seed in the same seed order as `reference`:
      accuracies in points ([S]), or per-example 0/1 correctness on the common test set
      ([S, n]), which adds the test set's part to the standard error.
    reference: S-SGD's, of the same shape.
    margin: the equivalence margin (points).
    alpha: each one-sided test's level (the interval is 1 - 2 alpha).
    test_examples: with accuracies only: the test set's size, recorded (not used in the test).

  Returns:
    the Comparison.

  Raises:
    ValueError: shapes that differ, or fewer than one seed.
  """
  a, b = np.asarray(algo, np.float64), np.asarray(reference, np.float64)
  if a.shape != b.shape or a.ndim not in (1, 2) or a.shape[0] < 1:
    raise ValueError(
      f'algo and reference must both be [seeds] accuracies or [seeds, examples] correctness '
      f'of the same shape; got {list(a.shape)} and {list(b.shape)}'
    )
  s = a.shape[0]
  if a.ndim == 2:
    diff = 100.0 * (a - b)
    test_examples = a.shape[1]
    parts = variance_parts(diff) if s > 1 and test_examples > 1 else (math.nan,) * 3
    by_seed = diff.mean(axis=1)
  else:
    by_seed = a - b
    parts = (float(np.var(by_seed, ddof=1)), 0.0, 0.0) if s > 1 else (math.nan,) * 3
    diff = None
  mean = float(by_seed.mean())
  if s < 2:  # No spread between seeds can be estimated: nothing can be concluded.
    return Comparison(
      'inconclusive', mean, math.nan, 0.0, -math.inf, math.inf, math.nan, math.nan, False,
      s, test_examples, *parts, None, margin,
    )  # fmt: skip
  if diff is not None:
    se, df = _se_crossed(diff)
  else:
    se, df = float(np.std(by_seed, ddof=1)) / math.sqrt(s), float(s - 1)
  t = _t(df, 1 - alpha)
  lo, hi = mean - t * se, mean + t * se
  if se > 0:
    p_below = float(scipy_stats.t.sf((mean + margin) / se, df))
    p_above = float(scipy_stats.t.cdf((mean - margin) / se, df))
  else:  # Identical results on every seed: the interval is the point itself.
    p_below = 0.0 if mean > -margin else 1.0
    p_above = 0.0 if mean < margin else 1.0
  verdict = verdict_of(lo, hi, margin)
  needed = None
  if verdict == 'inconclusive':
    needed = seeds_needed(mean, *parts, test_examples, margin, alpha)
  return Comparison(
    verdict, mean, se, df, lo, hi, p_below, p_above, lo > -margin, s, test_examples, *parts,
    needed, margin,
  )  # fmt: skip


def single_run(difference: float, sd: float, margin: float = MARGIN, alpha: float = ALPHA) -> str:
  """The verdict one pair of runs would get if the sd of a pair's difference were known to be
  `sd` points (a z interval: difference +- z_{1-alpha} sd)."""
  z = float(scipy_stats.norm.ppf(1 - alpha))
  return verdict_of(difference - z * sd, difference + z * sd, margin)


def paper_table(table: dict, tasks, names, assumed_sds=(0.1, 0.2, 0.3)) -> str:
  """What the procedure concludes from a table of the paper (one number per cell).

  Per algorithm and task: the difference to S-SGD, the procedure's verdict (inconclusive: one
  run per cell, so no seed-to-seed spread), and the verdict a single pair of runs would get if
  the sd of a pair's difference were each of `assumed_sds` points (known, not estimated).

  Args:
    table: {algorithm: accuracies per task} (published.TABLE1 or TABLE2), S-SGD as 'ssgd'.
    tasks: the task names, in the table's column order.
    names: {algorithm: printed name}.
    assumed_sds: the sds of a pair's difference to show.

  Returns:
    Markdown text.
  """
  ssgd = table['ssgd']
  head = ' | '.join(f'if sd = {sd:g}' for sd in assumed_sds)
  lines = [
    f'| algorithm | task | paper | S-SGD | difference | verdict (1 seed) | {head} |',
    '|---|---|---|---|---|---|' + '---|' * len(assumed_sds),
  ]
  for algo, values in table.items():
    if algo == 'ssgd':
      continue
    for i, task in enumerate(tasks):
      d = values[i] - ssgd[i]
      verdict = compare([values[i]], [ssgd[i]]).verdict
      known = ' | '.join(single_run(d, sd) for sd in assumed_sds)
      lines.append(
        f'| {names.get(algo, algo)} | {task} | {values[i]:.2f} | {ssgd[i]:.2f} | {d:+.2f} '
        f'| {verdict} | {known} |'
      )
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  """Prints what the procedure concludes from the paper's Tables 1 and 2."""
  del argv
  from cocod_jax.experiments import published  # pylint: disable=g-import-not-at-top

  z = float(scipy_stats.norm.ppf(1 - ALPHA))
  print(
    f'The paper gives one number per cell: with one seed the spread between seeds cannot be '
    f'estimated, so the procedure (TOST, margin {MARGIN} point, 90% interval) concludes nothing '
    f'from it: every verdict is inconclusive. The columns "if sd = ..." show the verdict one '
    f"pair of runs would get if the standard deviation of a pair's difference (seed to seed, "
    f'test set included) were known to be that many points: equivalent needs '
    f'|difference| + {z:.3f} sd < {MARGIN}.\n'
  )
  for name, table in (('Table 1', published.TABLE1), ('Table 2', published.TABLE2)):
    print(f'{name}\n')
    print(paper_table(table, published.TASKS, published.NAMES))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))

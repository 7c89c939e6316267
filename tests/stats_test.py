"""The paired equivalence procedure: its verdicts worked by hand, its variance parts, the seeds it
asks for, and its power on simulated accuracies with the spreads measured in the pilot
(docs/paper-cpu/pilot.md)."""

import math

import numpy as np
import pytest

from cocod_jax.experiments import published
from cocod_jax.experiments import stats
from cocod_jax.experiments import stats_simulation

# Measured in the pilot (docs/paper-cpu/pilot.md): the seed-to-seed standard deviation of the
# paired difference (algorithm - S-SGD, final accuracy on the same 20000 test examples, same
# seeds), pooled over CoCoD-SGD, Local-SGD and Pipe-SGD in the three cells with 2 seeds (9 df);
# points. Its per-cell values range from 0.02 to 0.67.
PILOT_SD_DIFFERENCE = 0.385


def test_verdicts_of_intervals():
  assert stats.verdict_of(-0.4, 0.3) == 'equivalent'
  assert stats.verdict_of(-0.6, 0.3) == 'inconclusive'  # Crosses -margin.
  assert stats.verdict_of(-1.9, -0.6) == 'worse'
  assert stats.verdict_of(0.6, 1.0) == 'better'
  assert stats.verdict_of(-0.6, 0.6) == 'inconclusive'
  assert stats.verdict_of(-0.5, 0.2) == 'inconclusive'  # The margin itself is not inside.


def test_paired_accuracies_worked_by_hand():
  # d = [-0.1, +0.2, -0.2]: mean -0.0333, sd 0.2082, se 0.1202, t(0.95, 2) = 2.920, so the
  # interval is [-0.384, +0.318]: inside +-0.5, equivalent.
  c = stats.compare([95.0, 95.2, 94.8], [95.1, 95.0, 95.0])
  assert c.verdict == 'equivalent' and c.seeds == 3 and c.df == 2
  assert c.difference == pytest.approx(-1 / 30)
  assert c.se == pytest.approx(0.2082 / math.sqrt(3), abs=1e-4)
  assert (c.lo, c.hi) == (pytest.approx(-0.384, abs=1e-3), pytest.approx(0.318, abs=1e-3))
  assert c.p_not_below < 0.05 and c.p_not_above < 0.05 and c.noninferior
  # The same spread 1.5 points lower: worse; 1.5 higher: better; at -0.4 it crosses -0.5.
  assert stats.compare([93.5, 93.7, 93.3], [95.1, 95.0, 95.0]).verdict == 'worse'
  assert stats.compare([96.5, 96.7, 96.3], [95.1, 95.0, 95.0]).verdict == 'better'
  c = stats.compare([94.6, 94.8, 94.4], [95.1, 95.0, 95.0])
  assert c.verdict == 'inconclusive' and c.seeds_needed and c.seeds_needed > 3


def test_one_seed_concludes_nothing():
  c = stats.compare([94.41], [94.00])
  assert c.verdict == 'inconclusive' and c.seeds_needed is None and math.isnan(c.se)
  assert c.difference == pytest.approx(0.41)


def test_shapes_must_match():
  with pytest.raises(ValueError, match='same shape'):
    stats.compare([1.0, 2.0], [1.0, 2.0, 3.0])


def test_variance_parts_recovered_from_a_crossed_table():
  # D_sj = a_s + b_j + e_sj with known sds 0.5, 2 and 10 (points).
  rng = np.random.default_rng(0)
  s, n = 40, 4000
  diff = rng.normal(0, 0.5, (s, 1)) + rng.normal(0, 2.0, (1, n)) + rng.normal(0, 10.0, (s, n))
  var_seed, var_example, var_residual = stats.variance_parts(diff)
  assert var_seed == pytest.approx(0.25, rel=0.5)
  assert var_example == pytest.approx(4.0, rel=0.1)
  assert var_residual == pytest.approx(100.0, rel=0.02)


def test_per_example_correctness_adds_the_test_sets_part():
  # Without an example effect the crossed standard error is the paired t-test's over seeds;
  # with one (the algorithms differ on which examples they get right) it is larger.
  rng = np.random.default_rng(1)
  difficulty = stats_simulation.example_difficulty(rng, 5000, 0.9)
  ref = stats_simulation.simulate_correctness(rng, 5, 5000, 0.9, 0.2, 0.0, difficulty)
  alg = stats_simulation.simulate_correctness(rng, 5, 5000, 0.9, 0.2, 0.0, difficulty)
  crossed = stats.compare(alg, ref)
  by_seed = stats.compare(100 * alg.mean(axis=1), 100 * ref.mean(axis=1))
  assert crossed.difference == pytest.approx(by_seed.difference)
  assert crossed.se == pytest.approx(by_seed.se, rel=0.05) and crossed.test_examples == 5000
  other = stats_simulation.simulate_correctness(
    rng, 5, 5000, 0.9, 0.2, 0.0, rng.permutation(difficulty)
  )
  assert stats.compare(other, ref).var_example > 10 * max(crossed.var_example, 1e-3)


def test_seeds_needed():
  assert stats.seeds_needed(0.5, 0.04) is None  # At the margin no number of seeds decides.
  few, many = stats.seeds_needed(0.0, 0.04), stats.seeds_needed(0.3, 0.04)
  assert 2 <= few < many
  # The test set's own part does not shrink with seeds: too small a test set, no number helps.
  assert stats.seeds_needed(0.0, 0.04, var_example=1000.0, test_examples=1000) is None
  # The number it names is enough: the interval at that many seeds, with the assumed spread,
  # misses the margin by the power's allowance.
  s = stats.seeds_needed(-1.0, 0.25)
  se = math.sqrt(0.25 / s)
  assert -1.0 + stats._t(s - 1, 0.95) * se < -0.5


def test_papers_table_one_concludes_nothing():
  text = stats.paper_table(published.TABLE1, published.TASKS, published.NAMES)
  rows = [line for line in text.splitlines()[2:] if line]
  assert len(rows) == 12  # 3 algorithms x 4 tasks.
  assert all(line.split(' | ')[5] == 'inconclusive' for line in rows)
  # CoCoD-SGD on CIFAR-100 VGG16 is 1.43 above S-SGD: better if the spread were known.
  assert rows[-1].endswith('| better | better | better |')


@pytest.mark.parametrize(
  'true_difference,seeds,verdict', [(-1.5, 5, 'worse'), (0.0, 10, 'equivalent'), (0.0, 5, None)]
)
def test_power(true_difference, seeds, verdict):
  # The issue asks: identical algorithms found equivalent, one 1.5 points worse found worse, at
  # least 90% of the time at 5 seeds. At the pilot's spread the second holds at 5 seeds; the
  # first needs 10 (at 5 seeds equivalence comes out about 60% of the time, asserted below so
  # that a change of the procedure or of the spread shows here). docs/paper-cpu/pilot.md.
  rng = np.random.default_rng(2026)
  rates = stats_simulation.verdict_rates(
    rng, true_difference, seeds, PILOT_SD_DIFFERENCE, trials=1000
  )
  if verdict:
    assert rates[verdict] >= 0.9, rates
  else:
    assert 0.45 <= rates['equivalent'] <= 0.75, rates
  assert rates['better' if true_difference < 0 else 'worse'] <= 0.01, rates

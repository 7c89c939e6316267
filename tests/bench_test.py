"""The benchmark's arithmetic (launch/bench.py) on hand-made timings: the time model, the rows
and the Pipe-SGD breakdown. The benchmark itself needs root and a simulated network."""

import numpy as np

from launch import bench


def _timing(step, tp, tc, hidden, drain=0.0, round_time=None, steps=50):
  return {
    'step_time_s': step,
    'Tp_s': tp,
    'Tc_s': tc,
    'hidden_fraction': hidden,
    'drain_s': drain * steps,
    'steps': steps,
    'round_time_s': round_time,
  }


def test_time_model():
  # ALGORITHMS.md: S-SGD Tp + Tc, Local-SGD Tp + Tc/k, Pipe-SGD max(Tp, Tc), CoCoD max(Tp, Tc/k).
  got = [bench.predicted_step(a, 0.1, 0.3, k=5) for a in bench.ALGOS]
  np.testing.assert_allclose(got, [0.4, 0.3, 0.16, 0.1], rtol=1e-9)


def _two_repeats():
  return {
    'ssgd': [_timing(0.4, 0.1, 0.3, 0.0), _timing(0.5, 0.1, 0.4, 0.0)],
    'pipe_sgd': [_timing(0.35, 0.11, 0.32, 0.2, drain=0.01), _timing(0.45, 0.1, 0.42, 0.1)],
    'local_sgd': [_timing(0.16, 0.1, 0.3, 0.0), _timing(0.18, 0.1, 0.4, 0.0)],
    'cocod_sgd': [
      _timing(0.1, 0.1, 0.3, 1.0, round_time=0.55),
      _timing(0.125, 0.1, 0.4, 1.0, round_time=0.6),
    ],
  }


def test_rows_use_the_ssgd_run_of_the_same_repeat():
  rows = {r['algorithm']: r for r in bench.summarize(_two_repeats(), 600e3, 3.0)}
  np.testing.assert_allclose(rows['ssgd']['r_measured'], [3.0, 4.0])
  np.testing.assert_allclose(rows['cocod_sgd']['speedup_vs_ssgd'], [4.0, 4.0])
  np.testing.assert_allclose(rows['local_sgd']['predicted_step_s'], [0.16, 0.18])
  # max(k Tp, Tc) = 0.5 in both repeats.
  np.testing.assert_allclose(rows['cocod_sgd']['round_vs_ideal'], [1.1, 1.2])
  assert rows['ssgd']['round_vs_ideal'] == [None, None]
  assert bench.spread([0.1, 0.3, 0.2], scale=1e3) == '200.0 [100.0, 300.0]'


def test_pipe_table_takes_the_drain_apart():
  runs = _two_repeats()
  rows = bench.summarize(runs, 600e3, 3.0)
  report = {'ratios': [{'target_r': 3.0, 'runs': runs}]}
  header, rule, line = bench.pipe_table(rows, report)
  assert header.count('|') == rule.count('|') == line.count('|')
  cells = [c.strip() for c in line.strip('|').split('|')]
  # ms/step 350, 450; drain 10 and 0; the rest 340, 450; max(Tp, Tc) of the run 320, 420.
  assert cells[0] == '3'
  assert cells[1] == '400.0 [350.0, 450.0]'
  assert cells[2] == '5.0 [0.0, 10.0]'
  assert cells[3] == '395.0 [340.0, 450.0]'
  assert cells[5] == '370.0 [320.0, 420.0]'
  assert cells[6] == '350.0 [300.0, 400.0]'  # max(Tp, Tc) of the S-SGD runs.

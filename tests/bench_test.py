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


def _report():
  runs = _two_repeats()
  for timings in runs.values():
    for t in timings:
      t['steps_per_epoch'] = 10
  rows = bench.summarize(runs, 600e3, 3.0)
  stagings = {'host': runs['cocod_sgd']}
  return {'ratios': [{'target_r': 3.0, 'rate_kbit': 600e3, 'runs': runs, 'rows': rows}],
          'stagings': stagings}  # fmt: skip


def test_pipe_table_adds_the_refill_of_each_epoch():
  header, rule, line = bench.pipe_table(_report())
  assert header.count('|') == rule.count('|') == line.count('|')
  cells = [c.strip() for c in line.strip('|').split('|')]
  # max(Tp, Tc) of the runs: 320, 420 ms; refill min(Tp, Tc) / 10: 11, 10 ms; epoch-end wait
  # 10 and 0 ms a step; measured 350 / 331 and 450 / 430.
  assert cells[0] == '3'
  assert cells[3] == '370.0 [320.0, 420.0]'
  assert cells[4] == '5.0 [0.0, 10.0]'
  assert cells[5] == '10.5 [10.0, 11.0]'
  assert cells[6] == f'{(350 / 331 + 450 / 430) / 2:.2f} [{450 / 430:.2f}, {350 / 331:.2f}]'


def test_render_reports_each_target():
  report = _report()
  text = bench.render(report)
  assert text.startswith('# Benchmark (2 runs per row; median [min, max])')
  # CoCoD rounds 1.1 and 1.2 x max(k Tp, Tc): median 1.15, met; Local/CoCoD 1.6 and 1.44: met;
  # the speedup over S-SGD is 4x.
  assert report['targets'] == [
    '- r = 3: CoCoD round time / max(k*Tp, Tc) = 1.15 [1.10, 1.20] (target <= 1.15): met',
    '- r = 3: Local-SGD / CoCoD-SGD time per step = 1.52 [1.44, 1.60] (target > 1 in every run): '
    'met',
    '- r = 3: CoCoD-SGD speedup over S-SGD = 4.00 [4.00, 4.00]x (target >= 1.6): met',
  ]
  report['ratios'][0]['runs']['local_sgd'][0]['step_time_s'] = 0.09
  report['ratios'][0]['rows'] = bench.summarize(report['ratios'][0]['runs'], 600e3, 3.0)
  bench.render(report)
  assert report['targets'][1].endswith('MISSED')

"""The benchmark's arithmetic (launch/bench.py, bench_model.py, bench_render.py) on hand-made
timings: the time model, the rows and the Pipe-SGD breakdown. The benchmark itself needs root
and a simulated network."""

import numpy as np

from launch import bench
from launch import bench_measure
from launch import bench_model
from launch import bench_render


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
  # docs/algorithms.md: S-SGD Tp + Tc, Local-SGD Tp + Tc/k, Pipe-SGD max(Tp, Tc),
  # CoCoD max(Tp, Tc/k).
  got = [bench_model.predicted_step(a, 0.1, 0.3, k=5) for a in bench_model.ALGOS]
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


# A calibration that predicts Tp = 0.1 s and, at 600 Mbit/s, Tc = 0.02 + 108000 / 600000 = 0.2 s.
CALIBRATION = {'a_s': 0.02, 'b_s_kbit': 108000.0, 'Tp_s': 0.1}


def test_rows_use_the_ssgd_run_of_the_same_repeat_and_the_calibration_for_the_model():
  rows = {r['algorithm']: r for r in bench_model.summarize(_two_repeats(), 600e3, 3.0, CALIBRATION)}
  np.testing.assert_allclose(rows['ssgd']['r_measured'], [3.0, 4.0])
  np.testing.assert_allclose(rows['cocod_sgd']['speedup_vs_ssgd'], [4.0, 4.0])
  # The model takes the calibration's Tp, Tc (0.1, 0.2), not those of the S-SGD runs (0.1, 0.3
  # and 0.1, 0.4): Local-SGD 0.1 + 0.2 / 5 = 0.14, S-SGD 0.3 (its own runs took 0.4 and 0.5).
  np.testing.assert_allclose(rows['local_sgd']['predicted_step_s'], [0.14, 0.14])
  np.testing.assert_allclose(rows['ssgd']['predicted_step_s'], [0.3, 0.3])
  # max(k Tp, Tc) = 0.5 in both repeats.
  np.testing.assert_allclose(rows['cocod_sgd']['round_vs_ideal'], [1.1, 1.2])
  assert rows['ssgd']['round_vs_ideal'] == [None, None]
  assert bench_render.spread([0.1, 0.3, 0.2], scale=1e3) == '200.0 [100.0, 300.0]'


def _report():
  runs = _two_repeats()
  for timings in runs.values():
    for t in timings:
      t['steps_per_epoch'] = 10
  rows = bench_model.summarize(runs, 600e3, 3.0, CALIBRATION)
  stagings = {'host': runs['cocod_sgd']}
  return {'ratios': [{'target_r': 3.0, 'rate_kbit': 600e3, 'runs': runs, 'rows': rows}],
          'stagings': stagings, 'calibration': CALIBRATION}  # fmt: skip


def test_pipe_table_adds_the_refill_of_each_epoch():
  header, rule, line = bench_render.pipe_table(_report())
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
  text = bench_render.render(report)
  assert text.startswith('# Benchmark (median [min, max] over the runs)')
  assert '## Overlap on the simulated link (2 runs per row)' in text
  # CoCoD rounds 1.1 and 1.2 x max(k Tp, Tc): median 1.15, met; Local/CoCoD 1.6 and 1.44: met;
  # the speedup over S-SGD is 4x.
  assert report['targets'] == [
    '- r = 3: CoCoD round time / max(k*Tp, Tc) = 1.15 [1.10, 1.20] (target <= 1.15): met',
    '- r = 3: Local-SGD / CoCoD-SGD time per step = 1.52 [1.44, 1.60] (target > 1 in every run): '
    'met',
    '- r = 3: CoCoD-SGD speedup over S-SGD = 4.00 [4.00, 4.00]x (target >= 1.6): met',
  ]
  report['ratios'][0]['runs']['local_sgd'][0]['step_time_s'] = 0.09
  report['ratios'][0]['rows'] = bench_model.summarize(
    report['ratios'][0]['runs'], 600e3, 3.0, CALIBRATION
  )
  bench_render.render(report)
  assert report['targets'][1].endswith('MISSED')


def test_render_says_where_each_section_was_measured():
  report = _report()
  assert 'no provenance recorded' in bench_render.render(report)
  here = {'commit': 'a' * 40, 'dirty': False, 'command': 'python -m launch.bench --out=runs/bench',
          'machine': '2 CPU cores (X, x86_64), 24 GiB', 'date': '2026-12-07 18:00 UTC'}  # fmt: skip
  report['provenance'] = {'overlap': here, 'hetero': dict(here, date='2026-12-07 18:20 UTC')}
  text = bench_render.render(report)
  assert (
    'Measured at commit aaaaaaaaaaaa (tree clean), `python -m launch.bench --out=runs/bench`, '
    '2 CPU cores (X, x86_64), 24 GiB; 2026-12-07 18:00 UTC to 2026-12-07 18:20 UTC.'
  ) in text
  # A section measured again at another commit (--sections=): one line a section.
  report['provenance']['hetero'] = dict(here, commit='b' * 40, dirty=True)
  text = bench_render.render(report)
  assert 'the sections mix commits or machines' in text
  assert '- overlap: commit aaaaaaaaaaaa (tree clean)' in text
  assert '- hetero: commit bbbbbbbbbbbb (tree dirty)' in text


def test_measure_records_the_provenance_of_the_sections_it_measures(monkeypatch):
  monkeypatch.setattr(bench.provenance, 'record', lambda: {'commit': 'new'})
  report = {'provenance': {'comm': {'commit': 'old'}}, 'comm': []}
  monkeypatch.setattr(bench_measure, 'measure_overhead', lambda out: {'ratio': 1.0})
  bench.measure('unused', ['overhead'], report)
  assert report['provenance'] == {'comm': {'commit': 'old'}, 'overhead': {'commit': 'new'}}


def test_overhead_and_comm_targets():
  runs = [{'bare_ms': 1.0, 'framework_ms': f, 'ratio': f} for f in (1.04, 1.08)]
  overhead = {'epochs': 6, 'runs': runs}
  lines = bench_render.overhead_lines(overhead)
  assert lines[-1] == '- framework / bare step time = 1.060 [1.040, 1.080] (target <= 1.05): MISSED'
  comm = [
    {'link': 'shared memory', 'rows': [
      {'payload': 'cnn', 'bytes': 78400, 'leaves': 10, 'raw_ms': 0.05, 'blocking_ms': 0.3,
       'thread_ms': 0.5},
      {'payload': 'resnet18', 'bytes': 44.7e6, 'leaves': 62, 'raw_ms': 25.0, 'blocking_ms': 60.0,
       'thread_ms': 61.0}]},
    {'link': '1gbit', 'rows': [
      {'payload': 'resnet18', 'bytes': 44.7e6, 'leaves': 62, 'raw_ms': 700.0,
       'blocking_ms': 740.0, 'thread_ms': 745.0}]},
  ]  # fmt: skip
  lines = bench_render.comm_lines(comm)
  assert (
    '- fixed cost, 78 KB over shared memory: +0.250 ms over raw (target <= 0.3 ms): met' in lines
  )
  assert '- 44.7 MB over shared memory: 2.40x raw (no target: memory-bound)' in lines
  assert '- 44.7 MB over 1gbit: 1.06x raw (target <= 1.10): met' in lines


def test_hetero_model_and_rows():
  # Slow rank's step 0.2 s, Tc 0.2 s, k = 5: S-SGD 0.4, Pipe+PS 0.2, AsynLocal 0.24, CoCoD+PS 0.2.
  got = [bench_model.predicted_hetero(a, 0.2, 0.2) for _, a, _ in bench_model.HETERO]
  np.testing.assert_allclose(got, [0.4, 0.4, 0.2, 0.24, 0.2], rtol=1e-9)

  def run(step, spe, hidden=0.0):
    return {'step_time_s': step, 'steps_per_epoch': spe, 'Tc_s': 0.2, 'hidden_fraction': hidden,
            'ranks': [{'Tp_s': 0.2}, {'Tp_s': 0.1}]}  # fmt: skip

  runs = {'S-SGD': [run(0.4, 15)], 'S-SGD+PS': [run(0.4, 10)], 'Pipe-SGD+PS': [run(0.25, 10)],
          'AsynLocal-SGD': [run(0.25, 10)], 'CoCoD-SGD+PS': [run(0.2, 10, 1.0)]}  # fmt: skip
  # The calibration: Tp 0.1 s (the slow rank's 0.2 s) and Tc 0.2 s at 600 Mbit/s.
  lines = bench_render.hetero_lines({'rate_kbit': 600e3, 'runs': runs}, CALIBRATION)
  assert 'model from the calibration: Tp_slow 200.0 ms, Tc 200.0 ms, r = 1.00' in lines[0]
  cocod = [line for line in lines if line.startswith('| CoCoD-SGD+PS')][0]
  # Epoch: 15 x 0.4 = 6 s against 10 x 0.2 = 2 s: 3x measured, and 3x by the model.
  assert (
    '| 2.00 [2.00, 2.00] | 3.00 [3.00, 3.00]x | 200.0 [200.0, 200.0] | 3.00 [3.00, 3.00]x' in cocod
  )

  # The runs' own Tc (here 0.9 s) must not reach the model columns.
  def model_cells(lines):
    row = [line for line in lines if line.startswith('| CoCoD-SGD+PS')][0]
    return [c.strip() for c in row.split('|')[7:9]]

  assert model_cells(lines) == ['200.0 [200.0, 200.0]', '3.00 [3.00, 3.00]x']
  for timings in runs.values():
    timings[0]['Tc_s'] = 0.9
  again = bench_render.hetero_lines({'rate_kbit': 600e3, 'runs': runs}, CALIBRATION)
  assert model_cells(again) == ['200.0 [200.0, 200.0]', '3.00 [3.00, 3.00]x']
  assert lines[-1].endswith(': met')


def test_ranks_rows_and_target():
  # Two repeats of S-SGD and CoCoD-SGD on 2 ranks x 8 workers: per-repeat speedups 2.0 and 1.5.
  def run(step, tp, tl, tc, hidden):
    return {'step_time_s': step, 'Tp_s': tp, 'Tl_s': tl, 'Tc_s': tc, 'hidden_fraction': hidden}

  runs = {
    'ssgd': [run(0.4, 0.2, 0.01, 0.18, 0.0), run(0.45, 0.2, 0.01, 0.22, 0.0)],
    'cocod_sgd': [run(0.2, 0.19, 0.01, 0.2, 0.95), run(0.3, 0.2, 0.012, 0.25, 0.9)],
  }
  ranks = {'workers_per_rank': 8, 'rate_kbit': 400e3, 'runs': runs}
  lines = bench_render.ranks_lines(ranks)
  assert lines[0] == '## Multi-worker ranks: 2 ranks x 8 workers, 400 Mbit/s (2 runs per row)'
  cocod = [c.strip() for c in lines[5].strip('|').split('|')]
  # r of the S-SGD runs 0.9 and 1.1; local mean 10 and 12 ms.
  assert cocod[:2] == ['CoCoD-SGD', '1.00 [0.90, 1.10]']
  assert cocod[3:] == ['1.75 [1.50, 2.00]x', '195.0 [190.0, 200.0]', '11.0 [10.0, 12.0]',
                       '225.0 [200.0, 250.0]', '92% [90%, 95%]']  # fmt: skip
  assert lines[-1] == (
    '- 2 x 8: CoCoD-SGD speedup over S-SGD per step = 1.75 [1.50, 2.00]x (target >= 1.6): met'
  )
  runs['cocod_sgd'][0]['step_time_s'] = 0.3
  assert bench_render.ranks_lines(ranks)[-1].endswith('(target >= 1.6): MISSED')


def test_streamed_model():
  # P = 5 of k = 5, Tp 0.1, Tc 0.3: a fragment's 0.06 hides behind one step (tau = 1), the round
  # takes max(5 * 0.1, 0.3) = 0.5, 0.1 a step; at Tc 0.75 a fragment's 0.15 exposes 0.05 each,
  # max(0.5 + 5 * 0.05, 0.75) = 0.75; tau = 2 covers it again but the thread still needs 0.75;
  # at Tc 1.5 each fragment exposes 0.2: max(0.5 + 1.0, 1.5) = 1.5, 0.3 a step.
  assert bench_model.predicted_streamed('cocod_sgd', 0.1, 0.3, 1) == 0.1
  np.testing.assert_allclose(bench_model.predicted_streamed('cocod_sgd', 0.1, 0.75, 1), 0.15)
  np.testing.assert_allclose(bench_model.predicted_streamed('cocod_sgd', 0.1, 0.75, 2), 0.15)
  np.testing.assert_allclose(bench_model.predicted_streamed('cocod_sgd', 0.1, 1.5, 1), 0.3)
  assert bench_model.predicted_streamed('ssgd', 0.1, 0.3, None) == 0.4


def test_streamed_rows_and_targets():
  # Two repeats at r = 1 and one at r = 6: the streamed round against max(k Tp, Tc) of the S-SGD
  # run of the same repeat (0.5 and 0.55: 5 Tp), the tau each run used, the targets at r <= 3.
  def run(step, tp, tc, hidden, round_time=None, tau=None, frag=None):
    return {'step_time_s': step, 'Tp_s': tp, 'Tc_s': tc, 'hidden_fraction': hidden,
            'round_time_s': round_time, 'tau': tau, 'Tc_fragment_s': frag}  # fmt: skip

  one = {
    'S-SGD': [run(0.2, 0.1, 0.1, 0.0), run(0.22, 0.11, 0.1, 0.0)],
    'streamed tau=1': [
      run(0.1, 0.1, 0.1, 0.95, 0.52, 1, 0.02),
      run(0.12, 0.11, 0.1, 0.9, 0.6, 1, 0.02),
    ],
    'streamed delay=auto': [run(0.1, 0.1, 0.1, 0.95, 0.5, 1, 0.02)] * 2,
  }
  six = {
    'S-SGD': [run(0.7, 0.1, 0.6, 0.0)],
    'streamed tau=1': [run(0.13, 0.1, 0.6, 0.5, 0.65, 1, 0.12)],
    'streamed delay=auto': [run(0.125, 0.1, 0.6, 0.9, 0.62, 2, 0.12)],
  }
  streamed = [{'target_r': 1.0, 'rate_kbit': 600e3, 'runs': one},
              {'target_r': 6.0, 'rate_kbit': 100e3, 'runs': six}]  # fmt: skip
  lines = bench_render.streamed_lines(streamed, CALIBRATION)
  assert lines[0] == '## Streamed CoCoD-SGD: P = 5 fragments of k = 5 (2 runs per row)'
  rows = [[c.strip() for c in line.strip('|').split('|')] for line in lines[4:10]]
  # r of the S-SGD runs 1.0 and 0.91; rounds 0.52 / 0.5 and 0.6 / 0.55.
  assert rows[1][2:7] == ['streamed tau=1', '0.95 [0.91, 1.00]', '1', '110.0 [100.0, 120.0]',
                          '1.07 [1.04, 1.09]']  # fmt: skip
  assert (
    rows[5][2] == 'streamed delay=auto' and rows[5][4] == '2' and rows[5][6] == '1.03 [1.03, 1.03]'
  )
  assert rows[0][6] == '-'  # S-SGD has no streamed round.
  assert lines[-1] == (
    '- r = 1: streamed (tau = 1) round time / max(k*Tp, Tc) = 1.07 [1.04, 1.09] (target <= 1.10): '
    'met'
  )
  one['streamed tau=1'][0]['round_time_s'] = 0.6
  assert bench_render.streamed_lines(streamed, CALIBRATION)[-1].endswith('MISSED')
  assert 'streamed' in bench_render.render({'streamed': streamed, 'calibration': CALIBRATION})

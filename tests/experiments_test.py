"""The paper's entry points: the whole pipeline at smoke scale, and the renderers on made-up
results against golden text (tests/data/experiments/)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cocod_jax import timeline
from cocod_jax.experiments import accuracy
from cocod_jax.experiments import common
from cocod_jax.experiments import corrections
from cocod_jax.experiments import correctness
from cocod_jax.experiments import flags as experiment_flags
from cocod_jax.experiments import long_schedule
from cocod_jax.experiments import overlap_analysis
from cocod_jax.experiments import overlap_plots
from cocod_jax.experiments import overlap_report
from cocod_jax.experiments import timing
from configs import overlap as overlap_config
from configs import scales

# It runs every experiment at smoke scale: left out of make test-fast.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, 'tests', 'data', 'experiments')
ARTEFACTS = ('table1', 'table2', 'fig2', 'fig3', 'fig4', 'fig5', 'fig6')


def _experiment(name, workdir, *extra):
  """`python -m cocod_jax.experiments.<name> --scale=smoke --workdir=<workdir> <extra>`."""
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  cmd = [sys.executable, '-m', f'cocod_jax.experiments.{name}', '--scale=smoke',
         f'--workdir={workdir}', *extra]  # fmt: skip
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def _paper(workdir, *extra):
  return _experiment('paper', workdir, *extra)


def test_every_artefact_at_smoke_scale(tmp_path):
  # Tables 1 and 2 and Figures 2-6 end to end (the timing figures under real MPI, 2 ranks);
  # then a second invocation launches nothing, and a dry run writes nothing.
  p = _paper(tmp_path)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  for name in ARTEFACTS:
    assert (tmp_path / f'{name}.md').exists() and (tmp_path / f'{name}.json').exists(), name
  for name in ARTEFACTS[2:]:
    with open(tmp_path / f'{name}.png', 'rb') as f:
      assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  table = json.loads((tmp_path / 'table1.json').read_text())
  assert table['scale'] == 'smoke' and table['commit'] and table['points']
  assert {c['algo'] for c in table['cells']} == {'ssgd', 'cocod_sgd'}
  assert all(c['n'] == 1 and 0 < c['mean'] <= 100 for c in table['cells'])
  assert table['dirty'] in (True, False) and 'experiments.paper' in table['command']
  # Every run's per-example correctness is in the artefact and scores its reported accuracy.
  with np.load(tmp_path / 'table1_correct.npz') as f:
    bits = correctness.unpack(f)
  for c in table['cells']:
    scored = 100.0 * bits[f'{c["algo"]}.{c["task"]}'].mean(axis=1)
    np.testing.assert_allclose(scored, c['final'], atol=1e-3)
  assert table['checks'][0]['paired_by'] == 'seed and test example'
  # Figure 3 times every run to Table 1's registered target: S-SGD's mean final - 0.5 point.
  fig3 = json.loads((tmp_path / 'fig3.json').read_text())
  target = next(c['mean'] for c in table['cells'] if c['algo'] == 'ssgd') - 0.5
  assert fig3['rows'] and all(r['target'] == pytest.approx(target) for r in fig3['rows'])
  fig4 = json.loads((tmp_path / 'fig4.json').read_text())
  assert {(r['algo'], r['workers']) for r in fig4['rows']} == {
    ('ssgd', 1), ('ssgd', 2), ('cocod_sgd', 1), ('cocod_sgd', 2)
  }  # fmt: skip
  logs = sorted(str(p) for p in tmp_path.glob('points/*/log.txt'))
  mtimes = [os.path.getmtime(p) for p in logs]
  again = _paper(tmp_path)
  assert again.returncode == 0, again.stderr[-3000:]
  assert [os.path.getmtime(p) for p in logs] == mtimes  # Nothing ran twice.
  before = sorted(os.listdir(tmp_path))
  dry = _paper(tmp_path / 'dry', '--dry_run')
  assert dry.returncode == 0, dry.stderr[-3000:]
  assert not (tmp_path / 'dry').exists() and sorted(os.listdir(tmp_path)) == before


def _point(algo, task, best, seed=0):
  epochs = [
    {'epoch': e, 'test_accuracy': best / 100 - 0.1 * (2 - e), 'train_loss': 1.0 / e,
     'train_time_s': float(e)}
    for e in (1, 2)
  ]  # fmt: skip
  arg = {'algo': algo, 'task': task, 'seed': str(seed)}
  results = {'epochs': epochs}
  return common.Outcome(arg, 'DONE', f'points/{algo}.{task}.s{seed}', 'abcd1234', results)


@pytest.fixture
def flags_parsed():
  if 'scale' not in common.FLAGS:
    experiment_flags.define_experiment_flags()
  common.FLAGS(['test', '--scale=cpu'])
  yield
  common.FLAGS.unparse_flags()


def test_accuracy_table_golden(flags_parsed):
  finals = {  # (algo, task) -> final accuracy per seed 0, 1, 2.
    ('ssgd', 'c10_r18'): (90.0, 91.0, 90.5), ('cocod_sgd', 'c10_r18'): (90.2, 90.6, 90.4),
    ('local_sgd', 'c10_r18'): (90.0, 91.1, 90.4),
    ('ssgd', 'c100_r18'): (60.0, 60.2, 59.8), ('cocod_sgd', 'c100_r18'): (58.0, 58.1, 57.9),
    ('local_sgd', 'c100_r18'): (60.0,),
  }  # fmt: skip
  points = [_point(a, t, v, seed=s) for (a, t), vs in finals.items() for s, v in enumerate(vs)]
  text, data, arrays = accuracy.accuracy_table(
    'Table 1: golden', points, ('ssgd', 'local_sgd', 'cocod_sgd'), ('c10_r18', 'c100_r18'),
    common.published.TABLE1, scales.task_title, 'cpu', correct_of=lambda p: None,
  )  # fmt: skip
  path = os.path.join(GOLDEN, 'table.md')
  if os.environ.get('UPDATE_GOLDEN'):
    with open(path, 'w') as f:
      f.write(text)
  with open(path) as f:
    assert text == f.read()
  assert arrays == {}  # No final models: nothing per example.
  # The golden file is the renderer's own output; what it must hold is worked out here by hand.
  paper = common.published.accuracy(common.published.TABLE1, 'ssgd', 'c10_r18')
  assert f'| S-SGD | 90.50 ± 0.50 (3); best 90.50 / {paper:.2f} |' in text
  checks = {(c['algo'], c['task']): c for c in data['checks']}
  # CoCoD-SGD, CIFAR-10 column: differences +0.2, -0.4, -0.1: mean -0.1, sd 0.3, se 0.3 / sqrt 3
  # = 0.1732, t(0.95, 2 df) = 2.9200: [-0.606, +0.406] crosses -0.5: inconclusive.
  c = checks['cocod_sgd', 'c10_r18']
  assert (c['verdict'], c['paired_by'], c['seeds']) == ('inconclusive', 'seed', 3)
  assert (c['lo'], c['hi']) == (pytest.approx(-0.6058, abs=1e-3), pytest.approx(0.4058, abs=1e-3))
  assert '| CoCoD-SGD | mnist1d_large - cnn1d (for CIFAR10 - ResNet18) | 3 | -0.10 ' in text
  # Local-SGD: 0.0, +0.1, -0.1: sd 0.1, half-width 2.92 * 0.0577 = 0.169: equivalent.
  assert checks['local_sgd', 'c10_r18']['verdict'] == 'equivalent'
  # CoCoD-SGD, CIFAR-100: -2.0, -2.1, -1.9: [-2.17, -1.83], below -0.5: worse.
  assert checks['cocod_sgd', 'c100_r18']['verdict'] == 'worse'
  # One pair: no spread between seeds, nothing can be concluded.
  assert checks['local_sgd', 'c100_r18']['verdict'] == 'inconclusive'
  assert checks['local_sgd', 'c100_r18']['seeds'] == 1


def test_accuracy_table_pairs_by_example(flags_parsed):
  # With every run's correctness given, the pairs are by seed and example: the arrays come back
  # for the artefact and the difference is the mean of the per-example differences.
  rng = np.random.default_rng(0)
  ref = {s: (rng.random(400) < 0.9).astype(np.uint8) for s in range(3)}
  alg = {s: r.copy() for s, r in ref.items()}
  for s in alg:
    alg[s][:8] = 0  # 8 of 400 examples lost: at most -2 points per seed.
  correct = {('ssgd', s): ref[s] for s in ref} | {('cocod_sgd', s): alg[s] for s in alg}
  points = [_point(a, 'c10_r18', 100.0 * c.mean(), seed=s) for (a, s), c in correct.items()]
  _, data, arrays = accuracy.accuracy_table(
    'T', points, ('ssgd', 'cocod_sgd'), ('c10_r18',), common.published.TABLE1,
    scales.task_title, 'cpu', correct_of=lambda p: correct[p.arg['algo'], int(p.arg['seed'])],
  )  # fmt: skip
  check = data['checks'][0]
  expected = np.mean([100.0 * (alg[s].mean() - ref[s].mean()) for s in ref])
  assert check['paired_by'] == 'seed and test example' and check['test_examples'] == 400
  assert check['difference'] == pytest.approx(expected)
  assert sorted(arrays) == ['cocod_sgd.c10_r18', 'ssgd.c10_r18']
  packed = correctness.pack(arrays)
  unpacked = correctness.unpack(_Npz(packed))
  np.testing.assert_array_equal(unpacked['ssgd.c10_r18'], np.stack([ref[s] for s in range(3)]))


class _Npz(dict):
  @property
  def files(self):
    return list(self)


def test_time_to_registered_target():
  table = {'cells': [{'algo': 'ssgd', 'task': 'c10_r18', 'mean': 90.0},
                     {'algo': 'cocod_sgd', 'task': 'c10_r18', 'mean': 95.0},
                     {'algo': 'ssgd', 'task': 'c100_r18', 'mean': None}]}  # fmt: skip
  assert timing.targets_from(table) == {'c10_r18': 89.5}  # S-SGD's mean - 0.5, nothing else.
  results = {'epochs': [{'test_accuracy': a, 'train_time_s': t}
                        for a, t in ((0.80, 1.0), (0.895, 2.5), (0.85, 4.0))]}  # fmt: skip
  assert timing.time_to_target(results, 89.5) == 2.5  # The first epoch at or above it.
  assert timing.time_to_target(results, 89.6) is None  # Never reached: no time.
  # delay or period 'auto': the measurement before the first step (where the step compiled)
  # counts as training, as epoch 1's compilation does for every other run.
  results['period_auto'] = {'measure_s': 1.25}
  assert timing.time_to_target(results, 89.5) == 3.75


def test_simnet_args_of_a_link():
  from cocod_jax.sweep import points as points_lib  # pylint: disable=g-import-not-at-top

  assert points_lib.simnet_args('1gbit') == ['launch/simnet.sh', '--rate', '1gbit', '--']
  assert points_lib.simnet_args('50mbit/8kb/8000') == [
    'launch/simnet.sh', '--rate', '50mbit', '--burst', '8kb', '--mtu', '8000', '--'
  ]  # fmt: skip


def test_speedup_model_by_hand():
  # Ring allreduce: Tc(4) = Tc(2) * (2 * 3 / 4) / (2 * 1 / 2) = 1.5 Tc(2); CoCoD at k = 5 with
  # Tp = 0.1 and Tc(4) = 0.3: step max(0.1, 0.06) = 0.1, speedup 4.
  assert timing.ring_tc(0.2, 2, 4) == pytest.approx(0.3)
  assert timing.ring_tc(0.2, 2, 1) == 0.0
  assert 4 * 0.1 / timeline.model_step_time('cocod_sgd', 0.1, 0.3, 5) == pytest.approx(4.0)
  assert 4 * 0.1 / timeline.model_step_time('ssgd', 0.1, 0.3, 5) == pytest.approx(1.0)
  # A delay tau: the allreduce hides behind the round's last tau steps. Tp 0.1, Tc 0.3, k 5:
  # tau 1 waits 0.2 a round (0.5 + 0.2 = 0.7, 0.14 a step), tau 3 none (0.1); tau = k is
  # CoCoD-SGD's.
  assert timeline.model_step_time('cocod_sgd', 0.1, 0.3, 5, delay=1) == pytest.approx(0.14)
  assert timeline.model_step_time('cocod_sgd', 0.1, 0.3, 5, delay=3) == pytest.approx(0.1)
  assert timeline.model_step_time('cocod_sgd', 0.1, 0.7, 5, delay=5) == pytest.approx(0.14)
  assert timeline.model_step_time('cocod_sgd', 0.1, 0.7, 5) == pytest.approx(0.14)


def test_time_figure_two_seeds_two_links_model_from_the_other_seed(tmp_path):
  # Seeds 0 and 1 of S-SGD and CoCoD-SGD (k = 5) on two links, target 80%. On link A, S-SGD
  # runs with Tp 0.1 / Tc 0.1 (seed 0) and 0.1 / 0.3 (seed 1): CoCoD-SGD's seed 0 is predicted
  # from seed 1's S-SGD run (0.4 / max(0.1, 0.06) = 4x) and seed 1 from seed 0's (0.2 / 0.1 = 2x),
  # so the model is their median, 3x. S-SGD reaches 80% at 4 s (seed 0) and 6 s (seed 1);
  # CoCoD-SGD at 2 s and 2 s: speedups 2x and 3x, median 2.5x. Epochs: S-SGD 2 s and 3 s,
  # CoCoD-SGD 1 s: epoch speedups 2x and 3x, 2.5x, 2.5 / 3 of the model. On link B CoCoD-SGD's
  # seed 1 never reaches the target: "1 of 2 reached", no speedup.
  if 'scale' not in common.FLAGS:
    experiment_flags.define_experiment_flags()
  common.FLAGS(['test', '--scale=cpu', f'--workdir={tmp_path}'])

  def point(algo, seed, accs, epoch_s, tp, tc):
    epochs = [{'epoch': e + 1, 'train_time_s': epoch_s * (e + 1), 'test_accuracy': a,
               'train_loss': 1.0} for e, a in enumerate(accs)]  # fmt: skip
    results = {'timing': {'Tp_s': tp, 'Tc_s': tc, 'r': tc / tp, 'hidden_fraction': 0.5},
               'epochs': epochs, 'status': 'completed', 'config': {'algorithm': {'period': 5}},
               'final': {'test_accuracy': accs[-1]}}  # fmt: skip
    arg = {'algo': algo, 'task': 'c10_r18', 'seed': str(seed)}
    return common.Outcome(arg, 'DONE', f'p/{algo}{seed}', 'h', results)

  link_a = [point('ssgd', 0, (0.7, 0.8, 0.81), 2.0, 0.1, 0.1),
            point('ssgd', 1, (0.7, 0.8, 0.81), 3.0, 0.1, 0.3),
            point('cocod_sgd', 0, (0.7, 0.8, 0.8), 1.0, 0.1, 0.2),
            point('cocod_sgd', 1, (0.7, 0.8, 0.8), 1.0, 0.1, 0.2)]  # fmt: skip
  link_b = link_a[:3] + [point('cocod_sgd', 1, (0.7, 0.79, 0.79), 1.0, 0.1, 0.2)]
  try:
    text, data = timing.time_to_accuracy(
      {'A': link_a, 'B': link_b}, ('ssgd', 'cocod_sgd'), ('c10_r18',), 'homogeneous',
      scales.task_title, 'fig3', 'Figure 3', {'c10_r18': 80.0},
    )  # fmt: skip
  finally:
    common.FLAGS.unparse_flags()
  rows = {(r['link'], r['algo']): r for r in data['rows']}
  cocod = rows['A', 'cocod_sgd']
  assert cocod['model'] == pytest.approx(3.0) and cocod['speedup'] == pytest.approx(2.5)
  assert cocod['speedup_range'] == pytest.approx([2.0, 3.0])
  assert cocod['epoch_speedup'] == pytest.approx(2.5) and cocod['of_model'] == pytest.approx(
    2.5 / 3
  )
  assert rows['A', 'ssgd']['time_s'] == pytest.approx(5.0) and rows['A', 'ssgd']['runs'] == 2
  assert rows['B', 'cocod_sgd']['reached'] == 1 and rows['B', 'cocod_sgd']['speedup'] is None
  assert data['links'] == ['A', 'B'] and data['model_from'] == 'the S-SGD runs of the other seeds'
  assert '## Link A' in text and '![fig3](fig3.png)' in text and '![fig3_2](fig3_2.png)' in text
  assert '| CoCoD-SGD | 2 | 80.00 | 80.00 | 2.0 | 2.50x [2.00x, 3.00x] |' in text
  assert '| 1 of 2 reached | - |' in text
  # Where the time goes, seed by seed: no warm-up in these configs, so it ends at 0 s and the
  # seconds per epoch are over every epoch; S-SGD reaches 80% at epoch 2 (4 s and 6 s).
  assert '| S-SGD | 2.00 / 3.00 | 0.00 / 0.00 | 2.000 / 3.000 | 2 / 2 ' in text
  assert rows['B', 'cocod_sgd']['by_seed']['1']['epoch_reached'] is None
  assert '| 1.000 / 1.000 | 2 / - | 2.00 / - |' in text
  assert (tmp_path / 'fig3.png').exists() and (tmp_path / 'fig3_2.png').exists()


def test_where_the_time_goes_splits_compilation_warmup_and_the_rest():
  # Epochs end at 5, 6, 6.5, 7, 7.5 s (compilation in epoch 1; period 1 for 2 epochs); the
  # accuracy reaches 80% at epoch 4: warm-up ends at 6 s, then (7.5 - 6) / 3 = 0.5 s an epoch.
  accs = (0.5, 0.7, 0.75, 0.8, 0.82)
  epochs = [{'epoch': i + 1, 'train_time_s': t, 'test_accuracy': a}
            for i, (t, a) in enumerate(zip((5.0, 6.0, 6.5, 7.0, 7.5), accs))]  # fmt: skip
  results = {'epochs': epochs, 'config': {'algorithm': {'warmup_period_epochs': 2}}}
  got = timing.where_the_time_goes(results, 80.0)
  assert got == {'first_epoch_s': 5.0, 'warmup_epochs': 2, 'warmup_s': 6.0,
                 'after_warmup_epoch_s': pytest.approx(0.5), 'epoch_reached': 4}  # fmt: skip
  assert timing.where_the_time_goes(results, 90.0)['epoch_reached'] is None


def test_figure4_model_comes_from_the_calibration_runs(tmp_path, monkeypatch):
  # Measured runs with Tp 0.2 / Tc 0.9 and calibration runs with Tp 0.1 / Tc 0.3: the model is
  # drawn from the calibration (CoCoD at k = 5, 2 workers: step max(0.1, 0.3 / 5) = 0.1,
  # speedup 2), never from the runs it is plotted beside (which would give 2 * 0.2 / 0.2 = 2 too
  # for CoCoD, so S-SGD tells them apart: 2 * 0.1 / 0.4 = 0.5 against 2 * 0.2 / 1.1).
  if 'scale' not in common.FLAGS:
    experiment_flags.define_experiment_flags()
  common.FLAGS(['test', '--scale=smoke', f'--workdir={tmp_path}'])
  try:

    def point(algo, workers, tp, tc, role=None):
      epochs = [{'epoch': e, 'train_time_s': float(e), 'test_accuracy': 0.5} for e in (1, 2)]
      results = {'timing': {'Tp_s': tp, 'Tc_s': tc, 'r': tc / tp}, 'epochs': epochs,
                 'config': {'algorithm': {'period': 5}}}  # fmt: skip
      arg = {'algo': algo, 'workers': str(workers), **({'role': role} if role else {})}
      return common.Outcome(arg, 'DONE', f'p/{algo}{workers}{role}', 'h', results)

    points = [point(a, n, 0.2, 0.9) for a in ('ssgd', 'cocod_sgd') for n in (1, 2)]
    points += [point('ssgd', n, 0.1, 0.3, 'calibration') for n in (1, 2)]
    _, data = timing.speedup(points, ('ssgd', 'cocod_sgd'), 'link', largest=2)
  finally:
    common.FLAGS.unparse_flags()
  models = {m['algo']: m for m in data['model']}
  assert (models['ssgd']['Tp_s'], models['ssgd']['Tc_s']) == (0.1, 0.3)
  assert models['ssgd']['model']['2'] == pytest.approx(0.5)
  assert models['cocod_sgd']['model']['2'] == pytest.approx(2.0)
  assert {(r['algo'], r['workers']) for r in data['rows']} == {
    ('ssgd', 1), ('ssgd', 2), ('cocod_sgd', 1), ('cocod_sgd', 2)
  }  # fmt: skip


def test_ablation_variants_change_one_thing():
  from configs import ablation  # pylint: disable=g-import-not-at-top
  from configs import table1  # pylint: disable=g-import-not-at-top

  for variant, (algo, overrides) in ablation.VARIANTS.items():
    base = table1.get_config(f'algo={algo},task=c100_r18,scale=cpu,seed=1').to_dict()
    got = ablation.get_config(f'variant={variant},seed=1').to_dict()
    changed = {
      f'{group}.{field}'
      for group, fields in got.items()
      if isinstance(fields, dict)
      for field, value in fields.items()
      if value != base[group][field]
    }
    assert changed == set(overrides), variant
    assert {k: v for k, v in got.items() if not isinstance(v, dict)} == {
      k: v for k, v in base.items() if not isinstance(v, dict)
    }  # fmt: skip


def _variant_point(variant, seed, final, times=(1.0, 2.0), state='DONE', extra=None):
  accs = (final / 100 - 0.02, final / 100)
  epochs = [{'epoch': e + 1, 'test_accuracy': a, 'train_loss': 1.0, 'train_time_s': t}
            for e, (a, t) in enumerate(zip(accs, times))]  # fmt: skip
  results = {'status': 'completed' if state == 'DONE' else 'diverged', 'epochs': epochs,
             'final': {'test_accuracy': final / 100}, 'config': {'algorithm': {'period': 5}},
             **(extra or {})}  # fmt: skip
  arg = {'variant': variant, 'algo': variant, 'task': 'c100_r18', 'seed': str(seed)}
  return common.Outcome(arg, state, f'points/{variant}.s{seed}', 'h', results)


def test_corrections_rows_and_rendering(flags_parsed):
  # Without final models on disk the pairs are by seed: S-SGD 80, 81, 82; cocod 1 point lower
  # each seed (worse: the interval lies below -0.5), int8 the same as S-SGD +- 0.01
  # (equivalent), outer_sgd with a diverged seed (no verdict).
  squeezed = {'snapshot_allreduce': {'payload_bytes': 5455, 'update_rel_error': 0.01,
                                     'model_rel_error': 0.001}}  # fmt: skip
  points = [_variant_point('ssgd', s, 80.0 + s) for s in range(3)]
  points += [_variant_point('cocod', s, 79.0 + s) for s in range(3)]
  points += [_variant_point('cocod_int8', s, 80.0 + s + 0.01 * (-1) ** s, extra=squeezed)
             for s in range(3)]  # fmt: skip
  points += [_variant_point('outer_sgd', 0, 10.0, state='DIVERGED')]
  rows, arrays = corrections.accuracy_rows(points, 'c100_r18')
  by = {r['variant']: r for r in rows}
  assert by['cocod']['verdict'] == 'worse' and by['cocod']['difference'] == pytest.approx(-1.0)
  assert by['cocod_int8']['verdict'] == 'equivalent' and by['cocod_int8']['payload_bytes'] == 5455
  assert by['outer_sgd']['verdict'] == 'diverged' and by['outer_sgd']['diverged'] == 1
  assert by['reset']['verdict'] == 'no pairs' and arrays == {}  # No final models: no bits.
  # Timing: target 80.5; S-SGD reaches it at 4 s, int8 at 2 s (2x), cocod never.
  timed = [_variant_point('ssgd', 0, 81.0, times=(2.0, 4.0)),
           _variant_point('cocod', 0, 80.0, times=(1.0, 2.0)),
           _variant_point('cocod_int8', 0, 81.0, times=(1.0, 2.0), extra=squeezed)]  # fmt: skip
  trows = {r['variant']: r for r in corrections.timing_rows(timed, 80.5)}
  assert trows['cocod_int8']['speedup'] == pytest.approx(2.0)
  assert trows['cocod']['time_s'] is None and trows['ssgd']['epoch_s'] == pytest.approx(2.0)
  text = corrections.render('c100_r18', rows, [80.0, 81.0, 82.0], {'3mbit': list(trows.values())},
                            80.5)  # fmt: skip
  assert '| cocod | 3 | 80.00 | -1.00 |' in text and 'diverged (1 of 1 diverged)' in text
  assert '| cocod | 1 | 80.00 | not reached |' in text and '| 2.00x |' in text
  # Three seeds: int8's speedups by seed are 4/2, 6/2 and 3/1.5, so 2x [2x, 3x]; its times
  # 2, 2, 1.5 s give the median 2 [1.5, 2]; cocod reaches the target in one run of three.
  timed += [_variant_point('ssgd', 1, 81.0, times=(3.0, 6.0)),
            _variant_point('ssgd', 2, 81.0, times=(1.5, 3.0)),
            _variant_point('cocod', 1, 81.0, times=(1.0, 2.0)),
            _variant_point('cocod', 2, 80.0, times=(1.0, 2.0)),
            _variant_point('cocod_int8', 1, 81.0, times=(1.0, 2.0), extra=squeezed),
            _variant_point('cocod_int8', 2, 81.0, times=(1.0, 1.5), extra=squeezed)]  # fmt: skip
  trows = {r['variant']: r for r in corrections.timing_rows(timed, 80.5)}
  int8 = trows['cocod_int8']
  assert (int8['runs'], int8['reached']) == (3, 3)
  assert int8['speedup'] == pytest.approx(2.0) and int8['speedup_range'] == pytest.approx([2, 3])
  assert int8['time_s'] == pytest.approx(2.0) and int8['time_range'] == pytest.approx([1.5, 2])
  assert trows['cocod']['reached'] == 1 and trows['cocod']['time_s'] is None
  assert trows['cocod']['final'] == pytest.approx(80 + 1 / 3)
  text = corrections.render('c100_r18', rows, [80.0, 81.0, 82.0], {'3mbit': list(trows.values())},
                            80.5)  # fmt: skip
  assert '| cocod_int8 | 3 | 81.00 | 2.0 [1.5, 2.0] | 2.00x [2.00x, 3.00x] |' in text
  assert '| cocod | 3 | 80.33 | 1 of 3 reached |' in text


def test_a_table_sweep_takes_a_subset_of_its_tasks():
  # Figure 3 timed on two of Table 1's four columns: every algorithm and seed of those, nothing
  # else; a task outside the table's is refused with the allowed ones named.
  from cocod_jax.config import args as config_args  # pylint: disable=g-import-not-at-top
  from configs import table1  # pylint: disable=g-import-not-at-top

  added = []
  table1.sweep(
    lambda config_arg: added.append(config_arg), 'seeds=2,timing=true,tasks=c10_r18;c100_r18'
  )
  tasks = {dict(kv.split('=') for kv in a.split(','))['task'] for a in added}
  assert tasks == {'c10_r18', 'c100_r18'} and len(added) == 2 * len(table1.ALGOS) * 2
  everything = []
  table1.sweep(lambda config_arg: everything.append(config_arg), 'seeds=2,timing=true')
  assert set(added) < set(everything)
  with pytest.raises(config_args.ConfigArgError, match="tasks='mnist'.*c10_v16"):
    table1.sweep(lambda config_arg: None, 'seeds=1,tasks=c10_r18;mnist')


def test_registered_flags_fill_what_the_command_line_leaves_unset(monkeypatch):
  # At the cpu scale Figure 3 runs with its registered seeds, tasks and links unless the command
  # line says otherwise, and every flag is its default again once the artefact has run (`paper`
  # runs Figure 3, then Figure 6 and Figure 4 with flags of their own).
  from cocod_jax.experiments import artefacts  # pylint: disable=g-import-not-at-top

  if 'scale' not in common.FLAGS:
    experiment_flags.define_experiment_flags()
  seen = {}

  def record(name):
    seen[name] = {f: common.FLAGS[f].value for f in ('seeds', 'timing_links', 'link_rate')}
    return 0

  for name in ('fig3', 'fig4'):
    monkeypatch.setitem(artefacts.ARTEFACTS, name, lambda name=name: record(name))
  try:
    common.FLAGS(['test', '--scale=cpu', '--timing_links=1gbit'])
    assert artefacts.make('fig3') == 0 and artefacts.make('fig4') == 0
    assert seen['fig3'] == {'seeds': 2, 'timing_links': ['1gbit'], 'link_rate': ''}
    assert seen['fig4'] == {'seeds': 0, 'timing_links': ['1gbit'], 'link_rate': '1gbit'}
    assert (common.FLAGS.seeds, common.FLAGS.link_rate) == (0, '')
    common.FLAGS.unparse_flags()
    common.FLAGS(['test', '--scale=smoke'])  # No registered flags below or above the cpu scale.
    artefacts.make('fig3')
    assert seen['fig3'] == {'seeds': 0, 'timing_links': [], 'link_rate': ''}
  finally:
    common.FLAGS.unparse_flags()


@pytest.mark.parametrize('name', sorted(scales.CPU_ARTEFACT_FLAGS))
def test_committed_timing_artefacts_were_made_with_the_registered_flags(name):
  # `make paper-cpu` makes what docs/paper-cpu holds: the committed figure's links, tasks and
  # seeds are the registered ones of configs/scales.py.
  path = os.path.join(ROOT, 'docs', 'paper-cpu', f'{name}.json')
  if name == 'streamed' and not os.path.exists(path):  # Amendment 6's runs are not all made.
    pytest.skip('docs/paper-cpu/streamed.json is not committed yet')
  with open(path) as f:
    data = json.load(f)
  registered = scales.artefact_flags(name, 'cpu')
  if name in ('overlap', 'streamed'):  # Timing runs by link and column; mixed ones on link_rate.
    assert list(data['timing']) == registered['timing_links']
    assert all(list(tasks) == registered['timing_tasks'] for tasks in data['timing'].values())
    assert data['mixed']['link'] == registered['link_rate']
    return
  links = data.get('links') or [data['link']]
  assert links == registered.get('timing_links', [registered.get('link_rate')])
  if 'timing_tasks' in registered:
    assert sorted({p['arg']['task'] for p in data['points']}) == sorted(registered['timing_tasks'])
  if 'seeds' in registered:
    assert len({p['arg']['seed'] for p in data['points']}) == registered['seeds']


def test_report_only_with_nothing_to_report_is_one_line(tmp_path):
  # An experiment's --report_only in a workdir where none of its runs has results: one line
  # naming the workdir, exit 2, and nothing written (before: every cell 'no pairs', exit 1).
  workdir = tmp_path / 'empty'
  p = _experiment('table1', workdir, '--report_only')
  assert p.returncode == 2, p.stderr[-3000:]
  assert p.stderr.splitlines() == [
    f'error: --report_only: nothing to report in --workdir={workdir}: none of the 2 runs of '
    'table1.py has results there; run without --report_only first, or name the workdir that '
    'holds them'
  ]
  assert not workdir.exists()


def _overlap_point(variant, task, seed, final, state='DONE', root='points'):
  results = None
  if state != 'PENDING':
    results = {'status': 'completed' if state == 'DONE' else 'diverged',
               'epochs': [{'epoch': 1, 'test_accuracy': final / 100, 'train_loss': 1.0,
                           'train_time_s': 1.0}],
               'final': {'test_accuracy': final / 100}}  # fmt: skip
  arg = {'variant': variant, 'algo': variant, 'task': task, 'seed': str(seed)}
  return common.Outcome(arg, state, f'{root}/{variant}.{task}.s{seed}', 'h', results)


def test_overlap_choice_target_and_rendering(flags_parsed, tmp_path):
  # Pilot (seeds 100-102, the hard columns; paired by seed, no final models on disk): S-SGD
  # 80 + s; delay_2 0.2 below it, delay_1 1.0; eager_4_g1 0.1 below, the other eager settings
  # 2.0; anchor_06_07 1.5 below; anchor_05_00 diverged on one column (out, however good).
  common.FLAGS(['test', f'--workdir={tmp_path}', '--scale=cpu'])
  gaps = {'cocod': -1.0, 'delay_1': -1.0, 'delay_2': -0.2, 'anchor_06_07': -1.5,
          'anchor_05_00': 0.5}  # fmt: skip
  for v in overlap_config.settings('eager'):
    gaps[v] = -0.1 if v == 'eager_4_g1' else -2.0
  pilot = []
  for task in overlap_config.HARD:
    for s in overlap_config.PILOT_SEEDS:
      pilot.append(_overlap_point('ssgd', task, s, 80.0 + s % 10))
      for v, gap in gaps.items():
        diverged = v == 'anchor_05_00' and task == 'c100_v16'
        pilot.append(_overlap_point(v, task, s, 80.0 + s % 10 + gap,
                                    state='DIVERGED' if diverged else 'DONE'))  # fmt: skip
  rows = overlap_analysis.stage_rows(
    pilot, overlap_config.HARD, overlap_config.stage_variants('pilot', [])
  )
  chosen = overlap_analysis.choose(rows)
  assert chosen == {'delay': 'delay_2', 'eager': 'eager_4_g1', 'anchor': 'anchor_06_07'}
  # Full runs on the hard CNN column only (the rest not run): Local-SGD 0.3 below S-SGD, so
  # delay_2 (0.2 below S-SGD: +0.10 against Local-SGD) meets the target there, CoCoD-SGD
  # (-0.70) does not; seed 4 of eager_4_g1 did not run.
  full = []
  for s in overlap_config.FULL_SEEDS:
    full.append(_overlap_point('ssgd', 'c100_r18', s, 80.0 + s))
    for v, gap in (('local_sgd', -0.3), ('cocod', -1.0), ('delay_2', -0.2),
                   ('eager_4_g1', -0.1), ('anchor_06_07', -1.5)):  # fmt: skip
      pending = v == 'eager_4_g1' and s == 4
      full.append(_overlap_point(v, 'c100_r18', s, 80.0 + s + gap,
                                 state='PENDING' if pending else 'DONE'))  # fmt: skip
  gap = overlap_analysis.versus_local(full, 'c100_r18', 'delay_2')
  assert gap['seeds'] == [0, 1, 2, 3, 4] and gap['gap'] == pytest.approx(0.1) and gap['meets']
  assert not overlap_analysis.versus_local(full, 'c100_r18', 'cocod')['meets']
  assert overlap_analysis.versus_local(full, 'c100_v16', 'cocod') is None
  data = overlap_analysis.assemble(pilot, rows, full, chosen)
  assert data['not_run'] == ['eager_4_g1 c100_r18 seed 4']
  text = overlap_report.render(data)
  assert '| delay_2 | -0.20 [-0.20, -0.20] equivalent | -0.20 [' in text
  assert '| anchor_05_00 | +0.50 [+0.50, +0.50] inconclusive | diverged |' in text
  assert (
    'Chosen (the highest mean difference over the two columns): delay: delay_2, eager: '
    'eager_4_g1, anchor: anchor_06_07. Settings given: delay 2, eager 6, anchor 2.' in text
  )
  # Against Local-SGD: delay_2 +0.10 on the one column run: undecided (three columns not run).
  assert '| delay_2 | +0.10 (5 seeds) | not run | not run | not run | undecided |' in text
  assert '| cocod | -0.70 (5 seeds) | not run | not run | not run | no |' in text
  assert 'Not run (1 of ' in text and 'eager_4_g1 c100_r18 seed 4' in text
  overlap_plots.plot(data)
  assert (tmp_path / 'overlap.png').stat().st_size > 10_000


def test_provenance_lists_the_runs_commits(flags_parsed, tmp_path):
  # Each point's point.json (written by the runner when it starts a run) names its commit; the
  # artefact lists them with their dirty flags and says when they differ from the render's.
  common.FLAGS(['test', f'--workdir={tmp_path}', '--scale=cpu'])
  points = []
  for i, (commit, dirty) in enumerate((('a' * 40, False), ('a' * 40, False), ('b' * 40, True))):
    d = tmp_path / 'points' / f'p{i}'
    d.mkdir(parents=True)
    (d / 'point.json').write_text(json.dumps({'commit': commit, 'dirty': dirty}))
    points.append(common.Outcome({'seed': str(i)}, 'DONE', str(d), 'h', {'status': 'completed'}))
  pending = tmp_path / 'points' / 'p3'
  pending.mkdir()
  points.append(common.Outcome({'seed': '3'}, 'PENDING', str(pending), 'h', None))  # Not counted.
  data = common.provenance(points, 'one_host')
  assert data['run_commits'] == [{'commit': 'a' * 40, 'dirty': False, 'runs': 2},
                                 {'commit': 'b' * 40, 'dirty': True, 'runs': 1}]  # fmt: skip
  assert [p['dir'] for p in data['points']] == ['points/p0', 'points/p1', 'points/p2', 'points/p3']
  line = common.provenance_line(dict(data, commit='c' * 40, dirty=False))
  assert line == ('Rendered at cccccccccccc; the runs were made at aaaaaaaaaaaa: 2 run(s); '
                  'bbbbbbbbbbbb (dirty): 1 run(s) (the runs mix commits).')  # fmt: skip
  same = dict(data, commit='a' * 40, dirty=False, run_commits=data['run_commits'][:1])
  assert common.provenance_line(same) == 'Runs and render at commit aaaaaaaaaaaa.'


def _timed_point(variant, seed, epoch_s, reach_epoch, hidden, r=0.9, tau=None, final=96.0):
  # A timing run of 6 epochs: accuracy 90% until `reach_epoch`, 96% from it (never: None).
  epochs = [{'epoch': e, 'train_loss': 1.0, 'test_loss': 1.0, 'train_time_s': e * epoch_s,
             'test_accuracy': 0.96 if reach_epoch and e >= reach_epoch else 0.90}
            for e in range(1, 7)]  # fmt: skip
  results = {'status': 'completed', 'epochs': epochs, 'final': {'test_accuracy': final / 100},
             'config': {'algorithm': {'warmup_period_epochs': 0, 'period': 5,
                                      'name': variant if variant in ('ssgd', 'local_sgd')
                                      else 'cocod_sgd',
                                      'delay': 1 if variant == 'delay_1' else None}},
             'timing': {'r': r, 'Tp_s': 0.01, 'Tc_s': 0.01 * r,
                        'hidden_fraction': hidden}}  # fmt: skip
  if tau:
    results['period_auto'] = {'delay': tau}
  arg = {'variant': variant, 'algo': variant, 'task': 'c10_r18', 'seed': str(seed),
         'timing': 'true'}  # fmt: skip
  return common.Outcome(arg, 'DONE', f'points/{variant}.t.s{seed}', 'h', results)


def test_overlap_timing_frontier_and_target(flags_parsed, tmp_path):
  # S-SGD: 1 s an epoch, at the target (95.5%) from epoch 4. Local-SGD 0.5 s (2.00x to target),
  # delay_1 0.55 s (1.82x, 95% hidden), CoCoD-SGD 0.5 s but a seed later (epoch 5: 1.60x),
  # eager 0.4 s never at the target (hollow: epoch speedup 2.50x), delay_auto tau 2 (no full runs).
  common.FLAGS(['test', f'--workdir={tmp_path}', '--scale=cpu'])
  spec = {'ssgd': (1.0, 4, 0.0), 'local_sgd': (0.5, 4, 0.0), 'delay_1': (0.55, 4, 0.95),
          'cocod': (0.5, 5, 0.9), 'eager_2_g0': (0.4, None, 0.96),
          'delay_auto': (0.6, 4, 0.97)}  # fmt: skip
  points = [_timed_point(v, s, e, reach, hidden, tau=2 if v == 'delay_auto' else None,
                         final=96.0 - (0.3 if v == 'delay_auto' else 0.0))
            for v, (e, reach, hidden) in spec.items() for s in (0, 1)]  # fmt: skip
  acc = {'local_sgd': -0.2, 'delay_1': -0.1, 'cocod': -1.0, 'eager_2_g0': -1.5}
  full = {
    'ssgd': {'c10_r18': [96.0, 96.0]},
    'rows': {
      'c10_r18': {
        v: {'difference': d, 'lo': d - 0.2, 'hi': d + 0.2, 'verdict': 'x', 'pairs': [0, 1, 2, 3, 4]}
        for v, d in acc.items()
      }
    },  # fmt: skip
    'vs_local': {
      t: {'delay_1': {'meets': True}, 'cocod': {'meets': False}, 'eager_2_g0': {'meets': False}}
      for t in overlap_config.TASKS
    },  # fmt: skip
  }
  part = overlap_analysis.assemble_timing({'50mbit/8kb/8000': {'c10_r18': points}}, full)[
    '50mbit/8kb/8000'
  ]['c10_r18']
  rows = {r['variant']: r for r in part['rows']}
  assert part['target'] == pytest.approx(95.5)
  assert rows['local_sgd']['speedup'] == pytest.approx(2.0)
  assert rows['delay_1']['speedup'] == pytest.approx(4 / 2.2)
  assert rows['cocod']['speedup'] == pytest.approx(1.6)
  assert rows['eager_2_g0']['speedup'] is None and rows['eager_2_g0']['reached'] == 0
  assert overlap_analysis.frontier_x(rows['eager_2_g0']) == (pytest.approx(2.5), False)
  assert rows['delay_auto']['tau'] == [2]
  # The model at S-SGD's Tp 0.01 s and Tc 0.009 s (the other seed's run): Local-SGD 0.019 /
  # (0.01 + 0.009 / 5); delay 1: ((5 - 1) 0.01 + max(0.01, 0.009)) / 5 = 0.01 a step, 1.9x.
  assert rows['local_sgd']['model'] == pytest.approx(0.019 / 0.0118)
  assert rows['delay_1']['model'] == pytest.approx(1.9)
  assert rows['delay_1']['of_model'] == pytest.approx((1 / 0.55) / 1.9)
  assert rows['delay_auto']['accuracy']['difference'] == pytest.approx(-0.3)
  assert rows['delay_auto']['accuracy']['lo'] is None  # Timing runs only: no interval.
  # The front: eager (2.50x hollow, -1.5), Local-SGD (2.00x, -0.2), delay_1 (1.82x, -0.1) and
  # S-SGD (1x, 0); CoCoD-SGD (1.6x, -1.0) is beaten by Local-SGD; delay_auto has no interval.
  assert sorted(part['pareto']) == ['delay_1', 'eager_2_g0', 'local_sgd', 'ssgd']
  check = part['check']
  assert check['speedup'] == 1.6 and check['hidden'] == 0.9  # S-SGD's r 0.9: r ~ 1.
  assert check['met_by'] == ['delay_1']
  data = {'timing': {'50mbit/8kb/8000': {'c10_r18': part}}}
  text = '\n'.join(overlap_report._render_timing('50mbit/8kb/8000', 'c10_r18', part))
  assert (
    '| delay_1 | - | -0.10 [-0.30, +0.10] | 0.550 | 1.82x | 1.90x | 2.2 | 1.82x | 95% | 0.90 |'
    in text
  )
  assert '| delay_auto | 2 | -0.30 |' in text and '0 of 2 reached' in text
  assert 'delay_1: meets' in text and 'cocod: no (accuracy target not met)' in text
  assert 'eager_2_g0: no (accuracy target not met; target reached by 0 of 2 seeds)' in text
  overlap_plots.plot_frontier(data)
  assert (tmp_path / 'overlap_frontier.png').stat().st_size > 10_000


def _long_point(stage, variant, task, seed, final, best=None, epochs=4):
  # Accuracy `best` at epoch 2 (default: final), `final` from epoch 3; loss 1 / epoch.
  best = final if best is None else best
  acc = [final - 2.0, best, final, final][:epochs]
  recs = [{'epoch': e + 1, 'train_loss': 1.0, 'test_loss': 1.0, 'test_accuracy': a / 100,
           'avg_train_loss': 1.0 / (e + 1), 'train_time_s': float(e)}
          for e, a in enumerate(acc)]  # fmt: skip
  results = {'status': 'completed', 'epochs': recs, 'final': {'test_accuracy': final / 100}}
  arg = {'stage': stage, 'variant': variant, 'algo': variant, 'task': task, 'seed': str(seed)}
  return common.Outcome(arg, 'DONE', f'points/{stage}.{variant}.{task}.s{seed}', 'h', results)


def test_long_schedule_verdicts_readings_and_curves(flags_parsed, tmp_path):
  # The long stage on the hard CNN column: S-SGD 80 + s; Local-SGD 0.1 below at the end (and at
  # its best); CoCoD-SGD 1.0 below at the end but its best (epoch 2) 0.1 above S-SGD's best.
  # The drift control: Local-SGD k=10 1.2 below S-SGD (below CoCoD-SGD's -1.0: reading (a)
  # below 0), k=2 0.5 below (above CoCoD-SGD: (b) above 0), the long warm-up as CoCoD-SGD.
  common.FLAGS(['test', f'--workdir={tmp_path}', '--scale=cpu'])
  points = []
  noise = [0.0, 0.05, -0.05, 0.1, -0.1]
  for s in range(5):
    base = 80.0 + s
    points.append(_long_point('long', 'ssgd', 'c100_r18', s, base, base + 0.5))
    points.append(_long_point('long', 'local_sgd', 'c100_r18', s, base - 0.1, base + 0.4))
    points.append(_long_point('long', 'cocod', 'c100_r18', s, base - 1.0, base + 0.6))
    for v, gap in (('ssgd', 0.0), ('local_sgd', -0.6), ('local_sgd_k10', -1.2), ('cocod', -1.0),
                   ('cocod_k2', -0.5), ('cocod_long_warmup', -1.0)):  # fmt: skip
      points.append(_long_point('drift', v, 'c100_r18', s, base + gap + noise[s] * (v != 'ssgd')))
  data = long_schedule.assemble(points)
  long = data['long']['c100_r18']
  assert long['cocod']['final']['difference'] == pytest.approx(-1.0)
  assert long['cocod']['final']['verdict'] == 'worse'
  assert long['cocod']['best']['difference'] == pytest.approx(0.1)
  assert long['cocod']['best']['paired_by'] == 'seed'
  assert long['local_sgd']['final']['verdict'] == 'equivalent'
  readings = data['readings']['c100_r18']
  assert readings['a']['difference'] == pytest.approx(-0.2) and readings['a']['side'] == 'below'
  assert readings['b']['difference'] == pytest.approx(0.5) and readings['b']['side'] == 'above'
  assert readings['c']['side'] == 'across'
  # (a) above 0 would drop the drift explanation; below 0 keeps it. (b): +0.5 above 0 and -0.5
  # no worse than half of -1.0: kept. (c): across 0: reworded.
  assert data['outcomes']['c100_r18'] == {'a': 'kept', 'b': 'kept', 'c': 'reworded'}
  assert data['short']['c100_r18']['cocod']['difference'] == pytest.approx(-1.0)
  assert data['curves']['c100_r18']['cocod']['0']['avg_train_loss'] == [1.0, 0.5, 0.33333, 0.25]
  mean, lo, hi = long_schedule.gap_curve(data['curves']['c100_r18']['cocod'],
                                         data['curves']['c100_r18']['ssgd'])  # fmt: skip
  np.testing.assert_allclose(mean, [-1.0, 0.1, -1.0, -1.0], atol=1e-6)
  assert data['decay_epoch'] == 81
  text = long_schedule.render(data)
  assert '| cocod | -1.00 [' in text and 'worse | -1.00 [' in text
  assert '(a) Local-SGD with period 10 minus CoCoD-SGD (k = 5) | -0.20 [' in text
  assert '(below 0): kept | not run |' in text  # The hard MLP column has no runs.
  assert 'Every registered run finished.' in text
  long_schedule.plot(data)
  assert (tmp_path / 'long_schedule.png').stat().st_size > 10_000


def test_not_run_groups_the_seeds_of_a_cell():
  points = [common.Outcome({'variant': 'a', 'seed': str(s)}, 'PENDING', 'd', 'h', None)
            for s in range(5)]  # fmt: skip
  points += [common.Outcome({'variant': 'b', 'seed': str(s)}, state, 'd', 'h', None)
             for s, state in ((1, 'FAILED'), (2, 'DONE'), (3, 'PENDING'))]  # fmt: skip
  missing, line = common.not_run(points, lambda p: p.arg['variant'])
  assert missing == ['a seed 0', 'a seed 1', 'a seed 2', 'a seed 3', 'a seed 4', 'b seed 1',
                     'b seed 3']  # fmt: skip
  assert line == 'Not run (7 of 8 registered runs): a seeds 0-4; b seeds 1, 3.'
  assert common.not_run(points[5:6] * 0, str) == ([], 'Every registered run finished.')


def test_the_scale_flag_offers_every_scale_but_the_long_schedules():
  from cocod_jax.experiments import flags as experiment_flags  # pylint: disable=g-import-not-at-top
  from configs import scales  # pylint: disable=g-import-not-at-top

  assert experiment_flags.SCALES is scales.SHORT_SCALES  # One tuple, not two held in step.
  assert experiment_flags.SCALES == tuple(s for s in scales.SCALES if s != 'cpu_long')

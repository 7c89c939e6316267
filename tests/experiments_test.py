"""The paper's entry points: the whole pipeline at smoke scale, and the renderers on made-up
results against golden text (tests/data/experiments/)."""

import json
import os
import subprocess
import sys

import pytest

from cocod_jax import flags as cocod_flags
from cocod_jax import timeline
from cocod_jax.experiments import common
from configs import scales

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, 'tests', 'data', 'experiments')
ARTEFACTS = ('table1', 'table2', 'fig2', 'fig3', 'fig4', 'fig5', 'fig6')


def _paper(workdir, *extra):
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  cmd = [sys.executable, '-m', 'cocod_jax.experiments.paper', '--scale=smoke',
         f'--workdir={workdir}', *extra]  # fmt: skip
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


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
  return common.Point(arg, 'DONE', f'points/{algo}.{task}.s{seed}', 'abcd1234', {'epochs': epochs})


@pytest.fixture
def flags_parsed():
  if 'scale' not in common.FLAGS:
    cocod_flags.define_experiment_flags()
  common.FLAGS(['test', '--scale=cpu'])
  yield
  common.FLAGS.unparse_flags()


def test_accuracy_table_golden(flags_parsed, monkeypatch):
  monkeypatch.setattr(common, 'provenance', lambda points, backend: {'backend': backend})
  points = [
    _point('ssgd', 'c10_r18', 90.0), _point('ssgd', 'c10_r18', 91.0, seed=1),
    _point('cocod_sgd', 'c10_r18', 90.2), _point('cocod_sgd', 'c10_r18', 90.6, seed=1),
    _point('ssgd', 'c100_r18', 60.0), _point('cocod_sgd', 'c100_r18', 58.0),
  ]  # fmt: skip
  text, data = common.accuracy_table('Table 1: golden', points, ('ssgd', 'cocod_sgd'),
                                     ('c10_r18', 'c100_r18'), common.published.TABLE1,
                                     scales.task_title, 'one_host')  # fmt: skip
  path = os.path.join(GOLDEN, 'table.md')
  if os.environ.get('UPDATE_GOLDEN'):
    with open(path, 'w') as f:
      f.write(text)
  with open(path) as f:
    assert text == f.read()
  # The golden file is the renderer's own output; the cells it must hold are worked out here
  # from the points: mean ± sample std (seeds) / the paper's number / n/a at this scale.
  papers = {(a, t): common.published.accuracy(common.published.TABLE1, a, t)
            for a in ('ssgd', 'cocod_sgd') for t in ('c10_r18', 'c100_r18')}  # fmt: skip
  assert f'| S-SGD | 90.50 ± 0.71 (2) / {papers["ssgd", "c10_r18"]:.2f} / n/a ' in text
  assert f'| 60.00 (1) / {papers["ssgd", "c100_r18"]:.2f} / n/a |' in text
  assert f'| CoCoD-SGD | 90.40 ± 0.28 (2) / {papers["cocod_sgd", "c10_r18"]:.2f} / n/a ' in text
  assert f'| 58.00 (1) / {papers["cocod_sgd", "c100_r18"]:.2f} / n/a |' in text
  assert papers['ssgd', 'c10_r18'] == 94.00 and papers['cocod_sgd', 'c10_r18'] == 94.41
  checks = {(c['algo'], c['task']): c['verdict'] for c in data['checks']}
  # CIFAR-10 column: 90.4 against 90.5, spreads 0.28 and 0.71 over 2 seeds: gap -0.1 with a band
  # of 2 * sqrt(0.2^2 + 0.5^2) = 1.08 straddles -0.5: inconclusive.
  assert checks[('cocod_sgd', 'c10_r18')] == 'inconclusive (± 1.08)'
  assert checks[('cocod_sgd', 'c100_r18')] == 'fail (1 seed, no error estimate)'


def test_parity_rules():
  cell = lambda values: common.summary(values)
  # Two seeds each, spread 0.07: band 2 * sqrt(0.05^2 + 0.05^2) = 0.14 around the gap.
  assert common.parity(cell([90.0, 90.1]), cell([90.2, 90.3]))[0] == 'pass (± 0.14)'
  assert common.parity(cell([89.0, 89.1]), cell([90.2, 90.3]))[0] == 'fail (± 0.14)'
  assert common.parity(cell([]), cell([90.0]))[0] == 'inconclusive (no result)'
  assert common.parity(cell([95.0]), cell([90.0])) == ('pass (1 seed, no error estimate)', 5.0)
  # One seed on 297 test examples (the digits stand-in): 97% and 99% are 0.99 and 0.58 points
  # of binomial error, band 2 * 1.146 = 2.29: a 2-point gap cannot be told from parity ...
  tested = lambda acc: common.summary([acc], test_examples=297)
  assert common.parity(tested(97.0), tested(99.0))[0] == 'inconclusive (± 2.29)'
  # ... but a 15-point gap can (the band there is 2 * sqrt(2.13^2 + 0.58^2) = 4.41).
  assert common.parity(tested(84.0), tested(99.0))[0] == 'fail (± 4.41)'
  # 98.8% and 99% on 10000 examples (CIFAR's test set): 0.109 and 0.0995 points of binomial
  # error, band 2 * 0.147 = 0.29.
  big = lambda acc: common.summary([acc], test_examples=10000)
  assert common.parity(big(98.8), big(99.0))[0] == 'pass (± 0.29)'


def test_speedup_model_by_hand():
  # Ring allreduce: Tc(4) = Tc(2) * (2 * 3 / 4) / (2 * 1 / 2) = 1.5 Tc(2); CoCoD at k = 5 with
  # Tp = 0.1 and Tc(4) = 0.3: step max(0.1, 0.06) = 0.1, speedup 4.
  assert common.ring_tc(0.2, 2, 4) == pytest.approx(0.3)
  assert common.ring_tc(0.2, 2, 1) == 0.0
  assert 4 * 0.1 / timeline.model_step_time('cocod_sgd', 0.1, 0.3, 5) == pytest.approx(4.0)
  assert 4 * 0.1 / timeline.model_step_time('ssgd', 0.1, 0.3, 5) == pytest.approx(1.0)


def test_figure4_model_comes_from_the_calibration_runs(tmp_path, monkeypatch):
  # Measured runs with Tp 0.2 / Tc 0.9 and calibration runs with Tp 0.1 / Tc 0.3: the model is
  # drawn from the calibration (CoCoD at k = 5, 2 workers: step max(0.1, 0.3 / 5) = 0.1,
  # speedup 2), never from the runs it is plotted beside (which would give 2 * 0.2 / 0.2 = 2 too
  # for CoCoD, so S-SGD tells them apart: 2 * 0.1 / 0.4 = 0.5 against 2 * 0.2 / 1.1).
  if 'scale' not in common.FLAGS:
    cocod_flags.define_experiment_flags()
  common.FLAGS(['test', '--scale=smoke', f'--workdir={tmp_path}'])
  try:

    def point(algo, workers, tp, tc, role=None):
      epochs = [{'epoch': e, 'train_time_s': float(e), 'test_accuracy': 0.5} for e in (1, 2)]
      results = {'timing': {'Tp_s': tp, 'Tc_s': tc, 'r': tc / tp}, 'epochs': epochs,
                 'config': {'algorithm': {'period': 5}}}  # fmt: skip
      arg = {'algo': algo, 'workers': str(workers), **({'role': role} if role else {})}
      return common.Point(arg, 'DONE', f'p/{algo}{workers}{role}', 'h', results)

    points = [point(a, n, 0.2, 0.9) for a in ('ssgd', 'cocod_sgd') for n in (1, 2)]
    points += [point('ssgd', n, 0.1, 0.3, 'calibration') for n in (1, 2)]
    _, data = common.speedup(points, ('ssgd', 'cocod_sgd'), 'link', largest=2)
  finally:
    common.FLAGS.unparse_flags()
  models = {m['algo']: m for m in data['model']}
  assert (models['ssgd']['Tp_s'], models['ssgd']['Tc_s']) == (0.1, 0.3)
  assert models['ssgd']['model']['2'] == pytest.approx(0.5)
  assert models['cocod_sgd']['model']['2'] == pytest.approx(2.0)
  assert {(r['algo'], r['workers']) for r in data['rows']} == {
    ('ssgd', 1), ('ssgd', 2), ('cocod_sgd', 1), ('cocod_sgd', 2)
  }  # fmt: skip

"""The README's measured results are the committed artefacts': the block equals their rendering,
and each table's verdicts follow from its committed per-example correctness."""

import json
import os
import subprocess

import numpy as np
import pytest

from cocod_jax import provenance
from cocod_jax.experiments import correctness
from cocod_jax.experiments import readme
from cocod_jax.experiments import stats

ROOT = provenance.ROOT
FOLDER = os.path.join(ROOT, readme.FOLDER)


def test_readme_block_is_the_artefacts_rendering():
  with open(os.path.join(ROOT, 'README.md')) as f:
    text = f.read()
  assert readme.splice(text, readme.render()) == text, (
    'README.md differs from docs/paper-cpu: run python -m cocod_jax.experiments.readme'
  )


def test_splice_needs_both_markers():
  assert readme.splice(f'a {readme.BEGIN} old {readme.END} b', 'new') == 'a new b'
  with pytest.raises(ValueError, match='lacks the markers'):
    readme.splice('no markers here', 'new')


@pytest.mark.parametrize('name', [a for a in readme.ARTEFACTS if a.startswith('table')])
def test_table_verdicts_follow_from_the_committed_correctness(name):
  path = os.path.join(FOLDER, f'{name}.json')
  if not os.path.exists(path):
    pytest.skip(f'{path} not made yet')
  with open(path) as f:
    table = json.load(f)
  with np.load(os.path.join(FOLDER, f'{name}_correct.npz')) as f:
    bits = correctness.unpack(f)
  seeds = {(c['algo'], c['task']): c['seeds'] for c in table['cells']}
  finals = {(c['algo'], c['task']): c['final'] for c in table['cells']}
  for key, values in finals.items():  # Every run's bits score the accuracy it reported.
    scored = 100.0 * bits[f'{key[0]}.{key[1]}'].mean(axis=1)
    np.testing.assert_allclose(scored, values, atol=1e-3, err_msg=str(key))
  reference = table['cells'][0]['algo']
  for check in table['checks']:
    if check['paired_by'] != 'seed and test example':
      continue
    rows = lambda algo: [seeds[algo, check['task']].index(s) for s in check['pairs']]  # noqa: E731
    a = bits[f'{check["algo"]}.{check["task"]}'][rows(check['algo'])]
    b = bits[f'{reference}.{check["task"]}'][rows(reference)]
    again = stats.compare(a, b)
    assert (again.verdict, again.seeds) == (check['verdict'], check['seeds'])
    assert again.difference == pytest.approx(check['difference'], abs=1e-9)


def test_correction_verdicts_follow_from_the_committed_correctness():
  path = os.path.join(FOLDER, 'corrections.json')
  if not os.path.exists(path):
    pytest.skip(f'{path} not made yet')
  with open(path) as f:
    data = json.load(f)
  with np.load(os.path.join(FOLDER, 'corrections_correct.npz')) as f:
    bits = correctness.unpack(f)
  reference = bits['ssgd']
  np.testing.assert_allclose(100.0 * reference.mean(axis=1), data['reference_final'], atol=1e-3)
  checked = 0
  for row in data['accuracy']:
    if row.get('paired_by') != 'seed and test example':
      continue
    a = bits[row['variant']]
    np.testing.assert_allclose(100.0 * a.mean(axis=1), row['final'], atol=1e-3)
    b = reference[[data['reference_seeds'].index(s) for s in row['pairs']]]
    again = stats.compare(a, b)
    assert (again.verdict, again.seeds) == (row['verdict'], row['seeds']), row['variant']
    assert again.difference == pytest.approx(row['difference'], abs=1e-9)
    checked += 1
  assert checked >= 1


def test_artefacts_name_a_commit_of_this_repository():
  for name in readme.ARTEFACTS:
    path = os.path.join(FOLDER, f'{name}.json')
    if not os.path.exists(path):
      continue
    with open(path) as f:
      data = json.load(f)
    assert len(data['commit']) == 40 and data['dirty'] in (True, False), name
    known = subprocess.run(['git', 'cat-file', '-e', data['commit'] + '^{commit}'], cwd=ROOT,
                           capture_output=True, check=False)  # fmt: skip
    shallow = subprocess.run(['git', 'rev-parse', '--is-shallow-repository'], cwd=ROOT,
                             capture_output=True, text=True, check=False)  # fmt: skip
    ok = known.returncode == 0 or shallow.stdout.strip() == 'true'
    assert ok, f'{name}: commit {data["commit"]} unknown'

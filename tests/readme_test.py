"""The README's measured results are the committed artefacts': the block equals their rendering,
each table's verdicts follow from its committed per-example correctness, and the prose around
the block quotes only figures its paragraph's artefacts print."""

import json
import os
import re
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
  for name in readme.ARTEFACTS + ('overlap', 'long_schedule'):
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


# A figure with two decimals, with its sign where one is written (after a space or a bracket, so
# that a range "2.30-2.38" is two unsigned figures) and its "x" where it is a speedup.
FIGURE = re.compile(r'(?:(?<=[\s(\[])[-+])?\d+\.\d\d(?![\d])x?')
# How the README's prose names an artefact of docs/paper-cpu.
NAMED = {'Table 1': 'table1', 'Table 2': 'table2', 'Figure 3': 'fig3', 'Figure 4': 'fig4',
         'Figure 6': 'fig6', 'ablation': 'ablation', 'corrections': 'corrections',
         'overlap.md': 'overlap', 'long_schedule.md': 'long_schedule'}  # fmt: skip
OVERLAP = '## Overlap with less staleness'  # The section on overlap.md (issue 30).


def _results_paragraphs(text: str) -> list[tuple[str, set[str]]]:
  """The README's prose about the committed results, outside the rendered block, as paragraphs,
  each with the artefacts it names: the section on the corrections (all of it about
  corrections.md), the section on the overlap options (all of it about overlap.md), what
  follows the block up to the benchmark (which quotes `make bench`) and the summary at the top
  ('What was found'), paragraph by paragraph."""
  section = text[text.index('## Beyond the paper') : text.index(OVERLAP)]
  overlap = text[text.index(OVERLAP) : text.index("## The paper's experiments")]
  after = text[text.index(readme.END) + len(readme.END) : text.index('## Benchmark')]
  found = text[text.index('## What was found') : text.index('## Install')]
  out = [(section, {'corrections'}), (overlap, {'overlap'})]
  for paragraph in (after + '\n\n' + found).split('\n\n'):
    out.append((paragraph, {name for words, name in NAMED.items() if words in paragraph}))
  return out


def _printed(name: str) -> set[str]:
  with open(os.path.join(FOLDER, f'{name}.md')) as f:
    return set(FIGURE.findall(f.read()))


def test_results_prose_quotes_only_figures_of_the_artefacts_it_names():
  # Every such figure in that prose (accuracies, differences, intervals, r, speedups) is printed,
  # in the same form, in an artefact its paragraph names (docs/paper-cpu/<name>.md): rerendered
  # artefacts whose numbers moved fail here until the prose is rewritten from them.
  with open(os.path.join(ROOT, 'README.md')) as f:
    paragraphs = _results_paragraphs(f.read())
  quoted = 0
  for paragraph, names in paragraphs:
    figures = set(FIGURE.findall(paragraph))
    if not figures:
      continue
    assert names, f'a paragraph quotes {sorted(figures)} but names no artefact: {paragraph[:80]}'
    printed = set().union(*(_printed(name) for name in names))
    missing = sorted(figures - printed)
    assert not missing, f'{missing} are in none of {sorted(names)}: {paragraph[:80]}'
    quoted += len(figures)
  assert quoted >= 20  # The sections are found, and they do quote results.

"""The documents' measured results are the committed artefacts': every generated part (the results
in docs/results.md, the benchmark's targets and the exit statuses in README.md) equals its
rendering, each table's verdicts follow from its committed per-example correctness, every figure
of the prose about the results (README's 'What was found', docs/results.md's reading) is the json
field its block's `<!-- cells: ... -->` comment names, and the documents cite only files the
repository holds."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from cocod_jax.config import errors
from cocod_jax.experiments import correctness
from cocod_jax.experiments import readme
from cocod_jax.experiments import stats
from cocod_jax.record import provenance

ROOT = provenance.ROOT
FOLDER = os.path.join(ROOT, readme.FOLDER)
ARCHIVE = os.path.join(ROOT, readme.ARCHIVE)
DOCUMENTS = ['README.md'] + sorted(
  os.path.join('docs', n) for n in os.listdir(os.path.join(ROOT, 'docs')) if n.endswith('.md')
)


def _read(path: str) -> str:
  with open(os.path.join(ROOT, path)) as f:
    return f.read()


def test_generated_parts_are_their_rendering():
  for path, (now, new) in readme.rendered().items():
    assert now == new, f'{path} differs: run python -m cocod_jax.experiments.readme --write'


def test_a_part_needs_both_markers():
  part = readme.Part('x.md', 'exit codes', readme.exit_codes)
  begin, end = (
    '<!-- exit codes: rendered by python -m cocod_jax.experiments.readme; do not edit -->',
    ('<!-- end of exit codes -->'),
  )
  got = part.splice(f'a {begin} old {end} b', ROOT)
  assert got.startswith(f'a {begin}\n\n| status | meaning |') and got.endswith(f'{end} b')
  with pytest.raises(ValueError, match='x.md lacks the markers'):
    part.splice('no markers here', ROOT)


def test_readme_prints_every_exit_status():
  text = _read('README.md')
  for code, meaning in errors.EXIT_CODES.items():
    assert f'| {code} | {meaning} |' in text


def test_the_renderer_writes_only_when_asked(tmp_path):
  # No argument (or --help) never rewrites a document: one line and exit 2, or the usage.
  before = {path: _read(path) for path in ('README.md', os.path.join('docs', 'results.md'))}
  for args, status in (([], 2), (['--wrtie'], 2), (['--help'], 0), (['--check'], 0)):
    p = subprocess.run([sys.executable, '-m', 'cocod_jax.experiments.readme', *args], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert p.returncode == status, (args, p.stderr)
    if status == 2:
      assert p.stderr.count('\n') == 1 and p.stderr.startswith('error: usage:'), p.stderr
  assert before == {path: _read(path) for path in before}


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
  with open(os.path.join(ARCHIVE, 'corrections.json')) as f:
    data = json.load(f)
  with np.load(os.path.join(ARCHIVE, 'corrections_correct.npz')) as f:
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


def test_artefacts_name_commits_of_this_repository():
  shallow = subprocess.run(['git', 'rev-parse', '--is-shallow-repository'], cwd=ROOT,
                           capture_output=True, text=True, check=False)  # fmt: skip
  if shallow.stdout.strip() != 'false':
    pytest.skip('a shallow clone (or no git): the commits the artefacts name cannot be looked up')
  checked = 0
  for path in _records():
    name = os.path.relpath(path, ROOT)
    with open(path) as f:
      data = json.load(f)
    commits = [(data['commit'], data['dirty'])]
    commits += [(r['commit'], r['dirty']) for r in data.get('run_commits', [])]
    for commit, dirty in commits:
      assert len(commit) == 40 and dirty in (True, False), name
      known = subprocess.run(['git', 'cat-file', '-e', commit + '^{commit}'], cwd=ROOT,
                             capture_output=True, check=False)  # fmt: skip
      assert known.returncode == 0, f'{name}: commit {commit} unknown'
      checked += 1
  assert checked >= len(readme.ARTEFACTS) + len(ARCHIVED)


# The records of earlier builds that docs/archive/ holds (issue 42 item 6), each named with its
# build in docs/archive/README.md.
ARCHIVED = ('corrections', 'period_auto', 'mnist1d_check')


def _records() -> list[str]:
  """Every committed record: the artefacts' json (docs/paper-cpu) and the archived ones'."""
  paths = [os.path.join(FOLDER, f'{name}.json') for name in readme.ARTEFACTS]
  paths += [os.path.join(ARCHIVE, f'{name}.json') for name in ARCHIVED]
  assert all(os.path.exists(p) for p in paths), [p for p in paths if not os.path.exists(p)]
  return paths


def test_the_archive_names_the_build_of_each_record():
  index = _read(os.path.join(readme.ARCHIVE, 'README.md'))
  assert sorted(n for n in os.listdir(ARCHIVE) if n.endswith('.json')) == sorted(
    f'{name}.json' for name in ARCHIVED
  )
  for name in ARCHIVED:
    with open(os.path.join(ARCHIVE, f'{name}.json')) as f:
      commit = json.load(f)['commit'][:7]
    line = next(' '.join(x.split()) for x in index.split('\n- ') if x.startswith(f'`{name}.md`'))
    assert f'at {commit} (tree clean' in line, (name, line)
    assert f'a record of the build at {commit}' in _read(os.path.join(readme.ARCHIVE, f'{name}.md'))
    assert not os.path.exists(os.path.join(FOLDER, f'{name}.json')), name


def _strings(value):
  if isinstance(value, dict):
    for v in value.values():
      yield from _strings(v)
  elif isinstance(value, list):
    for v in value:
      yield from _strings(v)
  elif isinstance(value, str):
    yield value


# A path of a machine written in a document: an absolute path of two parts or more, after a space,
# a quote, a bracket or '='.
_MACHINE_PATH = re.compile(r'(?:^|[\s`\'"=(])(/[A-Za-z][\w.-]*/[\w./-]+)', re.M)


def test_no_record_holds_a_path_of_the_machine_that_made_it():
  for path in _records():
    with open(path) as f:
      data = json.load(f)
    for text in _strings(data):
      assert not os.path.isabs(text), (path, text)
      assert not _MACHINE_PATH.findall(text), (path, text)
    with open(path.removesuffix('.json') + '.md') as f:
      assert not _MACHINE_PATH.findall(f.read()), path


# Paths the documents name: a Markdown link's target, or a backticked path of the repository.
_LINK = re.compile(r'\]\(([^)#\s]+)\)')
_PATH = re.compile(r'`((?:cocod_jax|configs|launch|tests|docs)/[\w./-]*\w)`')
_MARKDOWN = re.compile(r'[\w./-]*\w\.md\b')
# The Markdown files the repository holds (git's, not the venv's or the runs').
_HELD = set(
  os.path.basename(n)
  for n in subprocess.run(
    ['git', 'ls-files', '*.md'], cwd=ROOT, capture_output=True, text=True, check=False
  ).stdout.split()  # fmt: skip
)


def test_documents_cite_only_what_the_repository_holds():
  for path in DOCUMENTS:
    text = _read(path)
    folder = os.path.dirname(os.path.join(ROOT, path))
    for target in _LINK.findall(text):
      if target.startswith('http'):
        continue
      assert os.path.exists(os.path.join(folder, target)), f'{path} links to {target}'
    for named in _PATH.findall(text):
      if any(c in named for c in '<>*{'):
        continue
      assert os.path.exists(os.path.join(ROOT, named)), f'{path} names {named}'
    for cited in _MARKDOWN.findall(text):  # Any document named, bare or in a path.
      assert os.path.basename(cited) in _HELD, f'{path} cites {cited}, not in the repository'


def test_readme_names_the_experiments_that_have_a_smoke_scale():
  # Issue 42 item 9: README says which experiments take --scale=smoke, and they are those whose
  # table of flags (experiments/flags.py EXPERIMENT_READS) reads --scale.
  from cocod_jax.experiments import flags as experiment_flags  # pylint: disable=g-import-not-at-top

  text = ' '.join(_read('README.md').split())
  said = re.search(r'`--scale=smoke` \(.*?\) is taken by (.*?):', text).group(1)
  names = set(re.findall(r'`(\w+)`', said))
  if '`fig2`-`fig6`' in said:
    names |= {f'fig{i}' for i in range(2, 7)}
  reads = {name for name, flags in experiment_flags.EXPERIMENT_READS.items() if 'scale' in flags}
  assert names == reads
  none = re.search(r'(`\w+`) and (`\w+`) have no smoke scale', text).groups()
  assert {n.strip('`') for n in none} == set(experiment_flags.EXPERIMENT_READS) - reads


def test_readme_is_short():
  assert len(_read('README.md').splitlines()) <= 300


# A figure of the prose: a number with two decimals, with its sign where one is written (after a
# space or a bracket, so that a range "2.30-2.38" is two unsigned figures) and its "x" where it is
# a speedup, or a percentage.
FIGURE = re.compile(r'(?:(?<=[\s(\[])[-+])?(?:\d+\.\d\d(?![\d%])x?|\d+(?:\.\d+)?%)')
# Where a block of prose says which cell each of its figures reads, in order: one entry a figure,
# `artefact:path` (a field of docs/paper-cpu/<artefact>.json or docs/archive/<artefact>.json: keys
# by `.`, a list's item by `[index]` or by its fields `[algo=ssgd,task=c10_r18]`) or
# `PREREGISTRATION.md` (a registered figure, not a result: printed in that document).
CELLS = re.compile(r'<!-- cells: (.*?) -->', re.S)
RESULTS = os.path.join('docs', 'results.md')


def _between(text: str, start: str, end: str) -> str:
  return text[text.index(start) : text.index(end)]


def _prose_blocks() -> list[tuple[str, str]]:
  """The prose about the committed results, as blocks (a paragraph, or a list's item), each with
  where it is: docs/results.md from the reading of the paper's artefacts to the artefacts
  themselves, and README's summary at the top ('What was found')."""
  results = _read(RESULTS)
  prose = [
    (RESULTS, _between(results, "## What the paper's artefacts say", '## The artefacts')),
    ('README.md', _between(_read('README.md'), '## What was found', '## Install')),
  ]
  out = []
  for path, text in prose:
    for paragraph in text.split('\n\n'):
      for block in re.split(r'\n(?=- )', paragraph):
        out.append((path, block))
  return out


def _load(artefact: str):
  for folder in (FOLDER, ARCHIVE):
    path = os.path.join(folder, f'{artefact}.json')
    if os.path.exists(path):
      with open(path) as f:
        return json.load(f)
  raise AssertionError(f'no artefact {artefact}.json in docs/paper-cpu or docs/archive')


def cell(data, path: str):
  """The value at `path` in `data` (see CELLS); KeyError when there is none."""
  rest = path
  while rest:
    if rest.startswith('['):
      inside, rest = rest[1:].split(']', 1)
      if inside.isdigit():
        data = data[int(inside)]
      else:
        want = dict(pair.split('=', 1) for pair in inside.split(','))
        found = [x for x in data if all(str(x.get(k)) == v for k, v in want.items())]
        if len(found) != 1:
          raise KeyError(f'{len(found)} items match [{inside}]')
        data = found[0]
    else:  # The longest key that starts the rest (a key may hold a '.': '5.5mbit/8kb/8000').
      rest = rest.removeprefix('.')
      keys = [k for k in data if rest.startswith(k) and rest[len(k) : len(k) + 1] in ('', '.', '[')]
      if not keys:
        raise KeyError(rest)
      key = max(keys, key=len)
      data, rest = data[key], rest[len(key) :]
  return data


def written(value, figure: str) -> bool:
  """Whether `figure` (as the prose writes it) is `value`: the same digits after rounding, its
  sign where it writes one, a fraction written as a percentage."""
  number = figure.rstrip('x%')
  decimals = len(number.split('.')[1]) if '.' in number else 0
  sign = '+' if number[0] in '+-' else ''
  values = [value, 100 * value] if figure.endswith('%') else [value]
  # An unsigned figure may write a loss by its size ("loses 18.0 points").
  forms = {f'{v:{sign}.{decimals}f}' for v in values} | {f'{abs(v):.{decimals}f}' for v in values}
  return number in forms


def check_block(block: str) -> list[str]:
  """The problems of one block of prose: a figure without its cell, a cell that does not hold the
  figure; [] when every figure is its cell's."""
  comments = CELLS.findall(block)
  figures = FIGURE.findall(CELLS.sub('', block))
  if not figures and not comments:
    return []
  if len(comments) != 1:
    return [f'{len(comments)} cells comments for the figures {figures}: {block[:70]!r}']
  entries = comments[0].split()
  if len(entries) != len(figures):
    return [f'{len(figures)} figures {figures} but {len(entries)} cells: {block[:70]!r}']
  problems = []
  for figure, entry in zip(figures, entries):
    if entry == 'PREREGISTRATION.md':
      if figure not in _read(os.path.join(readme.FOLDER, entry)):
        problems.append(f'{figure} is not in {entry}')
      continue
    artefact, path = entry.split(':', 1)
    try:
      value = cell(_load(artefact), path)
    except (KeyError, IndexError, TypeError, ValueError) as e:
      problems.append(f'{figure}: {entry} is no cell ({e})')
      continue
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not written(value, figure):
      problems.append(f'{figure} is not {entry} = {value!r}')
  return problems


def test_every_figure_of_the_results_prose_is_its_cells():
  # Each figure of that prose (accuracies, differences, intervals, r, speedups, shares) names the
  # field it reads, so that a number taken from another cell or another artefact fails here, as
  # does a rerendered artefact whose numbers moved, until the prose is rewritten from it.
  problems, quoted = [], 0
  for path, block in _prose_blocks():
    problems += [f'{path}: {p}' for p in check_block(block)]
    quoted += len(FIGURE.findall(CELLS.sub('', block)))
  assert not problems, '\n'.join(problems)
  assert quoted >= 200  # The sections are found, and they do quote results.


def test_a_figure_from_another_cell_fails():
  # README once said Local-SGD loses -0.60 and -0.66 on Table 1's hard columns: those are the
  # 5-seed drift runs' (long_schedule.json); Table 1's 10 seeds give -0.51.
  table1 = 'table1:checks[algo=local_sgd,task=c100_r18].difference'
  drift = 'long_schedule:drift.c100_r18.local_sgd.difference'
  assert check_block(f'Local-SGD loses -0.51. <!-- cells: {table1} -->') == []
  assert check_block(f'Local-SGD loses -0.60. <!-- cells: {drift} -->') == []
  assert check_block(f'Local-SGD loses -0.60. <!-- cells: {table1} -->') == [
    f'-0.60 is not {table1} = {cell(_load("table1"), table1.split(":")[1])!r}'
  ]
  assert 'figures' in check_block('Local-SGD loses -0.60 and -0.66.')[0]
  assert 'is no cell' in check_block('-0.60 <!-- cells: table1:checks[algo=nobody].x -->')[0]

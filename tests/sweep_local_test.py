"""Tests of cocod_jax/sweep/local.py, the launcher that runs points here as processes: a timeout
fails its point; the module fixture `ran` runs one sweep through the CLI (two training runs at
once and one the entry point refuses at run time), and the tests read what it left (states,
point.json, status.json, the summary) and run the sweep again, for real, dry and report-only.
"""

import json
import os
import re
import socket

import pytest

from cocod_jax.config import errors
from cocod_jax.record import provenance
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import runner
from cocod_jax.sweep import state as state_lib
from tests.sweep_helpers import TINY
from tests.sweep_helpers import cli
from tests.sweep_helpers import snapshot

# It runs sweeps of real runs: left out of make test-fast.
pytestmark = pytest.mark.slow


def test_timeout_fails_the_point(tmp_path):
  (record,) = runner.run_sweep(f'{TINY}:case=missing', str(tmp_path), timeout_s=0.3)
  assert record['state'] == 'FAILED' and record['rc'] == errors.EXIT_TIMED_OUT
  status = json.load(open(os.path.join(record['dir'], 'status.json')))
  assert status['timed_out'] is True and status['log_tail'][0].startswith('=== ')
  assert not os.path.exists(os.path.join(record['dir'], 'lock'))


@pytest.fixture(scope='module', name='ran')
def _ran(tmp_path_factory):
  """One sweep of two real runs and one the entry point refuses (missing dataset file)."""
  workdir = tmp_path_factory.mktemp('sweep') / 'w'
  heads = [provenance.commit()]
  p = cli(f'--config={TINY}', f'--workdir={workdir}', '--parallel=2', timeout=300)
  return workdir, p, heads + [provenance.commit()]  # Other work may commit meanwhile.


def test_a_failing_point_leaves_the_others_done(ran):
  workdir, p, heads = ran
  assert p.returncode == 1, p.stdout + p.stderr
  points = points_lib.expand(TINY, str(workdir))
  info = json.load(open(os.path.join(points[1].dir, 'point.json')))
  assert info['commit'] in heads
  records = state_lib.collect(points, info['commit'])
  assert [r['state'] for r in records] == ['DONE', 'DONE', 'FAILED']
  assert [r['stale'] for r in records] == [False, False, False]
  assert records[0]['results']['status'] == 'completed'
  assert records[0]['metrics']['test_accuracy'] > 0.5 and records[0]['wall_s'] > 0
  status = json.load(open(os.path.join(points[2].dir, 'status.json')))
  assert status['rc'] == 2 and status['host'] == socket.gethostname()
  assert any('does not exist' in line for line in status['log_tail'])
  assert 'log_tail' not in json.load(open(os.path.join(points[0].dir, 'status.json')))
  assert info['hash'] == points[1].hash
  assert info['command'] == points_lib.command(points[1]) and info['config'] == points[1].config
  assert info['overrides'] == {'optimizer.learning_rate': 0.05}
  for p_ in points:
    assert not os.path.exists(os.path.join(p_.dir, 'lock'))
  assert 'done in' in p.stdout and 'test acc' in p.stdout
  assert 'FAILED (exit status 2) in' in p.stdout and 'does not exist' in p.stdout
  table = (workdir / 'sweeps' / 'tiny' / 'sweep.md').read_text()
  assert '3 points: 2 DONE, 1 FAILED' in table and table[table.index('| point') :] in p.stdout
  summary = json.loads((workdir / 'sweeps' / 'tiny' / 'sweep.json').read_text())
  assert [r['state'] for r in summary['points']] == ['DONE', 'DONE', 'FAILED']
  assert 'results' not in summary['points'][0] and summary['points'][0]['metrics']


def test_second_invocation_launches_nothing(ran):
  workdir = ran[0]
  before = snapshot(workdir / 'points')
  p = cli(f'--config={TINY}', f'--workdir={workdir}')
  assert p.returncode == 1, p.stderr
  assert '(2 finished, 0 to run)' in p.stdout and 'running' not in p.stdout
  assert snapshot(workdir / 'points') == before


def test_dry_run_and_report_only(ran, capsys, tmp_path):
  workdir = ran[0]
  before = snapshot(workdir)
  records = runner.run_sweep(TINY, str(workdir), dry_run=True, retry_failed=True)
  out = capsys.readouterr().out
  assert [r['state'] for r in records] == ['DONE', 'DONE', 'FAILED']
  assert 'run ' + os.path.basename(records[2]['dir']) + '  FAILED' in out  # --retry_failed.
  assert '--config.dataset.path=tests/data/sweep/missing.npz' in out
  assert snapshot(workdir) == before
  runner.run_sweep(TINY, str(tmp_path / 'fresh'), dry_run=True)
  assert not (tmp_path / 'fresh').exists()
  md = workdir / 'sweeps' / 'tiny' / 'sweep.md'
  text = md.read_text()
  md.unlink()
  records = runner.run_sweep(TINY, str(workdir), report_only=True)
  assert md.read_text() == text
  on_disk = json.load(open(os.path.join(records[1]['dir'], 'results.json')))
  assert records[1]['results'] == on_disk and records[1]['metrics'] == on_disk['final']
  assert {k: v for k, v in snapshot(workdir / 'points').items()} == {
    k: v for k, v in before.items() if k.startswith(str(workdir / 'points'))
  }


def test_each_ended_run_says_how_many_are_left_and_about_how_long(ran):
  # Issue 42 item 10: beside each ended run, the runs left and the time they will take at the
  # pace of those so far; the last says none are left.
  ended = [
    line for line in ran[1].stdout.splitlines() if re.match(r'\[\d/3\] .* (done|FAILED)', line)
  ]
  assert len(ended) == 3, ran[1].stdout
  assert ended[-1].endswith('; none left'), ended
  assert re.search(r'; [12] left, about \d+ (s|min) more$', ended[0]), ended

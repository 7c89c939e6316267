"""Issue 42 item 10: progress on long work. A sweep's line for each ended run says how many are
left and about how long they will take (sweep/local.py; a real sweep in
tests/sweep_runner_test.py); an experiment says at its start how many runs it will make and how
many are already done (experiments/common.announce)."""

import os

import pytest

from cocod_jax.experiments import common
from cocod_jax.experiments import flags as experiment_flags
from cocod_jax.sweep import local
from cocod_jax.sweep import points as points_lib
from tests.sweep_helpers import results_json
from tests.sweep_helpers import write_json


def test_duration_and_left_line():
  assert [local.duration(s) for s in (5, 89, 600, 7200)] == ['5 s', '89 s', '10 min', '2.0 h']
  assert local.left_line(0, 3, 30.0) == 'none left'
  assert local.left_line(4, 0, 0.0) == '4 left'
  # 2 runs in 40 s (say side by side): 3 more at that pace.
  assert local.left_line(3, 2, 40.0) == '3 left, about 60 s more'


@pytest.fixture(name='flags')
def _flags(tmp_path):
  if 'scale' not in common.FLAGS:
    experiment_flags.define_experiment_flags()
  common.FLAGS(['test', '--scale=smoke', f'--workdir={tmp_path}'])
  yield tmp_path
  common.FLAGS.unparse_flags()


def test_paper_announces_its_runs_and_those_done(flags, capsys):
  from cocod_jax.experiments import artefacts  # pylint: disable=g-import-not-at-top

  workdir = str(flags)
  sweeps, whole = common.planned(lambda: artefacts.make('paper'))
  assert whole and not common.FLAGS.dry_run  # Restored.
  files = [os.path.basename(config.split(':')[0]) for config, _ in sweeps]
  # Figures 2 and 5 ask for the tables' sweeps again: counted once below.
  assert files == ['table1.py', 'table2.py', 'ablation.py', 'table1.py', 'table2.py',
                   'table1.py', 'table2.py', 'figure4.py']  # fmt: skip
  assert not os.listdir(workdir)  # Nothing run, nothing written.
  # One point finished already (a completed run's results.json, as the runner sees it).
  point = points_lib.expand(sweeps[0][0], workdir)[0]
  write_json(os.path.join(point.dir, 'point.json'), {'hash': point.hash, 'commit': 'x'})
  write_json(os.path.join(point.dir, 'results.json'), results_json(point.config))
  write_json(os.path.join(point.dir, 'status.json'), {'rc': 0})
  # (Read after the point is on disk: a sweep may take a finished point of another as its own.)
  unique = {p.dir for config, link in dict.fromkeys(sweeps)
            for p in points_lib.expand(config, workdir, {}, link)}  # fmt: skip
  line = common.announce('paper', lambda: artefacts.make('paper'))
  assert capsys.readouterr().out == line + '\n'
  n = len(unique)
  assert line == (
    f'paper: {n} runs in 6 sweeps planned ahead, 1 already done, {n - 1} to make; a sweep that '
    "needs these runs' results (a timing link, a later stage) prints its own count when it starts"
  ), line

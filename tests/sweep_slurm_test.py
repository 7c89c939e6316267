"""Tests of cocod_jax/sweep/slurm.py, the launcher that submits points through submitit: the
--slurm_arg options, the dry run and submitit's parameters against golden texts
(tests/data/sweep/*.golden; UPDATE_GOLDEN=1 rewrites them), and a submission to stand-ins for
sbatch, srun and sacct.
"""

import json
import os
import sys

import pytest
import submitit

from cocod_jax.config import errors
from cocod_jax.sweep import launchers
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import runner
from cocod_jax.sweep import slurm
from cocod_jax.sweep import task as task_lib
from tests.sweep_helpers import HEAD
from tests.sweep_helpers import ROOT
from tests.sweep_helpers import TINY
from tests.sweep_helpers import fake_slurm
from tests.sweep_helpers import golden
from tests.sweep_helpers import write_json

# Slow with the sweep runner's other test modules: left out of make test-fast.
pytestmark = pytest.mark.slow


def _normalized(text, points, workdir):
  text = text.replace(sys.executable, '<PYTHON>').replace(str(workdir), '<WORKDIR>')
  for i, p in enumerate(points):
    text = text.replace(p.hash, f'<HASH{i}>')
  return text.replace(ROOT, '<ROOT>')


def test_slurm_options():
  parse = slurm.parse_slurm_args
  o = parse(['--time=1-02:03:04', '--partition=gpu', '--exclusive', '--ntasks-per-node=4'])
  assert (o.minutes, o.tasks_per_node, o.sbatch) == (
    1564,  # Rounded up: a limit is never shortened.
    4,
    {'partition': 'gpu', 'exclusive': True},
  )
  minutes = {'90': 90, '5:30': 6, '2:00:00': 120, '3-0': 4320, '1-2:30': 1590}
  assert {k: slurm.parse_slurm_args([f'--time={k}']).minutes for k in minutes} == minutes
  assert parse([]).minutes == slurm.DEFAULT_TIME_MIN  # submitit always writes a --time.
  with pytest.raises(errors.UsageError) as e:
    parse(['-p gpu', '--nodes=2', '--time=UNLIMITED', '--ntasks-per-node=0'])
  assert e.value.problems == [
    '--slurm_arg=-p gpu is invalid; allowed: a long sbatch option, --NAME=VALUE or --NAME '
    '(e.g. --partition=gpu)',
    '--slurm_arg=--nodes=2 is invalid: the runner sets --nodes itself (from the sweep and its '
    'points); allowed: other sbatch options',
    '--slurm_arg=--time=UNLIMITED is invalid; allowed: a time limit as M, M:S, H:M:S, D-H, '
    'D-H:M or D-H:M:S (submitit needs a finite limit)',
    '--slurm_arg=--ntasks-per-node=0 is invalid; allowed: an integer >= 1',
  ]
  launch = launchers.Launch(TINY, '/w', [], {}, HEAD)
  with pytest.raises(errors.UsageError, match='allowed: a divisor of 6'):
    slurm.slurm_parameters(launch, parse(['--ntasks-per-node=4']), 6, True)
  assert slurm.slurm_parameters(launch, parse(['--ntasks-per-node=4']), 8, True)['nodes'] == 2


def test_slurm_dry_run_and_parameters_golden(tmp_path, capsys):
  config = f'{TINY}:case=mixed'
  args = ('--time=01:00:00', '--partition=gpu')
  runner.run_sweep(config, str(tmp_path), launcher='slurm', dry_run=True, slurm_args=args)
  printed = capsys.readouterr().out
  assert not tmp_path.joinpath('sweeps').exists() and not tmp_path.joinpath('points').exists()
  points = points_lib.expand(config, str(tmp_path))
  sbatch = printed[printed.index('\nsubmitit would submit') :]
  golden('submitit.sbatch.golden', _normalized(sbatch, points, tmp_path))
  # What we hand submitit: the SlurmExecutor parameters of each job shape, and the local
  # executor's (generic) ones.
  launch = launchers.Launch(config, str(tmp_path), points, {}, HEAD)
  options = slurm.parse_slurm_args(args)
  shapes = {'one-host': (1, False), 'mpi': (2, True)}
  params = {k: slurm.slurm_parameters(launch, options, *v) for k, v in shapes.items()}
  params['local executor'] = slurm._executor_kwargs(params['one-host'], 'local')
  golden('submitit_parameters.golden.json', json.dumps(params, indent=2, sort_keys=True) + '\n')


def test_slurm_submission_through_submitit(tmp_path, monkeypatch, capsys):
  fake_slurm(tmp_path, monkeypatch, {'4242': 'PENDING', '4243': 'CANCELLED by 0'})
  workdir, args = tmp_path / 'w', ('--partition=gpu',)
  runner.run_sweep(TINY, str(workdir), launcher='slurm', dry_run=True, slurm_args=args, parallel=2)
  printed = capsys.readouterr().out
  records = runner.run_sweep(TINY, str(workdir), launcher='slurm', slurm_args=args, parallel=2)
  out = capsys.readouterr().out
  submitted = (tmp_path / 'sbatch' / '4242.sh').read_text()  # One array of the three points.
  assert submitted == printed[printed.index('#!/bin/bash') :]  # The dry run showed it.
  assert '#SBATCH --array=0-2%2' in submitted and '--mpi=pmix' not in submitted
  for i, r in enumerate(records):
    assert r['state'] == 'RUNNING' and r['detail'] == f'Slurm job 4242_{i} (PENDING)', r
    assert f'submitted {os.path.basename(r["dir"])}: Slurm job 4242_{i} (1 task(s))' in out
    lock = json.load(open(os.path.join(r['dir'], 'lock')))
    assert (lock['job_id'], lock['cluster'], lock['pid']) == (f'4242_{i}', 'slurm', None)
  folder = str(workdir / 'sweeps' / 'tiny' / 'submitit' / '%j')
  task = submitit.SlurmJob(folder, '4242_1').submission().function  # What each task calls.
  point = points_lib.expand(TINY, str(workdir))[1]
  assert isinstance(task, task_lib.PointTask) and task.point == point
  assert (task.command, task.ranks, task.attempt) == (points_lib.command(point, 'slurm'), 1, 1)
  again = runner.run_sweep(TINY, str(workdir), launcher='slurm')  # Queued: nothing more.
  assert 'nothing to submit' in capsys.readouterr().out and again == records
  for r in records:  # Jobs Slurm dropped: their points can run again.
    write_json(os.path.join(r['dir'], 'lock'), dict(job_id='4243', cluster='slurm'))
  assert {r['state'] for r in runner.run_sweep(TINY, str(workdir), report_only=True)} == {'PENDING'}
  with pytest.raises(errors.UsageError, match='no Slurm here'):
    monkeypatch.setenv('PATH', os.path.dirname(sys.executable))  # No srun.
    runner.run_sweep(TINY, str(tmp_path / 'x'), launcher='slurm')
  assert not (tmp_path / 'x').exists()

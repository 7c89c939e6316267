"""Tests of cocod_jax/sweep/points.py: a sweep's points expanded from an experiment file
(tests/data/sweep/tiny.py), their slugs, hashes, directories and commands, the same in every
process; duplicate points and unknown or invalid overrides refused.
"""

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

from cocod_jax.config import errors
from cocod_jax.record import checkpoints
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import slurm
from tests.sweep_helpers import ENV
from tests.sweep_helpers import ROOT
from tests.sweep_helpers import TINY

# Slow with the sweep runner's other test modules: left out of make test-fast.
pytestmark = pytest.mark.slow


def test_slug():
  assert (
    points_lib.slug('algo=cocod_sgd,task=c10_r18,scale=cpu,seed=0') == 'cocod_sgd.c10_r18.cpu.s0'
  )
  assert points_lib.slug('algo=ssgd+ps,timing=true,fast=false') == 'ssgd+ps.timing.no_fast'
  assert points_lib.slug('seed=1', {'optimizer.learning_rate': 0.05}) == 's1.learning_rate-0.05'
  assert points_lib.slug('', {'optimizer.decay_epochs': (8, 9)}) == 'decay_epochs-8_9'
  assert points_lib.slug('path=/a b/c*') == 'a_b_c'
  assert points_lib.slug('') == 'default'
  assert len(points_lib.slug('name=' + 'x' * 500)) == points_lib.SLUG_MAX


def test_hash_leaves_out_non_result_fields():
  config = dict(seed=0, data_dir='', backend='mpi', comm=dict(timeout_s=600.0, staging='host'))
  config['timeline'] = dict(sample_every=10)
  h = points_lib.config_hash(config)
  assert re.fullmatch('[0-9a-f]{8}', h), h  # 8 hex digits.
  same = json.loads(json.dumps(config))
  same.update(data_dir='/data')
  same['comm']['timeout_s'] = 5.0
  same['timeline']['sample_every'] = 1
  assert points_lib.config_hash(same) == h
  assert points_lib.config_hash(dict(config, seed=1)) != h
  assert points_lib.config_hash(dict(config, staging='device')) != h
  assert (
    points_lib.config_hash(config, '1gbit') != h
  )  # The link changes the timings of MPI runs ...
  assert points_lib.config_hash(
    dict(config, backend='one_host'), '1gbit'
  ) == points_lib.config_hash(
    dict(config, backend='one_host')
  )  # ... and nothing of a one-host run.
  assert points_lib.config_hash({'xs': (1, 2)}) == points_lib.config_hash({'xs': [1, 2]})


def test_expand(tmp_path):
  points = points_lib.expand(TINY, str(tmp_path))
  again = points_lib.expand(TINY, str(tmp_path))
  assert [dataclasses.astuple(p) for p in points] == [dataclasses.astuple(p) for p in again]
  assert [p.slug for p in points] == [
    's0',
    's1.learning_rate-0.05',
    's0.name-npz.path-tests_data_sweep_missing.npz',
  ]
  assert len({p.hash for p in points}) == 3
  assert points[0].dir == os.path.join(str(tmp_path), 'points', f's0-{points[0].hash}')
  assert points[1].config['optimizer']['learning_rate'] == 0.05
  assert points[2].texts == {'dataset.name': 'npz', 'dataset.path': 'tests/data/sweep/missing.npz'}
  assert points_lib.command(points[1]) == [
    sys.executable,
    '-m',
    'cocod_jax.main',
    f'--config={TINY}:seed=1',
    f'--workdir={points[1].dir}',
    '--config.optimizer.learning_rate=0.05',
  ]
  assert not tmp_path.joinpath('points').exists()


def test_expand_sweep_wide_overrides_and_mpi_commands(tmp_path):
  one_host, mpi = points_lib.expand(
    f'{TINY}:case=mixed', str(tmp_path), {'data_dir': '/data', 'optimizer.momentum': '0.5'},
    overrides_as_text=True,
  )  # fmt: skip
  assert one_host.texts == {'data_dir': '/data', 'optimizer.momentum': '0.5'}
  assert one_host.config['optimizer']['momentum'] == 0.5
  assert mpi.texts['optimizer.decay_epochs'] == '(1,)' and mpi.overrides['data_dir'] == '/data'
  assert points_lib.command(mpi)[:4] == ['launch/mpirun.sh', '-np', '2', sys.executable]
  assert points_lib.command(mpi, 'slurm')[:3] == [sys.executable, '-m', 'cocod_jax.main']
  assert points_lib.command(one_host, 'slurm')[0] == sys.executable
  (_, timed) = points_lib.expand(f'{TINY}:case=mixed', str(tmp_path), link_rate='1gbit')
  assert points_lib.command(timed)[:4] == ['launch/simnet.sh', '--rate', '1gbit', '--']
  assert timed.hash != mpi.hash
  # 16 workers in ranks of 8 (mpi.workers_per_rank): 2 MPI processes.
  (_, ranks) = points_lib.expand(f'{TINY}:case=mixed', str(tmp_path), {'num_workers': 16,
                                 'mpi.workers_per_rank': 8, 'batch_size': 4})  # fmt: skip
  assert points_lib.command(ranks)[:3] == ['launch/mpirun.sh', '-np', '2']
  assert slurm._ranks(ranks, 'slurm') == 2 and slurm._ranks(ranks, 'local') == 1  # Tasks.


def test_duplicates_are_rejected(tmp_path):
  with pytest.raises(errors.UsageError) as e:
    points_lib.expand(f'{TINY}:case=dup', str(tmp_path))
  assert e.value.problems == [
    "point 2 (s0) duplicates point 0: config_arg='seed=0', overrides={}; add each point once"
  ]


def test_unknown_override_names_the_field(tmp_path):
  with pytest.raises(errors.UsageError) as e:
    points_lib.expand(f'{TINY}:case=unknown', str(tmp_path))
  assert (
    "override optimizer.learnin_rate=0.1: the config has no field 'optimizer.learnin_rate'; "
    "did you mean 'optimizer.learning_rate'?"
  ) in str(e.value)
  with pytest.raises(errors.UsageError, match='no such experiment file'):
    points_lib.expand('tests/data/sweep/nothing.py', str(tmp_path))
  with pytest.raises(errors.UsageError, match="case='nope' is invalid; allowed: run, dup"):
    points_lib.expand(f'{TINY}:case=nope', str(tmp_path))
  with pytest.raises(errors.UsageError) as e:
    points_lib.expand(TINY, str(tmp_path), {'optimizer.momentum': 'high'})
  assert e.value.problems == [  # Once, not once per point.
    "every point: override optimizer.momentum='high' is invalid; allowed: a value of type float"
  ]
  with pytest.raises(errors.UsageError, match='could not convert string to float'):
    points_lib.expand(TINY, str(tmp_path), {'optimizer.momentum': 'high'}, overrides_as_text=True)


def test_a_later_field_at_its_default_keeps_the_hash():
  # eval_train_examples came after runs were made: at 0 (its default) it is left out, so the
  # points made before it keep their directories; any other value is a different point.
  config = dict(seed=0, backend='one_host', algorithm=dict(name='ssgd'))
  h = points_lib.config_hash(config)
  assert points_lib.config_hash(dict(config, eval_train_examples=0)) == h
  assert points_lib.config_hash(dict(config, eval_train_examples=512)) != h
  # And a run made before it resumes under a config that has it at its default (fingerprint).
  assert checkpoints.config_differences(config, dict(config, eval_train_examples=0)) == []
  assert checkpoints.config_differences(config, dict(config, eval_train_examples=512)) == [
    'eval_train_examples: None -> 512'
  ]


def test_slug_and_hash_are_stable_across_processes(tmp_path):
  code = (
    'import json, sys; from cocod_jax.sweep import points as points_lib; '
    'print(json.dumps([(p.slug, p.hash, p.dir) for p in points_lib.expand(*sys.argv[1:])]))'
  )
  p = subprocess.run(
    [sys.executable, '-c', code, TINY, str(tmp_path)],
    cwd=ROOT,
    env=dict(ENV, PYTHONHASHSEED='12345'),
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert p.returncode == 0, p.stderr
  here = [[q.slug, q.hash, q.dir] for q in points_lib.expand(TINY, str(tmp_path))]
  assert json.loads(p.stdout) == here


def test_points_with_equal_hashes_share_a_directory(tmp_path):
  first = points_lib.expand(TINY, str(tmp_path))[0]
  os.makedirs(first.dir)
  os.rename(first.dir, first.dir.replace('/s0-', '/other-'))
  again = points_lib.expand(TINY, str(tmp_path))[0]
  assert again.dir == first.dir.replace('/s0-', '/other-')


def test_override_the_algorithm_does_not_read_refused(tmp_path):
  # As cocod_jax.main refuses it: S-SGD averages every step, so a period set by an override
  # changes nothing but the points' hashes. The file's own period (3, configs/test.py) is valid.
  with pytest.raises(errors.UsageError) as e:
    points_lib.expand(TINY, str(tmp_path), {'algorithm.name': 'ssgd', 'algorithm.period': 4})
  assert "algorithm.period=4 is invalid with algorithm.name='ssgd'" in str(e.value)
  points = points_lib.expand(TINY, str(tmp_path), {'algorithm.name': 'ssgd'})
  assert points and all(p.config['algorithm']['period'] == 3 for p in points)
  assert points_lib.expand(TINY, str(tmp_path), {'algorithm.period': 4})  # cocod_sgd: its k.

"""Tests of the sweep runner, the package cocod_jax/sweep/.

The experiment file is tests/data/sweep/tiny.py: configs/test.py's run (seconds) as the cells of
a sweep. Real runs happen in the module fixture `ran` (two training runs at once and one run the
entry point refuses at run time) and in one sweep through submitit's local executor (a run
preempted, requeued and resumed, and one that fails); the rest works on hand-made directories,
dry runs, stand-ins for sbatch, srun and sacct, and golden texts (tests/data/sweep/*.golden;
UPDATE_GOLDEN=1 rewrites them after a deliberate change).
"""

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import submitit

from cocod_jax.config import errors
from cocod_jax.record import checkpoints
from cocod_jax.record import provenance
from cocod_jax.sweep import launchers
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import report
from cocod_jax.sweep import runner
from cocod_jax.sweep import slurm
from cocod_jax.sweep import state as state_lib
from cocod_jax.sweep import task as task_lib

# It runs sweeps of real runs: left out of make test-fast.
pytestmark = pytest.mark.slow

ROOT = provenance.ROOT
DATA = os.path.join(ROOT, 'tests', 'data', 'sweep')
TINY = 'tests/data/sweep/tiny.py'
ENV = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
HEAD = '0123456789abcdef0123456789abcdef01234567'


def _cli(*args, timeout=120):
  return subprocess.run(
    [sys.executable, '-m', 'cocod_jax.sweep', *args],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def _snapshot(top):
  """Every path under `top` with its size and mtime."""
  out = {}
  for d, _, files in os.walk(top):
    out[d] = None
    for f in files:
      st = os.stat(os.path.join(d, f))
      out[os.path.join(d, f)] = (st.st_size, st.st_mtime_ns)
  return out


def _golden(name, text):
  path = os.path.join(DATA, name)
  if os.environ.get('UPDATE_GOLDEN'):
    with open(path, 'w') as f:
      f.write(text)
  with open(path) as f:
    assert text == f.read(), f'{name} differs from the golden text (UPDATE_GOLDEN=1 rewrites it)'


# --------------------------------------------------------------------------- expansion


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


def test_an_invalid_point_refuses_the_sweep_and_creates_nothing(tmp_path):
  workdir = tmp_path / 'runs'
  p = _cli(f'--config={TINY}:case=invalid', f'--workdir={workdir}')
  assert p.returncode == 2, p.stderr
  lines = p.stderr.splitlines()
  assert len(lines) == 4, p.stderr
  assert lines[0] == (
    'error: point 0 (s0.num_workers-0): num_workers=0 is invalid; allowed: an integer >= 1'
  )
  assert lines[1].startswith(
    "error: point 2 (s2.name-bogus.batch_size--1): algorithm.name='bogus' is invalid; allowed: "
  )
  assert lines[2] == (
    'error: point 2 (s2.name-bogus.batch_size--1): batch_size=-1 is invalid; allowed: an '
    'integer >= 1'
  )
  assert lines[3] == 'error: sweep refused (3 problem(s)); nothing was written'
  assert not workdir.exists()


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


def test_parallel_is_refused_for_mpi_points_and_link_rate_needs_root(tmp_path, capsys, monkeypatch):
  runner.run_sweep(f'{TINY}:case=mixed', str(tmp_path / 'w'), parallel=4, dry_run=True)
  assert '--parallel=4 ignored: this sweep has MPI points (timing)' in capsys.readouterr().out
  monkeypatch.setattr(runner.os, 'geteuid', lambda: 1000)
  with pytest.raises(errors.UsageError, match='--link_rate=1gbit needs root'):
    runner.run_sweep(f'{TINY}:case=mixed', str(tmp_path / 'w'), link_rate='1gbit')
  assert not (tmp_path / 'w').exists()


# --------------------------------------------------------------------------- states


def _write(path, obj):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    json.dump(obj, f)


@pytest.fixture(name='point')
def _point(tmp_path):
  return points_lib.expand(TINY, str(tmp_path))[0]


def _results(config, status='completed'):
  """A results.json that follows the schema, for a run of `config` that ended with `status`."""
  rec = dict(epoch=0, train_loss=1.0, test_loss=1.0, test_accuracy=0.5, train_time_s=1.0)
  out = dict(config=config, backend='one_host', status=status, batch_sizes=[4], weights=[1.0],
             steps_per_epoch=1, workers=[], epochs=[rec])  # fmt: skip
  return dict(out, final=rec) if status == 'completed' else dict(out, diverged={'step': 1})


def _dead_pid():
  p = subprocess.Popen(['true'])
  p.wait()
  return p.pid


def test_states(point, tmp_path, monkeypatch):
  d = point.dir
  host = socket.gethostname()
  assert state_lib.state(point, HEAD) == state_lib.State('PENDING')
  _write(f'{d}/point.json', dict(hash=point.hash, commit=HEAD))
  assert state_lib.state(point, HEAD) == state_lib.State('INCOMPLETE', stale=False)
  assert state_lib.state(point, 'another').stale is True
  assert state_lib.state(point, 'unknown').stale is False  # No git: nothing to compare with.
  _write(f'{d}/lock', dict(pid=os.getpid(), host=host))
  assert state_lib.state(point, HEAD).name == 'RUNNING'
  _write(f'{d}/lock', dict(pid=_dead_pid(), child_pid=_dead_pid(), host=host))
  assert state_lib.state(point, HEAD).name == 'INCOMPLETE'
  _write(f'{d}/lock', dict(pid=os.getpid(), host='elsewhere'))  # Cannot be checked from here.
  assert state_lib.state(point, HEAD).name == 'INCOMPLETE'
  zombie = subprocess.Popen(['true'])  # Ended, not waited for: not alive.
  _wait_for(lambda: open(f'/proc/{zombie.pid}/stat').read().rsplit(')', 1)[1].split()[0] == 'Z')
  _write(f'{d}/lock', dict(pid=zombie.pid, host=host))
  assert state_lib.state(point, HEAD).name == 'INCOMPLETE'
  zombie.wait()
  _write(f'{d}/lock', dict(pid=None, host=host, job_id=str(os.getpid()), cluster='local'))
  assert state_lib.state(point, HEAD).detail == f'submitit local job {os.getpid()} on {host}'
  slurm_job = dict(pid=None, host='elsewhere', job_id='77_3', cluster='slurm')
  _write(f'{d}/lock', slurm_job)
  monkeypatch.setattr(state_lib.shutil, 'which', lambda name: None)  # No sacct: trust the lock.
  assert state_lib.state(point, HEAD) == state_lib.State(
    'RUNNING', False, 'Slurm job 77_3 (UNKNOWN)'
  )
  monkeypatch.undo()
  _fake_slurm(tmp_path, monkeypatch, {'77': 'RUNNING', '78': 'CANCELLED by 0'})
  assert state_lib.state(point, HEAD).detail == 'Slurm job 77_3 (RUNNING)'  # Asked sacct.
  own = state_lib.Job('77_3', 'slurm')
  assert state_lib.state(point, HEAD, own_job=own).name == 'INCOMPLETE'  # The job's own lock.
  _write(f'{d}/lock', dict(slurm_job_id='78_1'))  # The earlier array script's record.
  assert state_lib.state(point, HEAD).name == 'INCOMPLETE'  # Slurm says the job ended.
  os.remove(f'{d}/lock')
  _write(f'{d}/status.json', dict(rc=1))
  assert state_lib.state(point, HEAD) == state_lib.State('FAILED', False, 'exit status 1')
  _write(f'{d}/status.json', dict(rc=75))
  assert state_lib.state(point, HEAD).name == 'INCOMPLETE'  # Preempted: a rerun resumes.
  _write(f'{d}/results.json', _results(point.config, 'diverged'))
  assert state_lib.state(point, HEAD).name == 'DIVERGED'
  _write(f'{d}/results.json', _results(point.config))
  assert state_lib.state(point, HEAD) == state_lib.State('DONE', False)
  broken = _results(point.config)
  del broken['epochs'][0]['test_accuracy']  # Rerun it (--retry_failed) rather than plot it.
  _write(f'{d}/results.json', broken)
  s = state_lib.state(point, HEAD)
  assert s.name == 'FAILED' and "epochs[0] has no 'test_accuracy'" in s.detail
  moved = dict(point.config, data_dir='/elsewhere')  # Left out of the hash: still DONE.
  _write(f'{d}/results.json', _results(moved))
  assert state_lib.state(point, HEAD).name == 'DONE'
  _write(f'{d}/results.json', _results(dict(point.config, seed=5)))
  s = state_lib.state(point, HEAD)
  assert s.name == 'MISMATCH' and 'differs at seed' in s.detail
  _write(f'{d}/point.json', dict(hash='00000000', commit=HEAD))
  assert state_lib.state(point, HEAD).name == 'MISMATCH'


def test_which_points_run(point):
  to_run = state_lib.to_run

  def runs(name, stale=None, retry_failed=False, rerun_stale=False):
    states = {point.dir: state_lib.State(name, stale)}
    return bool(to_run([point, point], states, retry_failed, rerun_stale))

  assert runs('PENDING') and runs('INCOMPLETE') and runs('INCOMPLETE', stale=True)
  assert not runs('FAILED') and runs('FAILED', retry_failed=True)
  assert not runs('DONE') and not runs('DIVERGED') and not runs('DONE', stale=True)
  assert runs('DONE', stale=True, rerun_stale=True) and not runs('DONE', False, rerun_stale=True)
  assert not runs('RUNNING', stale=True, rerun_stale=True)
  assert not runs('MISMATCH', retry_failed=True, rerun_stale=True)
  states = {point.dir: state_lib.State('PENDING')}
  assert len(to_run([point, point], states, False, False)) == 1  # One run per directory.


def test_points_with_equal_hashes_share_a_directory(tmp_path):
  first = points_lib.expand(TINY, str(tmp_path))[0]
  os.makedirs(first.dir)
  os.rename(first.dir, first.dir.replace('/s0-', '/other-'))
  again = points_lib.expand(TINY, str(tmp_path))[0]
  assert again.dir == first.dir.replace('/s0-', '/other-')


def test_table_renderer_golden():
  records = [
    dict(dir='/w/points/cocod_sgd.c10_r18.cpu.s0-0a1b2c3d', state='DONE', stale=False,
         wall_s=41.234, metrics=dict(test_accuracy=0.91234, train_time_s=12.25), detail=''),
    dict(dir='/w/points/ssgd.c10_r18.cpu.s0-11111111', state='DIVERGED', stale=True, wall_s=3.0,
         metrics=None, detail=''),
    dict(dir='/w/points/pipe_sgd.c10_r18.cpu.s0-22222222', state='FAILED', stale=False,
         wall_s=2.5, metrics=None, detail='exit status 2'),
    dict(dir='/w/points/local_sgd.c10_r18.cpu.s0-33333333', state='RUNNING', stale=None,
         wall_s=None, metrics=None, detail='pid 123 on host'),
    dict(dir='/w/points/local_sgd.c10_r18.cpu.s1-44444444', state='PENDING', stale=None,
         wall_s=None, metrics=None, detail=''),
  ]  # fmt: skip
  text = report.render(records, HEAD)
  _golden('table.golden.md', text)
  # The golden file was written from the renderer's output; what each row must say is written
  # out here from the records by hand, so a renderer that shows the wrong field still fails.
  rows = {line.split('|')[1].strip(): [c.strip() for c in line.split('|')[2:-1]]
          for line in text.splitlines()[2:7]}  # fmt: skip
  assert rows == {
    'cocod_sgd.c10_r18.cpu.s0-0a1b2c3d': ['DONE', 'no', '41.2', '0.9123', '12.2'],
    'ssgd.c10_r18.cpu.s0-11111111': ['DIVERGED', 'yes', '3.0', '-', '-'],
    'pipe_sgd.c10_r18.cpu.s0-22222222': ['FAILED', 'no', '2.5', '-', '-'],
    'local_sgd.c10_r18.cpu.s0-33333333': ['RUNNING', '-', '-', '-', '-'],
    'local_sgd.c10_r18.cpu.s1-44444444': ['PENDING', '-', '-', '-', '-'],
  }
  assert '5 points: 1 DONE, 1 DIVERGED, 1 RUNNING, 1 FAILED, 1 PENDING' in text
  assert 'warning: 1 point was run at another commit than HEAD (0123456789ab)' in text
  assert 'FAILED: pipe_sgd.c10_r18.cpu.s0-22222222 (exit status 2)' in text
  assert 'RUNNING: local_sgd.c10_r18.cpu.s0-33333333 (pid 123 on host)' in text


# --------------------------------------------------------------------------- Slurm


def _wait_for(predicate, timeout=240.0, what='a condition'):
  end = time.monotonic() + timeout
  while time.monotonic() < end:
    try:
      if predicate():
        return
    except OSError:
      pass
    time.sleep(0.05)
  raise AssertionError(f'timed out waiting for {what}')


def _fake_slurm(tmp_path, monkeypatch, states):
  """Stand-ins on PATH: srun (never run: submitit only looks for it), sbatch (keeps each script
  in tmp_path/sbatch/ and answers job 4242, 4243, ...) and sacct (one State per job id, from
  `states`: for the job, and for tasks 0-9 when it is an array, as sacct writes a pending one)."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir(exist_ok=True)
  (tmp_path / 'sbatch').mkdir(exist_ok=True)
  lines = ''.join(
    f"  case \"$*\" in *'-j {k}'*) printf '{k}|{v}|n1\\n{k}_[0-9]|{v}|n1\\n';; esac\n"
    for k, v in states.items()
  )
  scripts = dict(
    srun='#!/bin/sh\nexit 1\n',
    sbatch=(
      f'#!/bin/sh\nn=$(ls {tmp_path}/sbatch | wc -l)\ncp "$1" {tmp_path}/sbatch/$((4242 + n)).sh\n'
      'echo "Submitted batch job $((4242 + n))"\n'
    ),
    sacct=f"#!/bin/sh\necho 'JobID|State|NodeList'\n{lines}",
  )
  for name, text in scripts.items():
    (bin_dir / name).write_text(text)
    (bin_dir / name).chmod(0o755)
  monkeypatch.setenv('PATH', f'{bin_dir}:{os.environ["PATH"]}')


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
  _golden('submitit.sbatch.golden', _normalized(sbatch, points, tmp_path))
  # What we hand submitit: the SlurmExecutor parameters of each job shape, and the local
  # executor's (generic) ones.
  launch = launchers.Launch(config, str(tmp_path), points, {}, HEAD)
  options = slurm.parse_slurm_args(args)
  shapes = {'one-host': (1, False), 'mpi': (2, True)}
  params = {k: slurm.slurm_parameters(launch, options, *v) for k, v in shapes.items()}
  params['local executor'] = slurm._executor_kwargs(params['one-host'], 'local')
  _golden('submitit_parameters.golden.json', json.dumps(params, indent=2, sort_keys=True) + '\n')


def test_slurm_submission_through_submitit(tmp_path, monkeypatch, capsys):
  _fake_slurm(tmp_path, monkeypatch, {'4242': 'PENDING', '4243': 'CANCELLED by 0'})
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
    _write(os.path.join(r['dir'], 'lock'), dict(job_id='4243', cluster='slurm'))
  assert {r['state'] for r in runner.run_sweep(TINY, str(workdir), report_only=True)} == {'PENDING'}
  with pytest.raises(errors.UsageError, match='no Slurm here'):
    monkeypatch.setenv('PATH', os.path.dirname(sys.executable))  # No srun.
    runner.run_sweep(TINY, str(tmp_path / 'x'), launcher='slurm')
  assert not (tmp_path / 'x').exists()


def test_job_tasks_rendezvous_and_a_run_preempted_of_its_own(tmp_path):
  """Tasks of jobs run by submitit's local executor with stand-in commands (no training): an MPI
  point's second rank runs its command when rank 0 runs the point (and is stopped when it goes on
  past rank 0's end), and nothing when the point is DONE; a run that exits 75 of its own is
  requeued through submitit (its next attempt exits 0)."""
  a, b, c = points_lib.expand(TINY, str(tmp_path / 'w'))
  _write(f'{b.dir}/results.json', _results(b.config))
  marker = tmp_path / 'preempted'
  rank = 'import os, time; r = os.environ["SUBMITIT_LOCAL_GLOBALID"]; print("rank", r, flush=True)'
  echo = [sys.executable, '-c', rank + '; time.sleep(0 if r == "0" else 300)']
  once = f'import os, sys; m = {str(marker)!r}; e = os.path.exists(m); open(m, "w"); '
  once += 'sys.exit(0 if e else 75)'  # 75 the first time, then 0.
  ex = submitit.AutoExecutor(folder=str(tmp_path / 'submitit' / '%j'), cluster='local')
  ex.update_parameters(tasks_per_node=2, timeout_min=60, stderr_to_stdout=True)
  ranked = [ex.submit(task_lib.PointTask(p, echo, 2, ended_grace_s=0.5)) for p in (a, b)]
  ex.update_parameters(tasks_per_node=1)
  preempted = ex.submit(task_lib.PointTask(c, [sys.executable, '-c', once], 1))
  assert ranked[0].results() == [
    dict(point=os.path.basename(a.dir), state='INCOMPLETE', ran=True, rc=0),
    dict(rank=1, ran=True, rc=-signal.SIGTERM),  # Stopped 0.5 s after rank 0's run ended.
  ]
  assert 'rank 0' in open(f'{a.dir}/log.txt').read()
  assert open(f'{a.dir}/log.rank1.txt').read() == 'rank 1\n'
  assert ranked[1].results() == [
    dict(point=os.path.basename(b.dir), state='DONE', ran=False),
    dict(rank=1, ran=False),
  ]
  assert not os.path.exists(f'{b.dir}/log.rank1.txt') and not os.path.exists(f'{b.dir}/log.txt')
  assert preempted.result()['rc'] == 0
  assert 'Requeued job' in preempted.stdout()
  assert json.load(open(f'{c.dir}/point.json'))['attempt'] == 2
  assert not os.path.exists(f'{a.dir}/lock') and not os.path.exists(f'{c.dir}/lock')


# --------------------------------------------------------------------------- real runs


def test_rerun_stale_moves_the_old_directory_aside(tmp_path):
  config = f'{TINY}:case=missing'
  (point,) = points_lib.expand(config, str(tmp_path))
  _write(f'{point.dir}/point.json', dict(hash=point.hash, commit='0ld' * 8))
  _write(f'{point.dir}/results.json', _results(point.config))
  (record,) = runner.run_sweep(config, str(tmp_path))
  assert record['state'] == 'DONE' and record['stale'] is True  # Kept, not rerun.
  (record,) = runner.run_sweep(config, str(tmp_path), rerun_stale=True)
  assert record['state'] == 'FAILED' and record['stale'] is False  # Its dataset is missing.
  assert os.path.exists(f'{point.dir}.stale-0ld0ld0l/results.json')


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
  p = _cli(f'--config={TINY}', f'--workdir={workdir}', '--parallel=2', timeout=300)
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
  before = _snapshot(workdir / 'points')
  p = _cli(f'--config={TINY}', f'--workdir={workdir}')
  assert p.returncode == 1, p.stderr
  assert '(2 finished, 0 to run)' in p.stdout and 'running' not in p.stdout
  assert _snapshot(workdir / 'points') == before


def test_dry_run_and_report_only(ran, capsys, tmp_path):
  workdir = ran[0]
  before = _snapshot(workdir)
  records = runner.run_sweep(TINY, str(workdir), dry_run=True, retry_failed=True)
  out = capsys.readouterr().out
  assert [r['state'] for r in records] == ['DONE', 'DONE', 'FAILED']
  assert 'run ' + os.path.basename(records[2]['dir']) + '  FAILED' in out  # --retry_failed.
  assert '--config.dataset.path=tests/data/sweep/missing.npz' in out
  assert _snapshot(workdir) == before
  runner.run_sweep(TINY, str(tmp_path / 'fresh'), dry_run=True)
  assert not (tmp_path / 'fresh').exists()
  md = workdir / 'sweeps' / 'tiny' / 'sweep.md'
  text = md.read_text()
  md.unlink()
  records = runner.run_sweep(TINY, str(workdir), report_only=True)
  assert md.read_text() == text
  assert records[1]['results']['final'] == records[1]['metrics']
  assert {k: v for k, v in _snapshot(workdir / 'points').items()} == {
    k: v for k, v in before.items() if k.startswith(str(workdir / 'points'))
  }


def test_local_executor_preempts_requeues_and_resumes(tmp_path, monkeypatch):
  """One sweep through submitit's local executor: seed 0 runs tests/data/sweep/stall.py (the
  entry point, held at step 4 until a SIGTERM), its task gets SIGUSR2 there (submitit's
  preemption signal), passes SIGTERM on, and the run checkpoints and exits 75; submitit requeues
  the job and the next attempt resumes the run to DONE. The other point fails (exit status 2)."""
  command = points_lib.command

  def stalled(point, launcher='local', python=None):
    cmd = command(point, launcher, python)
    return cmd[:1] + ['tests/data/sweep/stall.py'] + cmd[3:]

  monkeypatch.setattr(points_lib, 'command', stalled)
  config, workdir = f'{TINY}:case=pair', str(tmp_path)
  records = runner.run_sweep(config, workdir, launcher='slurm', slurm_cluster='local')
  assert [r['state'] for r in records] == ['RUNNING', 'RUNNING']
  held, failing = points_lib.expand(config, workdir)
  log = os.path.join(held.dir, 'log.txt')
  _wait_for(lambda: 'stalled at step 4' in open(log).read(), what='the run to reach step 4')
  lock = json.load(open(os.path.join(held.dir, 'lock')))
  os.kill(lock['pid'], signal.SIGUSR2)  # The task's pid; the run itself ignores SIGUSR2.
  _wait_for(lambda: not {state_lib.state(p).name for p in (held, failing)} & {'RUNNING'})
  done, failed = runner.run_sweep(config, workdir, report_only=True)
  assert (done['state'], failed['state'], failed['rc']) == ('DONE', 'FAILED', 2)
  text = open(log).read()
  assert 'preempted at step 5: checkpoint written' in text
  assert 'resuming from the checkpoint at step 5' in text and text.count('=== ') == 2
  info = json.load(open(os.path.join(held.dir, 'point.json')))
  assert (info['attempt'], info['job_id'], info['cluster']) == (2, lock['job_id'], 'local')
  job = submitit.LocalJob(
    os.path.join(workdir, 'sweeps', 'tiny.pair', 'submitit', '%j'), lock['job_id']
  )
  assert job.result() == dict(point=os.path.basename(held.dir), state='DONE', ran=True, rc=0)
  assert 'Caught signal SIGUSR2' in job.stdout() and 'Requeued job' in job.stdout()

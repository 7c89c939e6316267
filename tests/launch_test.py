"""The launchers: usage errors, the simulated network refused without root, a real job on it, and
the Slurm example's own logic with stand-ins for srun and scontrol (tests/slurm_test.py runs it
on a real Slurm)."""

import os
import shutil
import subprocess
import sys

import pytest

# It starts launchers and the simulated network: left out of make test-fast.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = os.path.join(ROOT, 'launch', 'mpirun.sh')
SIMNET = os.path.join(ROOT, 'launch', 'simnet.sh')


def _run(cmd, env=None, timeout=120):
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
  'args',
  [
    [],
    ['-np'],
    ['-np', 'two', 'true'],
    ['-np', '2'],
    ['--np', '2', 'true'],
    ['--hostfile', '/nonexistent', '-np', '2', 'true'],
    ['--per-node', 'true'],
  ],
)
def test_mpirun_usage_errors(args):
  p = _run([MPIRUN, *args])
  assert p.returncode == 2 and p.stderr.strip(), p.stderr


def test_mpirun_one_rank_per_node(tmp_path):
  # What the launcher hands mpirun (a stand-in that prints its arguments): one rank per node,
  # unbound, on the listed hosts, and no --oversubscribe (the ranks are not all on this machine).
  hosts = tmp_path / 'hosts'
  hosts.write_text('node1 slots=1\nnode2 slots=1\n')
  env = dict(os.environ, MPIRUN='echo')
  p = _run([MPIRUN, '--hostfile', str(hosts), '--per-node', '-np', '64', 'python', 'x.py'], env)
  assert p.returncode == 0, p.stderr
  args = p.stdout.split()
  assert args[-4:] == ['-np', '64', 'python', 'x.py'] and '--oversubscribe' not in args
  assert ' '.join(args).count(f'--hostfile {hosts} --map-by ppr:1:node --bind-to none') == 1


@pytest.mark.parametrize('args', [[], ['--rate'], ['--speed', '1gbit', '--', 'true']])
def test_simnet_usage_errors(args):
  p = _run([SIMNET, *args])
  assert p.returncode == 2 and p.stderr.strip(), p.stderr


def test_simnet_without_root_says_so(tmp_path):
  fake = tmp_path / 'id'
  fake.write_text('#!/bin/sh\necho 1000\n')  # `id -u` of an ordinary user.
  fake.chmod(0o755)
  env = dict(os.environ, PATH=f'{tmp_path}:{os.environ["PATH"]}')
  p = _run([SIMNET, '--rate', '1gbit', '--', 'true'], env=env)
  assert p.returncode == 1 and 'needs root' in p.stderr


def _can_make_namespaces():
  # Where simnet.sh looks: the caller's PATH, then the admin directories a minimal PATH lacks.
  admin = f'{os.environ.get("PATH", "")}:/usr/sbin:/sbin'
  ip = shutil.which('ip', path=admin)
  if os.geteuid() != 0 or not shutil.which('tc', path=admin) or not ip:
    return False
  name = f'ccprobe{os.getpid()}'
  if _run([ip, 'netns', 'add', name]).returncode != 0:
    return False
  _run([ip, 'netns', 'delete', name])
  return True


@pytest.mark.skipif(
  not _can_make_namespaces(), reason='the simulated network needs root, tc and network namespaces'
)
def test_job_on_the_simulated_network(tmp_path):
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  cmd = [SIMNET, '--rate', '200mbit', '--', MPIRUN, '-np', '2', sys.executable, '-m',
         'cocod_jax.main', '--config=configs/test.py', '--config.backend=mpi',
         f'--workdir={tmp_path}']  # fmt: skip
  p = _run(cmd, env=env, timeout=180)
  assert p.returncode == 0, p.stderr[-3000:]
  assert 'loopback shaped to 200mbit' in p.stderr and 'communication hidden' in p.stdout
  assert (tmp_path / 'timeline_rank1.json').exists()


def test_slurm_example_usage_error(tmp_path):
  p = _run(['bash', os.path.join(ROOT, 'launch', 'slurm_example.sbatch')])
  assert p.returncode != 0 and 'usage: sbatch' in p.stderr


def test_slurm_example_requeues_a_preempted_job(tmp_path):
  # A stand-in srun that exits 75 (a preempted run wrote its checkpoint): the script calls
  # `scontrol requeue $SLURM_JOB_ID` (a stand-in that records its arguments) and exits 75.
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  (bin_dir / 'srun').write_text('#!/bin/sh\nexit 75\n')
  (bin_dir / 'scontrol').write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/scontrol.args\n')
  for name in ('srun', 'scontrol'):
    (bin_dir / name).chmod(0o755)
  env = dict(os.environ, PATH=f'{bin_dir}:{os.environ["PATH"]}', SLURM_NTASKS='2',
             SLURM_SUBMIT_DIR=ROOT, SLURM_JOB_ID='4242')  # fmt: skip
  script = os.path.join(ROOT, 'launch', 'slurm_example.sbatch')
  p = subprocess.run(['bash', script, 'configs/test.py', str(tmp_path / 'run')], cwd=tmp_path,
                     env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
  assert p.returncode == 75 and 'requeueing job 4242' in p.stderr, p.stderr
  assert (tmp_path / 'scontrol.args').read_text().split() == ['requeue', '4242']


SLURM_LOCAL = os.path.join(ROOT, 'launch', 'slurm_local.sh')


@pytest.mark.parametrize('args', [[], ['start'], ['up', 'down']])
def test_slurm_local_usage_errors(args):
  p = _run([SLURM_LOCAL, *args])
  assert p.returncode == 2 and p.stderr.strip().startswith('usage: '), p.stderr


@pytest.mark.parametrize('verb', ['up', 'down'])
def test_slurm_local_without_root_says_so(tmp_path, verb):
  fake = tmp_path / 'id'
  fake.write_text('#!/bin/sh\necho 1000\n')  # `id -u` of an ordinary user.
  fake.chmod(0o755)
  env = dict(os.environ, PATH=f'{tmp_path}:{os.environ["PATH"]}')
  p = _run([SLURM_LOCAL, verb], env=env)
  assert p.returncode == 1 and p.stderr.count('\n') == 1, p.stderr
  assert f'{verb} needs root' in p.stderr


def test_readme_one_node_slurm_command_is_the_tested_one():
  # The one-node overrides that docs/launching.md and the example's header give are those the
  # Slurm tests submit with (tests/slurm_test.py ONE_NODE).
  from tests import slurm_test

  flags = ' '.join(slurm_test.ONE_NODE)
  for path in ('docs/launching.md', 'launch/slurm_example.sbatch'):
    text = open(os.path.join(ROOT, path)).read()
    assert f'sbatch {flags} \\' in text, path


# A script every rank runs: `refuse` prints the same `error:` line and exits 2 (a usage error);
# `crash` exits 1 (a failure); `exit2` exits 2 without an `error:` line (not a refusal).
_RANK_SCRIPT = """
import os, sys
rank = int(os.environ.get('OMPI_COMM_WORLD_RANK', '0'))
mode = sys.argv[1]
if mode == 'crash':
  print(f'rank {rank} crashed', file=sys.stderr)
  sys.exit(1)
if mode == 'refuse':
  print(f'error: rank {rank}: x=1 is invalid; allowed: 2', file=sys.stderr)
sys.exit(2)
"""


@pytest.mark.mpi
def test_mpirun_usage_error_on_every_rank_is_one_line_without_the_box(tmp_path):
  # Issue 42 item 12: a config value every rank refuses (exit 2 on each): the one error line once,
  # and not Open MPI's box about a process that exited with non-zero status.
  from tests import mpi_helpers

  wd = tmp_path / 'run'
  p = mpi_helpers.mpirun('-np', '2', sys.executable, '-m', 'cocod_jax.main',
                         '--config=configs/test.py', '--config.backend=mpi',
                         '--config.algorithm.delay=0', f'--workdir={wd}', silent_s=120)  # fmt: skip
  assert p.returncode == 2, p.stderr[-3000:]
  assert p.stderr.splitlines() == [
    'error: algorithm.delay=0 is invalid; allowed: None (the whole round), an integer >= 1, or '
    "'auto'"
  ], p.stderr
  assert not wd.exists()


@pytest.mark.mpi
@pytest.mark.parametrize('mode', ['crash', 'exit2'])
def test_mpirun_keeps_the_box_for_a_real_failure(tmp_path, mode):
  # A rank that fails (exit 1), or exits 2 without saying why: the box stays.
  from tests import mpi_helpers

  script = tmp_path / 'rank.py'
  script.write_text(_RANK_SCRIPT)
  p = mpi_helpers.mpirun('-np', '2', sys.executable, str(script), mode, silent_s=120)
  assert p.returncode == (1 if mode == 'crash' else 2), p.stderr[-3000:]
  assert 'exited with non-zero status' in p.stderr, p.stderr
  assert f'Exit code:    {p.returncode}' in p.stderr, p.stderr


@pytest.mark.mpi
def test_mpirun_refusal_naming_its_rank_keeps_each_line_without_the_box(tmp_path):
  # `error: rank r: ...` from each rank: each rank's own line (the other may be ended before it
  # prints), no box.
  from tests import mpi_helpers

  script = tmp_path / 'rank.py'
  script.write_text(_RANK_SCRIPT)
  p = mpi_helpers.mpirun('-np', '2', sys.executable, str(script), 'refuse', silent_s=120)
  lines = p.stderr.splitlines()
  assert p.returncode == 2 and 1 <= len(lines) <= 2 and len(set(lines)) == len(lines), p.stderr
  assert all(line.startswith('error: rank ') for line in lines), p.stderr
  assert all(line.endswith(': x=1 is invalid; allowed: 2') for line in lines), p.stderr

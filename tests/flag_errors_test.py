"""Issue 42 item 12: a refused command line names each flag as it is typed (`--seeds=-1`), in the
form of every other refusal (`--parallel=0 is invalid; allowed: ...`); config fields stay
`field=value`."""

import os
import subprocess
import sys

from absl import flags
import pytest

from cocod_jax.config import flags as cocod_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ABSL = {
  'flag --seeds=-1: -1 is not a non-negative integer': (
    '--seeds=-1 is invalid; allowed: an integer >= 0'
  ),
  'flag --timing_seeds=0: 0 is not a positive integer': (
    '--timing_seeds=0 is invalid; allowed: an integer >= 1'
  ),
  'flag --scale=big: value should be one of <paper|cpu|smoke>': (
    '--scale=big is invalid; allowed: paper, cpu, smoke'
  ),
  "flag --seeds=x: invalid literal for int() with base 10: 'x'": (
    '--seeds=x is invalid; allowed: an integer'
  ),
  "flag --timeout_s=abc: could not convert string to float: 'abc'": (
    '--timeout_s=abc is invalid; allowed: a number'
  ),
  "flag --dry_run=maybe: ('Non-boolean argument to boolean flag', 'maybe')": (
    '--dry_run=maybe is invalid; allowed: true or false'
  ),
  "Unknown command line flag 'sedes'. Did you mean: seeds ?": (
    '--sedes is not a flag of table1; did you mean --seeds?'
  ),
  "Unknown command line flag 'nope'": '--nope is not a flag of table1',
  'Missing value for flag --seeds': '--seeds is given without a value; allowed: --seeds=VALUE',
}  # fmt: skip


@pytest.mark.parametrize('absl_says', sorted(ABSL))
def test_absl_refusals_name_the_flag_as_typed(absl_says):
  assert cocod_flags.flag_problem(flags.Error(absl_says), 'table1') == ABSL[absl_says]


def _run(module, *args):
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  cmd = [sys.executable, '-m', module, *args]
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


CASES = {
  'seeds': (['--seeds=-1'], '--seeds=-1 is invalid; allowed: an integer >= 0'),
  'parallel': (['--parallel=0'], '--parallel=0 is invalid; allowed: an integer >= 1'),
  'scale': (['--scale=big'], '--scale=big is invalid; allowed: paper, cpu, smoke'),
  'misspelt': (['--sedes=2'], '--sedes is not a flag of table1; did you mean --seeds?'),
}


@pytest.mark.slow
@pytest.mark.parametrize('case', sorted(CASES))
def test_experiment_flag_refusals_name_the_flag_as_typed(tmp_path, case):
  args, line = CASES[case]
  wd = tmp_path / 'w'
  p = _run('cocod_jax.experiments.table1', *args, f'--workdir={wd}')
  assert p.returncode == 2, p.stderr[-3000:]
  assert p.stderr.splitlines() == [f'error: {line}'], p.stderr
  assert not wd.exists()


@pytest.mark.slow
def test_main_names_its_own_flags_as_typed(tmp_path):
  p = _run('cocod_jax.main', '--config=configs/test.py', f'--workdri={tmp_path}')
  assert p.returncode == 2 and p.stderr.splitlines() == [
    'error: --workdri is not a flag of main; did you mean --workdir?'
  ], p.stderr
  p = _run('cocod_jax.main', '--config=configs/test.py', '--verbose=maybe', f'--workdir={tmp_path}')
  assert p.returncode == 2
  assert p.stderr.splitlines() == ['error: --verbose=maybe is invalid; allowed: true or false']

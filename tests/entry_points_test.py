"""One interface for every entry point: a misspelt flag, a bad value or a stray argument is one
`error:` line and exit status 2 (errors.EXIT_USAGE) wherever it is typed, and --helpshort lists
the entry point's own flags."""

import subprocess
import sys

import pytest

from cocod_jax.config import errors
from cocod_jax.record import provenance

# It starts every entry point: left out of make test-fast.
pytestmark = pytest.mark.slow

# Every command a user types, as `python -m <module>`, with one of its own flags.
ENTRY_POINTS = {
  'cocod_jax.main': '--workdir',
  'cocod_jax.sweep': '--timeout_s',
  'cocod_jax.prepare_data': '--dataset',
  'cocod_jax.experiments.table1': '--seeds',
  'cocod_jax.experiments.fig3': '--timing_links',
  'cocod_jax.experiments.paper': '--report_only',
  'cocod_jax.experiments.ablation': '--task',
  'cocod_jax.experiments.overlap': '--parallel',
  'cocod_jax.experiments.long_schedule': '--launcher',
  'cocod_jax.experiments.corrections': '--timing_seeds',
  'cocod_jax.experiments.mnist1d_check': '--out',
  'launch.bench': '--sections',
}


def _run(*args):
  return subprocess.run([sys.executable, '-m', *args], cwd=provenance.ROOT, capture_output=True,
                        text=True, timeout=120, check=False)  # fmt: skip


@pytest.mark.parametrize('module', sorted(ENTRY_POINTS))
def test_a_misspelt_flag_is_one_line_and_exit_2(module):
  p = _run(module, '--sedds=3')
  assert p.returncode == errors.EXIT_USAGE, p.stderr[-2000:]
  assert p.stderr.count('\n') == 1 and p.stderr.startswith('error: '), p.stderr[-2000:]
  assert "'sedds'" in p.stderr


@pytest.mark.parametrize('module', ['cocod_jax.sweep', 'cocod_jax.experiments.table1'])
def test_a_bad_value_and_a_stray_argument_are_refused_alike(module):
  for args in (('--parallel=two',), ('stray',)):
    p = _run(module, *args)
    assert p.returncode == errors.EXIT_USAGE, p.stderr[-2000:]
    assert p.stderr.count('\n') == 1 and p.stderr.startswith('error: '), p.stderr[-2000:]


@pytest.mark.parametrize(
  'module', ['cocod_jax.main', 'cocod_jax.sweep', 'cocod_jax.experiments.fig3']
)
def test_helpshort_lists_the_entry_points_own_flags(module):
  p = _run(module, '--helpshort')
  assert p.returncode == 0, p.stderr[-2000:]
  assert f'  {ENTRY_POINTS[module]}' in p.stdout, p.stdout[-2000:]

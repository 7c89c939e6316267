"""One interface for every entry point: a misspelt flag, a bad value or a stray argument is one
`error:` line and exit status 2 (errors.EXIT_USAGE) wherever it is typed, and --helpshort lists
the entry point's own flags."""

import functools
import subprocess
import sys

import pytest

from cocod_jax.config import errors
from cocod_jax.config import flags as cocod_flags
from cocod_jax.experiments import flags as experiment_flags
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
  'cocod_jax.experiments.streamed': '--timing_links',
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
  assert '--sedds' in p.stderr


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


# A flag of the experiments given to one that does not read it (experiments/flags.py
# EXPERIMENT_READS), with the line said for the first.
NOT_READ = [
  ('table1', '--task=c10_r18', 'error: --task does not apply to table1 (it sets the Table 1 '
   'column, for ablation, corrections and paper only)'),
  ('table1', '--timing_links=1gbit', None),
  ('fig2', '--link_rate=1gbit', None),
  ('fig3', '--parallel=2', None),
  ('fig4', '--seeds=2', None),
  ('ablation', '--timing_tasks=c10_r18', None),
  ('paper', '--timing_seeds=2', None),
  ('long_schedule', '--scale=smoke', None),
  ('corrections', '--link_rate=1gbit', None),
  ('overlap', '--task=c10_r18', None),
  ('streamed', '--seeds=2', None),
]  # fmt: skip


@pytest.mark.parametrize('name,arg,line', NOT_READ)
def test_a_flag_the_experiment_does_not_read_is_one_line_and_exit_2(name, arg, line, tmp_path):
  workdir = tmp_path / 'out'
  p = _run(f'cocod_jax.experiments.{name}', arg, f'--workdir={workdir}')
  assert p.returncode == errors.EXIT_USAGE, p.stderr[-2000:]
  flag = arg.split('=')[0]
  assert p.stderr.startswith(f'error: {flag} does not apply to {name} (it sets '), p.stderr
  assert p.stderr.count('\n') == 1 and p.stdout == '', p.stderr[-2000:]
  if line:
    assert p.stderr == line + '\n'
  assert not workdir.exists()


VALUES = {'parallel': '2', 'link_rate': '1gbit', 'scale': 'smoke', 'seeds': '1', 'task': 'c10_r18',
          'timing_links': '1gbit', 'timing_tasks': 'c10_r18', 'timing_seeds': '1'}  # fmt: skip


@pytest.mark.parametrize('name', sorted(experiment_flags.EXPERIMENT_READS))
def test_every_flag_the_experiment_reads_is_taken(name, tmp_path):
  # A dry run with every flag the entry point reads (and those every experiment reads): no
  # refusal, nothing written.
  reads = experiment_flags.EXPERIMENT_READS[name]
  args = [f'--{flag}={VALUES[flag]}' for flag in reads]
  workdir = tmp_path / 'out'
  p = _run(f'cocod_jax.experiments.{name}', *args, '--dry_run', '--launcher=local',
           '--data_dir=/nowhere', '--retry_failed', f'--workdir={workdir}')  # fmt: skip
  assert p.returncode == 0, p.stderr[-2000:]
  assert 'does not apply' not in p.stderr and 'dry run' in p.stdout, p.stdout[-2000:]
  assert not workdir.exists()


def test_paper_reads_what_its_artefacts_read():
  from cocod_jax.experiments import artefacts  # pylint: disable=g-import-not-at-top

  assert set(experiment_flags.PAPER) == set(artefacts.ARTEFACTS) - {'paper'}
  union = {f for name in experiment_flags.PAPER for f in experiment_flags.EXPERIMENT_READS[name]}
  assert set(experiment_flags.EXPERIMENT_READS['paper']) == union
  assert 'task' in union and 'timing_links' in union and 'timing_seeds' not in union


def test_the_table_of_what_each_experiment_reads_is_what_its_code_reads(tmp_path, monkeypatch):
  # Each experiment run in-process with every sweep a no-op (no points): the flags of CHOOSES its
  # code reads, once with the timing lists empty and once not (a `timing_links or [link_rate]`
  # reads one or the other), are EXPERIMENT_READS's. An artefact with no points may stop early:
  # what it read until then must already be all. What the provenance records (--scale) it does
  # not choose. `paper` is the union of its parts (above). Figures 3 and 6 find Table 1 and 2
  # without cells.
  from absl import flags  # pylint: disable=g-import-not-at-top

  from cocod_jax.experiments import artefacts  # pylint: disable=g-import-not-at-top
  from cocod_jax.experiments import common  # pylint: disable=g-import-not-at-top
  from cocod_jax.experiments import corrections  # pylint: disable=g-import-not-at-top
  from cocod_jax.experiments import long_schedule  # pylint: disable=g-import-not-at-top
  from cocod_jax.experiments import overlap  # pylint: disable=g-import-not-at-top
  from cocod_jax.experiments import streamed  # pylint: disable=g-import-not-at-top

  if 'scale' not in cocod_flags.FLAGS:
    experiment_flags.define_experiment_flags()
  seen = set()
  read = flags.FlagValues.__getattr__

  def recorded(self, flag):
    seen.add(flag)
    return read(self, flag)

  monkeypatch.setattr(flags.FlagValues, '__getattr__', recorded)
  monkeypatch.setattr(common.sweep, 'run_sweep', lambda config, **options: [])
  monkeypatch.setattr(common, 'provenance', lambda points, backend: {})
  monkeypatch.setattr(common, 'save_figure', lambda fig, name: None)

  def with_registered(name, make):
    with artefacts.registered(name):
      return make()

  makers = {name: functools.partial(artefacts.make, name) for name in experiment_flags.PAPER}
  makers['long_schedule'] = long_schedule.make
  makers['corrections'] = corrections.make
  makers['overlap'] = functools.partial(with_registered, 'overlap', overlap.make)
  makers['streamed'] = functools.partial(with_registered, 'streamed', streamed.make)
  assert set(makers) == set(experiment_flags.EXPERIMENT_READS) - {'paper'}
  for name, make in makers.items():
    seen.clear()
    (tmp_path / name).mkdir()
    for n in (1, 2):  # What Figures 3 and 6 read their targets from: none.
      (tmp_path / name / f'table{n}.json').write_text('{"cells": []}')
    for extra in ([], ['--timing_links=1gbit', '--timing_tasks=c10_r18']):
      cocod_flags.FLAGS(['test', '--scale=smoke', f'--workdir={tmp_path / name}', *extra])
      try:
        make()
      except (Exception, SystemExit):  # pylint: disable=broad-except
        pass
      finally:
        cocod_flags.FLAGS.unparse_flags()
    reads = set(experiment_flags.EXPERIMENT_READS[name])
    assert seen & set(experiment_flags.CHOOSES) == reads, name


@pytest.mark.parametrize(
  'name,listed,left_out',
  [('fig3', '--timing_links', '--task'), ('table1', '--seeds', '--timing_links'),
   ('ablation', '--task', '--link_rate'), ('streamed', '--timing_links', '--seeds')],
)  # fmt: skip
def test_helpshort_lists_only_the_flags_that_apply(name, listed, left_out):
  p = _run(f'cocod_jax.experiments.{name}', '--helpshort')
  assert p.returncode == 0, p.stderr[-2000:]
  assert f'  {listed}' in p.stdout and f'  {left_out}' not in p.stdout, p.stdout[-2000:]

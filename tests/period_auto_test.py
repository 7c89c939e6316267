"""`algorithm.period='auto'`: the rule for k, the config it is allowed in, the plan that does not
depend on it, and an MPI run that measures k, records it and keeps it when resumed; and
`algorithm.delay='auto'` (tau by the same rule, at most k) on an MPI run."""

import json
import math
import os
import subprocess
import sys

from absl import flags
from ml_collections import config_flags
import numpy as np
import pytest

from cocod_jax import plan as plan_lib
from cocod_jax import validation as config_validation
from cocod_jax.cluster import period_auto
from cocod_jax.config import loader as config_loader
from cocod_jax.data import pipeline as input_pipeline
from cocod_jax.record import schema as results_schema
from configs import test as test_config
from tests import helpers
from tests import mpi_test

# It measures and trains: left out of make test-fast.
pytestmark = [pytest.mark.slow, pytest.mark.mpi]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
  'tp, tc, cap, k',
  [
    (1.0, 0.0, 32, 1),  # No communication: every step may average.
    (1.0, 0.5, 32, 1),  # Tc < Tp: one step hides it.
    (1.0, 1.0, 32, 1),  # k Tp >= Tc holds at equality.
    (1.0, 1.0001, 32, 2),
    (2e-3, 9e-3, 32, 5),  # r = 4.5.
    (1e-3, 5e-3, 32, 5),  # r = 5.
    (1.0, 100.0, 32, 32),  # Capped.
    (1.0, 20.0, 8, 8),
    (1.0, 20.0, 32, 20),
  ],
)
def test_smallest_k_that_hides_the_allreduce(tp, tc, cap, k):
  assert period_auto.choose_period(tp, tc, cap) == k


def test_a_step_time_of_zero_is_refused():
  with pytest.raises(ValueError, match='Tp=0'):
    period_auto.choose_period(0.0, 1.0)


def _errors(**fields):
  c = test_config.get_config()
  c.algorithm.period = fields.pop('period', period_auto.AUTO)
  c.algorithm.name = fields.pop('algorithm', 'cocod_sgd')
  c.backend = fields.pop('backend', 'mpi')
  assert not fields
  return config_validation.errors(c)


@pytest.mark.parametrize('algorithm', period_auto.SUPPORTED)
def test_auto_allowed_under_mpi(algorithm):
  assert _errors(algorithm=algorithm) == []


@pytest.mark.parametrize(
  'fields, words',
  [
    (dict(backend='one_host'), ["algorithm.period='auto'", "backend='one_host'", "'mpi'"]),
    (dict(algorithm='ssgd'), ["algorithm.period='auto'", "'ssgd'", "['cocod_sgd', 'local_sgd']"]),
    (dict(algorithm='pipe_sgd'), ["algorithm.period='auto'", "'pipe_sgd'"]),
    (dict(algorithm='asynlocal_sgd'), ["algorithm.period='auto'", "'asynlocal_sgd'"]),
    (dict(period='fast'), ["algorithm.period='fast'", "'auto'"]),
    (dict(period=1.5), ['algorithm.period=1.5', 'integer >= 1']),
    (dict(period=0), ['algorithm.period=0', 'integer >= 1']),
    (dict(period=True), ['algorithm.period=True']),
  ],
)
def test_auto_refused_where_it_cannot_work(fields, words):
  problems = _errors(**fields)
  assert len(problems) == 1, problems
  for word in words:
    assert word in problems[0], (word, problems[0])


@pytest.mark.parametrize('text, value', [('auto', 'auto'), ('8', 8)])
def test_override_parses_auto_and_integers(text, value):
  # The entry point's --config (locked, as flags.define_main_flags defines it) and the sweep's
  # set_field read the same text to the same value; an integer stays an int.
  argv = ['prog', f'--config={ROOT}/configs/test.py', f'--config.algorithm.period={text}']
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file(
    'config', None, '', flag_values=fv, lock_config=True, sys_argv=argv
  )
  fv(argv)
  assert fv.config.algorithm.period == value and type(fv.config.algorithm.period) is type(value)
  c = test_config.get_config()
  c.lock()
  assert config_loader.set_field(c, 'algorithm.period', text, from_text=True) == text
  assert c.algorithm.period == value and type(c.algorithm.period) is type(value)


def test_entry_point_refuses_auto_on_one_host(tmp_path):
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  cmd = [sys.executable, '-m', 'cocod_jax.main', '--config=configs/test.py',
         f'--workdir={tmp_path / "run"}', '--config.algorithm.period=auto']  # fmt: skip
  p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
  assert p.returncode == 2, p.stderr[-2000:]
  errors = [line for line in p.stderr.splitlines() if line.startswith('error: ')]
  assert len(errors) == 1 and "algorithm.period='auto'" in errors[0], p.stderr[-2000:]
  assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize('algorithm', period_auto.SUPPORTED + ('asynlocal_sgd',))
def test_plan_does_not_depend_on_k(tmp_path, algorithm):
  # Unequal speeds and proportional sampling (unequal M_i): the shards and the steps of an epoch
  # are fixed before k is measured, so they must be the same for every k. AsynLocal-SGD's are
  # not (its k_i = floor(k C_i / C_min) weigh the shards), which is why auto refuses it.
  path, _, _ = helpers.tiny_npz(tmp_path, n_train=97)
  c = helpers.small_config(path, algorithm, workers=3, batch=4, epochs=1, period=1)
  with c.unlocked():
    c.worker_speeds, c.proportional_sampling = (1.0, 1.7, 2.3), algorithm != 'asynlocal_sgd'
  dataset = input_pipeline.load(c.dataset, c.data_dir)
  plans = [plan_lib.make_plan(period_auto.with_period(c, k), dataset) for k in (1, 3, 7)]
  same = all(
    p.steps_per_epoch == plans[0].steps_per_epoch
    and all(np.array_equal(a, b) for a, b in zip(p.shards, plans[0].shards))
    for p in plans
  )
  assert same == (algorithm in period_auto.SUPPORTED)


AUTO_RUN = ['--config=configs/test.py', '--config.backend=mpi', '--config.algorithm.period=auto',
            '--config.checkpoint.every_epochs=1']  # fmt: skip


def test_mpi_run_measures_k_records_it_and_keeps_it_when_resumed(tmp_path):
  wd = tmp_path / 'run'
  first = mpi_test._mpirun(2, AUTO_RUN + [f'--workdir={wd}', '--config.num_epochs=1'])
  assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
  res = results_schema.load_results(str(wd / 'results.json'))
  auto = res['period_auto']
  k = auto['k']
  assert auto['source'] == 'measured' and auto['samples'] == period_auto.SAMPLES
  assert len(auto['ranks']) == 2
  assert auto['Tp_s'] == max(r[0] for r in auto['ranks']) > 0
  # Per allreduce the shortest span over the ranks, so at most each rank's own median.
  assert 0 < auto['Tc_s'] <= min(r[1] for r in auto['ranks'])
  assert k == period_auto.choose_period(auto['Tp_s'], auto['Tc_s'], auto['cap'])
  assert f'-> k = {k}' in first.stdout
  assert res['config']['algorithm']['period'] == 'auto'  # As given: the sweep hashes it.
  # The algorithm ran with k: one snapshot average per round of k of the epoch's steps.
  spe = res['steps_per_epoch']
  assert all(w['local_steps'] == k for w in res['workers'])
  assert all(r['collectives'] == math.ceil(spe / k) for r in res['timing']['ranks'])
  stored = json.loads((wd / period_auto.FILE).read_text())
  assert stored == auto

  # Continued for a second epoch from the checkpoint: the same k from the same measurement
  # (a new one would not give the same medians to the last bit), nothing measured again.
  again = mpi_test._mpirun(2, AUTO_RUN + [f'--workdir={wd}', '--config.num_epochs=2'])
  assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
  assert f'resuming from the checkpoint at step {spe}' in again.stdout
  assert 'as measured before' in again.stdout
  res2 = results_schema.load_results(str(wd / 'results.json'))
  assert res2['period_auto'] == dict(auto, source='stored')
  # Epoch 2's rounds: those that start at a multiple of k in [spe, 2 spe).
  rounds = math.ceil(2 * spe / k) - math.ceil(spe / k)
  assert all(r['collectives'] == rounds for r in res2['timing']['ranks'])

  # A record that no longer holds the checkpoint's k is refused, not trained on.
  (wd / period_auto.FILE).write_text(json.dumps(dict(stored, k=k + 1)))
  changed = mpi_test._mpirun(2, AUTO_RUN + [f'--workdir={wd}', '--config.num_epochs=3'])
  assert changed.returncode != 0
  assert f'was made with period k={k}' in changed.stderr, changed.stderr[-3000:]


def test_mpi_run_measures_the_delay(tmp_path):
  # k fixed at 4, tau measured: the smallest tau with tau Tp >= Tc, at most k; the run's line
  # says so, results.json and period_auto.json keep it, and a continued run takes it from there.
  wd = tmp_path / 'run'
  args = ['--config=configs/test.py', '--config.backend=mpi', '--config.algorithm.period=4',
          '--config.algorithm.delay=auto', '--config.checkpoint.every_epochs=1',
          f'--workdir={wd}']  # fmt: skip
  first = mpi_test._mpirun(2, args + ['--config.num_epochs=1'])
  assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
  auto = results_schema.load_results(str(wd / 'results.json'))['period_auto']
  assert auto['k'] == 4 and auto['period'] == 'fixed'
  assert auto['delay'] == period_auto.choose_period(auto['Tp_s'], auto['Tc_s'], 4)
  assert 'algorithm.delay=auto: Tp' in first.stdout
  assert f'-> tau = {auto["delay"]} (tau Tp >= Tc, at most k)' in first.stdout
  assert auto['measure_s'] > 0  # Counted in a time to target (experiments/timing.py).
  again = mpi_test._mpirun(2, args + ['--config.num_epochs=2'])
  assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
  res = results_schema.load_results(str(wd / 'results.json'))
  assert res['period_auto'] == dict(auto, source='stored')


def test_mpi_streamed_delay_from_one_fragment(tmp_path):
  # Streamed CoCoD-SGD, P = 3 of k = 4: tau from the measured allreduce of one fragment (the
  # largest: digits' linear model has 650 elements, in fragments of 217, 217 and 216), at most
  # k; the run uses and records that tau.
  wd = tmp_path / 'run'
  args = ['--config=configs/test.py', '--config.backend=mpi', '--config.algorithm.period=4',
          '--config.algorithm.fragments=3', '--config.algorithm.delay=auto',
          '--config.num_epochs=1', f'--workdir={wd}']  # fmt: skip
  p = mpi_test._mpirun(2, args)
  assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
  res = results_schema.load_results(str(wd / 'results.json'))
  auto = res['period_auto']
  assert auto['fragments'] == 3 and auto['Tc_fragment_s'] > 0
  assert auto['delay'] == period_auto.choose_period(auto['Tp_s'], auto['Tc_fragment_s'], 4)
  assert res['snapshot_allreduce']['delay'] == auto['delay']
  assert f'-> tau = {auto["delay"]} (tau Tp >= Tc of a fragment, at most k)' in p.stdout


def test_describe_names_what_was_chosen():
  base = dict(Tp_s=1e-3, Tc_s=2.5e-3, r=2.5, k=3, cap=32, samples=5, ranks=[], source='measured')
  assert period_auto.describe(base, 'wd').startswith('algorithm.period=auto: Tp 1.00 ms')
  assert period_auto.describe(base, 'wd').endswith('-> k = 3 (k Tp >= Tc, at most 32)')
  both = period_auto.describe(dict(base, delay=3), 'wd')
  assert both.startswith('algorithm.period=auto and algorithm.delay=auto: Tp')
  assert both.endswith('-> k = 3 (k Tp >= Tc, at most 32), tau = 3 (tau Tp >= Tc, at most k)')
  delay = period_auto.describe(dict(base, k=5, period='fixed', delay=3), 'wd')
  assert delay.startswith('algorithm.delay=auto: Tp')
  assert delay.endswith('-> tau = 3 (tau Tp >= Tc, at most k)')

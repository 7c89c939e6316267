"""Every correction of CoCoD-SGD (and the delay and the fragments) on a constant learning rate
(`lr_scaling='none'`, no warm-up, no decay): the schedule is then one number, not a rate a step,
and the anchor's table of rates once failed on it with an IndexError on both runtimes."""

import sys

import numpy as np
import pytest

from cocod_jax import train
from cocod_jax import validation
from tests import helpers
from tests import mpi_helpers

pytestmark = pytest.mark.slow  # It trains: left out of make test-fast.

# Each option's config fields (docs/algorithms.md).
OPTIONS = {
  'cocod': {},
  'reset': {'correction': 'reset'},
  'blend': {'correction': 'blend', 'alpha': 0.5},
  'outer_sgd': {'correction': 'outer_sgd'},
  'eager': {'correction': 'eager', 'eager_lambda': 0.5},
  'anchor': {'correction': 'anchor'},
  'delay': {'delay': 1},
  'fragments': {'fragments': 2},
}


def _constant(c):
  c.optimizer.lr_scaling = 'none'
  c.optimizer.warmup_epochs = 0
  c.optimizer.decay_epochs = ()
  return c


@pytest.mark.parametrize('option', sorted(OPTIONS))
def test_every_correction_runs_on_a_constant_rate(tmp_path, tiny, option):
  c = _constant(helpers.small_config(tiny.path, 'cocod_sgd', 3, 5, 2, 3))
  c.algorithm.update(OPTIONS[option])
  validation.validate(c)
  res = train.train_and_evaluate(c, str(tmp_path))
  assert np.isfinite(res['final']['test_loss'])


@pytest.mark.mpi
def test_anchor_on_a_constant_rate_under_mpi(tmp_path):
  args = ['--config=configs/test.py', f'--workdir={tmp_path}', '--config.backend=mpi',
          '--config.algorithm.correction=anchor', '--config.optimizer.lr_scaling=none',
          '--config.optimizer.warmup_epochs=0', '--config.optimizer.decay_epochs=()']  # fmt: skip
  p = mpi_helpers.mpirun('-np', '2', sys.executable, '-m', 'cocod_jax.main', *args, silent_s=120)
  assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
  assert (tmp_path / 'final_params.npz').exists()

"""The one-host cluster: any number of workers on any divisor of them in devices, same numbers.

conftest.py gives this process 8 XLA CPU devices.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cocod_jax import train
from cocod_jax.cluster import background
from cocod_jax.cluster import one_host
from cocod_jax.cluster import stacked
from tests import helpers

# It trains on 8 devices: left out of make test-fast.
pytestmark = pytest.mark.slow

ALGOS = helpers.ALGOS


def _params(workdir):
  with np.load(os.path.join(workdir, 'final_params.npz')) as f:
    return {k: f[k] for k in f.files}


@pytest.mark.parametrize('algorithm', ALGOS)
def test_one_device_equals_many(tmp_path, algorithm):
  # 4 workers on 1 device (all vmapped together), on 2 (two per device) and on 4 (one each):
  # the same final model bit for bit, since the average sums in the same order everywhere.
  path, _, _ = helpers.tiny_npz(tmp_path, n_train=40)
  c = helpers.small_config(path, algorithm, workers=4, batch=5, epochs=4, period=3)
  c.dataset.shuffle = True
  c.model.name = 'cnn' if algorithm == 'cocod_sgd' else 'linear'
  runs = {}
  for devices in (1, 2, 4):
    c.one_host.devices = devices
    if c.model.name == 'cnn':
      c.dataset.name = 'digits'
      c.batch_size = 16
      c.num_epochs = 1
    train.train_and_evaluate(c, str(tmp_path / f'd{devices}'))
    runs[devices] = _params(tmp_path / f'd{devices}')
  for devices in (2, 4):
    for k in runs[1]:
      np.testing.assert_array_equal(runs[devices][k], runs[1][k], err_msg=f'{devices}: {k}')


def test_sixteen_workers_on_one_device(tmp_path):
  # The paper's cluster size on one device: 16 workers vmapped together.
  c = helpers.test_config.get_config()
  c.num_workers = 16
  c.batch_size = 8
  c.one_host.devices = 1
  res = train.train_and_evaluate(c, str(tmp_path))
  assert res['batch_sizes'] == [8] * 16 and res['status'] == 'completed'
  assert res['final']['test_accuracy'] > 0.5


def test_choose_devices():
  devices = jax.devices('cpu')[:8]
  assert len(stacked.choose_devices(16, 0, devices)) == 8
  assert len(stacked.choose_devices(6, 0, devices)) == 6
  assert len(stacked.choose_devices(9, 0, devices)) == 3  # The largest divisor of 9 up to 8.
  assert len(stacked.choose_devices(7, 0, devices[:2])) == 1
  assert len(stacked.choose_devices(4, 2, devices)) == 2
  with pytest.raises(ValueError, match='one_host.devices=3'):
    stacked.choose_devices(4, 3, devices)
  with pytest.raises(ValueError, match='at most 8'):
    stacked.choose_devices(16, 16, devices)


class _Config:
  """The fields OneHostCluster reads."""

  def __init__(self, n, devices):
    self.num_workers = n
    self.one_host = type('OneHost', (), {'devices': devices})()
    self.algorithm = type('Algorithm', (), {'correction': 'cocod'})()
    self.comm = type('Comm', (), {'dtype': 'float32', 'error_feedback': False})()
    self.mpi = type('Mpi', (), {'workers_per_rank': 0})()


def _cluster(n, devices, weights):
  fns = train.steps_lib.StepFns(*(lambda *a: a for _ in train.steps_lib.StepFns._fields))
  return one_host.OneHostCluster(fns, _Config(n, devices), weights)


def test_weighted_average_by_hand():
  # Workers hold 1, 2, 3, 4; weights 0.1, 0.2, 0.3, 0.4: 0.1 + 0.4 + 0.9 + 1.6 = 3.0, everywhere.
  cluster = _cluster(4, 2, [0.1, 0.2, 0.3, 0.4])
  tree = cluster.put([{'a': np.full((3,), v, np.float32)} for v in (1.0, 2.0, 3.0, 4.0)])
  out = cluster.weighted_mean(tree, 'test')
  np.testing.assert_allclose(np.asarray(out['a']), np.full((4, 3), 3.0), rtol=1e-6)
  assert out['a'].sharding.spec == tree['a'].sharding.spec  # Still one row per worker's device.


def test_non_finite_contribution_names_its_worker():
  cluster = _cluster(4, 4, [0.25] * 4)
  values = [np.ones((2, 2), np.float32) for _ in range(4)]
  values[2][1, 0] = np.inf
  handle = cluster.start({'w': cluster.put(values)}, 'the test tree', step=7)
  with pytest.raises(background.NonFinite) as e:
    cluster.wait(handle)
  assert e.value.workers == [2] and e.value.step == 7 and 'the test tree' in str(e.value)


def test_put_pads_unequal_shards():
  cluster = _cluster(2, 2, [0.5, 0.5])
  out = cluster.put({0: np.ones((3, 2)), 1: np.ones((5, 2))})
  assert out.shape == (2, 5, 2)
  np.testing.assert_array_equal(np.asarray(out[0, 3:]), np.zeros((2, 2)))
  assert float(jnp.sum(out)) == 16.0

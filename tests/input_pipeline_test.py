"""Datasets: the embedded digits, npz used as given, shards, and CIFAR through mocked TFDS."""

import numpy as np
import pytest

from cocod_jax import input_pipeline
from cocod_jax import train
from configs import test as test_config


def test_digits_fixed_split():
  a = input_pipeline.load_dataset('digits')
  b = input_pipeline.load_dataset('digits')
  assert a.x_train.shape == (1500, 8, 8, 1) and a.x_test.shape == (297, 8, 8, 1)
  np.testing.assert_array_equal(a.y_test, b.y_test)
  assert a.num_classes == 10 and 0.0 <= a.x_train.min() and a.x_train.max() <= 1.0


def test_npz_features_used_as_given(tmp_path):
  x = np.array([[1e3, -7.5]], np.float32).repeat(6, 0)
  path = tmp_path / 'f.npz'
  np.savez(path, x_train=x, y_train=np.arange(6) % 2, x_test=x[:2], y_test=np.array([0, 1]))
  ds = input_pipeline.load_dataset('npz', str(path))
  np.testing.assert_array_equal(ds.x_train, x)
  assert ds.normalize == 'none' and not ds.augment_ok and ds.num_classes == 2


def test_shards_contiguous_in_file_order_and_proportional():
  shards = input_pipeline.shard_indices(10, [1, 1, 3], shuffle=False, seed=0)
  assert [list(s) for s in shards] == [[0, 1], [2, 3], [4, 5, 6, 7, 8, 9]]
  shuffled = input_pipeline.shard_indices(10, [1, 1], shuffle=True, seed=0)
  assert sorted(np.concatenate(shuffled)) == list(range(10))
  assert not set(shuffled[0]) & set(shuffled[1])


def test_augment_shapes_and_flip():
  import jax

  img = np.arange(2 * 32 * 32 * 3, dtype=np.float32).reshape(2, 32, 32, 3)
  out = train.augment(jax.random.PRNGKey(0), img)
  assert out.shape == img.shape
  assert not np.array_equal(np.asarray(out), img)


@pytest.mark.parametrize('name,classes', [('cifar10', 10), ('cifar100', 100)])
def test_mocked_cifar_one_epoch(tmp_path, name, classes):
  tfds = pytest.importorskip('tensorflow_datasets')
  with tfds.testing.mock_data(num_examples=64):
    ds = input_pipeline.load_dataset(name)
  assert ds.x_train.shape[1:] == (32, 32, 3) and ds.x_train.dtype == np.uint8
  assert ds.num_classes == classes and ds.augment_ok
  c = test_config.get_config()
  c.dataset.name = name
  c.dataset.augment = True
  c.model.name = 'cnn'
  c.batch_size = 16
  res = train.train_and_evaluate(c, str(tmp_path), ds)
  assert np.isfinite(res['final']['test_loss'])
  assert 0.0 <= res['final']['test_accuracy'] <= 1.0

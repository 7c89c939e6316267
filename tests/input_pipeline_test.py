"""Datasets: the embedded digits, npz used as given (and every bad file refused in one line),
shards, and CIFAR through mocked TFDS."""

import os
import re

import numpy as np
import pytest

from cocod_jax import models
from cocod_jax import steps
from cocod_jax import train
from cocod_jax.data import cifar
from cocod_jax.data import mnist1d as mnist1d_data
from cocod_jax.data import pipeline as input_pipeline
from configs import test as test_config

# It generates MNIST-1D and mock TFDS sets: left out of make test-fast.
pytestmark = pytest.mark.slow


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


def test_augment_is_a_padded_crop_and_a_horizontal_flip():
  # Every output image must be the 32x32 window at some offset (dy, dx) in [0, 8]^2 of the
  # image zero-padded by 4, mirrored left-right or not; over 64 images both flips and several
  # offsets occur (distinct pixel values make each match unique).
  import jax

  n = 64
  img = 1.0 + np.arange(n * 32 * 32 * 3, dtype=np.float32).reshape(n, 32, 32, 3)
  out = np.asarray(steps.augment(jax.random.PRNGKey(0), img))
  assert out.shape == img.shape
  padded = np.pad(img, ((0, 0), (4, 4), (4, 4), (0, 0)))
  found = []
  for i in range(n):
    matches = [(dy, dx, flip) for dy in range(9) for dx in range(9) for flip in (False, True)
               if np.array_equal(out[i], (lambda w: w[:, ::-1] if flip else w)(
                 padded[i, dy : dy + 32, dx : dx + 32]))]  # fmt: skip
    assert len(matches) == 1, (i, matches)
    found.append(matches[0])
  assert {f for _, _, f in found} == {False, True}
  assert len({(dy, dx) for dy, dx, _ in found}) > 10


def _tfds_metadata(tfds, name, data_dir):
  """Writes the metadata TFDS reads (dataset_info.json, features.json) of `name` in `data_dir`.

  `mock_data` points every builder at its own metadata folder, which the TFDS wheel does not ship,
  so `is_prepared` would be False there; given this `data_dir` it is True and the mocked
  `as_dataset` still makes the examples.
  """
  builder = tfds.builder(name, data_dir=str(data_dir))
  builder.data_path.mkdir(parents=True)
  builder.info.write_to_directory(builder.data_path)


@pytest.mark.parametrize('name,classes', [('cifar10', 10), ('cifar100', 100)])
def test_mocked_cifar_one_epoch(tmp_path, name, classes):
  tfds = pytest.importorskip('tensorflow_datasets')
  _tfds_metadata(tfds, name, tmp_path / 'tfds')
  with tfds.testing.mock_data(num_examples=64, data_dir=str(tmp_path / 'tfds')):
    assert cifar.is_prepared(name, '')
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
  # The accuracy evaluated anew from the saved model, here: the same count of correct examples.
  import flax
  import jax

  with np.load(tmp_path / 'final_params.npz') as f:
    variables = flax.traverse_util.unflatten_dict({tuple(k.split('/')): f[k] for k in f.files})
  logits = models.get_model('cnn', classes).apply(
    variables, steps.preprocess(jax.numpy.asarray(ds.x_test), ds.normalize), train=False
  )
  correct = int(np.sum(np.argmax(np.asarray(logits), -1) == ds.y_test))
  assert res['final']['test_accuracy'] == pytest.approx(correct / len(ds.y_test), abs=1e-9)


def test_mock_data_alone_is_not_prepared():
  # Without metadata `mock_data` is an unprepared dataset: refused, not downloaded.
  tfds = pytest.importorskip('tensorflow_datasets')
  with tfds.testing.mock_data(num_examples=4):
    assert not cifar.is_prepared('cifar10', '')
    with pytest.raises(input_pipeline.DataError, match='make data DATASET=cifar10'):
      input_pipeline.load_dataset('cifar10')


# Every bad .npz: one DataError naming the file and what was expected.


def _good_arrays(n=12):
  rs = np.random.RandomState(0)
  return dict(
    x_train=rs.randn(n, 4).astype(np.float32),
    y_train=np.arange(n) % 3,
    x_test=rs.randn(5, 4).astype(np.float32),
    y_test=np.arange(5) % 3,
  )


def _save(tmp_path, name='d.npz', **changes):
  arrays = _good_arrays()
  arrays.update(changes)
  path = tmp_path / name
  np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
  return str(path)


def _refused(path, *patterns, num_classes=0):
  """The DataError of loading `path`: one line, naming the file, matching every pattern."""
  with pytest.raises(input_pipeline.DataError) as e:
    input_pipeline.load_dataset('npz', path, num_classes)
  message = str(e.value)
  assert len(message.splitlines()) == 1, message
  assert f'dataset.path={path!r}' in message, message
  for pattern in patterns:
    assert re.search(pattern, message), (pattern, message)
  return message


def test_npz_good_file_loads(tmp_path):
  ds = input_pipeline.load_dataset('npz', _save(tmp_path), 3)
  assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32 and ds.num_classes == 3


def test_npz_missing_file_and_directory(tmp_path):
  _refused(str(tmp_path / 'absent.npz'), 'does not exist')
  _refused(str(tmp_path), 'is not a file', r"\['x_train', 'y_train', 'x_test', 'y_test'\]")


def test_npz_not_a_zip(tmp_path):
  path = tmp_path / 'text.npz'
  path.write_bytes(b'this is not a numpy archive')
  _refused(str(path), r'is not a \.npz archive \(not a zip file\)', 'np.savez')
  npy = tmp_path / 'one.npz'
  with open(npy, 'wb') as f:
    np.save(f, np.zeros(3))
  _refused(str(npy), r'is a \.npy file \(a single array\), not a \.npz archive')


@pytest.mark.parametrize('compressed', [False, True])
def test_npz_truncated(tmp_path, compressed):
  good = tmp_path / 'good.npz'
  (np.savez_compressed if compressed else np.savez)(good, **_good_arrays(200))
  blob = good.read_bytes()
  half = tmp_path / 'half.npz'
  half.write_bytes(blob[: len(blob) // 2])
  _refused(str(half), 'truncated or damaged')
  # A damaged member inside an intact zip: the bytes of the first array overwritten.
  damaged = tmp_path / 'damaged.npz'
  damaged.write_bytes(blob[:100] + bytes(len(blob) // 2 - 100) + blob[len(blob) // 2 :])
  _refused(str(damaged), 'truncated or damaged', r'reading x_train')


def test_npz_missing_arrays(tmp_path):
  _refused(_save(tmp_path, y_test=None), r"lacks arrays \['y_test'\]")


@pytest.mark.parametrize('key', ['x_train', 'y_test'])
def test_npz_object_array_never_unpickled(tmp_path, key):
  values = np.empty(12 if key == 'x_train' else 5, dtype=object)
  values[:] = [[1.0, 2.0]] * len(values) if key == 'x_train' else list(range(len(values)))
  path = _save(tmp_path, **{key: values})
  _refused(path, f'{key} is an object \\(pickled\\) array', 'never loaded')


def test_npz_feature_shapes_differ(tmp_path):
  path = _save(tmp_path, x_test=np.zeros((5, 3), np.float32))
  _refused(path, r'x_train holds examples of shape \[4\] but x_test of shape \[3\]')


def test_npz_rows_differ(tmp_path):
  _refused(_save(tmp_path, y_train=np.arange(11) % 3), 'x_train has 12 rows, y_train 11')


@pytest.mark.parametrize(
  'y,why',
  [
    (np.arange(12, dtype=np.float32) % 3, r'float32\[12\].*float labels are refused'),
    ((np.arange(12) % 3)[:, None], r'1-D integer array, got int64\[12, 1\]'),
  ],
)
def test_npz_labels_not_1d_integer(tmp_path, y, why):
  _refused(_save(tmp_path, y_train=y), 'y_train must be a 1-D integer array', why)


@pytest.mark.parametrize(
  'x,why',
  [
    (np.array([['a', 'b']] * 5), r'x_test has dtype <U1; features must be numeric'),
    (np.ones((5, 2), np.complex64), r'x_test has dtype complex64; features must be numeric'),
    (np.ones(5, np.float32), r'x_test has shape \[5\]; expected \[examples, features...\]'),
  ],
)
def test_npz_features_not_numeric(tmp_path, x, why):
  path = _save(tmp_path, x_train=np.ones((12, 2), np.float32), x_test=x)
  _refused(path, why)


@pytest.mark.parametrize('split', ['train', 'test'])
def test_npz_empty_set(tmp_path, split):
  path = _save(tmp_path, **{f'x_{split}': np.zeros((0, 4)), f'y_{split}': np.zeros(0, np.int64)})
  _refused(path, f'x_{split} holds no examples', 'must not be empty')


def test_npz_nan_and_inf_counted(tmp_path):
  x = _good_arrays()['x_test']
  x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
  _refused(_save(tmp_path, x_test=x), r'x_test holds 3 NaN or Inf value\(s\) .*of 20')
  big = np.full((12, 4), 1e300)  # Finite in float64, Inf once cast to float32.
  _refused(_save(tmp_path, x_train=big), r'x_train holds 48 NaN or Inf')


def test_npz_labels_out_of_range(tmp_path):
  y = np.arange(12) % 3
  y[[2, 5]] = -1
  _refused(_save(tmp_path, y_train=y), r'y_train holds 2 label\(s\) out of range below 0')
  y = np.arange(5) % 3
  y[4] = 7
  message = _refused(_save(tmp_path, y_test=y), 'y_test holds 1 label', num_classes=3)
  assert 'dataset.num_classes=3 (largest 7)' in message and '0..2' in message


# MNIST-1D: the authors' generator, cached on disk, keyed by its arguments.


@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv(mnist1d_data.CACHE_ENV, str(tmp_path / 'cache'))
  return tmp_path / 'cache'


def test_mnist1d_default_split_is_the_packages(cache):
  # The published split: exactly what the authors' generator makes with its own defaults.
  from mnist1d import data as mnist1d_data

  state = np.random.get_state()
  ours = input_pipeline.load_dataset('mnist1d')
  assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), state))  # Untouched.
  theirs = mnist1d_data.make_dataset(mnist1d_data.get_dataset_args())
  assert ours.x_train.shape == (4000, 40, 1) and ours.x_test.shape == (1000, 40, 1)
  np.testing.assert_allclose(ours.x_train[..., 0], theirs['x'], rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(ours.y_test, theirs['y_test'])
  assert ours.num_classes == 10 and ours.x_train.dtype == np.float32
  assert ours.y_train.dtype == np.int32 and not ours.augment_ok


def test_mnist1d_cached_once_then_read(cache, monkeypatch):
  a = input_pipeline.load_dataset('mnist1d_hard', train_examples=120, test_examples=40)
  path = mnist1d_data.mnist1d_cache_path('mnist1d_hard', 120, 40)
  assert os.path.dirname(path) == str(cache / 'mnist1d') and os.path.exists(path)
  assert sorted(os.listdir(cache / 'mnist1d')) == [os.path.basename(path)]  # No temporaries.

  def never(*args):
    raise AssertionError('generated again instead of read from the cache')

  monkeypatch.setattr(mnist1d_data, 'generate_mnist1d', never)
  b = input_pipeline.load_dataset('mnist1d_hard', train_examples=120, test_examples=40)
  np.testing.assert_array_equal(a.x_train, b.x_train)
  np.testing.assert_array_equal(a.y_test, b.y_test)
  assert a.x_train.shape == (120, 40, 1) and a.x_test.shape == (40, 40, 1)


def test_mnist1d_changed_argument_never_reads_a_stale_cache(cache, monkeypatch):
  hard = input_pipeline.load_dataset('mnist1d_hard', train_examples=60, test_examples=40)
  large = input_pipeline.load_dataset('mnist1d_large', train_examples=60, test_examples=40)
  assert not np.array_equal(hard.x_train, large.x_train)  # Other noise: another file.
  # A generator argument changed in place (same variant name and sizes): another key.
  variants = dict(mnist1d_data.MNIST1D_VARIANTS)
  train, test, args = variants['mnist1d_hard']
  old_path = mnist1d_data.mnist1d_cache_path('mnist1d_hard', 60, 40)
  variants['mnist1d_hard'] = (train, test, {**args, 'iid_noise_scale': 0.2})
  monkeypatch.setattr(mnist1d_data, 'MNIST1D_VARIANTS', variants)
  assert mnist1d_data.mnist1d_cache_path('mnist1d_hard', 60, 40) != old_path
  noisier = input_pipeline.load_dataset('mnist1d_hard', train_examples=60, test_examples=40)
  assert not np.array_equal(noisier.x_train, hard.x_train)
  # A file whose stored arguments differ from the ones asked for (copied in under the
  # expected name) is generated again, not read.
  new_path = mnist1d_data.mnist1d_cache_path('mnist1d_hard', 60, 40)
  os.replace(old_path, new_path)
  again = input_pipeline.load_dataset('mnist1d_hard', train_examples=60, test_examples=40)
  np.testing.assert_array_equal(again.x_train, noisier.x_train)


def test_mnist1d_damaged_cache_is_generated_again(cache):
  a = input_pipeline.load_dataset('mnist1d', train_examples=50, test_examples=20)
  path = mnist1d_data.mnist1d_cache_path('mnist1d', 50, 20)
  with open(path, 'r+b') as f:
    f.truncate(100)  # Cut short, as by a kill during a copy.
  b = input_pipeline.load_dataset('mnist1d', train_examples=50, test_examples=20)
  np.testing.assert_array_equal(a.x_test, b.x_test)


def test_mnist1d_split_sizes_checked(cache):
  from cocod_jax import validation as config_validation

  c = test_config.get_config()
  c.dataset.name = 'mnist1d_large'
  c.dataset.train_examples, c.dataset.test_examples = 95, 20
  (line,) = config_validation.errors(c)
  assert 'dataset.train_examples + dataset.test_examples = 95 + 20 = 115' in line
  assert 'multiple of 10' in line
  c.dataset.name, c.dataset.train_examples = 'digits', 100
  (line,) = config_validation.errors(c)
  assert 'dataset.train_examples=100' in line and "dataset.name='digits'" in line
  assert "'mnist1d_large'" in line
  c.dataset.train_examples = -1
  assert any('dataset.train_examples=-1' in p for p in config_validation.errors(c))
  with pytest.raises(input_pipeline.DataError, match='multiple of 10'):
    input_pipeline.load_dataset('mnist1d', train_examples=7, test_examples=0)


def test_mnist1d_one_epoch_of_the_cnn_stand_in(cache, tmp_path):
  c = test_config.get_config()
  c.dataset.name = 'mnist1d_large'
  c.dataset.train_examples, c.dataset.test_examples = 160, 40
  c.model.name = 'cnn1d'
  c.batch_size = 16
  c.algorithm.name = 'cocod_sgd'
  res = train.train_and_evaluate(c, str(tmp_path / 'run'))
  assert res['train_examples'] == 160 and res['test_examples'] == 40
  assert np.isfinite(res['final']['test_loss'])

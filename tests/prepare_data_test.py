"""CIFAR on clusters without internet: data dir resolution, refusal, a real prepared dir, the CLI.

A real (tiny) TFDS directory is prepared here without a network: TFDS's own CIFAR builder runs,
but its download returns a directory of fake CIFAR binary files. That directory is then read back
the way training reads it, and `python -m cocod_jax.prepare_data` is run against it.
"""

import io
import os
import shutil
import socket
import subprocess
import sys
import time
from unittest import mock

import numpy as np
import pytest

from cocod_jax import prepare_data
from cocod_jax.data import cifar
from cocod_jax.data import pipeline as input_pipeline

# It builds mock TFDS sets: left out of make test-fast.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CIFAR10_URL = 'https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz'
PER_FILE = 3  # Examples in each fake batch file: 5 train files, 1 test file.


def _fake_cifar10_download(root):
  """The extracted cifar-10-binary.tar.gz layout with PER_FILE random images per batch file.

  Returns:
    (the directory, the train labels, the test labels).
  """
  d = os.path.join(root, 'cifar-10-batches-bin')
  os.makedirs(d)
  rs = np.random.RandomState(0)
  labels = {'train': [], 'test': []}
  files = [(f'data_batch_{i}.bin', 'train') for i in range(1, 6)] + [('test_batch.bin', 'test')]
  for fname, split in files:
    records = []
    for _ in range(PER_FILE):
      label = rs.randint(10)
      labels[split].append(label)
      # One label byte, then the 32x32 image channel by channel (the CIFAR binary format).
      records.append(bytes([label]) + rs.randint(0, 256, 3072).astype(np.uint8).tobytes())
    with open(os.path.join(d, fname), 'wb') as f:
      f.write(b''.join(records))
  with open(os.path.join(d, 'batches.meta.txt'), 'w') as f:
    f.write('\n'.join(f'class{i}' for i in range(10)) + '\n')
  return root, labels['train'], labels['test']


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
  """A cifar10 TFDS dir prepared by `prepare_data.run` (network check and download faked)."""
  tfds = pytest.importorskip('tensorflow_datasets')
  source, y_train, y_test = _fake_cifar10_download(str(tmp_path_factory.mktemp('download')))
  data_dir = str(tmp_path_factory.mktemp('tfds'))
  urls = []

  def download_and_extract(self, url):
    del self
    urls.append(url)
    return source

  out = io.StringIO()
  with (
    mock.patch.object(cifar, 'network_reachable', lambda name: True),
    mock.patch.object(tfds.download.DownloadManager, 'download_and_extract', download_and_extract),
  ):
    status = prepare_data.run(['cifar10'], data_dir, out=out)
  return dict(
    data_dir=data_dir, status=status, out=out.getvalue(), urls=urls, y_train=y_train, y_test=y_test
  )


def _no_network(*args, **kwargs):
  raise AssertionError(f'a network connection was attempted: {args}')


def test_prepare_cli_with_network_downloads_prepares_and_says_where(prepared):
  assert prepared['status'] == 0, prepared['out']
  assert prepared['urls'] == [CIFAR10_URL]
  where = os.path.join(prepared['data_dir'], 'cifar10')
  assert f'prepared in {where}/3.0.2 (train 15, test 3 examples)' in prepared['out']
  assert f'copy {where} to' in prepared['out']
  assert cifar.is_prepared('cifar10', prepared['data_dir'])
  assert cifar.example_counts('cifar10', prepared['data_dir']) == {'train': 15, 'test': 3}


def test_prepared_dir_loads_offline(prepared, monkeypatch):
  monkeypatch.setenv(cifar.OFFLINE_ENV, '1')
  monkeypatch.setattr(socket, 'create_connection', _no_network)
  ds = input_pipeline.load_dataset('cifar10', data_dir=prepared['data_dir'])
  assert ds.x_train.shape == (15, 32, 32, 3) and ds.x_train.dtype == np.uint8
  assert ds.x_test.shape == (3, 32, 32, 3) and ds.num_classes == 10 and ds.augment_ok
  # TFDS shuffles the records when it writes them: compare the labels as multisets.
  assert sorted(ds.y_train) == sorted(prepared['y_train'])
  assert sorted(ds.y_test) == sorted(prepared['y_test'])


def test_tfds_data_dir_env_is_read(prepared, monkeypatch):
  monkeypatch.setenv('TFDS_DATA_DIR', prepared['data_dir'])
  assert cifar.resolve_data_dir('') == prepared['data_dir']
  assert cifar.is_prepared('cifar10', '')
  assert len(input_pipeline.load_dataset('cifar10').x_train) == 15


def test_resolution_order(tmp_path, monkeypatch):
  monkeypatch.setenv('HOME', str(tmp_path / 'home'))
  monkeypatch.delenv('TFDS_DATA_DIR', raising=False)
  assert cifar.resolve_data_dir('') == str(tmp_path / 'home' / 'tensorflow_datasets')
  monkeypatch.setenv('TFDS_DATA_DIR', str(tmp_path / 'env'))
  assert cifar.resolve_data_dir('') == str(tmp_path / 'env')
  assert cifar.resolve_data_dir(str(tmp_path / 'explicit')) == str(tmp_path / 'explicit')
  assert cifar.resolve_data_dir('~/d') == str(tmp_path / 'home' / 'd')


@pytest.mark.parametrize('how', ['argument', 'env'])
def test_not_prepared_refused_in_seconds_without_download(tmp_path, monkeypatch, how):
  tfds = pytest.importorskip('tensorflow_datasets')
  missing = str(tmp_path / 'nowhere')
  monkeypatch.setattr(tfds.core.DatasetBuilder, 'download_and_prepare', _no_network)
  monkeypatch.setattr(socket, 'create_connection', _no_network)
  if how == 'env':
    monkeypatch.setenv('TFDS_DATA_DIR', missing)
  start = time.monotonic()
  with pytest.raises(input_pipeline.DataError) as e:
    input_pipeline.load_dataset('cifar10', data_dir=missing if how == 'argument' else '')
  elapsed = time.monotonic() - start
  message = str(e.value)
  assert elapsed < 5.0, elapsed
  assert len(message.splitlines()) == 1
  assert f'dataset cifar10 is not prepared in {missing} ' in message
  assert f'looked for {missing}/cifar10/3.0.2' in message
  assert f'`make data DATASET=cifar10 DATA_DIR={missing}`' in message
  assert '--config.data_dir / TFDS_DATA_DIR' in message
  assert not os.path.exists(missing)  # Nothing created, nothing downloaded.


def test_other_version_is_named(tmp_path):
  (tmp_path / 'cifar100' / '3.0.1').mkdir(parents=True)
  with pytest.raises(input_pipeline.DataError, match=r"holds only \['3.0.1'\]"):
    input_pipeline.load_dataset('cifar100', data_dir=str(tmp_path))


def test_partial_copy_is_one_line(prepared, tmp_path):
  copy = tmp_path / 'copy'
  shutil.copytree(prepared['data_dir'], copy, ignore=shutil.ignore_patterns('*train.tfrecord*'))
  with pytest.raises(input_pipeline.DataError) as e:
    input_pipeline.load_dataset('cifar10', data_dir=str(copy))
  message = str(e.value)
  assert len(message.splitlines()) == 1
  assert f'{copy}/cifar10/3.0.2 cannot be read' in message and 'make data' in message


def test_failed_download_is_one_line(tmp_path, capsys):
  tfds = pytest.importorskip('tensorflow_datasets')

  def unreachable(self, url):
    raise ConnectionError(f'{url}: no route to host\nsecond line')

  with mock.patch.object(tfds.download.DownloadManager, 'download_and_extract', unreachable):
    with pytest.raises(input_pipeline.DataError) as e:
      cifar.prepare('cifar10', str(tmp_path))
    assert str(e.value) == (
      f'preparing dataset cifar10 in {tmp_path} failed: ConnectionError: {CIFAR10_URL}: no route '
      'to host'
    )
    with mock.patch.object(cifar, 'network_reachable', lambda name: True):
      assert prepare_data.run(['cifar10'], str(tmp_path)) == 1
  assert capsys.readouterr().err.splitlines() == [f'error: {e.value}']
  assert not cifar.is_prepared('cifar10', str(tmp_path))


def test_download_url_needs_importlib_resources():
  # TFDS 4.9.10 imports importlib_resources lazily (without declaring it) where it locates the
  # builder's checksums, on the download path; the URL lookup takes the same path offline.
  import importlib_resources  # noqa: F401  (required: see requirements.txt)

  assert cifar.download_url('cifar10') == CIFAR10_URL
  assert cifar.download_url('cifar100').endswith('/cifar-100-binary.tar.gz')
  # The lookup really needs the package (a fresh interpreter: TFDS caches the lazy import).
  code = (
    "import sys; sys.modules['importlib_resources'] = None\n"
    'from cocod_jax.data import cifar\n'
    "cifar.download_url('cifar10')\n"
  )
  p = subprocess.run(
    [sys.executable, '-c', code], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120
  )
  assert p.returncode != 0 and 'importlib_resources' in p.stderr.splitlines()[-1], p.stderr


def _listening_socket():
  s = socket.socket()
  s.bind(('127.0.0.1', 0))
  s.listen()
  return s


def test_network_reachable(monkeypatch):
  monkeypatch.delenv(cifar.OFFLINE_ENV, raising=False)
  for var in ('https_proxy', 'HTTPS_PROXY', 'no_proxy', 'NO_PROXY'):
    monkeypatch.delenv(var, raising=False)
  with _listening_socket() as server:
    port = server.getsockname()[1]
    monkeypatch.setattr(cifar, 'download_url', lambda name: f'https://127.0.0.1:{port}/')
    assert cifar.network_reachable('cifar10')
    monkeypatch.setenv(cifar.OFFLINE_ENV, '1')  # Forced off: not even tried.
    with mock.patch.object(socket, 'create_connection', _no_network):
      assert not cifar.network_reachable('cifar10')
    monkeypatch.setenv(cifar.OFFLINE_ENV, '0')
    # Behind a proxy the proxy is what must answer (the host itself may not resolve here).
    monkeypatch.setattr(cifar, 'download_url', lambda name: 'https://host.invalid/x')
    monkeypatch.setenv('https_proxy', f'http://127.0.0.1:{port}')
    assert cifar.network_reachable('cifar10')
    monkeypatch.delenv('https_proxy')
  start = time.monotonic()
  assert not cifar.network_reachable('cifar10', timeout_s=2.0)  # Unresolvable.
  closed = _listening_socket()
  port = closed.getsockname()[1]
  closed.close()
  monkeypatch.setattr(cifar, 'download_url', lambda name: f'https://127.0.0.1:{port}/')
  assert not cifar.network_reachable('cifar10', timeout_s=2.0)  # Refused.
  assert time.monotonic() - start < 4.5


def test_network_reachable_gives_up_after_timeout(monkeypatch):
  monkeypatch.delenv(cifar.OFFLINE_ENV, raising=False)

  def hang(*args, **kwargs):
    time.sleep(5)  # A firewall that drops packets, or a DNS server that never answers ...
    raise TimeoutError('timed out')  # ... until the socket's own timeout (on the given-up thread).

  monkeypatch.setattr(socket, 'create_connection', hang)
  start = time.monotonic()
  assert not cifar.network_reachable('cifar10', timeout_s=0.5)
  assert time.monotonic() - start < 1.5


def test_importing_defines_no_flags():
  # experiments/ defines its own `data_dir` flag; both modules may be imported in one process.
  from absl import flags

  assert 'cocod_jax.prepare_data' not in flags.FLAGS.flags_by_module_dict()


def test_non_tfds_names():
  assert cifar.is_prepared('digits', '') and cifar.is_prepared('npz', '')
  with pytest.raises(input_pipeline.DataError, match=r"'mnist'.*\['cifar10', 'cifar100'\]"):
    cifar.is_prepared('mnist', '')


def _env():
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  env[cifar.OFFLINE_ENV] = '1'
  return env


def _cli(*args):
  cmd = [sys.executable, '-m', 'cocod_jax.prepare_data', *args]
  return subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)


def _one_error_line(p, status, *words):
  assert p.returncode == status, (p.returncode, p.stdout, p.stderr)
  assert 'Traceback' not in p.stderr
  errors = [line for line in p.stderr.splitlines() if line.startswith('error: ')]
  assert len(errors) == 1, p.stderr
  for word in words:
    assert word in errors[0], (word, errors[0])


def test_cli_offline_exits_1_in_seconds(tmp_path):
  missing = str(tmp_path / 'nowhere')
  start = time.monotonic()
  p = _cli('--dataset=cifar10', f'--data_dir={missing}')
  elapsed = time.monotonic() - start
  _one_error_line(p, 1, 'dataset cifar10', missing, 'needs internet', 'make data DATASET=cifar10')
  assert elapsed < 20, elapsed  # The interpreter and TFDS start; no network wait at all.
  assert not os.path.exists(missing)


def test_cli_bad_input_exits_2():
  p = _cli('--dataset=cifar10,mnist')
  _one_error_line(
    p,
    2,
    "['mnist']",
    "['cifar10', 'cifar100']",
    'digits, clusters100, npz, mnist1d, mnist1d_large, mnist1d_hard need no',
  )
  _one_error_line(_cli('--dataset='), 2, '--dataset is empty')
  _one_error_line(_cli('--datset=cifar10'), 2, 'datset')


def test_cli_reports_prepared_and_needs_no_preparation(prepared):
  p = _cli('--dataset=digits,cifar10', f'--data_dir={prepared["data_dir"]}')
  assert p.returncode == 0, p.stderr
  where = os.path.join(prepared['data_dir'], 'cifar10')
  assert 'digits: needs no preparation' in p.stdout
  assert f'cifar10: already prepared in {where} (train 15, test 3 examples)' in p.stdout

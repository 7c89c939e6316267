"""The entry point end to end (subprocesses), and every bad input refused before any output."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _main(workdir, *overrides, config='configs/test.py'):
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  cmd = [sys.executable, '-m', 'cocod_jax.main', f'--config={config}', f'--workdir={workdir}']
  return subprocess.run(
    cmd + list(overrides), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
  )


@pytest.mark.parametrize('algorithm', ['ssgd', 'pipe_sgd', 'local_sgd', 'cocod_sgd'])
def test_one_epoch_every_algorithm(tmp_path, algorithm):
  wd = tmp_path / 'run'
  p = _main(
    wd,
    f'--config.algorithm.name={algorithm}',
    '--config.model.name=cnn',
    '--config.batch_size=20',
    '--config.optimizer.learning_rate=0.05',
  )
  assert p.returncode == 0, p.stderr[-3000:]
  assert 'epoch   1/1' in p.stdout and 'final (averaged model)' in p.stdout
  res = json.loads((wd / 'results.json').read_text())
  assert res['config']['algorithm']['name'] == algorithm
  assert res['final']['test_accuracy'] > 0.3  # One epoch of the CNN on digits: far above 0.1.
  with np.load(wd / 'final_params.npz') as f:
    assert 'params/Dense_0/kernel' in f.files
    assert any(k.startswith('batch_stats/') for k in f.files)


def _npz(tmp_path, **arrays):
  path = tmp_path / 'd.npz'
  np.savez(path, **arrays)
  return str(path)


def _good_arrays(n=40):
  rs = np.random.RandomState(0)
  return dict(
    x_train=rs.randn(n, 4).astype(np.float32),
    y_train=rs.randint(0, 3, n),
    x_test=rs.randn(10, 4).astype(np.float32),
    y_test=rs.randint(0, 3, 10),
  )


BAD = {
  'algorithm': (['--config.algorithm.name=adam'], 'algorithm.name'),
  'model': (['--config.model.name=resnet50'], 'model.name'),
  'dataset': (['--config.dataset.name=mnist'], 'dataset.name'),
  'period': (['--config.algorithm.period=0'], 'algorithm.period'),
  'lr_zero': (['--config.optimizer.learning_rate=0'], 'optimizer.learning_rate'),
  'lr_negative': (['--config.optimizer.learning_rate=-0.1'], 'optimizer.learning_rate'),
  'batch': (['--config.batch_size=0'], 'batch_size'),
  'epochs': (['--config.num_epochs=0'], 'num_epochs'),
  'speeds_length': (['--config.worker_speeds=(1.0,2.0,3.0)'], 'worker_speeds'),
  'speeds_sign': (['--config.worker_speeds=(1.0,0.0)'], 'worker_speeds'),
  'batch_too_big': (['--config.batch_size=800'], 'batch_size'),
  'backend': (['--config.backend=nccl'], 'backend'),
  'staging': (['--config.backend=mpi', '--config.comm.staging=gpu'], 'comm.staging'),
  'timeout': (['--config.backend=mpi', '--config.comm.timeout_s=0'], 'comm.timeout_s'),
  'npz_missing': (
    ['--config.dataset.name=npz', '--config.dataset.path=/nonexistent.npz'],
    'dataset.path',
  ),
}


@pytest.mark.parametrize('case', sorted(BAD))
def test_bad_input_refused(tmp_path, case):
  overrides, field = BAD[case]
  wd = tmp_path / 'run'
  p = _main(wd, *overrides)
  assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
  lines = p.stderr.strip().splitlines()
  assert lines[-1].startswith('error: ') and field in lines[-1], p.stderr[-2000:]
  assert 'Traceback' not in p.stderr
  assert not wd.exists()  # Nothing written.


def _main_npz(tmp_path, arrays, *extra):
  path = _npz(tmp_path, **arrays)
  return _main(
    tmp_path / 'run',
    '--config.dataset.name=npz',
    f'--config.dataset.path={path}',
    '--config.batch_size=5',
    *extra,
  )


def test_npz_lacking_array_refused(tmp_path):
  arrays = _good_arrays()
  del arrays['y_test']
  p = _main_npz(tmp_path, arrays)
  assert p.returncode == 2 and 'y_test' in p.stderr and 'dataset.path' in p.stderr
  assert not (tmp_path / 'run').exists()


def test_labels_out_of_range_refused(tmp_path):
  arrays = _good_arrays()
  arrays['y_train'][3] = 7
  p = _main_npz(tmp_path, arrays, '--config.dataset.num_classes=3')
  assert p.returncode == 2 and 'dataset.num_classes' in p.stderr and '7' in p.stderr
  arrays['y_train'][3] = -1
  p = _main_npz(tmp_path, arrays)
  assert p.returncode == 2 and 'out of range' in p.stderr
  assert not (tmp_path / 'run').exists()


def test_misspelt_override_fails(tmp_path):
  p = _main(tmp_path / 'run', '--config.algorithm.perod=3')
  assert p.returncode != 0 and not (tmp_path / 'run').exists()

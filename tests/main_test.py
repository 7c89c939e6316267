"""The entry point end to end (subprocesses), and every bad input refused before any output."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cocod_jax.record import schema as results_schema

# It starts the entry point in processes: left out of make test-fast.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _main(workdir, *overrides, config='configs/test.py'):
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  cmd = [sys.executable, '-m', 'cocod_jax.main', f'--config={config}', f'--workdir={workdir}']
  return subprocess.run(
    cmd + list(overrides), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
  )


def _assert_refused(p, workdir, *words, status=2):
  """Exit status, exactly one `error:` line holding every word, no traceback, nothing written."""
  assert p.returncode == status, (p.returncode, p.stderr[-3000:])
  errors = [line for line in p.stderr.splitlines() if line.startswith('error: ')]
  assert len(errors) == 1, p.stderr[-3000:]
  for word in words:
    assert word in errors[0], (word, errors[0])
  assert 'Traceback' not in p.stderr
  assert not os.path.exists(workdir)


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
  res = results_schema.load_results(str(wd / 'results.json'))  # The schema readers rely on.
  assert len(results_schema.load_metrics(str(wd / 'metrics.jsonl'))) == len(res['epochs']) == 1
  assert res['config']['algorithm']['name'] == algorithm
  assert res['final']['test_accuracy'] > 0.3  # One epoch of the CNN on digits: far above 0.1.
  with np.load(wd / 'final_params.npz') as f:
    assert 'params/Dense_0/kernel' in f.files
    assert any(k.startswith('batch_stats/') for k in f.files)


def test_console_says_what_happens_before_and_after(tmp_path):
  # Issue 42 item 7: one line at the start (the workdir, the algorithm with its period and delay,
  # the layout), "compiling the step ..." before epoch 1, the epoch's own time beside the
  # cumulative train_time, and at the end where results.json, final_params.npz and the
  # TensorBoard events are.
  wd = tmp_path / 'run'
  p = _main(wd, '--config.num_epochs=2')
  assert p.returncode == 0, p.stderr[-3000:]
  lines = p.stdout.splitlines()
  first = lines[0]
  assert first.startswith('run: cocod_sgd period=3 delay=None;'), first
  assert '2 workers on one process' in first and f'workdir {wd}' in first, first
  assert lines[1] == 'compiling the step ...', lines
  epochs = [line for line in lines if line.startswith('epoch ')]
  assert len(epochs) == 2 and all('s total (' in e and 's this epoch)' in e for e in epochs)
  last = lines[-1]
  for name in ('results.json', 'final_params.npz'):
    assert str(wd / name) in last and (wd / name).exists(), last
  assert f'TensorBoard events in {wd}' in last
  assert any(n.startswith('events.out.tfevents') for n in os.listdir(wd))
  # A rerun of the finished run says so and prints none of them.
  again = _main(wd, '--config.num_epochs=2')
  assert again.returncode == 0 and 'compiling' not in again.stdout, again.stdout


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
  # An override of a field the algorithm does not read (S-SGD averages every step: no period).
  'period_unused': (
    ['--config.algorithm.name=ssgd', '--config.algorithm.period=4'],
    "algorithm.period=4 is invalid with algorithm.name='ssgd'",
  ),
  'correction': (['--config.algorithm.correction=lookahead'], 'algorithm.correction'),
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
  # Exactly one error line naming the field (not just the last of several), no traceback,
  # nothing written.
  _assert_refused(_main(wd, *overrides), wd, field)


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


# Mistakes on the command line itself (before the config is built), each one line naming the
# field and what is allowed.
COMMAND_LINE = {
  'misspelt_field': (['--config.algorithm.perod=3'], ["'algorithm.perod'", "'algorithm.period'"]),
  'misspelt_section': (['--config.optimiser.momentum=0.5'], ["'optimizer.momentum'"]),
  'int_type': (['--config.num_epochs=abc'], ['--config.num_epochs=abc', 'int']),
  'float_for_int': (['--config.batch_size=1.5'], ['--config.batch_size=1.5', 'int']),
  'bool_type': (['--config.dataset.shuffle=maybe'], ['--config.dataset.shuffle', 'bool']),
  'momentum_range': (['--config.optimizer.momentum=1.0'], ['optimizer.momentum', '[0, 1)']),
  'seed_range': (['--config.seed=-1'], ['seed=-1']),
  'devices': (['--config.one_host.devices=3'], ['one_host.devices=3', 'divisor of 2']),
  'speeds_type': (["--config.worker_speeds=(1.0,'fast')"], ['worker_speeds', 'numbers > 0']),
  'positional': (['extra'], ["unexpected arguments ['extra']"]),
  'asynlocal_ps': (
    ['--config.algorithm.name=asynlocal_sgd', '--config.proportional_sampling=True'],
    ['proportional_sampling=True', 'asynlocal_sgd', 'basic batch'],
  ),
  'emulate_one_host': (
    ['--config.emulate_speeds=True', '--config.worker_speeds=(1.0,2.0)'],
    ['emulate_speeds=True', 'one_host'],
  ),
}


@pytest.mark.parametrize('case', sorted(COMMAND_LINE))
def test_command_line_mistake_is_one_line(tmp_path, case):
  overrides, words = COMMAND_LINE[case]
  _assert_refused(_main(tmp_path / 'run', *overrides), tmp_path / 'run', *words)


def test_missing_config_file_is_one_line(tmp_path):
  p = _main(tmp_path / 'run', config='configs/nonexistent.py')
  _assert_refused(p, tmp_path / 'run', 'configs/nonexistent.py', 'no such config file')


CONFIG_FILES = {
  'not_a_configdict': ('def get_config():\n  return {"seed": 0}\n',
                       'get_config() returned a dict, not an ml_collections.ConfigDict'),
  'no_algorithm': ('import ml_collections\n\n\ndef get_config():\n'
                   '  c = ml_collections.ConfigDict()\n  c.seed = 0\n  return c\n',
                   'the config lacks the required field algorithm (and 17 more)'),
  'no_optimizer_momentum': ('from configs import test\n\n\ndef get_config():\n'
                            '  c = test.get_config()\n  del c.optimizer.momentum\n  return c\n',
                            'the config lacks the required field optimizer.momentum;'),
}  # fmt: skip


@pytest.mark.parametrize('case', sorted(CONFIG_FILES))
def test_config_file_of_the_wrong_shape_is_one_line(tmp_path, case):
  # A config file whose get_config returns another type, or lacks a field every config has: one
  # line naming the file and the field, in the entry point and in the sweep alike.
  text, words = CONFIG_FILES[case]
  path = tmp_path / f'{case}.py'
  path.write_text(text)
  _assert_refused(_main(tmp_path / 'run', config=str(path)), tmp_path / 'run', str(path), words)
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  cmd = [sys.executable, '-m', 'cocod_jax.sweep', f'--config={path}', f'--workdir={tmp_path / "w"}']
  p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
  assert p.returncode == 2 and 'Traceback' not in p.stderr, p.stderr[-3000:]
  assert f'error: point 0 (default): --config={path}: ' in p.stderr and words in p.stderr
  assert not (tmp_path / 'w').exists()


def test_verbose_shows_the_traceback(tmp_path):
  p = _main(tmp_path / 'run', '--config.algorithm.perod=3', '--verbose')
  assert p.returncode == 2 and 'Traceback' in p.stderr and "'algorithm.period'" in p.stderr


def test_every_problem_gets_its_line(tmp_path):
  p = _main(tmp_path / 'run', '--config.num_workers=0', '--config.optimizer.learning_rate=-1')
  errors = [line for line in p.stderr.splitlines() if line.startswith('error: ')]
  assert p.returncode == 2 and len(errors) == 2, p.stderr
  assert 'num_workers=0' in errors[0] and 'optimizer.learning_rate=-1' in errors[1]


def test_bad_npz_files_are_one_line(tmp_path):
  # Not a zip at all, the first half of a valid file, and NaN features: each named with the file.
  not_zip = tmp_path / 'not_zip.npz'
  not_zip.write_bytes(b'this is not a numpy archive')
  good = _npz(tmp_path, **_good_arrays())
  with open(good, 'rb') as f:
    blob = f.read()
  truncated = tmp_path / 'truncated.npz'
  truncated.write_bytes(blob[: len(blob) // 2])
  arrays = _good_arrays()
  arrays['x_train'][5, 1] = np.nan
  nan_path = tmp_path / 'nan.npz'
  np.savez(nan_path, **arrays)
  for path in (not_zip, truncated, nan_path):
    wd = tmp_path / f'run_{path.stem}'
    p = _main(wd, '--config.dataset.name=npz', f'--config.dataset.path={path}')
    _assert_refused(p, wd, str(path))


def test_quickstart_reaches_what_its_docstring_expects(tmp_path):
  # configs/quickstart.py: "Expected: final test accuracy of the averaged model >= 0.95".
  wd = tmp_path / 'run'
  p = _main(wd, '--config.backend=one_host', config='configs/quickstart.py')
  assert p.returncode == 0, p.stderr[-3000:]
  assert results_schema.load_results(str(wd / 'results.json'))['final']['test_accuracy'] >= 0.95


def test_divergence_stops_with_one_line(tmp_path):
  # lr 1e5 on the small CNN: the loss is NaN within the first round; the run stops at the first
  # average that would take the NaN in, exits 3 and says why; results.json says it diverged.
  wd = tmp_path / 'run'
  p = _main(
    wd,
    '--config.backend=one_host',
    '--config.algorithm.name=local_sgd',
    '--config.optimizer.learning_rate=1e5',
    config='configs/quickstart.py',
  )
  assert p.returncode == 3, p.stderr[-3000:]
  errors = [line for line in p.stderr.splitlines() if line.startswith('error: ')]
  assert len(errors) == 1 and 'Traceback' not in p.stderr, p.stderr[-3000:]
  assert 'training diverged' in errors[0] and 'learning rate' in errors[0] and 'step' in errors[0]
  res = results_schema.load_results(str(wd / 'results.json'))
  assert res['status'] == 'diverged' and res['diverged']['workers']
  assert 'final' not in res and not (wd / 'final_params.npz').exists()


def _strict_json(path):
  """The file parsed as strict JSON: a NaN or Infinity token is an error, as in other readers."""

  def refuse(token):
    raise ValueError(f'{path} holds {token}, which is not JSON')

  with open(path) as f:
    return json.load(f, parse_constant=refuse)


def test_huge_learning_rate_ends_diverged_with_valid_json(tmp_path):
  # lr 1e6 on the linear model, 1 epoch: the training loss stays finite (if huge), but the
  # averaged model's test loss overflows: the run stops as diverged instead of "completed" with
  # `Infinity` in results.json.
  wd = tmp_path / 'run'
  p = _main(wd, '--config.optimizer.learning_rate=1e6')
  assert p.returncode == 3, p.stderr[-3000:]
  errors = [line for line in p.stderr.splitlines() if line.startswith('error: ')]
  assert len(errors) == 1 and 'the test loss of the averaged model' in errors[0], p.stderr
  res = _strict_json(wd / 'results.json')
  assert res['status'] == 'diverged' and 'final' not in res
  for line in (wd / 'metrics.jsonl').read_text().splitlines():
    json.loads(line, parse_constant=lambda token: pytest.fail(f'metrics.jsonl holds {token}'))


def test_model_that_cannot_take_the_data_is_one_line(tmp_path):
  path = _npz(tmp_path, **_good_arrays())  # Flat features of 4 values.
  wd = tmp_path / 'run'
  p = _main(wd, '--config.dataset.name=npz', f'--config.dataset.path={path}',
            '--config.model.name=cnn', '--config.batch_size=5')  # fmt: skip
  _assert_refused(p, wd, "model.name='cnn'", f'dataset.path={path!r}', 'shape (4,)')


def test_config_file_without_a_config_dict_is_one_line(tmp_path):
  bad = tmp_path / 'bad_config.py'
  bad.write_text('"""Returns a dict."""\n\n\ndef get_config():\n  return {"num_epochs": 1}\n')
  p = _main(tmp_path / 'run', config=str(bad))
  _assert_refused(
    p, tmp_path / 'run', str(bad), 'returned a dict, not an ml_collections.ConfigDict'
  )

"""The workdir: one run at a time, a fingerprint that refuses another run's config or data,
finished results never rewritten, checkpoints that fall back past unreadable ones, a full disk
and bad workdirs as one line (tests/mpi_test.py has the MPI side)."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from cocod_jax import train
from cocod_jax.config import errors
from cocod_jax.data import pipeline as input_pipeline
from cocod_jax.record import checkpoints
from cocod_jax.record import files
from cocod_jax.record import workdir
from tests import checkpoints_test
from tests import helpers
from tests import main_test

# It starts runs in processes: left out of make test-fast.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(tmp_path, epochs=3, every=0):
  path, _, _ = helpers.tiny_npz(tmp_path, n_train=60)
  c = helpers.small_config(path, 'cocod_sgd', 3, 5, epochs, 3, ps=False)
  c.dataset.shuffle = True
  c.checkpoint.every_epochs = every
  c.checkpoint.keep = 5
  return c


def _errors(p):
  return [line for line in p.stderr.splitlines() if line.startswith('error: ')]


# --------------------------------------------------------------------------- the lock


def test_second_run_refused_naming_workdir_and_holder(tmp_path):
  # This process holds the workdir (as a run in progress does); the entry point refuses in one
  # line naming the workdir and this process, and writes nothing there.
  c = _config(tmp_path)
  wd = tmp_path / 'run'
  dataset = input_pipeline.load(c.dataset, c.data_dir)
  with workdir.claim(str(wd), c, dataset):
    before = sorted(os.listdir(wd))
    p = main_test._main(wd)
    after = sorted(os.listdir(wd))
  assert p.returncode == 2, p.stderr[-3000:]
  assert len(_errors(p)) == 1 and 'Traceback' not in p.stderr, p.stderr[-3000:]
  assert str(wd) in _errors(p)[0] and f'pid {os.getpid()} on ' in _errors(p)[0]
  assert after == before == ['fingerprint.json', 'run.lock', 'run.lock.json']
  assert not (wd / 'run.lock.json').exists()  # Released with the claim.


def test_lock_of_a_dead_run_is_taken_over(tmp_path, capsys):
  # A process takes the workdir and is killed (SIGKILL: no cleanup); the next run takes over.
  c = _config(tmp_path, epochs=1)
  wd = tmp_path / 'run'
  code = (
    'import os, signal, sys; sys.path.insert(0, sys.argv[1])\n'
    'import filelock; lock = filelock.FileLock(os.path.join(sys.argv[2], "run.lock"), timeout=0)\n'
    'os.makedirs(sys.argv[2]); lock.acquire()\n'
    'from cocod_jax.record import files\n'
    'files.write_json_atomic(os.path.join(sys.argv[2], "run.lock.json"), '
    '{"pid": os.getpid(), "host": "h", "started": 0})\n'
    'os.kill(os.getpid(), signal.SIGKILL)\n'
  )
  p = subprocess.run([sys.executable, '-c', code, ROOT, str(wd)], capture_output=True, timeout=60)
  assert p.returncode == -signal.SIGKILL, p.stderr
  dead = json.loads((wd / 'run.lock.json').read_text())['pid']
  train.train_and_evaluate(c, str(wd))
  assert f'taking over the lock of {wd} from pid {dead} on h' in capsys.readouterr().out
  assert json.loads((wd / 'results.json').read_text())['status'] == 'completed'


@pytest.mark.parametrize(
  'env,refused',
  [
    ({'OMPI_COMM_WORLD_SIZE': '2'}, 'OMPI_COMM_WORLD_SIZE=2'),
    ({'PMI_SIZE': '4'}, 'PMI_SIZE=4'),
    ({'SLURM_STEP_NUM_TASKS': '2', 'SLURM_PROCID': '1'}, 'SLURM_STEP_NUM_TASKS=2'),
    ({'SLURM_STEP_NUM_TASKS': '2'}, None),  # A batch script itself, not an srun task.
    ({'OMPI_COMM_WORLD_SIZE': '1'}, None),
  ],
)
def test_mpi_job_size_from_the_environment(monkeypatch, env, refused):
  for name, _ in workdir.MPI_SIZE_VARIABLES + (('SLURM_PROCID', ''),):
    monkeypatch.delenv(name, raising=False)
  for k, v in env.items():
    monkeypatch.setenv(k, v)
  size, where = workdir.mpi_job_size()
  assert (where or None) == refused and (size > 1) == bool(refused)


# --------------------------------------------------------------------------- the fingerprint


def _contents(top):
  """{relative path: bytes} of every file under `top`."""
  out = {}
  for d, _, names in os.walk(top):
    for n in names:
      path = os.path.join(d, n)
      out[os.path.relpath(path, top)] = open(path, 'rb').read()
  return out


def test_rerun_of_a_finished_run_changes_nothing(tmp_path):
  # The same command again on a finished run: one line saying so, exit 0, and every file of the
  # workdir as it was, byte for byte (results, metrics, TensorBoard events; no new file). More
  # epochs continue it from its last checkpoint as before.
  wd = tmp_path / 'run'
  first = main_test._main(wd, '--config.checkpoint.every_epochs=1')
  assert first.returncode == 0, first.stderr[-3000:]
  before = _contents(wd)
  again = main_test._main(wd, '--config.checkpoint.every_epochs=1')
  assert again.returncode == 0, again.stderr[-3000:]
  assert again.stdout.strip().splitlines() == [
    f'the run in {wd} is finished (num_epochs=1, final test accuracy 0.8990): nothing to do; '
    'more --config.num_epochs continues it'
  ]
  assert _contents(wd) == before
  further = main_test._main(wd, '--config.checkpoint.every_epochs=1', '--config.num_epochs=2')
  assert further.returncode == 0, further.stderr[-3000:]
  assert 'resuming from the checkpoint at step 15 (epoch 2)' in further.stdout
  assert json.loads((wd / 'results.json').read_text())['config']['num_epochs'] == 2


def test_another_config_or_data_refused_and_results_kept(tmp_path):
  # Checkpoints off: a finished run's results.json must survive a rerun of another config, of a
  # changed npz under the same path, and of fewer or more epochs.
  c = _config(tmp_path, epochs=2)
  wd = str(tmp_path / 'run')
  train.train_and_evaluate(c, wd)
  finished = (tmp_path / 'run' / 'results.json').read_bytes()
  c.optimizer.learning_rate = 0.07
  with pytest.raises(workdir.WorkdirError, match=r'config optimizer.learning_rate: 0.5 -> 0.07'):
    train.train_and_evaluate(c, wd)
  c.optimizer.learning_rate = 0.5
  with np.load(c.dataset.path) as f:
    arrays = {k: f[k] for k in f.files}
  changed = arrays['x_train'].copy()
  changed[7, 2] += 1.0  # Same shapes, one value changed.
  np.savez(c.dataset.path, **{**arrays, 'x_train': changed})
  with pytest.raises(workdir.WorkdirError, match=r'the content of x_train changed'):
    train.train_and_evaluate(c, wd)
  short = {**arrays, 'x_test': arrays['x_test'][:7], 'y_test': arrays['y_test'][:7]}
  np.savez(c.dataset.path, **short)
  with pytest.raises(workdir.WorkdirError, match=r'data: x_test shape \[10, 5\] -> \[7, 5\]'):
    train.train_and_evaluate(c, wd)
  np.savez(c.dataset.path, **arrays)
  for epochs, why in ((1, 'ends before them'), (3, 'has no checkpoint to continue them from')):
    c.num_epochs = epochs
    with pytest.raises(workdir.WorkdirError, match=f'num_epochs=2; this run .* {why}'):
      train.train_and_evaluate(c, wd)
  assert (tmp_path / 'run' / 'results.json').read_bytes() == finished
  c.num_epochs = 2  # The same run again is allowed.
  train.train_and_evaluate(c, wd)


def test_checkpoint_past_num_epochs_refused(tmp_path, monkeypatch):
  # A run preempted in epoch 3 (no results yet) rerun with num_epochs=2 would report its model
  # as a 2-epoch run.
  c = _config(tmp_path, epochs=3)
  with monkeypatch.context() as m:
    checkpoints_test._sigterm_at(m, 10)  # 4 steps an epoch.
    with pytest.raises(checkpoints.Preempted):
      train.train_and_evaluate(c, str(tmp_path / 'run'))
  c.num_epochs = 2
  with pytest.raises(checkpoints.ResumeError, match=r'past the end of this run .*num_epochs=3'):
    train.train_and_evaluate(c, str(tmp_path / 'run'))


# --------------------------------------------------------------------------- checkpoint fallback


def _largest_file(directory):
  found = [os.path.join(d, n) for d, _, names in os.walk(directory) for n in names]
  return max(found, key=os.path.getsize)


CORRUPTIONS = {
  'truncated': lambda part: open(_largest_file(part), 'r+b').truncate(1),
  'bad_json': lambda part: open(part + '.json', 'w').write('{"epoch": 3, '),
  'empty_marker': lambda part: open(os.path.join(os.path.dirname(part), 'COMMITTED'), 'w').close(),
  'part_missing': lambda part: shutil.rmtree(part),
}


@pytest.fixture(scope='module')
def finished(tmp_path_factory):
  """A run of 3 epochs with a checkpoint at each (steps 4, 8, 12), and its config."""
  tmp = tmp_path_factory.mktemp('finished')
  c = _config(tmp, epochs=3, every=1)
  train.train_and_evaluate(c, str(tmp / 'run'))
  return c, tmp / 'run'


def _unfinished_copy(straight, wd):
  """A copy of the finished run without its results: a run stopped after its last checkpoint,
  which a rerun resumes (a rerun of a finished run has nothing to do)."""
  shutil.copytree(straight, wd)
  (wd / 'results.json').unlink()


@pytest.mark.parametrize('kind', sorted(CORRUPTIONS))
def test_unreadable_checkpoint_falls_back(tmp_path, capsys, finished, kind):
  c, straight = finished
  wd = tmp_path / 'run'
  _unfinished_copy(straight, wd)
  CORRUPTIONS[kind](str(wd / 'checkpoints' / '0000000012' / 'rank_0'))
  capsys.readouterr()
  train.train_and_evaluate(c, str(wd))
  out = capsys.readouterr().out
  skipped = [line for line in out.splitlines() if line.startswith('skipping')]
  assert len(skipped) == 1 and 'unreadable checkpoint at step 12' in skipped[0], out
  assert 'resuming from the checkpoint at step 8 (epoch 3)' in out
  assert out.count('epoch   3/3') == 1  # Epoch 3 run again, nothing before it.
  for a, b in zip(checkpoints_test._finals(wd), checkpoints_test._finals(straight)):
    if isinstance(a, dict):
      for k in b:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    else:
      assert a == b


def test_fallback_from_a_truncated_checkpoint_prints_no_traceback(tmp_path):
  # The newest checkpoint's largest file truncated: the entry point skips it in one line and
  # resumes from the one before. The reads Orbax left in flight used to print tracebacks
  # ('Event loop is closed', 'Task exception was never retrieved') in 4 of 6 tries: three tries,
  # each with exactly the four lines of a clean fallback.
  base = tmp_path / 'base'
  args = ['--config.num_epochs=3', '--config.checkpoint.every_epochs=1']
  assert main_test._main(base, *args).returncode == 0
  (base / 'results.json').unlink()  # Stopped after its last checkpoint: a rerun resumes.
  for attempt in range(3):
    wd = tmp_path / f'try{attempt}'
    shutil.copytree(base, wd)
    with open(_largest_file(wd / 'checkpoints' / '0000000045'), 'r+b') as f:
      f.truncate(1)
    p = main_test._main(wd, *args)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = (p.stdout + p.stderr).splitlines()
    # The run's line, the fallback's two, then compiling, the epoch, the final model, the files.
    assert len(lines) == 7, '\n'.join(lines)  # (all of them: a failure says what leaked)
    assert lines[0].startswith('run: cocod_sgd period=3')
    assert lines[1].startswith('skipping the unreadable checkpoint at step 45')
    assert lines[2].startswith('resuming from the checkpoint at step 30 (epoch 3)'), lines
    assert lines[3] == 'compiling the step ...' and lines[6].startswith('written: ')


def test_no_readable_checkpoint_is_one_line(tmp_path, finished):
  c, straight = finished
  wd = tmp_path / 'run'
  _unfinished_copy(straight, wd)
  for step in os.listdir(wd / 'checkpoints'):
    CORRUPTIONS['bad_json'](str(wd / 'checkpoints' / step / 'rank_0'))
  with pytest.raises(checkpoints.ResumeError, match=r'no checkpoint in .* could be read') as e:
    train.train_and_evaluate(c, str(wd))
  assert len(str(e.value).splitlines()) == 1


# --------------------------------------------------------------------------- full disk


def test_full_disk_on_a_small_tmpfs(tmp_path):
  # The workdir on a 2 MB tmpfs (where this container lets root mount one), checkpoints of a
  # model (cnn on digits) that fill it after a few epochs: one line, exit 74, and what was
  # committed before reads back.
  wd = tmp_path / 'small'
  wd.mkdir()
  if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', str(wd)]).returncode:
    pytest.skip('cannot mount a tmpfs here')
  try:
    p = main_test._main(wd / 'run', '--config.model.name=cnn', '--config.num_epochs=40',
                        '--config.checkpoint.every_epochs=1', '--config.checkpoint.keep=40',
                        '--config.batch_size=25')  # fmt: skip
    assert p.returncode == errors.EXIT_DISK_FULL, p.stderr[-3000:]
    assert len(_errors(p)) == 1 and 'Traceback' not in p.stderr, p.stderr[-3000:]
    assert (
      'No space left on device' in _errors(p)[0] and 'while writing a checkpoint' in _errors(p)[0]
    )
    committed = checkpoints.Checkpointer(str(wd / 'run'), 0, 1, lambda: None, 1)
    steps = [s for s in committed.steps() if committed._complete(s)]
    assert steps, os.listdir(wd / 'run' / 'checkpoints')
    committed.restore(steps[0])  # The last committed checkpoint reads.
    assert not [n for n in os.listdir(wd / 'run') if '.tmp' in n]
  finally:
    subprocess.run(['umount', str(wd)])


def test_full_disk_while_writing_results_keeps_the_old_ones(tmp_path, monkeypatch):
  # A write that raises ENOSPC (as a full disk does) while results.json is written: DiskFull in
  # one line naming what was written, and the results.json of the run before left whole.
  c = _config(tmp_path, epochs=1, every=1)
  wd = tmp_path / 'run'
  train.train_and_evaluate(c, str(wd))
  before = (wd / 'results.json').read_bytes()
  c.num_epochs = 2  # Continued, it writes results.json again (the same run would not).
  real = files.write_atomic

  def full(path, text):
    if path.endswith('results.json'):
      with open(f'{path}.tmp{os.getpid()}', 'w') as f:
        f.write(text[:10])
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real(path, text)

  monkeypatch.setattr(files, 'write_atomic', full)
  with pytest.raises(workdir.DiskFull, match=r'No space left on device while writing results.json'):
    train.train_and_evaluate(c, str(wd))
  assert (wd / 'results.json').read_bytes() == before


# --------------------------------------------------------------------------- bad workdirs


def test_bad_workdirs_refused(tmp_path):
  a_file = tmp_path / 'a_file'
  a_file.write_text('x')
  ro = tmp_path / 'ro'
  ro.mkdir()
  mount = ['mount', '-t', 'tmpfs', '-o', 'ro,size=1m', 'tmpfs', str(ro)]
  mounted = not subprocess.run(mount).returncode
  try:
    cases = [(a_file, 'is not a directory'), (a_file / 'sub', 'is not a directory'), ('', 'empty')]
    if mounted:  # Root writes through permission bits, not through a read-only mount.
      cases += [(ro, 'is not writable'), (ro / 'sub', 'cannot be created')]
    for wd, words in cases:
      with pytest.raises(workdir.WorkdirError, match=words):
        workdir.check(str(wd))
    workdir.check(str(tmp_path / 'new' / 'deeper'))  # Creatable: accepted, nothing created.
    assert not (tmp_path / 'new').exists()
  finally:
    if mounted:
      subprocess.run(['umount', str(ro)])


def test_bad_workdir_refused_before_the_data_is_loaded(tmp_path):
  # The dataset does not exist either: the workdir is what the one line names.
  a_file = tmp_path / 'a_file'
  a_file.write_text('x')
  p = main_test._main(a_file, '--config.dataset.name=npz', '--config.dataset.path=/nonexistent.npz')
  assert p.returncode == 2 and len(_errors(p)) == 1, p.stderr[-2000:]
  assert f'--workdir={a_file}: exists and is not a directory' in _errors(p)[0], _errors(p)


def test_json_is_strict():
  text = files.dumps({'a': float('nan'), 'b': [1.0, float('inf'), -float('inf')], 'c': 2.5})
  assert json.loads(text) == {'a': None, 'b': [1.0, None, None], 'c': 2.5}


def test_checkpoint_of_another_world_size_is_refused(finished):
  # The finished run's checkpoints were written by 1 process; a job of 2 refuses them in one
  # line rather than skipping them as unreadable.
  _, straight = finished
  two = checkpoints.Checkpointer(str(straight), 0, 2, lambda: None, 2)
  with pytest.raises(checkpoints.ResumeError, match='written by 1 processes .* this run has 2'):
    two.restore_newest(two.steps(), say=lambda *_: None)

"""One run per workdir, and nothing of one run mixed into another's.

- `check(path)`: before any data is loaded, the workdir can be made and written (a directory,
  or a directory that can be created, on a filesystem that is not read-only).
- `claim(...)`: before a run writes anything into its workdir, an exclusive lock on
  `WORKDIR/run.lock` (`filelock`, i.e. `flock`: the kernel releases it when its process dies,
  so the lock of a dead run is taken over, with a line naming it) and the run's fingerprint
  (`fingerprint.json`: the result-defining config fields and the data's counts, shapes, dtypes
  and content hashes). A second run while the first holds the lock, a run whose fingerprint
  differs from the one recorded, and a run that would rewrite finished results with another
  `num_epochs` are refused with one line. Under MPI rank 0 alone takes the lock (on the shared
  filesystem that every rank sees) and decides, and broadcasts the outcome: `flock` is reliable
  between the processes of one host, and per-rank locks on one file would only contend with
  each other within the same job.
- `mpi_job_size()`: the size of the MPI job this process was started in, from the environment
  of Open MPI (`OMPI_COMM_WORLD_SIZE`), PMI/PMIx launchers (`PMI_SIZE`, `PMIX_SIZE`) and Slurm's
  `srun` (`SLURM_STEP_NUM_TASKS` with `SLURM_PROCID`), read without initialising MPI, so that a
  one-host run launched on several ranks is refused before it starts.
- `writing(what, workdir)`: a full disk (ENOSPC, EDQUOT) while writing a checkpoint, the
  metrics or the results becomes `DiskFull`, one line naming the workdir and what was written;
  writes are whole or not at all (`files.py`), so nothing written earlier is lost.
"""

import contextlib
import errno
import hashlib
import os
import socket
import sys
import time

import numpy as np

from cocod_jax.config import errors
from cocod_jax.record import checkpoints
from cocod_jax.record import files

LOCK, HOLDER, FINGERPRINT, RESULTS = 'run.lock', 'run.lock.json', 'fingerprint.json', 'results.json'
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# Launchers' variables that hold the job's number of processes: (variable, launcher).
MPI_SIZE_VARIABLES = (
  ('OMPI_COMM_WORLD_SIZE', 'Open MPI'),
  ('PMI_SIZE', 'PMI'),
  ('PMIX_SIZE', 'PMIx'),
  ('SLURM_STEP_NUM_TASKS', 'Slurm srun'),
)


class WorkdirError(errors.UsageError):
  """The workdir cannot be used by this run (the message says why and what to do)."""


class DiskFull(RuntimeError):
  """A write into the workdir found the disk full; what was written before is intact."""


def mpi_job_size() -> tuple[int, str]:
  """(processes, 'VARIABLE=value') of the MPI job this process belongs to; (1, '') outside one.

  Slurm's `SLURM_STEP_NUM_TASKS` counts only inside a task that `srun` started (SLURM_PROCID
  set): a batch script itself runs once, whatever its task count.
  """
  for name, _ in MPI_SIZE_VARIABLES:
    value = os.environ.get(name, '')
    if name == 'SLURM_STEP_NUM_TASKS' and 'SLURM_PROCID' not in os.environ:
      continue
    if value.isdigit() and int(value) > 1:
      return int(value), f'{name}={value}'
  return 1, ''


def check(path: str) -> None:
  """Refuses a workdir that cannot hold a run's files; creates nothing.

  Raises:
    WorkdirError: `path` is empty, exists and is not a directory, or is (or would be created
      in) a directory this process cannot write to.
  """
  if not path:
    raise WorkdirError('--workdir is empty; allowed: a directory to create or reuse')
  where = os.path.abspath(path)
  if os.path.exists(where) and not os.path.isdir(where):
    raise WorkdirError(f'--workdir={path}: exists and is not a directory; allowed: a directory')
  existing = where
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise WorkdirError(
      f'--workdir={path} cannot be created: {existing} is not a directory; allowed: a path '
      'under a directory'
    )
  # access(2) answers for this process, root included, and says EROFS for a read-only mount.
  if not os.access(existing, os.W_OK | os.X_OK):
    if existing == where:
      problem = 'is not writable'
    else:
      problem = f'cannot be created: {existing} is not writable'
    raise WorkdirError(f'--workdir={path} {problem} by this process; allowed: a writable directory')


@contextlib.contextmanager
def writing(what: str, workdir: str):
  """Turns a full disk during the block into DiskFull naming `what` and `workdir`."""
  try:
    yield
  except OSError as e:
    if e.errno not in FULL_ERRNOS:
      raise
    raise DiskFull(_full(what, workdir, e.strerror)) from e
  except Exception as e:  # Orbax and TensorStore wrap the OSError in their own types.
    text = str(e)
    if 'No space left on device' not in text and 'Disk quota exceeded' not in text:
      raise
    raise DiskFull(_full(what, workdir, 'No space left on device')) from e


def _full(what, workdir, why):
  return (
    f'{why} while writing {what} in {os.path.abspath(workdir)}: the checkpoints and results '
    'written before are intact; free space and run the same command again to continue'
  )


# --------------------------------------------------------------------------- the fingerprint


def data_fingerprint(dataset) -> dict:
  """Counts, shapes, dtypes and a SHA-256 of each array of the dataset."""
  out = {'num_classes': int(dataset.num_classes)}
  for name in ('x_train', 'y_train', 'x_test', 'y_test'):
    a = np.ascontiguousarray(getattr(dataset, name))
    out[name] = {
      'shape': list(a.shape),
      'dtype': str(a.dtype),
      'sha256': hashlib.sha256(memoryview(a).cast('B')).hexdigest(),
    }
  return out


def fingerprint(config, dataset) -> dict:
  """What defines a run's results: the config's result fields (all but
  config_loader.NON_TRAINING_FIELDS) and the data."""
  return {
    'config': checkpoints.result_fields(config.to_dict()),
    'data': data_fingerprint(dataset),
  }


def first_difference(old: dict, new: dict) -> str | None:
  """The first difference between two fingerprints, in words; None when they are equal."""
  diffs = checkpoints.config_differences(old['config'], new['config'])
  if diffs:
    return f'config {diffs[0]}'
  a, b = old['data'], new['data']
  if a['num_classes'] != b['num_classes']:
    return f'data: {a["num_classes"]} classes -> {b["num_classes"]}'
  for name in ('x_train', 'y_train', 'x_test', 'y_test'):
    for key in ('shape', 'dtype', 'sha256'):
      if a[name][key] != b[name][key]:
        if key == 'sha256':
          return (
            f'data: the content of {name} changed ({a[name][key][:12]} -> {b[name][key][:12]}) '
            'at the same shape'
          )
        return f'data: {name} {key} {a[name][key]} -> {b[name][key]}'
  return None


# --------------------------------------------------------------------------- the lock


def _holder_text(holder) -> str:
  if not isinstance(holder, dict):
    return 'a process that left no record'
  since = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(holder.get('started', 0)))
  return f'pid {holder.get("pid")} on {holder.get("host")} since {since}'


def _share(config):
  """Rank 0's value for every rank (MPI: a broadcast on COMM_WORLD; one host: the value)."""
  if config.backend != 'mpi':
    return lambda value: value
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  return lambda value: MPI.COMM_WORLD.bcast(value, root=0)


def _is_rank0(config) -> bool:
  if config.backend != 'mpi':
    return True
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  return MPI.COMM_WORLD.Get_rank() == 0


class Claim:
  """This run's hold on its workdir: the lock (on rank 0) and the recorded fingerprint.

  Use as a context manager around the whole run; `release` lets the lock go. `finished`: the
  completed results of this very run when the workdir holds them (rank 0's; {} on other ranks),
  else None: the run has nothing to do.
  """

  def __init__(self, workdir, lock=None, finished=None, record=None):
    self.workdir, self._lock, self.finished = workdir, lock, finished
    self.record = record  # The run's config as given (a dict): what results and checkpoints hold.

  def release(self):
    if self._lock is not None:
      with contextlib.suppress(OSError):
        os.remove(os.path.join(self.workdir, HOLDER))
      self._lock.release()
      self._lock = None

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.release()
    return False


def _finished_conflict(workdir, config, results) -> str | None:
  """Why this run would rewrite finished `results` (the workdir's results.json) with another
  num_epochs (None: it would not).

  Running further is allowed where a committed checkpoint continues the finished run.
  """
  if not isinstance(results, dict) or results.get('status') not in ('completed', 'diverged'):
    return None
  done = (results.get('config') or {}).get('num_epochs')
  if done == config.num_epochs:
    return None
  root = os.path.join(workdir, 'checkpoints')
  committed = os.path.isdir(root) and any(
    os.path.exists(os.path.join(root, n, checkpoints.COMMIT)) for n in os.listdir(root)
  )
  if done is not None and config.num_epochs > done and committed:
    return None
  why = (
    'ends before them'
    if done is not None and config.num_epochs < done
    else ('has no checkpoint to continue them from')
  )
  return (
    f'{workdir} holds the {results["status"]} results of a run of num_epochs={done}; this run '
    f'(num_epochs={config.num_epochs}) {why} and would rewrite them: use another --workdir'
  )


def _take(workdir, config, dataset, say):
  """Rank 0's part of `claim`: (lock or None, refusal or None, this very run's completed results
  or None)."""
  import filelock  # pylint: disable=g-import-not-at-top

  try:
    os.makedirs(workdir, exist_ok=True)
  except OSError as e:
    return None, f'--workdir={workdir} cannot be created: {e.strerror}', None
  lock = filelock.FileLock(os.path.join(workdir, LOCK), timeout=0)
  try:
    lock.acquire()
  except filelock.Timeout:
    holder = _holder_text(files.read_json(os.path.join(workdir, HOLDER)))
    return (
      None,
      (
        f'{os.path.abspath(workdir)} is in use by another run ({holder}); wait for it to end, or '
        'use another --workdir'
      ),
      None,
    )
  stale = files.read_json(os.path.join(workdir, HOLDER))
  if stale is not None:
    say(f'taking over the lock of {workdir} from {_holder_text(stale)}, which ended without '
        'releasing it')  # fmt: skip
  try:
    with writing('the run lock', workdir):
      files.write_json_atomic(
        os.path.join(workdir, HOLDER),
        {'pid': os.getpid(), 'host': socket.gethostname(), 'started': time.time(),
         'command': sys.argv},
      )  # fmt: skip
    mine = fingerprint(config, dataset)
    recorded = files.read_json(os.path.join(workdir, FINGERPRINT))
    problem = None
    if recorded is not None:
      difference = first_difference(recorded, mine)
      if difference:
        problem = (
          f'{workdir} holds a run of another config or data ({difference}); rerun with the '
          'same config and data to continue it, or use another --workdir'
        )
    results = files.read_json(os.path.join(workdir, RESULTS))
    problem = problem or _finished_conflict(workdir, config, results)
    if problem is None and recorded != mine:  # A rerun rewrites nothing it would not change.
      with writing('the fingerprint', workdir):
        files.write_json_atomic(os.path.join(workdir, FINGERPRINT), mine)
  except BaseException:
    Claim(workdir, lock).release()
    raise
  if problem:
    Claim(workdir, lock).release()
    return None, problem, None
  return lock, None, _finished(results, config)


def _finished(results, config) -> dict | None:
  """`results` when they are this very run's, completed (same fingerprint, checked before, and
  the same num_epochs), else None."""
  if not isinstance(results, dict) or results.get('status') != 'completed':
    return None
  return results if (results.get('config') or {}).get('num_epochs') == config.num_epochs else None


def claim(workdir: str, config, dataset, say=print) -> Claim:
  """Takes `workdir` for this run (see the module docstring); every MPI rank calls it.

  Raises:
    WorkdirError: on every rank alike, when the workdir is held by another run, holds another
      fingerprint, or holds finished results this run would rewrite.
  """
  lock, problem, finished = None, None, None
  if _is_rank0(config):
    lock, problem, finished = _take(workdir, config, dataset, say)
  problem, done = _share(config)((problem, finished is not None))
  if problem:
    raise WorkdirError(problem)
  return Claim(workdir, lock, (finished or {}) if done else None, config.to_dict())

"""A point's state, read from its directory, and the lock a runner or a job holds on it.

  DONE        results.json completed, its config hashing to the point's hash
  DIVERGED    results.json diverged (finished: not rerun)
  RUNNING     a lock holding a live pid on this host, or a submitted job still queued or running
  FAILED      status.json with a non-zero exit status, or a results.json that does not follow
              `results_schema` (rerun with --retry_failed)
  INCOMPLETE  point.json but none of the above, e.g. a killed or preempted run (rerun into the
              same directory: the entry point resumes from its checkpoint)
  PENDING     nothing yet
  MISMATCH    the directory holds another config (never touched: move it aside)

and the flag STALE: point.json's commit is not HEAD. The lock (`DIR/lock`) is a JSON record of
who runs the point (pid and child pid on a host, and the submitit job it belongs to), so that any
runner, even one on another machine of a shared filesystem, can tell whether its holder lives.
`--launcher=slurm` writes it when it submits the point's job, so that the point reads RUNNING
while the job waits in the queue; the job's tasks take it over (a lock naming one's own job is
one's own). A Slurm job's state comes from submitit's job objects (`submitit.SlurmJob.state`,
which asks `sacct` once for every job watched); one of submitit's local executor is its
controller's pid. A filelock guards taking the lock (`DIR/lock.guard`): two runners that both
find a dead record never both replace it. The record itself stays ours: an flock alone dies with
the runner that held it, while the run it started (in a session of its own) may live on, and it
cannot name a Slurm job.
"""

import dataclasses
import datetime
import os
import shutil
import socket

import filelock
import submitit

from cocod_jax.config import errors
from cocod_jax.config import loader as config_loader
from cocod_jax.record import files
from cocod_jax.record import schema as results_schema
from cocod_jax.sweep import points as points_lib

FINISHED = ('DONE', 'DIVERGED')
# Slurm's job states (sacct's State column, first word) after which a job never runs again; any
# other, and UNKNOWN (not in the accounting yet, or no sacct), is a job still queued or running.
ENDED_JOB_STATES = ('BOOT_FAIL', 'CANCELLED', 'COMPLETED', 'DEADLINE', 'FAILED', 'NODE_FAIL',
                    'OUT_OF_MEMORY', 'PREEMPTED', 'TIMEOUT')  # fmt: skip
# One submitit job object per Slurm job id: a new object re-registers its id with submitit's
# shared watcher and forces another sacct call; reused ones share one call for all jobs.
_SLURM_JOBS: dict = {}


@dataclasses.dataclass(frozen=True)
class Job:
  """The submitit job that runs a point: its id, its executor ('slurm' or 'local') and the
  folder of its submitit files."""

  id: str
  cluster: str
  folder: str = ''


@dataclasses.dataclass
class State:
  """A point's state on disk; `detail` says why when it is not obvious."""

  name: str
  stale: bool | None = None  # None: no point.json to compare with.
  detail: str = ''


def now() -> str:
  """The current UTC time, to the second, as ISO 8601."""
  return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')


def _pid_alive(pid) -> bool:
  if not isinstance(pid, int) or pid <= 0:
    return False
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # Someone else's live process.
  try:  # An ended child its parent has not waited for yet (a zombie) is not alive.
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except (OSError, IndexError):
    return True


def _slurm_job(job_id: str, folder: str = '') -> 'submitit.SlurmJob':
  if job_id not in _SLURM_JOBS:
    _SLURM_JOBS[job_id] = submitit.SlurmJob(folder=folder or '.', job_id=job_id)
  return _SLURM_JOBS[job_id]


def slurm_job_state(job_id: str, folder: str = '') -> str:
  """The Slurm job's state through its submitit job object ('UNKNOWN' when sacct cannot tell)."""
  if not shutil.which('sacct'):
    return 'UNKNOWN'
  return _slurm_job(job_id, folder).state or 'UNKNOWN'


def _lock_job(lock: dict) -> Job | None:
  """The job a lock record names (records of the earlier array script: `slurm_job_id`)."""
  if lock.get('job_id'):
    return Job(str(lock['job_id']), lock.get('cluster') or 'slurm', lock.get('folder') or '')
  if lock.get('slurm_job_id'):
    return Job(str(lock['slurm_job_id']), 'slurm')
  return None


def watch_jobs(directories) -> None:
  """Registers the Slurm jobs named by the locks in `directories` with submitit's watcher and
  refreshes their states with one sacct call for all of them (not one each, and not the
  watcher's cache, which may be minutes old in a long-lived process)."""
  jobs = []
  for d in directories:
    lock = files.read_json(os.path.join(d, 'lock'))
    job = _lock_job(lock) if isinstance(lock, dict) else None
    if job and job.cluster == 'slurm' and shutil.which('sacct'):
      jobs.append(_slurm_job(job.id, job.folder))
  if jobs:
    jobs[0].watcher.update()


def lock_holder(directory: str, own_job: Job | None = None) -> str | None:
  """Who holds the point's lock ('pid 12 on host', 'Slurm job 7_3 (PENDING)'), None when nobody
  live does, or when the holder is `own_job` (a job taking over the lock written at submission).

  A lock naming a Slurm job holds while the job is not in ENDED_JOB_STATES (without sacct:
  always); one with pids, or a job of submitit's local executor (its controller's pid), holds
  while one of them lives on this host. Another host's pids cannot be checked here: that lock
  does not hold (its run shows as INCOMPLETE).
  """
  lock = files.read_json(os.path.join(directory, 'lock'))
  if not isinstance(lock, dict):
    return None
  job = _lock_job(lock)
  if job is not None and own_job is not None and job.id == own_job.id:
    return None
  if job is not None and job.cluster == 'slurm':
    s = slurm_job_state(job.id, job.folder)
    return None if s.split()[0].upper() in ENDED_JOB_STATES else f'Slurm job {job.id} ({s})'
  if lock.get('host') != socket.gethostname():
    return None
  if job is not None and job.id.isdigit() and _pid_alive(int(job.id)):
    return f'submitit {job.cluster} job {job.id} on {lock["host"]}'
  for key in ('pid', 'child_pid'):
    if _pid_alive(lock.get(key)):
      return f'pid {lock[key]} on {lock["host"]}'
  return None


def take_lock(directory: str, job: Job | None = None, pid: int | None = -1) -> bool:
  """Writes a lock record into `directory` unless someone live (not `job`) holds it.

  Args:
    directory: the point's directory.
    job: the submitit job the holder belongs to, or None (a run of the local runner).
    pid: the holder's pid; -1 (default) for this process, None for none (a job's lock written
      at submission, before any of its processes exists).

  Returns:
    Whether the lock is now ours.
  """
  path = os.path.join(directory, 'lock')
  os.makedirs(directory, exist_ok=True)
  with filelock.FileLock(path + '.guard', timeout=60):
    if lock_holder(directory, job):
      return False
    record = dict(pid=os.getpid() if pid == -1 else pid, host=socket.gethostname())
    if job is not None:
      record.update(job_id=job.id, cluster=job.cluster, folder=job.folder)
    files.write_json_atomic(path, dict(record, started=now()), indent=None)
  return True


def note_child(directory: str, pid: int) -> None:
  """Adds the run's own pid to the lock record (it may outlive the runner)."""
  path = os.path.join(directory, 'lock')
  files.write_json_atomic(path, dict(files.read_json(path) or {}, child_pid=pid))


def release_lock(directory: str) -> None:
  """Removes the lock record (the guard file stays: removing it would race a taker)."""
  try:
    os.remove(os.path.join(directory, 'lock'))
  except FileNotFoundError:
    pass


def _stale(info, head) -> bool | None:
  if not isinstance(info, dict) or not head:
    return None
  return head != 'unknown' and info.get('commit', 'unknown') != head


def _from_results(point, results, stale) -> State:
  """The state of a point whose results.json says it ended (completed or diverged)."""
  where = os.path.join(point.dir, 'results.json')
  try:
    results_schema.check_results(results, where)
  except results_schema.SchemaError as e:
    return State('FAILED', stale, str(e))
  recorded = points_lib.config_hash(results.get('config') or {}, point.link_rate)
  if recorded != point.hash:
    fields = differences(results.get('config') or {}, point.config)
    return State(
      'MISMATCH',
      stale,
      f"results.json's config hashes to {recorded}, not {point.hash} "
      f'(differs at {", ".join(fields[:5]) or "fields left out of the hash"})',
    )
  return State('DONE' if results['status'] == 'completed' else 'DIVERGED', stale)


def state(point: points_lib.Point, head: str | None = None, own_job: Job | None = None) -> State:
  """The state of `point` from its directory (see the module docstring for the rules).

  Args:
    point: the point.
    head: HEAD's commit (provenance.commit()), for the STALE flag; None leaves the flag unset.
    own_job: the job asking (its own lock does not make the point RUNNING), or None.

  Returns:
    The State.
  """
  d = point.dir
  info = files.read_json(os.path.join(d, 'point.json'))
  stale = _stale(info, head)
  holder = lock_holder(d, own_job)
  if holder:
    return State('RUNNING', stale, holder)
  if isinstance(info, dict) and info.get('hash') not in (None, point.hash):
    return State(
      'MISMATCH', stale, f"point.json's hash {info.get('hash')} is not the point's {point.hash}"
    )
  results = files.read_json(os.path.join(d, 'results.json'))
  if isinstance(results, dict) and results.get('status') in ('completed', 'diverged'):
    return _from_results(point, results, stale)
  status = files.read_json(os.path.join(d, 'status.json'))
  if isinstance(status, dict):
    rc = status.get('rc')
    if rc == errors.EXIT_PREEMPTED:
      return State('INCOMPLETE', stale, 'preempted (a rerun resumes from its checkpoint)')
    if rc != 0:
      return State('FAILED', stale, f'exit status {rc}')
  if isinstance(info, dict):
    return State('INCOMPLETE', stale)
  return State('PENDING')


def states(points: list, head: str | None) -> dict:
  """{directory: State} of `points` (their Slurm jobs polled together)."""
  watch_jobs(p.dir for p in points)
  return {p.dir: state(p, head) for p in points}


def differences(a: dict, b: dict) -> list[str]:
  """Dotted fields whose values differ between nested dicts `a` and `b`, sorted."""
  flat_a, flat_b = config_loader.flatten(a), config_loader.flatten(b)
  return [k for k in sorted(set(flat_a) | set(flat_b)) if flat_a.get(k) != flat_b.get(k)]


def collect(points: list, head: str) -> list[dict]:
  """Per-point records read from disk, in the sweep's order.

  Args:
    points: from `points.expand`.
    head: HEAD's commit.

  Returns:
    One dict per point: slug, dir, hash, state, stale (bool or None), detail, config_file,
    config_arg, overrides, rc and wall_s (status.json, or None), metrics (results.json's
    "final", or None) and results (the parsed results.json of a DONE or DIVERGED point, else
    None).
  """
  records = []
  watch_jobs(p.dir for p in points)
  for p in points:
    s = state(p, head)
    results = files.read_json(os.path.join(p.dir, 'results.json')) if s.name in FINISHED else None
    status = files.read_json(os.path.join(p.dir, 'status.json')) or {}
    record = {k: getattr(p, k) for k in ('slug', 'dir', 'hash')}
    record.update(state=s.name, stale=s.stale, detail=s.detail)
    record.update({k: getattr(p, k) for k in ('config_file', 'config_arg', 'overrides')})
    record.update(rc=status.get('rc'), wall_s=status.get('wall_s'))
    records.append(dict(record, metrics=(results or {}).get('final'), results=results))
  return records


def to_run(points: list, states: dict, retry_failed: bool, rerun_stale: bool) -> list:
  """The points a run starts (one per directory), in order."""
  out, dirs = [], set()
  for p in points:
    s = states[p.dir]
    wanted = s.name in ('PENDING', 'INCOMPLETE') or (s.name == 'FAILED' and retry_failed)
    wanted = wanted or (rerun_stale and s.stale and s.name not in ('RUNNING', 'MISMATCH'))
    if wanted and p.dir not in dirs:
      dirs.add(p.dir)
      out.append(p)
  return out


def move_aside(directory: str) -> str:
  """Renames a STALE point's directory to `<dir>.stale-<its commit>[-n]`; returns the new name."""
  info = files.read_json(os.path.join(directory, 'point.json')) or {}
  base = f'{directory}.stale-{(info.get("commit") or "unknown")[:8]}'
  target, n = base, 1
  while os.path.exists(target):
    n += 1
    target = f'{base}-{n}'
  os.rename(directory, target)
  return target

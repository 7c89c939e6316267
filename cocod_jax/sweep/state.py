"""A point's state, read from its directory, and the lock a runner holds on it while it runs.

  DONE        results.json completed, its config hashing to the point's hash
  DIVERGED    results.json diverged (finished: not rerun)
  RUNNING     a lock holding a live pid on this host, or a Slurm job id still queued
  FAILED      status.json with a non-zero exit status, or a results.json that does not follow
              `results_schema` (rerun with --retry_failed)
  INCOMPLETE  point.json but none of the above, e.g. a killed or preempted run (rerun into the
              same directory: the entry point resumes from its checkpoint)
  PENDING     nothing yet
  MISMATCH    the directory holds another config (never touched: move it aside)

and the flag STALE: point.json's commit is not HEAD. The lock (`DIR/lock`) is a JSON record of
who runs the point (pid and child pid on a host, or a Slurm job id), so that any runner, even one
on another machine of a shared filesystem, can tell whether its holder lives. A filelock guards
taking it (`DIR/lock.guard`): two runners that both find a dead record never both replace it.
The record itself stays ours: an flock alone dies with the runner that held it, while the run it
started (in a session of its own) may live on, and it cannot name a Slurm job.
"""

import dataclasses
import datetime
import json
import os
import shutil
import socket
import subprocess

import filelock

from cocod_jax import config_files
from cocod_jax import files
from cocod_jax import results_schema
from cocod_jax.sweep import points as points_lib

FINISHED = ('DONE', 'DIVERGED')
EXIT_PREEMPTED = 75  # checkpoints.EXIT_PREEMPTED; not imported, as that module starts JAX.


@dataclasses.dataclass
class State:
  """A point's state on disk; `detail` says why when it is not obvious."""

  name: str
  stale: bool | None = None  # None: no point.json to compare with.
  detail: str = ''


def now() -> str:
  """The current UTC time, to the second, as ISO 8601."""
  return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')


def read_json(path: str):
  """The parsed JSON file at `path`, or None when it is missing or unreadable."""
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def _pid_alive(pid) -> bool:
  if not isinstance(pid, int) or pid <= 0:
    return False
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # Someone else's live process.
  return True


def _slurm_job_alive(job_id: str) -> bool:
  """Whether Slurm still has `job_id` (queued or running); True when squeue cannot tell."""
  if not shutil.which('squeue'):
    return True
  try:
    p = subprocess.run(
      ['squeue', '-h', '-j', str(job_id), '-o', '%T'], capture_output=True, text=True, timeout=30
    )
  except (OSError, subprocess.SubprocessError):
    return True
  if p.returncode != 0:
    return 'invalid job id' not in p.stderr.lower()
  return bool(p.stdout.strip())


def lock_holder(directory: str) -> str | None:
  """Who holds the point's lock ('pid 12 on host', 'Slurm job 7_3'), None when nobody live does.

  A lock with a Slurm job id holds while Slurm knows the job (without squeue: always); one with
  pids holds while one of them lives on this host. Another host's pids cannot be checked here:
  that lock does not hold (its run shows as INCOMPLETE).
  """
  lock = read_json(os.path.join(directory, 'lock'))
  if not isinstance(lock, dict):
    return None
  job = lock.get('slurm_job_id')
  if job:
    return f'Slurm job {job}' if _slurm_job_alive(job) else None
  if lock.get('host') != socket.gethostname():
    return None
  for key in ('pid', 'child_pid'):
    if _pid_alive(lock.get(key)):
      return f'pid {lock[key]} on {lock["host"]}'
  return None


def take_lock(directory: str, slurm_job_id: str | None) -> bool:
  """Writes this process's lock record into `directory` unless someone live holds it.

  Returns:
    Whether the lock is now ours.
  """
  path = os.path.join(directory, 'lock')
  with filelock.FileLock(path + '.guard', timeout=60):
    if lock_holder(directory):
      return False
    record = dict(pid=os.getpid(), host=socket.gethostname(), slurm_job_id=slurm_job_id)
    files.write_json_atomic(path, dict(record, started=now()), indent=None)
  return True


def note_child(directory: str, pid: int) -> None:
  """Adds the run's own pid to the lock record (it may outlive the runner)."""
  path = os.path.join(directory, 'lock')
  files.write_json_atomic(path, dict(read_json(path) or {}, child_pid=pid))


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


def state(point: points_lib.Point, head: str | None = None) -> State:
  """The state of `point` from its directory (see the module docstring for the rules).

  Args:
    point: the point.
    head: HEAD's commit (provenance.commit()), for the STALE flag; None leaves the flag unset.

  Returns:
    The State.
  """
  d = point.dir
  info = read_json(os.path.join(d, 'point.json'))
  stale = _stale(info, head)
  holder = lock_holder(d)
  if holder:
    return State('RUNNING', stale, holder)
  if isinstance(info, dict) and info.get('hash') not in (None, point.hash):
    return State(
      'MISMATCH', stale, f"point.json's hash {info.get('hash')} is not the point's {point.hash}"
    )
  results = read_json(os.path.join(d, 'results.json'))
  if isinstance(results, dict) and results.get('status') in ('completed', 'diverged'):
    return _from_results(point, results, stale)
  status = read_json(os.path.join(d, 'status.json'))
  if isinstance(status, dict):
    rc = status.get('rc')
    if rc == EXIT_PREEMPTED:
      return State('INCOMPLETE', stale, 'preempted (a rerun resumes from its checkpoint)')
    if rc != 0:
      return State('FAILED', stale, f'exit status {rc}')
  if isinstance(info, dict):
    return State('INCOMPLETE', stale)
  return State('PENDING')


def differences(a: dict, b: dict) -> list[str]:
  """Dotted fields whose values differ between nested dicts `a` and `b`, sorted."""
  flat_a, flat_b = config_files.flatten(a), config_files.flatten(b)
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
  for p in points:
    s = state(p, head)
    results = read_json(os.path.join(p.dir, 'results.json')) if s.name in FINISHED else None
    status = read_json(os.path.join(p.dir, 'status.json')) or {}
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
  info = read_json(os.path.join(directory, 'point.json')) or {}
  base = f'{directory}.stale-{(info.get("commit") or "unknown")[:8]}'
  target, n = base, 1
  while os.path.exists(target):
    n += 1
    target = f'{base}-{n}'
  os.rename(directory, target)
  return target

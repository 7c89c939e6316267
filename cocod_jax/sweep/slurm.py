"""The sweep on Slurm through submitit: a job per point, one array per kind of point.

`--launcher=slurm` (`start`) submits each point to run as a submitit job of `PointTask`; points
with the same number of tasks go into one job array (`executor.batch()`) whose parallelism is
`--parallel`. A one-host point is one task; an MPI point of N workers is N tasks, each one MPI
rank: every task starts `python -m cocod_jax.main ...` as a child process, and global rank 0 alone
does the point's bookkeeping (lock, point.json, status.json, log.txt; the other ranks log to
log.rank<R>.txt). The submission writes the point's lock naming its job, so the point reads
RUNNING while the job is queued (state.py polls its state through submitit's job objects).
`--dry_run` prints the sbatch text submitit would submit. With `slurm_cluster='local'` the same
jobs go to submitit's local executor (processes here; an MPI point is then one task that starts
its ranks with launch/mpirun.sh, as the local runner does): the tests run that.

Preemption and the time limit: Slurm sends SIGUSR2 `SIGNAL_DELAY_S` before the limit (or at
preemption, where the site sends the user signal). The task passes it on to the run as SIGTERM
(the run's own copy of SIGUSR2 is ignored: it starts with SIGUSR2 ignored); on rank 0 submitit
then calls `PointTask.checkpoint`, which waits for the run to write its checkpoint and exit 75
and returns the resubmission; submitit requeues the job and the next attempt resumes the run.
A run that exits 75 of its own (Slurm's SIGTERM reached it directly) is handed to the same path.
A SIGTERM reaching a task under Slurm reached the run too (the same step), so it is not passed on
again (a second SIGTERM makes a run exit at once, without a checkpoint).

What this relies on in submitit 1.5.4's source (pinned exactly in requirements.txt):
- slurm/slurm.py `_make_sbatch_string`: the job is `#SBATCH --nodes` x `--ntasks-per-node`
  tasks started by `srun ... <srun_args> python -u -m submitit.core._submit FOLDER`, so with
  `srun_args=['--mpi=pmix']` each task carries PMIx's environment, which a child process
  inherits and initializes MPI from as that rank (the task itself never imports MPI).
- core/submission.py `process_job`: every task unpickles the same callable and calls it;
  `JobEnvironment().global_rank` is SLURM_PROCID (local: SUBMITIT_LOCAL_GLOBALID).
- core/job_environment.py: before the call SIGUSR2 is bound to `checkpoint_and_try_requeue`,
  SIGTERM and SIGCONT to a handler that only logs; on global rank 0 the former calls the
  callable's `checkpoint()`, writes the DelayedSubmission it returns over the job's pickle,
  `scontrol requeue`s the job (local executor: exits 144 and its controller restarts the tasks,
  local/local.py) and exits; on other ranks it returns. A signal after 80% of the job's time
  counts as a timeout, requeued at most `max_num_timeout` (3) times.
- `SlurmJob.state` asks `sacct` through one watcher shared by all job objects.
- the dry run calls the private `_make_sbatch_string` with the parameters SlurmExecutor holds
  and rebuilds its task command (`_submitit_command_str`); a test submits through a stand-in
  sbatch and compares the two texts, so a change of submitit shows there.
"""

import contextlib
import dataclasses
import math
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time

import submitit
from submitit.core import utils as submitit_utils
from submitit.slurm import slurm as submitit_slurm

from cocod_jax import errors
from cocod_jax import files
from cocod_jax import flags as cocod_flags
from cocod_jax import provenance
from cocod_jax.sweep import local
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import report
from cocod_jax.sweep import state as state_lib

CLUSTERS = ('slurm', 'local')
DEFAULT_TIME_MIN = 24 * 60  # submitit always writes --time (its default: 5 min); ours: a day.
SIGNAL_DELAY_S = 120  # SIGUSR2 this long before the limit: the run finishes a round, checkpoints.
GO_WAIT_S = 600.0  # How long the other ranks wait for rank 0 to decide whether the point runs.
POLL_S = 0.2
# sbatch options the runner sets itself (from the sweep and the points), not --slurm_arg.
RESERVED = ('job_name', 'array', 'nodes', 'ntasks', 'output', 'error', 'signal', 'requeue',
            'open_mode', 'wrap')  # fmt: skip
_TIME = re.compile(r'(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?')


class SubmitError(RuntimeError):
  """sbatch (or submitit's local executor) refused a job; the points submitted before keep
  their jobs."""


@dataclasses.dataclass
class SlurmOptions:
  """--slurm_arg parsed: the time limit in minutes, ranks per node (None: all on one node), and
  the other sbatch options ({name with underscores: value, True for a bare flag})."""

  minutes: int = DEFAULT_TIME_MIN
  tasks_per_node: int | None = None
  sbatch: dict = dataclasses.field(default_factory=dict)


def _minutes(text: str) -> int | None:
  """Slurm's time formats (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in whole minutes, or None."""
  m = _TIME.fullmatch(text.strip())
  if not m:
    return None
  days, a, b, c = (int(x) if x else None for x in m.groups())
  if days is not None:  # D-H[:M[:S]]
    seconds = ((days * 24 + a) * 60 + (b or 0)) * 60 + (c or 0)
  elif b is None:  # M
    seconds = a * 60
  elif c is None:  # M:S
    seconds = a * 60 + b
  else:  # H:M:S
    seconds = (a * 60 + b) * 60 + c
  return max(1, math.ceil(seconds / 60))


def parse_slurm_args(args) -> SlurmOptions:
  """The --slurm_arg options (`--NAME=VALUE` or `--NAME`, as in `#SBATCH` lines).

  Raises:
    errors.UsageError: an option that is not a long sbatch option, one the runner sets itself,
      a time limit submitit cannot take (it needs minutes) or a bad --ntasks-per-node.
  """
  out, problems = SlurmOptions(), []
  for arg in args:
    name, sep, value = arg[2:].partition('=')
    key = name.replace('-', '_')
    if not arg.startswith('--') or not name:
      problems.append(
        f'--slurm_arg={arg} is invalid; allowed: a long sbatch option, --NAME=VALUE or --NAME '
        '(e.g. --partition=gpu)'
      )
    elif key in RESERVED:
      problems.append(
        f'--slurm_arg={arg} is invalid: the runner sets --{name} itself (from the sweep and its '
        'points); allowed: other sbatch options'
      )
    elif key == 'time':
      minutes = _minutes(value)
      if minutes is None:
        problems.append(
          f'--slurm_arg={arg} is invalid; allowed: a time limit as M, M:S, H:M:S, D-H, D-H:M or '
          'D-H:M:S (submitit needs a finite limit)'
        )
      out.minutes = minutes or out.minutes
    elif key == 'ntasks_per_node':
      if not value.isdigit() or int(value) < 1:
        problems.append(f'--slurm_arg={arg} is invalid; allowed: an integer >= 1')
      else:
        out.tasks_per_node = int(value)
    else:
      out.sbatch[key] = value if sep else True
  if problems:
    raise errors.UsageError(problems)
  return out


def _ranks(point, cluster: str) -> int:
  """The job's tasks for `point`: its MPI ranks under Slurm, else 1 (one-host; or MPI under
  submitit's local executor, where the task starts the ranks with launch/mpirun.sh)."""
  return point.num_workers if cluster == 'slurm' and point.backend == 'mpi' else 1


def slurm_parameters(launch_, options: SlurmOptions, ranks: int, mpi: bool) -> dict:
  """The parameters of SlurmExecutor (the names of `_make_sbatch_string`) for jobs of `ranks`
  tasks; `launch_` is a launchers.Launch.

  Raises:
    errors.UsageError: `ranks` does not split into whole nodes of --ntasks-per-node tasks.
  """
  per_node = min(options.tasks_per_node or ranks, ranks)
  if ranks % per_node:
    raise errors.UsageError(
      f'--slurm_arg=--ntasks-per-node={options.tasks_per_node} is invalid for points of {ranks} '
      f'MPI ranks; allowed: a divisor of {ranks}'
    )
  return dict(
    job_name=points_lib.sweep_name(launch_.config),
    time=options.minutes,
    nodes=ranks // per_node,
    ntasks_per_node=per_node,
    signal_delay_s=SIGNAL_DELAY_S,
    array_parallelism=launch_.parallel,
    stderr_to_stdout=True,
    srun_args=['--mpi=pmix'] if mpi else [],
    # Several processes may share a GPU; do not let each JAX process take 75% of its memory.
    setup=['export XLA_PYTHON_CLIENT_PREALLOCATE=false'],
    additional_parameters=dict(requeue=True, **options.sbatch),
  )


def _executor_kwargs(params: dict, cluster: str) -> dict:
  """AutoExecutor's update_parameters arguments for `params` (slurm_parameters)."""
  if cluster == 'slurm':
    return {f'slurm_{k}': v for k, v in params.items()}
  return dict(  # The local executor takes the generic names only, one node.
    name=params['job_name'],
    timeout_min=params['time'],
    tasks_per_node=params['ntasks_per_node'],
    stderr_to_stdout=True,
  )


def _groups(launch_) -> list:
  """[(ranks, mpi, points)]: the points of `launch_.todo` by their jobs' shape, in order."""
  groups = {}
  for p in launch_.todo:
    key = (_ranks(p, launch_.slurm_cluster), p.backend == 'mpi')
    groups.setdefault(key, []).append(p)
  return [(ranks, mpi, ps) for (ranks, mpi), ps in groups.items()]


def folder(launch_) -> str:
  """submitit's folder: `WORKDIR/sweeps/<name>/submitit/<job id>` (pickles, task logs)."""
  return os.path.join(report.summary_dir(launch_.workdir, launch_.config), 'submitit', '%j')


def sbatch_text(folder_: str, params: dict, n_jobs: int) -> str:
  """The sbatch file SlurmExecutor writes for `n_jobs` submissions (an array when > 1) with
  `params` (slurm_parameters), through submitit's private `_make_sbatch_string`."""
  path = str(pathlib.Path(folder_).expanduser().absolute())  # As submitit's Executor holds it.
  task = [shlex.quote(sys.executable), '-u -m submitit.core._submit', shlex.quote(path)]
  command = ' '.join(task)
  map_count = n_jobs if n_jobs > 1 else None
  return submitit_slurm._make_sbatch_string(  # pylint: disable=protected-access
    command=command, folder=path, map_count=map_count, **params
  )


def describe(launch_) -> str:
  """The launcher's `describe`: the sbatch text of each job or array `start` would submit."""
  if not launch_.todo:
    return ''
  options = parse_slurm_args(launch_.slurm_args)
  out = []
  for ranks, mpi, points in _groups(launch_):
    names = ', '.join(os.path.basename(p.dir) for p in points)
    kind = f'an array of {len(points)} jobs' if len(points) > 1 else 'a job'
    params = slurm_parameters(launch_, options, ranks, mpi)
    if launch_.slurm_cluster != 'slurm':
      out.append(f"\n{kind} of {ranks} task(s) to submitit's local executor: {names}\n")
      continue
    out.append(f'\nsubmitit would submit {kind} of {ranks} task(s) ({names}) with sbatch:\n')
    out.append(sbatch_text(folder(launch_), params, len(points)))
  return ''.join(out)


def _executor(launch_):
  try:
    return submitit.AutoExecutor(folder=folder(launch_), cluster=launch_.slurm_cluster)
  except RuntimeError as e:  # SlurmExecutor: 'Could not detect "srun", ...'.
    raise errors.UsageError(
      f'--launcher=slurm: no Slurm here ({e}); run it on a Slurm login node, or see what it '
      'would submit with --dry_run'
    ) from e


def _submit_group(executor, launch_, options, group) -> list:
  """Submits one group's points (an array when several); returns their submitit jobs."""
  ranks, mpi, points = group
  params = slurm_parameters(launch_, options, ranks, mpi)
  executor.update_parameters(**_executor_kwargs(params, launch_.slurm_cluster))
  launcher = 'slurm' if launch_.slurm_cluster == 'slurm' else 'local'
  try:
    with executor.batch():
      jobs = [
        executor.submit(
          PointTask(
            p, points_lib.command(p, launcher), ranks, launch_.retry_failed, launch_.timeout_s
          )
        )
        for p in points
      ]
  except (OSError, subprocess.SubprocessError, submitit_utils.FailedJobError) as e:
    raise SubmitError(f'the job of {len(points)} point(s) was not submitted: {e}') from e
  for p, job in zip(points, jobs):
    owner = state_lib.Job(job.job_id, launch_.slurm_cluster, str(job.paths.folder))
    state_lib.take_lock(p.dir, owner, pid=None)  # False: the job has taken it already.
    where = 'Slurm' if launch_.slurm_cluster == 'slurm' else "submitit's local executor"
    print(f'submitted {os.path.basename(p.dir)}: {where} job {job.job_id} ({ranks} task(s))')
  return jobs


def start(launch_) -> list:
  """The launcher's `start`: submits `launch_.todo` (STALE directories moved aside first with
  rerun_stale) and writes each point's lock naming its job; returns the submitit jobs.

  Raises:
    errors.UsageError: bad --slurm_arg, or no Slurm here; nothing was written.
    SubmitError: sbatch refused a job (the points submitted before keep their jobs).
  """
  name = points_lib.sweep_name(launch_.config)
  if not launch_.todo:
    print(f'sweep {name}: nothing to submit (no point to run: see the table)')
    return []
  options = parse_slurm_args(launch_.slurm_args)
  groups = _groups(launch_)
  for ranks, mpi, _ in groups:  # Refused before anything is submitted.
    slurm_parameters(launch_, options, ranks, mpi)
  executor = _executor(launch_)
  for p in launch_.todo:
    s = launch_.states[p.dir]
    if launch_.rerun_stale and s.stale and os.path.isdir(p.dir) and s.name != 'PENDING':
      print(f'moved aside (stale): {state_lib.move_aside(p.dir)}')
  print(f'sweep {name}: submitting {len(launch_.todo)} of {len(launch_.states)} points')
  jobs = [j for g in groups for j in _submit_group(executor, launch_, options, g)]
  where = os.path.dirname(folder(launch_))
  print(f'submitit files and task logs in {where}; run the runner again for the states')
  return jobs


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
  """

  point: points_lib.Point
  command: list
  ranks: int
  retry_failed: bool = False
  timeout_s: float = cocod_flags.DEFAULT_TIMEOUT_S
  attempt: int = 1
  # This attempt's run (rank 0), process and whether it got SIGTERM: never resubmitted.
  _run: 'local.Run | None' = dataclasses.field(default=None, init=False, repr=False)
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

  def _tell_ranks(self, env, go: bool) -> None:
    if self.ranks > 1:
      path, token = self._rendezvous(env)
      files.write_json_atomic(path, dict(token=token, go=go))

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
    preempted = run.proc.returncode == state_lib.EXIT_PREEMPTED and not run.timed_out
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

  def _follow(self, env) -> dict:
    """Another rank: waits for rank 0's decision, then runs its own process of the point."""
    rank = env.global_rank
    path, token = self._rendezvous(env)
    deadline = time.monotonic() + GO_WAIT_S
    record = None
    while time.monotonic() < deadline:
      record = state_lib.read_json(path)
      if isinstance(record, dict) and record.get('token') == token:
        break
      time.sleep(POLL_S)
    else:
      print(f'rank {rank}: no word from rank 0 in {GO_WAIT_S:g} s ({path})', flush=True)
      return dict(rank=rank, ran=False)
    if not record['go']:
      return dict(rank=rank, ran=False)
    log_path = os.path.join(self.point.dir, f'log.rank{rank}.txt')
    with open(log_path, 'ab') as log:
      self._proc = local.spawn(self.command, log, (_preemption_signal(),))
      start = time.monotonic()
      run = local.Run(self.point, f'rank {rank}', self._proc, log, 0, start, start + self.timeout_s)
      while self._proc.poll() is None:
        local.check_deadline(run)
        time.sleep(POLL_S)
    return dict(rank=rank, ran=True, rc=self._proc.returncode)

"""The sweep on Slurm through submitit: a job per point, one array per shape of job.

`--launcher=slurm` (`start`) submits each point as a submitit job of `task.PointTask`; points
whose jobs have the same shape go into one job array (`executor.batch()`), its parallelism
`--parallel`. A one-host point is one task; an MPI point of N workers is N tasks (on one node,
or N/M nodes with --slurm_arg=--ntasks-per-node=M), each one MPI rank: `srun --mpi=pmix` starts
them (task.py says what each does). The submission writes the point's lock naming its job, so
the point reads RUNNING while the job is queued (state.py polls job states through submitit's
job objects), and a second submission skips it. `--dry_run` prints the sbatch text submitit
would submit. With `slurm_cluster='local'` the same jobs go to submitit's local executor
(processes here; an MPI point is then one task that starts its ranks with launch/mpirun.sh, as
the local runner does): the tests run that.

What this relies on in submitit 1.5.4's source (pinned exactly in requirements.txt):
- slurm/slurm.py `_make_sbatch_string`: the job is `#SBATCH --nodes` x `--ntasks-per-node`
  tasks, started by one `srun --unbuffered --output .. <srun_args> python -u -m
  submitit.core._submit FOLDER` line; `--signal=USR2@<signal_delay_s>` (job steps only);
  `additional_parameters` become further `#SBATCH` lines, and `setup` lines run before srun.
  submitit always writes `--time` (default 5 min), in minutes (it computes with the number):
  hence our default of a day and --time converted to minutes.
- AutoExecutor passes `slurm_<name>` parameters to SlurmExecutor as they are; the local
  executor takes the generic names (timeout_min, tasks_per_node) and refuses nodes > 1.
- `SlurmExecutor` needs `srun` on PATH; a batch of several submissions is one array.
- the dry run calls the private `_make_sbatch_string` with the parameters SlurmExecutor holds
  and rebuilds its task command (`_submitit_command_str`); a test submits through a stand-in
  sbatch and compares the two texts, so a change of submitit shows there.
"""

import dataclasses
import math
import os
import pathlib
import re
import shlex
import subprocess
import sys

import submitit
from submitit.core import utils as submitit_utils
from submitit.slurm import slurm as submitit_slurm

from cocod_jax.config import errors
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import report
from cocod_jax.sweep import state as state_lib
from cocod_jax.sweep import task

CLUSTERS = ('slurm', 'local')
DEFAULT_TIME_MIN = 24 * 60  # submitit always writes --time (its default: 5 min); ours: a day.
SIGNAL_DELAY_S = 120  # SIGUSR2 this long before the limit: the run finishes a round, checkpoints.
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
  return point.ranks if cluster == 'slurm' and point.backend == 'mpi' else 1


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
          task.PointTask(
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

"""The sweep on Slurm: a job array whose tasks run one pending point each.

`--launcher=slurm` writes `pending.json` (the points not finished, with their commands) and the
array script `sweep.sbatch` beside the summary; each task runs
`python -m cocod_jax.sweep ... --run_index=$SLURM_ARRAY_TASK_ID` (`run_task`), MPI ranks through
`srun`, and requeues itself when its run was preempted (exit 75, checkpoint written). Rerunning
the runner later recomputes the states (a task's lock names its job, which squeue confirms).

Kept ours rather than submitit's for now: submitit pickles one Python call per task and starts
it on every task of the allocation, while an MPI point needs one runner per task that starts N
ranks with `srun`; and the script here is a file users read, edit and submit from a login node
(its text is pinned by a golden test). No Slurm was at hand to try a submitit path against.
"""

import os
import shlex
import shutil
import subprocess
import sys

from cocod_jax import config_files
from cocod_jax import errors
from cocod_jax import files
from cocod_jax import flags as cocod_flags
from cocod_jax import provenance
from cocod_jax.sweep import local
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import report
from cocod_jax.sweep import state as state_lib


def runner_flags(retry_failed, rerun_stale, timeout_s, overrides, overrides_as_text) -> list:
  """The runner flags an array task passes on (those the array was written with)."""
  out = []
  for path, value in (overrides or {}).items():
    out.append(f'--set={path}={value if overrides_as_text else config_files.value_text(value)}')
  if retry_failed:
    out.append('--retry_failed')
  if rerun_stale:
    out.append('--rerun_stale')
  if timeout_s != cocod_flags.DEFAULT_TIMEOUT_S:
    out.append(f'--timeout_s={timeout_s:g}')
  return out


def slurm_script(config, workdir, pending, parallel, flags=(), slurm_args=()) -> str:
  """The array job that runs each point of `pending` (from pending.json) as one task.

  Args:
    config: the sweep's `FILE[:ARG]`.
    workdir: the sweep's working directory.
    pending: the points of pending.json (dicts with workers and backend).
    parallel: tasks at once (`%K` of --array).
    flags: flags the tasks pass on to the runner (--set, --retry_failed, ...).
    slurm_args: extra `#SBATCH` options (e.g. '--partition=gpu', '--time=24:00:00').

  Returns:
    The script's text.
  """
  workdir = os.path.abspath(workdir)
  out, name = report.summary_dir(workdir, config), points_lib.sweep_name(config)
  ranks = max([p.get('ranks', p['workers']) for p in pending if p['backend'] == 'mpi'] or [1])
  task = [sys.executable, '-m', 'cocod_jax.sweep', f'--config={config}', f'--workdir={workdir}']
  task = shlex.join(task + list(flags)) + ' --run_index="$SLURM_ARRAY_TASK_ID"'
  lines = [
    '#!/bin/bash',
    f'# Sweep {name}: {len(pending)} points of {config}, one per array task',
    '# (written by cocod_jax.sweep from pending.json beside this file). Submit it with',
    f'#   sbatch {os.path.join(out, "sweep.sbatch")}',
    '# then run the runner again (same --config and --workdir) for the states and the table.',
    '# A preempted task (SIGTERM 120 s before the end) checkpoints, exits 75 and requeues itself.',
    f'#SBATCH --job-name={name}',
    f'#SBATCH --array=0-{len(pending) - 1}%{parallel}',
    f'#SBATCH --output={os.path.join(out, "%x-%A_%a.out")}',
    f'#SBATCH --ntasks={ranks}',
    '#SBATCH --signal=B:TERM@120',
    '#SBATCH --requeue',
    *[f'#SBATCH {a}' for a in slurm_args],
    'set -euo pipefail',
    f'cd {shlex.quote(provenance.ROOT)}',
    '# Several processes may share a node; do not let each JAX process take 75% of a GPU.',
    'export XLA_PYTHON_CLIENT_PREALLOCATE=false',
    f'exec {task}',
  ]
  return '\n'.join(lines) + '\n'


def pending_entries(points: list, states: dict) -> list[dict]:
  """pending.json's entries: index, slug, dir, hash, state, backend, workers and command."""
  return [
    dict(
      index=i,
      slug=p.slug,
      dir=p.dir,
      hash=p.hash,
      state=states[p.dir].name,
      backend=p.backend,
      workers=p.num_workers,
      ranks=p.ranks,
      command=points_lib.command(p, 'slurm'),
    )
    for i, p in enumerate(points)
  ]


def write_array(config, workdir, todo, states, head, parallel, flags, slurm_args) -> str | None:
  """Writes pending.json and sweep.sbatch over the points `todo`; returns the script's path (None
  when there is nothing to run)."""
  if not todo:
    return None
  out = report.summary_dir(workdir, config)
  os.makedirs(out, exist_ok=True)
  entries = pending_entries(todo, states)
  files.write_json_atomic(
    os.path.join(out, 'pending.json'),
    dict(config=config, workdir=os.path.abspath(workdir), commit=head, points=entries),
  )
  script = os.path.join(out, 'sweep.sbatch')
  files.write_atomic(script, slurm_script(config, workdir, entries, parallel, flags, slurm_args))
  return script


def slurm_job_id() -> str | None:
  """This process's Slurm job (`<array>_<task>` in an array), or None outside Slurm."""
  array, task = os.environ.get('SLURM_ARRAY_JOB_ID'), os.environ.get('SLURM_ARRAY_TASK_ID')
  if array and task:
    return f'{array}_{task}'
  return os.environ.get('SLURM_JOB_ID')


def _pending_point(points, path: str, index: int):
  """Entry `index` of pending.json at `path`, as one of `points`; UsageError when it is not."""
  pending = state_lib.read_json(path)
  if not isinstance(pending, dict) or not isinstance(pending.get('points'), list):
    raise errors.UsageError(
      f'--run_index={index}: no pending.json at {path}; write it first with --launcher=slurm'
    )
  entries = pending['points']
  if not 0 <= index < len(entries):
    raise errors.UsageError(
      f'--run_index={index} is invalid; allowed: 0..{len(entries) - 1} ({path})'
    )
  entry = entries[index]
  point = next((p for p in points if p.hash == entry['hash'] and p.dir == entry['dir']), None)
  if point is None:
    raise errors.UsageError(
      f"--run_index={index}: pending.json's point {entry['slug']}-{entry['hash']} is not in the "
      'sweep any more (the sweep or the code changed since it was written); write it again '
      'with --launcher=slurm'
    )
  return point


def run_task(
  config: str,
  workdir: str,
  index: int,
  *,
  retry_failed: bool = False,
  rerun_stale: bool = False,
  timeout_s: float = cocod_flags.DEFAULT_TIMEOUT_S,
  overrides: dict | None = None,
  overrides_as_text: bool = False,
) -> int:
  """One task of the Slurm array: runs entry `index` of pending.json, MPI ranks through srun.

  Args:
    config: the sweep's `FILE[:ARG]`, as the script passes it.
    workdir: the sweep's working directory.
    index: the entry of pending.json ($SLURM_ARRAY_TASK_ID).
    retry_failed, rerun_stale, timeout_s, overrides, overrides_as_text: as in
      `runner.run_sweep`; the script passes on those the array was written with.

  Returns:
    The exit status: 0 when the point is DONE or DIVERGED (now or already), 75 when it was
    preempted (the task is requeued), 1 otherwise.

  Raises:
    errors.UsageError: a refused sweep, no pending.json, an index out of range, or an entry that
      is no longer a point of the sweep.
  """
  points = points_lib.expand(config, workdir, overrides, '', overrides_as_text)
  head = provenance.commit()
  path = os.path.join(report.summary_dir(workdir, config), 'pending.json')
  point = _pending_point(points, path, index)
  s = state_lib.state(point, head)
  if not state_lib.to_run([point], {point.dir: s}, retry_failed, rerun_stale):
    print(f'{os.path.basename(point.dir)} is {s.name}: nothing to do', flush=True)
    return 0 if s.name in state_lib.FINISHED or s.name == 'RUNNING' else 1
  if rerun_stale and s.stale and os.path.isdir(point.dir):
    print(f'moved aside: {state_lib.move_aside(point.dir)}')
  ended = local.run_points([point], 1, 'slurm', head, timeout_s, False, slurm_job_id())
  s = ended.get(point.dir, state_lib.state(point, head))
  if s.name in state_lib.FINISHED:
    return 0
  status = state_lib.read_json(os.path.join(point.dir, 'status.json')) or {}
  job = slurm_job_id()
  if status.get('rc') == state_lib.EXIT_PREEMPTED and job and shutil.which('scontrol'):
    subprocess.run(['scontrol', 'requeue', job], check=False)
    return state_lib.EXIT_PREEMPTED
  return 1

"""`run_sweep`: completes a sweep (or says what it would do), then writes its summary.

Every point is expanded, resolved and validated before anything is written (`points.expand`);
then the states are read from disk (`state`), the points to run are chosen (PENDING and
INCOMPLETE; FAILED with retry_failed; STALE with rerun_stale, their directories moved aside), and
they run here (`local`) or become a Slurm array (`slurm`); the summary (`report`) goes to the
terminal and to `DIR/sweeps/<name>/sweep.{md,json}`.
"""

import os
import shlex

from cocod_jax import errors
from cocod_jax import flags as cocod_flags
from cocod_jax import provenance
from cocod_jax.sweep import local
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import report
from cocod_jax.sweep import slurm
from cocod_jax.sweep import state as state_lib


def finished(records: list[dict]) -> bool:
  """Whether every point is DONE or DIVERGED."""
  return all(r['state'] in state_lib.FINISHED for r in records)


def _check_options(launcher, parallel, timeout_s, link_rate) -> None:
  if launcher not in cocod_flags.LAUNCHERS:
    raise errors.UsageError(f"--launcher={launcher!r} is invalid; allowed: 'local', 'slurm'")
  if not isinstance(parallel, int) or parallel < 1:
    raise errors.UsageError(f'--parallel={parallel!r} is invalid; allowed: an integer >= 1')
  if not timeout_s > 0:
    raise errors.UsageError(
      f'--timeout_s={timeout_s!r} is invalid; allowed: a number of seconds > 0'
    )
  if link_rate and launcher == 'slurm':
    raise errors.UsageError(
      f'--link_rate={link_rate} is for local runs (launch/simnet.sh); a Slurm cluster runs on '
      'its own network: drop --link_rate'
    )


def _check_root(link_rate: str, points, running_here: bool) -> None:
  """The simulated link needs root (a network namespace and tc): refused before anything runs."""
  has_mpi = any(p.backend == 'mpi' for p in points)
  if link_rate and has_mpi and running_here and os.geteuid() != 0:
    raise errors.UsageError(
      f'--link_rate={link_rate} needs root (a network namespace and tc, launch/simnet.sh); run '
      'as root, or drop --link_rate to time on the real network'
    )


def _print_dry_run(points, states, todo, launcher, array) -> None:
  """Each point's state and command (and the Slurm script that would be written); writes
  nothing. `array`: (config, workdir, runner flags, parallel, extra #SBATCH options)."""
  config, workdir, flags, parallel, slurm_args = array
  name = points_lib.sweep_name(config)
  print(f'sweep {name}: {len(points)} points, {len(todo)} to run (dry run: nothing written)')
  runs = {p.dir for p in todo}
  for p in points:
    s = states[p.dir]
    flag = ' STALE' if s.stale else ''
    mark = 'run ' if p.dir in runs else '    '
    command = shlex.join(points_lib.command(p, launcher))
    print(f'{mark}{os.path.basename(p.dir)}  {s.name}{flag}  {command}')
  if launcher == 'slurm' and todo:
    entries = slurm.pending_entries(todo, states)
    script = slurm.slurm_script(config, workdir, entries, parallel, flags, slurm_args)
    print(
      f'\nthe Slurm script it would write ({report.summary_dir(workdir, config)}/sweep.sbatch):'
    )
    print(script, end='')


def _submit(todo, states, n_points, head, array) -> None:
  """Writes the Slurm array over the points to run, and says how to submit it."""
  config, workdir, flags, parallel, slurm_args = array
  name = points_lib.sweep_name(config)
  script = slurm.write_array(config, workdir, todo, states, head, parallel, flags, slurm_args)
  if script is None:
    print(f'sweep {name}: nothing to submit (no point to run: see the table)')
    return
  out = os.path.dirname(script)
  print(f'sweep {name}: {len(todo)} of {n_points} points pending; wrote {out}/pending.json')
  print(f'submit with: sbatch {script}')


def _run_here(config, workdir, points, states, todo, head, options) -> None:
  """Runs `todo` here: STALE directories moved aside first (rerun_stale)."""
  parallel, rerun_stale, timeout_s, fail_fast = options
  n_finished = sum(s.name in state_lib.FINISHED for s in states.values())
  print(
    f'sweep {points_lib.sweep_name(config)}: {len(points)} points ({n_finished} finished, '
    f'{len(todo)} to run) in {os.path.abspath(workdir)}; commit {head[:12]}',
    flush=True,
  )
  for p in todo:
    s = states[p.dir]
    if rerun_stale and s.stale and os.path.isdir(p.dir) and s.name != 'PENDING':
      print(f'moved aside (stale): {state_lib.move_aside(p.dir)}')
  local.run_points(todo, parallel, 'local', head, timeout_s, fail_fast)


def _parallel(parallel: int, points) -> int:
  """`parallel`, or 1 (with a message) for a sweep with MPI points: those are timing runs."""
  if parallel > 1 and any(p.backend == 'mpi' for p in points):
    print(
      f'--parallel={parallel} ignored: this sweep has MPI points (timing), which run one at a '
      "time (concurrent runs on shared cores or a shared link spoil each other's times)",
      flush=True,
    )
    return 1
  return parallel


def run_sweep(
  config: str,
  workdir: str,
  *,
  parallel: int = 1,
  launcher: str = 'local',
  dry_run: bool = False,
  report_only: bool = False,
  retry_failed: bool = False,
  rerun_stale: bool = False,
  fail_fast: bool = False,
  timeout_s: float = cocod_flags.DEFAULT_TIMEOUT_S,
  link_rate: str = '',
  overrides: dict | None = None,
  overrides_as_text: bool = False,
  slurm_args: tuple = (),
) -> list[dict]:
  """Completes the sweep `config` in `workdir` and returns `state.collect` of its points.

  Args:
    config: `FILE[:ARG]`: the experiment file and the argument of its `sweep(add, arg)`.
    workdir: where `points/` and `sweeps/<name>/` go.
    parallel: points at once; only for sweeps whose points all use the one-host backend.
    launcher: 'local' (run here) or 'slurm' (write pending.json and sweep.sbatch; run nothing).
    dry_run, report_only: print the states and commands (and the Slurm script), or re-render
      sweep.md and sweep.json from disk; run and write nothing else.
    retry_failed, rerun_stale: run FAILED points again; STALE ones, their directories moved aside.
    fail_fast: start no further point after one fails.
    timeout_s: a run taking longer gets SIGTERM (then SIGKILL): FAILED, status 124.
    link_rate: MPI points on the simulated link at this rate (launch/simnet.sh; root).
    overrides: dotted field -> value set on every point (after the point's own); command-line
      text (the CLI's --set) when `overrides_as_text`.
    slurm_args: extra `#SBATCH` options of the array script.

  Returns:
    The records after the runs (or as found, for dry runs, reports and Slurm).

  Raises:
    errors.UsageError: the sweep was refused (every reason, one a line); nothing was written.
  """
  _check_options(launcher, parallel, timeout_s, link_rate)
  points = points_lib.expand(config, workdir, overrides, link_rate, overrides_as_text)
  running_here = not (dry_run or report_only or launcher == 'slurm')
  _check_root(link_rate, points, running_here)
  head, parallel = provenance.commit(), _parallel(parallel, points)
  states = {p.dir: state_lib.state(p, head) for p in points}
  todo = state_lib.to_run(points, states, retry_failed, rerun_stale)
  flags = slurm.runner_flags(retry_failed, rerun_stale, timeout_s, overrides, overrides_as_text)
  array = (config, workdir, flags, parallel, slurm_args)  # What a Slurm array is written with.
  if dry_run:
    _print_dry_run(points, states, todo, launcher, array)
    return state_lib.collect(points, head)
  if launcher == 'slurm' and not report_only:
    _submit(todo, states, len(points), head, array)
  elif running_here:
    how = (parallel, rerun_stale, timeout_s, fail_fast)
    _run_here(config, workdir, points, states, todo, head, how)
  records = state_lib.collect(points, head)
  print(report.write_summary(config, workdir, records, head), end='', flush=True)
  return records

"""`run_sweep`: completes a sweep (or says what it would do), then writes its summary.

Every point is expanded, resolved and validated before anything is written (`points.expand`);
then the states are read from disk (`state`), the points to run are chosen (PENDING and
INCOMPLETE; FAILED with retry_failed; STALE with rerun_stale, their directories moved aside), and
they run here or are submitted to Slurm by the launcher of that name (launchers.py: `local`,
`slurm`, one interface); the summary (`report`) goes to the terminal and to
`DIR/sweeps/<name>/sweep.{md,json}`.
"""

import os
import re
import shlex

from cocod_jax.config import errors
from cocod_jax.config import flags as cocod_flags
from cocod_jax.record import provenance
from cocod_jax.sweep import launchers
from cocod_jax.sweep import points as points_lib
from cocod_jax.sweep import report
from cocod_jax.sweep import slurm
from cocod_jax.sweep import state as state_lib


def finished(records: list[dict]) -> bool:
  """Whether every point is DONE or DIVERGED."""
  return all(r['state'] in state_lib.FINISHED for r in records)


def _check_options(launcher, parallel, timeout_s, link_rate, slurm_cluster) -> None:
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
  if link_rate and not re.fullmatch(points_lib.LINK_PATTERN, link_rate):
    raise errors.UsageError(
      f'--link_rate={link_rate} is invalid; allowed: RATE[/BURST[/MTU]] in tc units, e.g. 1gbit, '
      '500mbit or 50mbit/8kb/8000'
    )
  if slurm_cluster not in slurm.CLUSTERS:
    raise errors.UsageError(
      f"slurm_cluster={slurm_cluster!r} is invalid; allowed: 'slurm', 'local' (submitit's "
      'local executor)'
    )


def _check_root(link_rate: str, points, running_here: bool) -> None:
  """The simulated link needs root (a network namespace and tc): refused before anything runs."""
  has_mpi = any(p.backend == 'mpi' for p in points)
  if link_rate and has_mpi and running_here and os.geteuid() != 0:
    raise errors.UsageError(
      f'--link_rate={link_rate} needs root (a network namespace and tc, launch/simnet.sh); run '
      'as root, or drop --link_rate to time on the real network'
    )


def _print_dry_run(points, launcher, launch) -> None:
  """Each point's state and command, and what the launcher would submit; writes nothing."""
  extra = launchers.LAUNCHERS[launcher].describe(launch)  # Refuses bad options before printing.
  name = points_lib.sweep_name(launch.config)
  print(f'sweep {name}: {len(points)} points, {len(launch.todo)} to run (dry run: nothing written)')
  runs = {p.dir for p in launch.todo}
  for p in points:
    s = launch.states[p.dir]
    flag = ' STALE' if s.stale else ''
    mark = 'run ' if p.dir in runs else '    '
    command = shlex.join(points_lib.command(p, launcher))
    print(f'{mark}{os.path.basename(p.dir)}  {s.name}{flag}  {command}')
  print(extra, end='')


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
  slurm_cluster: str = 'slurm',
) -> list[dict]:
  """Completes the sweep `config` in `workdir` and returns `state.collect` of its points.

  Args:
    config: `FILE[:ARG]`: the experiment file and the argument of its `sweep(add, arg)`.
    workdir: where `points/` and `sweeps/<name>/` go.
    parallel: points at once; only for sweeps whose points all use the one-host backend.
    launcher: 'local' (run here) or 'slurm' (submit a job per point through submitit; the
      points read RUNNING until their jobs end: run the runner again for their states).
    dry_run, report_only: print the states and commands (and the sbatch text submitit would
      submit), or re-render sweep.md and sweep.json from disk; run and write nothing else.
    retry_failed, rerun_stale: run FAILED points again; STALE ones, their directories moved aside.
    fail_fast: start no further point after one fails.
    timeout_s: a run taking longer gets SIGTERM (then SIGKILL): FAILED, status 124.
    link_rate: MPI points on the simulated link at this rate (launch/simnet.sh; root).
    overrides: dotted field -> value set on every point (after the point's own); command-line
      text (the CLI's --set) when `overrides_as_text`.
    slurm_args: sbatch options of the jobs, e.g. '--partition=gpu' (slurm.parse_slurm_args).
    slurm_cluster: submitit's executor: 'slurm', or 'local' (the same jobs as processes here).

  Returns:
    The records after the runs (or as found, for dry runs, reports and submissions).

  Raises:
    errors.UsageError: the sweep was refused (every reason, one a line); nothing was written.
    slurm.SubmitError: sbatch refused a job.
  """
  _check_options(launcher, parallel, timeout_s, link_rate, slurm_cluster)
  points = points_lib.expand(config, workdir, overrides, link_rate, overrides_as_text)
  _check_root(link_rate, points, not (dry_run or report_only or launcher == 'slurm'))
  head, parallel = provenance.commit(), _parallel(parallel, points)
  states = state_lib.states(points, head)
  todo = state_lib.to_run(points, states, retry_failed, rerun_stale)
  how = (parallel, timeout_s, retry_failed, rerun_stale, fail_fast, tuple(slurm_args))
  launch = launchers.Launch(config, workdir, todo, states, head, *how, slurm_cluster)
  if dry_run:
    _print_dry_run(points, launcher, launch)
    return state_lib.collect(points, head)
  if not report_only:
    launchers.LAUNCHERS[launcher].start(launch)
  records = state_lib.collect(points, head)
  print(report.write_summary(config, workdir, records, head), end='', flush=True)
  return records

"""What the runner hands a launcher, and the launchers by name: the runner does not care which.

A launcher is a module with two functions of a `Launch`:

  start(launch)     runs or submits `launch.todo` (printing a line per point or per job)
  describe(launch)  what `start` would do beyond the points' commands, for --dry_run ('' if
                    nothing); writes nothing

`local` runs the points here as subprocesses; `slurm` submits them through submitit, to Slurm or,
with `slurm_cluster='local'`, to submitit's local executor (the same jobs as processes here).
"""

import dataclasses

from cocod_jax.config import flags as cocod_flags
from cocod_jax.sweep import local
from cocod_jax.sweep import slurm


@dataclasses.dataclass(frozen=True)
class Launch:
  """The points to run and how.

  `todo` are the points chosen to run, `states` every point's state by directory, `head` the
  commit; `parallel` points at once (a job array's parallelism on Slurm); `timeout_s` a run's
  limit; `retry_failed`, `rerun_stale` and `fail_fast` as in `runner.run_sweep`; `slurm_args`
  the user's Slurm options and `slurm_cluster` submitit's executor ('slurm' or 'local').
  """

  config: str
  workdir: str
  todo: list
  states: dict
  head: str
  parallel: int = 1
  timeout_s: float = cocod_flags.DEFAULT_TIMEOUT_S
  retry_failed: bool = False
  rerun_stale: bool = False
  fail_fast: bool = False
  slurm_args: tuple = ()
  slurm_cluster: str = 'slurm'


LAUNCHERS = {'local': local, 'slurm': slurm}

"""The resumable sweep runner: `python -m cocod_jax.sweep --config=FILE[:ARG] --workdir=DIR`.

A room per job:

  points.py   expand an experiment file's sweep into points: resolve, validate, slug, hash
  state.py    a point's state from its directory (DONE, RUNNING, ...); the lock on a point
  local.py    run points here as subprocesses of the entry point, in parallel, with timeouts
  slurm.py    the same points submitted through submitit (Slurm, or its local executor)
  task.py     what each task of a submitted job runs; preemption and requeue
  launchers.py  what the runner hands a launcher (local, slurm: one interface)
  report.py   the summary table, sweep.md and sweep.json
  runner.py   run_sweep: expand, read the states, run or submit, summarize
  __main__.py the command line

Library use (the entry points of cocod_jax/experiments):
`records = sweep.run_sweep('configs/x.py:arg', workdir=...)` runs what is missing and returns one
dict per point with its state, directory, hash and parsed results.json; a refused sweep raises
`errors.UsageError` with every reason.
"""

from cocod_jax.sweep.runner import finished
from cocod_jax.sweep.runner import run_sweep

__all__ = ['finished', 'run_sweep']

"""The loop's position, its clocks and its checkpoints: what a run saves (`save_checkpoint`), when
(`checkpoint_due`: every few epochs, an interval, a signal; under MPI where the ranks meet) and how
a rerun in the same workdir continues from it bit for bit (`resume`)."""

import dataclasses
import os
import time
from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp

from cocod_jax import algorithms
from cocod_jax import plan as plan_lib
from cocod_jax import steps as steps_lib
from cocod_jax import timeline as timeline_lib
from cocod_jax import writers
from cocod_jax.cluster import period_auto
from cocod_jax.record import checkpoints
from cocod_jax.record import workdir as workdir_lib

# Under MPI the ranks decide together whether to checkpoint now (a SIGTERM, the interval) at most
# this often, and only where they meet anyway: after a round's collective.
POLL_STEPS = 10


@dataclasses.dataclass
class Position:
  """Where the loop is: what a checkpoint must hold besides the arrays."""

  epoch: int = 1
  step: int = 0  # The next global step.
  train_time: float = 0.0
  measured_time: float = 0.0  # Training time of the epochs after the first (compilation).
  # Seconds a resumed run spent compiling its functions again, left out of the two above: the
  # run is timed as if it had not stopped (its first process compiled them in epoch 1).
  restart_compile_s: float = 0.0
  # Steps in measured_time (None: a checkpoint from before it was kept, whose steps are taken
  # to be every step of the epochs after the first). A resumed process leaves out the epoch it
  # resumed in (its first calls also warm up what JAX's compilation events do not cover).
  measured_steps: int | None = 0
  timed_from: int = 0  # The step the current lap started at.
  losses: list = dataclasses.field(default_factory=list)  # This epoch's, so far.

  def add_time(self, seconds: float, measured: bool):
    self.train_time += seconds
    if measured:
      self.measured_time += seconds
      if self.measured_steps is not None:
        self.measured_steps += self.step - self.timed_from
    self.timed_from = self.step


class Run(NamedTuple):
  """The long-lived parts of one run that the loop's helpers work with."""

  record: dict  # The run's config as given (config.to_dict()): checkpoints, results, the preflight.
  plan: plan_lib.Plan
  cluster: Any
  algo: algorithms.base.Algorithm
  tl: timeline_lib.Timeline
  ckpt: checkpoints.Checkpointer
  out: writers.Recorder
  guard: checkpoints.PreemptionGuard


class Stopwatch:
  """Training time: `lap()` returns the seconds since the last lap (or the start). With `pos`
  (a resumed run), the compilation in between (`timeline.CompileClock`) is left out and added
  to `pos.restart_compile_s` instead."""

  def __init__(self, pos: 'Position | None' = None):
    self.pos = pos
    self.last = time.perf_counter()
    self.clock = timeline_lib.CompileClock.seconds() if pos is not None else 0.0

  def lap(self) -> float:
    now = time.perf_counter()
    elapsed, self.last = now - self.last, now
    if self.pos is not None:
      clock = timeline_lib.CompileClock.seconds()
      compiled, self.clock = min(clock - self.clock, elapsed), clock
      self.pos.restart_compile_s += compiled
      elapsed -= compiled
    return elapsed

  def reset(self):
    """Starts the next lap now, counting nothing of what came before."""
    self.last = time.perf_counter()
    self.clock = timeline_lib.CompileClock.seconds() if self.pos is not None else 0.0


def save_checkpoint(run: Run, state, pos: Position):
  """Writes a checkpoint at `pos.step` (the algorithm's collective in flight already drained)."""
  tree = {'state': state}
  if pos.losses:
    tree['losses'] = jnp.stack(pos.losses)
  if run.algo.state_dict():
    tree['algo'] = run.algo.state_dict()
  meta = dict(
    dataclasses.asdict(pos),
    losses=None,
    config=run.record,
    records=run.out.records,
    algo=run.algo.host_state(),
    timeline=run.tl.state_dict(),
    rank=run.cluster.rank,
    period=run.algo.options.period,  # k, also where algorithm.period='auto'.
    workers=run.cluster.workers,  # The part's arrays hold these workers on their leading axis.
  )
  with jax.transfer_guard('allow'), workdir_lib.writing('a checkpoint', run.out.workdir):
    run.ckpt.save(pos.step, tree, meta)


def resume(run: Run):
  """(state, Position, records) from the newest checkpoint that reads, or None to start afresh.

  Raises:
    checkpoints.ResumeError: no committed checkpoint reads, or the newest that does was made by
      another number of processes, with a config that differs in a field that changes results,
      or past this run's last step.
  """
  cluster, ckpt = run.cluster, run.ckpt
  say = print if cluster.is_chief else (lambda *_: None)

  def everyone(why):
    """None when every process can use the step; else the reasons (on the chief)."""
    if not cluster.any(why is not None)[0]:
      return None
    return [r for r in cluster.gather(why) or [] if r]

  found = ckpt.restore_newest(cluster.agree(ckpt.steps()), everyone, say)
  if found is None:
    return None
  step, tree, meta = found
  where = ckpt.step_dir(step)
  if cluster.backend == 'mpi' and 'workers' not in meta:
    raise checkpoints.ResumeError(
      f'the checkpoint in {where} was written by the MPI runtime before a rank held several '
      'workers (its arrays have no worker axis); continue it with the version that wrote it, or '
      'use another --workdir'
    )
  diffs = checkpoints.config_differences(meta['config'], run.record)
  if diffs:
    raise checkpoints.ResumeError(
      f'the checkpoint in {where} was made with another config ({"; ".join(diffs)}); rerun with '
      'the same config to continue it, or use another --workdir'
    )
  k, given = run.algo.options.period, run.record['algorithm']['period']
  if meta.get('period', k) != k:  # period='auto' with WORKDIR/period_auto.json changed or gone.
    record = os.path.join(os.path.dirname(ckpt.root), period_auto.FILE)
    raise checkpoints.ResumeError(
      f"the checkpoint in {where} was made with period k={meta['period']}, and this run's "
      f'algorithm.period={given!r} gives k={k}; put k={meta["period"]} '
      f'back into {record} to continue it, or use another --workdir'
    )
  spe, epochs = run.plan.steps_per_epoch, run.plan.num_epochs
  if meta['step'] > epochs * spe:  # Its model would be reported as a num_epochs run.
    raise checkpoints.ResumeError(
      f'the checkpoint in {where} is at step {meta["step"]} (epoch {meta["epoch"]}), past the end '
      f'of this run (num_epochs={epochs}: {epochs * spe} steps); rerun with '
      f'--config.num_epochs={-(-meta["step"] // spe)} or more, or use another --workdir'
    )
  state = cluster.put_stacked(steps_lib.TrainState(**tree['state']))
  run.algo.load_host_state(meta['algo'])
  run.algo.load_state_dict(cluster.put_stacked(tree.get('algo', {})))
  run.tl.load_state_dict(meta['timeline'])
  fields = {k: meta[k] for k in ('epoch', 'step', 'train_time', 'measured_time')}
  fields['restart_compile_s'] = meta.get('restart_compile_s', 0.0)  # (older checkpoints: none)
  fields['measured_steps'] = meta.get('measured_steps')
  fields['timed_from'] = meta['step']
  say(f'resuming from the checkpoint at step {step} (epoch {meta["epoch"]}) in {where}')
  return state, Position(**fields, losses=list(tree.get('losses', []))), meta['records']


def checkpoint_due(run: Run, boundary: int, sync_point: bool, last: dict, force=False):
  """(checkpoint now, then stop) at this step boundary: for a SIGTERM on any rank (both), or for
  the interval (checkpoint only).

  Under MPI the ranks decide together, where they meet anyway (after a round's collective) and
  at least POLL_STEPS steps apart, or at an epoch end (`force`); `last` holds the step and time
  of the last poll and save.
  """
  often = sync_point and boundary - last['poll'] >= POLL_STEPS
  if run.cluster.processes > 1 and not (often or force):
    return False, False
  last['poll'] = boundary
  interval = run.plan.checkpoint.interval_s
  late = interval > 0 and time.perf_counter() - last['save'] >= interval
  stop, late = run.cluster.any(run.guard.requested, late)
  return stop or late, stop

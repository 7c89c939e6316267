"""Checkpoints and preemption: a run that is stopped continues bit for bit.

A checkpoint holds everything the next step depends on: every worker's train state (parameters,
BatchNorm statistics, momentum, step counter and augmentation key), the algorithm's collective in
flight (Pipe-SGD's last gradient average; CoCoD-SGD's snapshot and the average of the snapshots),
the losses of the epoch so far, and, as JSON, the loop's position (epoch, next step, round),
clocks, the metrics history and the timeline. Batches need no random state: each epoch's order
is drawn from (seed, epoch, worker).

A collective in flight is drained before a checkpoint (waited for, its value kept and saved):
that changes when the main thread waits, never a number, so the run continues exactly. Under MPI
each rank writes its own part (Orbax, atomically: a temporary directory renamed when complete);
after a barrier rank 0 writes the commit marker, and only a step directory with the marker and
every rank's part counts. The one-host cluster writes its stacked state as one part. Older
checkpoints beyond `checkpoint.keep` are removed.

Preemption (`PreemptionGuard`): the first SIGTERM (what Slurm sends before the kill) asks every
rank to finish its current round, write a checkpoint and exit with status 75 (EX_TEMPFAIL: run
again); a second SIGTERM, or `checkpoint.preempt_deadline_s` without a checkpoint, exits at once
with status 143.
"""

import json
import os
import shutil
import signal
import sys
import threading
import time

import jax
import numpy as np

from cocod_jax import files

COMMIT = 'COMMITTED'
EXIT_PREEMPTED = 75
EXIT_KILLED = 143
# Fields that can differ between a checkpoint and the run that resumes it: they change how long
# the run goes on, where it reads data, what it logs and times, how long it waits, or (with
# emulate_speeds) only its speed; never a number of the training itself.
NON_RESULT_FIELDS = (
  'num_epochs',
  'checkpoint',
  'timeline',
  'comm.timeout_s',
  'comm.threaded',
  'data_dir',
  'emulate_speeds',
)


class Preempted(RuntimeError):
  """A SIGTERM stopped the run after it wrote a checkpoint (exit status 75)."""


class ResumeError(ValueError):
  """The newest checkpoint cannot be resumed by this run (the message says why)."""


def _flat_config(d, prefix=''):
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flat_config(v, prefix + k + '.'))
    else:
      out[prefix + k] = v
  return out


def result_fields(config_dict: dict) -> dict:
  """The dotted fields of a config dict that can change results (all but NON_RESULT_FIELDS)."""
  flat = _flat_config(config_dict)
  skip = lambda k: any(k == f or k.startswith(f + '.') for f in NON_RESULT_FIELDS)
  return {k: v for k, v in flat.items() if not skip(k)}


def config_differences(saved: dict, current: dict) -> list[str]:
  """`field: checkpoint value -> this run's value` for every result field that differs."""
  a, b = result_fields(saved), result_fields(current)
  norm = lambda v: list(v) if isinstance(v, (list, tuple)) else v
  return [
    f'{k}: {a.get(k)!r} -> {b.get(k)!r}'
    for k in sorted(set(a) | set(b))
    if norm(a.get(k)) != norm(b.get(k))
  ]


class Checkpointer:
  """Writes and finds this run's checkpoints under `workdir/checkpoints/<step>/`.

  Args:
    workdir: the run's directory.
    rank, world: this process and the number of processes (1 on the one-host cluster).
    barrier: waits for every process (a no-op on the one-host cluster).
    keep: how many committed checkpoints to keep.
  """

  def __init__(self, workdir, rank, world, barrier, keep):
    import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top

    self._ocp = ocp
    # Absolute: Orbax refuses relative paths, and `--workdir=runs/x` is the usual way to say it.
    self.root = os.path.join(os.path.abspath(workdir), 'checkpoints')
    self.rank, self.world, self.barrier, self.keep = rank, world, barrier, keep

  def step_dir(self, step):
    return os.path.join(self.root, f'{step:010d}')

  def _part(self, step, rank):
    return os.path.join(self.step_dir(step), f'rank_{rank}')

  def save(self, step: int, tree, meta: dict) -> str:
    """Every process writes its part of the checkpoint at `step`; rank 0 then commits it."""
    part = self._part(step, self.rank)
    os.makedirs(self.step_dir(step), exist_ok=True)
    for name in os.listdir(self.step_dir(step)):  # What a run that died while writing left.
      if name.startswith(f'rank_{self.rank}'):
        path = os.path.join(self.step_dir(step), name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    self._ocp.PyTreeCheckpointer().save(part, jax.device_get(tree))
    files.write_json_atomic(part + '.json', meta, indent=None)
    self.barrier()
    if self.rank == 0:
      files.write_json_atomic(
        os.path.join(self.step_dir(step), COMMIT),
        {'step': step, 'world': self.world, 'time': time.time()},
        indent=None,
      )
      self._prune(step)
    self.barrier()
    return self.step_dir(step)

  def _steps(self):
    if not os.path.isdir(self.root):
      return []
    return sorted((int(n) for n in os.listdir(self.root) if n.isdigit()), reverse=True)

  def _complete(self, step) -> bool:
    """Committed, with the part of every rank of the run that wrote it."""
    if not os.path.exists(os.path.join(self.step_dir(step), COMMIT)):
      return False
    return all(os.path.exists(self._part(step, r) + '.json') for r in range(self.world_of(step)))

  def _prune(self, newest):
    """Keeps the `keep` newest committed checkpoints (and always `newest`); removes the rest,
    incomplete ones included."""
    keep = set([s for s in self._steps() if self._complete(s)][: self.keep]) | {newest}
    for s in self._steps():
      if s not in keep:
        shutil.rmtree(self.step_dir(s), ignore_errors=True)

  def latest(self, say=print):
    """The newest complete checkpoint's step (None if there is none); says which it skipped."""
    for step in self._steps():
      if self._complete(step):
        return step
      say(
        f'skipping the incomplete checkpoint at step {step} in {self.step_dir(step)} (no commit '
        'marker or a rank part missing: a run ended while writing it)'
      )
    return None

  def world_of(self, step) -> int:
    with open(os.path.join(self.step_dir(step), COMMIT)) as f:
      return int(json.load(f)['world'])

  def restore(self, step):
    """(tree of NumPy arrays, meta) of this process's part of the checkpoint at `step`."""
    part = self._part(step, self.rank)
    checkpointer = self._ocp.PyTreeCheckpointer()
    structure = checkpointer.metadata(part).item_metadata.tree
    args = jax.tree.map(lambda _: self._ocp.RestoreArgs(restore_type=np.ndarray), structure)
    tree = checkpointer.restore(part, restore_args=args)
    with open(part + '.json') as f:
      return tree, json.load(f)


class PreemptionGuard:
  """SIGTERM handling for the loop: `requested` turns True on the first SIGTERM.

  Args:
    deadline_s: after the first SIGTERM, exit at once (status 143) if the run has not stopped
      within this many seconds.
  """

  def __init__(self, deadline_s: float):
    self.deadline_s = deadline_s
    self.requested = False
    self._previous = None
    self._timer = None

  def _handle(self, signum, frame):
    del signum, frame
    if self.requested:
      print('error: a second SIGTERM: exiting at once', file=sys.stderr, flush=True)
      os._exit(EXIT_KILLED)
    self.requested = True
    print('SIGTERM: finishing the current round, then a checkpoint and exit', flush=True)

    def give_up():
      print(
        f'error: no checkpoint {self.deadline_s:g} s after SIGTERM '
        '(checkpoint.preempt_deadline_s): exiting at once',
        file=sys.stderr,
        flush=True,
      )
      os._exit(EXIT_KILLED)

    self._timer = threading.Timer(self.deadline_s, give_up)
    self._timer.daemon = True
    self._timer.start()

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handle)
    return self

  def __exit__(self, *exc):
    if self._timer is not None:
      self._timer.cancel()
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
    return False

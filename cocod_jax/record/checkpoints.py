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
checkpoints beyond `checkpoint.keep` are removed, only after a newer one is committed.

Resume takes the newest committed checkpoint that every process reads: an incomplete one (no
marker: a run ended while writing it) is skipped with a line, and so is an unreadable one (an
empty or malformed marker, a rank's part missing, a truncated file, bad JSON), with one line
naming it and why; the ranks decide together, step by step. Committed checkpoints of which none
reads stop the run with one line (`ResumeError`) rather than start it afresh.

Why the step directories, the commit marker and keep-N are ours and not orbax's
CheckpointManager: its multi-process mode takes the process index, the primary host and its
barriers from `jax.distributed`, which the MPI runtime does not start (every rank is a
single-controller JAX process), so every rank would act as the primary and prune alone; and no
manager per rank can see whether the other ranks' parts exist. Orbax writes each part.

Preemption (`PreemptionGuard`): the first SIGTERM (what Slurm sends before the kill), SIGINT
(Ctrl-C) or SIGUSR2 (Ctrl-C as launch/mpirun.sh passes it on to the ranks) asks every rank to
finish its current round, write a checkpoint and exit with status 75 (EX_TEMPFAIL: run again); a
second signal, or `checkpoint.preempt_deadline_s` without a checkpoint, exits at once with status
143.
"""

import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time

import jax
import numpy as np

from cocod_jax.config import errors
from cocod_jax.config import loader as config_loader
from cocod_jax.record import files

COMMIT = 'COMMITTED'
SPACE_MARGIN = 1 << 20  # Bytes beyond a part's arrays that a disk must have free to write it.


class Preempted(RuntimeError):
  """A SIGTERM or SIGINT stopped the run after it wrote a checkpoint (exit status 75)."""


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
  """The dotted fields of a config dict that can change the training's numbers (all but
  config_loader.NON_TRAINING_FIELDS): a checkpoint resumes only under a run equal in these."""
  flat = _flat_config(config_dict)
  skip = lambda k: any(k == f or k.startswith(f + '.') for f in config_loader.NON_TRAINING_FIELDS)
  return {k: v for k, v in flat.items() if not skip(k) and not config_loader.at_later_default(k, v)}


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
    if self.rank == 0:  # A marker left at this step (a checkpoint the rerun skipped) goes first,
      with contextlib.suppress(FileNotFoundError):  # so no new part is ever counted beside old.
        os.remove(os.path.join(self.step_dir(step), COMMIT))
    self.barrier()
    for name in os.listdir(self.step_dir(step)):  # What a run that died while writing left.
      if name == f'rank_{self.rank}' or name.startswith(f'rank_{self.rank}.'):  # Not rank_1x.
        path = os.path.join(self.step_dir(step), name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    host = jax.device_get(tree)
    self._check_space(host)
    self._ocp.PyTreeCheckpointer().save(part, host)
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

  def _check_space(self, host_tree):
    """Raises ENOSPC before writing a part that the disk cannot hold (its arrays' bytes and
    SPACE_MARGIN for Orbax's metadata): Orbax's writer threads would log tracebacks first."""
    need = sum(np.asarray(a).nbytes for a in jax.tree.leaves(host_tree)) + SPACE_MARGIN
    free = shutil.disk_usage(self.root).free
    if free < need:
      raise OSError(
        errno.ENOSPC,
        f'No space left on device (a part of {need / 1e6:.1f} MB, {free / 1e6:.1f} MB free)',
      )

  def steps(self) -> list[int]:
    """The steps of the checkpoint directories, newest first (complete or not)."""
    if not os.path.isdir(self.root):
      return []
    return sorted((int(n) for n in os.listdir(self.root) if n.isdigit()), reverse=True)

  def _marker(self, step) -> dict:
    """The commit marker of `step`; raises (OSError, ValueError) when it is absent or malformed."""
    with open(os.path.join(self.step_dir(step), COMMIT)) as f:
      marker = json.load(f)
    if not isinstance(marker, dict) or not isinstance(marker.get('world'), int):
      raise ValueError(f'the commit marker holds {marker!r}, not a step and a world size')
    return marker

  def _complete(self, step) -> bool:
    """Committed, with the part of every rank of the run that wrote it."""
    try:
      world = self._marker(step)['world']
    except (OSError, ValueError):
      return False
    return all(os.path.exists(self._part(step, r) + '.json') for r in range(world))

  def _prune(self, newest):
    """Keeps the `keep` newest committed checkpoints (and always `newest`); removes the rest,
    incomplete ones included."""
    keep = set([s for s in self.steps() if self._complete(s)][: self.keep]) | {newest}
    for s in self.steps():
      if s not in keep:
        shutil.rmtree(self.step_dir(s), ignore_errors=True)

  def restore_newest(self, steps, everyone=None, say=print):
    """(step, tree, meta) of the newest committed checkpoint of `steps` that every process
    reads (this process's part), or None when no checkpoint was committed.

    Args:
      steps: the candidate steps, newest first, the same on every process.
      everyone: `everyone(why)` for this process's reason not to use a step (None: it can)
        returns None when every process can, else the reasons (the chief's list; others may
        get an empty one). Default: this process alone.
      say: prints a line (the chief's `print`).

    Raises:
      ResumeError: checkpoints were committed but none reads, or the newest that reads was
        written by another number of processes.
    """
    everyone = everyone or (lambda why: None if why is None else [why])
    unreadable = []
    for step in steps:
      where = self.step_dir(step)
      if not os.path.exists(os.path.join(where, COMMIT)):
        say(f'skipping the incomplete checkpoint at step {step} in {where} (no commit marker: '
            'a run ended while writing it)')  # fmt: skip
        continue
      why, got = None, None
      try:
        world = self._marker(step)['world']
        if world != self.world:
          raise ResumeError(
            f'the checkpoint in {where} was written by {world} processes (MPI ranks) and this '
            f'run has {self.world}; resume it with `mpirun -np {world}`, or use another --workdir'
          )
        got = self.restore(step)
      except ResumeError:
        raise
      except Exception as e:  # pylint: disable=broad-except
        first = (str(e).strip().splitlines() or [''])[0][:200]
        why = f'rank {self.rank}: {type(e).__name__}: {first}'
      reasons = everyone(why)
      if reasons is None:
        return step, *got
      unreadable.append(step)
      say(f'skipping the unreadable checkpoint at step {step} in {where} ({"; ".join(reasons)})')
    if unreadable:
      raise ResumeError(
        f'no checkpoint in {self.root} could be read (steps {unreadable}, reasons above); move '
        'the checkpoints away to start afresh, or use another --workdir'
      )
    return None

  def restore(self, step):
    """(tree of NumPy arrays, meta) of this process's part of the checkpoint at `step`."""
    part = self._part(step, self.rank)
    if not os.path.isdir(part):
      raise FileNotFoundError(f'{part} is missing')
    _NOISE.parts.add(os.path.abspath(part))  # Before: a failed read may report at any time.
    _NOISE.install()
    checkpointer = self._ocp.PyTreeCheckpointer()
    structure = checkpointer.metadata(part).item_metadata.tree
    args = jax.tree.map(lambda _: self._ocp.RestoreArgs(restore_type=np.ndarray), structure)
    tree = checkpointer.restore(part, restore_args=args)
    with open(part + '.json') as f:
      return tree, json.load(f)


class _FailedReadNoise(logging.Filter):
  """What a failed Orbax restore leaves behind besides its exception, dropped (`_NOISE`, installed
  by `Checkpointer.restore`).

  Orbax restores a part with one asyncio task per array and stops at the first that fails;
  TensorStore's other reads of the same unreadable part end later, on Orbax's closed event loop
  (`RuntimeError: Event loop is closed`, reported as unraisable) or as tasks whose failure
  nobody retrieved (logged by asyncio). Both printed tracebacks after the fallback's one line
  (seen in 4 of 6 tries with a truncated file). Dropped: asyncio's reports that name a part this
  process tried to restore, the unraisable 'Event loop is closed' of a loop's callback, and
  unraisable exceptions that name such a part; everything else passes.
  """

  def __init__(self):
    super().__init__()
    self.parts = set()
    self._previous_hook = None

  def filter(self, record) -> bool:
    text = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
      text += str(record.exc_info[1])
    # Any asyncio report that names a part this process failed to read (it has said so in one
    # line): 'Task exception was never retrieved' seen in most tries, other forms once in CI.
    return not any(p in text for p in self.parts)

  def unraisable(self, u) -> None:
    closed = u.exc_type is RuntimeError and str(u.exc_value) == 'Event loop is closed'
    mine = any(p in str(u.exc_value) for p in self.parts)
    if not ((closed and u.object is None) or mine):
      self._previous_hook(u)

  def install(self) -> None:
    if self._previous_hook is None:
      logging.getLogger('asyncio').addFilter(self)
      self._previous_hook, sys.unraisablehook = sys.unraisablehook, self.unraisable


_NOISE = _FailedReadNoise()


class PreemptionGuard:
  """SIGTERM and SIGINT handling for the loop: `requested` turns True on the first of them.

  A second signal exits at once (status 143), unless it comes within REPEAT_WINDOW_S of the
  first: a preemption often arrives as two signals at once (Slurm's --signal to every process of
  the step and the SIGTERM that a submitit task passes on, or a scheduler's SIGUSR2 then SIGTERM),
  and those must not cost the checkpoint; a person pressing Ctrl-C twice is slower than that.

  Args:
    deadline_s: after the first signal, exit at once (status 143) if the run has not stopped
      within this many seconds.
  """

  # SIGUSR2: the Ctrl-C that launch/mpirun.sh passes on (mpirun forwards it to every rank), or
  # a scheduler's signal (Slurm's --signal=USR2@120 of the sweep's jobs reaches every process).
  SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)
  REPEAT_WINDOW_S = 2.0

  def __init__(self, deadline_s: float):
    self.deadline_s = deadline_s
    self.requested = False
    self._first = None  # time.monotonic() of the first signal.
    self._previous = {}
    self._timer = None

  def _handle(self, signum, frame):
    del frame
    name = signal.Signals(signum).name
    name = 'SIGUSR2 (Ctrl-C via launch/mpirun.sh, or a scheduler)' if name == 'SIGUSR2' else name
    if self.requested:
      if time.monotonic() - self._first < self.REPEAT_WINDOW_S:
        print(f'{name} as well: the same request (checkpoint, then exit)', flush=True)
        return
      print(f'error: a second {name}: exiting at once', file=sys.stderr, flush=True)
      os._exit(errors.EXIT_KILLED)
    self.requested, self._first = True, time.monotonic()
    print(f'{name}: finishing the current round, then a checkpoint and exit', flush=True)

    def give_up():
      print(
        f'error: no checkpoint {self.deadline_s:g} s after {name} '
        '(checkpoint.preempt_deadline_s): exiting at once',
        file=sys.stderr,
        flush=True,
      )
      os._exit(errors.EXIT_KILLED)

    self._timer = threading.Timer(self.deadline_s, give_up)
    self._timer.daemon = True
    self._timer.start()

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
    return self

  def __exit__(self, *exc):
    if self._timer is not None:
      self._timer.cancel()
    for s, previous in self._previous.items():
      signal.signal(s, previous)
    return False

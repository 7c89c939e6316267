"""The MPI communicator: one process per worker, weighted averages by mpi4jax in a thread.

`MPICommunicator.start(tree)` scales this worker's copy by `w_i`, flattens it into one float32
vector (a fresh buffer: later steps, even ones that donate their inputs, cannot overwrite it) and
hands it to the communicator's one thread, which allreduces it and puts the sum back on the
compute device; `wait` joins and unflattens. Exactly one collective is in flight at a time.

Where the allreduce runs (`comm.staging`):

- `host` (default): the vector is copied to a CPU device and mpi4jax reduces it there. On a GPU an
  mpi4jax call on the compute device runs inside an XLA program on the one compute stream and so
  queues behind the training steps (shared/NOTES.md); the host copy goes over JAX's copy streams
  and the reduction never touches the compute stream. On a CPU-only machine the entry point makes
  a second CPU device for it.
- `device`: mpi4jax on the compute device itself (the alternative that cannot overlap on a GPU).
- `numpy`: mpi4py's `Allreduce` on a NumPy copy.

mpi4jax and mpi4py never share a communicator: collectives of training go on `self._comm` (one
library per staging mode), and the control traffic (pre-flight, metrics, barriers) goes through
mpi4py on `self.ctl`, another `Clone()` of `COMM_WORLD`.

A collective that has not finished `timeout_s` after it started raises `CommTimeout` on the main
thread; an exception inside the thread is re-raised there as `CommError`. `abort_on_error` turns
either into an `MPI_Abort`, which ends the job on every rank instead of leaving peers hanging.
"""

import hashlib
import json
import queue
import sys
import threading
import time
import traceback

import jax
from jax import flatten_util
import jax.numpy as jnp
import numpy as np

from cocod_jax import comm as comm_lib

STAGINGS = ('host', 'device', 'numpy')


class CommError(RuntimeError):
  """The background collective raised; the message names the rank and the collective."""


class CommTimeout(RuntimeError):
  """A collective did not finish within `comm.timeout_s`."""


class PreflightError(ValueError):
  """The ranks disagree on the config or on the parameters' shapes and dtypes."""


class Pending:
  """One collective: started on the main thread, finished by the communicator's thread."""

  def __init__(self, label, unravel):
    self.label = label
    self.unravel = unravel
    self.done = threading.Event()
    self.result = None
    self.error = None
    self.error_text = ''
    self.started = time.perf_counter()
    self.span = None


class MPICommunicator:
  """Weighted averages across the ranks of `COMM_WORLD`, in a background thread or synchronously.

  Args:
    weights: `w_i` for every rank (ALGORITHMS.md), indexed by rank.
    threaded: run collectives on the communicator's thread (False: on the caller's, for tests
      that compare threaded and unthreaded runs).
    staging: one of STAGINGS (see the module docstring).
    timeout_s: the longest a collective may take before the job is ended.
    compute_device: where the training state lives (default: the first default device).
    host_device: the CPU device for `host` staging (default: the last CPU device).
  """

  def __init__(
    self,
    weights,
    threaded=True,
    staging='host',
    timeout_s=600.0,
    compute_device=None,
    host_device=None,
  ):
    from mpi4py import MPI  # pylint: disable=g-import-not-at-top

    if staging not in STAGINGS:
      raise ValueError(f'comm.staging={staging!r} is invalid; allowed: {list(STAGINGS)}')
    self._mpi = MPI
    world = MPI.COMM_WORLD
    self.rank, self.size = world.Get_rank(), world.Get_size()
    if len(weights) != self.size:
      raise ValueError(f'{len(weights)} weights for {self.size} ranks')
    provided = MPI.Query_thread()
    if threaded and provided < MPI.THREAD_MULTIPLE:
      raise RuntimeError(
        f'rank {self.rank}: MPI provides thread level {provided}, the background allreduce needs '
        f'MPI_THREAD_MULTIPLE ({MPI.THREAD_MULTIPLE}); use an MPI built with thread support or '
        'comm.threaded=False'
      )
    self.threaded, self.staging, self.timeout_s = threaded, staging, float(timeout_s)
    self.compute_device = compute_device or _local_device(world)
    self.host_device = host_device or jax.devices('cpu')[-1]
    self._comm = world.Clone()
    self.ctl = world.Clone()
    self._weight = np.float32(weights[self.rank])
    self._packers = {}
    self._inflight = None
    self._stuck = False
    self._jobs = queue.Queue()
    self._thread = None
    if threaded:
      self._thread = threading.Thread(target=self._serve, name='allreduce', daemon=True)
      self._thread.start()
    if staging != 'numpy':
      import mpi4jax  # pylint: disable=g-import-not-at-top

      comm = self._comm
      self._allreduce = jax.jit(lambda v: mpi4jax.allreduce(v, op=MPI.SUM, comm=comm))

  # ------------------------------------------------------------------ the collective

  def _packer(self, tree):
    leaves, treedef = jax.tree.flatten(tree)
    key = (treedef, tuple((x.shape, str(x.dtype)) for x in leaves))
    if key not in self._packers:
      for x in leaves:
        if x.dtype != jnp.float32:
          raise TypeError(f'can only average float32 leaves, got {x.dtype} {x.shape}')
      w = self._weight
      # The same per-leaf arithmetic as the emulated cluster's average: (w_i * a_i) in float32,
      # then the sum over workers, so the two runtimes agree to rounding of the sum's order.
      pack = jax.jit(lambda t: flatten_util.ravel_pytree(jax.tree.map(lambda a: a * w, t))[0])
      shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
      unravel = flatten_util.ravel_pytree(
        jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
      )[1]
      self._packers[key] = (pack, jax.jit(unravel))
    return self._packers[key]

  def _reduce(self, flat):
    """Allreduce(SUM) of one vector, returned on the compute device (runs on the thread)."""
    if self.staging == 'host':
      out = self._allreduce(jax.device_put(flat, self.host_device))
    elif self.staging == 'device':
      out = self._allreduce(flat)
    else:
      send = np.asarray(flat)
      out = np.empty_like(send)
      self._comm.Allreduce(send, out, op=self._mpi.SUM)
    return jax.block_until_ready(jax.device_put(out, self.compute_device))

  def _run(self, job, flat):
    start = time.perf_counter()
    try:
      job.result = self._reduce(flat)
    except BaseException as e:  # pylint: disable=broad-except
      job.error = e
      job.error_text = traceback.format_exc()
    finally:
      job.span = (start, time.perf_counter())
      job.done.set()

  def _serve(self):
    while True:
      item = self._jobs.get()
      if item is None:
        return
      self._run(*item)

  # ------------------------------------------------------------------ the interface

  def start(self, tree, label=''):
    """Starts the weighted allreduce of `tree` (float32 leaves); returns a handle for `wait`."""
    if self._inflight is not None:
      raise RuntimeError(f'{self._inflight.label} is still in flight; one collective at a time')
    pack, unravel = self._packer(tree)
    job = Pending(label, unravel)
    flat = pack(tree)
    self._inflight = job
    if self.threaded:
      self._jobs.put((job, flat))
    else:
      self._run(job, flat)
    return job

  def wait(self, job):
    """The averaged tree of `job`; raises CommTimeout or CommError instead of hanging."""
    if isinstance(job, comm_lib.Done):  # Already waited for (the loop keeps the value).
      return job.value
    while not job.done.wait(0.05):
      elapsed = time.perf_counter() - job.started
      if elapsed > self.timeout_s:
        self._stuck = True
        raise CommTimeout(
          f'rank {self.rank}: the allreduce of {job.label} has not finished after {elapsed:.1f} s '
          f'(comm.timeout_s={self.timeout_s:g}); a peer is stuck, dead or far slower'
        )
    self._inflight = None
    if job.error is not None:
      raise CommError(
        f'rank {self.rank}: the allreduce of {job.label} failed: {job.error!r}\n{job.error_text}'
      ) from job.error
    return job.unravel(job.result)

  def weighted_mean(self, tree, label=''):
    """`sum_i w_i tree_i` on every rank, blocking."""
    return self.wait(self.start(tree, label))

  def first(self, tree):
    """This rank's copy (the MPI runtime holds one worker per process)."""
    return tree

  def close(self):
    """Stops the thread and frees the communicators (called in a `finally`)."""
    if self._thread is not None:
      self._jobs.put(None)
      self._thread.join(timeout=5.0)
      self._stuck = self._stuck or self._thread.is_alive()
    if not self._stuck and self._inflight is None:
      self._comm.Free()
      self.ctl.Free()

  # ------------------------------------------------------------------ control traffic (mpi4py)

  def preflight(self, config_hash: str, tree) -> None:
    """Every rank checks that all ranks hold the same config and parameter shapes and dtypes.

    Raises:
      PreflightError on every rank, showing rank 0's value and the first rank that differs.
    """
    layout = [
      (jax.tree_util.keystr(path), tuple(leaf.shape), str(leaf.dtype))
      for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    ]
    everyone = self.ctl.allgather((config_hash, layout))
    hash0, layout0 = everyone[0]
    for r, (h, lay) in enumerate(everyone):
      if h != hash0:
        raise PreflightError(
          f'the ranks were given different configs: rank 0 has config hash {hash0}, rank {r} has '
          f'{h}; launch every rank with the same --config and overrides'
        )
      if lay != layout0:
        diff = next(((a, b) for a, b in zip(layout0, lay) if a != b), (len(layout0), len(lay)))
        raise PreflightError(
          f'the ranks built different parameters: rank 0 has {diff[0]}, rank {r} has {diff[1]}'
        )

  def sum_scalar(self, value: float) -> float:
    return float(self.ctl.allreduce(float(value), op=self._mpi.SUM))

  def gather(self, obj):
    return self.ctl.gather(obj, root=0)

  def barrier(self):
    self.ctl.Barrier()


def _local_device(world):
  """This rank's accelerator: the node-local rank picks among the visible devices (one each)."""
  devices = jax.devices()
  if len(devices) == 1 or devices[0].platform == 'cpu':
    return devices[0]
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  node = world.Split_type(MPI.COMM_TYPE_SHARED)
  local_rank = node.Get_rank()
  node.Free()
  return devices[local_rank % len(devices)]


def config_hash(config) -> str:
  """A hash of the resolved config, the same on every rank that was launched the same way."""
  text = json.dumps(config.to_dict(), sort_keys=True, default=str)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def world():
  """(rank, size) of COMM_WORLD."""
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


def abort_on_error(fn, *args):
  """Runs `fn(*args)`; an exception prints `error: rank r: ...` and aborts every rank.

  Without this a rank that fails leaves its peers blocked in the next collective. `SystemExit` is
  passed through: it is raised on every rank alike (a refused config, a pre-flight mismatch).
  """
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  try:
    return fn(*args)
  except SystemExit:
    raise
  except BaseException as e:  # pylint: disable=broad-except
    rank = MPI.COMM_WORLD.Get_rank()
    message = str(e)
    if not isinstance(e, (CommError, CommTimeout)):  # Those name the rank and the collective.
      traceback.print_exc()
      message = f'rank {rank}: {type(e).__name__}: {message}'
    print(f'error: {message}', file=sys.stderr, flush=True)
    sys.stdout.flush()
    MPI.COMM_WORLD.Abort(1)

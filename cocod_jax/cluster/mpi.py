"""The MPI communicator: the weighted average over every worker of every rank, in a background
thread or synchronously.

Each rank holds W workers stacked on a leading axis (`cluster/ranks.py`; W = 1 is one worker per
rank), and every tree handed to the communicator has that axis. A collective has two parts:

1. The local mean, on the rank's devices: `stacked.weighted_sum`, compiled, adds up
   `w_i x_i` of the rank's workers in worker order with the cluster's global weights (so the
   sum over ranks is `sum_i w_i x_i` over all workers, exact for unequal workers and ranks),
   into fresh buffers (later steps that donate the tree cannot touch them), with one
   finiteness flag per worker. Its size is one model, whatever W is.
2. The allreduce between ranks: the thread (`background.BackgroundWorker`) packs that one model
   into one reused float32 vector followed by one divergence flag per worker of the cluster
   (the rank sets its workers' flags when their contributions hold NaN or Inf), reduces it, and
   puts the sum back on the rank's devices, one copy per worker; `wait` returns it, or raises
   `NonFinite` naming the global worker indices before anyone takes the sum in.

Exactly one collective is in flight at a time. A blocking average (`start(..., blocking=True)`,
`weighted_mean`) runs on the caller's thread, with no hand-over: nothing could overlap it. Each
collective records both spans: `local_span` (the local mean; for a background collective only
when `start(..., timed=True)`, since timing it blocks the caller) and `span` (the allreduce).
The packing of the payload lives in `mpi_packer.Packer` alone.

Where the reduction between ranks runs (`comm.staging`):

- `host` (default): the local mean is copied to host memory (on a GPU a device-to-host copy on
  JAX's transfer stream, never on the compute stream that runs the training steps; on a CPU a
  view without a copy) into the send vector, mpi4py's `Allreduce` writes into a receive vector
  (both allocated once per payload structure and reused), and one batched transfer puts the
  sum's leaves back on the devices.
- `device`: one compiled program packs, reduces with mpi4jax on the rank's first device itself
  and unpacks (for a CUDA-aware MPI; with the PyPI Open MPI wheel an mpi4jax call on a GPU runs
  inside an XLA program on the compute stream and so queues behind the training steps:
  docs/design-notes.md).

An earlier `host` path ran mpi4jax on a second CPU device; measured beside a first NumPy staging
(2 ranks, shared memory, 200 calls) it took 0.89 against 0.30 ms for 80 KB and 20.6 against
8.9 ms for 8.4 MB, with the same overlap, so it was dropped (`make bench` has today's figures).

mpi4jax and mpi4py never share a communicator: training collectives go on `self._comm`, the
control traffic (pre-flight, metrics, barriers) on `self.ctl`, another `Clone()` of COMM_WORLD.
`abort_on_error` turns any failure on one rank into an `MPI_Abort` that ends every rank.
"""

import time
import traceback

import jax
import numpy as np

from cocod_jax.cluster import background
from cocod_jax.cluster import mpi_compressed
from cocod_jax.cluster import mpi_packer
from cocod_jax.cluster import stacked

STAGINGS = ('host', 'device')


class PreflightError(ValueError):
  """The ranks disagree on the config or on the parameters' shapes and dtypes."""


class MPICommunicator:
  """Weighted averages over every worker of every rank of `COMM_WORLD` (see the module docstring).

  Args:
    weights: `w_i` of every worker of the cluster (docs/algorithms.md), indexed globally.
    workers: the global indices of the workers this rank holds (default: `[rank]`, one worker
      per rank, and then `weights` has one entry per rank).
    threaded: run started collectives on the communicator's thread (False: on the caller's, for
      tests that compare threaded and unthreaded runs).
    staging: one of STAGINGS (see the module docstring).
    timeout_s: the longest a collective may take before the job is ended.
    sharding: where the rank's [W, ...] trees live (default: the worker axis on one device, this
      rank's share of the node's devices).
  """

  def __init__(
    self, weights, workers=None, threaded=True, staging='host', timeout_s=600.0, sharding=None
  ):
    from mpi4py import MPI  # pylint: disable=g-import-not-at-top

    if staging not in STAGINGS:
      raise ValueError(f'comm.staging={staging!r} is invalid; allowed: {list(STAGINGS)}')
    self._mpi = MPI
    world = MPI.COMM_WORLD
    self.rank, self.size = world.Get_rank(), world.Get_size()
    self.workers = [self.rank] if workers is None else list(workers)
    if workers is None and len(weights) != self.size:
      raise ValueError(f'{len(weights)} weights for {self.size} ranks')
    if threaded and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
      raise RuntimeError(
        f'rank {self.rank}: MPI provides thread level {MPI.Query_thread()}, the background '
        f'allreduce needs MPI_THREAD_MULTIPLE ({MPI.THREAD_MULTIPLE}); use an MPI built with '
        'thread support or comm.threaded=False'
      )
    self.staging = staging
    if sharding is None:
      mesh = jax.sharding.Mesh(np.array(local_devices(world)[:1]), (stacked.AXIS,))
      sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(stacked.AXIS))
    self.sharding = sharding
    self.compute_device = sharding.mesh.devices.flat[0]
    self._comm = world.Clone()
    self.ctl = world.Clone()
    self._weights = [float(weights[i]) for i in self.workers]
    self._num_slots = len(weights)
    self._packers = {}
    self._worker = background.BackgroundWorker(threaded, timeout_s, self.rank)
    self._mpi4jax = None
    if staging == 'device':
      import mpi4jax  # pylint: disable=g-import-not-at-top

      self._mpi4jax = mpi4jax

  # ------------------------------------------------------------------ the collective

  def _packer(self, tree) -> mpi_packer.Packer:
    leaves, treedef = jax.tree.flatten(tree)
    key = (treedef, *[(x.shape, x.dtype) for x in leaves])
    packer = self._packers.get(key)
    if packer is None:
      packer = self._packers[key] = mpi_packer.Packer(
        tree, self._weights, self.workers, self._num_slots, self.sharding
      )
    return packer

  def _reduce(self, job, packer, tree=None, scaled=None, bad=None):
    """Allreduce(SUM) of one tree, back on the rank's devices; raises NonFinite on a flag.

    Either `tree` (a blocking call: the local mean is computed and timed here) or `scale`'s
    fresh `scaled` leaves and their `bad` flags. The allreduce span starts once its input is
    computed, so `Tc` never includes the training steps queued before it on the device.
    """
    send = None
    if scaled is None:
      jax.block_until_ready(tree)
      start = time.perf_counter()
      if self.staging == 'host' and packer.packs_directly:
        send = packer.pack(tree)
      else:
        scaled, bad = jax.block_until_ready(packer.scale(tree))
      job.local_span = (start, time.perf_counter())
    else:
      jax.block_until_ready(scaled)
    start = time.perf_counter()
    if self.staging == 'host':
      send = packer.pack_scaled(scaled, bad) if send is None else send
      self._comm.Allreduce(send, packer.recv, op=self._mpi.SUM)
      flags = packer.recv[packer.flags]
      out = None if flags.any() else packer.unpack(packer.recv)
    else:
      if packer.device_program is None:
        packer.device_program = packer.device_reduce(self._mpi4jax, self._comm, self._mpi.SUM)
      out, flags = packer.device_program(scaled, bad)
      out, flags = jax.block_until_ready(out), np.asarray(flags)
    job.span = (start, time.perf_counter())
    if flags.any():
      raise background.NonFinite(np.flatnonzero(flags).tolist(), job.step, job.label)
    return out

  def start(self, tree, label='', step=-1, blocking=False, timed=False):
    """Starts the weighted allreduce of `tree` ([W, ...] float32 leaves); returns a handle for
    `wait`.

    Args:
      tree: the rank's workers' copies, stacked.
      label: what is averaged (named in errors).
      step: the local iteration (named in errors).
      blocking: the caller waits for it at once, so it runs now on the caller's thread.
      timed: a background collective waits here for its local mean, to record its span.
    """
    packer = self._packer(tree)
    if blocking:
      reduce_ = lambda job: self._reduce(job, packer, tree=tree)
      return self._worker.submit(reduce_, label, step, inline=True)
    local_span = None
    if timed:
      jax.block_until_ready(tree)
      begin = time.perf_counter()
    scaled, bad = packer.scale(tree)  # Fresh buffers: later (donating) steps can't touch them.
    if timed:
      jax.block_until_ready(scaled)
      local_span = (begin, time.perf_counter())
    reduce_ = lambda job: self._reduce(job, packer, scaled=scaled, bad=bad)
    job = self._worker.submit(reduce_, label, step)
    job.local_span = local_span
    return job

  def _coder(self, tree, codec) -> mpi_compressed.Coder:
    leaves, treedef = jax.tree.flatten(tree)
    key = ('compressed', codec, treedef, *[(x.shape, x.dtype) for x in leaves])
    coder = self._packers.get(key)
    if coder is None:
      coder = self._packers[key] = mpi_compressed.Coder(
        tree, self._weights, self.workers, self._num_slots, self.size, self.sharding, codec
      )
    return coder

  def start_compressed(self, tree, ref, error, codec, label='', step=-1, timed=False):
    """Starts CoCoD-SGD's compressed snapshot average (`cluster/mpi_compressed.py`) of `tree`
    against `ref` with this rank's `error` (None: zeros); `wait` returns (the average, the next
    error or None, None)."""
    coder = self._coder(tree, codec)
    if timed:
      jax.block_until_ready((tree, ref, error))
      begin = time.perf_counter()
    payloads, scales, next_error, bad = coder.encode(tree, ref, error)
    local_span = None
    if timed:
      jax.block_until_ready(payloads)
      local_span = (begin, time.perf_counter())

    def reduce_(job):
      return coder.exchange(self._comm, job, payloads, scales, bad, ref), next_error, None

    job = self._worker.submit(reduce_, label, step)
    job.local_span = local_span
    return job

  def staged_bytes(self, tree) -> int:
    """Bytes of the send vector of one average of `tree` (its one model and the flags)."""
    return int(self._packer(tree).send.nbytes)

  def compressed_bytes(self, tree, codec) -> int:
    """Bytes this rank hands to MPI for one compressed average of `tree`."""
    return self._coder(tree, codec).payload_bytes

  def wait(self, job):
    """The averaged tree of `job`; raises CommTimeout, CommError or NonFinite instead of hanging."""
    return self._worker.wait(job)

  def weighted_mean(self, tree, label='', step=-1):
    """`sum_i w_i tree_i` over all workers, on every worker, blocking, on the caller's thread."""
    return self.wait(self.start(tree, label, step, blocking=True))

  def close(self):
    """Stops the thread and frees the communicators (called in a `finally`)."""
    if self._worker.close():
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


def local_devices(world) -> list:
  """The devices this rank may use (collective: every rank calls it).

  XLA's CPU devices belong to their process: a rank takes all of its own. Accelerators are
  shared by the node's processes: the node's ranks split them evenly (one rank per node takes
  all, one rank per device one each); more ranks than devices share them round robin.

  Args:
    world: MPI's COMM_WORLD (split by node to find this rank's place on its node).

  Returns:
    the devices, in order.
  """
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  try:
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
  except MPI.Exception as e:  # Not a ValueError: this rank alone failed; the start ends the job.
    raise RuntimeError(
      f'MPI could not group the ranks by host ({e}); hosts that share one hostname confuse it: '
      'give every host a name of its own'
    ) from e
  local_rank, local_size = node.Get_rank(), node.Get_size()
  node.Free()
  devices = jax.local_devices()
  if devices[0].platform == 'cpu':
    return devices
  if local_size <= len(devices):
    share = len(devices) // local_size
    return devices[local_rank * share : (local_rank + 1) * share]
  return [devices[local_rank % len(devices)]]


def world():
  """(rank, size) of COMM_WORLD."""
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


def abort_on_error(fn, *args):
  """Runs `fn(*args)`; an exception prints `error: rank r: ...` and aborts every rank.

  Without this a rank that fails leaves its peers blocked in the next collective. `SystemExit` is
  passed through: it is raised on every rank alike (a refused config, a pre-flight mismatch, a
  divergence, which every rank learns from the same allreduce). A collective that times out
  names the peers it waits for and their hosts, also when the main thread is blocked elsewhere
  and the communicator's watchdog sees it (`background.on_stuck`). The job is ended by
  `start.end_job`: MPI_Abort, and the rank leaves by itself when that does not end it in seconds
  (a peer's host that the launcher cannot reach: a partition).
  """
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  from cocod_jax.cluster import start  # pylint: disable=g-import-not-at-top

  rank = MPI.COMM_WORLD.Get_rank()
  background.on_stuck = lambda message: start.end_job(message + start.waits_for(rank))
  try:
    return fn(*args)
  except SystemExit:
    raise
  except BaseException as e:  # pylint: disable=broad-except
    message = str(e)
    if isinstance(e, background.CommTimeout):
      message += start.waits_for(rank)
    elif not isinstance(e, background.CommError):
      traceback.print_exc()
      message = f'rank {rank}: {type(e).__name__}: {message}'
    start.end_job(message)
  finally:
    background.on_stuck = None

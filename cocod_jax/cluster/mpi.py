"""The MPI runtime: one process per worker (`mpirun`/`srun`), collectives in a background thread.

Two parts, each small:

- `MPICommunicator`, the staging and the allreduce (`_Packer` holds one tree structure's
  layout). `start(tree)` weights this worker's copy by `w_i` on the device into fresh buffers
  (later steps that donate the tree cannot touch them) and hands it to the thread
  (`background.BackgroundWorker`), which packs it into one reused float32 vector followed by one
  divergence flag per rank (this rank's is 1 when its contribution holds NaN or Inf), reduces
  it, and puts the sum back on the device; `wait` returns it, or raises `Diverged` naming the
  ranks before anyone takes the sum in. Exactly one collective is in flight at a time. A
  blocking average (`start(..., blocking=True)`, `weighted_mean`) runs on the caller's thread,
  with no hand-over: nothing could overlap it.
- `MPICluster`, this rank's worker: the step functions of `steps.py` jitted for its device
  (donating the state they replace), its shard and batches on that device, and the
  communicator. The algorithms in `algorithms/` drive it exactly as they drive the one-host
  cluster.

Where the reduction runs (`comm.staging`):

- `host` (default): the leaves are copied to host memory (on a GPU a device-to-host copy on
  JAX's transfer stream, never on the compute stream that runs the training steps; on a CPU a
  view without a copy) into the send vector, mpi4py's `Allreduce` writes into a receive vector
  (both allocated once per payload structure and reused), and one batched transfer puts the
  sum's leaves back on the device.
- `device`: one compiled program packs, reduces with mpi4jax on the compute device itself and
  unpacks (for a CUDA-aware MPI; with the PyPI Open MPI wheel an mpi4jax call on a GPU runs inside
  an XLA program on the compute stream and so queues behind the training steps: NOTES.md).

An earlier `host` path ran mpi4jax on a second CPU device; measured beside a first NumPy staging
(2 ranks, shared memory, 200 calls) it took 0.89 against 0.30 ms for 80 KB and 20.6 against
8.9 ms for 8.4 MB, with the same overlap, so it was dropped (`make bench` has today's figures).

mpi4jax and mpi4py never share a communicator: training collectives go on `self._comm`, the
control traffic (pre-flight, metrics, barriers) on `self.ctl`, another `Clone()` of COMM_WORLD.
`abort_on_error` turns any failure on one rank into an `MPI_Abort` that ends every rank.
"""

import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np

from cocod_jax import config_files
from cocod_jax import correction
from cocod_jax import steps as steps_lib
from cocod_jax.cluster import background

STAGINGS = ('host', 'device')


class PreflightError(ValueError):
  """The ranks disagree on the config or on the parameters' shapes and dtypes."""


SMALL_PAYLOAD_BYTES = 1 << 20


class _Packer:
  """The staging of one pytree structure: its leaves' places in one flat host vector.

  The weighted leaves `w_i * a_i` go into one send vector (reused) whose tail holds one divergence
  flag per rank; it is allreduced into one receive vector (reused) and the leaves are copied back
  to the device. The weighting is the one-host cluster's (w_i * a_i in float32, then the sum over
  workers), so the two runtimes agree to the rounding of the sum's order.

  Two ways in: a collective started in the background first takes fresh device buffers of the
  weighted leaves (`scale`, compiled, with their finiteness: a later step that donates the tree
  cannot touch them), which the thread copies into the send vector; a blocking one (nothing can
  happen to the tree meanwhile) multiplies straight from the leaves into the send vector.
  Why the leaves are packed on the host: XLA:CPU concatenates and slices far below memory speed
  here (measured on 44.8 MB in 20 leaves: concatenate 27 ms, slicing back 16 ms, against 3.7 ms
  for NumPy's copies and 4.5 ms for one batched `device_put`). Small payloads come back in one
  transfer and a compiled split (0.24 ms for 80 KB in 20 leaves, against 0.73 ms batched).
  """

  def __init__(self, tree, weight, rank, size):
    leaves, self.treedef = jax.tree.flatten(tree)
    for x in leaves:
      if x.dtype != jnp.float32:
        raise TypeError(f'can only average float32 leaves, got {x.dtype} {x.shape}')
    self.shapes = [x.shape for x in leaves]
    self.sizes = [int(np.prod(x.shape)) for x in leaves]
    self.offsets = [int(o) for o in np.cumsum([0] + self.sizes[:-1])]
    length = sum(self.sizes)
    self.flags = slice(length, length + size)  # Where each rank's divergence flag goes.
    self.rank, self.weight = rank, np.float32(weight)
    self.send = np.zeros(length + size, np.float32)
    self.recv = np.empty_like(self.send)
    self.device_program = None  # Built on first use by the `device` staging.

    def scale(t):
      scaled = [a * self.weight for a in jax.tree.leaves(t)]
      return scaled, jnp.isfinite(sum(jnp.sum(a) for a in scaled))  # Finite iff every term is.

    def split(v):
      parts = zip(self.offsets, self.sizes, self.shapes)
      return [v[start : start + n].reshape(shape) for start, n, shape in parts]

    self.scale = jax.jit(scale)
    self.split = jax.jit(split)

  def _flag(self, finite: bool):
    self.send[self.flags] = 0.0
    self.send[self.flags.start + self.rank] = 0.0 if finite else 1.0

  def pack_scaled(self, scaled, finite) -> np.ndarray:
    """Copies `scale`'s fresh leaves (and this rank's flag) into the send vector."""
    for leaf, start, n in zip(scaled, self.offsets, self.sizes):
      self.send[start : start + n] = np.asarray(leaf).reshape(-1)  # A GPU's D2H copy.
    self._flag(bool(finite))
    return self.send

  def pack(self, tree) -> np.ndarray:
    """Multiplies the leaves of `tree` by `w_i` straight into the send vector (blocking use)."""
    for leaf, start, n in zip(jax.tree.leaves(tree), self.offsets, self.sizes):
      np.multiply(np.asarray(leaf).reshape(-1), self.weight, out=self.send[start : start + n])
    total = np.add.reduce(self.send[: self.flags.start], dtype=np.float64)
    self._flag(bool(np.isfinite(total)))
    return self.send

  def unpack(self, recv, device):
    """The leaves of the summed vector as a tree on `device` (complete when this returns, so that
    `recv` can be reused)."""
    if recv.nbytes <= SMALL_PAYLOAD_BYTES:
      leaves = self.split(jax.device_put(recv, device))
    else:
      views = [recv[o : o + n].reshape(s) for o, n, s in zip(self.offsets, self.sizes, self.shapes)]
      leaves = jax.device_put(views, device)
    return jax.tree.unflatten(self.treedef, jax.block_until_ready(leaves))

  def device_reduce(self, mpi4jax, comm, op):
    """For `device` staging: one compiled program that packs, allreduces with mpi4jax on the
    device and unpacks; it returns the summed tree and the flags."""
    n = self.flags.stop - self.flags.start

    def reduce_(scaled, finite):
      flag = jnp.zeros((n,), jnp.float32).at[self.rank].set(jnp.where(finite, 0.0, 1.0))
      flat = mpi4jax.allreduce(
        jnp.concatenate([a.reshape(-1) for a in scaled] + [flag]), op=op, comm=comm
      )
      return jax.tree.unflatten(self.treedef, self.split(flat)), flat[self.flags]

    return jax.jit(reduce_)


class MPICommunicator:
  """Weighted averages across the ranks of `COMM_WORLD`, in a background thread or synchronously.

  Args:
    weights: `w_i` for every rank (ALGORITHMS.md), indexed by rank.
    threaded: run started collectives on the communicator's thread (False: on the caller's, for
      tests that compare threaded and unthreaded runs).
    staging: one of STAGINGS (see the module docstring).
    timeout_s: the longest a collective may take before the job is ended.
    compute_device: where the training state lives (default: this rank's local device).
  """

  def __init__(self, weights, threaded=True, staging='host', timeout_s=600.0, compute_device=None):
    from mpi4py import MPI  # pylint: disable=g-import-not-at-top

    if staging not in STAGINGS:
      raise ValueError(f'comm.staging={staging!r} is invalid; allowed: {list(STAGINGS)}')
    self._mpi = MPI
    world = MPI.COMM_WORLD
    self.rank, self.size = world.Get_rank(), world.Get_size()
    if len(weights) != self.size:
      raise ValueError(f'{len(weights)} weights for {self.size} ranks')
    if threaded and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
      raise RuntimeError(
        f'rank {self.rank}: MPI provides thread level {MPI.Query_thread()}, the background '
        f'allreduce needs MPI_THREAD_MULTIPLE ({MPI.THREAD_MULTIPLE}); use an MPI built with '
        'thread support or comm.threaded=False'
      )
    self.staging = staging
    self.compute_device = compute_device or _local_device(world)
    self._comm = world.Clone()
    self.ctl = world.Clone()
    self._weight = np.float32(weights[self.rank])
    self._packers = {}
    self._worker = background.BackgroundWorker(threaded, timeout_s, self.rank)
    self._mpi4jax = None
    if staging == 'device':
      import mpi4jax  # pylint: disable=g-import-not-at-top

      self._mpi4jax = mpi4jax

  # ------------------------------------------------------------------ the collective

  def _packer(self, tree) -> _Packer:
    leaves, treedef = jax.tree.flatten(tree)
    key = (treedef, *[(x.shape, x.dtype) for x in leaves])
    packer = self._packers.get(key)
    if packer is None:
      packer = self._packers[key] = _Packer(tree, self._weight, self.rank, self.size)
    return packer

  def _reduce(self, job, packer, tree=None, scaled=None, finite=None):
    """Allreduce(SUM) of one tree, back on the compute device; raises Diverged on a flag.

    Either `tree` (a blocking call, packed straight from it) or `scale`'s fresh `scaled` leaves
    and their `finite` flag. The span starts once the input is computed, so `Tc` never includes
    the training steps queued before it on the device.
    """
    jax.block_until_ready(tree if scaled is None else scaled)
    start = time.perf_counter()
    if self.staging == 'host':
      send = packer.pack(tree) if scaled is None else packer.pack_scaled(scaled, finite)
      self._comm.Allreduce(send, packer.recv, op=self._mpi.SUM)
      flags = packer.recv[packer.flags]
      out = None if flags.any() else packer.unpack(packer.recv, self.compute_device)
    else:
      if scaled is None:
        scaled, finite = packer.scale(tree)
      if packer.device_program is None:
        packer.device_program = packer.device_reduce(self._mpi4jax, self._comm, self._mpi.SUM)
      out, flags = packer.device_program(scaled, finite)
      out, flags = jax.block_until_ready(out), np.asarray(flags)
    job.span = (start, time.perf_counter())
    if flags.any():
      raise background.Diverged(np.flatnonzero(flags).tolist(), job.step, job.label)
    return out

  def start(self, tree, label='', step=-1, blocking=False):
    """Starts the weighted allreduce of `tree` (float32 leaves); returns a handle for `wait`.

    `blocking`: the caller waits for it at once, so it runs now on the caller's thread.
    """
    packer = self._packer(tree)
    if blocking:
      reduce_ = lambda job: self._reduce(job, packer, tree=tree)
    else:
      scaled, finite = packer.scale(tree)  # Fresh buffers: later (donating) steps can't touch them.
      reduce_ = lambda job: self._reduce(job, packer, scaled=scaled, finite=finite)
    return self._worker.submit(reduce_, label, step, inline=blocking)

  def wait(self, job):
    """The averaged tree of `job`; raises CommTimeout, CommError or Diverged instead of hanging."""
    return self._worker.wait(job)

  def weighted_mean(self, tree, label='', step=-1):
    """`sum_i w_i tree_i` on every rank, blocking, on the caller's thread."""
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


class MPICluster:
  """This process's worker (rank r = worker r): the step functions jitted for its device.

  Args:
    fns: the per-worker step functions.
    config: the validated config (`comm.*` fields).
    weights: `w_i` of every worker.
  """

  backend = 'mpi'

  def __init__(self, fns: steps_lib.StepFns, config, weights):
    self.comm = MPICommunicator(
      weights,
      threaded=config.comm.threaded,
      staging=config.comm.staging,
      timeout_s=config.comm.timeout_s,
    )
    if self.comm.size != config.num_workers:
      raise ValueError(f'num_workers={config.num_workers} but {self.comm.size} MPI ranks')
    self.num_workers = self.processes = self.comm.size
    self.rank = self.comm.rank
    self.workers = [self.rank]  # The workers this process holds.
    self.is_chief = self.rank == 0
    self.weights = weights
    self.device = self.comm.compute_device
    # The state is donated to the step that replaces it (no second copy of the model in memory);
    # the communicator packs into buffers of its own, so an allreduce in flight is unaffected.
    slow = _slowdown(config, self.rank)
    self.compute_grads = slow(jax.jit(fns.compute_grads))
    self.apply_update = jax.jit(fns.apply_update, donate_argnums=0)
    self.local_step = slow(jax.jit(fns.local_step, donate_argnums=0))
    self.skip_step = jax.jit(fns.skip_step, donate_argnums=0)
    self.masked_step = slow(jax.jit(fns.masked_step, donate_argnums=0))
    tx = correction.decoupled_correction()
    self.snapshot = jax.jit(tx.init)
    self.correct = jax.jit(tx.update)
    self.eval_step = jax.jit(fns.eval_step)
    self.start, self.wait, self.weighted_mean = (
      self.comm.start,
      self.comm.wait,
      self.comm.weighted_mean,
    )

  def put(self, per_worker):
    """This worker's entry of a per-worker list (arrays or pytrees), on its device."""
    return jax.device_put(per_worker[self.rank], self.device)

  def put_stacked(self, tree):
    """This worker's arrays (as its part of a checkpoint holds them) onto its device."""
    return jax.device_put(tree, self.device)

  def any(self, *flags: bool) -> tuple[bool, ...]:
    """For each flag, whether any rank raised it (one control-traffic allreduce: every rank
    must call it)."""
    everyone = np.zeros(len(flags), np.int32)
    self.comm.ctl.Allreduce(np.asarray(flags, np.int32), everyone, op=self.comm._mpi.MAX)
    return tuple(bool(f) for f in everyone)

  def agree(self, value):
    """`value` when every rank holds the same one; ValueError naming the ranks otherwise."""
    everyone = self.comm.ctl.allgather(value)
    if any(v != everyone[0] for v in everyone):
      raise ValueError(f'the ranks disagree: {dict(enumerate(everyone))}')
    return value

  def init_state(self, make):
    """The state of this worker, `make(rank)`, on its device."""
    return jax.device_put(make(self.rank), self.device)

  def first(self, tree):
    """The model of worker 0 in a tree that every worker holds alike (here: this rank's)."""
    return tree

  def mean_loss(self, losses) -> tuple[float, list[int]]:
    """The epoch's training loss `sum_i w_i mean_t loss_i,t`, and the workers here whose mean
    loss is not finite (one transfer of this rank's losses, then a sum over the ranks)."""
    own = float(np.mean(jax.device_get(jnp.stack(losses))))
    bad = [] if np.isfinite(own) else [self.rank]
    return self.comm.sum_scalar(own * self.weights[self.rank]), bad

  def preflight(self, config, state):
    self.comm.preflight(config_hash(config), state)

  def barrier(self):
    self.comm.barrier()

  def gather(self, obj):
    return self.comm.gather(obj)

  def close(self):
    self.comm.close()


def _slowdown(config, rank):
  """A wrapper that makes this worker's steps as slow as its `worker_speeds` entry says.

  With `emulate_speeds`, a worker of speed C_i waits after each local step (the gradient or the
  whole step) for `(C_max / C_i - 1)` times the step's measured compute time, so equal hardware
  behaves like the paper's mixed cluster (the device idles, as a slower device would). Time only:
  the numbers do not change. The first call of each function compiles, so it waits nothing.
  """
  speeds = [float(c) for c in config.worker_speeds]
  factor = max(speeds) / speeds[rank] if config.emulate_speeds and speeds else 1.0
  if factor == 1.0:
    return lambda fn: fn

  def wrap(fn):
    calls = [0]

    def slowed(*args):
      start = time.perf_counter()
      out = jax.block_until_ready(fn(*args))
      calls[0] += 1
      if calls[0] > 1:
        time.sleep((factor - 1.0) * (time.perf_counter() - start))
      return out

    return slowed

  return wrap


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
  """A hash of the whole resolved config, the same on every rank that was launched the same way."""
  return config_files.config_hash(config.to_dict(), digits=16)


def world():
  """(rank, size) of COMM_WORLD."""
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


def abort_on_error(fn, *args):
  """Runs `fn(*args)`; an exception prints `error: rank r: ...` and aborts every rank.

  Without this a rank that fails leaves its peers blocked in the next collective. `SystemExit` is
  passed through: it is raised on every rank alike (a refused config, a pre-flight mismatch, a
  divergence, which every rank learns from the same allreduce).
  """
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  try:
    return fn(*args)
  except SystemExit:
    raise
  except BaseException as e:  # pylint: disable=broad-except
    rank = MPI.COMM_WORLD.Get_rank()
    message = str(e)
    if not isinstance(e, (background.CommError, background.CommTimeout)):
      traceback.print_exc()
      message = f'rank {rank}: {type(e).__name__}: {message}'
    print(f'error: {message}', file=sys.stderr, flush=True)
    sys.stdout.flush()
    MPI.COMM_WORLD.Abort(1)

"""The MPI runtime: R ranks x W workers per rank (`num_workers` = R * W), one process per rank.

The usual multi-host layout is one process per host driving that host's devices; one process per
worker (W = 1) is the special case. A rank holds its W workers exactly as the one-host cluster
holds all of them (`stacked.StackedWorkers`: stacked on a leading axis, the step functions
vmapped over it, the axis sharded over the rank's local devices), and its workers are the
contiguous block `r W, ..., r W + W - 1` of the cluster's (so `worker_speeds` and shards are
listed in that order). A round's average `sum_i w_i x_i`:

1. the local mean: `sum_{i on this rank} w_i x_i` with the cluster's global weights, compiled on
   the rank's devices, into one model (whatever W is);
2. one allreduce of that model between the ranks (`mpi.MPICommunicator`: a background thread,
   host staging, one divergence flag per worker of the cluster);
3. every local worker takes the sum.

Weighted at both levels, the sum over ranks of the ranks' weighted sums is the cluster's weighted
average, exact for proportional sampling and unequal workers and ranks; it differs from the
one-host cluster of R * W workers only in the order of the float32 additions.

W is num_workers / R (`mpi.workers_per_rank`, when set, must agree with the job's R).
Devices (`mpi.devices`, 0: automatic): a rank on CPUs takes this process's XLA CPU devices (one,
unless `--xla_force_host_platform_device_count` says more: main.py sets it for
`mpi.devices` > 1); on accelerators the node's ranks split the node's devices evenly (one rank per
node: all of them). Of those, `choose_devices` takes `mpi.devices`, or the most that divide W.
`agree_on_layout` checks before anything else that every rank holds the same W on the same
number of devices, one line naming both values when not.

With `emulate_speeds`, a rank is as slow as its slowest worker (its workers step together).
"""

import time

import jax
import numpy as np

from cocod_jax import steps as steps_lib
from cocod_jax.algorithms import correction
from cocod_jax.cluster import compression
from cocod_jax.cluster import mpi
from cocod_jax.cluster import stacked
from cocod_jax.config import errors
from cocod_jax.config import loader as config_loader


def workers_per_rank(num_workers: int, ranks: int, requested: int = 0) -> int:
  """W, the workers of each rank.

  Args:
    num_workers: the cluster's workers.
    ranks: the job's MPI ranks.
    requested: `mpi.workers_per_rank` (0: whatever num_workers / ranks is).

  Returns:
    num_workers / ranks.

  Raises:
    ValueError naming the values: `ranks` does not divide `num_workers`, or the quotient is not
    `requested`.
  """
  if requested and requested * ranks != num_workers:
    raise ValueError(
      f'mpi.workers_per_rank={requested} and num_workers={num_workers} need '
      f'{num_workers // requested} MPI ranks, and this job has {ranks}; launch it with '
      f'`mpirun -np {num_workers // requested}`, or set --config.mpi.workers_per_rank=0'
    )
  if num_workers % ranks:
    raise ValueError(
      f'num_workers={num_workers} is invalid for this job of {ranks} MPI ranks: every rank holds '
      f'num_workers / {ranks} workers; allowed: a multiple of {ranks} (--config.num_workers='
      f'{ranks * max(1, num_workers // ranks)}), or `mpirun -np N` with N dividing {num_workers}'
    )
  return num_workers // ranks


def check_world(config, world_size: int) -> None:
  """Under MPI every rank holds num_workers / world size workers: refuses a `num_workers` that
  the world size does not divide, or a world size other than `mpi.workers_per_rank` asks for
  (before JAX starts: cluster/start.py)."""
  try:
    workers_per_rank(config.num_workers, world_size, config.mpi.workers_per_rank)
  except ValueError as e:
    raise errors.UsageError(str(e)) from None


def rank_devices(config, world) -> list:
  """The devices this rank shards its W workers over (collective: every rank calls it).

  Args:
    config: the validated config (`num_workers`, `mpi.*`).
    world: MPI's COMM_WORLD.

  Returns:
    `mpi.devices` of the rank's devices (`mpi.local_devices`), or the most that divide W.

  Raises:
    ValueError: `mpi.devices` does not divide W or exceeds the rank's devices.
  """
  size = world.Get_size()
  width = workers_per_rank(config.num_workers, size, config.mpi.workers_per_rank)
  whose = f'the {width} workers of each rank (num_workers={config.num_workers} on {size} ranks)'
  pool = mpi.local_devices(world)
  return stacked.choose_devices(width, config.mpi.devices, pool, 'mpi.devices', whose)


def agree_on_layout(config) -> None:
  """Before anything else: every rank checks that all ranks hold W workers on D devices alike.

  Raises:
    ValueError on every rank alike (one line): this or another rank's devices cannot hold its
    workers, or two ranks differ in W, D or platform (rank 0's values and the first rank's that
    differs).
  """
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  world = MPI.COMM_WORLD
  mine, problem = None, None
  try:
    devices = rank_devices(config, world)
    width = workers_per_rank(config.num_workers, world.Get_size(), config.mpi.workers_per_rank)
    mine = (width, len(devices), devices[0].platform)
  except ValueError as e:
    problem = str(e)
  everyone = world.allgather((mine, problem))
  for r, (_, problem) in enumerate(everyone):
    if problem:
      raise ValueError(f'{problem} (seen on rank {r})')

  def says(r, layout):
    width, count, platform = layout
    return f'rank {r} holds {width} workers on {count} {platform} device(s)'

  first = everyone[0][0]
  for r, (layout, _) in enumerate(everyone):
    if layout != first:
      raise ValueError(
        f'the ranks hold different layouts: {says(0, first)}, {says(r, layout)}; give every '
        'rank the same devices (mpi.devices, CUDA_VISIBLE_DEVICES, '
        '--xla_force_host_platform_device_count)'
      )


class RanksCluster(stacked.StackedWorkers):
  """This rank's W workers and the communicator between the ranks (see the module docstring).

  Args:
    fns: the per-worker step functions.
    config: the validated config (`num_workers`, `mpi.devices`, `comm.*`, speeds).
    weights: `w_i` of every worker of the cluster.
  """

  backend = 'mpi'

  def __init__(self, fns: steps_lib.StepFns, config, weights):
    from mpi4py import MPI  # pylint: disable=g-import-not-at-top

    world = MPI.COMM_WORLD
    self.rank, self.processes = world.Get_rank(), world.Get_size()
    self.num_workers = config.num_workers
    self.is_chief = self.rank == 0
    width = workers_per_rank(config.num_workers, self.processes, config.mpi.workers_per_rank)
    workers = range(self.rank * width, (self.rank + 1) * width)
    devices = rank_devices(config, world)
    tx = correction.from_config(config.algorithm)
    super().__init__(fns, workers, weights, devices, tx, slowed=_slowdown(config, workers))
    self.comm = mpi.MPICommunicator(
      weights,
      self.workers,
      threaded=config.comm.threaded,
      staging=config.comm.staging,
      timeout_s=config.comm.timeout_s,
      sharding=self.sharded,
    )
    self._w = np.asarray([weights[i] for i in self.workers])
    self.codec = compression.from_config(config)
    self.start, self.wait, self.weighted_mean = (
      self.comm.start,
      self.comm.wait,
      self.comm.weighted_mean,
    )

  def start_compressed(self, tree, ref, error, label='', step=-1, timed=False):
    """CoCoD-SGD's compressed snapshot average (`compression.py`): a message per rank."""
    return self.comm.start_compressed(tree, ref, error, self.codec, label, step, timed)

  def payload_bytes(self, tree) -> int:
    """Bytes this rank hands to MPI for one compressed snapshot average."""
    return self.comm.compressed_bytes(tree, self.codec)

  def staged_bytes(self, tree) -> int:
    """Bytes this rank hands to MPI for one average of `tree`: the staged send vector."""
    return self.comm.staged_bytes(tree)

  def any(self, *flags: bool) -> tuple[bool, ...]:
    """For each flag, whether any rank raised it (one control-traffic allreduce: every rank
    must call it)."""
    everyone = np.zeros(len(flags), np.int32)
    self.comm.ctl.Allreduce(np.asarray(flags, np.int32), everyone, op=self.comm._mpi.MAX)
    return tuple(bool(f) for f in everyone)

  def allgather(self, obj) -> list:
    """Every rank's `obj`, in rank order, on every rank (control traffic: every rank calls it)."""
    return self.comm.ctl.allgather(obj)

  def agree(self, value):
    """`value` when every rank holds the same one; ValueError naming the ranks otherwise."""
    everyone = self.allgather(value)
    if any(v != everyone[0] for v in everyone):
      raise ValueError(f'the ranks disagree: {dict(enumerate(everyone))}')
    return value

  def mean_loss(self, losses) -> tuple[float, list[int]]:
    """The epoch's training loss `sum_i w_i mean_t loss_i,t`, and the workers here whose mean
    loss is not finite (one transfer of this rank's [steps, W] losses, then a sum over the
    ranks)."""
    per_worker, bad = self.local_losses(losses)
    return self.comm.sum_scalar(float(per_worker @ self._w)), bad

  def preflight(self, record: dict, state):
    """Every rank holds the same config (`record`, the run's config as a dict) and shapes."""
    # One worker's shapes (every rank holds the same W: `agree_on_layout`), as the model has them.
    worker = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), state)
    self.comm.preflight(config_loader.config_hash(record, digits=16), worker)

  def barrier(self):
    self.comm.barrier()

  def gather(self, obj):
    return self.comm.gather(obj)

  def close(self):
    self.comm.close()


def _slowdown(config, workers):
  """A wrapper that makes this rank's steps as slow as its slowest worker's `worker_speeds` entry.

  With `emulate_speeds`, a rank whose slowest worker has speed C waits after each local step (the
  gradient or the whole step) for `(C_max / C - 1)` times the step's measured compute time, so
  equal hardware behaves like the paper's mixed cluster (the device idles, as a slower device
  would). Time only: the numbers do not change. The first call of each function compiles, so it
  waits nothing.
  """
  speeds = [float(c) for c in config.worker_speeds]
  slowest = min(speeds[i] for i in workers) if speeds else 1.0
  factor = max(speeds) / slowest if config.emulate_speeds and speeds else 1.0
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

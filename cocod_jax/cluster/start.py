"""How a training process joins its cluster, before JAX starts its backends: MPI's environment,
the world's checks and the ranks' agreement on the layout, the XLA CPU device count; and rank 0's
download of a missing TFDS dataset while the other ranks wait (`main.py` calls these in turn).

Nothing here imports JAX or MPI at module level: the environment must be set first.
"""

import os


def cpu_devices(count: int) -> None:
  """On a CPU a process may shard its workers over `count` emulated XLA CPU devices (the tests
  do): the flag must be set before JAX starts its backends, and changes nothing on a GPU."""
  if count > 1:
    flag = f'--xla_force_host_platform_device_count={count}'
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' ' + flag).strip()


def one_host(config) -> None:
  """The one-host cluster's emulated CPU devices (`one_host.devices`)."""
  cpu_devices(config.one_host.devices)


def check_devices(config) -> None:
  """The one-host cluster's workers must spread evenly over the devices it is given.

  Raises:
    ValueError: one line naming `one_host.devices` and what is allowed.
  """
  import jax  # pylint: disable=g-import-not-at-top

  from cocod_jax.cluster import one_host as one_host_lib  # pylint: disable=g-import-not-at-top

  one_host_lib.choose_devices(config.num_workers, config.one_host.devices, jax.devices())


def mpi():
  """Starts MPI with the environment this runtime needs; returns (rank, world size, broadcast
  from rank 0)."""
  # Open MPI busy-polls inside a blocking collective. Beside the training steps that spinning
  # thread took a third of the CPU from them on 2 cores (measured: 10 steps 3.47 s alone,
  # 4.59 s beside a spinning allreduce, 3.51 s with yielding); it must yield. Read at MPI_Init,
  # so set before mpi4py starts MPI; an explicit setting in the environment wins.
  os.environ.setdefault('OMPI_MCA_mpi_yield_when_idle', '1')
  # Ranks that share a node's GPUs must not each preallocate 75% of every one of them.
  os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
  from cocod_jax.cluster import mpi as mpi_lib  # pylint: disable=g-import-not-at-top

  rank, size = mpi_lib.world()
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  return rank, size, lambda obj: MPI.COMM_WORLD.bcast(obj, root=0)


def mpi_layout(config, size: int) -> None:
  """The world of `size` ranks fits the config, and every rank agrees on W and the devices.

  Raises:
    errors.UsageError: the world size does not fit `num_workers` (`validation.check_world`).
    ValueError: the ranks disagree on the layout (W, the device counts).
  """
  from cocod_jax.cluster import ranks  # pylint: disable=g-import-not-at-top
  from cocod_jax.config import validation  # pylint: disable=g-import-not-at-top

  validation.check_world(config, size)
  cpu_devices(config.mpi.devices)  # A rank's own devices (`mpi.devices`).
  ranks.agree_on_layout(config)


def prepare_data(config, rank: int, broadcast) -> str | None:
  """Downloads a missing TFDS dataset when there is a network: rank 0 alone checks and prepares,
  then tells the others (which wait for it) whether that worked. Returns the problem (every rank
  alike), or None.

  Without a network nothing happens here: loading then refuses within seconds, naming the
  dataset, the directory searched and the command that prepares it.
  """
  from cocod_jax.data import cifar  # pylint: disable=g-import-not-at-top
  from cocod_jax.data.dataset import DataError  # pylint: disable=g-import-not-at-top

  name = config.dataset.name
  if name not in cifar.TFDS_DATASETS:
    return None
  problem = None
  if rank == 0:
    ready = cifar.is_prepared(name, config.data_dir)
    if not ready and cifar.network_reachable(name):
      where = cifar.resolve_data_dir(config.data_dir)
      print(
        f'{name} is not prepared in {where}: downloading it once (other ranks wait)', flush=True
      )
      try:
        cifar.prepare(name, config.data_dir)
      except DataError as e:
        problem = str(e)
  return broadcast(problem)

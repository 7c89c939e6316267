"""How a training process joins its cluster, before JAX starts its backends: MPI's environment,
the world's checks and the ranks' agreement on the layout, the XLA CPU device count; and rank 0's
download of a missing TFDS dataset while the other ranks wait (`main.py` calls these in turn).

Nothing here imports JAX or MPI at module level: the environment must be set first.

A rank that fails alone must end the job, not leave the others blocked in a collective (and
itself in `MPI_Finalize`, which waits for them: a job that failed during the start hung). So
`mpi()` installs three guards for the rest of the process:
- an exception that reaches the top of a rank (a failure during the start, outside
  `mpi.abort_on_error`) prints its traceback and one `error: rank r: ...` line and ends the job
  (`end_job`);
- a rank that exits with a non-zero status (a refusal, a divergence, a preemption: normally on
  every rank alike) first waits up to EXIT_WAIT_S for the others to exit too; if they do not
  come (it failed alone: say a dataset missing on its host), it says so and leaves without
  `MPI_Finalize`, and mpirun ends the job;
- `HOSTS`, every rank's host, for the line that names the peers a stuck collective waits for.
"""

import atexit
import os
import sys
import threading
import time

START_WAIT_S = 60.0  # How long the ranks may take to all reach the start (their first exchange).
EXIT_WAIT_S = 10.0  # How long a failing rank waits for the others to exit alike.
ABORT_WAIT_S = 5.0  # How long MPI_Abort may take before the rank leaves by itself.
HOSTS: list[str] = []  # HOSTS[r]: the host of rank r (MPI's processor name), set by mpi().
_state = {'status': None, 'ending': threading.Lock(), 'rank': 0}


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

  from cocod_jax.cluster import stacked  # pylint: disable=g-import-not-at-top

  stacked.choose_devices(config.num_workers, config.one_host.devices, jax.devices())


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

  _guard(MPI, rank)
  return rank, size, lambda obj: MPI.COMM_WORLD.bcast(obj, root=0)


def waits_for(rank: int) -> str:
  """'; it waits for rank 1 on h2, ...': the peers of `rank`, by host, other hosts first."""
  if not HOSTS:
    return ''
  others = {}
  for r, host in enumerate(HOSTS):
    if r != rank:
      others.setdefault(host, []).append(r)
  here = HOSTS[rank] if rank < len(HOSTS) else None
  parts = [
    f'rank{"s" if len(rs) > 1 else ""} {", ".join(map(str, rs))} on {host}'
    + (' (this host)' if host == here else '')
    for host, rs in sorted(others.items(), key=lambda item: item[0] == here)
  ]
  return '; it waits for ' + ', '.join(parts) if parts else ''


def end_job(message: str, status: int = 1) -> None:
  """Prints `error: MESSAGE` and ends every rank (MPI_Abort); a rank whose MPI_Abort has not ended
  it within ABORT_WAIT_S (the launcher cannot reach a peer's host) leaves by itself. Only the
  first caller prints; a second waits for the end."""
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  if not _state['ending'].acquire(blocking=False):
    time.sleep(ABORT_WAIT_S + 1.0)
    os._exit(status)
  print(f'error: {message}', file=sys.stderr, flush=True)
  sys.stdout.flush()

  def leave():
    time.sleep(ABORT_WAIT_S)
    os._exit(status)

  threading.Thread(target=leave, name='abort-deadline', daemon=True).start()
  MPI.COMM_WORLD.Abort(status)
  leave()


def exiting(status) -> None:
  """The status the process is about to exit with (main.py says it as its SystemExit passes):
  the exit guard of an MPI rank reads it (`_guard`)."""
  _state['status'] = status


def _guard(MPI, rank: int) -> None:  # pylint: disable=invalid-name
  """The guards of the module docstring (collective: every rank calls it once, at the start)."""
  _state['rank'] = rank
  # The first exchange between the ranks, with a deadline: ranks that cannot reach each other
  # (two hosts under one hostname, which MPI takes for one host; a firewall) would hang here.
  import numpy as np  # pylint: disable=g-import-not-at-top

  width = MPI.MAX_PROCESSOR_NAME
  name = np.zeros(width, np.uint8)
  mine = MPI.Get_processor_name().encode()[:width]
  name[: len(mine)] = np.frombuffer(mine, np.uint8)
  names = np.zeros((MPI.COMM_WORLD.Get_size(), width), np.uint8)
  request = MPI.COMM_WORLD.Iallgather(name, names)
  deadline = time.monotonic() + START_WAIT_S
  while not request.Test():
    if time.monotonic() > deadline:
      end_job(
        f'rank {rank} on {MPI.Get_processor_name()}: the ranks did not all reach the start within '
        f'{START_WAIT_S:g} s: they cannot exchange messages (hosts that share one hostname, which '
        'MPI takes for one host; a firewall; btl_tcp_if_include naming no common network)'
      )
    time.sleep(0.02)
  HOSTS[:] = [bytes(row).rstrip(b'\0').decode(errors='replace') for row in names]
  leaving = MPI.COMM_WORLD.Dup()  # Used only at the exit: nothing else is matched on it.

  def uncaught(kind, value, tb):
    sys.__excepthook__(kind, value, tb)
    end_job(f'rank {rank}: {kind.__name__}: {value}')

  def leave():
    status = _state['status']
    if status is None or status == 0:
      return  # MPI_Finalize as usual.
    code = status if isinstance(status, int) else 1
    request = leaving.Ibarrier()
    deadline = time.monotonic() + EXIT_WAIT_S
    while not request.Test():
      if time.monotonic() > deadline:
        print(
          f'error: rank {rank}: exiting with status {code} alone (the other ranks did not exit '
          f'within {EXIT_WAIT_S:g} s): ending the job',
          file=sys.stderr,
          flush=True,
        )
        sys.stdout.flush()
        os._exit(code)
      time.sleep(0.02)

  sys.excepthook = uncaught
  atexit.register(leave)  # Runs before mpi4py's MPI_Finalize (registered at its import).


def mpi_layout(config, size: int) -> None:
  """The world of `size` ranks fits the config, and every rank agrees on W and the devices.

  Raises:
    errors.UsageError: the world size does not fit `num_workers` (`ranks.check_world`).
    ValueError: the ranks disagree on the layout (W, the device counts).
  """
  from cocod_jax.cluster import ranks  # pylint: disable=g-import-not-at-top

  ranks.check_world(config, size)
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

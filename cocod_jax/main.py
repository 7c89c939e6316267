"""Entry point: `python -m cocod_jax.main --config=configs/default.py --workdir=DIR`.

Overrides go after the config, e.g. `--config.algorithm.name=local_sgd`; the config is locked.
Every user mistake (a misspelt field, a wrong type, an invalid value, a bad dataset) is refused
before anything is written, with one line per problem on stderr (`error: ...`) and exit status 2;
`--verbose` shows the Python traceback as well. A run that diverges (NaN or Inf) stops with one
line naming the worker, the step and the learning rate, and exit status 3. With
`--config.backend=mpi` run R processes (ranks) under `mpirun` or `srun` (see launch/), each
holding num_workers / R workers on its local devices; an unexpected error on any rank then ends
the job on every rank.
"""

import os
import sys

from absl import app
from absl import logging

from cocod_jax.config import errors
from cocod_jax.config import files as config_files
from cocod_jax.config import flags as cocod_flags

FLAGS = cocod_flags.FLAGS
_RANK = ''  # 'rank r: ' under MPI, so that every line says which process refused.


def _fail(error, status=errors.EXIT_USAGE):
  verbose = '--verbose' in sys.argv or (FLAGS.is_parsed() and FLAGS.verbose)
  errors.fail(error, status, prefix=_RANK, verbose=verbose)


def _flag_error(error, argv) -> str | errors.UsageError:
  """What to say about a command line that absl or ml_collections refused: the first override
  that cannot be set on the config (set as the sweep runner sets it), else absl's own line."""

  spec = next((a.split('=', 1)[1] for a in argv if a.startswith('--config=')), None)
  if spec is not None:
    try:
      config = config_files.load(spec)
      config.lock()
      for arg in argv:
        if arg.startswith('--config.'):
          path, _, text = arg[len('--config.') :].partition('=')
          config_files.set_field(config, path, text, from_text=True)
    except errors.UsageError as e:
      return e
  return str(error).splitlines()[0].removeprefix('flag ').strip()


def parse_flags(argv):
  """absl's flag parsing, with every refusal turned into one line and exit status 2."""
  cocod_flags.list_in_help()
  try:
    rest = cocod_flags.read(argv)
    # ml_collections defers a config file that failed to load until the config is first read.
    if FLAGS['config'].present:
      FLAGS.config.keys()
  except Exception as e:  # pylint: disable=broad-except
    _fail(_flag_error(e, argv))
  if FLAGS['config'].present:
    try:  # The right type, every required field.
      config_files.checked(FLAGS.config, FLAGS['config'].config_filename)
    except errors.UsageError as e:
      _fail(e)
  return rest


def _add_xla_flag(flag):
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' ' + flag).strip()


def _prepare_data(config, rank, broadcast):
  """Downloads a missing TFDS dataset when there is a network: rank 0 alone checks and prepares,
  then tells the others (which wait for it) whether that worked.

  Without a network nothing happens here: loading then refuses within seconds, naming the
  dataset, the directory searched and the command that prepares it.
  """
  from cocod_jax.data import cifar
  from cocod_jax.data import pipeline as input_pipeline  # pylint: disable=g-import-not-at-top

  name = config.dataset.name
  if name not in cifar.TFDS_DATASETS:
    return
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
      except input_pipeline.DataError as e:
        problem = str(e)
  problem = broadcast(problem)
  if problem:
    _fail(problem)


def _start_mpi(config):
  """Starts MPI with the environment this runtime needs; returns (rank, broadcast)."""
  global _RANK
  from cocod_jax.config import validation as config_validation  # pylint: disable=g-import-not-at-top

  # Open MPI busy-polls inside a blocking collective. Beside the training steps that spinning
  # thread took a third of the CPU from them on 2 cores (measured: 10 steps 3.47 s alone,
  # 4.59 s beside a spinning allreduce, 3.51 s with yielding); it must yield. Read at MPI_Init,
  # so set before mpi4py starts MPI; an explicit setting in the environment wins.
  os.environ.setdefault('OMPI_MCA_mpi_yield_when_idle', '1')
  # Ranks that share a node's GPUs must not each preallocate 75% of every one of them.
  os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
  from cocod_jax.cluster import mpi  # pylint: disable=g-import-not-at-top
  from cocod_jax.cluster import ranks  # pylint: disable=g-import-not-at-top

  rank, size = mpi.world()
  _RANK = f'rank {rank}: '
  try:
    config_validation.check_world(config, size)
  except errors.UsageError as e:
    _fail(e)
  if config.mpi.devices > 1:  # A rank on a CPU shards its workers over emulated CPU devices.
    _add_xla_flag(f'--xla_force_host_platform_device_count={config.mpi.devices}')
  try:
    ranks.agree_on_layout(config)  # Every rank alike: W and the device counts.
  except ValueError as e:
    _fail(e)
  from mpi4py import MPI  # pylint: disable=g-import-not-at-top

  return rank, lambda obj: MPI.COMM_WORLD.bcast(obj, root=0)


def _check_devices(config):
  """The one-host cluster's workers must spread evenly over the devices it is given."""
  import jax  # pylint: disable=g-import-not-at-top

  from cocod_jax.cluster import one_host  # pylint: disable=g-import-not-at-top

  try:
    one_host.choose_devices(config.num_workers, config.one_host.devices, jax.devices())
  except ValueError as e:
    _fail(e)


def _train(config, dataset):
  """Runs training; every way it can end short becomes one line and its exit status."""
  from cocod_jax import train  # pylint: disable=g-import-not-at-top
  from cocod_jax.record import checkpoints  # pylint: disable=g-import-not-at-top
  from cocod_jax.record import workdir  # pylint: disable=g-import-not-at-top

  try:
    train.train_and_evaluate(config, FLAGS.workdir, dataset)
  except train.Diverged as e:
    _fail(e, errors.EXIT_DIVERGED)
  except (checkpoints.ResumeError, errors.UsageError) as e:  # (WorkdirError, DataError)
    _fail(e)
  except workdir.DiskFull as e:
    if config.backend == 'mpi':  # The other ranks may wait in a collective: end them too.
      errors.report(e, prefix=_RANK)
      from mpi4py import MPI  # pylint: disable=g-import-not-at-top

      MPI.COMM_WORLD.Abort(errors.EXIT_DISK_FULL)
    _fail(e, errors.EXIT_DISK_FULL)
  except checkpoints.Preempted as e:
    print(f'{_RANK}{e}; run the same command again to continue', flush=True)
    sys.exit(errors.EXIT_PREEMPTED)


def _train_mpi(config, dataset):
  from cocod_jax.cluster import mpi  # pylint: disable=g-import-not-at-top

  def run():
    try:
      _train(config, dataset)
    except mpi.PreflightError as e:  # Raised on every rank alike: no abort needed.
      _fail(e)

  mpi.abort_on_error(run)


def _check_workdir(config):
  """The workdir can hold the run, and a one-host run is not one of several MPI processes (each
  would run every worker into the same workdir); before any data is loaded."""
  from cocod_jax.record import workdir  # pylint: disable=g-import-not-at-top

  size, where = workdir.mpi_job_size()
  if config.backend == 'one_host' and size > 1:
    _fail(
      f"backend='one_host' is invalid inside an MPI job of {size} processes ({where}): every "
      'process would run all the workers into the same workdir; allowed: --config.backend=mpi '
      'under mpirun/srun, or one process without mpirun'
    )
  try:
    workdir.check(FLAGS.workdir)
  except workdir.WorkdirError as e:
    _fail(e)


def main(argv):
  if len(argv) > 1:
    _fail(f'unexpected arguments {argv[1:]}; overrides look like --config.batch_size=64')
  config = FLAGS.config
  logging.set_verbosity(logging.WARNING)
  from cocod_jax.config import validation as config_validation  # pylint: disable=g-import-not-at-top

  problems = config_validation.errors(config)
  if problems:
    _fail(errors.UsageError(problems))
  _check_workdir(config)
  rank, broadcast = 0, lambda obj: obj
  if config.backend == 'mpi':
    rank, broadcast = _start_mpi(config)
  elif config.one_host.devices > 1:
    # On a CPU the one-host cluster may be sharded over several XLA CPU devices (the tests do);
    # the flag must be set before JAX starts its backends and changes nothing on a GPU.
    _add_xla_flag(f'--xla_force_host_platform_device_count={config.one_host.devices}')
  _prepare_data(config, rank, broadcast)
  from cocod_jax.data import pipeline as input_pipeline  # pylint: disable=g-import-not-at-top

  try:  # The plan's checks of the data against the config come before any write too.
    dataset = input_pipeline.load(config.dataset, config.data_dir)
  except errors.UsageError as e:
    _fail(e)
  if config.backend == 'one_host':
    _check_devices(config)
    _train(config, dataset)
  else:
    _train_mpi(config, dataset)


if __name__ == '__main__':
  cocod_flags.define_main_flags()
  app.run(main, flags_parser=parse_flags)

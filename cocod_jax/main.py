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

import importlib.util
import os
import re
import sys
import traceback

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Directory for results.json, final_params.npz, summaries.')
config_flags.DEFINE_config_file('config', None, 'Training configuration file.', lock_config=True)
flags.DEFINE_bool('verbose', False, 'Also print the Python traceback of a refused input.')
flags.mark_flags_as_required(['config', 'workdir'])

EXIT_USAGE, EXIT_DIVERGED = 2, 3  # A preempted run exits with checkpoints.EXIT_PREEMPTED (75).
_RANK = ''  # 'rank r: ' under MPI, so that every line says which process refused.


def _fail(message, status=EXIT_USAGE):
  if '--verbose' in sys.argv or (FLAGS.is_parsed() and FLAGS.verbose):
    traceback.print_exc()
  for line in str(message).splitlines():
    print(f'error: {_RANK}{line}', file=sys.stderr, flush=True)
  sys.exit(status)


def _load_config_file(value):
  """The ConfigDict of `--config=FILE[:ARG]`, loaded as ml_collections does (for messages)."""
  path, _, arg = value.partition(':')
  spec = importlib.util.spec_from_file_location('_cocod_config', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


def _flag_error(error, argv) -> str:
  """One line (or one per problem) for a command line that absl or ml_collections refused."""
  config_arg = next((a.split('=', 1)[1] for a in argv if a.startswith('--config=')), None)
  config = None
  if config_arg is not None:
    if not os.path.isfile(config_arg.partition(':')[0]):
      return f'--config={config_arg}: no such config file'
    try:
      config = _load_config_file(config_arg)
    except Exception as e:  # pylint: disable=broad-except
      return f'--config={config_arg} could not be loaded: {type(e).__name__}: {e}'
  if config is not None:
    from cocod_jax import config_validation  # pylint: disable=g-import-not-at-top

    overrides = [a[len('--config.') :].split('=', 1) for a in argv if a.startswith('--config.')]
    for path, *_ in overrides:
      message = config_validation.unknown_field(config, path)
      if message:
        return message
    match = re.search(r'flag --config\.([\w.]+)=(.*?): (.*)', str(error))
    if match:
      field, value, why = match.groups()
      current = config
      for part in field.split('.'):
        current = current[part]
      kind = type(current).__name__
      why = why.strip('()').replace("'", '')
      return f'--config.{field}={value} is invalid; allowed: a value of type {kind} ({why})'
  return str(error).splitlines()[0].removeprefix('flag ').strip()


def parse_flags(argv):
  """absl's flag parsing, with every refusal turned into one line and exit status 2."""
  try:
    rest = FLAGS(argv)
    # ml_collections defers a config file that failed to load until the config is first read.
    if FLAGS['config'].present:
      FLAGS.config.keys()
  except Exception as e:  # pylint: disable=broad-except
    _fail(_flag_error(e, argv))
  return rest


def _add_xla_flag(flag):
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' ' + flag).strip()


def _prepare_data(config, rank, broadcast):
  """Downloads a missing TFDS dataset when there is a network: rank 0 alone checks and prepares,
  then tells the others (which wait for it) whether that worked.

  Without a network nothing happens here: loading then refuses within seconds, naming the
  dataset, the directory searched and the command that prepares it.
  """
  from cocod_jax import input_pipeline  # pylint: disable=g-import-not-at-top

  name = config.dataset.name
  if name not in input_pipeline.TFDS_DATASETS:
    return
  problem = None
  if rank == 0:
    ready = input_pipeline.is_prepared(name, config.data_dir)
    if not ready and input_pipeline.network_reachable(name):
      where = input_pipeline.resolve_data_dir(config.data_dir)
      print(
        f'{name} is not prepared in {where}: downloading it once (other ranks wait)', flush=True
      )
      try:
        input_pipeline.prepare(name, config.data_dir)
      except input_pipeline.DataError as e:
        problem = str(e)
  problem = broadcast(problem)
  if problem:
    _fail(problem)


def _start_mpi(config):
  """Starts MPI with the environment this runtime needs; returns (rank, broadcast)."""
  global _RANK
  from cocod_jax import config_validation  # pylint: disable=g-import-not-at-top

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
  except config_validation.ConfigError as e:
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
  from cocod_jax import checkpoints  # pylint: disable=g-import-not-at-top
  from cocod_jax import train  # pylint: disable=g-import-not-at-top

  try:
    train.train_and_evaluate(config, FLAGS.workdir, dataset)
  except train.Diverged as e:
    _fail(e, EXIT_DIVERGED)
  except checkpoints.ResumeError as e:
    _fail(e)
  except checkpoints.Preempted as e:
    print(f'{_RANK}{e}; run the same command again to continue', flush=True)
    sys.exit(checkpoints.EXIT_PREEMPTED)


def _train_mpi(config, dataset):
  from cocod_jax.cluster import mpi  # pylint: disable=g-import-not-at-top

  def run():
    try:
      _train(config, dataset)
    except mpi.PreflightError as e:  # Raised on every rank alike: no abort needed.
      _fail(e)

  mpi.abort_on_error(run)


def main(argv):
  if len(argv) > 1:
    _fail(f'unexpected arguments {argv[1:]}; overrides look like --config.batch_size=64')
  config = FLAGS.config
  logging.set_verbosity(logging.WARNING)
  from cocod_jax import config_validation  # pylint: disable=g-import-not-at-top

  problems = config_validation.errors(config)
  if problems:
    _fail('\n'.join(problems))
  rank, broadcast = 0, lambda obj: obj
  if config.backend == 'mpi':
    rank, broadcast = _start_mpi(config)
  elif config.one_host.devices > 1:
    # On a CPU the one-host cluster may be sharded over several XLA CPU devices (the tests do);
    # the flag must be set before JAX starts its backends and changes nothing on a GPU.
    _add_xla_flag(f'--xla_force_host_platform_device_count={config.one_host.devices}')
  _prepare_data(config, rank, broadcast)
  try:
    dataset = config_validation.load_checked_dataset(config)
  except config_validation.ConfigError as e:
    _fail(e)
  if config.backend == 'one_host':
    _check_devices(config)
    _train(config, dataset)
  else:
    _train_mpi(config, dataset)


if __name__ == '__main__':
  app.run(main, flags_parser=parse_flags)

"""Entry point: `python -m cocod_jax.main --config=configs/default.py --workdir=DIR`.

Overrides go after the config, e.g. `--config.algorithm.name=local_sgd`; the config is locked,
so a misspelt field fails. Invalid values are refused before any output with one line on stderr
and exit status 2. With `--config.backend=mpi` run one process per worker under `mpirun` or
`srun` (see launch/); an error on any rank then ends the job on every rank.
"""

import os
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Directory for results.json, final_params.npz, summaries.')
config_flags.DEFINE_config_file('config', None, 'Training configuration file.', lock_config=True)
flags.mark_flags_as_required(['config', 'workdir'])

_RANK = ''  # 'rank r: ' under MPI, so that every line says which process refused.


def _fail(message):
  print(f'error: {_RANK}{message}', file=sys.stderr, flush=True)
  sys.exit(2)


def _add_xla_flag(flag):
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' ' + flag).strip()


def main(argv):
  global _RANK
  if len(argv) > 1:
    _fail(f'unexpected arguments {argv[1:]}')
  config = FLAGS.config
  logging.set_verbosity(logging.WARNING)
  from cocod_jax import config_validation  # pylint: disable=g-import-not-at-top

  try:
    config_validation.validate(config)
  except config_validation.ConfigError as e:
    _fail(str(e))
  if config.backend == 'mpi':
    # Open MPI busy-polls inside a blocking collective. Beside the training steps that spinning
    # thread took a third of the CPU from them on 2 cores (measured: 10 steps 3.47 s alone,
    # 4.59 s beside a spinning allreduce, 3.51 s with yielding); it must yield. Read at MPI_Init,
    # so set before mpi4py starts MPI; an explicit setting in the environment wins.
    os.environ.setdefault('OMPI_MCA_mpi_yield_when_idle', '1')
    # Ranks that share a node's GPUs must not each preallocate 75% of every one of them.
    os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
    from cocod_jax import mpi_comm  # pylint: disable=g-import-not-at-top

    rank, size = mpi_comm.world()
    _RANK = f'rank {rank}: '
    try:
      config_validation.check_world(config, size)
    except config_validation.ConfigError as e:
      _fail(str(e))
    # A second CPU device for the host-staged allreduce; on a GPU the CPU device is separate.
    _add_xla_flag('--xla_force_host_platform_device_count=2')
  else:
    # One XLA CPU device per emulated worker; must be set before JAX starts its backends.
    _add_xla_flag(f'--xla_force_host_platform_device_count={config.num_workers}')
  import jax  # pylint: disable=g-import-not-at-top

  if config.backend == 'emulated' and len(jax.devices('cpu')) < config.num_workers:
    _fail(f'num_workers={config.num_workers} but only {len(jax.devices("cpu"))} CPU devices exist')
  try:
    dataset = config_validation.load_checked_dataset(config)
  except config_validation.ConfigError as e:
    _fail(str(e))
  from cocod_jax import train  # pylint: disable=g-import-not-at-top

  if config.backend == 'emulated':
    train.train_and_evaluate(config, FLAGS.workdir, dataset)
    return
  from cocod_jax import mpi_comm  # pylint: disable=g-import-not-at-top

  def run():
    try:
      train.train_and_evaluate(config, FLAGS.workdir, dataset)
    except mpi_comm.PreflightError as e:  # Raised on every rank alike: no abort needed.
      _fail(str(e))

  mpi_comm.abort_on_error(run)


if __name__ == '__main__':
  app.run(main)

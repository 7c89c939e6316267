"""Entry point: `python -m cocod_jax.main --config=configs/default.py --workdir=DIR`.

Overrides go after the config, e.g. `--config.algorithm.name=local_sgd`; the config is locked.
Every user mistake (a misspelt field, a wrong type, an invalid value, a bad dataset) is refused
before anything is written, with one line per problem on stderr (`error: ...`) and exit status 2;
`--verbose` shows the Python traceback as well. A run that diverges (NaN or Inf) stops with one
line naming the worker, the step and the learning rate, and exit status 3. With
`--config.backend=mpi` run R processes (ranks) under `mpirun` or `srun` (see launch/), each
holding num_workers / R workers on its local devices; an unexpected error on any rank then ends
the job on every rank. The exit statuses: config/errors.py.
"""

import sys

from absl import app
from absl import logging

from cocod_jax.cluster import start
from cocod_jax.config import errors
from cocod_jax.config import flags as cocod_flags
from cocod_jax.config import loader as config_loader

FLAGS = cocod_flags.FLAGS
_RANK = ''  # 'rank r: ' under MPI, so that every line says which process refused.
parse_flags = cocod_flags.parse_main  # app.run's flags_parser (also of tests/faults.py).


def _fail(error, status=errors.EXIT_USAGE):
  verbose = '--verbose' in sys.argv or (FLAGS.is_parsed() and FLAGS.verbose)
  errors.fail(error, status, prefix=_RANK, verbose=verbose)


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


def _checked(config):
  """The config's own checks, then the workdir's, before any data is loaded: every problem of
  the config (an override the algorithm does not use included), a workdir that cannot hold the
  run, a one-host run that is one of several MPI processes."""
  from cocod_jax import validation  # pylint: disable=g-import-not-at-top
  from cocod_jax.record import workdir  # pylint: disable=g-import-not-at-top

  as_given = None  # The file's config: an override the algorithm does not use is refused.
  if FLAGS['config'].override_values:
    as_given = config_loader.load(FLAGS['config'].config_filename)
  problems = validation.errors(config, as_given)
  if problems:
    _fail(errors.UsageError(problems))
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
  if FLAGS.show_config:  # Every field, its value and its meaning; nothing checked or written.
    from cocod_jax.config import describe  # pylint: disable=g-import-not-at-top

    spec = next((a.split('=', 1)[1] for a in sys.argv if a.startswith('--config=')), None)
    print(describe.show(config, spec or FLAGS['config'].config_filename), end='', flush=True)
    sys.exit(0)
  logging.set_verbosity(logging.WARNING)
  _checked(config)
  try:
    _run(config)
  except SystemExit as e:  # The status, for a rank that exits non-zero alone (start.exiting).
    start.exiting(e.code)
    raise


def _run(config):
  """Joins the cluster, loads the data and trains: every status leaves as SystemExit."""
  global _RANK
  rank, broadcast = 0, lambda obj: obj
  try:
    if config.backend == 'mpi':
      rank, size, broadcast = start.mpi()
      _RANK = f'rank {rank}: '
      start.mpi_layout(config, size)
    else:
      start.one_host(config)
    problem = start.prepare_data(config, rank, broadcast)
    if problem:
      _fail(problem)
    from cocod_jax.data import pipeline  # pylint: disable=g-import-not-at-top

    dataset = pipeline.load(config.dataset, config.data_dir)  # The plan checks it against config.
    if config.backend == 'one_host':
      start.check_devices(config)
  except (errors.UsageError, ValueError) as e:
    _fail(e)
  if config.backend == 'one_host':
    _train(config, dataset)
  else:
    from cocod_jax.cluster import mpi  # pylint: disable=g-import-not-at-top

    def run():
      try:
        _train(config, dataset)
      except mpi.PreflightError as e:  # Raised on every rank alike: no abort needed.
        _fail(e)

    mpi.abort_on_error(run)


if __name__ == '__main__':
  cocod_flags.define_main_flags()
  app.run(main, flags_parser=parse_flags)

"""Entry point: `python -m cocod_jax.main --config=configs/default.py --workdir=DIR`.

Overrides go after the config, e.g. `--config.algorithm.name=local_sgd`; the config is locked,
so a misspelt field fails. Invalid values are refused before any output with one line on stderr
and exit status 2.
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


def _fail(message):
  print(f'error: {message}', file=sys.stderr)
  sys.exit(2)


def main(argv):
  if len(argv) > 1:
    _fail(f'unexpected arguments {argv[1:]}')
  config = FLAGS.config
  logging.set_verbosity(logging.WARNING)
  from cocod_jax import config_validation  # pylint: disable=g-import-not-at-top

  try:
    config_validation.validate(config)
  except config_validation.ConfigError as e:
    _fail(str(e))
  # One XLA CPU device per emulated worker; must be set before JAX starts its backends.
  flag = f'--xla_force_host_platform_device_count={config.num_workers}'
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' ' + flag).strip()
  import jax  # pylint: disable=g-import-not-at-top

  if len(jax.devices('cpu')) < config.num_workers:
    _fail(f'num_workers={config.num_workers} but only {len(jax.devices("cpu"))} CPU devices exist')
  try:
    dataset = config_validation.load_checked_dataset(config)
  except config_validation.ConfigError as e:
    _fail(str(e))
  from cocod_jax import train  # pylint: disable=g-import-not-at-top

  train.train_and_evaluate(config, FLAGS.workdir, dataset)


if __name__ == '__main__':
  app.run(main)

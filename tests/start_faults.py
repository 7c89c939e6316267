"""The entry point with a failure during the start on the rank whose environment sets
COCOD_START_FAULT (tests/hosts_test.py starts one rank with it, `env COCOD_START_FAULT=... python
tests/start_faults.py` after mpirun's `:`):

- `raise`: an exception where the ranks agree on their layout (`start.mpi_layout`), while the
  others wait in that collective for it;
- `exit`: a refusal (exit 2) there on that rank alone, as a dataset missing on one host would be.

    launch/mpirun.sh -np 1 python tests/start_faults.py <main flags> : \
        -np 1 env COCOD_START_FAULT=raise python tests/start_faults.py <main flags>
"""

import os

from absl import app

from cocod_jax import main
from cocod_jax.cluster import start
from cocod_jax.config import flags as cocod_flags

_layout = start.mpi_layout


def _failing_layout(config, size):
  fault = os.environ.get('COCOD_START_FAULT')
  if fault == 'raise':
    raise RuntimeError('injected failure during the start')
  if fault == 'exit':
    main._fail('injected refusal on this rank alone (a dataset missing on its host)')  # pylint: disable=protected-access
  return _layout(config, size)


if __name__ == '__main__':
  start.mpi_layout = _failing_layout
  cocod_flags.define_main_flags()
  app.run(main.main, flags_parser=main.parse_flags)

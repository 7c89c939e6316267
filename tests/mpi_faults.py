"""The entry point with one fault injected on one rank, for tests/mpi_test.py (run under mpirun).

    launch/mpirun.sh -np 2 python tests/mpi_faults.py --fault=raise_in_thread <main flags>

Faults: `raise_in_thread` (rank 0's allreduce thread raises at its 3rd collective),
`kill_rank` (rank 1 kills itself with SIGKILL when it starts its 5th collective), `stall` (rank
1's thread sleeps in its 3rd collective, so the others time out), `shape` (rank 1 builds a model
whose last kernel has one extra column).
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from cocod_jax import main  # noqa: E402
from cocod_jax import steps  # noqa: E402
from cocod_jax.cluster import mpi  # noqa: E402

flags.DEFINE_enum('fault', None, ['raise_in_thread', 'kill_rank', 'stall', 'shape'], 'The fault.')

_calls = {'reduce': 0, 'start': 0}


def _inject(fault, rank):
  reduce_, start, create = (
    mpi.MPICommunicator._reduce,
    mpi.MPICommunicator.start,
    steps.create_train_state,
  )

  def bad_reduce(self, *args, **kwargs):
    _calls['reduce'] += 1
    if _calls['reduce'] == 3:
      if fault == 'raise_in_thread' and rank == 0:
        raise RuntimeError('injected failure in the allreduce thread')
      if fault == 'stall' and rank == 1:
        time.sleep(3600)
    return reduce_(self, *args, **kwargs)

  def bad_start(self, tree, label='', step=-1, blocking=False):
    _calls['start'] += 1
    if fault == 'kill_rank' and rank == 1 and _calls['start'] == 5:
      os.kill(os.getpid(), signal.SIGKILL)
    return start(self, tree, label, step, blocking)

  def bad_create(model, key, input_shape, worker):
    state = create(model, key, input_shape, worker)
    if fault == 'shape' and rank == 1:
      kernel = state.params['Dense_0']['kernel']
      state.params['Dense_0']['kernel'] = kernel[:, :1].repeat(kernel.shape[1] + 1, axis=1)
    return state

  mpi.MPICommunicator._reduce = bad_reduce
  mpi.MPICommunicator.start = bad_start
  steps.create_train_state = bad_create


def _main(argv):
  rank, _ = mpi.world()
  _inject(flags.FLAGS.fault, rank)
  main.main(argv)


if __name__ == '__main__':
  app.run(_main, flags_parser=main.parse_flags)

"""The entry point with one fault injected, for tests/mpi_test.py and tests/checkpoints_test.py.

    launch/mpirun.sh -np 2 python tests/faults.py --fault=raise_in_thread <main flags>
    python tests/faults.py --fault=kill_at_step --fault_step=7 <main flags>   (one-host)

Faults, on rank `--fault_rank` (default 1; the one-host cluster is rank 0):
`raise_in_thread` (the allreduce raises at its 3rd collective), `stall` (the allreduce sleeps in
its 3rd collective, so the others time out), `kill_rank` (SIGKILL when starting the 5th
collective), `shape` (a model whose last kernel has one extra column), `kill_at_step` (SIGKILL at
the start of global step `--fault_step`), `sigterm_at_step` (SIGTERM to itself there: a
preemption), `kill_in_checkpoint` (SIGKILL after writing its part of the first checkpoint at or
after step `--fault_step`, before the commit), `sigterm_in_allreduce` (SIGTERM to itself from
inside its `--fault_step`-th background collective, which then takes a second more: the signal
arrives while a CoCoD-SGD snapshot average is in flight), `pause_at_step` (at global step
`--fault_step`, writes WORKDIR/paused and sleeps 3 s: time for a test to signal the job
mid-run).
"""

import os
import signal
import threading
import time

from absl import app
from absl import flags
import jax

from cocod_jax import algorithms
from cocod_jax import main
from cocod_jax import steps
from cocod_jax.cluster import mpi
from cocod_jax.config import flags as cocod_flags
from cocod_jax.record import checkpoints

FAULTS = ['raise_in_thread', 'kill_rank', 'stall', 'shape', 'kill_at_step', 'sigterm_at_step',
          'kill_in_checkpoint', 'sigterm_in_allreduce', 'pause_at_step']  # fmt: skip
flags.DEFINE_enum('fault', None, FAULTS, 'The fault.')
flags.DEFINE_integer('fault_rank', 1, 'The rank that fails.')
flags.DEFINE_integer('fault_step', 0, 'The global step of the step faults.')

_calls = {'reduce': 0, 'start': 0, 'background': 0}


def _rank():
  return mpi.world()[0] if os.environ.get('OMPI_COMM_WORLD_SIZE') else 0


def _inject(fault, step):
  reduce_, start, create = (
    mpi.MPICommunicator._reduce,
    mpi.MPICommunicator.start,
    steps.create_train_state,
  )

  def bad_reduce(self, *args, **kwargs):
    _calls['reduce'] += 1
    if _calls['reduce'] == 3:
      if fault == 'raise_in_thread':
        raise RuntimeError('injected failure in the allreduce thread')
      if fault == 'stall':
        time.sleep(3600)
    if (
      fault == 'sigterm_in_allreduce' and threading.current_thread() is not threading.main_thread()
    ):
      _calls['background'] += 1
      if _calls['background'] == step:
        print(f'fault: SIGTERM inside the allreduce of {args[0].label}', flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)  # The main thread handles the signal and steps on meanwhile.
    return reduce_(self, *args, **kwargs)

  def bad_start(self, *args, **kwargs):
    _calls['start'] += 1
    if fault == 'kill_rank' and _calls['start'] == 5:
      os.kill(os.getpid(), signal.SIGKILL)
    return start(self, *args, **kwargs)

  def bad_create(*args, **kwargs):
    state = create(*args, **kwargs)
    if fault == 'shape':
      kernel = state.params['Dense_0']['kernel']
      state.params['Dense_0']['kernel'] = kernel[:, :1].repeat(kernel.shape[1] + 1, axis=1)
    return state

  mpi.MPICommunicator._reduce = bad_reduce
  mpi.MPICommunicator.start = bad_start
  steps.create_train_state = bad_create
  for cls in algorithms.ALGORITHMS.values():

    def stepped(self, state, data, t, _step=cls.step):
      if t == step and fault in ('kill_at_step', 'sigterm_at_step'):
        os.kill(os.getpid(), signal.SIGKILL if fault == 'kill_at_step' else signal.SIGTERM)
      if t == step and fault == 'pause_at_step':
        open(os.path.join(flags.FLAGS.workdir, 'paused'), 'w').close()
        time.sleep(3.0)
      return _step(self, state, data, t)

    cls.step = stepped
  save = checkpoints.Checkpointer.save

  def killed_save(self, at, tree, meta):
    if fault == 'kill_in_checkpoint' and at >= step:  # Its part written, no meta, no commit.
      os.makedirs(self.step_dir(at), exist_ok=True)
      part = os.path.join(self.step_dir(at), f'rank_{self.rank}')
      self._ocp.PyTreeCheckpointer().save(part, jax.device_get(tree))
      os.kill(os.getpid(), signal.SIGKILL)
    return save(self, at, tree, meta)

  checkpoints.Checkpointer.save = killed_save


def _main(argv):
  if _rank() == flags.FLAGS.fault_rank:
    _inject(flags.FLAGS.fault, flags.FLAGS.fault_step)
  main.main(argv)


if __name__ == '__main__':
  cocod_flags.define_main_flags()
  app.run(_main, flags_parser=main.parse_flags)

"""The entry point, holding global step 4 until a SIGTERM comes, for tests/sweep_task_test.py.

    python tests/data/sweep/stall.py <cocod_jax.main flags>

At the start of step 4 it prints 'stalled at step 4' (the test's cue to preempt the job: the
run's SIGTERM guard is in place by then) and waits up to 120 s for a SIGTERM; then it goes on,
and the guard finishes the round, writes a checkpoint and exits 75. A run resumed from that
checkpoint starts after step 4 and never stalls.
"""

import signal
import time

from absl import app

from cocod_jax import algorithms
from cocod_jax import main
from cocod_jax.config import flags as cocod_flags

STEP = 4
WAIT_S = 120.0


def _held(step_fn):
  def step(self, state, data, t):
    if t == STEP:
      got = []
      before = signal.getsignal(signal.SIGTERM)

      def on_term(signum, frame):
        got.append(signum)
        before(signum, frame)  # The run's own guard: checkpoint at the round's end, exit 75.

      signal.signal(signal.SIGTERM, on_term)
      print(f'stalled at step {STEP}', flush=True)
      end = time.monotonic() + WAIT_S
      while not got and time.monotonic() < end:
        time.sleep(0.02)
      signal.signal(signal.SIGTERM, before)
    return step_fn(self, state, data, t)

  return step


if __name__ == '__main__':
  for cls in algorithms.ALGORITHMS.values():
    cls.step = _held(cls.step)
  cocod_flags.define_main_flags()
  app.run(main.main, flags_parser=main.parse_flags)

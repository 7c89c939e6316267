"""What the test modules that launch `mpirun` share: the launch, limited by silence and ended whole
(tests/mpi_test.py, tests/ranks_test.py, and tests/period_auto_test.py through mpi_test)."""

import os
import signal
import subprocess
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = os.path.join(ROOT, 'launch', 'mpirun.sh')


def env():
  """The environment of a launch: this one without XLA_FLAGS (each rank sets its own devices)."""
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  return env


def end(p, group: bool = False) -> None:
  """Ends the launch `p` whole: SIGTERM to mpirun (with `group`, to its process group: a launch
  started in a session of its own), which ends its ranks; SIGKILL after 30 s if it is still
  there."""
  signal_ = (lambda sig: os.killpg(p.pid, sig)) if group else p.send_signal
  signal_(signal.SIGTERM)
  try:
    p.wait(timeout=30)
  except subprocess.TimeoutExpired:
    signal_(signal.SIGKILL)
    p.wait()


def mpirun(*args, silent_s):
  """Runs `launch/mpirun.sh ARGS` from the checkout; returns its CompletedProcess, with `elapsed`
  (seconds from the start to the end of the job).

  The limit is on silence, not on the whole job: a job that writes no line (stdout or stderr) for
  `silent_s` seconds hangs, and is ended; the test fails with how far it got. A limit on the whole
  launch measures the machine's load instead: ranks_test's launch of every case (its limit was
  400 s) took 132 to 232 s in a fresh clone on 2 cores shared with other work. Ended means whole:
  SIGTERM to mpirun, which ends its ranks, then SIGKILL after 30 s if it is still there
  (subprocess.run's timeout SIGKILLs mpirun alone, and the ranks, each in a process group of its
  own, went on training beside the rest of the suite). stdin is /dev/null: mpirun.sh then execs
  mpirun instead of its terminal mode.
  """
  cmd = [MPIRUN, *args]
  start = time.monotonic()
  p = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)  # fmt: skip
  out, err, last = [], [], [time.monotonic()]

  def read(stream, lines):
    for line in stream:
      lines.append(line)
      last[0] = time.monotonic()

  readers = [
    threading.Thread(target=read, args=a, daemon=True) for a in ((p.stdout, out), (p.stderr, err))
  ]
  for r in readers:
    r.start()
  while p.poll() is None and time.monotonic() - last[0] < silent_s:
    time.sleep(0.2)
  ended = p.poll() is None
  if ended:
    end(p)
  for r in readers:
    r.join(timeout=30)
  elapsed = time.monotonic() - start
  out, err = ''.join(out), ''.join(err)
  if ended:
    pytest.fail(f'{" ".join(cmd)}: no output for {silent_s} s, ended after {elapsed:.0f} s\n'
                f'{out[-2000:]}{err[-4000:]}')  # fmt: skip
  done = subprocess.CompletedProcess(cmd, p.returncode, out, err)
  done.elapsed = elapsed
  return done

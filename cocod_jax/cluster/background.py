"""One background thread, collectives run in the order they were started, errors re-raised on the
main thread.

`BackgroundWorker.submit(fn, label, step)` hands `fn` to the worker's one thread and returns a
`Pending` handle at once; `wait(handle)` blocks until `fn` has run and returns its result.
Several calls may be in flight (streamed CoCoD-SGD queues one fragment's allreduce a step, and
with a delay tau > 1 up to tau of them): the thread runs them one after the other, in order, and
they are waited for in that order. An
exception inside the thread is re-raised on the caller's thread as `CommError`; a call that has
not finished `timeout_s` after it was submitted raises `CommTimeout` instead of hanging. With
`threaded=False` the same calls run synchronously on the caller's thread (tests compare the two);
so does a call submitted `inline`, which its caller would only wait for at once (S-SGD's
gradients): a hand-over to the thread would add its latency and nothing would overlap.

A call that a blocked main thread never waits for (it sits in another collective, e.g. an epoch's
metrics, while a partition holds this one) is seen by a watchdog thread instead: once the oldest
call in flight, on the thread or inline, is `timeout_s` + WATCHDOG_GRACE_S old, it hands the same
message to `on_stuck` (set by `mpi.abort_on_error`: one line, then the job is ended), since the
main thread may never return to raise it.

The worker knows nothing about MPI: `cluster/mpi.py` gives it the staging-and-allreduce
function. Besides the result, each call records the span (start, end) of the work itself, which
the timeline reports as the communication time `Tc`, and its caller may record `local_span`, the
part done before the hand-over (the local mean over a rank's workers).
"""

import queue
import threading
import time
import traceback
from typing import Any
from typing import Callable

WATCHDOG_GRACE_S = 1.0  # The watchdog lets a waiting main thread raise CommTimeout first.
# Called with the CommTimeout message when a call in flight is overdue and nobody raised it;
# None: the watchdog only records it (`stuck`).
on_stuck: Callable[[str], None] | None = None


class CommError(RuntimeError):
  """The background collective raised; the message names the rank and the collective."""


class CommTimeout(RuntimeError):
  """A collective did not finish within `comm.timeout_s`."""


class NonFinite(RuntimeError):
  """A worker's contribution to an average held NaN or Inf; it was kept out of the average.

  Attributes:
    workers: the workers (ranks) whose contribution was not finite.
    step: the local iteration at which the collective was started.
    label: what was being averaged.
  """

  def __init__(self, workers, step, label):
    self.workers, self.step, self.label = list(workers), step, label
    super().__init__(f'worker(s) {self.workers} sent non-finite values in {label} (step {step})')


class Pending:
  """One submitted call: started on the main thread, finished by the worker's thread."""

  def __init__(self, label: str, step: int):
    self.label = label
    self.step = step
    self.done = threading.Event()
    self.result: Any = None
    self.error: BaseException | None = None
    self.error_text = ''
    self.submitted = time.perf_counter()
    self.span: tuple[float, float] | None = None
    # The part of a collective that ran before the hand-over (MPI: the local mean), if timed.
    self.local_span: tuple[float, float] | None = None


class BackgroundWorker:
  """Runs submitted calls on one daemon thread, one at a time, in the order submitted.

  Args:
    threaded: False runs every call on the caller's thread at `submit`.
    timeout_s: the longest `wait` blocks before raising CommTimeout.
    rank: named in error messages.
  """

  def __init__(self, threaded: bool, timeout_s: float, rank: int):
    self.threaded, self.timeout_s, self.rank = threaded, float(timeout_s), rank
    self.inflight: list[Pending] = []  # Submitted, not yet waited for, oldest first.
    self.stuck = False  # A call timed out or the thread did not stop: MPI state is unknown.
    self._jobs = queue.Queue()
    self._thread = None
    self._closed = threading.Event()
    if threaded:
      self._thread = threading.Thread(target=self._serve, name='allreduce', daemon=True)
      self._thread.start()
    threading.Thread(target=self._watch, name='allreduce-watchdog', daemon=True).start()

  def overdue(self, job: Pending, elapsed: float) -> str:
    """The one line of a call that has not finished after `elapsed` seconds."""
    return (
      f'rank {self.rank}: the allreduce of {job.label} (step {job.step}) has not finished after '
      f'{elapsed:.1f} s (comm.timeout_s={self.timeout_s:g}); a peer is stuck, dead, far slower '
      'or cut off'
    )

  def _watch(self):
    """Every half second: the oldest call in flight, overdue by WATCHDOG_GRACE_S with no main
    thread to raise it, goes to `on_stuck` (once)."""
    while not self._closed.wait(0.5):
      try:
        oldest = self.inflight[0]  # The main thread appends and pops meanwhile.
      except IndexError:
        continue
      if oldest.done.is_set():
        continue
      elapsed = time.perf_counter() - oldest.submitted
      if elapsed > self.timeout_s + WATCHDOG_GRACE_S:
        self.stuck = True
        if on_stuck is not None:
          on_stuck(self.overdue(oldest, elapsed))
        return

  @staticmethod
  def _run(job: Pending, fn: Callable[[Pending], Any]):
    try:
      job.result = fn(job)
    except BaseException as e:  # pylint: disable=broad-except
      job.error = e
      job.error_text = traceback.format_exc()
    finally:
      if job.span is None:
        job.span = (job.submitted, time.perf_counter())
      job.done.set()

  def _serve(self):
    while True:
      item = self._jobs.get()
      if item is None:
        return
      self._run(*item)

  def submit(self, fn: Callable[[Pending], Any], label: str, step: int, inline=False) -> Pending:
    """Starts `fn(handle)` on the thread (`inline`: runs it now on the caller's thread, for a
    collective that the caller waits for at once); `fn` may set `handle.span` to the part it
    times."""
    if inline and self.inflight:
      raise RuntimeError(
        f'{self.inflight[0].label} is still in flight; a blocking collective waits for it first'
      )
    job = Pending(label, step)
    self.inflight.append(job)
    if self.threaded and not inline:
      self._jobs.put((job, fn))
    else:
      self._run(job, fn)
    return job

  def wait(self, job: Pending):
    """The result of `job` (the oldest in flight); raises CommTimeout or CommError instead of
    hanging."""
    if self.inflight and job is not self.inflight[0]:
      raise RuntimeError(f'{job.label} waited for before {self.inflight[0].label}, started first')
    while not job.done.wait(0.05):
      elapsed = time.perf_counter() - job.submitted
      if elapsed > self.timeout_s:
        self.stuck = True
        raise CommTimeout(self.overdue(job, elapsed))
    if self.inflight:
      self.inflight.pop(0)
    if job.error is not None:
      if isinstance(job.error, NonFinite):
        raise job.error
      raise CommError(
        f'rank {self.rank}: the allreduce of {job.label} failed: {job.error!r}\n{job.error_text}'
      ) from job.error
    return job.result

  def close(self) -> bool:
    """Stops the thread; True when it stopped and no call is left in flight."""
    self._closed.set()
    if self._thread is not None:
      self._jobs.put(None)
      self._thread.join(timeout=5.0)
      self.stuck = self.stuck or self._thread.is_alive()
    return not self.stuck and not self.inflight

"""The communicator's watchdog (cluster/background.py): a collective that nobody waits for (the
main thread blocked in another one, as under a partition) is still reported once it is overdue,
and the start's helper names the peers a rank waits for (cluster/start.py)."""

import threading
import time

from cocod_jax.cluster import background
from cocod_jax.cluster import start


def test_overdue_call_nobody_waits_for_goes_to_on_stuck(monkeypatch):
  seen, release = [], threading.Event()
  monkeypatch.setattr(background, 'on_stuck', seen.append)
  monkeypatch.setattr(background, 'WATCHDOG_GRACE_S', 0.2)
  worker = background.BackgroundWorker(True, 0.3, rank=1)
  worker.submit(lambda job: release.wait(10), 'the round of steps 3-5', 5)
  deadline = time.monotonic() + 5
  while not seen and time.monotonic() < deadline:
    time.sleep(0.05)
  release.set()
  worker.close()
  assert len(seen) == 1, seen
  assert seen[0].startswith('rank 1: the allreduce of the round of steps 3-5 (step 5) has not')
  assert 'comm.timeout_s=0.3' in seen[0]


def test_finished_calls_are_not_reported(monkeypatch):
  seen = []
  monkeypatch.setattr(background, 'on_stuck', seen.append)
  monkeypatch.setattr(background, 'WATCHDOG_GRACE_S', 0.1)
  worker = background.BackgroundWorker(True, 0.2, rank=0)
  job = worker.submit(lambda job: 7, 'the gradients of step 1', 1)
  time.sleep(0.8)  # Done long ago; only waited for now.
  assert worker.wait(job) == 7
  assert worker.close() and not seen


def test_waits_for_names_the_peers_by_host(monkeypatch):
  monkeypatch.setattr(start, 'HOSTS', ['h1', 'h1', 'h2', 'h2'])
  assert start.waits_for(0) == '; it waits for ranks 2, 3 on h2, rank 1 on h1 (this host)'
  monkeypatch.setattr(start, 'HOSTS', ['h1', 'h2'])
  assert start.waits_for(0) == '; it waits for rank 1 on h2'
  monkeypatch.setattr(start, 'HOSTS', [])
  assert start.waits_for(0) == ''

"""Measured compute and communication spans of one worker, as a Chrome trace and as summary figures.

The training loop records, on the main thread, `step` spans (a local step, from dispatch until its
outputs are ready), `merge` spans (the snapshot and the correction of CoCoD-SGD), `wait` spans (the
main thread blocked on a collective: the communication exposed to training) and `round` spans; the
communicator's thread contributes one `allreduce` span per collective. From these:

- `Tp` = time in `step` spans / number of steps (the time of one local step);
- `Tc` = mean `allreduce` span (staging to host, the allreduce, the copy back);
- `exposed_comm_s` = time in `wait` spans, `comm_s` = time in `allreduce` spans;
- `drain_s` = the part of `exposed_comm_s` spent at epoch ends waiting for a collective still in
  flight (`wait` spans with `drain=True`: the pipeline of Pipe-SGD is emptied before evaluation);
- `hidden_fraction` = 1 - exposed / comm (0 when every collective blocks, 1 when none shows).

Only spans of the measured epochs count: the first epoch compiles every function, so it is left out
whenever there is more than one epoch.
"""

import contextlib
import json
import os
import socket
import time

import jax
import numpy as np

MAIN, COMM = 'main', 'comm'


class Timeline:
  """Spans of one worker; a disabled timeline records nothing and never blocks."""

  def __init__(self, enabled: bool, rank: int = 0):
    self.enabled = enabled
    self.rank = rank
    self.origin = time.perf_counter()
    self.spans = []  # (name, cat, start, end, thread, args)

  def add(self, name, cat, start, end, thread=MAIN, **args):
    if self.enabled:
      self.spans.append((name, cat, start, end, thread, args))

  @contextlib.contextmanager
  def span(self, name, cat, **args):
    start = time.perf_counter()
    try:
      yield
    finally:
      self.add(name, cat, start, time.perf_counter(), **args)

  def ready(self, tree):
    """Blocks until `tree` is computed, so a span ends when the work does (only when enabled)."""
    if self.enabled:
      jax.block_until_ready(tree)
    return tree

  def write_chrome_trace(self, path):
    """Writes the spans as Chrome trace events (open in Perfetto or chrome://tracing)."""
    threads = {MAIN: 0, COMM: 1}
    events = [
      {'name': 'thread_name', 'ph': 'M', 'pid': self.rank, 'tid': tid, 'args': {'name': name}}
      for name, tid in threads.items()
    ]
    events.append(
      {'name': 'process_name', 'ph': 'M', 'pid': self.rank, 'args': {'name': f'rank {self.rank}'}}
    )
    for name, cat, start, end, thread, args in self.spans:
      events.append(
        {
          'name': name,
          'cat': cat,
          'ph': 'X',
          'pid': self.rank,
          'tid': threads[thread],
          'ts': (start - self.origin) * 1e6,
          'dur': (end - start) * 1e6,
          'args': args,
        }
      )
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
      # The origin (this host's monotonic clock) lets a plot align the ranks of one machine.
      meta = {'rank': self.rank, 'host': socket.gethostname(), 'origin_s': self.origin}
      json.dump({'traceEvents': events, 'displayTimeUnit': 'ms', 'otherData': meta}, f)
    os.replace(tmp, path)

  def summary(self, from_epoch: int, steps: int, train_time_s: float) -> dict:
    """Figures over the spans of epochs >= `from_epoch` (`steps` steps, `train_time_s` seconds)."""
    chosen = [s for s in self.spans if s[5].get('epoch', 0) >= from_epoch]

    def total(cat):
      return float(sum(e - b for _, c, b, e, _, _ in chosen if c == cat))

    comm = [e - b for _, c, b, e, _, _ in chosen if c == 'allreduce']
    rounds = [e - b for _, c, b, e, _, a in chosen if c == 'round' and a.get('full', False)]
    tp = total('step') / steps if steps else float('nan')
    tc = float(np.mean(comm)) if comm else 0.0
    comm_s, exposed = float(sum(comm)), total('wait')
    drain = float(sum(e - b for _, c, b, e, _, a in chosen if c == 'wait' and a.get('drain')))
    return {
      'from_epoch': from_epoch,
      'steps': steps,
      'Tp_s': tp,
      'Tc_s': tc,
      'r': tc / tp if tp > 0 else float('nan'),
      'step_time_s': train_time_s / steps if steps else float('nan'),
      'round_time_s': float(np.mean(rounds)) if rounds else None,
      'merge_s': total('merge'),
      'comm_s': comm_s,
      'exposed_comm_s': exposed,
      'drain_s': drain,
      'hidden_fraction': max(0.0, 1.0 - exposed / comm_s) if comm_s > 0 else None,
      'collectives': len(comm),
    }

"""Measured compute and communication spans of one worker, as a Chrome trace and as summary figures.

Under MPI the loop records, on the main thread, `step` spans (a local step, from dispatch until its
outputs are ready), `merge` spans (the snapshot and the correction of CoCoD-SGD), `wait` spans (the
main thread blocked on a collective: the communication exposed to training) and `round` spans; the
communicator's thread contributes one `allreduce` span per collective (from the moment its input
is computed to the moment the sum is back on the devices: the cross-rank part), and every
collective one `local_mean` span (the weighted sum over the rank's W workers on its devices, the
first part of an average; `in_wait` when it ran inside a blocking average's `wait` span).

Timing a span means waiting for the device, which would stall JAX's asynchronous dispatch at every
step. So only sampled rounds are timed: every `sample_every`-th round (1: all, the profiling
setting; 0: none), plus the waits at epoch ends. Between them the loop never blocks except where
the algorithm waits for a collective. The allreduce spans cost the main thread nothing and are all
kept. From these:

- `Tp` = time in sampled `step` spans / number of sampled steps (the time of one local step);
- `Tc` = mean `allreduce` span of this rank (the allreduce of one model between the ranks),
  which includes its wait inside the collective for a rank that arrives later; `combine` takes,
  collective by collective, the shortest span over the ranks (the last to arrive waited for no
  one: its span is the collective itself, whatever the clocks of the hosts) and reports their
  mean as the job's `Tc`, the wait-inclusive mean as `Tc_with_wait_s`;
- `Tl` = mean `local_mean` span (the local mean over the rank's workers); `local_s` = time in the
  sampled ones;
- `comm_s` = time in the allreduce spans waited for in sampled rounds plus `local_s`;
  `exposed_comm_s` = time in sampled `wait` spans plus the sampled local means outside them (a
  background collective's local mean runs on the compute devices in line with the steps: nothing
  hides it); `hidden_fraction` = 1 - exposed / comm (0 when every collective blocks);
- `drain_s` = time waiting at epoch ends for a collective still in flight (`wait` spans with
  `drain=True`: Pipe-SGD's pipeline is emptied before evaluation), always timed (its spans count
  in `comm_s` and `exposed_comm_s` where their round is sampled, like every other span);
- `step_time_s` = measured training time / steps, over all steps.

Only spans of the measured epochs count: the first epoch compiles every function, so it is left out
whenever there is more than one epoch. A run resumed from a checkpoint compiles its functions
again: main-thread spans during which JAX traced, lowered or compiled (`CompileClock`) are kept in
the trace with `compiled=True` and left out of the figures, with their steps.
"""

import collections
import contextlib
import socket
import threading
import time

import jax
import numpy as np

from cocod_jax.record import files

MAIN, COMM, LOCAL = 'main', 'comm', 'local'
# JAX's own monitoring events of a function's first call (jax.monitoring), in seconds.
COMPILE_EVENTS = (
  '/jax/core/compile/jaxpr_trace_duration',
  '/jax/core/compile/jaxpr_to_mlir_module_duration',
  '/jax/core/compile/backend_compile_duration',
)


class CompileClock:
  """Seconds spent tracing, lowering and compiling since the process began, on any thread (JAX's
  monitoring events): the main thread's block its steps, and the communicator thread's block
  the collective that the main thread then waits for. One listener for the process, registered
  on first use."""

  _seconds = 0.0
  _registered = False
  _recent = collections.deque(maxlen=256)  # (start, end) of the latest compilation phases

  @classmethod
  def seconds(cls) -> float:
    if not cls._registered:
      from jax import monitoring  # pylint: disable=g-import-not-at-top

      lock = threading.Lock()

      def listen(event, duration, **_):
        if event in COMPILE_EVENTS:
          end = time.perf_counter()
          with lock:
            cls._seconds += duration
            cls._recent.append((end - duration, end))

      monitoring.register_event_duration_secs_listener(listen)
      cls._registered = True
    return cls._seconds

  @classmethod
  def during(cls, start: float, end: float) -> bool:
    """Whether a compilation phase overlapped [start, end] (of the latest ones kept)."""
    cls.seconds()
    return any(b < end and e > start for b, e in list(cls._recent))


class Timeline:
  """Spans of one worker; a disabled timeline records nothing and never blocks.

  Args:
    enabled: record anything at all (the MPI runtime; the one-host cluster has no real time).
    rank: the worker, named in the trace.
    sample_every: time every n-th round (see the module docstring).
  """

  def __init__(self, enabled: bool, rank: int = 0, sample_every: int = 1):
    self.enabled = enabled
    self.rank = rank
    self.sample_every = sample_every
    self.fragments = 1  # Streamed CoCoD-SGD's P (set by the algorithm): collectives a round.
    self.origin = time.perf_counter()
    self.spans = []  # (name, cat, start, end, thread, args)
    self.epoch = 0
    self.sampling = enabled  # Whether the current round (or epoch-end wait) is timed.
    self.sampled_steps = collections.Counter()  # epoch -> steps timed
    self.compiled_steps = collections.Counter()  # epoch -> timed steps that compiled
    self._rounds = 0
    self._round = None  # (start time, first step, length, compile clock) of the sampled round
    self._step_compiled = False
    self._drain_of = None  # In an epoch-end wait: whether its round is sampled.

  # ------------------------------------------------------------------ driven by the loop

  def begin_round(self, first_step: int, length: int):
    due = self.sample_every > 0 and self._rounds % self.sample_every == 0
    self.sampling = self.enabled and due
    self._rounds += 1
    self._round = None
    if self.sampling:
      self._round = (time.perf_counter(), first_step, length, CompileClock.seconds())

  def end_step(self, t: int):
    """After step `t`; closes the round when `t` is its last step."""
    if not self.sampling:
      return
    self.sampled_steps[self.epoch] += 1
    if self._step_compiled:
      self.compiled_steps[self.epoch] += 1
      self._step_compiled = False
    start, first, length, clock = self._round
    if t + 1 == first + length:
      compiled = CompileClock.seconds() > clock
      self.add('round', 'round', start, time.perf_counter(), full=True, compiled=compiled)

  @contextlib.contextmanager
  def drain(self):
    """The epoch-end wait: always timed (`drain_s`), but its spans count in the hidden fraction
    only where its round is sampled: were every drain counted and only one round in
    `sample_every`, the exposed waits at epoch ends would weigh `sample_every` times what they
    do in the run (a run of 11-step epochs and rounds of 5 reported 0% hidden)."""
    sampling, self.sampling = self.sampling, self.enabled
    self._drain_of = sampling
    try:
      yield
    finally:
      self.sampling, self._drain_of = sampling, None

  # ------------------------------------------------------------------ spans

  def add(self, name, cat, start, end, thread=MAIN, **args):
    if self.enabled:
      args.setdefault('epoch', self.epoch)
      args.setdefault('sampled', self.sampling if self._drain_of is None else self._drain_of)
      if thread != MAIN and CompileClock.during(start, end):  # (e.g. a restart's first
        args['compiled'] = True  # collective, which compiles its staging on its thread)
      self.spans.append((name, cat, start, end, thread, args))

  @contextlib.contextmanager
  def span(self, name, cat, **args):
    if not self.sampling:
      yield
      return
    start, clock = time.perf_counter(), CompileClock.seconds()
    try:
      yield
    finally:
      if CompileClock.seconds() > clock:
        args['compiled'] = True
        self._step_compiled = self._step_compiled or cat == 'step'
      self.add(name, cat, start, time.perf_counter(), **args)

  def ready(self, tree):
    """Blocks until `tree` is computed, so a span ends when the work does (sampled rounds only)."""
    if self.sampling:
      jax.block_until_ready(tree)
    return tree

  # ------------------------------------------------------------------ checkpoints

  def state_dict(self) -> dict:
    """The spans so far (times from this process's origin) and the sampling position (JSON)."""
    now = time.perf_counter()
    spans = [(n, c, b - self.origin, e - self.origin, th, a) for n, c, b, e, th, a in self.spans]
    return {
      'spans': spans,
      'elapsed': now - self.origin,
      'sampled_steps': {str(k): v for k, v in self.sampled_steps.items()},
      'compiled_steps': {str(k): v for k, v in self.compiled_steps.items()},
      'rounds': self._rounds,
    }

  def load_state_dict(self, d: dict):
    """Continues a timeline: the earlier spans are placed just before now on this clock."""
    shift = time.perf_counter() - d['elapsed']
    self.origin = shift
    self.spans = [(n, c, b + shift, e + shift, th, a) for n, c, b, e, th, a in d['spans']]
    self.sampled_steps = collections.Counter({int(k): v for k, v in d['sampled_steps'].items()})
    compiled = d.get('compiled_steps', {})  # (checkpoints written before it was kept: none)
    self.compiled_steps = collections.Counter({int(k): v for k, v in compiled.items()})
    self._rounds = d['rounds']
    # A run resumed inside a round leaves the rest of that round untimed (its start is gone);
    # the next round is sampled as usual.
    self.sampling, self._round = False, None

  # ------------------------------------------------------------------ outputs

  def write_chrome_trace(self, path):
    """Writes the spans as Chrome trace events (open in Perfetto or chrome://tracing)."""
    threads = {MAIN: 0, COMM: 1, LOCAL: 2}
    names = {MAIN: 'main', COMM: 'comm', LOCAL: 'local mean (rank devices)'}
    events = [
      {'name': 'thread_name', 'ph': 'M', 'pid': self.rank, 'tid': tid, 'args': {'name': names[n]}}
      for n, tid in threads.items()
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
    # The origin (this host's monotonic clock) lets a plot align the ranks of one machine.
    meta = {'rank': self.rank, 'host': socket.gethostname(), 'origin_s': self.origin}
    trace = {'traceEvents': events, 'displayTimeUnit': 'ms', 'otherData': meta}
    files.write_json_atomic(path, trace, indent=None)

  def summary(self, from_epoch: int, steps: int, train_time_s: float) -> dict:
    """Figures over the spans of epochs >= `from_epoch` (`steps` steps, `train_time_s` seconds)."""
    in_epochs = [s for s in self.spans if s[5].get('epoch', 0) >= from_epoch]
    chosen = [s for s in in_epochs if not s[5].get('compiled')]
    sampled = [s for s in chosen if s[5].get('sampled', True)]

    def total(spans, cat, **match):
      return float(
        sum(
          e - b
          for _, c, b, e, _, a in spans
          if c == cat and all(a.get(k) == v for k, v in match.items())
        )
      )

    # Every collective in order (the ranks' i-th spans are one collective: `combine`), and the
    # positions of those that overlapped a compilation, left out of the means.
    every = [(e - b, bool(a.get('compiled')), bool(a.get('fragment')))
             for _, c, b, e, _, a in in_epochs if c == 'allreduce']  # fmt: skip
    comm = [d for d, compiled, _ in every if not compiled]
    local = [e - b for _, c, b, e, _, _ in chosen if c == 'local']
    rounds = [e - b for _, c, b, e, _, a in sampled if c == 'round' and a.get('full', False)]
    timed_steps = sum(n for epoch, n in self.sampled_steps.items() if epoch >= from_epoch)
    timed_steps -= sum(n for epoch, n in self.compiled_steps.items() if epoch >= from_epoch)
    tp = total(sampled, 'step') / timed_steps if timed_steps else None  # (None: no round of
    # the measured epochs was sampled; `describe` says so)
    tc = float(np.mean(comm)) if comm else 0.0
    local_s = total(sampled, 'local')
    comm_s = total(sampled, 'allreduce') + local_s
    exposed = total(sampled, 'wait') + total(sampled, 'local', in_wait=False)
    return {
      'from_epoch': from_epoch,
      'steps': steps,
      'sampled_steps': timed_steps,
      'Tp_s': tp,
      'Tc_s': tc,
      'Tl_s': float(np.mean(local)) if local else 0.0,
      'r': tc / tp if tp else None,
      'step_time_s': train_time_s / steps if steps else float('nan'),
      'round_time_s': float(np.mean(rounds)) if rounds else None,
      'merge_s': total(sampled, 'merge'),
      'local_s': local_s,
      'comm_s': comm_s,
      'exposed_comm_s': exposed,
      'drain_s': total(chosen, 'wait', drain=True),
      'hidden_fraction': max(0.0, 1.0 - exposed / comm_s) if comm_s > 0 else None,
      'collectives': len(every),
      'local_means': len(local),
      'allreduce_s': [d for d, _, _ in every],  # Each collective's span, in order (`combine`
      'allreduce_compiled': [i for i, (_, c, _) in enumerate(every) if c],  # takes these out).
      # Streamed CoCoD-SGD: P, and which collectives were one fragment (not the whole model).
      'fragments': self.fragments,
      'allreduce_fragment': [i for i, (_, _, f) in enumerate(every) if f],
      'rounds': self._rounds,
      'sample_every': self.sample_every,
    }


def collective_time(spans_per_rank, skip=()) -> float | None:
  """The mean time of the collectives themselves: for each collective (the i-th span of every
  rank: collectives run in one order everywhere), the shortest span over the ranks. A rank that
  arrives early waits inside the collective for the last one, whose span holds no wait; the
  spans end together, so this needs no clock shared between hosts. `skip`: positions left out
  (a compilation overlapped them on some rank). None without collectives."""
  counts = {len(s) for s in spans_per_rank}
  if not spans_per_rank or counts == {0}:
    return None
  if len(counts) != 1:
    raise ValueError(f'the ranks timed different numbers of collectives: {sorted(counts)}')
  shortest = np.min(np.asarray(spans_per_rank, np.float64), axis=0)
  skip = set(skip)
  kept = [t for i, t in enumerate(shortest) if i not in skip]
  return float(np.mean(kept)) if kept else None


def combine(per_rank):
  """The ranks' timing figures: means, `Tc` without the waits for later ranks
  (`collective_time`), and the hidden fraction of all their communication."""
  spans = [p.pop('allreduce_s', None) for p in per_rank]
  skip = set().union(*(p.pop('allreduce_compiled', []) for p in per_rank))
  fragment = set().union(*(p.pop('allreduce_fragment', []) for p in per_rank))
  out = {'ranks': per_rank}
  keys = ('Tp_s', 'Tc_s', 'Tl_s', 'step_time_s', 'round_time_s', 'exposed_comm_s', 'drain_s',
          'comm_s', 'local_s')  # fmt: skip
  for k in keys:
    vals = [p[k] for p in per_rank if p.get(k) is not None]
    out[k] = float(np.mean(vals)) if vals else None
  out['Tc_with_wait_s'] = out['Tc_s']
  if all(s is not None for s in spans):
    tc = collective_time(spans, skip)
    out['Tc_s'] = out['Tc_s'] if tc is None else tc
  out['r'] = out['Tc_s'] / out['Tp_s'] if out['Tp_s'] else None
  fragments = per_rank[0].get('fragments', 1)
  if fragments > 1:  # Streamed: Tc of one fragment, of the P of a round, and r of the round's.
    whole = set(range(len(spans[0]))) - fragment if spans[0] is not None else set()
    tc = collective_time(spans, skip | whole) if all(s is not None for s in spans) else None
    out['fragments'] = fragments
    out['Tc_fragment_s'] = tc
    out['Tc_round_s'] = None if tc is None else fragments * tc
    out['r_fragment'] = tc / out['Tp_s'] if tc is not None and out['Tp_s'] else None
    out['r'] = out['Tc_round_s'] / out['Tp_s'] if tc is not None and out['Tp_s'] else None
  comm_s = sum(p['comm_s'] for p in per_rank)
  exposed = sum(p['exposed_comm_s'] for p in per_rank)
  out['hidden_fraction'] = max(0.0, 1.0 - exposed / comm_s) if comm_s > 0 else None
  for k in ('from_epoch', 'steps', 'sampled_steps', 'rounds', 'sample_every'):
    if k in per_rank[0]:
      out[k] = per_rank[0][k]
  return out


def describe(tm) -> str:
  """The one line that a run prints about its timing (`combine`'s figures)."""
  hidden = tm['hidden_fraction']
  local = tm.get('Tl_s')
  head = (
    f'timing ({tm["steps"]} steps from epoch {tm["from_epoch"]}, mean of {len(tm["ranks"])} '
    'ranks): '
  )
  if tm['Tp_s'] is None:  # No sampled round in the measured epochs: say why, print no NaN.
    every = tm.get('sample_every')
    which = 'no round is timed' if not every else f'every {every}th round of the run is timed'
    return head + (
      f'Tp and r not measured: no round from epoch {tm["from_epoch"]} on was timed ({which}, '
      f'and it had {tm.get("rounds", "?")}; --config.timeline.sample_every=1 times every one), '
      f'{tm["step_time_s"] * 1e3:.1f} ms per step, communication hidden n/a' + _drained(tm)
    )
  if tm.get('fragments', 1) > 1 and tm.get('Tc_fragment_s') is not None:
    comm = (
      f'Tc {tm["Tc_fragment_s"] * 1e3:.1f} ms a fragment, {tm["Tc_round_s"] * 1e3:.1f} ms the '
      f"{tm['fragments']} of a round (r = {tm['r']:.2f}, a fragment's {tm['r_fragment']:.2f}), "
    )
  else:
    comm = f'Tc {tm["Tc_s"] * 1e3:.1f} ms (r = {tm["r"]:.2f}), '
  return (
    head
    + f'Tp {tm["Tp_s"] * 1e3:.1f} ms, '
    + ('' if local is None else f'local mean {local * 1e3:.1f} ms, ')
    + comm
    + f'{tm["step_time_s"] * 1e3:.1f} ms per step, communication hidden '
    + ('n/a' if hidden is None else f'{hidden:.0%}')
    + _drained(tm)
  )


def _drained(tm) -> str:
  """What the epoch ends waited, where they did: a round cut by an epoch's end has only the steps
  before it to hide its collective behind (outside the hidden fraction of the sampled rounds)."""
  drain, steps = tm.get('drain_s'), tm.get('steps')
  if not drain or not steps:
    return ''
  return f' (and {drain:.2f} s waited at epoch ends, {drain / steps * 1e3:.1f} ms a step)'


def model_step_time(
  algorithm: str, tp: float, tc: float, k: int, delay: int | None = None, fragments: int = 1
) -> float:
  """Section 4.2's time per step for a local step of `tp` and an allreduce of `tc` seconds
  (docs/algorithms.md, the time model); AsynLocal-SGD's is Local-SGD's with the slowest
  worker's step. CoCoD-SGD with `delay` = tau < k: the allreduce starts after k - tau of the
  round's steps and has the last tau to hide behind, ((k - tau) tp + max(tau tp, tc)) / k.
  Streamed (`fragments` = P > 1, tau = `delay`, 1 when None): each of the P allreduces of tc / P
  has tau steps to hide behind and exposes what they do not cover, and the P of a round follow
  one another on one thread, so a round takes max(k tp + P max(0, tc / P - tau tp), tc)."""
  if algorithm == 'cocod_sgd' and fragments > 1:
    tau = 1 if delay is None else delay
    return max(k * tp + fragments * max(0.0, tc / fragments - tau * tp), tc) / k
  if algorithm == 'cocod_sgd' and delay is not None and delay < k:
    return ((k - delay) * tp + max(delay * tp, tc)) / k
  return {
    'ssgd': tp + tc,
    'local_sgd': tp + tc / k,
    'asynlocal_sgd': tp + tc / k,
    'pipe_sgd': max(tp, tc),
    'cocod_sgd': max(tp, tc / k),
  }[algorithm]

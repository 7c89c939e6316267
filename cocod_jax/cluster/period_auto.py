"""`algorithm.period='auto'`: the period k chosen from a short measurement at the start of a run.

With `Tp` the time of one local step and `Tc` the time of one allreduce of the synced model
(docs/algorithms.md, "The time model"), a CoCoD-SGD step costs about `max(Tp, Tc / k)`: the smallest
period that hides the communication behind the round's local steps is the smallest k with
`k Tp >= Tc`, `choose_period`: `max(1, ceil(Tc / Tp))`, at most MAX_PERIOD. Local-SGD
(`Tp + Tc / k`) takes the same rule: the smallest k whose communication is no more than its
computation.

`calibrate` measures, after the step functions and the state are placed and before the first
training step, on every rank:

- `Tp`: the median of SAMPLES blocking local steps after one that compiles, on a copy of the
  state (new buffers through the host: the step donates its input) and epoch 1's batches. The
  copy is thrown away, and the batch table is a pure function of (seed, epoch, worker), so the
  training that follows is exactly a run with `period=k` (no random stream moves, no data is
  consumed). The shapes are training's, so the step compiles here once and not again.
- `Tc`: SAMPLES blocking allreduces of the synced part (`steps.synced_part`) through the run's
  own communicator, each after a barrier, after one untimed warm-up; the `allreduce` span, as the
  timeline's `Tc` (the cross-rank part, without the local mean).

With `algorithm.fragments` = P > 1 (streamed CoCoD-SGD) and `delay='auto'`, `Tc` is also
measured for one fragment (the largest, `streamed.edges`: the elements of one fragment of every
worker, through the same communicator) and tau is the smallest with `tau Tp >= Tc` of a fragment,
at most k: the fragment's allreduce then hides behind the tau steps between its snapshot and its
correction.

Every rank's figures are gathered: `Tp` is the largest rank's median (the slowest rank sets the
round), `Tc` the median over the allreduces of each one's shortest span over the ranks (a rank
that left the barrier early waits inside the allreduce for the last one: its span is not the
allreduce's time; `timeline.collective_time`), so that all ranks take k from the same numbers.

Only where the time is real: `backend='mpi'` (the one-host cluster emulates communication by
copies), and only for the algorithms with a period of one length for everyone (SUPPORTED):
AsynLocal-SGD's shards depend on k (`shares.local_periods`). For SUPPORTED algorithms nothing
that is computed before the measurement depends on k (`plan.make_plan`).

A run records the outcome in `WORKDIR/period_auto.json` (rank 0, before its first step) and in
results.json (`period_auto`); a rerun in the same workdir (resuming a checkpoint, or continuing
for more epochs) takes k from that file instead of measuring again, so a run keeps one k, and a
checkpoint also records its k (`resume.resume` refuses another).
"""

import copy
import json
import math
import os
import statistics
import time

import jax
import jax.numpy as jnp

from cocod_jax import plan
from cocod_jax import steps as steps_lib
from cocod_jax.record import files
from cocod_jax.record import workdir as workdir_lib

AUTO = plan.AUTO
MAX_PERIOD = 32  # The cap on the chosen k (a link so slow that k would exceed it is logged so).
SAMPLES = 5  # Timed local steps and allreduces per rank (after one untimed each).
SUPPORTED = ('cocod_sgd', 'local_sgd')
FILE = 'period_auto.json'


def is_auto(config) -> bool:
  return config.algorithm.period == AUTO


def delay_is_auto(config) -> bool:
  return config.algorithm.get('delay') == AUTO


def measured(config) -> bool:
  """Whether the run measures Tp and Tc before its first step: a period or a delay of 'auto'."""
  return is_auto(config) or delay_is_auto(config)


def choose_period(tp_s: float, tc_s: float, cap: int = MAX_PERIOD) -> int:
  """The smallest k >= 1 with `k * tp_s >= tc_s`, at most `cap`.

  Args:
    tp_s: the time of one local step (seconds, > 0).
    tc_s: the time of one allreduce of the synced model (seconds, >= 0).
    cap: the largest k returned.

  Returns:
    `min(cap, max(1, ceil(tc_s / tp_s)))`.
  """
  if tp_s <= 0:
    raise ValueError(f'Tp={tp_s!r} s is invalid; allowed: a measured step time > 0')
  return int(min(cap, max(1, math.ceil(tc_s / tp_s))))


def with_period(config, k: int, delay: int | None = None):
  """A copy of `config` with `algorithm.period=k` (what the algorithms and schedules read), and
  `algorithm.delay=delay` when one is given."""
  out = copy.deepcopy(config)  # Keeps the field's `object` type (copy_and_resolve would not).
  with out.unlocked():
    out.algorithm.period = int(k)
    if delay is not None:
      out.algorithm.delay = int(delay)
  return out


def _median_step_s(cluster, state, data) -> float:
  """Median seconds of a blocking local step (after one call that compiles) on a copy."""
  state = cluster.put_stacked(jax.device_get(state))  # New buffers: the step donates its input.
  times = []
  for _ in range(SAMPLES + 1):
    start = time.perf_counter()
    state, loss = jax.block_until_ready(cluster.local_step(state, data))
    times.append(time.perf_counter() - start)
  del state, loss
  return statistics.median(times[1:])


def _allreduce_spans_s(cluster, tree) -> list[float]:
  """Seconds of the allreduce span of SAMPLES blocking averages of `tree` (after a warm-up)."""
  times = []
  for _ in range(SAMPLES + 1):
    cluster.barrier()
    handle = cluster.start(tree, 'the period calibration', -1, blocking=True)
    jax.block_until_ready(cluster.wait(handle))
    start, end = handle.span
    times.append(end - start)
  return times[1:]


def _fragment_tree(cluster, part, fragments: int):
  """Zeros shaped like the largest of `fragments` fragments of `part` on every worker here: what
  one streamed collective averages (its time depends on the size alone)."""
  from cocod_jax.algorithms import streamed  # pylint: disable=g-import-not-at-top

  leaves = jax.tree.leaves(part)
  n = sum(math.prod(a.shape[1:]) for a in leaves)
  bounds = streamed.edges(n, fragments)
  size = max(b - a for a, b in zip(bounds, bounds[1:]))
  return {'fragment': jax.device_put(jnp.zeros((leaves[0].shape[0], size)), cluster.sharded)}


def measure(cluster, config, state, data) -> dict:
  """Tp and Tc on every rank (a collective: every rank calls it); the figures of k.

  Args:
    cluster: the run's `ranks.RanksCluster`.
    config: the run's config (`algorithm.period='auto'`).
    state: the placed train state (not changed).
    data: the placed `WorkerData` with one epoch's batches.

  Returns:
    {'Tp_s' (the largest over the ranks), 'Tc_s', 'r', 'k' (chosen, or the config's when it is
    fixed), 'cap', 'samples', 'ranks' (each rank's [Tp_s, Tc_s], its own medians), 'source':
    'measured'}, and with `algorithm.delay='auto'` 'delay': the smallest tau with tau Tp >= Tc,
    at most k.
  """
  tp = _median_step_s(cluster, state, data)
  spans = _allreduce_spans_s(cluster, steps_lib.synced_part(state, config.algorithm))
  everyone = cluster.allgather([tp, spans])
  ranks = [[t, statistics.median(s)] for t, s in everyone]
  tp_all = max(r[0] for r in ranks)
  # Per allreduce the shortest span over the ranks: the last rank to arrive waited for no one
  # (timeline.collective_time); then their median.
  tc_all = statistics.median(min(s[i] for _, s in everyone) for i in range(SAMPLES))
  k = choose_period(tp_all, tc_all) if is_auto(config) else int(config.algorithm.period)
  out = dict(
    Tp_s=tp_all,
    Tc_s=tc_all,
    r=tc_all / tp_all,
    k=k,
    cap=MAX_PERIOD,
    samples=SAMPLES,
    ranks=ranks,
    source='measured',
  )
  if not is_auto(config):
    out['period'] = 'fixed'  # k is the config's; only the delay was chosen.
  fragments = config.algorithm.get('fragments', 1)
  if delay_is_auto(config) and fragments > 1:  # tau from one fragment's allreduce.
    part = steps_lib.synced_part(state, config.algorithm)
    spans = _allreduce_spans_s(cluster, _fragment_tree(cluster, part, fragments))
    everyone = cluster.allgather(spans)
    tc_fragment = statistics.median(min(s[i] for s in everyone) for i in range(SAMPLES))
    out.update(fragments=fragments, Tc_fragment_s=tc_fragment)
    out['delay'] = choose_period(tp_all, tc_fragment, cap=k)
  elif delay_is_auto(config):
    out['delay'] = choose_period(tp_all, tc_all, cap=k)
  return out


def read(workdir: str) -> dict | None:
  """The outcome recorded in `workdir` by an earlier run, or None."""
  path = os.path.join(workdir, FILE)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def resolve(cluster, config, state, data, workdir: str) -> dict:
  """k for this run: rank 0's record in `workdir` when there is one, else measured now (and
  recorded by rank 0). Every rank returns the same dict; a collective.

  Returns:
    The figures (`measure`), with 'source' 'measured' or 'stored'.
  """
  stored = cluster.allgather(read(workdir) if cluster.is_chief else None)[0]
  if stored is not None:
    return dict(stored, source='stored')
  start = time.perf_counter()
  figures = measure(cluster, config, state, data)
  # The seconds the measurement took, the step's compilation included (which it takes out of
  # epoch 1): a time to target counts them as training (experiments/timing.time_to_target).
  figures['measure_s'] = cluster.allgather(time.perf_counter() - start)[0]
  if cluster.is_chief:
    with workdir_lib.writing(FILE, workdir):  # A full disk: one line, as for the results.
      files.write_json_atomic(os.path.join(workdir, FILE), figures)
  return figures


def describe(figures: dict, workdir: str) -> str:
  """One line for the console."""
  r = figures['Tc_s'] / figures['Tp_s']
  how = (
    f'medians of {figures["samples"]}, Tp of the slowest rank'
    if figures['source'] == 'measured'
    else f'as measured before, from {os.path.join(workdir, FILE)}'
  )
  capped = ' (capped)' if figures['k'] == figures['cap'] and math.ceil(r) > figures['cap'] else ''
  chosen = {}  # field -> what was chosen for it
  if figures.get('period') != 'fixed':
    chosen['period'] = f'k = {figures["k"]}{capped} (k Tp >= Tc, at most {figures["cap"]})'
  fragment = ''
  if 'Tc_fragment_s' in figures:
    fragment = (
      f', Tc of one of {figures["fragments"]} fragments {figures["Tc_fragment_s"] * 1e3:.2f} ms'
    )
    chosen['delay'] = f'tau = {figures["delay"]} (tau Tp >= Tc of a fragment, at most k)'
  elif 'delay' in figures:
    chosen['delay'] = f'tau = {figures["delay"]} (tau Tp >= Tc, at most k)'
  fields = ' and '.join(f'algorithm.{f}=auto' for f in chosen)
  return (
    f'{fields}: Tp {figures["Tp_s"] * 1e3:.2f} ms, Tc {figures["Tc_s"] * 1e3:.2f} '
    f'ms (r = {r:.2f}{fragment}; {how}) -> ' + ', '.join(chosen.values())
  )


def choose(cluster, config, state, probe, workdir: str):
  """(the config's `algorithm` part with the k and tau this run uses, their figures): `resolve`
  on epoch 1's batches (`probe`), before the first step; the chief says what it chose."""
  figures = resolve(cluster, config, state, probe, workdir)
  if cluster.is_chief:
    print(describe(figures, workdir), flush=True)
  return with_period(config, figures['k'], figures.get('delay')).algorithm, figures

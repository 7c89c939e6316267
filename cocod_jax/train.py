"""`train_and_evaluate`, the one loop: it owns the cluster, the writers and the timers.

Which algorithm runs is the business of `algorithms/` (the loop calls `step`, `drain`, `finish`),
where the workers run is the business of `cluster/` (one process for all of them, or MPI ranks
of W workers each), and what a step computes is `steps.py`. The loop uploads each epoch's batch
indices once, steps without blocking (under `jax.transfer_guard('disallow')`: nothing moves
between host and device implicitly) except where the algorithm waits for a collective, and turns
metrics into Python numbers only at the end of an epoch, when it also evaluates the averaged
model.

A worker whose contribution to an average holds NaN or Inf stops the run before any worker takes
that average in (`background.Diverged`); so does a non-finite training loss at an epoch end. The
results written then say `"status": "diverged"` and `Diverged` is raised for the entry point.
"""

import dataclasses
import os
import time
from typing import Any
from typing import Callable
from typing import NamedTuple

import flax
import jax
import jax.numpy as jnp
import numpy as np

from cocod_jax import algorithms
from cocod_jax import models
from cocod_jax import schedules
from cocod_jax import steps as steps_lib
from cocod_jax import timeline as timeline_lib
from cocod_jax.cluster import background
from cocod_jax.cluster import period_auto
from cocod_jax.data import pipeline as input_pipeline
from cocod_jax.record import checkpoints
from cocod_jax.record import files
from cocod_jax.record import workdir as workdir_lib

EVAL_BATCH = 1000
# Under MPI the ranks decide together whether to checkpoint now (a SIGTERM, the interval) at most
# this often, and only where they meet anyway: after a round's collective.
POLL_STEPS = 10


class Diverged(RuntimeError):
  """Training stopped on a NaN or Inf; the message names the workers, the step and the rate."""


class Plan(NamedTuple):
  """What follows from the config and the data before anything runs (pure)."""

  sizes: list[int]  # M_i
  weights: list[float]  # w_i
  shards: list[np.ndarray]  # indices of each worker's examples
  rows: list[int]  # batches in each worker's shard: its local steps in an epoch
  steps_per_epoch: int  # global steps
  model: Any
  fns: steps_lib.StepFns
  lr_fn: Callable


def make_plan(config, dataset) -> Plan:
  sizes = schedules.batch_sizes(config)
  shards = input_pipeline.shard_indices(
    len(dataset.x_train), schedules.shard_weights(config), config.dataset.shuffle, config.seed
  )
  rows = [len(s) // m for s, m in zip(shards, sizes)]
  k = config.algorithm.period
  periods = schedules.local_periods(config, k)
  # An epoch ends when the first worker has used its whole shard (k_i = k: its rows).
  steps_per_epoch = min(r * k // k_i for r, k_i in zip(rows, periods))
  augment_on = bool(config.dataset.augment) and dataset.augment_ok
  model = models.get_model(config.model.name, dataset.num_classes)
  fns = steps_lib.make_step_fns(
    model, config, sizes, steps_per_epoch, dataset.normalize, augment_on
  )
  lr_fn = schedules.learning_rate_fn(config, sizes, steps_per_epoch)
  return Plan(
    sizes,
    schedules.worker_weights(sizes),
    shards,
    rows,
    steps_per_epoch,
    model,
    fns,
    lr_fn,
  )


def resolve_period(config, workdir, plan: Plan, cluster, data, state):
  """(the config the algorithm runs with, the figures of k or None): with
  `algorithm.period='auto'`, k measured here on epoch 1's batches, before the first step, or
  taken from an earlier run in `workdir` (period_auto.py); likewise tau with
  `algorithm.delay='auto'`; `config` itself otherwise."""
  if not period_auto.measured(config):
    return config, None
  here, width = cluster.workers, batch_width(cluster, plan)
  probe = data._replace(
    batches=cluster.put({i: batch_table(config, plan, 1, i, width) for i in here}),
    first_step=cluster.put({i: np.int32(0) for i in here}),
  )
  figures = period_auto.resolve(cluster, config, state, probe, workdir)
  if cluster.is_chief:
    print(period_auto.describe(figures, workdir), flush=True)
  return period_auto.with_period(config, figures['k'], figures.get('delay')), figures


def make_cluster(config, plan: Plan):
  if config.backend == 'mpi':
    from cocod_jax.cluster import ranks  # pylint: disable=g-import-not-at-top

    return ranks.RanksCluster(plan.fns, config, plan.weights)
  from cocod_jax.cluster import one_host  # pylint: disable=g-import-not-at-top

  return one_host.OneHostCluster(plan.fns, config, plan.weights)


def batch_width(cluster, plan: Plan) -> int:
  """Examples a step computes on: the largest M_i of the workers this process holds. A process
  pads its workers to their largest batch (one vmapped shape; the mask keeps the padding out);
  under MPI each rank computes on its own workers' largest M_i only."""
  return max(plan.sizes[i] for i in cluster.workers)


def place(cluster, config, plan: Plan, dataset):
  """The workers' shards (without batches yet) and the common x_0, on the cluster's devices."""
  here, width = cluster.workers, batch_width(cluster, plan)
  data = steps_lib.WorkerData(
    x=cluster.put({i: dataset.x_train[plan.shards[i]] for i in here}),
    y=cluster.put({i: dataset.y_train[plan.shards[i]] for i in here}),
    mask=cluster.put({i: (np.arange(width) < plan.sizes[i]).astype(np.float32) for i in here}),
    batches=None,
    rows=cluster.put({i: np.int32(plan.rows[i]) for i in here}),
    first_step=None,
  )
  key = jax.random.PRNGKey(config.seed)
  shape = dataset.x_train.shape[1:]
  opt = config.optimizer.name
  state = cluster.init_state(lambda i: steps_lib.create_train_state(plan.model, key, shape, i, opt))
  return data, state


def batch_table(config, plan: Plan, epoch: int, worker: int, width: int) -> np.ndarray:
  """[rows_i, width] indices into `worker`'s shard for one epoch (columns >= M_i unused).

  Drawn from a generator of its own per (seed, epoch, worker), so every runtime and every process
  draws the same batches without sharing a random stream.
  """
  size, m_i, rows = len(plan.shards[worker]), plan.sizes[worker], plan.rows[worker]
  if config.dataset.shuffle:
    order = np.random.default_rng([config.seed, epoch, worker]).permutation(size)
  else:
    order = np.arange(size)
  out = np.zeros((rows, width), np.int32)
  out[:, :m_i] = order[: rows * m_i].reshape(rows, m_i)
  return out


def eval_batches(x, y, device):
  """Examples `x`, `y` on `device` once, in padded batches of EVAL_BATCH, with their masks."""
  count = len(x)
  size = min(EVAL_BATCH, count)
  out = []
  for b in range(0, count, size):
    xb, yb = x[b : b + size], y[b : b + size]
    pad = size - len(xb)
    mask = (np.arange(size) < len(xb)).astype(np.float32)
    xb = np.concatenate([xb, np.zeros((pad,) + xb.shape[1:], xb.dtype)])
    yb = np.concatenate([yb, np.zeros((pad,), yb.dtype)])
    out.append(jax.device_put((xb, yb, mask), device))
  return out


def eval_sets(config, dataset, device) -> dict:
  """{record prefix: (batches, count)}: the test set, and the first `eval_train_examples`
  training examples where that is > 0."""
  sets = {'test': (eval_batches(dataset.x_test, dataset.y_test, device), len(dataset.x_test))}
  n = min(config.eval_train_examples, len(dataset.x_train))
  if n:
    sets['avg_train'] = (eval_batches(dataset.x_train[:n], dataset.y_train[:n], device), n)
  return sets


def evaluate(cluster, algo, state, sets: dict) -> dict:
  """Loss and accuracy of the evaluated model xhat, `algo.evaluated` of the weighted average, on
  each of `sets` (`eval_sets`): {'test_loss': ..., 'test_accuracy': ..., ...}, None values off
  the chief (every worker takes part in the average; the chief evaluates; not training time)."""
  mean = cluster.weighted_mean(steps_lib.model_part(state), 'the evaluation average')
  xhat = cluster.first(algo.evaluated(mean))
  out = {}
  for name, (batches, count) in sets.items():
    loss = correct = None
    if cluster.is_chief:
      variables = xhat if jax.tree.leaves(xhat['batch_stats']) else {'params': xhat['params']}
      sums = [cluster.eval_step(variables, *batch) for batch in batches]
      loss, correct = np.sum(jax.device_get(sums), axis=0)
      loss, correct = float(loss) / count, float(correct) / count
    out[f'{name}_loss'], out[f'{name}_accuracy'] = loss, correct
  return out


def first_bad_step(losses, first_step) -> int:
  """The first step of an epoch whose loss (on any worker here) is not finite."""
  values = np.asarray(jax.device_get(jnp.stack(losses))).reshape(len(losses), -1)
  bad = np.flatnonzero(~np.all(np.isfinite(values), axis=1))
  return first_step + int(bad[0]) if len(bad) else first_step + len(losses) - 1


class Recorder:
  """The run's outputs, written by the chief only: results.json (rewritten whole, atomically, at
  the end or on divergence), metrics.jsonl (one line per epoch), TensorBoard scalars, the console.
  """

  def __init__(self, workdir, config, plan: Plan, cluster, dataset, records=(), auto=None):
    self.workdir, self.num_epochs = workdir, config.num_epochs
    ran = period_auto.with_period(config, auto['k']) if auto else config
    self.enabled = cluster.is_chief
    self.records = list(records)  # Continued from a checkpoint when resuming.
    self.results = dict(
      config=config.to_dict(),
      backend=cluster.backend,
      batch_sizes=plan.sizes,
      weights=plan.weights,
      steps_per_epoch=plan.steps_per_epoch,
      train_examples=len(dataset.y_train),
      test_examples=len(dataset.y_test),  # Tables judge accuracy gaps against this resolution.
      workers=schedules.worker_table(ran),
      layout=cluster.layout(),
      epochs=self.records,
    )
    if auto:  # `config` keeps period='auto' (the sweep's hashes); k and its inputs are here.
      self.results['period_auto'] = auto
    waiting = [w for w in self.results['workers'] if w['idle_fraction_model'] > 0]
    if waiting and self.enabled:
      shares = ', '.join(f'{w["idle_fraction_model"]:.0%}' for w in waiting)
      print(
        f'heterogeneous cluster without balance: workers {[w["worker"] for w in waiting]} wait '
        f'for the slowest, {shares} of each round by the time model (results.json: workers; '
        'under MPI the measured waits are timing.ranks[r].exposed_comm_s)',
        flush=True,
      )
    self.writer = None
    if self.enabled:
      # metrics.jsonl restarts from the checkpoint's history: epochs after it are run again.
      self._write_metrics()
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top

      with workdir_lib.writing('the TensorBoard events', workdir):
        self.writer = SummaryWriter(workdir)

  def _write_metrics(self):
    """metrics.jsonl, rewritten whole (a full disk leaves the last complete one in place)."""
    with workdir_lib.writing('metrics.jsonl', self.workdir):
      text = ''.join(files.dumps(rec) + '\n' for rec in self.records)
      files.write_atomic(os.path.join(self.workdir, 'metrics.jsonl'), text)

  def _write_results(self):
    with workdir_lib.writing('results.json', self.workdir):
      files.write_json_atomic(os.path.join(self.workdir, 'results.json'), self.results)

  def epoch(self, **rec):
    if not self.enabled:
      return
    self.records.append(rec)
    with workdir_lib.writing('the TensorBoard events', self.workdir):
      for k, v in rec.items():
        if k != 'epoch':
          self.writer.add_scalar(k, v, rec['epoch'])
    self._write_metrics()
    print(
      f'epoch {rec["epoch"]:3d}/{self.num_epochs}  train_loss {rec["train_loss"]:.4f}  '
      f'test_loss {rec["test_loss"]:.4f}  test_acc {rec["test_accuracy"]:.4f}  '
      + (f'avg_train_loss {rec["avg_train_loss"]:.4f}  ' if 'avg_train_loss' in rec else '')
      + f'train_time {rec["train_time_s"]:.1f}s',
      flush=True,
    )

  def diverged(self, **what):
    if self.enabled:
      self.results.update(status='diverged', diverged=what)
      self._write_results()

  def completed(self, final, timing, model):
    """The final averaged `model`, its figures `final` and the combined `timing` (or None)."""
    if not self.enabled:
      return None
    self.results.update(status='completed', final=final)
    print(
      f'final (averaged model)  test_loss {final["test_loss"]:.4f}  '
      f'test_acc {final["test_accuracy"]:.4f}  train_time {final["train_time_s"]:.1f}s',
      flush=True,
    )
    if timing is not None:
      self.results['timing'] = timeline_lib.combine(timing)
      print(timeline_lib.describe(self.results['timing']), flush=True)
    flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(model), sep='/')
    tmp = os.path.join(self.workdir, 'final_params.tmp.npz')
    with workdir_lib.writing('final_params.npz', self.workdir):
      try:
        np.savez(tmp, **{k: np.asarray(v) for k, v in flat.items()})
        os.replace(tmp, os.path.join(self.workdir, 'final_params.npz'))
      finally:
        if os.path.exists(tmp):
          os.remove(tmp)
    self._write_results()
    return self.results

  def close(self):
    if self.writer is not None:
      self.writer.close()


@dataclasses.dataclass
class Position:
  """Where the loop is: what a checkpoint must hold besides the arrays."""

  epoch: int = 1
  step: int = 0  # The next global step.
  train_time: float = 0.0
  measured_time: float = 0.0  # Training time of the epochs after the first (compilation).
  # Seconds a resumed run spent compiling its functions again, left out of the two above: the
  # run is timed as if it had not stopped (its first process compiled them in epoch 1).
  restart_compile_s: float = 0.0
  # Steps in measured_time (None: a checkpoint from before it was kept, whose steps are taken
  # to be every step of the epochs after the first). A resumed process leaves out the epoch it
  # resumed in (its first calls also warm up what JAX's compilation events do not cover).
  measured_steps: int | None = 0
  timed_from: int = 0  # The step the current lap started at.
  losses: list = dataclasses.field(default_factory=list)  # This epoch's, so far.

  def add_time(self, seconds: float, measured: bool):
    self.train_time += seconds
    if measured:
      self.measured_time += seconds
      if self.measured_steps is not None:
        self.measured_steps += self.step - self.timed_from
    self.timed_from = self.step


class Run(NamedTuple):
  """The long-lived parts of one run that the loop's helpers work with."""

  config: Any
  plan: Plan
  cluster: Any
  algo: algorithms.base.Algorithm
  tl: timeline_lib.Timeline
  ckpt: checkpoints.Checkpointer
  out: 'Recorder'
  guard: checkpoints.PreemptionGuard


class Stopwatch:
  """Training time: `lap()` returns the seconds since the last lap (or the start). With `pos`
  (a resumed run), the compilation in between (`timeline.CompileClock`) is left out and added
  to `pos.restart_compile_s` instead."""

  def __init__(self, pos: 'Position | None' = None):
    self.pos = pos
    self.last = time.perf_counter()
    self.clock = timeline_lib.CompileClock.seconds() if pos is not None else 0.0

  def lap(self) -> float:
    now = time.perf_counter()
    elapsed, self.last = now - self.last, now
    if self.pos is not None:
      clock = timeline_lib.CompileClock.seconds()
      compiled, self.clock = min(clock - self.clock, elapsed), clock
      self.pos.restart_compile_s += compiled
      elapsed -= compiled
    return elapsed

  def reset(self):
    """Starts the next lap now, counting nothing of what came before."""
    self.last = time.perf_counter()
    self.clock = timeline_lib.CompileClock.seconds() if self.pos is not None else 0.0


def save_checkpoint(run: Run, state, pos: Position):
  """Writes a checkpoint at `pos.step` (the algorithm's collective in flight already drained)."""
  tree = {'state': state}
  if pos.losses:
    tree['losses'] = jnp.stack(pos.losses)
  if run.algo.state_dict():
    tree['algo'] = run.algo.state_dict()
  meta = dict(
    dataclasses.asdict(pos),
    losses=None,
    config=run.config.to_dict(),
    records=run.out.records,
    algo=run.algo.host_state(),
    timeline=run.tl.state_dict(),
    rank=run.cluster.rank,
    period=run.algo.config.algorithm.period,  # k, also where algorithm.period='auto'.
    workers=run.cluster.workers,  # The part's arrays hold these workers on their leading axis.
  )
  with jax.transfer_guard('allow'), workdir_lib.writing('a checkpoint', run.out.workdir):
    run.ckpt.save(pos.step, tree, meta)


def resume(run: Run):
  """(state, Position, records) from the newest checkpoint that reads, or None to start afresh.

  Raises:
    checkpoints.ResumeError: no committed checkpoint reads, or the newest that does was made by
      another number of processes, with a config that differs in a field that changes results,
      or past this run's last step.
  """
  cluster, ckpt = run.cluster, run.ckpt
  say = print if cluster.is_chief else (lambda *_: None)

  def everyone(why):
    """None when every process can use the step; else the reasons (on the chief)."""
    if not cluster.any(why is not None)[0]:
      return None
    return [r for r in cluster.gather(why) or [] if r]

  found = ckpt.restore_newest(cluster.agree(ckpt.steps()), everyone, say)
  if found is None:
    return None
  step, tree, meta = found
  where = ckpt.step_dir(step)
  if cluster.backend == 'mpi' and 'workers' not in meta:
    raise checkpoints.ResumeError(
      f'the checkpoint in {where} was written by the MPI runtime before a rank held several '
      'workers (its arrays have no worker axis); continue it with the version that wrote it, or '
      'use another --workdir'
    )
  diffs = checkpoints.config_differences(meta['config'], run.config.to_dict())
  if diffs:
    raise checkpoints.ResumeError(
      f'the checkpoint in {where} was made with another config ({"; ".join(diffs)}); rerun with '
      'the same config to continue it, or use another --workdir'
    )
  k = run.algo.config.algorithm.period
  if meta.get('period', k) != k:  # period='auto' with WORKDIR/period_auto.json changed or gone.
    record = os.path.join(os.path.dirname(ckpt.root), period_auto.FILE)
    raise checkpoints.ResumeError(
      f"the checkpoint in {where} was made with period k={meta['period']}, and this run's "
      f'algorithm.period={run.config.algorithm.period!r} gives k={k}; put k={meta["period"]} '
      f'back into {record} to continue it, or use another --workdir'
    )
  spe, epochs = run.plan.steps_per_epoch, run.config.num_epochs
  if meta['step'] > epochs * spe:  # Its model would be reported as a num_epochs run.
    raise checkpoints.ResumeError(
      f'the checkpoint in {where} is at step {meta["step"]} (epoch {meta["epoch"]}), past the end '
      f'of this run (num_epochs={epochs}: {epochs * spe} steps); rerun with '
      f'--config.num_epochs={-(-meta["step"] // spe)} or more, or use another --workdir'
    )
  state = cluster.put_stacked(steps_lib.TrainState(**tree['state']))
  run.algo.load_host_state(meta['algo'])
  run.algo.load_state_dict(cluster.put_stacked(tree.get('algo', {})))
  run.tl.load_state_dict(meta['timeline'])
  fields = {k: meta[k] for k in ('epoch', 'step', 'train_time', 'measured_time')}
  fields['restart_compile_s'] = meta.get('restart_compile_s', 0.0)  # (older checkpoints: none)
  fields['measured_steps'] = meta.get('measured_steps')
  fields['timed_from'] = meta['step']
  say(f'resuming from the checkpoint at step {step} (epoch {meta["epoch"]}) in {where}')
  return state, Position(**fields, losses=list(tree.get('losses', []))), meta['records']


def checkpoint_due(run: Run, boundary: int, sync_point: bool, last: dict, force=False):
  """(checkpoint now, then stop) at this step boundary: for a SIGTERM on any rank (both), or for
  the interval (checkpoint only).

  Under MPI the ranks decide together, where they meet anyway (after a round's collective) and
  at least POLL_STEPS steps apart, or at an epoch end (`force`); `last` holds the step and time
  of the last poll and save.
  """
  often = sync_point and boundary - last['poll'] >= POLL_STEPS
  if run.cluster.processes > 1 and not (often or force):
    return False, False
  last['poll'] = boundary
  interval = run.config.checkpoint.interval_s
  late = interval > 0 and time.perf_counter() - last['save'] >= interval
  stop, late = run.cluster.any(run.guard.requested, late)
  return stop or late, stop


def check_test_loss(run: Run, test_loss, step: int, stop):
  """Stops the run as diverged when the averaged model's test loss (the chief's) is not finite:
  a finite training loss can still give an averaged model that overflows. Every rank calls it
  (one control-traffic allreduce, which also lines the ranks up after the evaluation)."""
  bad = test_loss is not None and not np.isfinite(test_loss)
  if run.cluster.any(bad)[0]:
    stop(list(range(run.config.num_workers)), step, 'the test loss of the averaged model')


def final_average(run: Run, state, pos: Position, stop):
  """One last blocking average after the last step: every worker then holds xhat, the model
  saved and reported (not training time): `algo.evaluated` of the weighted average. Pipe-SGD's
  average still in flight is dropped (the loop has drained it at the last epoch's end)."""
  watch = Stopwatch()
  try:
    final = run.cluster.weighted_mean(steps_lib.model_part(state), 'the final average', pos.step)
  except background.Diverged as e:
    stop(e.workers, e.step, e.label)
  final = run.algo.evaluated(final)
  run.algo.finish()
  state = jax.block_until_ready(steps_lib.with_part(state, final))
  pos.add_time(watch.lap(), False)
  return state


def write_timing(run: Run, workdir: str, pos: Position, measured_from: int):
  """MPI: every rank's Chrome trace, and the ranks' timing summaries gathered on the chief
  (None elsewhere, and on the one-host cluster, whose clock is not training time)."""
  if not run.tl.enabled:
    return None
  os.makedirs(workdir, exist_ok=True)
  run.tl.write_chrome_trace(os.path.join(workdir, f'timeline_rank{run.cluster.rank}.json'))
  measured_steps = pos.measured_steps
  if measured_steps is None:  # (resumed from a checkpoint that did not count them)
    measured_steps = run.plan.steps_per_epoch * (run.config.num_epochs - measured_from + 1)
  return run.cluster.gather(run.tl.summary(measured_from, measured_steps, pos.measured_time))


def train_and_evaluate(config, workdir: str, dataset: input_pipeline.Dataset | None = None):
  """Trains with `config.algorithm.name` on `config.backend` and writes the results.

  Args:
    config: a validated ConfigDict (see `cocod_jax.config.validation.validate`).
    workdir: where results.json, final_params.npz and TensorBoard summaries go (written by the
      chief: rank 0 under MPI), and timeline_rank<r>.json (every rank, MPI only).
    dataset: the loaded, checked dataset (default: `input_pipeline.load_checked`).

  Returns:
    the results dictionary also written to `workdir/results.json` (None on other ranks); for a
    run the workdir holds finished already, those results, and nothing is written.

  Raises:
    Diverged: a NaN or Inf stopped training (results.json says so).
    workdir.WorkdirError: another run holds the workdir, or it holds another run's fingerprint
      or finished results this run would rewrite (nothing written).
    workdir.DiskFull: a write into the workdir found the disk full.
  """
  dataset = dataset or input_pipeline.load_checked(config)
  with workdir_lib.claim(workdir, config, dataset) as claim:  # Before anything is written.
    if claim.finished is not None:  # A rerun of a finished run: nothing to do, nothing written.
      if claim.finished:
        acc = claim.finished.get('final', {}).get('test_accuracy')
        print(f'the run in {workdir} is finished (num_epochs={config.num_epochs}, final test '
              f'accuracy {acc:.4f}): nothing to do; more --config.num_epochs continues it',
              flush=True)  # fmt: skip
      return claim.finished or None
    return _train_and_evaluate(config, workdir, dataset)


def _train_and_evaluate(config, workdir: str, dataset: input_pipeline.Dataset):
  plan = make_plan(period_auto.plan_config(config), dataset)  # The same plan for every k.
  spe, epochs, c = plan.steps_per_epoch, config.num_epochs, config.checkpoint
  cluster = make_cluster(config, plan)
  tl = timeline_lib.Timeline(cluster.backend == 'mpi', cluster.rank, config.timeline.sample_every)
  data, state = place(cluster, config, plan, dataset)
  here, width = cluster.workers, batch_width(cluster, plan)
  cluster.preflight(config, state)
  ran, auto = resolve_period(config, workdir, plan, cluster, data, state)
  algo = algorithms.get(config.algorithm.name, algorithms.base.Context(cluster, ran, tl, spe))
  tests = eval_sets(config, dataset, cluster.device)
  ckpt = checkpoints.Checkpointer(workdir, cluster.rank, cluster.processes, cluster.barrier, c.keep)
  guard = checkpoints.PreemptionGuard(c.preempt_deadline_s)
  run = Run(config, plan, cluster, algo, tl, ckpt, None, guard)
  resumed = resume(run)
  state, pos, records = resumed or (state, Position(), [])
  restarted = pos if resumed is not None else None  # Stopwatches leave compilation out.
  restart_epoch = pos.epoch if resumed is not None else None  # Timed apart, as epoch 1 is.

  def measured(epoch: int) -> bool:
    return epoch >= measured_from and epoch != restart_epoch

  run = run._replace(out=Recorder(workdir, config, plan, cluster, dataset, records, auto))
  measured_from = 2 if epochs >= 2 else 1  # Epoch 1 compiles every function.
  last = {'poll': pos.step, 'save': time.perf_counter()}

  def stop(workers, step, what):
    """Writes results that say the run diverged and raises Diverged for the entry point."""
    rate = float(plan.lr_fn(step))
    run.out.diverged(workers=workers, step=step, learning_rate=rate, what=what)
    raise Diverged(
      f'training diverged: worker(s) {workers} had non-finite values in {what} at step {step} '
      f'(epoch {step // spe + 1}, learning rate {rate:.4g}); stopped before any worker took '
      'them in (lower --config.optimizer.learning_rate or check the data)'
    )

  def checkpoint(watch, preempt):
    """Drains, writes a checkpoint (not training time), and stops here after a SIGTERM."""
    nonlocal state
    with jax.transfer_guard('allow'), tl.drain():
      state = jax.block_until_ready(algo.drain(state))
    pos.add_time(watch.lap(), measured(pos.epoch))
    save_checkpoint(run, state, pos)
    watch.reset()
    last['save'] = time.perf_counter()
    if preempt:
      raise checkpoints.Preempted(f'preempted at step {pos.step}: checkpoint written')

  try:
    with guard:
      for epoch in range(pos.epoch, epochs + 1):
        tl.epoch = pos.epoch = epoch
        first = algo.worker_steps((epoch - 1) * spe)
        data = data._replace(
          batches=cluster.put({i: batch_table(config, plan, epoch, i, width) for i in here}),
          first_step=cluster.put({i: np.int32(first[i]) for i in here}),
        )
        watch = Stopwatch(restarted)
        try:
          with jax.transfer_guard('disallow'):
            for t in range(pos.step, epoch * spe):
              if t == algo.round_end:
                tl.begin_round(t, algo.begin_round(t))
              state, loss = algo.step(state, data, t)
              tl.end_step(t)
              pos.losses.append(loss)
              pos.step = t + 1
              save, preempt = checkpoint_due(run, t + 1, t + 1 == algo.round_end, last)
              if save and t + 1 < epoch * spe:
                checkpoint(watch, preempt)
            with tl.drain():
              state = jax.block_until_ready(algo.drain(state))
        except background.Diverged as e:
          stop(e.workers, e.step, e.label)
        pos.add_time(watch.lap(), measured(epoch))
        train_loss, bad = cluster.mean_loss(pos.losses)
        if not np.isfinite(train_loss):  # Every rank sees the same sum.
          everyone = sorted(set(sum(cluster.gather(bad) or [], [])))
          stop(everyone or bad, first_bad_step(pos.losses, (epoch - 1) * spe), 'the training loss')
        evaluated = evaluate(cluster, algo, state, tests)
        check_test_loss(run, evaluated['test_loss'], pos.step, stop)  # All ranks resume together.
        run.out.epoch(epoch=epoch, train_loss=train_loss, **evaluated, train_time_s=pos.train_time)
        pos.epoch, pos.losses = epoch + 1, []
        save, preempt = checkpoint_due(run, pos.step, True, last, force=True)  # Ranks meet here.
        if save or (c.every_epochs and (epoch % c.every_epochs == 0 or epoch == epochs)):
          checkpoint(Stopwatch(restarted), preempt)  # A fresh watch: evaluation is not training.

    state = final_average(run, state, pos, stop)
    evaluated = evaluate(cluster, algo, state, tests)
    check_test_loss(run, evaluated['test_loss'], pos.step, stop)
    timing = write_timing(run, workdir, pos, measured_from)
    summary = run.algo.summary()
    if summary is not None:
      run.out.results['snapshot_allreduce'] = summary
    if resumed is not None:  # Reported apart: none of it is in train_time_s.
      run.out.results['restart_compile_s'] = pos.restart_compile_s
  finally:
    run.out.close()
    cluster.close()
  records = run.out.records
  final = dict(
    epoch=epochs,
    train_loss=records[-1]['train_loss'] if records else None,
    **evaluated,
    train_time_s=pos.train_time,
  )
  return run.out.completed(final, timing, cluster.first(steps_lib.model_part(state)))

"""`train_and_evaluate`, the one loop: it owns the cluster, the writers and the timers.

Which algorithm runs is the business of `algorithms/` (the loop calls `step`, `drain`, `finish`),
where the workers run is the business of `cluster/` (one process for all of them, or MPI ranks
of W workers each), and what a step computes is `steps.py`. The loop uploads each epoch's batch
indices once, steps without blocking (under `jax.transfer_guard('disallow')`: nothing moves
between host and device implicitly) except where the algorithm waits for a collective, and turns
metrics into Python numbers only at the end of an epoch, when it also evaluates the averaged
model.

A worker whose contribution to an average holds NaN or Inf stops the run before any worker takes
that average in (`background.NonFinite`); so does a non-finite training loss at an epoch end. The
results written then say `"status": "diverged"` and `Diverged` is raised for the entry point.
"""

import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from cocod_jax import algorithms
from cocod_jax import cluster as cluster_lib
from cocod_jax import plan as plan_lib
from cocod_jax import resume as resume_lib
from cocod_jax import steps as steps_lib
from cocod_jax import timeline as timeline_lib
from cocod_jax import writers
from cocod_jax.cluster import background
from cocod_jax.cluster import period_auto
from cocod_jax.data import pipeline as input_pipeline
from cocod_jax.record import checkpoints
from cocod_jax.record import workdir as workdir_lib

EVAL_BATCH = 1000


class Diverged(RuntimeError):
  """Training stopped on a NaN or Inf; the message names the workers, the step and the rate."""


def batch_width(cluster, plan: plan_lib.Plan) -> int:
  """Examples a step computes on: the largest M_i of the workers this process holds. A process
  pads its workers to their largest batch (one vmapped shape; the mask keeps the padding out);
  under MPI each rank computes on its own workers' largest M_i only."""
  return max(plan.sizes[i] for i in cluster.workers)


def place(cluster, plan: plan_lib.Plan, dataset):
  """The workers' shards with epoch 1's batches (what `algorithm.period='auto'` measures k on)
  and the common x_0, on the cluster's devices."""
  here, width = cluster.workers, batch_width(cluster, plan)
  data = steps_lib.WorkerData(
    x=cluster.put({i: dataset.x_train[plan.shards[i]] for i in here}),
    y=cluster.put({i: dataset.y_train[plan.shards[i]] for i in here}),
    mask=cluster.put({i: (np.arange(width) < plan.sizes[i]).astype(np.float32) for i in here}),
    batches=None,
    rows=cluster.put({i: np.int32(plan.rows[i]) for i in here}),
    first_step=None,
  )
  data = epoch_data(cluster, plan, data, 1, {i: 0 for i in here})
  key, shape = jax.random.PRNGKey(plan.seed), dataset.x_train.shape[1:]
  make = lambda i: steps_lib.create_train_state(plan.model, key, shape, i, plan.optimizer)
  return data, cluster.init_state(make)


def epoch_data(cluster, plan: plan_lib.Plan, data, epoch: int, first: dict):
  """`data` with the batches of `epoch` and each worker's first step in it, uploaded once."""
  here, width = cluster.workers, batch_width(cluster, plan)
  return data._replace(
    batches=cluster.put({i: plan_lib.batch_table(plan, epoch, i, width) for i in here}),
    first_step=cluster.put({i: np.int32(first[i]) for i in here}),
  )


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


def eval_sets(plan: plan_lib.Plan, dataset, device) -> dict:
  """{record prefix: (batches, count)}: the test set, and the first `eval_train_examples`
  training examples where that is > 0."""
  sets = {'test': (eval_batches(dataset.x_test, dataset.y_test, device), len(dataset.x_test))}
  n = min(plan.eval_train_examples, len(dataset.x_train))
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


def check_test_loss(run: resume_lib.Run, test_loss, step: int, stop):
  """Stops the run as diverged when the averaged model's test loss (the chief's) is not finite:
  a finite training loss can still give an averaged model that overflows. Every rank calls it
  (one control-traffic allreduce, which also lines the ranks up after the evaluation)."""
  bad = test_loss is not None and not np.isfinite(test_loss)
  if run.cluster.any(bad)[0]:
    stop(list(range(len(run.plan.sizes))), step, 'the test loss of the averaged model')


def final_average(run: resume_lib.Run, state, pos: resume_lib.Position, stop):
  """One last blocking average after the last step: every worker then holds xhat, the model
  saved and reported (not training time): `algo.evaluated` of the weighted average. Pipe-SGD's
  average still in flight is dropped (the loop has drained it at the last epoch's end)."""
  watch = resume_lib.Stopwatch()
  try:
    final = run.cluster.weighted_mean(steps_lib.model_part(state), 'the final average', pos.step)
  except background.NonFinite as e:
    stop(e.workers, e.step, e.label)
  final = run.algo.evaluated(final)
  run.algo.finish()
  state = jax.block_until_ready(steps_lib.with_part(state, final))
  pos.add_time(watch.lap(), False)
  return state


def write_timing(run: resume_lib.Run, workdir: str, pos: resume_lib.Position, measured_from: int):
  """MPI: every rank's Chrome trace, and the ranks' timing summaries gathered on the chief
  (None elsewhere, and on the one-host cluster, whose clock is not training time)."""
  if not run.tl.enabled:
    return None
  os.makedirs(workdir, exist_ok=True)
  run.tl.write_chrome_trace(os.path.join(workdir, f'timeline_rank{run.cluster.rank}.json'))
  measured_steps = pos.measured_steps
  if measured_steps is None:  # (resumed from a checkpoint that did not count them)
    measured_steps = run.plan.steps_per_epoch * (run.plan.num_epochs - measured_from + 1)
  return run.cluster.gather(run.tl.summary(measured_from, measured_steps, pos.measured_time))


def train_and_evaluate(config, workdir: str, dataset: input_pipeline.Dataset | None = None):
  """Trains with `config.algorithm.name` on `config.backend` and writes the results.

  Args:
    config: a validated ConfigDict (see `cocod_jax.validation.validate`).
    workdir: where results.json, final_params.npz and TensorBoard summaries go (written by the
      chief: rank 0 under MPI), and timeline_rank<r>.json (every rank, MPI only).
    dataset: the loaded dataset (default: `input_pipeline.load` of `config.dataset`); the plan
      checks it against the config before anything is written.

  Returns:
    the results dictionary also written to `workdir/results.json` (None on other ranks); for a
    run the workdir holds finished already, those results, and nothing is written.

  Raises:
    Diverged: a NaN or Inf stopped training (results.json says so).
    workdir.WorkdirError: another run holds the workdir, or it holds another run's fingerprint
      or finished results this run would rewrite (nothing written).
    workdir.DiskFull: a write into the workdir found the disk full.
  """
  dataset = dataset or input_pipeline.load(config.dataset, config.data_dir)
  # Built once, before anything is written (it refuses a batch or a model the data cannot
  # serve); the same plan for every k of algorithm.period='auto'.
  plan = plan_lib.make_plan(config, dataset)
  with workdir_lib.claim(workdir, config, dataset) as claim:
    if claim.finished is not None:  # A rerun of a finished run: nothing to do, nothing written.
      if claim.finished:
        acc = claim.finished.get('final', {}).get('test_accuracy')
        print(f'the run in {workdir} is finished (num_epochs={plan.num_epochs}, final test '
              f'accuracy {acc:.4f}): nothing to do; more --config.num_epochs continues it',
              flush=True)  # fmt: skip
      return claim.finished or None
    return _train_and_evaluate(config, plan, claim, dataset)


def _train_and_evaluate(config, plan: plan_lib.Plan, claim, dataset: input_pipeline.Dataset):
  """The run itself; `config` goes to the cluster and to the choice of k alone, the plan and the
  claim's record of the config everywhere else."""
  cluster = cluster_lib.make(config, plan.fns, plan.weights)
  options, auto = config.algorithm, None
  workdir, spe, epochs, c = claim.workdir, plan.steps_per_epoch, plan.num_epochs, plan.checkpoint
  if cluster.is_chief:  # Before anything slow: what runs, where, into which workdir.
    print(writers.start_line(workdir, config.algorithm, cluster, len(plan.sizes)), flush=True)
  tl = timeline_lib.Timeline(cluster.backend == 'mpi', cluster.rank, plan.sample_every)
  tests = eval_sets(plan, dataset, cluster.device)
  data, state = place(cluster, plan, dataset)
  cluster.preflight(claim.record, state)
  if period_auto.measured(config):  # k (and tau) measured on epoch 1's batches, or stored.
    options, auto = period_auto.choose(cluster, config, state, data, workdir)
  algo = algorithms.get(options.name, algorithms.base.Context(cluster, options, tl, plan))
  ckpt = checkpoints.Checkpointer(workdir, cluster.rank, cluster.processes, cluster.barrier, c.keep)
  guard = checkpoints.PreemptionGuard(c.preempt_deadline_s)
  run = resume_lib.Run(claim.record, plan, cluster, algo, tl, ckpt, None, guard)
  resumed = resume_lib.resume(run)
  state, pos, records = resumed or (state, resume_lib.Position(), [])
  restarted = pos if resumed is not None else None  # Stopwatches leave compilation out.
  restart_epoch = pos.epoch if resumed is not None else None  # Timed apart, as epoch 1 is.

  def measured(epoch: int) -> bool:
    return epoch >= measured_from and epoch != restart_epoch

  out = writers.Recorder(
    workdir, claim.record, plan, options.period, cluster, dataset, records, auto
  )
  run = run._replace(out=out)
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
    resume_lib.save_checkpoint(run, state, pos)
    watch.reset()
    last['save'] = time.perf_counter()
    if preempt:
      raise checkpoints.Preempted(f'preempted at step {pos.step}: checkpoint written')

  if cluster.is_chief and pos.epoch <= epochs:  # The first step compiles (seconds to a minute).
    print('compiling the step ...', flush=True)
  try:
    with guard:
      for epoch in range(pos.epoch, epochs + 1):
        tl.epoch = pos.epoch = epoch
        first = algo.worker_steps((epoch - 1) * spe)
        data = epoch_data(cluster, plan, data, epoch, first)
        watch = resume_lib.Stopwatch(restarted)
        try:
          with jax.transfer_guard('disallow'):
            for t in range(pos.step, epoch * spe):
              if t == algo.round_end:
                tl.begin_round(t, algo.begin_round(t))
              state, loss = algo.step(state, data, t)
              tl.end_step(t)
              pos.losses.append(loss)
              pos.step = t + 1
              save, preempt = resume_lib.checkpoint_due(run, t + 1, t + 1 == algo.round_end, last)
              if save and t + 1 < epoch * spe:
                checkpoint(watch, preempt)
            with tl.drain():
              state = jax.block_until_ready(algo.drain(state))
        except background.NonFinite as e:
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
        # The ranks meet here.
        save, preempt = resume_lib.checkpoint_due(run, pos.step, True, last, force=True)
        if save or (c.every_epochs and (epoch % c.every_epochs == 0 or epoch == epochs)):
          checkpoint(
            resume_lib.Stopwatch(restarted), preempt
          )  # A fresh watch: evaluation is not training.

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

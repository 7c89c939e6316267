"""Training: the pure per-worker step functions and `train_and_evaluate`, the one loop.

Model state `x` (ALGORITHMS.md) is `params` plus BatchNorm `batch_stats`. The optimizer is SGD
with momentum `mu` and weight decay `lambda` in the PyTorch form the paper used:
`d = g + lambda * p; m <- mu * m + d; p <- p - lr_t * m`. The momentum buffer `m` is local to
each worker by default (`algorithm.average_momentum=False`); BatchNorm statistics are averaged
with the parameters by default (`algorithm.average_batch_stats=True`). The evaluated and the
returned model is always the weighted average of the whole `x` (parameters and statistics).
"""

import json
import os
import time
from typing import Any
from typing import NamedTuple

from absl import logging
import flax
import jax
import jax.numpy as jnp
import numpy as np

from cocod_jax import comm as comm_lib
from cocod_jax import correction
from cocod_jax import input_pipeline
from cocod_jax import models
from cocod_jax import timeline as timeline_lib

PyTree = Any
EVAL_BATCH = 1000


class TrainState(NamedTuple):
  """One worker's training state (a pytree; never holds threads, writers or communicators)."""

  step: jnp.ndarray  # Local iteration t.
  params: PyTree
  batch_stats: PyTree
  momentum: PyTree
  key: jnp.ndarray  # This worker's augmentation key; folded with `step` each step.


# --------------------------------------------------------------------------- schedules


def batch_sizes(config) -> list[int]:
  """Per-worker batch sizes M_i: proportional to `worker_speeds` under proportional sampling."""
  n = config.num_workers
  speeds = list(config.worker_speeds) or [1.0] * n
  if not config.proportional_sampling:
    return [config.batch_size] * n
  slowest = min(speeds)
  return [max(1, int(round(config.batch_size * s / slowest))) for s in speeds]


def peak_learning_rate(config, sizes) -> float:
  """`lr_1 * sum(M_i) / batch_size` under linear scaling, else `lr_1`: computed only here."""
  lr = config.optimizer.learning_rate
  if config.optimizer.lr_scaling == 'linear':
    lr *= sum(sizes) / config.batch_size
  return lr


def learning_rate_fn(config, sizes, steps_per_epoch):
  """lr_t: linear warm-up from lr_1 to the scaled rate, then decay at each of `decay_epochs`.

  `decay_epochs` are 1-based: 81 means "from the start of the 81st epoch", as in the paper.
  """
  base = config.optimizer.learning_rate
  peak = peak_learning_rate(config, sizes)
  warm = config.optimizer.warmup_epochs * steps_per_epoch
  boundaries = [(e - 1) * steps_per_epoch for e in config.optimizer.decay_epochs]
  factor = config.optimizer.decay_factor

  def lr(t):
    t = jnp.asarray(t, jnp.float32)
    value = peak if warm == 0 else jnp.where(t < warm, base + (peak - base) * t / warm, peak)
    for b in boundaries:
      value = value * jnp.where(t >= b, factor, 1.0)
    return value

  return lr


def period_at(config, step, steps_per_epoch) -> int:
  """Communication period of a round starting at `step`: 1 during the warm-up epochs, then k."""
  if step < config.algorithm.warmup_period_epochs * steps_per_epoch:
    return 1
  return config.algorithm.period


# --------------------------------------------------------------------------- pure step functions


def preprocess(x, normalize):
  if normalize == 'cifar':
    x = x.astype(jnp.float32) / 255.0
    return (x - jnp.array(input_pipeline.CIFAR_MEAN)) / jnp.array(input_pipeline.CIFAR_STD)
  return x.astype(jnp.float32)


def augment(key, images):
  """Random crop (pad 4, reflect-free zero padding as in the usual CIFAR recipe) and flip."""
  n, h, w, _ = images.shape
  kx, ky, kf = jax.random.split(key, 3)
  padded = jnp.pad(images, ((0, 0), (4, 4), (4, 4), (0, 0)))
  dx = jax.random.randint(kx, (n,), 0, 9)
  dy = jax.random.randint(ky, (n,), 0, 9)
  crop = jax.vmap(lambda im, a, b: jax.lax.dynamic_slice(im, (a, b, 0), (h, w, im.shape[-1])))
  out = crop(padded, dy, dx)
  flip = jax.random.bernoulli(kf, 0.5, (n,))
  return jnp.where(flip[:, None, None, None], out[:, :, ::-1], out)


class StepFns(NamedTuple):
  """Pure per-worker functions (unbatched: the runtime maps them over its workers)."""

  compute_grads: Any
  apply_update: Any
  local_step: Any
  skip_step: Any
  eval_step: Any


def make_step_fns(model, config, sizes, steps_per_epoch, normalize, augment_on) -> StepFns:
  """Builds the step functions for `model` and the optimizer in `config`."""
  lr_fn = learning_rate_fn(config, sizes, steps_per_epoch)
  mu = config.optimizer.momentum
  wd = config.optimizer.weight_decay

  def compute_grads(state, x_data, y_data, idx, mask):
    """g_i(x_t): gradient of the mean loss over this worker's real (mask=1) examples."""
    x = preprocess(x_data[idx], normalize)
    if augment_on:
      x = augment(jax.random.fold_in(state.key, state.step), x)
    y = y_data[idx]

    def loss_fn(params):
      logits, new_vars = model.apply(
        {'params': params, 'batch_stats': state.batch_stats},
        x,
        train=True,
        mask=mask,
        mutable=['batch_stats'],
      )
      ce = -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1)[:, 0]
      return jnp.sum(ce * mask) / jnp.sum(mask), new_vars.get('batch_stats', {})

    (loss, new_bs), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    return grads, new_bs, loss

  def apply_update(state, grads, batch_stats):
    """x_{t+1} = OPT(x_t, g): SGD with momentum and weight decay at lr_t; t advances."""
    lr = lr_fn(state.step)
    d = jax.tree.map(lambda g, p: g + wd * p, grads, state.params)
    m = jax.tree.map(lambda m_, d_: mu * m_ + d_, state.momentum, d)
    params = jax.tree.map(lambda p, m_: p - lr * m_, state.params, m)
    return state._replace(step=state.step + 1, params=params, batch_stats=batch_stats, momentum=m)

  def local_step(state, x_data, y_data, idx, mask):
    grads, new_bs, loss = compute_grads(state, x_data, y_data, idx, mask)
    return apply_update(state, grads, new_bs), loss

  def skip_step(state):
    """Pipe-SGD's step 0: the pipeline fills, x_1 = x_0."""
    return state._replace(step=state.step + 1)

  def eval_step(variables, x, y, mask):
    logits = model.apply(variables, preprocess(x, normalize), train=False)
    ce = -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1)[:, 0]
    correct = (jnp.argmax(logits, -1) == y).astype(jnp.float32)
    return jnp.sum(ce * mask), jnp.sum(correct * mask)

  return StepFns(compute_grads, apply_update, local_step, skip_step, eval_step)


def synced_part(state, config):
  """The part of `x` that the algorithms average: params, plus statistics/momentum if configured."""
  part = {'params': state.params}
  if config.algorithm.average_batch_stats:
    part['batch_stats'] = state.batch_stats
  if config.algorithm.average_momentum:
    part['momentum'] = state.momentum
  return part


def gradient_payload(grads, batch_stats, config):
  """What S-SGD and Pipe-SGD allreduce each step: the gradient, plus the statistics if averaged."""
  if config.algorithm.average_batch_stats:
    return {'g': grads, 'bs': batch_stats}
  return {'g': grads}


def with_synced(state, part):
  return state._replace(**part)


def create_train_state(model, key, input_shape, worker: int) -> TrainState:
  """The common x_0 (same `key` on every worker) with a per-worker augmentation key."""
  variables = model.init(key, jnp.zeros((1,) + tuple(input_shape), jnp.float32), train=False)
  params = variables['params']
  return TrainState(
    step=jnp.zeros((), jnp.int32),
    params=params,
    batch_stats=variables.get('batch_stats', {}),
    momentum=jax.tree.map(jnp.zeros_like, params),
    key=jax.random.fold_in(jax.random.fold_in(key, 1), worker),
  )


# --------------------------------------------------------------------------- the loop


def _flatten(tree) -> dict[str, np.ndarray]:
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(tree), sep='/')
  return {k: np.asarray(v) for k, v in flat.items()}


def _write_json_atomic(path, obj):
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    json.dump(obj, f, indent=2)
  os.replace(tmp, path)


class _EmulatedRuntime:
  """Emulated cluster: every per-worker function is `pmap`ped over N CPU devices of one process."""

  backend = 'emulated'
  rank = 0
  is_chief = True

  def __init__(self, fns: StepFns, config, weights):
    devices = jax.devices('cpu')[: config.num_workers]
    self.n = config.num_workers
    self.weights = weights
    self.comm = comm_lib.EmulatedCommunicator(devices, weights)
    pm = lambda f: jax.pmap(f, axis_name=comm_lib.AXIS, devices=devices)
    self.compute_grads = pm(fns.compute_grads)
    self.apply_update = pm(fns.apply_update)
    self.local_step = pm(fns.local_step)
    self.skip_step = pm(fns.skip_step)
    tx = correction.decoupled_correction()
    self.snapshot = pm(tx.init)
    self.correct = pm(tx.update)

  def put_data(self, per_worker, length):
    """Every worker's shard, zero-padded to `length`, stacked along the worker axis."""
    return self.comm.shard(comm_lib.stack_padded(per_worker, length))

  def put_mask(self, masks):
    return self.comm.shard([m.astype(np.float32) for m in masks])

  def init_state(self, make):
    return jax.tree.map(lambda *a: self.comm.shard(a), *[make(i) for i in range(self.n)])

  def select(self, batch):
    return batch  # [N, M]: every worker's indices.

  def train_loss(self, losses):
    per_worker = np.asarray(jnp.stack(losses))  # [steps, N]
    return float(np.mean(per_worker @ np.asarray(self.weights)))

  def preflight(self, config, state):
    pass  # One process: one config, one state.

  def barrier(self):
    pass

  def gather(self, obj):
    return [obj]


class _MPIRuntime:
  """One worker per process (`mpirun`/`srun`): the same step functions, `jit`ted for this rank."""

  backend = 'mpi'

  def __init__(self, fns: StepFns, config, weights):
    from cocod_jax import mpi_comm  # pylint: disable=g-import-not-at-top

    self._mpi_comm = mpi_comm
    self.comm = mpi_comm.MPICommunicator(
      weights,
      threaded=config.comm.threaded,
      staging=config.comm.staging,
      timeout_s=config.comm.timeout_s,
    )
    if self.comm.size != config.num_workers:
      raise ValueError(f'num_workers={config.num_workers} but {self.comm.size} MPI ranks')
    self.rank = self.comm.rank
    self.is_chief = self.rank == 0
    self.weights = weights
    self.device = self.comm.compute_device
    # The state is donated to the step that replaces it (no second copy of the model in memory);
    # the communicator snapshots into buffers of its own, so an allreduce in flight is unaffected.
    self.compute_grads = jax.jit(fns.compute_grads)
    self.apply_update = jax.jit(fns.apply_update, donate_argnums=0)
    self.local_step = jax.jit(fns.local_step, donate_argnums=0)
    self.skip_step = jax.jit(fns.skip_step, donate_argnums=0)
    tx = correction.decoupled_correction()
    self.snapshot = jax.jit(tx.init)
    self.correct = jax.jit(tx.update)

  def put_data(self, per_worker, length):
    del length  # One shard per process: no padding needed.
    return jax.device_put(per_worker[self.rank], self.device)

  def put_mask(self, masks):
    return jax.device_put(masks[self.rank].astype(np.float32), self.device)

  def init_state(self, make):
    return jax.device_put(make(self.rank), self.device)

  def select(self, batch):
    return batch[self.rank]

  def train_loss(self, losses):
    own = float(np.mean(np.asarray(jnp.stack(losses))))
    return self.comm.sum_scalar(own * self.weights[self.rank])

  def preflight(self, config, state):
    self.comm.preflight(self._mpi_comm.config_hash(config), state)

  def barrier(self):
    self.comm.barrier()

  def gather(self, obj):
    return self.comm.gather(obj)


def _combine_timing(per_rank):
  """The ranks' timing figures: means, and the hidden fraction of all their communication."""
  out = {'ranks': per_rank}
  for k in ('Tp_s', 'Tc_s', 'step_time_s', 'round_time_s', 'exposed_comm_s', 'drain_s', 'comm_s'):
    vals = [p[k] for p in per_rank if p[k] is not None]
    out[k] = float(np.mean(vals)) if vals else None
  out['r'] = out['Tc_s'] / out['Tp_s'] if out['Tp_s'] else None
  comm_s = sum(p['comm_s'] for p in per_rank)
  exposed = sum(p['exposed_comm_s'] for p in per_rank)
  out['hidden_fraction'] = max(0.0, 1.0 - exposed / comm_s) if comm_s > 0 else None
  for k in ('from_epoch', 'steps'):
    out[k] = per_rank[0][k]
  return out


def train_and_evaluate(config, workdir: str, dataset: input_pipeline.Dataset | None = None):
  """Trains with `config.algorithm.name` on `config.backend` and writes the results.

  Args:
    config: a validated ConfigDict (see `config_validation.validate`).
    workdir: where results.json, final_params.npz and TensorBoard summaries go (written by rank 0
      under MPI), and timeline_rank<r>.json (every rank, MPI only).
    dataset: the loaded dataset (loaded from `config.dataset` when None).

  Returns:
    the results dictionary also written to `workdir/results.json`.
  """
  from cocod_jax import config_validation  # pylint: disable=g-import-not-at-top

  if dataset is None:
    dataset = config_validation.load_checked_dataset(config)
  n = config.num_workers
  sizes = batch_sizes(config)
  weights = correction.worker_weights(sizes)
  shards = input_pipeline.shard_indices(
    len(dataset.x_train), sizes, config.dataset.shuffle, config.seed
  )
  steps_per_epoch = min(len(s) // m for s, m in zip(shards, sizes))
  total_steps = steps_per_epoch * config.num_epochs
  augment_on = bool(config.dataset.augment) and dataset.augment_ok
  model = models.get_model(config.model.name, dataset.num_classes)
  fns = make_step_fns(model, config, sizes, steps_per_epoch, dataset.normalize, augment_on)

  runtime = _MPIRuntime if config.backend == 'mpi' else _EmulatedRuntime
  rt = runtime(fns, config, weights)
  comm = rt.comm
  tl = timeline_lib.Timeline(enabled=rt.backend == 'mpi', rank=rt.rank)
  m_max = max(sizes)
  s_max = max(len(s) for s in shards)
  x_data = rt.put_data([dataset.x_train[s] for s in shards], s_max)
  y_data = rt.put_data([dataset.y_train[s] for s in shards], s_max)
  mask = rt.put_mask([np.arange(m_max) < m for m in sizes])
  key = jax.random.PRNGKey(config.seed)
  state = rt.init_state(lambda i: create_train_state(model, key, dataset.x_train.shape[1:], i))
  rt.preflight(config, state)
  eval_fn = jax.jit(fns.eval_step)
  rng = np.random.RandomState(config.seed + 1)

  os.makedirs(workdir, exist_ok=True)
  writer = None
  if rt.is_chief:
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top

    writer = SummaryWriter(workdir)

  def epoch_batches():
    """[steps, N, M_max] indices into each worker's shard for one epoch (every rank draws all)."""
    out = np.zeros((steps_per_epoch, n, m_max), np.int32)
    for i, (s, m) in enumerate(zip(shards, sizes)):
      order = rng.permutation(len(s)) if config.dataset.shuffle else np.arange(len(s))
      out[:, i, :m] = order[: steps_per_epoch * m].reshape(steps_per_epoch, m)
    return out

  def evaluate(st):
    """Test loss and accuracy of the weighted average xhat (not counted as training time)."""
    whole = {'params': st.params, 'batch_stats': st.batch_stats}
    xhat = comm.first(comm.weighted_mean(whole, 'the evaluation average'))
    if not rt.is_chief:
      return None, None
    variables = dict(xhat) if jax.tree.leaves(xhat['batch_stats']) else {'params': xhat['params']}
    tot_loss, tot_correct, count = 0.0, 0.0, len(dataset.x_test)
    for b in range(0, count, EVAL_BATCH):
      xb = dataset.x_test[b : b + EVAL_BATCH]
      yb = dataset.y_test[b : b + EVAL_BATCH]
      real = len(xb)
      pad = EVAL_BATCH - real if count > EVAL_BATCH else 0
      xb = np.concatenate([xb, np.zeros((pad,) + xb.shape[1:], xb.dtype)])
      yb = np.concatenate([yb, np.zeros((pad,), yb.dtype)])
      batch_loss, batch_correct = eval_fn(
        variables, xb, yb, (np.arange(len(xb)) < real).astype(np.float32)
      )
      tot_loss += float(batch_loss)
      tot_correct += float(batch_correct)
    return tot_loss / count, tot_correct / count

  epoch = 0

  def finish(handle, drain=False):
    """Waits for a collective: a `wait` span (communication exposed to training).

    `drain`: the wait at the end of an epoch for a collective still in flight (Pipe-SGD's last
    gradient average), which steps of the same epoch would otherwise have hidden.
    """
    with tl.span('wait', 'wait', epoch=epoch, label=handle.label, drain=drain):
      value = tl.ready(comm.wait(handle))
    if handle.span is not None:
      tl.add('allreduce', 'allreduce', *handle.span, thread=timeline_lib.COMM, epoch=epoch)
    return value

  name = config.algorithm.name
  pending = None  # Pipe-SGD: the gradient average in flight. CoCoD: (snapshot average, snapshot).
  round_end, round_begin, round_len, round_start, round_epoch = 0, 0, 0, 0.0, 0
  records = []
  train_time = 0.0
  measured_from = 2 if config.num_epochs >= 2 else 1  # Epoch 1 compiles every function.
  measured_time = 0.0
  if rt.is_chief:
    logging.info('%s: %d workers, batch sizes %s, %d steps/epoch', name, n, sizes, steps_per_epoch)
  try:
    for epoch in range(1, config.num_epochs + 1):
      batches = epoch_batches()
      losses = []
      t0 = time.perf_counter()
      for s in range(steps_per_epoch):
        t = (epoch - 1) * steps_per_epoch + s
        idx = rt.select(batches[s])
        if name in ('local_sgd', 'cocod_sgd') and t == round_end:
          round_len = period_at(config, t, steps_per_epoch)
          round_end = min(t + round_len, total_steps)
          round_begin, round_start, round_epoch = t, time.perf_counter(), epoch
          round_label = f'the round of steps {round_begin}-{round_end - 1}'
        if name == 'ssgd':
          with tl.span('grads', 'step', epoch=epoch):
            grads, new_bs, loss = tl.ready(rt.compute_grads(state, x_data, y_data, idx, mask))
          payload = gradient_payload(grads, new_bs, config)
          payload = finish(comm.start(payload, f'the gradients of step {t}'))
          with tl.span('update', 'step', epoch=epoch):
            state = tl.ready(rt.apply_update(state, payload['g'], payload.get('bs', new_bs)))
        elif name == 'pipe_sgd':
          with tl.span('grads', 'step', epoch=epoch):
            grads, new_bs, loss = tl.ready(rt.compute_grads(state, x_data, y_data, idx, mask))
          averaged = None if pending is None else finish(pending)  # gbar_{t-1}
          with tl.span('update', 'step', epoch=epoch):
            if averaged is None:
              state = rt.skip_step(state)  # Step 0 only fills the pipeline.
            else:
              state = rt.apply_update(state, averaged['g'], averaged.get('bs', new_bs))
            # g_t's allreduce runs while x_{t+1} is applied and g_{t+1} computed.
            payload = gradient_payload(grads, new_bs, config)
            pending = comm.start(payload, f'the gradients of step {t}')
            state = tl.ready(state)
        elif name == 'local_sgd':
          with tl.span('step', 'step', epoch=epoch):
            state, loss = tl.ready(rt.local_step(state, x_data, y_data, idx, mask))
          if t + 1 == round_end:
            part = synced_part(state, config)
            state = with_synced(state, finish(comm.start(part, round_label)))
        elif name == 'cocod_sgd':
          if pending is None:  # Step I: snapshot, and its allreduce in the background.
            with tl.span('snapshot', 'merge', epoch=epoch):
              snap = tl.ready(rt.snapshot(synced_part(state, config)))
            pending = (comm.start(snap.snapshot, round_label), snap)
          with tl.span('step', 'step', epoch=epoch):  # Step II: the local steps.
            state, loss = tl.ready(rt.local_step(state, x_data, y_data, idx, mask))
          if t + 1 == round_end:
            handle, snap = pending
            averaged = finish(handle)
            with tl.span('correct', 'merge', epoch=epoch):
              corrected, _ = rt.correct(synced_part(state, config), averaged, snap)
              state = tl.ready(with_synced(state, corrected))
            pending = None
        else:
          raise ValueError(f'algorithm.name={name!r} is unknown')
        if name in ('local_sgd', 'cocod_sgd') and t + 1 == round_end:
          full = round_epoch == epoch and t + 1 - round_begin == round_len
          tl.add('round', 'round', round_start, time.perf_counter(), epoch=epoch, full=full)
        losses.append(loss)
      # A collective still in flight is waited for now, as training time, so that the
      # evaluation average below never runs beside it; its result is used as usual.
      if name == 'pipe_sgd' and pending is not None:
        pending = comm_lib.Done(finish(pending, drain=True), pending.label)
      elif name == 'cocod_sgd' and pending is not None:
        pending = (comm_lib.Done(finish(pending[0], drain=True), pending[0].label), pending[1])
      jax.block_until_ready(state)
      epoch_time = time.perf_counter() - t0
      train_time += epoch_time
      if epoch >= measured_from:
        measured_time += epoch_time
      train_loss = rt.train_loss(losses)
      test_loss, test_acc = evaluate(state)
      rt.barrier()  # The evaluation is not training time: all ranks resume together.
      if not rt.is_chief:
        continue
      rec = {
        'epoch': epoch,
        'train_loss': train_loss,
        'test_loss': test_loss,
        'test_accuracy': test_acc,
        'train_time_s': train_time,
      }
      records.append(rec)
      for k in ('train_loss', 'test_loss', 'test_accuracy', 'train_time_s'):
        writer.add_scalar(k, rec[k], epoch)
      print(
        f'epoch {epoch:3d}/{config.num_epochs}  train_loss {train_loss:.4f}  '
        f'test_loss {test_loss:.4f}  test_acc {test_acc:.4f}  train_time {train_time:.1f}s',
        flush=True,
      )

    # Pipe-SGD: the average still in flight after the last step is dropped (but waited for).
    t0 = time.perf_counter()
    if pending is not None:
      comm.wait(pending[0] if name == 'cocod_sgd' else pending)
      pending = None
    # One last blocking average: every worker holds xhat, the model saved and reported.
    whole = {'params': state.params, 'batch_stats': state.batch_stats}
    state = with_synced(state, comm.weighted_mean(whole, 'the final average'))
    jax.block_until_ready(state)
    train_time += time.perf_counter() - t0
    test_loss, test_acc = evaluate(state)
    timing = None
    if tl.enabled:
      tl.write_chrome_trace(os.path.join(workdir, f'timeline_rank{rt.rank}.json'))
      steps = steps_per_epoch * (config.num_epochs - measured_from + 1)
      timing = rt.gather(tl.summary(measured_from, steps, measured_time))
  finally:
    if writer is not None:
      writer.close()
    comm.close()

  if not rt.is_chief:
    return None
  final = {
    'epoch': config.num_epochs,
    'train_loss': records[-1]['train_loss'],
    'test_loss': test_loss,
    'test_accuracy': test_acc,
    'train_time_s': train_time,
  }
  print(
    f'final (averaged model)  test_loss {test_loss:.4f}  test_acc {test_acc:.4f}  '
    f'train_time {train_time:.1f}s',
    flush=True,
  )
  results = {
    'config': config.to_dict(),
    'backend': rt.backend,
    'batch_sizes': sizes,
    'weights': weights,
    'steps_per_epoch': steps_per_epoch,
    'epochs': records,
    'final': final,
  }
  if timing is not None:
    results['timing'] = _combine_timing(timing)
    tm = results['timing']
    hidden = tm['hidden_fraction']
    print(
      f'timing (epochs {measured_from}-{config.num_epochs}, mean of {n} ranks): '
      f'Tp {tm["Tp_s"] * 1e3:.1f} ms, Tc {tm["Tc_s"] * 1e3:.1f} ms (r = {tm["r"]:.2f}), '
      f'{tm["step_time_s"] * 1e3:.1f} ms per step, communication hidden '
      + ('n/a' if hidden is None else f'{hidden:.0%}'),
      flush=True,
    )
  flat = _flatten(comm.first({'params': state.params, 'batch_stats': state.batch_stats}))
  tmp = os.path.join(workdir, 'final_params.tmp.npz')
  np.savez(tmp, **flat)
  os.replace(tmp, os.path.join(workdir, 'final_params.npz'))
  _write_json_atomic(os.path.join(workdir, 'results.json'), results)
  return results

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


class _Runtime:
  """Emulated cluster: every per-worker function is `pmap`ped over the workers' CPU devices."""

  def __init__(self, fns: StepFns, devices, weights):
    self.comm = comm_lib.EmulatedCommunicator(devices, weights)
    pm = lambda f, **kw: jax.pmap(f, axis_name=comm_lib.AXIS, devices=devices, **kw)
    self.compute_grads = pm(fns.compute_grads)
    self.apply_update = pm(fns.apply_update)
    self.local_step = pm(fns.local_step)
    self.skip_step = pm(fns.skip_step)
    tx = correction.decoupled_correction()
    self.snapshot = pm(tx.init)
    self.correct = pm(tx.update)


def train_and_evaluate(config, workdir: str, dataset: input_pipeline.Dataset | None = None):
  """Trains with `config.algorithm.name` on the emulated cluster and writes the results.

  Args:
    config: a validated ConfigDict (see `config_validation.validate`).
    workdir: where results.json, final_params.npz and TensorBoard summaries go.
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

  devices = jax.devices('cpu')[:n]
  rt = _Runtime(fns, devices, weights)
  comm = rt.comm
  m_max = max(sizes)
  s_max = max(len(s) for s in shards)
  x_data = comm.shard(comm_lib.stack_padded([dataset.x_train[s] for s in shards], s_max))
  y_data = comm.shard(comm_lib.stack_padded([dataset.y_train[s] for s in shards], s_max))
  mask = comm.shard([np.arange(m_max) < m for m in sizes])
  mask = jax.tree.map(lambda a: a.astype(jnp.float32), mask)
  key = jax.random.PRNGKey(config.seed)
  state = jax.tree.map(
    lambda *a: comm.shard(a),
    *[create_train_state(model, key, dataset.x_train.shape[1:], i) for i in range(n)],
  )
  eval_fn = jax.jit(fns.eval_step)
  rng = np.random.RandomState(config.seed + 1)

  os.makedirs(workdir, exist_ok=True)
  from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top

  writer = SummaryWriter(workdir)

  def epoch_batches():
    """[steps, N, M_max] indices into each worker's shard for one epoch."""
    out = np.zeros((steps_per_epoch, n, m_max), np.int32)
    for i, (s, m) in enumerate(zip(shards, sizes)):
      order = rng.permutation(len(s)) if config.dataset.shuffle else np.arange(len(s))
      out[:, i, :m] = order[: steps_per_epoch * m].reshape(steps_per_epoch, m)
    return out

  def evaluate(st):
    """Test loss and accuracy of the weighted average xhat (not counted as training time)."""
    xhat = comm.first(comm.weighted_mean({'params': st.params, 'batch_stats': st.batch_stats}))
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

  name = config.algorithm.name
  pending = None  # Pipe-SGD: the average in flight. CoCoD: (averaged snapshot, correction state).
  round_end = 0
  records = []
  train_time = 0.0
  logging.info('%s: %d workers, batch sizes %s, %d steps/epoch', name, n, sizes, steps_per_epoch)
  try:
    for epoch in range(1, config.num_epochs + 1):
      batches = epoch_batches()
      losses = []
      t0 = time.perf_counter()
      for s in range(steps_per_epoch):
        t = (epoch - 1) * steps_per_epoch + s
        idx = batches[s]
        if name == 'ssgd':
          grads, new_bs, loss = rt.compute_grads(state, x_data, y_data, idx, mask)
          payload = comm.weighted_mean(gradient_payload(grads, new_bs, config))
          state = rt.apply_update(state, payload['g'], payload.get('bs', new_bs))
        elif name == 'pipe_sgd':
          grads, new_bs, loss = rt.compute_grads(state, x_data, y_data, idx, mask)
          if pending is None:
            state = rt.skip_step(state)
          else:
            state = rt.apply_update(state, pending['g'], pending.get('bs', new_bs))
          pending = comm.weighted_mean(gradient_payload(grads, new_bs, config))
        elif name == 'local_sgd':
          if t == round_end:
            round_end = t + period_at(config, t, steps_per_epoch)
          state, loss = rt.local_step(state, x_data, y_data, idx, mask)
          if t + 1 == round_end or t + 1 == total_steps:
            state = with_synced(state, comm.weighted_mean(synced_part(state, config)))
        elif name == 'cocod_sgd':
          if t == round_end:
            round_end = t + period_at(config, t, steps_per_epoch)
            snap = rt.snapshot(synced_part(state, config))  # Step I: snapshot + allreduce.
            pending = (comm.weighted_mean(snap.snapshot), snap)
          state, loss = rt.local_step(state, x_data, y_data, idx, mask)  # Step II.
          if t + 1 == round_end or t + 1 == total_steps:
            averaged, snap = pending
            corrected, _ = rt.correct(synced_part(state, config), averaged, snap)
            state = with_synced(state, corrected)
            pending = None
        else:
          raise ValueError(f'algorithm.name={name!r} is unknown')
        losses.append(loss)
      jax.block_until_ready(state)
      train_time += time.perf_counter() - t0
      per_worker = np.asarray(jnp.stack(losses))  # [steps, N]
      train_loss = float(np.mean(per_worker @ np.asarray(weights)))
      test_loss, test_acc = evaluate(state)
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

    # One last blocking average: every worker holds xhat, the model saved and reported.
    t0 = time.perf_counter()
    whole = {'params': state.params, 'batch_stats': state.batch_stats}
    state = with_synced(state, comm.weighted_mean(whole))
    jax.block_until_ready(state)
    train_time += time.perf_counter() - t0
    test_loss, test_acc = evaluate(state)
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
  finally:
    writer.close()
    comm.close()

  results = {
    'config': config.to_dict(),
    'batch_sizes': sizes,
    'weights': weights,
    'steps_per_epoch': steps_per_epoch,
    'epochs': records,
    'final': final,
  }
  flat = _flatten(comm.first({'params': state.params, 'batch_stats': state.batch_stats}))
  tmp = os.path.join(workdir, 'final_params.tmp.npz')
  np.savez(tmp, **flat)
  os.replace(tmp, os.path.join(workdir, 'final_params.npz'))
  _write_json_atomic(os.path.join(workdir, 'results.json'), results)
  return results

"""The pure per-worker step functions and the train state (one worker, unbatched).

Model state `x` (docs/algorithms.md) is `params` plus BatchNorm `batch_stats`. The optimizer
(`optimizer`, optax) is SGD with momentum `mu` and weight decay `lambda` in the PyTorch form the
paper used: `d = g + lambda * p; m <- mu * m + d; p <- p - lr_t * m`. The train state keeps its
momentum trace `m` as a tree shaped like the parameters (what checkpoints hold and what
`algorithm.average_momentum=True` averages); it is local to each worker by default. BatchNorm
statistics are averaged with the parameters by default (`algorithm.average_batch_stats=True`).

`optimizer.name='adam'` is PyTorch's Adam (betas 0.9, 0.999, eps 1e-8, weight decay added to the
gradient), only so that MNIST-1D's published recipe can be rerun as its authors ran it (the
published check); the buffer `momentum` then holds Adam's two moments {'mu', 'nu'}, and the bias
correction counts the worker's own steps.

Nothing here knows how many workers there are or where they run: `cluster/stacked.py` maps
these functions over a leading worker axis with `jax.vmap`, for all N workers on the one-host
cluster and for the W workers of each MPI rank. A worker's batch is chosen on the device from the
epoch's index table and the worker's own step counter, so the loop uploads indices once per
epoch, not every step.
"""

from typing import Any
from typing import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from cocod_jax.data import cifar

PyTree = Any
OPTIMIZERS = ('sgd', 'adam')  # optimizer.name; adam only for MNIST-1D's published recipe.
ADAM_BETAS = (0.9, 0.999)  # PyTorch's defaults, as MNIST-1D's published recipe used them.
ADAM_EPS = 1e-8


class TrainState(NamedTuple):
  """One worker's training state (a pytree; never holds threads, writers or communicators)."""

  step: jnp.ndarray  # Local iteration t of this worker.
  params: PyTree
  batch_stats: PyTree
  momentum: PyTree
  key: jnp.ndarray  # This worker's augmentation key; folded with `step` each step.


class WorkerData(NamedTuple):
  """One worker's shard on its device, and the epoch's batches as indices into it.

  Attributes:
    x, y: the shard (padded to a common length on the one-host cluster).
    mask: [M_max] 1.0 for the worker's M_i real examples of a batch, 0.0 for padding.
    batches: [rows, M_max] int32 indices into the shard, one row per local step, replaced once
      per epoch (a fresh shuffle); padded to the longest table on the one-host cluster.
    rows: the worker's own number of rows (its local steps in an epoch).
    first_step: the worker's step counter at the start of the epoch: local step `t` of the
      worker takes row `(t - first_step) mod rows`.
  """

  x: jnp.ndarray
  y: jnp.ndarray
  mask: jnp.ndarray
  batches: jnp.ndarray
  rows: jnp.ndarray
  first_step: jnp.ndarray


class StepFns(NamedTuple):
  """Pure per-worker functions (unbatched: the cluster maps them over its workers)."""

  compute_grads: Callable  # (state, data) -> (grads, new_batch_stats, loss)
  apply_update: Callable  # (state, grads, batch_stats) -> state (t advances)
  local_step: Callable  # (state, data) -> (state, loss)
  skip_step: Callable  # state -> state (t advances, x unchanged)
  eval_step: Callable  # (variables, x, y, mask) -> (summed loss, number correct)
  # (state, data, lr_step, active) -> (state, loss): a local step at learning rate lr_{lr_step},
  # or (active False) no step at all, for workers that take different numbers of local steps.
  masked_step: Callable


def preprocess(x, normalize):
  if normalize == 'cifar':
    x = x.astype(jnp.float32) / 255.0
    return (x - jnp.array(cifar.CIFAR_MEAN)) / jnp.array(cifar.CIFAR_STD)
  return x.astype(jnp.float32)


def augment(key, images):
  """Random crop (zero padding of 4, as in the usual CIFAR recipe) and horizontal flip."""
  n, h, w, _ = images.shape
  kx, ky, kf = jax.random.split(key, 3)
  padded = jnp.pad(images, ((0, 0), (4, 4), (4, 4), (0, 0)))
  dx = jax.random.randint(kx, (n,), 0, 9)
  dy = jax.random.randint(ky, (n,), 0, 9)
  crop = jax.vmap(lambda im, a, b: jax.lax.dynamic_slice(im, (a, b, 0), (h, w, im.shape[-1])))
  out = crop(padded, dy, dx)
  flip = jax.random.bernoulli(kf, 0.5, (n,))
  return jnp.where(flip[:, None, None, None], out[:, :, ::-1], out)


def cross_entropy(logits, y):
  return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1)[:, 0]


def optimizer(o, learning_rate) -> optax.GradientTransformation:
  """The local optimizer of every worker at `learning_rate` (a number or a traced scalar).

  SGD with momentum and weight decay as the paper ran it: the decay is added to the gradient
  before the momentum (`optax.add_decayed_weights`, then `optax.sgd`), which computes
  `d = g + lambda * p; m <- d + mu * m; p <- p + (-lr) * m`, the same numbers as the PyTorch
  form. The learning rate is an argument, not an optax schedule: a step's rate depends on the
  worker's own step counter (and AsynLocal-SGD's on a step it names), not on the optimizer's
  count. The train state's `momentum` holds the optimizer's buffers (`buffers_in`/`buffers_out`):
  SGD's trace, a tree shaped like the parameters (what `algorithm.average_momentum` averages).

  `optimizer.name='adam'` is PyTorch's Adam (betas 0.9, 0.999, eps 1e-8, the weight decay added
  to the gradient: `optax.add_decayed_weights` then `optax.adam`, whose bias correction is
  PyTorch's), only so that MNIST-1D's published recipe can be rerun as its authors ran it (the
  published check); its `momentum` is then `{'mu': ..., 'nu': ...}`.

  Args:
    o: the config's `optimizer` part (`name`, `momentum`, `weight_decay`).
    learning_rate: lr_t of this step.

  Returns:
    The optax transformation.
  """
  if o.name == 'adam':
    b1, b2 = ADAM_BETAS
    inner = optax.adam(learning_rate, b1=b1, b2=b2, eps=ADAM_EPS)
  else:
    inner = optax.sgd(learning_rate, momentum=o.momentum)
  return optax.chain(optax.add_decayed_weights(o.weight_decay), inner)


def buffers_in(name: str, momentum, step) -> dict:
  """The optax state fields that the train state's `momentum` (and step counter) fill, for the
  optimizer `name` (`optimizer.name`)."""
  if name == 'adam':
    return {'mu': momentum['mu'], 'nu': momentum['nu'], 'count': step}
  return {'trace': momentum}


def buffers_out(name: str, opt_state):
  """The train state's `momentum` after an update: the inverse of `buffers_in`."""
  get = lambda name: optax.tree_utils.tree_get(opt_state, name)
  if name == 'adam':
    return {'mu': get('mu'), 'nu': get('nu')}
  return get('trace')


def make_step_fns(model, o, lr_fn, normalize, augment_on) -> StepFns:
  """Builds the step functions for `model` and the optimizer of the config's `optimizer` part `o`
  at the rates of `lr_fn` (the plan's schedule)."""

  def compute_grads(state, data):
    """g_i(x_t): gradient of the mean loss over this worker's real (mask=1) examples."""
    row = jnp.mod(state.step - data.first_step, data.rows)
    idx = jax.lax.dynamic_index_in_dim(data.batches, row, keepdims=False)
    x = preprocess(data.x[idx], normalize)
    if augment_on:
      x = augment(jax.random.fold_in(state.key, state.step), x)
    y = data.y[idx]

    def loss_fn(params):
      logits, new_vars = model.apply(
        {'params': params, 'batch_stats': state.batch_stats},
        x,
        train=True,
        mask=data.mask,
        mutable=['batch_stats'],
      )
      loss = jnp.sum(cross_entropy(logits, y) * data.mask) / jnp.sum(data.mask)
      return loss, new_vars.get('batch_stats', {})

    (loss, new_bs), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    return grads, new_bs, loss

  def update(state, grads, batch_stats, lr):
    tx = optimizer(o, lr)
    # The optimizer's state around the buffers the train state keeps (init's zeros are dead code
    # under jit); Adam's bias correction counts the worker's own steps.
    opt_state = optax.tree_utils.tree_set(
      tx.init(state.params), **buffers_in(o.name, state.momentum, state.step)
    )
    updates, opt_state = tx.update(grads, opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    m = buffers_out(o.name, opt_state)
    return state._replace(step=state.step + 1, params=params, batch_stats=batch_stats, momentum=m)

  def apply_update(state, grads, batch_stats):
    """x_{t+1} = OPT(x_t, g): SGD with momentum and weight decay at lr_t; t advances."""
    return update(state, grads, batch_stats, lr_fn(state.step))

  def local_step(state, data):
    grads, new_bs, loss = compute_grads(state, data)
    return apply_update(state, grads, new_bs), loss

  def masked_step(state, data, lr_step, active):
    grads, new_bs, loss = compute_grads(state, data)
    new = update(state, grads, new_bs, lr_fn(lr_step))
    return jax.tree.map(lambda a, b: jnp.where(active, a, b), new, state), loss

  def skip_step(state):
    """Pipe-SGD's step 0: the pipeline fills, x_1 = x_0."""
    return state._replace(step=state.step + 1)

  def eval_step(variables, x, y, mask):
    logits = model.apply(variables, preprocess(x, normalize), train=False)
    correct = (jnp.argmax(logits, -1) == y).astype(jnp.float32)
    return jnp.sum(cross_entropy(logits, y) * mask), jnp.sum(correct * mask)

  return StepFns(compute_grads, apply_update, local_step, skip_step, eval_step, masked_step)


def synced_part(state, algorithm):
  """The part of `x` that the algorithms average: params, plus statistics/momentum if the config's
  `algorithm` part says so."""
  part = {'params': state.params}
  if algorithm.average_batch_stats:
    part['batch_stats'] = state.batch_stats
  if algorithm.average_momentum:
    part['momentum'] = state.momentum
  return part


def gradient_payload(grads, batch_stats, algorithm):
  """What S-SGD and Pipe-SGD allreduce each step: the gradient, plus the statistics if averaged
  (the config's `algorithm` part)."""
  if algorithm.average_batch_stats:
    return {'g': grads, 'bs': batch_stats}
  return {'g': grads}


def model_part(state):
  """The whole model `x`: what is evaluated, averaged at the end and saved."""
  return {'params': state.params, 'batch_stats': state.batch_stats}


def with_part(state, part):
  return state._replace(**part)


def create_train_state(model, key, input_shape, worker: int, optimizer: str = 'sgd') -> TrainState:
  """The common x_0 (same `key` on every worker) with a per-worker augmentation key.

  Args:
    model: the Flax model.
    key: the PRNG key of x_0 (the run's seed: the same on every worker).
    input_shape: one example's shape.
    worker: the worker's index (its augmentation key).
    optimizer: `optimizer.name`: 'sgd' (one momentum buffer) or 'adam' (its two moments).

  Returns:
    the worker's TrainState at step 0.
  """
  variables = model.init(key, jnp.zeros((1,) + tuple(input_shape), jnp.float32), train=False)
  params = variables['params']
  zeros = jax.tree.map(jnp.zeros_like, params)
  return TrainState(
    step=jnp.zeros((), jnp.int32),
    params=params,
    batch_stats=variables.get('batch_stats', {}),
    momentum={'mu': zeros, 'nu': zeros} if optimizer == 'adam' else zeros,
    key=jax.random.fold_in(jax.random.fold_in(key, 1), worker),
  )

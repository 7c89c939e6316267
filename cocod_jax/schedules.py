"""The schedules in time: the learning rate and the communication period, step by step; pure
functions of the config.

Derived values are computed only here, so that an override (`--config.optimizer.warmup_epochs=0`)
changes every quantity that follows from it consistently (docs/algorithms.md, "Schedules"). The
rate's linear scaling reads the workers' batch sizes (shares.py).
"""

import jax.numpy as jnp

LR_SCALINGS = ('linear', 'none')  # optimizer.lr_scaling: see peak_learning_rate.


def peak_learning_rate(config, sizes) -> float:
  """`lr_1 * sum(M_i) / batch_size` under linear scaling, else `lr_1`: computed only here."""
  lr = config.optimizer.learning_rate
  if config.optimizer.lr_scaling == 'linear':
    lr *= sum(sizes) / config.batch_size
  return lr


def learning_rate_fn(config, sizes, steps_per_epoch):
  """lr_t: linear warm-up from lr_1 to the scaled rate, then decay at each of `decay_epochs`.

  `decay_epochs` are 1-based: 81 means "from the start of the 81st epoch", as in the paper. The
  function works on Python numbers (for messages) and on traced step counters alike. Kept ours
  rather than optax's schedules, which round otherwise: `linear_schedule` computes the warm-up
  as `(lr_1 - peak) * (1 - t / T) + peak`, and `piecewise_constant_schedule` multiplies the
  decay factors together before the rate; the rates would move in the last bits and runs would
  no longer resume or reproduce bit for bit against the ones already made.
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


def period_at(algorithm, step, steps_per_epoch) -> int:
  """Communication period of a round starting at `step`: 1 during the warm-up epochs, then k (the
  config's `algorithm` part: `warmup_period_epochs`, `period`)."""
  if step < algorithm.warmup_period_epochs * steps_per_epoch:
    return 1
  return algorithm.period

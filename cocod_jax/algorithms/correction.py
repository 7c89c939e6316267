"""What a worker does when the average of its round arrives: the corrections, as optax-style
transforms, and the weighted average.

CoCoD-SGD (docs/algorithms.md) sends a snapshot `s_i` at the start of a round, averages the
snapshots in the background while k local steps run (`a = sum_j w_j s_j`), and then corrects the
local model `x_i`. Systems that overlap an allreduce with local steps since the paper differ in this
one line; `algorithm.correction` picks it:

- `cocod` (the paper's, the default): `x <- a + (x - s)`, evaluated as `x + (a - s)`. The next
  round sends the corrected `x`. The worker keeps its own progress of the round; the others'
  arrives one round later.
- `blend` (torchft's streaming DiLoCo merge), `alpha` in [0, 1]: `x <- (1 - alpha) a + alpha x`.
  With `d = x - c` this worker's progress since its round started from `c` (the blended model of
  the round before; `c = s` in the first round), the next round sends `a + d`, so the average
  still advances by every worker's progress (the average of the next snapshots is
  `a + sum_j w_j d_j`) while the local model keeps only the fraction `alpha` of it. The steps of
  the round (those taken while the average travelled) reach the local model through the next
  average, one round later.
- `reset` (PCCL's async DiLoCo): `x <- a`, that is `blend` with `alpha = 0`, to the bit. The
  next round sends `a + d`. With period 1, no weight decay and no BatchNorm statistics, the
  averaged model then follows Pipe-SGD (gradient staleness 1) in exact arithmetic.
- `outer_sgd` (DiLoCo's outer optimizer): the workers share an anchor `g` (the model the average
  moves; `x_0` at the start). The outer gradient is `g - a`, the averaged pseudo-gradient of the
  round; an optax SGD with its own learning rate and (Nesterov) momentum moves the anchor,
  `g' = g - lr_out * u` (`u` the outer momentum's update), and `x <- g' + (x - s)` keeps this
  worker's progress as `cocod` does; the next round sends the corrected `x`. With `lr_out = 1`
  and no momentum `g' = a` in exact arithmetic, and `outer_sgd` is `cocod`.
- `eager` (after Kale et al. 2025, with exact progress accounting), `lam` in (0, 1] and `gamma`
  >= 0: the workers share a common model `C` (`x_0` at the start) and an extrapolation `E` (zero).
  The average of the snapshots is `a = C + E + lam * p` with `p` the average progress of the
  round before, so `u = (a - C - E) / lam` recovers `p` exactly; then `C <- C + u`,
  `E <- gamma (1 - lam) u` and `x <- C + lam (x - s) + E`: the worker holds its own fresh
  progress at the weight `lam` (the others' is still travelling) and, with `gamma`, the others'
  extrapolated by their last. No progress is dropped. The next round sends the corrected `x`.
  `lam = 1, gamma = 0` is `cocod`. The evaluated model counts every worker's progress at full
  weight (`evaluate`): `C + (a - C - E) / lam + (mean x - a)`, `a` the current round's average.
- `anchor` (Overlap Local-SGD, Wang, Liang & Joshi 2020), `pull` in [0, 1] and `beta` in [0, 1):
  the average that arrives is the anchor `z` (the first round's is `x_0`); `x <- (1 - pull) x +
  pull z`; a velocity `v` (zero at the start) moves as `v <- beta v + (z - x) / lr` with the
  pulled `x` and the learning rate of the round's last step; the next round sends
  `c = z - lr v`, whose average is the next anchor.

Why a snapshot `a + d` and not the local model: were the next round to send the reset `x`, every
worker would send the same `a`, the next average would be `a` again, and training would stand
still. Sending `a + d` is the streaming DiLoCo order: the pseudo-gradient of the round that just
ended goes out before the local model is merged.

The transform holds what the round needs (the snapshot, and for the others the round's origin,
the anchor and the outer optimizer's state) as its state, so the communicator (which computes
`a`) stays outside the pure math.
"""

from typing import Any
from typing import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

PyTree = Any

CORRECTIONS = ('cocod', 'reset', 'blend', 'outer_sgd', 'eager', 'anchor')
# The fields of one correction only: (the correction, the config's default). A value other than
# the default with another correction is refused (config_validation), since nothing would use it.
OPTION_DEFAULTS = {
  'eager_lambda': ('eager', 1.0),
  'eager_gamma': ('eager', 0.0),
  'anchor_pull': ('anchor', 0.6),
  'anchor_momentum': ('anchor', 0.7),
}


class CorrectionState(NamedTuple):
  """What one worker's round works with. Fields a correction does not use are None."""

  snapshot: PyTree  # s: this worker's contribution to the round's average.
  origin: PyTree = None  # reset/blend: where this worker's local steps of the round started.
  anchor: PyTree = None  # outer_sgd: the common model that the outer optimizer moves.
  outer: PyTree = None  # outer_sgd: the outer optimizer's state (the same on every worker).
  lookahead: PyTree = None  # eager: the extrapolation E (the same on every worker).
  velocity: PyTree = None  # anchor: this worker's velocity v.


class CorrectionTransform(NamedTuple):
  """`init(x)` starts a worker's first round; `update(x, averaged_snapshot, state, lr)` returns
  the corrected `x` and the state (`lr`: the learning rate of the round's last step, which only
  `anchor` uses). `carries`: whether that state is what the next round sends (all but `cocod`,
  which sends the corrected `x` afresh, `init` of it). `evaluate(mean_x, average, state)`, where
  set, is the model to evaluate from the weighted mean of the workers' models, the current
  round's average of the snapshots and the round's state (None: the weighted mean itself)."""

  init: Callable[[PyTree], CorrectionState]
  update: Callable[..., tuple[PyTree, CorrectionState]]
  carries: bool = False
  evaluate: Callable[[PyTree, PyTree, CorrectionState], PyTree] | None = None


def _copy(tree):
  # Arrays are immutable and nothing here is donated, so a state cannot be overwritten by later
  # steps; the copy makes it a buffer of its own all the same.
  return jax.tree.map(jnp.copy, tree)


def decoupled_correction() -> CorrectionTransform:
  """Returns the CoCoD-SGD correction `x <- mean(snapshot) + (x - snapshot)`."""

  def init(x):
    return CorrectionState(snapshot=_copy(x))

  def update(x, averaged_snapshot, state, lr=None):
    del lr
    # Evaluated as x + (a - s), equal to a + (x - s) in exact arithmetic: with one worker
    # a == s bit for bit, so the result is exactly x and CoCoD with N=1 is plain SGD to the bit.
    new_x = jax.tree.map(lambda xi, a, s: xi + (a - s), x, averaged_snapshot, state.snapshot)
    return new_x, CorrectionState(snapshot=new_x)

  return CorrectionTransform(init=init, update=update)


def blend_correction(alpha: float) -> CorrectionTransform:
  """Returns `x <- (1 - alpha) a + alpha x`, the next round sending `a + (x - origin)`;
  `alpha = 0` is `reset` (`x <- a`) to the bit: `1 * a + 0 * x` is `a` for a finite `x`."""
  if not 0.0 <= alpha <= 1.0:
    raise ValueError(f'blend alpha={alpha!r} is invalid; allowed: a number in [0, 1]')

  def init(x):
    return CorrectionState(snapshot=_copy(x), origin=_copy(x))

  def update(x, averaged_snapshot, state, lr=None):
    del lr

    def merged(xi, a):
      return (1.0 - alpha) * a + alpha * xi

    new_x = jax.tree.map(merged, x, averaged_snapshot)
    sent = jax.tree.map(lambda a, xi, c: a + (xi - c), averaged_snapshot, x, state.origin)
    return new_x, CorrectionState(snapshot=sent, origin=new_x)

  return CorrectionTransform(init=init, update=update, carries=True)


def reset_correction() -> CorrectionTransform:
  """Returns `x <- a` (the round's local steps reach `x` only through the next average)."""
  return blend_correction(0.0)


def outer_sgd_correction(learning_rate: float, momentum: float, nesterov: bool):
  """Returns DiLoCo's outer step on a shared anchor, keeping the worker's own progress.

  Args:
    learning_rate: the outer learning rate (DiLoCo: about 0.7; 1 with no momentum is `cocod`).
    momentum: the outer momentum (0: none).
    nesterov: Nesterov's form of the momentum (DiLoCo's).
  """
  if not learning_rate > 0:
    raise ValueError(f'outer learning_rate={learning_rate!r} is invalid; allowed: a number > 0')
  if not 0.0 <= momentum < 1.0:
    raise ValueError(f'outer momentum={momentum!r} is invalid; allowed: a number in [0, 1)')
  opt = optax.sgd(learning_rate, momentum=momentum or None, nesterov=nesterov)

  def init(x):
    return CorrectionState(snapshot=_copy(x), anchor=_copy(x), outer=opt.init(x))

  def update(x, averaged_snapshot, state, lr=None):
    del lr
    # The outer gradient g - a is the same on every worker (g and a are), so is the anchor.
    outer_grad = jax.tree.map(lambda g, a: g - a, state.anchor, averaged_snapshot)
    step, outer = opt.update(outer_grad, state.outer, state.anchor)
    anchor = optax.apply_updates(state.anchor, step)
    new_x = jax.tree.map(lambda g, xi, s: g + (xi - s), anchor, x, state.snapshot)
    return new_x, CorrectionState(snapshot=new_x, anchor=anchor, outer=outer)

  return CorrectionTransform(init=init, update=update, carries=True)


def eager_correction(lam: float, gamma: float) -> CorrectionTransform:
  """Returns the eager update with exact progress accounting (the module docstring).

  Args:
    lam: the weight of the worker's own fresh progress, in (0, 1] (1 with `gamma = 0`: `cocod`).
    gamma: how far the others' progress of the round is extrapolated by their last (>= 0).
  """
  if not 0.0 < lam <= 1.0:
    raise ValueError(f'eager lambda={lam!r} is invalid; allowed: a number in (0, 1]')
  if not gamma >= 0.0:
    raise ValueError(f'eager gamma={gamma!r} is invalid; allowed: a number >= 0')
  zeros = lambda x: jax.tree.map(jnp.zeros_like, x)

  def init(x):
    return CorrectionState(snapshot=_copy(x), anchor=_copy(x), lookahead=zeros(x))

  def progress(a, c, e):
    return (a - c - e) / lam

  def update(x, averaged_snapshot, state, lr=None):
    del lr
    u = jax.tree.map(progress, averaged_snapshot, state.anchor, state.lookahead)
    common = jax.tree.map(jnp.add, state.anchor, u)
    ahead = jax.tree.map(lambda ui: (gamma * (1.0 - lam)) * ui, u)
    new_x = jax.tree.map(
      lambda c, xi, s, e: c + lam * (xi - s) + e, common, x, state.snapshot, ahead
    )
    return new_x, CorrectionState(snapshot=new_x, anchor=common, lookahead=ahead)

  def evaluate(mean_x, average, state):
    return jax.tree.map(
      lambda m, a, c, e: c + progress(a, c, e) + (m - a),
      mean_x, average, state.anchor, state.lookahead,
    )  # fmt: skip

  return CorrectionTransform(init=init, update=update, carries=True, evaluate=evaluate)


def anchor_correction(pull: float, beta: float) -> CorrectionTransform:
  """Returns Overlap Local-SGD's pull towards the anchor (the module docstring).

  Args:
    pull: the pull towards the anchor, in [0, 1].
    beta: the anchor's momentum, in [0, 1).
  """
  if not 0.0 <= pull <= 1.0:
    raise ValueError(f'anchor pull={pull!r} is invalid; allowed: a number in [0, 1]')
  if not 0.0 <= beta < 1.0:
    raise ValueError(f'anchor momentum={beta!r} is invalid; allowed: a number in [0, 1)')

  def init(x):
    return CorrectionState(snapshot=_copy(x), velocity=jax.tree.map(jnp.zeros_like, x))

  def update(x, anchor, state, lr):
    pulled = jax.tree.map(lambda xi, z: (1.0 - pull) * xi + pull * z, x, anchor)
    velocity = jax.tree.map(lambda v, z, xi: beta * v + (z - xi) / lr, state.velocity, anchor,
                            pulled)  # fmt: skip
    sent = jax.tree.map(lambda z, v: z - lr * v, anchor, velocity)
    return pulled, CorrectionState(snapshot=sent, velocity=velocity)

  return CorrectionTransform(init=init, update=update, carries=True)


def from_config(algorithm) -> CorrectionTransform:
  """The correction that `algorithm` (the config's `algorithm` part) asks for."""
  name = algorithm.correction
  if name == 'cocod':
    return decoupled_correction()
  if name == 'reset':
    return reset_correction()
  if name == 'blend':
    return blend_correction(algorithm.alpha)
  if name == 'outer_sgd':
    return outer_sgd_correction(
      algorithm.outer_lr, algorithm.outer_momentum, algorithm.outer_nesterov
    )
  if name == 'eager':
    return eager_correction(algorithm.eager_lambda, algorithm.eager_gamma)
  if name == 'anchor':
    return anchor_correction(algorithm.anchor_pull, algorithm.anchor_momentum)
  raise ValueError(f'algorithm.correction={name!r} is invalid; allowed: {list(CORRECTIONS)}')


# A state in a checkpoint: a dict of its fields that are set, the outer optimizer's state as its
# leaves (orbax keeps dicts of arrays; the structure comes back from `init`).


def to_tree(state: CorrectionState) -> dict:
  """The arrays of `state`, for a checkpoint."""
  out = {k: v for k, v in state._asdict().items() if v is not None and k != 'outer'}
  if state.outer is not None:
    out['outer'] = {f'{i:04d}': leaf for i, leaf in enumerate(jax.tree.leaves(state.outer))}
  return out


def from_tree(tree: dict, tx: CorrectionTransform) -> CorrectionState:
  """`to_tree`'s inverse; `tx` gives the outer optimizer state's structure."""
  fields = {k: v for k, v in tree.items() if k != 'outer'}
  template = jax.eval_shape(tx.init, tree['snapshot'])
  if template.outer is not None:  # Its leaves (none for an outer SGD without momentum).
    leaves = [tree.get('outer', {})[k] for k in sorted(tree.get('outer', {}))]
    fields['outer'] = jax.tree.unflatten(jax.tree.structure(template.outer), leaves)
  return CorrectionState(**fields)

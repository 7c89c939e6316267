"""The decoupled correction of CoCoD-SGD as an optax-style transform, and the weighted average.

CoCoD-SGD (ALGORITHMS.md) snapshots `s = x` at the start of a round, averages the snapshots in
the background while k local steps run, and then sets

    x <- a + (x - s),   a = sum_j w_j s_j,

that is, the common average plus this worker's own progress during the round. The next round
snapshots the corrected `x`. The transform below holds the snapshot as its state, so the
communicator (which computes `a`) stays outside the pure math.
"""

from typing import Any
from typing import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

PyTree = Any


class CorrectionState(NamedTuple):
  """The snapshot taken at the start of the current round."""

  snapshot: PyTree


class CorrectionTransform(NamedTuple):
  """`init(x)` takes the snapshot; `update(x, averaged_snapshot, state)` applies the correction."""

  init: Callable[[PyTree], CorrectionState]
  update: Callable[[PyTree, PyTree, CorrectionState], tuple[PyTree, CorrectionState]]


def decoupled_correction() -> CorrectionTransform:
  """Returns the CoCoD-SGD correction `x <- mean(snapshot) + (x - snapshot)`."""

  def init(x):
    # Arrays are immutable and nothing here is donated, so the snapshot cannot be overwritten by
    # later steps; the copy makes the snapshot a buffer of its own all the same.
    return CorrectionState(snapshot=jax.tree.map(jnp.copy, x))

  def update(x, averaged_snapshot, state):
    # Evaluated as x + (a - s), equal to a + (x - s) in exact arithmetic: with one worker
    # a == s bit for bit, so the result is exactly x and CoCoD with N=1 is plain SGD to the bit.
    new_x = jax.tree.map(lambda xi, a, s: xi + (a - s), x, averaged_snapshot, state.snapshot)
    return new_x, CorrectionState(snapshot=new_x)

  return CorrectionTransform(init=init, update=update)

"""CoCoD-SGD's snapshot allreduce in fewer bytes: `comm.dtype` and `comm.error_feedback`.

What is compressed is what each sender (an MPI rank; on the one-host cluster a group of
`mpi.workers_per_rank` workers, one worker when that is 0) puts on the wire in a round: the
weighted sum of its workers' snapshots minus a reference `r` that every worker holds alike (the
average of the round before, or outer_sgd's anchor; the snapshot itself in the first round),

    v = sum_{i in sender} w_i (s_i - r) + e,        a = r + sum_senders D(Q(v)),

summed over the senders in rank order. A snapshot is the previous average plus one round of
local progress, so `v` is a round's update, not the model, and rounding it costs far less than
rounding the weights would. `Q`, per tensor:

- `float32`: no compression (the default, and the float32 allreduce of `cluster/mpi.py`);
- `bfloat16`: `v` rounded to bfloat16 (round to nearest even), 2 bytes a value;
- `int8`: `scale = max|v| / 127` (1 when `v` is all zero), `q = round(v / scale)` in
  [-127, 127], 1 byte a value plus the tensor's float32 scale; `D(q) = q * scale`.

Error feedback (`e`): what rounding lost, `e <- v - D(Q(v))`, is added to the sender's next
message, so the sum over rounds of what was sent equals the sum of the updates up to the last
round's rounding. Without it `e = 0`.

The functions here are pure and jittable; the clusters run them (`cluster/stacked.py`, on the
one-host cluster in one program, `cluster/mpi.py` before and after an MPI allgather of the
payloads).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

DTYPES = ('float32', 'bfloat16', 'int8')
INT8_MAX = 127.0


class Codec(NamedTuple):
  """The snapshot allreduce's wire format (`comm.dtype`, `comm.error_feedback`)."""

  dtype: str
  error_feedback: bool


def from_config(config) -> Codec | None:
  """The config's codec; None for the plain float32 allreduce without error feedback."""
  c = config.comm
  if c.dtype == 'float32' and not c.error_feedback:
    return None
  if c.dtype not in DTYPES:
    raise ValueError(f'comm.dtype={c.dtype!r} is invalid; allowed: {list(DTYPES)}')
  return Codec(c.dtype, bool(c.error_feedback))


def encode_leaf(v, dtype: str):
  """(payload, float32 scale) of one tensor."""
  if dtype == 'float32':
    return v, jnp.float32(1.0)
  if dtype == 'bfloat16':
    return v.astype(jnp.bfloat16), jnp.float32(1.0)
  top = jnp.max(jnp.abs(v))
  scale = jnp.where(top > 0, top / INT8_MAX, jnp.float32(1.0)).astype(jnp.float32)
  q = jnp.clip(jnp.round(v / scale), -INT8_MAX, INT8_MAX).astype(jnp.int8)
  return q, scale


def decode_leaf(payload, scale, dtype: str):
  """The float32 values a payload stands for."""
  if dtype == 'int8':
    return payload.astype(jnp.float32) * scale
  return payload.astype(jnp.float32)


def encode(v_leaves, error_leaves, codec: Codec):
  """One sender's message: (payloads, [L] scales, the float32 values they decode to, the next
  error leaves or None)."""
  if error_leaves is not None:
    v_leaves = [v + e for v, e in zip(v_leaves, error_leaves)]
  coded = [encode_leaf(v, codec.dtype) for v in v_leaves]
  payloads = [p for p, _ in coded]
  scales = jnp.stack([s for _, s in coded])
  decoded = [decode_leaf(p, s, codec.dtype) for p, s in coded]
  error = [v - d for v, d in zip(v_leaves, decoded)] if codec.error_feedback else None
  return payloads, scales, decoded, error


def total(decoded_by_sender):
  """The sum over senders in rank order (sender 0 first), leaf by leaf."""
  out = list(decoded_by_sender[0])
  for leaves in decoded_by_sender[1:]:
    out = [a + b for a, b in zip(out, leaves)]
  return out


def payload_bytes(shapes, dtype: str) -> int:
  """Bytes of one sender's payload for float32 leaves of these shapes (scales included)."""
  n = sum(int(np.prod(s)) for s in shapes)
  if dtype == 'int8':
    return n + 4 * len(shapes)
  return n * (2 if dtype == 'bfloat16' else 4)


def error_stats(averaged, exact, reference):
  """Squared norms of (averaged - exact), (exact - reference) and exact: the rounding error of
  the compressed average against the float32 one, the round's update and the model (jittable;
  summed over leaves in float32)."""

  def sq(leaves):
    return sum(jnp.sum(jnp.square(a)) for a in leaves)

  a, x, r = (jax.tree.leaves(t) for t in (averaged, exact, reference))
  return jnp.stack([sq([p - q for p, q in zip(a, x)]), sq([p - q for p, q in zip(x, r)]), sq(x)])

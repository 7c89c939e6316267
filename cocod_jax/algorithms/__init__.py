"""The training algorithms, one file each, behind the interface of `base.py`.

A new algorithm is one new file with a `base.Algorithm` subclass, its entry in `ALGORITHMS`
below (its config name), and its tests.
"""

from cocod_jax.algorithms import asynlocal_sgd
from cocod_jax.algorithms import base
from cocod_jax.algorithms import cocod_sgd
from cocod_jax.algorithms import local_sgd
from cocod_jax.algorithms import pipe_sgd
from cocod_jax.algorithms import ssgd
from cocod_jax.algorithms import streamed

ALGORITHMS = {
  cls.name: cls
  for cls in (
    ssgd.SSGD,
    pipe_sgd.PipeSGD,
    local_sgd.LocalSGD,
    cocod_sgd.CoCoDSGD,
    asynlocal_sgd.AsynLocalSGD,
  )
}


def get(name: str, ctx: base.Context) -> base.Algorithm:
  """The algorithm called `name` (`algorithm.name`), set up on `ctx`: CoCoD-SGD with
  `algorithm.fragments` > 1 is the streamed one (`streamed.py`)."""
  if name not in ALGORITHMS:
    raise ValueError(f'algorithm.name={name!r} is unknown; allowed: {list(ALGORITHMS)}')
  if name == cocod_sgd.CoCoDSGD.name and ctx.options.get('fragments', 1) > 1:
    return streamed.StreamedCoCoDSGD(ctx)
  return ALGORITHMS[name](ctx)

"""Where the workers run: `one_host` (all of them in this process, `one_host.py`) or `mpi` (MPI
ranks of num_workers / R workers each, `ranks.py`, with the communicator of `mpi.py`).

Both clusters hold their workers alike (`stacked.StackedWorkers`) and offer the same interface
to the algorithms: the per-worker step functions compiled for their devices (`compute_grads`,
`apply_update`, `local_step`, `skip_step`, `snapshot`, `correct`, `eval_step`) and the
collectives `start` / `wait` / `weighted_mean` of a weighted average; `background.py` holds the
thread that runs MPI collectives beside the training steps.
"""


def make(config, fns, weights):
  """The cluster of `config.backend` for the step functions `fns` and the workers' `weights`
  (it reads `num_workers`, its own part `one_host` or `mpi` and `comm`, the workers' speeds and
  the algorithm's correction)."""
  if config.backend == 'mpi':
    from cocod_jax.cluster import ranks  # pylint: disable=g-import-not-at-top

    return ranks.RanksCluster(fns, config, weights)
  from cocod_jax.cluster import one_host  # pylint: disable=g-import-not-at-top

  return one_host.OneHostCluster(fns, config, weights)

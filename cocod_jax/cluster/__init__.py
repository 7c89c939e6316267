"""Where the workers run: `one_host` (all of them in this process) or `mpi` (one per process).

Both clusters offer the same interface to the algorithms: the per-worker step functions compiled
for their devices (`compute_grads`, `apply_update`, `local_step`, `skip_step`, `snapshot`,
`correct`, `eval_step`) and the collectives `start` / `wait` / `weighted_mean` of a weighted
average; `background.py` holds the thread that runs MPI collectives beside the training steps.
"""

# The names of `config.backend`: the modules of this package that hold a cluster.
BACKENDS = ('one_host', 'mpi')

"""A tiny experiment file for the sweep runner's tests (tests/sweep_*_test.py): configs/test.py's
run (the linear model on digits, 2 workers, 1 epoch: seconds) as the cells of a sweep.

get_config's arguments: `seed`, `mpi` (true: the MPI backend, for dry runs and Slurm scripts).
sweep's argument `case` picks the points:
  run      seed 0; seed 1 with a float override; seed 0 reading a dataset file that does not
           exist, which the entry point refuses at run time (exit status 2)
  dup      one point added twice
  invalid  two invalid points and a valid one
  unknown  an override of a field that does not exist
  mixed    a one-host point and an MPI point (keyword overrides)
  missing  only the point whose dataset file does not exist
  pair     seed 0 and the point whose dataset file does not exist (submitit's local executor)
  seed0    seed 0 alone (tests/slurm_test.py)
  mpi      mixed's MPI point alone (tests/slurm_test.py)
"""

from cocod_jax.config import args as config_args
from configs import test


def get_config(arg=None):
  a = config_args.parse(arg, dict(seed=0, mpi=False))
  c = test.get_config()
  c.seed = a.seed
  c.num_workers = 2  # Set here too: the Slurm golden text holds the number of MPI ranks.
  c.checkpoint.every_epochs = 0  # No checkpoint: the runs are short and only their results count.
  c.checkpoint.interval_s = 0.0
  if a.mpi:
    c.backend = 'mpi'
  return c


def sweep(add, arg=None):
  a = config_args.parse(arg, dict(case='run'))
  cases = ('run', 'dup', 'invalid', 'unknown', 'mixed', 'missing', 'pair', 'seed0', 'mpi')
  config_args.choice('case', a.case, cases)
  missing = dict(dataset__name='npz', dataset__path='tests/data/sweep/missing.npz')
  if a.case == 'run':
    add(config_arg='seed=0')
    add(config_arg='seed=1', overrides={'optimizer.learning_rate': 0.05})
    add(config_arg='seed=0', **missing)
  elif a.case == 'seed0':
    add(config_arg='seed=0')
  elif a.case == 'missing':
    add(config_arg='seed=0', **missing)
  elif a.case == 'pair':
    add(config_arg='seed=0')
    add(config_arg='seed=0', **missing)
  elif a.case == 'dup':
    add(config_arg='seed=0')
    add(config_arg='seed=1')
    add(config_arg='seed=0')
  elif a.case == 'invalid':
    add(config_arg='seed=0', num_workers=0)
    add(config_arg='seed=1')
    add(config_arg='seed=2', overrides={'algorithm.name': 'bogus', 'batch_size': -1})
  elif a.case == 'unknown':
    add(config_arg='seed=0', overrides={'optimizer.learnin_rate': 0.1})
  elif a.case == 'mpi':
    add(config_arg='seed=0,mpi=true', comm__timeout_s=30.0, optimizer__decay_epochs=(1,))
  else:
    add(config_arg='seed=0')
    add(config_arg='seed=0,mpi=true', comm__timeout_s=30.0, optimizer__decay_epochs=(1,))

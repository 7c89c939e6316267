"""Under `mpirun -np 2`: the runs of tests/ranks_test.py, several in one launch (JAX starts once).

    launch/mpirun.sh -np 2 python tests/mpi_ranks.py CASES.json

CASES.json lists {"name", "config" (a resolved config as a dict), "workdir", "then_epochs"};
each case runs `train.train_and_evaluate` in turn on these two ranks (4 XLA CPU devices each;
the config's `mpi.devices` picks 1, 2 or 4 of them). A case with `then_epochs` runs again in the
same workdir with that many epochs: it resumes from its checkpoint. Rank 0 writes
`<workdir>/case.json`: the steps the reruns resumed at, and the message of a divergence (raised
on every rank alike). Any other failure ends the job on every rank.
"""

import json
import os
import sys

# Before JAX starts: four CPU devices per process, and MPI threads that yield (as main.py does).
os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=4'
os.environ.setdefault('OMPI_MCA_mpi_yield_when_idle', '1')

import ml_collections  # noqa: E402

from cocod_jax import resume as resume_lib  # noqa: E402
from cocod_jax import train  # noqa: E402
from cocod_jax import validation as config_validation  # noqa: E402
from cocod_jax.cluster import mpi  # noqa: E402
from cocod_jax.cluster import ranks  # noqa: E402
from cocod_jax.record import files  # noqa: E402


def run_case(case, rank):
  config = ml_collections.ConfigDict(case['config'])
  config_validation.validate(config)
  ranks.agree_on_layout(config)
  resumed, diverged = [], None
  resume = resume_lib.resume

  def recording(run):
    out = resume(run)
    resumed.append(None if out is None else out[1].step)
    return out

  resume_lib.resume = recording
  try:
    for epochs in [config.num_epochs] + ([case['then_epochs']] if case.get('then_epochs') else []):
      config.num_epochs = epochs
      train.train_and_evaluate(config, case['workdir'])
  except train.Diverged as e:
    diverged = str(e)
  finally:
    resume_lib.resume = resume
  if rank == 0:
    out = {'resumed': resumed, 'diverged': diverged}
    files.write_json_atomic(os.path.join(case['workdir'], 'case.json'), out)
  print(f'rank {rank}: {case["name"]}: done', flush=True)


def main():
  rank, size = mpi.world()
  assert size == 2, size
  with open(sys.argv[1]) as f:
    cases = json.load(f)
  for case in cases:
    run_case(case, rank)


if __name__ == '__main__':
  mpi.abort_on_error(main)

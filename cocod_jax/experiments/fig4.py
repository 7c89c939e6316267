"""`python -m cocod_jax.experiments.fig4 --scale=cpu --link_rate=1gbit`: Figure 4, time speedup
against the number of workers: measured (MPI, time per epoch after the first) at up to 2 workers
on this machine (up to 16 at the paper's scale), with the Section 4.2 model from the measured Tp
and Tc drawn beyond and labelled as a model.
"""

import sys

from absl import app

from cocod_jax.experiments import artefacts


def main(argv):
  del argv
  sys.exit(artefacts.speedup_figure())


if __name__ == '__main__':
  app.run(main)

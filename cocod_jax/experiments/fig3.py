"""`python -m cocod_jax.experiments.fig3 --scale=cpu --link_rate=1gbit`: Figure 3, test accuracy
against training time, measured with real MPI (on the simulated link with --link_rate; root).

Prints each algorithm's time to first reach the best accuracy of all minus 0.5 points, its
speedup over S-SGD beside the paper's, and the measured r and hidden fraction.
"""

import sys

from absl import app

from cocod_jax.experiments import artefacts


def main(argv):
  del argv
  sys.exit(artefacts.time_figure(3))


if __name__ == '__main__':
  app.run(main)

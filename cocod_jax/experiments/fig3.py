"""`python -m cocod_jax.experiments.fig3 --scale=cpu --link_rate=1gbit`: Figure 3, test accuracy
against training time, measured with real MPI (on the simulated link with --link_rate; root).

Prints, per task and algorithm: the best accuracy, the time to first reach the accuracy every
run of the task reached (the lowest best - 0.5 points) and its speedup over S-SGD beside the
paper's, the time per epoch and its speedup, and the measured r and hidden fraction.
"""

import sys

from absl import app

from cocod_jax.experiments import artefacts


def main(argv):
  del argv
  sys.exit(artefacts.time_figure(3))


if __name__ == '__main__':
  app.run(main)

"""`python -m cocod_jax.experiments.fig5 --scale=cpu`: Figure 5, training loss against epochs.

The runs of Table 2 (shared with it: nothing runs twice); one panel per task, one line per
algorithm, a band over the seeds; prints each algorithm's final training loss and the largest gap.
"""

import sys

from absl import app

from cocod_jax.experiments import artefacts


def main(argv):
  del argv
  sys.exit(artefacts.loss_figure(5))


if __name__ == '__main__':
  app.run(main)

"""`python -m cocod_jax.experiments.paper --scale=cpu --link_rate=1gbit`: every artefact.

Tables 1 and 2 and Figures 2-6, in that order (Figures 2 and 5 reuse the tables' runs). Exit
status 0 only when every artefact's sweep finished.
"""

import sys

from absl import app

from cocod_jax.experiments import artefacts


def main(argv):
  del argv
  statuses = [
    artefacts.table(1),
    artefacts.table(2),
    artefacts.loss_figure(2),
    artefacts.loss_figure(5),
    artefacts.time_figure(3),
    artefacts.time_figure(6),
    artefacts.speedup_figure(),
  ]
  sys.exit(max(statuses))


if __name__ == '__main__':
  app.run(main)

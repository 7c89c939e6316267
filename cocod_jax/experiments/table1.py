"""`python -m cocod_jax.experiments.table1 --scale=cpu`: Table 1 beside the paper's numbers.

Runs (or finds done) the sweep of configs/table1.py, prints ours (mean ± std over seeds) next to
the paper's accuracy with the difference, then the paper's parity claim against S-SGD as checks,
and writes table1.md and table1.json into --workdir. Flags: see common.py.
"""

import sys

from absl import app

from cocod_jax.experiments import artefacts


def main(argv):
  del argv
  sys.exit(artefacts.table(1))


if __name__ == '__main__':
  app.run(main)

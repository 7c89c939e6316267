"""`python -m cocod_jax.experiments.table1 --scale=cpu`: Table 1 beside the paper's numbers.

Writes table1.md, table1.json and table1_correct.npz into --workdir.
Made by `artefacts.ARTEFACTS['table1']`; flags: `cocod_jax.experiments.flags`.
"""

from cocod_jax.experiments import artefacts

if __name__ == '__main__':
  artefacts.main('table1')

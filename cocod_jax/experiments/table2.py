"""`python -m cocod_jax.experiments.table2 --scale=cpu`: Table 2 beside the paper's numbers.

Writes table2.md and table2.json into --workdir.
Made by `artefacts.ARTEFACTS['table2']`; flags: `cocod_jax.experiments.flags`.
"""

from cocod_jax.experiments import artefacts

if __name__ == '__main__':
  artefacts.main('table2')

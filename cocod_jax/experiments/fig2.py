"""`python -m cocod_jax.experiments.fig2 --scale=cpu`: Figure 2, training loss against epochs.

Table 1's runs (nothing runs twice); writes fig2.md, .json and .png.
Made by `artefacts.ARTEFACTS['fig2']`; flags: `cocod_jax.experiments.flags`.
"""

from cocod_jax.experiments import artefacts

if __name__ == '__main__':
  artefacts.main('fig2')

"""`python -m cocod_jax.experiments.fig5 --scale=cpu`: Figure 5, training loss against epochs.

Table 2's runs (nothing runs twice); writes fig5.md, .json and .png.
Made by `artefacts.ARTEFACTS['fig5']`; flags: `cocod_jax.experiments.flags`.
"""

from cocod_jax.experiments import artefacts

if __name__ == '__main__':
  artefacts.main('fig5')

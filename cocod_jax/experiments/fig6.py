"""`python -m cocod_jax.experiments.fig6 --scale=cpu --link_rate=1gbit`: Figure 6.

Figure 3 in the mixed cluster (--link_rate: the simulated link; root).
Made by `artefacts.ARTEFACTS['fig6']`; flags: `cocod_jax.experiments.flags`.
"""

from cocod_jax.experiments import artefacts

if __name__ == '__main__':
  artefacts.main('fig6')

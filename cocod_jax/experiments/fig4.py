"""`python -m cocod_jax.experiments.fig4 --scale=cpu --link_rate=1gbit`: Figure 4.

Time speedup against workers, measured under MPI, with the Section 4.2 model.
Made by `artefacts.ARTEFACTS['fig4']`; flags: `cocod_jax.experiments.flags`.
"""

from cocod_jax.experiments import artefacts

if __name__ == '__main__':
  artefacts.main('fig4')

"""`python -m cocod_jax.experiments.fig3 --scale=cpu --link_rate=1gbit`: Figure 3.

Test accuracy against training time under MPI (--link_rate: the simulated link; root).
Made by `artefacts.ARTEFACTS['fig3']`; flags: `cocod_jax.experiments.flags`.
"""

from cocod_jax.experiments import artefacts

if __name__ == '__main__':
  artefacts.main('fig3')

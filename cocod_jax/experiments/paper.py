"""`python -m cocod_jax.experiments.paper --scale=cpu --link_rate=1gbit`: every artefact.

Tables 1 and 2, Figures 2-6; exit status 0 only when every sweep finished.
Made by `artefacts.ARTEFACTS['paper']`; flags: `cocod_jax.flags`.
"""

from cocod_jax.experiments import artefacts

if __name__ == '__main__':
  artefacts.main('paper')

"""`python -m cocod_jax.experiments.paper --scale=cpu --parallel=2`: every artefact.

Tables 1 and 2, the ablation, Figures 2-6 (at the cpu scale the timing figures with their
registered flags, configs/scales.py CPU_ARTEFACT_FLAGS); exit status 0 only when every sweep
finished.
Made by `artefacts.ARTEFACTS['paper']`; flags: `cocod_jax.experiments.flags`.
"""

from cocod_jax.experiments import artefacts

if __name__ == '__main__':
  artefacts.main('paper')

"""`python -m cocod_jax.experiments.ablation --parallel=2`: why CoCoD-SGD trails S-SGD.

CoCoD-SGD with one change at a time on one Table 1 column (configs/ablation.py), each variant
paired with S-SGD; writes ablation.md and ablation.json into --workdir.
Made by `artefacts.ARTEFACTS['ablation']`; flags: `cocod_jax.experiments.flags` (`--task`,
`--seeds`).
"""

from cocod_jax.experiments import artefacts

if __name__ == '__main__':
  artefacts.main('ablation')

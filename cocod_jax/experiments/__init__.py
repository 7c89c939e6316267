"""One absl entry point per artefact (`python -m cocod_jax.experiments.<name>`).

The paper's: `table1`, `table2` (accuracy tables beside the paper's, with the registered
verdicts), `fig2`, `fig5` (training loss against epochs), `fig3`, `fig6` (test accuracy against
training time under MPI, with the time to the target), `fig4` (time speedup against workers,
with the time model), `ablation`, and `paper` for all of them (`artefacts.py` makes each). Beyond
it: `long_schedule` (the paper's 120 epochs and the drift control), `overlap` (the delay, eager
and anchor options), `corrections` (an earlier exploration), `mnist1d_check`, and `readme` (the
generated parts of the documents). Each completes its sweep through `cocod_jax.sweep` (a second
invocation runs nothing that is done) and writes `<name>.md`, `<name>.json` and, for figures,
`<name>.png` into `--workdir`; flags: `cocod_jax/experiments/flags.py`. `common.py` holds what they
share.
"""

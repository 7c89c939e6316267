"""One absl entry point per artefact of the paper (`python -m cocod_jax.experiments.<name>`).

`table1`, `table2` (accuracy tables beside the paper's, with the parity checks), `fig2`, `fig5`
(training loss against epochs), `fig3`, `fig6` (test accuracy against training time, measured
under MPI, with time-to-accuracy speedups), `fig4` (time speedup against workers, with the time
model), and `paper` for all of them. Each completes its sweep through `cocod_jax.sweep` (a second
invocation runs nothing that is done) and writes `<name>.md`, `<name>.json` and, for figures,
`<name>.png` into `--workdir`. `common.py` holds what they share.
"""

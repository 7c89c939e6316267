"""The overlap entry point's own flags: `--replot --dry_run` says which figures it would draw from
overlap.json and writes nothing (issue 42 item 3: it wrote both PNGs)."""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPER = os.path.join(ROOT, 'docs', 'paper-cpu')


def test_replot_dry_run_writes_nothing(tmp_path):
  shutil.copy(os.path.join(PAPER, 'overlap.json'), tmp_path / 'overlap.json')
  before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  cmd = [sys.executable, '-m', 'cocod_jax.experiments.overlap', '--replot', '--dry_run',
         f'--workdir={tmp_path}']  # fmt: skip
  p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr[-2000:]
  assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before
  for name in ('overlap.png', 'overlap_frontier.png'):
    assert f'dry run: would draw {tmp_path / name}' in p.stdout, p.stdout

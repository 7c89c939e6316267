"""Tests of cocod_jax/sweep/report.py: a sweep's table against its golden text
(tests/data/sweep/table.golden.md; UPDATE_GOLDEN=1 rewrites it) and against rows written out by
hand.
"""

import pytest

from cocod_jax.sweep import report
from tests.sweep_helpers import HEAD
from tests.sweep_helpers import golden

# Slow with the sweep runner's other test modules: left out of make test-fast.
pytestmark = pytest.mark.slow


def test_table_renderer_golden():
  records = [
    dict(dir='/w/points/cocod_sgd.c10_r18.cpu.s0-0a1b2c3d', state='DONE', stale=False,
         wall_s=41.234, metrics=dict(test_accuracy=0.91234, train_time_s=12.25), detail=''),
    dict(dir='/w/points/ssgd.c10_r18.cpu.s0-11111111', state='DIVERGED', stale=True, wall_s=3.0,
         metrics=None, detail=''),
    dict(dir='/w/points/pipe_sgd.c10_r18.cpu.s0-22222222', state='FAILED', stale=False,
         wall_s=2.5, metrics=None, detail='exit status 2'),
    dict(dir='/w/points/local_sgd.c10_r18.cpu.s0-33333333', state='RUNNING', stale=None,
         wall_s=None, metrics=None, detail='pid 123 on host'),
    dict(dir='/w/points/local_sgd.c10_r18.cpu.s1-44444444', state='PENDING', stale=None,
         wall_s=None, metrics=None, detail=''),
  ]  # fmt: skip
  text = report.render(records, HEAD)
  golden('table.golden.md', text)
  # The golden file was written from the renderer's output; what each row must say is written
  # out here from the records by hand, so a renderer that shows the wrong field still fails.
  rows = {line.split('|')[1].strip(): [c.strip() for c in line.split('|')[2:-1]]
          for line in text.splitlines()[2:7]}  # fmt: skip
  assert rows == {
    'cocod_sgd.c10_r18.cpu.s0-0a1b2c3d': ['DONE', 'no', '41.2', '0.9123', '12.2'],
    'ssgd.c10_r18.cpu.s0-11111111': ['DIVERGED', 'yes', '3.0', '-', '-'],
    'pipe_sgd.c10_r18.cpu.s0-22222222': ['FAILED', 'no', '2.5', '-', '-'],
    'local_sgd.c10_r18.cpu.s0-33333333': ['RUNNING', '-', '-', '-', '-'],
    'local_sgd.c10_r18.cpu.s1-44444444': ['PENDING', '-', '-', '-', '-'],
  }
  assert '5 points: 1 DONE, 1 DIVERGED, 1 RUNNING, 1 FAILED, 1 PENDING' in text
  assert 'warning: 1 point was run at another commit than HEAD (0123456789ab)' in text
  assert 'FAILED: pipe_sgd.c10_r18.cpu.s0-22222222 (exit status 2)' in text
  assert 'RUNNING: local_sgd.c10_r18.cpu.s0-33333333 (pid 123 on host)' in text

"""What the sweep runner's test modules (tests/sweep_*_test.py) share.

The experiment file is tests/data/sweep/tiny.py: configs/test.py's run (seconds) as the cells of
a sweep. Besides it: the CLI as a subprocess, a directory's snapshot, the golden texts
(tests/data/sweep/*.golden; UPDATE_GOLDEN=1 rewrites them after a deliberate change), hand-made
point files and results, and stand-ins for sbatch, srun and sacct on PATH.
"""

import json
import os
import subprocess
import sys
import time

from cocod_jax.record import provenance

ROOT = provenance.ROOT
DATA = os.path.join(ROOT, 'tests', 'data', 'sweep')
TINY = 'tests/data/sweep/tiny.py'
ENV = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
HEAD = '0123456789abcdef0123456789abcdef01234567'


def cli(*args, timeout=120):
  """`python -m cocod_jax.sweep ARGS` from the checkout, without the tests' XLA_FLAGS."""
  return subprocess.run(
    [sys.executable, '-m', 'cocod_jax.sweep', *args],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def snapshot(top):
  """Every path under `top` with its size and mtime."""
  out = {}
  for d, _, files in os.walk(top):
    out[d] = None
    for f in files:
      st = os.stat(os.path.join(d, f))
      out[os.path.join(d, f)] = (st.st_size, st.st_mtime_ns)
  return out


def golden(name, text):
  """Asserts that `text` is tests/data/sweep/`name` (UPDATE_GOLDEN=1 rewrites the file first)."""
  path = os.path.join(DATA, name)
  if os.environ.get('UPDATE_GOLDEN'):
    with open(path, 'w') as f:
      f.write(text)
  with open(path) as f:
    assert text == f.read(), f'{name} differs from the golden text (UPDATE_GOLDEN=1 rewrites it)'


def write_json(path, obj):
  """`obj` as JSON at `path`, its directory made first."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    json.dump(obj, f)


def results_json(config, status='completed'):
  """A results.json that follows the schema, for a run of `config` that ended with `status`."""
  rec = dict(epoch=0, train_loss=1.0, test_loss=1.0, test_accuracy=0.5, train_time_s=1.0)
  out = dict(config=config, backend='one_host', status=status, batch_sizes=[4], weights=[1.0],
             steps_per_epoch=1, workers=[], epochs=[rec])  # fmt: skip
  return dict(out, final=rec) if status == 'completed' else dict(out, diverged={'step': 1})


def wait_for(predicate, timeout=240.0, what='a condition'):
  """Polls `predicate` (an OSError counts as not yet) until it holds; AssertionError after
  `timeout` seconds."""
  end = time.monotonic() + timeout
  while time.monotonic() < end:
    try:
      if predicate():
        return
    except OSError:
      pass
    time.sleep(0.05)
  raise AssertionError(f'timed out waiting for {what}')


def fake_slurm(tmp_path, monkeypatch, states):
  """Stand-ins on PATH: srun (never run: submitit only looks for it), sbatch (keeps each script
  in tmp_path/sbatch/ and answers job 4242, 4243, ...) and sacct (one State per job id, from
  `states`: for the job, and for tasks 0-9 when it is an array, as sacct writes a pending one)."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir(exist_ok=True)
  (tmp_path / 'sbatch').mkdir(exist_ok=True)
  lines = ''.join(
    f"  case \"$*\" in *'-j {k}'*) printf '{k}|{v}|n1\\n{k}_[0-9]|{v}|n1\\n';; esac\n"
    for k, v in states.items()
  )
  scripts = dict(
    srun='#!/bin/sh\nexit 1\n',
    sbatch=(
      f'#!/bin/sh\nn=$(ls {tmp_path}/sbatch | wc -l)\ncp "$1" {tmp_path}/sbatch/$((4242 + n)).sh\n'
      'echo "Submitted batch job $((4242 + n))"\n'
    ),
    sacct=f"#!/bin/sh\necho 'JobID|State|NodeList'\n{lines}",
  )
  for name, text in scripts.items():
    (bin_dir / name).write_text(text)
    (bin_dir / name).chmod(0o755)
  monkeypatch.setenv('PATH', f'{bin_dir}:{os.environ["PATH"]}')

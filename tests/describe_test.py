"""Issue 42 item 8: `--show_config` and the one table of what each config field means
(cocod_jax/config/describe.py), held to the configs."""

import glob
import os
import re
import subprocess
import sys

import pytest

from cocod_jax.config import describe
from cocod_jax.config import loader
from configs import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_FILES = sorted(
  os.path.relpath(p, ROOT)
  for p in glob.glob(os.path.join(ROOT, 'configs', '*.py'))
  if 'def get_config' in open(p).read()
)


def test_every_field_of_the_base_config_has_a_description():
  fields = loader.flatten(common.base_config())
  assert [f for f in fields if f not in describe.DESCRIPTIONS] == []


@pytest.mark.parametrize('path', CONFIG_FILES)
def test_every_field_of_each_config_file_has_a_description(path):
  config = loader.load(os.path.join(ROOT, path))
  assert [f for f in loader.flatten(config) if f not in describe.DESCRIPTIONS] == []


def test_no_description_names_a_field_that_does_not_exist():
  fields = set(loader.flatten(common.base_config()))
  assert sorted(set(describe.DESCRIPTIONS) - fields) == []
  # Nor does the text of one: every dotted lower-case name in it is a field.
  for field, text in describe.DESCRIPTIONS.items():
    for name in re.findall(r'\b[a-z_]+\.[a-z_]+\b', text):
      assert name in fields, (field, name)
    assert '\n' not in text and len(text) <= 160, field  # One line each.


def test_fragments_is_described_as_the_issue_words_it():
  assert describe.DESCRIPTIONS['algorithm.fragments'] == (
    "streamed CoCoD-SGD: the synced part cut into P contiguous fragments, one fragment's "
    "allreduce a step (1: the paper's whole-model allreduce)"
  )


def _main(*args):
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  cmd = [sys.executable, '-m', 'cocod_jax.main', *args]
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_show_config_prints_every_field_and_writes_nothing(tmp_path):
  spec = 'configs/table1.py:algo=local_sgd,task=c100_r18,scale=smoke'
  wd = tmp_path / 'run'
  p = _main(f'--config={spec}', '--config.seed=7', '--show_config', f'--workdir={wd}')
  assert p.returncode == 0 and p.stderr == '', p.stderr[-3000:]
  lines = p.stdout.splitlines()
  config = loader.load(os.path.join(ROOT, spec))
  assert lines[0].startswith(f'# --config={spec}: {len(loader.flatten(config))} fields')
  shown = {line.split(' = ')[0]: line for line in lines[1:]}
  assert list(shown) == list(loader.flatten(config))
  assert shown['algorithm.name'].startswith("algorithm.name = 'local_sgd'")  # The :args applied,
  assert shown['seed'].startswith('seed = 7 ')  # and the overrides.
  for field, line in shown.items():
    assert line.endswith(f'  # {describe.DESCRIPTIONS[field]}'), line
  assert not wd.exists()
  # No --workdir needed to show; without --show_config it is required, one line.
  assert _main('--config=configs/test.py', '--show_config').returncode == 0
  p = _main('--config=configs/test.py')
  assert p.returncode == 2 and p.stderr.splitlines() == [
    'error: --workdir is required (where the run writes), unless --show_config'
  ], p.stderr

"""Test setup: 8 emulated XLA CPU devices, set before JAX starts; the fixture `tiny`, the tiny
dataset of tests/helpers.py in a test's tmp_path (helpers.tiny_npz itself serves the tests that
need another size or a module-scoped directory)."""

import os

import pytest

os.environ['XLA_FLAGS'] = (
  os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_device_count=8'
).strip()


@pytest.fixture
def tiny(tmp_path):
  """`helpers.tiny_npz`'s dataset in this test's tmp_path: (path, x, y) of its training examples,
  also as `tiny.path`, `tiny.x`, `tiny.y`."""
  from tests import helpers  # Here, not above: it imports JAX, which not every test module needs.

  return helpers.tiny_npz(tmp_path)

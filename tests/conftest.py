"""Test setup: 8 emulated XLA CPU devices, set before JAX starts."""

import os
import sys

os.environ['XLA_FLAGS'] = (
  os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_device_count=8'
).strip()
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

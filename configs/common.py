"""What every config file builds on: the run's schema and defaults, handed on from the package
(cocod_jax/config/defaults.py), so that configs/*.py import them from here as they always did."""

from cocod_jax.config.defaults import apply
from cocod_jax.config.defaults import base_config
from cocod_jax.config.defaults import small_config
from cocod_jax.config.defaults import without_checkpoints

__all__ = ['apply', 'base_config', 'small_config', 'without_checkpoints']

"""cocod_jax: CoCoD-SGD and its baselines for data-parallel training in JAX/Flax."""

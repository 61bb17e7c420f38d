"""Strict test settings: several CPU devices, no implicit rank promotion."""

import os

# Several host devices for the sharding tests; must be set before jax starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_debug_nans", False)

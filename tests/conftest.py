"""Strict test settings: several CPU devices, no implicit rank promotion, and
JAX's persistent compilation cache (shared by the xdist workers, the
subprocesses the tests start and the notebook kernels, through the
environment)."""

import os
from pathlib import Path

# Several host devices for the sharding tests; must be set before jax starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The cache lives in the checkout (.cache/ is ignored by git), so a fresh clone
# starts cold and a developer's second run is warm.
_CACHE = Path(__file__).resolve().parent.parent / ".cache" / "jax"
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(_CACHE))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_debug_nans", False)

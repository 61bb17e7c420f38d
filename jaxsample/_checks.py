"""Argument checks shared by the factories: a clear error naming the argument
(a [`ConfigError`][jaxsample.errors.ConfigError] whose ``field`` is its name),
and the limits that light and heavy modules share.

Imports no JAX and no numpy until `check_key` runs: the config dataclasses
use `check_int`, and the command line's ``--help`` and argument errors import
them without either (a value cannot be a numpy scalar before numpy is
imported: `numpy_types`)."""

from __future__ import annotations

import sys
from typing import Any

from jaxsample.errors import ConfigError, ConfigTypeError

#: The largest replay ring (``jaxsample.replay.MAX_CAPACITY``, steps per env;
#: ``DQNConfig.buffer_capacity``): positions are int32 and ``position +
#: offset`` (both < capacity) must not overflow, so capacity <= 2**30 keeps
#: every intermediate < 2**31.
MAX_REPLAY_CAPACITY = 2**30


def numpy_types(*names: str) -> tuple[type, ...]:
    """numpy's scalar types ``names`` (``"integer"``, ``"floating"``,
    ``"bool_"``) when numpy is imported, else ``()``: no value can be one of
    them before numpy is imported, so a check needs no import of its own."""
    np = sys.modules.get("numpy")
    return tuple(getattr(np, n) for n in names) if np is not None else ()


def check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """``int(value)``, or a `ConfigTypeError` (a ``TypeError``) / `ConfigError`
    (a ``ValueError``) whose ``field`` is ``name`` when it is not an int (bools
    are not) or lies outside ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, (int, *numpy_types("integer"))):
        raise ConfigTypeError(name, f"must be an int, got {value!r}")
    if value < minimum:
        raise ConfigError(name, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(name, f"must be <= {maximum}, got {value}")
    return int(value)


def check_key(key: Any) -> None:
    """Raise unless ``key`` is one typed PRNG key (``jax.random.key(seed)``)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if not (isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)):
        dtype = getattr(key, "dtype", None)
        got = type(key).__name__
        if dtype is not None:
            got = f"a {type(key).__name__} of dtype {dtype} and shape {tuple(np.shape(key))}"
        raw = dtype is not None and np.dtype(dtype) == np.uint32 and np.shape(key)[-1:] == (2,)
        hint = " (a raw jax.random.PRNGKey: use jax.random.key(seed))" if raw else ""
        raise TypeError(f"key must be a typed PRNG key from jax.random.key(seed), got {got}{hint}")
    if key.shape != ():
        raise ValueError(f"key must be a single key (shape ()), got shape {key.shape}")


def check_bool(name: str, value: Any) -> bool:
    """``value``, or a `ConfigTypeError` (a ``TypeError``) naming ``name``
    unless it is a bool."""
    if not isinstance(value, (bool, *numpy_types("bool_"))):
        raise ConfigTypeError(name, f"must be a bool, got {value!r}")
    return bool(value)

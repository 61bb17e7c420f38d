"""Where the numbers come from: backend, devices, versions, CPUs, memory; and
the optional imports of the host peers."""

from __future__ import annotations

import datetime
import importlib
import importlib.metadata
import os
import platform
import warnings
from typing import Any

import jax
import numpy as np

from jaxsample import __version__


def import_optional(name: str) -> Any | None:
    """The module ``name``, or None when it is not installed (or fails to import).

    The process environment is restored afterwards: envpool sets variables such
    as ``MPLBACKEND=Agg`` when imported, which would turn off a notebook's
    inline plots (and those of any kernel started from this process).
    """
    saved = dict(os.environ)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except ImportError:
        return None
    finally:
        if dict(os.environ) != saved:
            os.environ.clear()
            os.environ.update(saved)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _host_memory_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _device_memory_bytes() -> int | None:
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # not every backend has it
        return None
    if not stats or "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"])


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def system_info() -> dict[str, Any]:
    """Where the numbers come from: backend, devices, versions, CPUs, memory."""
    device = jax.devices()[0]
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {
        "backend": jax.default_backend(),
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "devices_used": 1,
        "device_memory_bytes": _device_memory_bytes(),
        "jax": jax.__version__,
        "jaxlib": _version("jaxlib"),
        "gymnax": _version("gymnax"),
        "jaxsample": __version__,
        "numpy": np.__version__,
        "gymnasium": _version("gymnasium"),
        "envpool": _version("envpool"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "cpu_model": _cpu_model(),
        "host_memory_bytes": _host_memory_bytes(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }

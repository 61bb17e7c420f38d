"""The device requests of the bench runners (``python -m jaxsample.bench.driver``,
``python -m jaxsample.bench.devices``), checked before anything is built.

* A device that does not exist (``--actor-device gpu:0`` on a CPU-only JAX,
  ``cpu:1`` with one CPU device, ``--devices 4`` with fewer) is a
  `jaxsample.errors.UsageError`: one line, exit status 2.
* Host (CPU) devices are fabricated (XLA's
  ``--xla_force_host_platform_device_count``) only when asked for: with
  ``--host-devices N`` (the runner restarts itself with that flag in
  ``XLA_FLAGS``, since the CPU backend reads it once, when it starts) or by an
  ``XLA_FLAGS`` that already forces them. Either way the run says so in one
  line (`host_devices_line`): they are partitions of this machine's cores,
  not more hardware.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from jaxsample.errors import UsageError

__all__ = [
    "FORCE_FLAG",
    "add_host_devices_flag",
    "check_device_count",
    "forced_host_devices",
    "host_devices_line",
    "parse_device",
    "request_host_devices",
    "run_main",
]

FORCE_FLAG = "--xla_force_host_platform_device_count"
#: The platform names ``platform:index`` takes (JAX's and its aliases).
PLATFORMS = ("cpu", "gpu", "cuda", "rocm", "tpu")
_FORCED = re.compile(rf"{FORCE_FLAG}=(\d+)")


def forced_host_devices(environ: dict[str, str] | None = None) -> int | None:
    """The number of host devices ``XLA_FLAGS`` forces, or None."""
    found = _FORCED.findall((os.environ if environ is None else environ).get("XLA_FLAGS", ""))
    return int(found[-1]) if found else None


def add_host_devices_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host-devices",
        type=int,
        default=None,
        metavar="N",
        help="fabricate N host (CPU) devices that share this machine's cores (XLA's "
        f"{FORCE_FLAG}; the runner restarts itself with it). Without it only the "
        "devices that exist are used, unless XLA_FLAGS already forces host devices",
    )


def request_host_devices(n: int | None, module: str, argv: Sequence[str]) -> None:
    """With ``--host-devices n`` and ``XLA_FLAGS`` not forcing ``n`` yet: restart
    ``python -m module argv`` with it (call before JAX's CPU backend starts
    mattering: the flag is read once, when it starts). Without: nothing."""
    if n is None:
        return
    if n < 1:
        raise UsageError(f"--host-devices {n}: give a count >= 1")
    if forced_host_devices() == n:
        return
    env = dict(os.environ)
    others = _FORCED.sub("", env.get("XLA_FLAGS", "")).split()
    env["XLA_FLAGS"] = " ".join([*others, f"{FORCE_FLAG}={n}"])
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)


def host_devices_line(requested: int | None) -> str | None:
    """The run's one line about fabricated host devices, or None when there are
    none (nothing forced them)."""
    n = forced_host_devices()
    if n is None:
        return None
    how = (
        f"--host-devices {n}"
        if requested == n
        else f"XLA_FLAGS={FORCE_FLAG}={n} set in the environment"
    )
    return (
        f"host devices: {n} CPU devices fabricated ({how}); they share this "
        f"machine's {os.cpu_count()} cores"
    )


def _listing() -> str:
    import jax

    return ", ".join(f"{d.platform}:{i}" for i, d in enumerate(jax.devices()))


def parse_device(spec: str | None, default: Any, flag: str) -> Any:
    """``"gpu:0"``, ``"cpu:1"`` (platform:index; ``"gpu"`` is ``"gpu:0"``) as a
    ``jax.Device``, or ``default`` for None. A device that does not exist is a
    `jaxsample.errors.UsageError` naming ``flag`` and the devices there are."""
    if spec is None:
        return default
    import jax

    platform, sep, index = spec.strip().lower().partition(":")
    if platform not in PLATFORMS or (sep and not index.isdigit()):
        raise UsageError(
            f"{flag} {spec!r}: give platform:index, a platform of {', '.join(PLATFORMS)} "
            "(e.g. cpu:0, gpu:0)"
        )
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        raise UsageError(
            f"{flag} {spec!r}: this JAX has no {platform} devices (it has {_listing()})"
        ) from None
    i = int(index or 0)
    if i >= len(devices):
        hint = ""
        if devices[0].platform == "cpu":
            hint = f"; ask for host devices with --host-devices {i + 1}"
        raise UsageError(
            f"{flag} {spec!r}: no such device, {platform} has {len(devices)} "
            f"({', '.join(f'{platform}:{j}' for j in range(len(devices)))}){hint}"
        )
    return devices[i]


def check_device_count(counts: Sequence[int], flag: str) -> None:
    """Every count in ``counts`` (>= 1) fits the default backend's devices, or a
    `jaxsample.errors.UsageError` that says how many there are."""
    import jax

    bad = [n for n in counts if n < 1]
    if bad:
        raise UsageError(f"{flag} {bad[0]}: give device counts >= 1")
    available = jax.devices()
    if max(counts) > len(available):
        platform = available[0].platform
        hint = (
            f"; ask for host devices with --host-devices {max(counts)}" if platform == "cpu" else ""
        )
        raise UsageError(
            f"{flag} {max(counts)}: this JAX has {len(available)} {platform} "
            f"device{'s' if len(available) > 1 else ''}{hint}"
        )


def run_main(main: Callable[[list[str] | None], Any], prog: str) -> int:
    """Run a runner's ``main``: a `jaxsample.errors.UsageError` is one line
    on stderr and exit status 2, as for the ``jaxsample`` command."""
    try:
        status = main(None)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    return int(status or 0)

"""Throughput of a sharded sampler vs the number of devices (a runner: this one jits).

    python -m jaxsample.bench.devices --B 4096 --T 128 --devices 1 2 4 --host-devices 4

For each device count ``n`` (a mesh over the first ``n`` devices), ``collect``
of ``B`` envs split over the mesh, timed side by side with the one-device
sampler in the same process (interleaved repetitions,
`interleave`; medians; compile time
separately). A count beyond the devices there are is one line and exit
status 2, before anything is built. On a CPU the devices are host devices
that ``--host-devices N`` fabricates (``--xla_force_host_platform_device_count``;
the runner restarts itself with it and says so), never unasked: they share
the machine's cores, so the figures show the overhead of sharding, not a
speed-up beyond the cores. On GPUs/TPUs each device is a real one.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import gymnax
import jax
import numpy as np

import jaxsample as js
from jaxsample.bench import device_requests
from jaxsample.bench.measure import compile_timed, interleave
from jaxsample.bench.report import write_json


def _stepper(collect: Callable, state: Any) -> Callable[[], None]:
    """One blocking ``collect`` call per call, the state carried (donated)."""
    box = [state]

    def run() -> None:
        box[0], batch = jax.block_until_ready(collect(box[0], None))
        del batch

    return run


def device_scaling(
    env_name: str = "CartPole-v1",
    B: int = 4096,
    T: int = 128,
    devices: Sequence[int] = (1, 2, 4),
    reps: int = 7,
) -> dict[str, Any]:
    """Steps/s of ``collect`` sharded over 1..n devices vs unsharded, same process.

    Returns a dict: ``backend``, ``device_kind``, ``B``, ``T``, ``env``, and
    ``rows``: per device count ``devices``, ``compile_s``, ``steps_per_s``
    (median), ``spread`` (min/max steps/s) and ``ratio`` (to the unsharded
    sampler's median, measured interleaved with it).
    """
    available = len(jax.devices())
    for n in devices:
        if n > available:
            raise ValueError(f"devices: asked for {n}, this backend has {available}")
    env, params = gymnax.make(env_name)
    agent = js.agents.RandomAgent(env.action_space(params))
    spec = js.BatchSpec(T=T, B=B)
    runs: dict[Any, Callable[[], None]] = {}
    compile_s: dict[Any, float] = {}
    for n in (None, *devices):
        mesh = None if n is None else jax.sharding.Mesh(np.array(jax.devices()[:n]), ("envs",))
        sampler = js.make_sampler(env, params, agent, spec, mesh=mesh)
        state = jax.block_until_ready(jax.jit(sampler.init)(jax.random.key(0), None))
        collect, compile_s[n] = compile_timed(
            jax.jit(sampler.collect, donate_argnums=0), state, None
        )
        runs[n] = _stepper(collect, state)
        runs[n]()  # warm-up
    times = interleave(runs, reps=reps)
    rate = {n: B * T / float(np.median(t)) for n, t in times.items()}
    rows = [
        {
            "devices": n,
            "compile_s": compile_s[n],
            "steps_per_s": rate[n],
            "spread": [B * T / max(times[n]), B * T / min(times[n])],
            "ratio": rate[n] / rate[None],
        }
        for n in devices
    ]
    return {
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "cpu_count": os.cpu_count(),
        "env": env_name,
        "B": B,
        "T": T,
        "unsharded_steps_per_s": rate[None],
        "unsharded_compile_s": compile_s[None],
        "rows": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jaxsample.bench.devices [--devices 1 2 4] [--host-devices N] ...``;
    a device count beyond the devices there are is a
    `jaxsample.errors.UsageError`, raised before anything is built."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--B", type=int, default=4096)
    p.add_argument("--T", type=int, default=128)
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--json", default=None)
    device_requests.add_host_devices_flag(p)
    args = p.parse_args(argv)
    device_requests.request_host_devices(args.host_devices, "jaxsample.bench.devices", argv)
    device_requests.check_device_count(args.devices, "--devices")
    line = device_requests.host_devices_line(args.host_devices)
    if line:
        print(line, flush=True)
    out = device_scaling(args.env, args.B, args.T, args.devices, args.reps)
    print(
        f"{out['env']}  B={out['B']} T={out['T']}  backend={out['backend']} "
        f"({out['device_kind']}, {out['cpu_count']} CPUs)"
    )
    print(f"unsharded: {out['unsharded_steps_per_s'] / 1e6:.2f} M steps/s")
    print(f"{'devices':>8} {'compile s':>10} {'M steps/s':>10} {'spread':>14} {'vs 1 dev':>9}")
    for r in out["rows"]:
        lo, hi = (x / 1e6 for x in r["spread"])
        print(
            f"{r['devices']:>8} {r['compile_s']:>10.2f} {r['steps_per_s'] / 1e6:>10.2f} "
            f"{lo:>6.2f}-{hi:<7.2f} {r['ratio']:>8.2f}x"
        )
    if args.json:
        write_json(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(device_requests.run_main(main, "python -m jaxsample.bench.devices"))

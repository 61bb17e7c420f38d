"""Prioritized replay throughput: `jaxsample.replay.prioritized` against
flashbax's prioritised trajectory buffer (a sum tree), side by side.

A runner (it jits): ``python -m jaxsample.bench.replay [--B 64] [--capacity
4096] [--batch-size 256] [--reps 7]``. Both buffers hold the same pytree (one
step of a CartPole sampler's ``examples``) in ``B`` rings of ``capacity``
steps, full; timed per call, repetitions interleaved
(`interleave`):

* ``sample``: ``batch_size`` single steps (sequences of length 1) by priority;
* ``update``: new priorities for ``batch_size`` sampled steps, the state
  donated (in place).

flashbax is an optional peer (``pip install flashbax``), not a dependency:
without it only jaxsample's rows are measured.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections.abc import Sequence
from typing import Any

import gymnax
import jax
import jax.numpy as jnp

from jaxsample.agents.base import RandomAgent
from jaxsample.bench.measure import interleave
from jaxsample.replay import prioritized
from jaxsample.sampler import make_sampler
from jaxsample.types import BatchSpec

__all__ = ["main", "prioritized_throughput"]


def _jaxsample_fns(examples: Any, B: int, capacity: int, N: int) -> dict[str, Any]:
    rep = prioritized(examples, B, capacity)
    steps = jax.tree.map(
        lambda s: jnp.ones((capacity, B, *s.shape), s.dtype), examples.replace(bootstrap_value=None)
    )
    state = jax.jit(rep.add)(rep.init(), steps)
    sample = jax.jit(rep.sample, static_argnums=(2, 3))
    update = jax.jit(rep.update_priorities, donate_argnums=0)
    key = jax.random.key(0)
    _, info = jax.block_until_ready(sample(state, key, N, 1))
    priority = jax.random.uniform(key, (N,), jnp.float32) + 0.1
    box = {"state": state}

    def do_sample() -> None:
        jax.block_until_ready(sample(box["state"], key, N, 1))

    def do_update() -> None:
        box["state"] = jax.block_until_ready(update(box["state"], info, priority))

    do_update()
    return {"jaxsample sample": do_sample, "jaxsample update": do_update}


def _flashbax_fns(examples: Any, B: int, capacity: int, N: int) -> dict[str, Any]:
    import flashbax as fbx  # an optional peer

    buf = fbx.make_prioritised_trajectory_buffer(
        add_batch_size=B,
        sample_batch_size=N,
        sample_sequence_length=1,
        period=1,
        min_length_time_axis=1,
        max_length_time_axis=capacity,
    )
    step = jax.tree.map(
        lambda s: jnp.ones(s.shape, s.dtype), examples.replace(bootstrap_value=None)
    )
    steps = jax.tree.map(lambda x: jnp.broadcast_to(x, (B, capacity, *x.shape)), step)
    state = jax.jit(buf.add)(jax.jit(buf.init)(step), steps)
    sample = jax.jit(buf.sample)
    update = jax.jit(buf.set_priorities, donate_argnums=0)
    key = jax.random.key(0)
    batch = jax.block_until_ready(sample(state, key))
    priority = jax.random.uniform(key, (N,), jnp.float32) + 0.1
    box = {"state": state}

    def do_sample() -> None:
        jax.block_until_ready(sample(box["state"], key))

    def do_update() -> None:
        box["state"] = jax.block_until_ready(update(box["state"], batch.indices, priority))

    do_update()
    return {"flashbax sample": do_sample, "flashbax update": do_update}


def prioritized_throughput(
    B: int = 64, capacity: int = 4096, batch_size: int = 256, reps: int = 7, calls: int = 20
) -> dict[str, dict[str, float]]:
    """Median seconds per call and steps per second of sample and update, for
    jaxsample's prioritized replayer and (when installed) flashbax's.

    Returns ``{"<impl> <op>": {"seconds": s, "steps_per_second": batch_size / s}}``.
    """
    env, env_params = gymnax.make("CartPole-v1")
    sampler = make_sampler(
        env, env_params, RandomAgent(env.action_space(env_params)), BatchSpec(1, B)
    )
    fns = _jaxsample_fns(sampler.examples, B, capacity, batch_size)
    with contextlib.suppress(ImportError):  # flashbax not installed: jaxsample only
        fns.update(_flashbax_fns(sampler.examples, B, capacity, batch_size))
    times = interleave(fns, reps=reps, calls=calls)
    seconds = {name: statistics.median(t) for name, t in times.items()}
    return {name: {"seconds": s, "steps_per_second": batch_size / s} for name, s in seconds.items()}


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m jaxsample.bench.replay``: print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--B", type=int, default=64)
    p.add_argument("--capacity", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args(argv)
    result = prioritized_throughput(args.B, args.capacity, args.batch_size, args.reps)
    print(
        f"prioritized replay on {jax.devices()[0].platform}: B={args.B}, "
        f"capacity={args.capacity} ({args.B * args.capacity} steps), "
        f"batch_size={args.batch_size}"
    )
    for name, row in result.items():
        print(
            f"  {name:18s} {row['seconds'] * 1e6:10.1f} us/call "
            f"{row['steps_per_second']:14,.0f} steps/s"
        )


if __name__ == "__main__":
    main()

"""Overhead benchmark: ``collect`` against a bare ``lax.scan(vmap(env.step))``.

Both programs run in one process, interleaved repetition by repetition, and the
medians are compared, so the machine's noise hits both alike. Compile time is
measured separately from run time.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnax
import jax
import jax.numpy as jnp

from jaxsample.agents.base import RandomAgent
from jaxsample.sampler import make_sampler
from jaxsample.types import BatchSpec


def bare_rollout(env: Any, env_params: Any, T: int, B: int) -> tuple[Callable, Callable]:
    """The hand-written floor: ``scan(vmap(env.step))`` with random actions.

    Stores observation, action, reward and done ``[T, B]``, as a hand-written
    rollout that a user would compare against.

    Returns:
      ``(init(key) -> carry, run(carry) -> (carry, (obs, action, reward, done)))``.
    """
    space = env.action_space(env_params)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def init(key: jax.Array):
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, B), env_params)
        return key, state, obs

    def run(carry):
        def body(c, _):
            key, state, obs = c
            key, k_action, k_step = jax.random.split(key, 3)
            action = jax.vmap(space.sample)(jax.random.split(k_action, B))
            next_obs, state, reward, terminated, truncated, _ = step(
                jax.random.split(k_step, B), state, action, env_params
            )
            done = jnp.logical_or(terminated, truncated)
            return (key, state, next_obs), (obs, action, reward, done)

        return jax.lax.scan(body, carry, None, T)

    return init, run


def _time_call(fn: Callable, arg: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = jax.block_until_ready(fn(arg))
    return out, time.perf_counter() - start


def _nbytes(tree: Any) -> int:
    return sum(math.prod(x.shape) * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def _peak_bytes(compiled: Any) -> int | None:
    try:
        m = compiled.memory_analysis()
    except Exception:  # some backends do not report it
        return None
    if m is None:
        return None
    return int(
        m.temp_size_in_bytes
        + m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
    )


def overhead(
    env_name: str,
    *,
    B: int = 1024,
    T: int = 128,
    reps: int = 9,
    final_observation: str = "sparse",
    seed: int = 0,
) -> dict[str, Any]:
    """Measure ``collect`` (RandomAgent, default options) against the bare floor.

    Returns a dict with ``env``, ``B``, ``T``, compile seconds of both,
    median/min/max run seconds of both, steps per second of both, ``ratio``
    (sampler throughput / bare throughput, higher is better), and the
    sampler's peak memory relative to the size of the Batch it returns.
    """
    env, env_params = gymnax.make(env_name)
    agent = RandomAgent(env.action_space(env_params))
    sampler = make_sampler(
        env, env_params, agent, BatchSpec(T, B), final_observation=final_observation
    )
    key = jax.random.key(seed)
    bare_init, bare_run = bare_rollout(env, env_params, T, B)

    collect = jax.jit(lambda s: sampler.collect(s, ()), donate_argnums=0)
    bare = jax.jit(bare_run, donate_argnums=0)
    state = jax.jit(sampler.init)(key, ())
    carry = jax.jit(bare_init)(key)

    t0 = time.perf_counter()
    compiled = collect.lower(state).compile()
    sampler_compile = time.perf_counter() - t0
    t0 = time.perf_counter()
    bare.lower(carry).compile()
    bare_compile = time.perf_counter() - t0

    (state, batch), _ = _time_call(collect, state)  # warm-up
    (carry, _), _ = _time_call(bare, carry)
    batch_bytes = _nbytes(batch)
    del batch
    times: dict[str, list[float]] = {"sampler": [], "bare": []}
    for _ in range(reps):
        (state, batch), dt = _time_call(collect, state)
        del batch
        times["sampler"].append(dt)
        (carry, _), dt = _time_call(bare, carry)
        times["bare"].append(dt)
    med = {k: statistics.median(v) for k, v in times.items()}
    peak = _peak_bytes(compiled)
    return {
        "env": env_name,
        "B": B,
        "T": T,
        "final_observation": final_observation,
        "compile_s": {"sampler": sampler_compile, "bare": bare_compile},
        "run_s": {k: {"median": med[k], "min": min(v), "max": max(v)} for k, v in times.items()},
        "steps_per_s": {k: T * B / med[k] for k in med},
        "ratio": med["bare"] / med["sampler"],
        "batch_bytes": batch_bytes,
        "peak_bytes": peak,
        "peak_over_batch": None if peak is None else peak / batch_bytes,
    }


def compile_scaling(env_name: str = "CartPole-v1", B: int = 64, Ts: Sequence[int] = (16, 1024)):
    """Compile seconds of ``collect`` for each ``T`` (flat: it is a scan, not unrolled)."""
    env, env_params = gymnax.make(env_name)
    agent = RandomAgent(env.action_space(env_params))
    out = {}
    for T in Ts:
        sampler = make_sampler(env, env_params, agent, BatchSpec(T, B))
        state = sampler.init(jax.random.key(0), ())
        fn = jax.jit(lambda s, sampler=sampler: sampler.collect(s, ()))
        t0 = time.perf_counter()
        fn.lower(state).compile()
        out[T] = time.perf_counter() - t0
    return out


def evaluator_scaling(
    env_name: str = "CartPole-v1",
    *,
    n_envs: int = 16,
    max_trajectories: int | None = 16,
    mode: str = "rlpyt",
    max_T: int = 500,
    factors: Sequence[int] = (1, 10, 100),
    reps: int = 9,
    scan_baseline: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Run time of ``make_evaluator(...).run`` as ``max_steps`` grows, the wanted
    trajectories fixed: its ``lax.while_loop`` stops once they are in, so the
    time should stay flat while the budget grows ``factors``-fold.

    For each factor ``f`` the evaluator gets ``max_steps = n_envs * max_T * f``
    (RandomAgent, the same key, so the same trajectories and steps taken). As a
    contrast, ``scan_baseline`` also times :func:`bare_rollout` over the whole
    budget (``max_T * f`` steps of ``n_envs`` envs), what a fixed-length scan
    pays. Repetitions are interleaved over the factors; medians are reported.

    Returns:
      A dict with the settings and ``rows``: one dict per factor with
      ``max_steps``, ``max_T``, ``steps_taken`` (steps per env the loop ran),
      ``n_completed``, ``compile_s``, ``run_s`` (median), ``run_s_min``,
      ``run_s_max`` and, with ``scan_baseline``, ``scan_s`` (median).
    """
    from jaxsample.evaluation import make_evaluator

    env, env_params = gymnax.make(env_name)
    agent = RandomAgent(env.action_space(env_params))
    key = jax.random.key(seed)
    runs, scans, rows = {}, {}, {}
    for f in factors:
        ev = make_evaluator(
            env,
            env_params,
            agent,
            n_envs=n_envs,
            max_steps=n_envs * max_T * f,
            max_trajectories=max_trajectories,
            mode=mode,
        )
        fn = jax.jit(lambda k, ev=ev: ev.run_with_stats(k, ()))
        t0 = time.perf_counter()
        runs[f] = fn.lower(key).compile()
        compile_s = time.perf_counter() - t0
        _, stats = jax.block_until_ready(runs[f](key))  # warm-up
        rows[f] = {
            "factor": f,
            "max_steps": ev.max_steps,
            "max_T": ev.max_T,
            "steps_taken": int(stats.steps),
            "n_completed": int(stats.n_completed),
            "compile_s": compile_s,
        }
        if scan_baseline:
            init, run = bare_rollout(env, env_params, ev.max_T, n_envs)
            scans[f] = (jax.jit(init)(key), jax.jit(run))
            jax.block_until_ready(scans[f][1](scans[f][0]))  # compile + warm-up
    times: dict[int, list[float]] = {f: [] for f in factors}
    scan_times: dict[int, list[float]] = {f: [] for f in factors}
    for _ in range(reps):
        for f in factors:
            times[f].append(_time_call(runs[f], key)[1])
            if scan_baseline:
                carry, run = scans[f]
                scan_times[f].append(_time_call(run, carry)[1])
    for f in factors:
        rows[f]["run_s"] = statistics.median(times[f])
        rows[f]["run_s_min"] = min(times[f])
        rows[f]["run_s_max"] = max(times[f])
        if scan_baseline:
            rows[f]["scan_s"] = statistics.median(scan_times[f])
    return {
        "env": env_name,
        "n_envs": n_envs,
        "max_trajectories": max_trajectories,
        "mode": mode,
        "reps": reps,
        "rows": [rows[f] for f in factors],
    }

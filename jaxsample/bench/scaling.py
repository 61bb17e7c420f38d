"""Scaling measurements beside the grid: compile time of ``collect`` against
``T``, and the evaluator's run time as its step budget grows."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import gymnax
import jax

from jaxsample.agents.base import RandomAgent
from jaxsample.bench.measure import bare_rollout, compile_timed, interleave, time_once
from jaxsample.sampler import make_sampler
from jaxsample.types import BatchSpec


def compile_scaling(env_name: str = "CartPole-v1", B: int = 64, Ts: Sequence[int] = (16, 1024)):
    """Compile seconds of ``collect`` for each ``T`` (flat: it is a scan, not unrolled)."""
    env, env_params = gymnax.make(env_name)
    agent = RandomAgent(env.action_space(env_params))
    out = {}
    for T in Ts:
        sampler = make_sampler(env, env_params, agent, BatchSpec(T, B))
        state = sampler.init(jax.random.key(0), ())
        fn = jax.jit(lambda s, sampler=sampler: sampler.collect(s, ()))
        out[T] = compile_timed(fn, state)[1]
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
    pays. Repetitions are interleaved over the factors (:func:`interleave`);
    medians are reported.

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
    runs: dict[str, Callable[[], Any]] = {}
    rows: dict[int, dict[str, Any]] = {}
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
        run_f, compile_s = compile_timed(jax.jit(lambda k, ev=ev: ev.run_with_stats(k, ())), key)
        _, stats = jax.block_until_ready(run_f(key))  # warm-up
        runs[f"run{f}"] = functools.partial(time_once, run_f, key)
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
            scan = functools.partial(time_once, jax.jit(run), jax.jit(init)(key))
            scan()  # compile + warm-up
            runs[f"scan{f}"] = scan
    times = interleave(runs, reps=reps)
    for f in factors:
        ts = times[f"run{f}"]
        rows[f].update(run_s=statistics.median(ts), run_s_min=min(ts), run_s_max=max(ts))
        if scan_baseline:
            rows[f]["scan_s"] = statistics.median(times[f"scan{f}"])
    return {
        "env": env_name,
        "n_envs": n_envs,
        "max_trajectories": max_trajectories,
        "mode": mode,
        "reps": reps,
        "rows": [rows[f] for f in factors],
    }

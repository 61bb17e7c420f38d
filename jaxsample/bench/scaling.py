"""Compile and scaling measurements beside the grid: ``collect``'s compile
against the bare scan's ([`sampler_compile`][jaxsample.bench.sampler_compile]), ``collect``'s
compile
time against ``T``, and the evaluator's run time as its step budget grows."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import gymnax
import jax

from jaxsample._checks import check_int
from jaxsample.agents.base import RandomAgent
from jaxsample.bench.measure import (
    Part,
    bare_plan,
    bare_rollout,
    compare_programs,
    compile_timed,
    interleave,
    random_plan,
    time_once,
)
from jaxsample.bench.report import end_to_end_result, format_programs

#: [`sampler_compile`][jaxsample.bench.sampler_compile]'s envs: a classic-control env, a MinAtar
#: env, a Brax env.
SAMPLER_COMPILE_ENVS = ("CartPole-v1", "Breakout-MinAtar", "brax/inverted_pendulum")


def sampler_compile(
    envs: Sequence[str] = SAMPLER_COMPILE_ENVS,
    *,
    B: int = 1024,
    T: int = 128,
    compile_reps: int = 5,
    reps: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """``collect``'s compile time against the bare floor's, env by env.

    For each env: ``collect`` of a [`RandomAgent`][jaxsample.agents.RandomAgent]
    (default options: the ``"random"`` method of the grid) and the bare
    ``scan(vmap(env.step))`` ([`bare_rollout`][jaxsample.bench.bare_rollout]),
    compiled from scratch ``compile_reps`` times each, interleaved, after an
    untimed round (`compare_programs`: trace,
    lower and XLA's compile timed apart, the sizes beside them), then run
    ``reps`` times, interleaved. One compile of each, as the grid's
    ``compile_s`` is, swings by a third on a loaded machine; these medians
    are what a ratio can be read from.

    Args:
      envs: gymnax or ``<suite>/<env>`` names (``suites.make``).
      B: the batch's envs (a batch is ``[T, B]``).
      T: the batch's steps per env.
      compile_reps: fresh compiles of each program.
      reps: timed runs of each program.
      seed: the key of both programs' initial states.

    Returns:
      ``{"settings", "envs": {env: {"compile_s", "size", "run_s", "ratios"}},
      "skipped": {env: why}}`` (an env whose suite is not installed or does
      not import is skipped),
      ``compile_s`` / ``size`` / ``run_s`` keyed ``"collect"`` and ``"bare"``
      as `compare_programs` gives them, and
      ``ratios["collect/bare"] = {"run", "compile"}`` (medians; lower is better).
    """
    from jaxsample.envs import suites

    if isinstance(envs, str) or not all(isinstance(n, str) for n in envs):
        raise TypeError(f"envs must be a sequence of env names, got {envs!r}")
    check_int("B", B, 1)
    check_int("T", T, 1)
    check_int("compile_reps", compile_reps, 1)
    check_int("reps", reps, 1)
    # Every env is made (or skipped) before anything compiles: a bad name is
    # an error at once, not after the envs before it were measured.
    made: dict[str, tuple[Any, Any]] = {}
    skipped: dict[str, str] = {}
    for name in envs:
        suite = name.split("/", 1)[0] if "/" in name else None
        missing = suite in suites.SUITES and suites.unavailable(suite)
        if missing:  # an optional suite: said, not an error
            skipped[name] = missing
        else:
            made[name] = suites.make(name)
    key = jax.random.key(seed)
    out: dict[str, Any] = {}
    for name, (env, env_params) in made.items():

        def build(env: Any = env, env_params: Any = env_params) -> dict[str, Any]:
            plans = {
                "collect": random_plan(env, env_params, T, B),
                "bare": bare_plan(env, env_params, T, B),
            }
            return {
                k: ([Part(jax.jit(plan.fn), {})], (jax.jit(plan.init)(key), *plan.args))
                for k, plan in plans.items()
            }

        measured = compare_programs(build, reps=reps, compile_reps=compile_reps)
        result = end_to_end_result({}, measured, [("collect", "bare")], {})
        out[name] = {k: result[k] for k in ("compile_s", "size", "run_s", "ratios")}
    settings = {"B": B, "T": T, "compile_reps": compile_reps, "reps": reps}
    return {"settings": settings, "envs": out, "skipped": skipped}


def format_sampler_compile(result: dict[str, Any]) -> str:
    """[`sampler_compile`][jaxsample.bench.sampler_compile]'s tables, one per env."""
    s = result["settings"]
    skipped = [f"  {env}: skipped, {why}" for env, why in result["skipped"].items()]
    return "\n".join(
        [
            format_programs(
                f"collect vs the bare scan, compile ({env}, B={s['B']}, T={s['T']}; medians of "
                f"{s['compile_reps']} fresh compiles and {s['reps']} runs, interleaved):",
                {**r, "final_return": {}},
            )
            for env, r in result["envs"].items()
        ]
        + skipped
    )


def compile_scaling(env_name: str = "CartPole-v1", B: int = 64, Ts: Sequence[int] = (16, 1024)):
    """Compile seconds of ``collect`` for each ``T`` (flat: it is a scan, not unrolled)."""
    env, env_params = gymnax.make(env_name)
    out = {}
    for T in Ts:
        plan = random_plan(env, env_params, T, B)
        out[T] = compile_timed(jax.jit(plan.fn), plan.init(jax.random.key(0)), *plan.args)[1]
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
    contrast, ``scan_baseline`` also times [`bare_rollout`][jaxsample.bench.bare_rollout] over the
    whole
    budget (``max_T * f`` steps of ``n_envs`` envs), what a fixed-length scan
    pays. Repetitions are interleaved over the factors (`interleave`);
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

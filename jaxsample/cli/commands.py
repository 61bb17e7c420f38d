"""The ``envs``, ``collect`` and ``bench`` subcommands (their parsers are in
`jaxsample.cli.parser`).

``envs`` lists the env names (gymnax and the installed suites); ``collect``
compiles a sampler and reports its speed; ``bench`` measures a grid of
environments and sizes. JAX is imported inside the commands: the parser
imports this module, and ``--help`` and argument errors load no JAX.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import time
from collections.abc import Sequence
from typing import Any

from jaxsample.cli.base import check_output, start_compiling
from jaxsample.errors import UsageError


def envs(args: argparse.Namespace) -> int:
    from jaxsample.envs import suites

    for suite, names in suites.available().items():
        prefix = "" if suite == "gymnax" else f"{suite}/"
        print(f"{suite} ({len(names)}): " + " ".join(prefix + n for n in names))
    found = suites.available()
    broken = {}
    for suite, (package, extra, _, _) in suites.SUITES.items():
        if suite not in found and importlib.util.find_spec(package) is not None:
            broken[extra] = suites.registry.import_error(package)
    missing = sorted({v[1] for k, v in suites.SUITES.items() if k not in found} - set(broken))
    if missing:
        print("not installed: " + ", ".join(f"jaxsample[{m}]" for m in missing))
    for why in broken.values():
        print(f"not usable: {why}")
    return 0


def _sampler(args: argparse.Namespace) -> Any:
    """``collect``'s sampler: a random agent on ``--env``, ``--T`` x ``--B``;
    a bad setting is a `UsageError` naming its flag."""
    from jaxsample.agents.base import RandomAgent
    from jaxsample.envs import suites
    from jaxsample.sampler import make_sampler
    from jaxsample.types import BatchSpec

    try:
        env, env_params = suites.make(args.env)
    except Exception as e:  # gymnax raises bare ValueErrors for unknown names
        raise UsageError(f"--env {args.env!r}: {e}") from None
    agent = RandomAgent(env.action_space(env_params))
    flags = {
        "batch_spec.T": "--T",
        "batch_spec.B": "--B",
        "discount": "--discount",
        "max_decorrelation_steps": "--decorrelation",
        "reset_mode": "--reset-mode",
    }
    try:
        return make_sampler(
            env,
            env_params,
            agent,
            BatchSpec(args.T, args.B),
            max_decorrelation_steps=args.decorrelation,
            reset_mode=args.reset_mode,
            discount=args.discount,
        )
    except (TypeError, ValueError) as e:
        message = str(e)
        for name, flag in flags.items():  # name the flag, not the Python argument
            message = message.replace(name, flag)
        raise UsageError(message) from None


def _batches(args: argparse.Namespace, compiled: Any, state: Any) -> tuple[list, list[float]]:
    """``(summaries, seconds)`` of ``--batches`` collects, one line each."""
    import jax

    from jaxsample.traj_info import summarize

    summarize_jit = jax.jit(summarize)
    stats = []
    times = []
    for i in range(args.batches):
        t0 = time.perf_counter()
        state, batch = compiled(state, ())
        summary = jax.device_get(summarize_jit(batch.traj_infos))
        dt = time.perf_counter() - t0
        times.append(dt)
        stats.append(summary)
        print(
            f"  batch {i + 1}/{args.batches}: {args.T * args.B / dt:,.0f} steps/s, "
            f"{int(summary['n_trajectories'])} trajectories, "
            f"return {summary['episode_return_mean']:.2f}, "
            f"length {summary['length_mean']:.1f}",
            flush=True,
        )
    return stats, times


def _collect_result(
    args: argparse.Namespace, stats: list, times: list[float], compile_s: float
) -> dict[str, Any]:
    """``collect``'s figures: the median batch's speed and the episodes' means."""
    steady = sorted(times[1:] or times)[len(times[1:] or times) // 2]
    n = sum(float(s["n_trajectories"]) for s in stats)

    def mean(name: str) -> float:
        tot = sum(
            float(s[f"{name}_mean"]) * float(s["n_trajectories"])
            for s in stats
            if s["n_trajectories"]
        )
        return tot / n if n else math.nan

    return {
        "env": args.env,
        "T": args.T,
        "B": args.B,
        "reset_mode": args.reset_mode,
        "compile_seconds": compile_s,
        "median_batch_seconds": steady,
        "steps_per_second": args.T * args.B / steady,
        "trajectories": n,
        "episode_return_mean": mean("episode_return"),
        "length_mean": mean("length"),
    }


def _check_collect(args: argparse.Namespace) -> None:
    """``collect``'s sizes, before JAX is imported (the sampler checks them
    again, with the rest, once it is built)."""
    for flag, value, minimum in (
        ("--batches", args.batches, 1), ("--T", args.T, 1), ("--B", args.B, 1),
        ("--decorrelation", args.decorrelation, 0),
    ):  # fmt: skip
        if value < minimum:
            raise UsageError(f"{flag} must be >= {minimum}, got {value}")
    if not 0.0 <= args.discount <= 1.0:
        raise UsageError(f"--discount must be in [0, 1], got {args.discount}")
    check_output(args.json, "--json")


def collect(args: argparse.Namespace) -> int:
    _check_collect(args)
    start_compiling(args)
    import jax

    from jaxsample.compile_cache import CompileWatch

    sampler = _sampler(args)
    print(
        f"jaxsample collect: {args.env}, T={args.T} x B={args.B}, reset_mode={args.reset_mode}, "
        f"backend={jax.default_backend()} ({jax.device_count()} device(s))",
        flush=True,
    )
    init = jax.jit(sampler.init)
    collect = jax.jit(sampler.collect, donate_argnums=0)
    key = jax.random.key(args.seed)

    t0 = time.perf_counter()
    state = jax.block_until_ready(init(key, ()))
    init_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with CompileWatch() as watch:
        compiled = collect.lower(state, ()).compile()
    compile_s = time.perf_counter() - t0
    print(f"  init (compile + decorrelation): {init_s:.2f} s, collect {watch.summary(compile_s)}")
    result = _collect_result(args, *_batches(args, compiled, state), compile_s)
    print(
        f"done: {result['steps_per_second']:,.0f} steps/s (median batch), "
        f"compile {compile_s:.2f} s, "
        f"{int(result['trajectories'])} trajectories, "
        f"mean return {result['episode_return_mean']:.2f}, "
        f"mean length {result['length_mean']:.1f}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


def sizes(tokens: Sequence[str] | None, flag: str) -> tuple[int, ...] | None:
    """``--B``/``--T`` values: ints, or ``LO:HI`` for LO, 2 LO, 4 LO, ... <= HI."""
    if tokens is None:
        return None
    out: list[int] = []
    for token in tokens:
        try:
            if ":" in token:
                lo, hi = (int(x) for x in token.split(":"))
                if lo < 1 or hi < lo:
                    raise ValueError
                while lo <= hi:
                    out.append(lo)
                    lo *= 2
            else:
                value = int(token)
                if value < 1:
                    raise ValueError
                out.append(value)
        except ValueError:
            raise UsageError(
                f"{flag} {token!r}: give positive ints, or LO:HI for LO, 2*LO, 4*LO, ... <= HI"
            ) from None
    return tuple(out)


def _grid_spec(args: argparse.Namespace) -> Any:
    """``bench``'s grid (``--quick``'s, with the flags given on top)."""
    from jaxsample import bench

    overrides = {
        "envs": args.envs,
        "Bs": sizes(args.B, "--B"),
        "Ts": sizes(args.T, "--T"),
        "methods": args.methods,
        "reps": args.reps,
        "warmup": args.warmup,
        "peer_max_B": args.peer_max_B,
        "max_call_seconds": args.max_call_seconds,
        "seed": args.seed,
    }
    if args.memory_budget_gb is not None:
        if not args.memory_budget_gb > 0:
            raise UsageError(f"--memory-budget-gb must be > 0, got {args.memory_budget_gb}")
        overrides["memory_budget_bytes"] = int(args.memory_budget_gb * 2**30)
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if args.max_call_seconds is not None and args.max_call_seconds <= 0:
        overrides["max_call_seconds"] = None  # 0: no limit
    try:
        return bench.GridSpec.quick(**overrides) if args.quick else bench.GridSpec(**overrides)
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None


def _extras(args: argparse.Namespace) -> list[tuple[str, bool, str, Any, Any]]:
    """``bench``'s measurements beside the grid: ``(result key, asked for,
    headline, measure(), format(figures))`` each, in the order they run."""
    from jaxsample import bench
    from jaxsample.bench import dqn_training, training
    from jaxsample.bench import ppo as ppo_bench

    return [
        ("training", args.quick if args.training is None else args.training,
         "PPO end to end: train / reference_run / purejaxrl ...",
         training.training_comparison, training.format_training),
        ("dqn_training", args.dqn_training, "DQN end to end: train / reference_run ...",
         dqn_training.dqn_training, dqn_training.format_dqn_training),
        ("ppo_overhead", args.ppo_overhead, "PPO with jaxsample vs a hand-written rollout ...",
         ppo_bench.ppo_overhead, ppo_bench.format_overhead),
        ("sampler_compile", args.sampler_compile, "collect vs the bare scan, compile ...",
         bench.sampler_compile, bench.format_sampler_compile),
    ]  # fmt: skip


def bench_grid(args: argparse.Namespace) -> int:
    check_output(args.json, "--json")
    check_output(args.plot, "--plot")
    spec = _grid_spec(args)  # imports JAX, compiles nothing
    start_compiling(args)
    import jax

    from jaxsample import bench

    print(
        f"jaxsample bench{' --quick' if args.quick else ''}: {', '.join(spec.envs)}; "
        f"B={list(spec.Bs)}; T={list(spec.Ts)}; methods={list(spec.methods)}; "
        f"{spec.reps} interleaved reps; backend={jax.default_backend()} "
        f"({jax.devices()[0].device_kind})",
        flush=True,
    )
    extras = _extras(args)
    result = bench.run_grid(spec, progress=lambda line: print("  " + line, flush=True))
    for key, asked, headline, measure, _ in extras:
        if asked:
            print(headline, flush=True)
            result[key] = measure()
    if args.compile_scaling:
        scaling = bench.compile_scaling(Ts=(16, 1024))
        result["compile_scaling"] = {
            "env": "CartPole-v1",
            "B": 64,
            "compile_s": {str(t): s for t, s in scaling.items()},
        }
    print(bench.format_table(result))
    for key, _, _, _, show in extras:
        if key in result:
            print(show(result[key]))
    if args.compile_scaling:
        print(
            "collect compile time vs T (CartPole-v1, B=64): "
            + ", ".join(f"T={t}: {s:.2f} s" for t, s in scaling.items())
        )
    _bench_outputs(args, result)
    return 0


def _bench_outputs(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """``bench``'s README table, JSON and PNG, as asked."""
    from jaxsample import bench

    if args.markdown:
        print(bench.markdown_table(result))
    print(f"measured in {result['wall_s']:.1f} s")
    if args.json:
        bench.write_json(result, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        if result["cells"]:
            bench.plot(result, args.plot)
            print(f"wrote {args.plot}")
        else:
            print(f"nothing measured: no plot written to {args.plot}")

"""Command line: ``jaxsample train``, ``eval``, ``collect``, ``bench`` and ``envs``.

``jaxsample train`` trains PPO or DQN end to end (every config field a flag,
logs, checkpoints, a live display); ``jaxsample eval`` evaluates a train
checkpoint; ``jaxsample collect`` compiles a sampler and reports its speed;
``jaxsample bench`` measures a grid of environments and sizes;
``jaxsample envs`` lists the env names (gymnax and the installed suites).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
import typing
from collections.abc import Sequence

import jax

from jaxsample.cli_base import UsageError, check_output
from jaxsample.cli_config import config_flag_values

ENV_HELP = "a gymnax name or <suite>/<env> (jaxsample envs lists them)"


def _version() -> str:
    from jaxsample import __version__

    return __version__


def _envs(args: argparse.Namespace) -> int:
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


def _collect(args: argparse.Namespace) -> int:
    from jaxsample.agents.base import RandomAgent
    from jaxsample.compile_cache import CompileWatch
    from jaxsample.envs import suites
    from jaxsample.sampler import make_sampler
    from jaxsample.traj_info import summarize
    from jaxsample.types import BatchSpec

    if args.batches < 1:
        raise UsageError(f"--batches must be >= 1, got {args.batches}")
    check_output(args.json, "--json")
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
        sampler = make_sampler(
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
    steady = sorted(times[1:] or times)[len(times[1:] or times) // 2]
    n = sum(float(s["n_trajectories"]) for s in stats)

    def mean(name: str) -> float:
        tot = sum(
            float(s[f"{name}_mean"]) * float(s["n_trajectories"])
            for s in stats
            if s["n_trajectories"]
        )
        return tot / n if n else math.nan

    result = {
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
    print(
        f"done: {result['steps_per_second']:,.0f} steps/s (median batch), "
        f"compile {compile_s:.2f} s, "
        f"{int(n)} trajectories, mean return {result['episode_return_mean']:.2f}, "
        f"mean length {result['length_mean']:.1f}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


def _sizes(tokens: Sequence[str] | None, flag: str) -> tuple[int, ...] | None:
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


def _bench(args: argparse.Namespace) -> int:
    from jaxsample import bench
    from jaxsample.bench import training

    overrides = {
        "envs": args.envs,
        "Bs": _sizes(args.B, "--B"),
        "Ts": _sizes(args.T, "--T"),
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
        spec = bench.GridSpec.quick(**overrides) if args.quick else bench.GridSpec(**overrides)
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None
    check_output(args.json, "--json")
    check_output(args.plot, "--plot")
    print(
        f"jaxsample bench{' --quick' if args.quick else ''}: {', '.join(spec.envs)}; "
        f"B={list(spec.Bs)}; T={list(spec.Ts)}; methods={list(spec.methods)}; "
        f"{spec.reps} interleaved reps; backend={jax.default_backend()} "
        f"({jax.devices()[0].device_kind})",
        flush=True,
    )
    result = bench.run_grid(spec, progress=lambda line: print("  " + line, flush=True))
    if args.quick if args.training is None else args.training:
        print("PPO end to end: train / reference_run / purejaxrl ...", flush=True)
        result["training"] = training.training_comparison()
    if args.compile_scaling:
        scaling = bench.compile_scaling(Ts=(16, 1024))
        result["compile_scaling"] = {
            "env": "CartPole-v1",
            "B": 64,
            "compile_s": {str(t): s for t, s in scaling.items()},
        }
    print(bench.format_table(result))
    if "training" in result:
        print(training.format_training(result["training"]))
    if args.compile_scaling:
        print(
            "collect compile time vs T (CartPole-v1, B=64): "
            + ", ".join(f"T={t}: {s:.2f} s" for t, s in scaling.items())
        )
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
    return 0


def _train(args: argparse.Namespace) -> int:
    from jaxsample.cli_train import train

    return train(args)


def _eval(args: argparse.Namespace) -> int:
    from jaxsample.cli_train import evaluate

    return evaluate(args)


def _train_algo(argv: Sequence[str]) -> str:
    """The ``--algo`` of a train command line (or of its ``--config`` file):
    it decides which config's fields become flags."""
    from jaxsample.cli_config import file_algo, load_config_file

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--algo", default=None)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    algo = known.algo
    if algo is None and known.config:
        algo = file_algo(load_config_file(known.config))
    return algo if algo in ("ppo", "ppo-rnn", "dqn") else "ppo"


def _add_train(sub: argparse._SubParsersAction, algo: str) -> None:
    from jaxsample.cli_config import add_config_flags

    p = sub.add_parser(
        "train",
        help="train an agent end to end in one compiled program (every config field a flag)",
        description="Train PPO or DQN on a gymnax env, every seed (and every swept setting) "
        "under one jax.vmap. Settings: the config's defaults, then --config FILE (TOML or "
        "YAML), then the flags. A list (--lr 1e-3,2.5e-4) sweeps a hyperparameter in the "
        f"same program. The fields shown are --algo {algo}'s; `jaxsample train --algo dqn "
        "--help` shows DQN's.",
        formatter_class=_DefaultsShown,
    )
    p.add_argument("--algo", default=None, choices=("ppo", "ppo-rnn", "dqn"), help="(default: ppo)")
    p.add_argument("--env", default=None, help=ENV_HELP + " (default: CartPole-v1)")
    p.add_argument("--config", default=None, help="a TOML or YAML file of settings")
    p.add_argument("--seeds", type=int, default=None, help="seeds trained together (default: 1)")
    p.add_argument("--seed", type=int, default=None, help="the base seed (default: 0)")
    p.add_argument(
        "--mask-velocity",
        action="store_true",
        default=None,
        help="hide velocities (a POMDP; the tuned recurrent preset)",
    )
    p.add_argument(
        "--chunks",
        type=int,
        default=None,
        help="compiled chunks: progress updates, logs and checkpoints (default: 20)",
    )
    p.add_argument("--json", default=None, help="write config, versions, figures and curves here")
    p.add_argument("--plot", default=None, help="write a PNG learning curve to this file")
    p.add_argument(
        "--csv",
        default=None,
        help="every metric per run and iteration (default: the --json path with .csv, "
        "else train.csv)",
    )
    p.add_argument("--tensorboard", default=None, metavar="DIR", help="TensorBoard event files")
    p.add_argument("--wandb", action="store_true", help="log to Weights & Biases")
    p.add_argument("--wandb-project", default="jaxsample", help="W&B project")
    p.add_argument(
        "--checkpoint-dir",
        default=None,
        metavar="DIR",
        help="save after every chunk; started again with the same settings, resume",
    )
    add_config_flags(p, algo)
    p.set_defaults(func=_train)

    p = sub.add_parser(
        "eval",
        help="evaluate the greedy policy of a `train --checkpoint-dir` checkpoint",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="a --checkpoint-dir")
    p.add_argument("--episodes", type=int, default=10, help="greedy episodes per run")
    p.add_argument("--seed", type=int, default=0, help="the evaluation's key")
    p.add_argument("--json", default=None, help="write the per-run table here")
    p.set_defaults(func=_eval)


#: The subcommands that compile programs (they take --no-compile-cache).
_COMPILING = ("train", "eval", "collect", "bench")


def _enable_compile_cache(command: str) -> None:
    """JAX's persistent compilation cache for this process, and one line when
    this JAX cannot cache the training program's progress callbacks."""
    from jaxsample import compile_cache

    if compile_cache.configured_dir() is None:  # else the user's own JAX settings hold
        compile_cache.enable_compile_cache()
    if command == "train" and not compile_cache.CACHES_CALLBACKS:
        print(
            f"note: jax {jax.__version__} does not cache programs with host callbacks "
            "(train's progress display): they compile again in every run (jax >= 0.11, "
            "on Python >= 3.12, caches them)",
            file=sys.stderr,
        )


class _OneLineParser(argparse.ArgumentParser):
    """A subcommand's parser: a bad flag value (an int flag given ``abc``, a
    choice not offered, a missing required flag) is a :class:`UsageError`, one
    line naming the flag, not the usage block."""

    def error(self, message: str) -> typing.NoReturn:
        raise UsageError(message)


def _did_you_mean(flag: str, parser: argparse.ArgumentParser) -> str:
    """`` (did you mean --lr?)`` for a misspelled flag, else ``""``."""
    import difflib

    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    close = difflib.get_close_matches(flag.split("=")[0], options, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class _DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default, except ``None``: those flags' help says what
    applies (the config's default, after ``--config``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jaxsample`` command."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(
        prog="jaxsample",
        description="jaxsample: RL experience collected inside XLA. Train an agent, evaluate "
        "its checkpoint, time a sampler, or benchmark a grid (jaxsample COMMAND --help).",
    )
    parser.add_argument("--version", action="version", version=f"jaxsample {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)
    try:
        algo = _train_algo(argv[1:]) if argv[:1] == ["train"] else "ppo"
    except UsageError as e:
        print(f"jaxsample train: error: {e}", file=sys.stderr)
        raise

    _add_train(sub, algo)

    p = sub.add_parser("envs", help="list the env names of gymnax and the installed suites")
    p.set_defaults(func=_envs)

    p = sub.add_parser(
        "collect", help="compile a sampler, collect a few batches, print speed and stats"
    )
    p.add_argument("--env", default="CartPole-v1", help=ENV_HELP)
    p.add_argument("--B", type=int, default=1024, help="number of environments")
    p.add_argument("--T", type=int, default=128, help="time steps per batch")
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--reset-mode", default="auto", choices=("auto", "wait", "episodic"))
    p.add_argument("--decorrelation", type=int, default=0, help="max_decorrelation_steps")
    p.add_argument("--discount", type=float, default=0.99)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the figures to this JSON file")
    p.set_defaults(func=_collect)

    from jaxsample.bench import METHODS as bench_methods

    p = sub.add_parser(
        "bench",
        help="throughput, compile time and memory over a grid of envs, B and T: "
        "the bare scan(vmap(env.step)) floor, jaxsample collect, and host peers",
        description="Measure a grid of (env, B, T) cells, every method side by side in one "
        "process (interleaved repetitions, compile timed apart); print a table and write "
        "JSON and a PNG. Sizes take ints or LO:HI (LO, 2*LO, 4*LO, ... <= HI).",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a small grid and the PPO comparison (~5 min on 2 CPU cores)",
    )
    p.add_argument("--envs", nargs="+", default=None, help="gymnax or <suite>/<env> names")
    p.add_argument(
        "--B", nargs="+", default=None, help="numbers of envs, e.g. 1 64 1024 or 1:65536"
    )
    p.add_argument("--T", nargs="+", default=None, help="steps per call")
    p.add_argument("--methods", nargs="+", default=None, choices=bench_methods)
    p.add_argument("--reps", type=int, default=None, help="interleaved timed repetitions")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls before timing")
    p.add_argument("--peer-max-B", type=int, default=None, help="largest B for the host peers")
    p.add_argument(
        "--max-call-seconds",
        type=float,
        default=None,
        help="stop growing B once a call takes longer (0: no limit)",
    )
    p.add_argument("--memory-budget-gb", type=float, default=None, help="skip cells needing more")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--compile-scaling", action="store_true", help="also time compile at T=16 vs 1024"
    )
    p.add_argument(
        "--training",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also compare PPO end to end: the train command's program, reference_run's "
        "and a PureJaxRL-equivalent, compile and run (default: with --quick)",
    )
    p.add_argument("--json", default="bench.json", help="JSON output ('' to skip)")
    p.add_argument("--plot", default="bench.png", help="PNG output ('' to skip)")
    p.add_argument("--markdown", action="store_true", help="also print a README table")
    p.set_defaults(func=_bench)

    for name in _COMPILING:
        sub.choices[name].add_argument(
            "--no-compile-cache",
            dest="compile_cache",
            action="store_false",
            help="compile every program again (default: JAX's persistent compilation cache, "
            "in the user's cache folder unless $JAX_COMPILATION_CACHE_DIR names one)",
        )
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # one line, naming the closest flag of that subcommand
            known = sub.choices[args.command]
            raise UsageError(
                f"unrecognized arguments: {' '.join(extra)}" + _did_you_mean(extra[0], known)
            )
    except UsageError as e:  # a bad value of a generated train flag
        print(f"jaxsample {argv[0]}: error: {e}", file=sys.stderr)
        raise
    if args.command in _COMPILING:
        if args.compile_cache:
            _enable_compile_cache(args.command)
        else:  # JAX's own settings ($JAX_COMPILATION_CACHE_DIR) included
            jax.config.update("jax_enable_compilation_cache", False)
    if args.command == "train":  # the config fields given as flags
        args.config_flags = config_flag_values(args, algo)
    try:
        return args.func(args)
    except UsageError as e:  # one clear line, exit status 2
        print(f"jaxsample {args.command}: error: {e}", file=sys.stderr)
        raise


if __name__ == "__main__":
    sys.exit(main())

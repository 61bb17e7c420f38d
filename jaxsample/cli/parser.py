"""The ``jaxsample`` parser and `main`: every subcommand's flags, the
compile cache, and bad input as one line (`UsageError`).

``train``/``eval`` run in `jaxsample.cli.train`; ``envs``, ``collect`` and
``bench`` in `jaxsample.cli.commands`. Nothing here imports JAX (or flax,
gymnax, matplotlib): ``--version``, ``--help`` and argument errors answer
at once; the commands import what they run.
"""

from __future__ import annotations

import argparse
import functools
import sys
import typing
from collections.abc import Sequence
from typing import Any

from jaxsample import __version__
from jaxsample.algos import presets, registry
from jaxsample.bench.schema import METHODS
from jaxsample.cli import train as train_command
from jaxsample.cli.commands import bench_grid, collect, envs
from jaxsample.cli.config import (
    add_config_flags,
    choose_preset,
    config_flag_values,
    file_algo,
    load_config_file,
    resolve_config,
)
from jaxsample.cli.flags import (
    FlagValueError,
    cleanrl_epilog,
    flag,
    join_negative_values,
    typed_flags,
    unknown_flags_message,
)
from jaxsample.errors import UsageError
from jaxsample.runs.errors import RunError

ENV_HELP = "a gymnax name or <suite>/<env> (jaxsample envs lists them)"


def _train(args: argparse.Namespace) -> int:
    return train_command.train(args, getattr(args, "signals", None))


def _eval(args: argparse.Namespace) -> int:
    return train_command.evaluate(args)


def _train_algo(argv: Sequence[str]) -> str:
    """The ``--algo`` of a train command line (or of its ``--config`` file):
    it decides which config's fields become flags."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--algo", default=None)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    algo = known.algo
    if algo is None and known.config:
        algo = file_algo(load_config_file(known.config))
    return algo if algo in registry.ALGORITHMS else registry.DEFAULT


def _help_start(argv: Sequence[str], algo: str) -> tuple[Any, str | None]:
    """What ``train ... --help`` shows as the defaults: ``(config, where)``,
    the config a run of this command line starts from before its config
    file's fields and its flags (the defaults, then the preset of ``--env``
    or ``--preset``, or the ``--mask-velocity`` config: `train`'s own
    choice), and what it is (``"preset Breakout-MinAtar"``; None: the
    dataclass defaults)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--env", "--env-id", dest="env", default=None)
    pre.add_argument("--preset", default=None)
    pre.add_argument("--config", default=None)
    pre.add_argument("--mask-velocity", action="store_true", default=None)
    known, _ = pre.parse_known_args(argv)
    known.algo, known.seed, known.seeds, known.chunks = algo, None, None, None
    file_values = load_config_file(known.config) if known.config else {}
    s = train_command.settings(known, file_values)  # what `train` resolves
    preset = choose_preset(s["preset"], algo, s["env"], s["mask_velocity"])
    config = resolve_config(algo, s["env"], s["mask_velocity"], {}, {}, None, preset).config
    if preset is not None:
        return config, f"preset {preset.name}"
    return config, "the --mask-velocity config" if s["mask_velocity"] else None


def _add_train(
    sub: argparse._SubParsersAction, algo: str, start: tuple[Any, str | None] = (None, None)
) -> None:
    """The train command, its flags those of ``algo``'s config; ``start``: the
    config whose values ``--help`` shows as the defaults, and what it is
    (`_help_start`)."""
    p = sub.add_parser(
        "train",
        help="train an agent end to end in one compiled program (every config field a flag)",
        description="Train PPO or DQN on a gymnax env, every seed (and every swept setting) "
        "under one jax.vmap. Settings: the config's defaults, then the env's tuned preset "
        "(--preset), then --config FILE (TOML or YAML), then the flags. A list (--lr "
        "1e-3,2.5e-4) sweeps a hyperparameter in the same program. "
        f"The fields shown are --algo {algo}'s (`jaxsample train --algo dqn --help` shows "
        "DQN's), with the values the run starts from as their defaults (`--env "
        "Breakout-MinAtar --help` shows its preset's).",
        formatter_class=_DefaultsShown,
    )
    p.add_argument(
        "--algo",
        default=None,
        choices=tuple(registry.ALGORITHMS),
        help=f"(default: {registry.DEFAULT})",
    )
    p.add_argument("--env", default=None, help=ENV_HELP + " (default: CartPole-v1)")
    p.add_argument("--config", default=None, help="a TOML or YAML file of settings")
    p.add_argument(
        "--preset",
        default=None,
        metavar="NAME|none",
        help="tuned settings under --config and the flags: none for the plain defaults, or "
        f"one of {', '.join(presets.names())} (default: the one of the --env and --algo, "
        "where there is one: ENV for ppo, ENV:ALGO for another; jaxsample/algos/presets.toml "
        "says where each comes from)",
    )
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
        help="a run folder: checkpoints (--checkpoint-every), and started again with the "
        "same settings, resume",
    )
    p.add_argument(
        "--checkpoint-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --checkpoint-dir: a checkpoint when a chunk ends this long after the last "
        "one, and at the end and on SIGTERM/Ctrl-C; 0: after every chunk (default: 60)",
    )
    add_config_flags(p, algo, *start)
    p.epilog = cleanrl_epilog(p)
    p.set_defaults(func=_train)


def _add_collect(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "collect",
        help="compile a sampler, collect a few batches, print speed and stats",
        formatter_class=_DefaultsShown,
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
    p.epilog = cleanrl_epilog(p)
    p.set_defaults(func=collect)


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate the policy of a `train --checkpoint-dir` checkpoint (greedy and "
        "sampled actions; a game: wins, draws and losses per seat against an opponent)",
        formatter_class=_DefaultsShown,
    )
    p.add_argument(
        "--checkpoint-dir",
        "--checkpoint",
        dest="checkpoint",
        required=True,
        metavar="DIR",
        help="the run folder that `train --checkpoint-dir DIR` wrote",
    )
    p.add_argument("--episodes", type=int, default=10, help="episodes (games) per run")
    p.add_argument(
        "--opponent",
        default=None,
        metavar="random|DIR",
        help="a two-player game: play against a uniformly random legal player, or the "
        "greedy policy of another run folder's first run (default: random for a game)",
    )
    p.add_argument("--seed", type=int, default=0, help="the evaluation's key")
    p.add_argument("--json", default=None, help="write the per-run table here")
    p.add_argument(
        "--video",
        default=None,
        metavar="PATH",
        help="also draw run 0's greedy episodes (those of --seed) with the env's renderer: "
        ".gif for gymnax's classic control and MinAtar, .svg for a Pgx game (against "
        "--opponent), .html for Brax (its viewer)",
    )
    p.add_argument("--video-episodes", type=int, default=1, metavar="N", help="episodes drawn")
    p.add_argument("--video-fps", type=float, default=None, help="frames per second "
                   "(default: the renderer's own; Brax's viewer plays in real time)")  # fmt: skip
    p.add_argument("--video-max-steps", type=int, default=1000, metavar="N",
                   help="steps drawn per episode at most")  # fmt: skip
    p.set_defaults(func=_eval)


#: The subcommands that compile programs (they take --no-compile-cache).
_COMPILING = ("train", "eval", "collect", "bench")


def _enable_compile_cache() -> None:
    """JAX's persistent compilation cache for this process, in the user's
    cache folder; a folder that cannot be written (a file, a read-only mount)
    is one warning line, and the run goes on without the cache."""
    import tempfile

    from jaxsample import compile_cache

    if compile_cache.configured_dir() is not None:  # the user's own JAX settings hold
        return
    folder = compile_cache.default_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".writable-"):
            pass
    except OSError as e:
        print(
            f"warning: the compile cache folder {folder} cannot be used "
            f"({e.strerror or type(e).__name__}): running without it",
            file=sys.stderr,
        )
        return
    compile_cache.enable_compile_cache(folder)


def _compile_setup(cache: bool) -> None:
    """The compile cache on (``cache``) or off, JAX's own settings
    (``$JAX_COMPILATION_CACHE_DIR``) included: the first JAX import of a
    command, once its arguments are checked
    ([`start_compiling`][jaxsample.cli.base.start_compiling])."""
    if cache:
        _enable_compile_cache()
    else:
        import jax

        jax.config.update("jax_enable_compilation_cache", False)


class _OneLineParser(argparse.ArgumentParser):
    """A subcommand's parser: a bad flag value (an int flag given ``abc``, a
    choice not offered, a missing required flag) is a `UsageError`, one
    line naming the flag, not the usage block."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # --num-env is not --num-envs
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        raise UsageError(message)


class _DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default once: argparse's ``(default: X)``, except
    where the help states its own (``(default: random for a game)``), the
    default is ``None`` (the help says what applies: the config's default,
    after ``--config``) or the flag is a switch (``--wandb``: off unless
    given)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        switch = isinstance(action, argparse._StoreConstAction)  # store_true/false too
        if action.default is None or switch or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="throughput, compile time and memory over a grid of envs, B and T: "
        "the bare scan(vmap(env.step)) floor, jaxsample collect, and host peers",
        description="Measure a grid of (env, B, T) cells, every method side by side in one "
        "process (interleaved repetitions, compile timed apart); print a table and write "
        "JSON and a PNG. Sizes take ints or LO:HI (LO, 2*LO, 4*LO, ... <= HI).",
        formatter_class=_DefaultsShown,
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
    p.add_argument("--methods", nargs="+", default=None, choices=METHODS)
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
    _add_bench_parts(p)
    p.add_argument("--json", default="bench.json", help="JSON output ('' to skip)")
    p.add_argument("--plot", default="bench.png", help="PNG output ('' to skip)")
    p.add_argument("--markdown", action="store_true", help="also print a README table")
    p.set_defaults(func=bench_grid)


def _add_bench_parts(p: argparse.ArgumentParser) -> None:
    """``bench``'s flags of the measurements beside the grid."""
    p.add_argument(
        "--compile-scaling", action="store_true", help="also time compile at T=16 vs 1024"
    )
    p.add_argument(
        "--sampler-compile",
        action="store_true",
        help="also compile collect and the bare scan from scratch, 5 times each, interleaved "
        "(CartPole, Breakout-MinAtar and Brax's inverted pendulum where installed, B=1024, "
        "T=128), with the same columns as --training",
    )
    p.add_argument(
        "--training",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also compare PPO end to end: the train command's program, reference_run's "
        "and a PureJaxRL-equivalent; each program's trace, lower, XLA and total compile "
        "seconds, run seconds, jaxpr equations, HLO fusions and final return "
        "(default: with --quick)",
    )
    p.add_argument(
        "--dqn-training",
        action="store_true",
        help="also time DQN end to end: the train command's programs and reference_run's, "
        "with the same columns as --training (~5 min on 2 CPU cores)",
    )
    p.add_argument(
        "--ppo-overhead",
        action="store_true",
        help="also time PPO with jaxsample against the same PPO with a hand-written "
        "rollout (1e5 steps), with the same columns as --training",
    )


def _add_compile_cache_flag(sub: argparse._SubParsersAction) -> None:
    """``--no-compile-cache`` on every subcommand that compiles."""
    for name in _COMPILING:
        # the default as the parser's, not the flag's: help shows no "(default: True)"
        sub.choices[name].set_defaults(compile_cache=True)
        sub.choices[name].add_argument(
            "--no-compile-cache",
            dest="compile_cache",
            action="store_false",
            default=argparse.SUPPRESS,
            help="compile every program again (default: JAX's persistent compilation cache, "
            "in the user's cache folder unless $JAX_COMPILATION_CACHE_DIR names one)",
        )


def _parser(argv: Sequence[str]) -> tuple[argparse.ArgumentParser, Any, str]:
    """``(parser, its subparsers, the train command's --algo)``: the train
    command's flags are the fields of its algorithm's config."""
    parser = argparse.ArgumentParser(
        prog="jaxsample",
        allow_abbrev=False,
        description="jaxsample: RL experience collected inside XLA. Train an agent, evaluate "
        "its checkpoint, time a sampler, or benchmark a grid (jaxsample COMMAND --help).",
    )
    parser.add_argument("--version", action="version", version=f"jaxsample {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)
    train = argv[:1] == ["train"]
    try:
        algo = _train_algo(argv[1:]) if train else registry.DEFAULT
        helping = train and not {"-h", "--help"}.isdisjoint(argv[1:])
        start = _help_start(argv[1:], algo) if helping else (None, None)
    except UsageError as e:
        print(f"jaxsample train: error: {e}", file=sys.stderr)
        raise
    _add_train(sub, algo, start)
    _add_eval(sub)
    p = sub.add_parser("envs", help="list the env names of gymnax and the installed suites")
    p.set_defaults(func=envs)
    _add_collect(sub)
    _add_bench(sub)
    _add_compile_cache_flag(sub)
    return parser, sub, algo


def _parse_args(parser: argparse.ArgumentParser, sub: Any, argv: list[str]) -> Any:
    """The namespace of ``argv``, with ``flag_names``: the name each flag was
    given by (`typed_flags`), for the messages about its value. Bad input is
    a `UsageError`, printed as one line naming the flag as typed."""
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        message = unknown_flags_message(argv[:1], parser)
        print(f"jaxsample: error: {message}", file=sys.stderr)
        raise UsageError(message)
    names: dict[str, str] = {}
    if argv and argv[0] in sub.choices:  # --lr -1e-3 is a value, not a flag
        names = typed_flags(argv[1:], sub.choices[argv[0]])
        argv = [argv[0], *join_negative_values(argv[1:], sub.choices[argv[0]])]
    try:
        try:
            args, extra = parser.parse_known_args(argv)
        except FlagValueError as e:  # a value that does not parse, named as typed
            raise UsageError(e.named(names.get(e.dest, flag(e.dest)))) from None
        if extra:  # one line, naming the closest flag of that subcommand to each
            raise UsageError(unknown_flags_message(extra, sub.choices[args.command]))
    except UsageError as e:  # a bad value of a generated train flag
        print(f"jaxsample {argv[0]}: error: {e}", file=sys.stderr)
        raise
    args.flag_names = names
    return args


def main(argv: Sequence[str] | None = None, signals: Any = None) -> int:
    """Parse ``argv`` and run the subcommand; ``signals``: the process's
    `jaxsample.runs.signals.StopSignals` (`jaxsample.cli.main` installs it)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, sub, algo = _parser(argv)
    args = _parse_args(parser, sub, argv)
    if args.command in _COMPILING:  # run by the command after its own checks (no JAX before)
        args.compile_setup = functools.partial(_compile_setup, args.compile_cache)
    if args.command == "train":  # the config fields given as flags
        args.config_flags = config_flag_values(args, algo)
    args.signals = signals
    if signals is not None:
        signals.prefix = f"jaxsample {args.command}"
        if args.command == "train":
            signals.early_note = " before its first iteration: nothing to keep"
    try:
        return args.func(args)
    except UsageError as e:  # one clear line, exit status 2
        print(f"jaxsample {args.command}: error: {e}", file=sys.stderr)
        raise
    except RunError as e:  # the run's folder or outputs: one line, its exit status
        print(f"jaxsample {args.command}: error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_status) from None

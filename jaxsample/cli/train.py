"""``jaxsample train`` and ``jaxsample eval``: flags in, one call of the run package.

``train`` resolves the settings (the flags, a ``--config`` file and the
defaults: `jaxsample.cli.config`) and calls `jaxsample.runs.train` once: the
run folder (``--checkpoint-dir``), its lock, resume, signals, the display and
the outputs are the run's, the same in a notebook. ``eval`` loads a run
folder with `jaxsample.runs.load` and evaluates every run's greedy policy.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from jaxsample.cli.base import UsageError, check_output, start_compiling
from jaxsample.cli.config import file_algo, file_env, resolve_config

__all__ = ["evaluate", "make_trainer", "train"]


def make_trainer(args: argparse.Namespace) -> tuple[Any, int]:
    """The trainer of ``args.algo``/``env``/``mask_velocity`` (and
    ``total_steps`` when set) and its environment steps per iteration."""
    from jaxsample.runs.run import build_trainer

    flags = {}
    if getattr(args, "total_steps", None) is not None:
        flags["total_timesteps"] = args.total_steps
    config, _ = resolve_config(args.algo, args.env, bool(args.mask_velocity), {}, flags)
    return build_trainer(config), config.steps_per_iteration


def _settings(args: argparse.Namespace, file_values: dict[str, Any]) -> dict[str, Any]:
    """The train command's own settings: the flag, else the config file, else the default."""
    defaults = {"algo": "ppo", "env": "CartPole-v1", "seed": 0, "seeds": 1, "chunks": 20}
    defaults["mask_velocity"] = False
    from_file = {**file_values, "algo": file_algo(file_values), "env": file_env(file_values)}
    out = {}
    for name, default in defaults.items():
        value = getattr(args, name, None)
        if value is None:
            value = from_file.get(name)
        out[name] = default if value is None else value
    for name in ("seeds", "chunks"):
        if isinstance(out[name], bool) or not isinstance(out[name], int) or out[name] < 1:
            raise UsageError(f"--{name} must be >= 1, got {out[name]}")
    if isinstance(out["seed"], bool) or not isinstance(out["seed"], int):
        raise UsageError(f"--seed must be an int, got {out['seed']!r}")
    return out


def train(args: argparse.Namespace, signals: Any = None) -> int:
    """Run ``jaxsample train``: its exit status (0, or 130 / 143 when a
    signal stopped it after it kept what it had trained)."""
    from jaxsample.cli.config import load_config_file

    file_values = load_config_file(args.config) if args.config else {}
    s = _settings(args, file_values)
    csv_given = bool(args.csv)
    if not args.csv:
        args.csv = os.path.splitext(args.json)[0] + ".csv" if args.json else "train.csv"
    for path, flag in ((args.json, "--json"), (args.plot, "--plot"), (args.csv, "--csv")):
        check_output(path, flag)
    if args.checkpoint_dir and os.path.isfile(args.checkpoint_dir):
        raise UsageError(f"--checkpoint-dir {args.checkpoint_dir!r} is a file")
    config, sweep = resolve_config(
        s["algo"], s["env"], s["mask_velocity"], file_values, args.config_flags, args.config
    )
    start_compiling(args)  # JAX from here on: the settings are checked
    from jaxsample.runs import run
    from jaxsample.runs.run import build_trainer

    try:
        build_trainer(config)
    except (TypeError, ValueError) as e:
        message = str(e)
        if message.startswith("env_name: "):  # the env's name: the flag or file key
            message = f"--env {s['env']!r}: " + message[len("env_name: ") :]
        raise UsageError(message) from None
    if not csv_given:
        print(f"every metric goes to {os.path.abspath(args.csv)} (--csv to choose)")
    result = run.train(
        config, seeds=s["seeds"], seed=s["seed"], sweep=sweep, folder=args.checkpoint_dir,
        chunks=s["chunks"], json=args.json, csv=args.csv, plot=args.plot,
        tensorboard=args.tensorboard, wandb_project=args.wandb_project if args.wandb else None,
        signals=signals, folder_flag="--checkpoint-dir",
    )  # fmt: skip
    if result.interrupted:
        print(run.final_line(result, _iterations(config)), file=sys.stderr, flush=True)
    return result.exit_status


def _iterations(config: Any) -> int:
    from jaxsample.runs.run import build_trainer

    return int(build_trainer(config).num_iterations)


def evaluate(args: argparse.Namespace) -> int:
    """Run ``jaxsample eval``: the greedy policy of every run of a run folder."""
    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    check_output(args.json, "--json")
    start_compiling(args)  # JAX from here on: the arguments are checked
    from jaxsample.runs import files, loaded
    from jaxsample.runs.run import environment

    run = loaded.load(args.checkpoint, folder_flag="--checkpoint")
    rows = run.evaluate(args.episodes, args.seed)
    print(
        f"jaxsample eval: {run.record['algo']} on {run.config.env_name}, checkpoint "
        f"{args.checkpoint} (iteration {run.iteration}), {args.episodes} greedy episode(s) per run"
    )
    print(f"{'run':>24} {'episodes':>9} {'mean return':>12} {'std':>8} {'mean length':>12}")
    for row in rows:
        print(
            f"{row['run']:>24} {row['episodes']:>9} {row['return_mean']:>12.1f} "
            f"{row['return_std'] or 0.0:>8.1f} {row['length_mean']:>12.1f}"
        )
    if args.json:
        data = {**run.record, "iteration": run.iteration, "runs": rows, **environment()}
        files.write_json(args.json, data)
        print(f"wrote {args.json}")
    return 0

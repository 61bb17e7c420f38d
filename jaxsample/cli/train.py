"""``jaxsample train`` and ``jaxsample eval``: flags in, one call of the run package.

``train`` resolves the settings (the flags, a ``--config`` file and the
defaults: `jaxsample.cli.config`) and calls `jaxsample.runs.train` once: the
run folder (``--checkpoint-dir``), its lock, resume, signals, the display and
the outputs are the run's, the same in a notebook. ``eval`` loads a run
folder with `jaxsample.runs.load` and evaluates every run's greedy policy.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import Any

from jaxsample.algos import registry
from jaxsample.cli.base import check_output, start_compiling
from jaxsample.cli.config import (
    choose_preset,
    file_algo,
    file_env,
    load_config_file,
    resolve_config,
    usage_error,
)
from jaxsample.errors import ConfigError, UsageError

__all__ = ["evaluate", "make_trainer", "settings", "train"]


def make_trainer(args: argparse.Namespace) -> tuple[Any, int]:
    """The trainer of ``args.algo``/``env``/``mask_velocity`` (and
    ``total_steps`` when set) and its environment steps per iteration."""
    from jaxsample.runs.run import build_trainer

    flags = {}
    if getattr(args, "total_steps", None) is not None:
        flags["total_timesteps"] = args.total_steps
    config = resolve_config(args.algo, args.env, bool(args.mask_velocity), {}, flags).config
    return build_trainer(config), config.steps_per_iteration


def settings(args: argparse.Namespace, file_values: dict[str, Any]) -> dict[str, Any]:
    """The train command's own settings: the flag, else the config file, else the default."""
    defaults = {"algo": registry.DEFAULT, "env": "CartPole-v1", "seed": 0, "seeds": 1, "chunks": 20}
    defaults["mask_velocity"] = False
    defaults["preset"] = None  # the env's own, where there is one
    from_file = {**file_values, "algo": file_algo(file_values), "env": file_env(file_values)}
    out = {}
    for name, default in defaults.items():
        value = getattr(args, name, None)
        if value is None:
            value = from_file.get(name)
        out[name] = default if value is None else value
    if out["algo"] not in registry.ALGORITHMS:  # a config file's (the flag has choices)
        known = ", ".join(registry.ALGORITHMS)
        raise UsageError(f"--config {args.config!r}: algo {out['algo']!r} is not one of {known}")
    for name in ("seeds", "chunks"):
        if isinstance(out[name], bool) or not isinstance(out[name], int) or out[name] < 1:
            raise UsageError(f"--{name} must be >= 1, got {out[name]}")
    if isinstance(out["seed"], bool) or not isinstance(out["seed"], int):
        raise UsageError(f"--seed must be an int, got {out['seed']!r}")
    return out


def train(args: argparse.Namespace, signals: Any = None) -> int:
    """Run ``jaxsample train``: its exit status (0, or 130 / 143 when a
    signal stopped it after it kept what it had trained).

    Python's cyclic garbage collector is paused from here until the training
    program runs (`_Display`; or the command ends): the imports, the trace
    and the compile make objects that stay (modules, traced programs), and
    the collector's passes over them cost a cold run time for nothing
    (docs/benchmarks.md measures it). Where it was paused already, it stays
    as it was."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _train(args, signals, collecting)
    finally:
        if collecting:
            gc.enable()


def _train(args: argparse.Namespace, signals: Any, collecting: bool) -> int:
    file_values = load_config_file(args.config) if args.config else {}
    s = settings(args, file_values)
    csv_given = bool(args.csv)
    if not args.csv:
        args.csv = os.path.splitext(args.json)[0] + ".csv" if args.json else "train.csv"
    for path, flag in ((args.json, "--json"), (args.plot, "--plot"), (args.csv, "--csv")):
        check_output(path, flag)
    if args.checkpoint_dir and os.path.isfile(args.checkpoint_dir):
        raise UsageError(f"--checkpoint-dir {args.checkpoint_dir!r} is a file")
    preset = choose_preset(s["preset"], s["algo"], s["env"], s["mask_velocity"])
    flag_names = getattr(args, "flag_names", None)  # the flags' names as typed
    resolved = resolve_config(
        s["algo"], s["env"], s["mask_velocity"], file_values, args.config_flags, args.config,
        preset, flag_names,
    )  # fmt: skip
    every = _checkpoint_every(args)
    start_compiling(args)  # JAX from here on: the settings are checked
    from jaxsample.runs import run

    if not csv_given:
        print(f"every metric goes to {os.path.abspath(args.csv)} (--csv to choose)")
    # From a preset: the preset's name and the fields over it, which the run
    # builds into the config as runs.train(preset=...) does; else the config.
    trains = {"config": resolved.config} if preset is None else {
        "preset": preset.name, "overrides": resolved.overrides,
    }  # fmt: skip
    try:
        result = run.train(
            **trains, seeds=s["seeds"], seed=s["seed"], sweep=resolved.sweep,
            folder=args.checkpoint_dir, chunks=s["chunks"], **every, json=args.json,
            csv=args.csv, plot=args.plot, tensorboard=args.tensorboard,
            wandb_project=args.wandb_project if args.wandb else None, signals=signals,
            folder_flag="--checkpoint-dir", say_stopped=_stderr,
            progress=_Display(collecting),
        )  # fmt: skip
    except ConfigError as e:  # what only the trainer checks (the env's name), before it runs
        raise usage_error(e, file_values, args.config_flags, args.config, flag_names) from None
    return result.exit_status


class _Display:
    """The run's live display (`jaxsample.runs.display.LiveDisplay`) that
    turns the garbage collector back on (``collect``) at the first event of
    the running program, with what exists by then frozen (``gc.freeze``):
    the start's objects are nearly all alive, so a pass over them would find
    next to nothing."""

    def __init__(self, collect: bool) -> None:
        from jaxsample.runs.display import LiveDisplay

        self.display, self.collect = LiveDisplay(), collect

    def __call__(self, event: dict[str, Any]) -> None:
        if self.collect and event.get("phase") == "running":
            gc.freeze()  # what the start made stays: no collection passes over it again
            gc.enable()
            self.collect = False
        self.display(event)

    def close(self) -> None:
        self.display.close()


def _stderr(line: str) -> None:
    """A stopped run's line (`jaxsample.runs.run.final_line`), on stderr."""
    print(line, file=sys.stderr, flush=True)


def _checkpoint_every(args: argparse.Namespace) -> dict[str, float]:
    """``--checkpoint-every`` checked, as `jaxsample.runs.train`'s keyword
    (none where not given: the run's default)."""
    every = getattr(args, "checkpoint_every", None)
    if every is None:
        return {}
    if not every >= 0:  # NaN too
        raise UsageError(f"--checkpoint-every must be >= 0 seconds, got {every}")
    if args.checkpoint_dir is None:
        raise UsageError("--checkpoint-every needs --checkpoint-dir (where checkpoints go)")
    return {"checkpoint_seconds": every}


def evaluate(args: argparse.Namespace) -> int:
    """Run ``jaxsample eval``: every run of a run folder, greedy and with sampled
    actions; a two-player game against an opponent (wins, draws, losses per
    seat)."""
    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    check_output(args.json, "--json")
    folder_flag = (getattr(args, "flag_names", None) or {}).get("checkpoint", "--checkpoint-dir")
    _check_run_folder(args.checkpoint, folder_flag)
    _check_video_flags(args)
    start_compiling(args)  # JAX from here on: the arguments are checked
    from jaxsample.runs import files, loaded
    from jaxsample.runs.run import environment

    run = loaded.load(args.checkpoint, folder_flag=folder_flag)
    _check_video(run, args)
    opponent = getattr(args, "opponent", None)
    if opponent is not None and not run.is_game:
        raise UsageError(f"--opponent: {run.config.env_name} is not a two-player game")
    head = (
        f"jaxsample eval: {run.record['algo']} on {run.config.env_name}, checkpoint "
        f"{args.checkpoint} (iteration {run.iteration})"
    )
    if run.is_game:
        rows, text = _play(run, opponent or "random", args)
        print(f"{head}, {args.episodes} game(s) per run against {opponent or 'random'}")
        print(text)
    else:
        rows = _evaluate(run, args)
        print(f"{head}, {args.episodes} episode(s) per run and policy")
        print(_table(rows))
        print(
            "greedy: the agent's evaluation behaviour (a categorical's argmax; a Gaussian's "
            "mean of the action the env executes, E[clip(a)]); sampled: actions drawn as in "
            "training, what its training curve shows"
        )
    if args.json:
        data = {**run.record, "iteration": run.iteration, "runs": rows, **environment()}
        files.write_json(args.json, data)
        print(f"wrote {args.json}")
    _video(run, args)
    return 0


def _check_run_folder(path: str, flag: str) -> None:
    """A ``UsageError`` saying what to pass when ``path`` is a file: the run
    folder that ``train --checkpoint-dir`` wrote, not its ``run.json`` nor the
    ``--json`` output (which holds no checkpoint)."""
    if not os.path.isfile(path):
        return
    folder = os.path.dirname(path) or "."
    if os.path.basename(path) == "run.json":
        hint = f"pass its folder: {flag} {folder!r}"
    else:
        hint = (
            "pass the run folder that `jaxsample train --checkpoint-dir DIR` wrote (DIR holds "
            "run.json and the checkpoints; the file --json writes holds no checkpoint)"
        )
    raise UsageError(f"{flag} {path!r} is a file, not a run folder: {hint}")


def _check_video_flags(args: argparse.Namespace) -> None:
    """``--video`` and its options, before JAX is imported."""
    if getattr(args, "video", None) is None:
        return
    check_output(args.video, "--video")
    for flag, value in (("--video-episodes", args.video_episodes),
                        ("--video-max-steps", args.video_max_steps)):  # fmt: skip
        if value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    fps = args.video_fps
    if fps is not None and not 0 < fps <= 100:
        raise UsageError(f"--video-fps must be in (0, 100], got {fps}")


def _check_video(run: Any, args: argparse.Namespace) -> None:
    """One line, before anything runs, where the env has no renderer or the
    path's suffix is not its format's."""
    if getattr(args, "video", None) is None:
        return
    from jaxsample.runs import video

    try:
        video.check(run.trainer.env, args.video)
    except (ValueError, ImportError) as e:
        raise UsageError(f"--video {args.video!r}: {e}") from None


def _video(run: Any, args: argparse.Namespace) -> None:
    """``--video``: run 0's greedy episodes (against ``--opponent`` in a game)."""
    if getattr(args, "video", None) is None:
        return
    from jaxsample.runs import loaded

    opponent = getattr(args, "opponent", None) or "random"
    if opponent != "random":
        opponent = loaded.load(opponent, folder_flag="--opponent")
    made = run.video(
        args.video, args.video_episodes, seed=args.seed, opponent=opponent,
        fps=args.video_fps, max_steps=args.video_max_steps,
    )  # fmt: skip
    cut = sum(not ended for ended in made.ended)
    print(
        f"wrote {made.path}: {made.frames} frames of {made.run}'s greedy episode(s) "
        f"{', '.join(map(str, made.episodes))} (lengths {', '.join(map(str, made.lengths))}"
        + (f"; {cut} cut at --video-max-steps" if cut else "")
        + "), the reset state and one frame per step"
    )


def _evaluate(run: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per run: its greedy and sampled returns side by side."""
    greedy = run.evaluate(args.episodes, args.seed, "greedy")
    sampled = run.evaluate(args.episodes, args.seed, "sampled")
    rows = []
    for g, s in zip(greedy, sampled, strict=True):
        row = {k: v for k, v in g.items() if k not in ("policy", "episodes")}
        row = {k: v for k, v in row.items() if not k.startswith(("return_", "length_"))}
        for name, stats in (("greedy", g), ("sampled", s)):
            for key in ("episodes", "return_mean", "return_std", "length_mean"):
                row[f"{name}_{key}"] = stats[key]
        rows.append(row)
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'run':>24} {'episodes':>9} {'greedy return':>18} {'length':>8} "
        f"{'sampled return':>18} {'length':>8}"
    ]
    for row in rows:
        cells = []
        for name in ("greedy", "sampled"):
            mean, std = row[f"{name}_return_mean"], row[f"{name}_return_std"] or 0.0
            cells.append(f"{f'{mean:.1f} ± {std:.1f}':>18} {row[f'{name}_length_mean']:>8.1f}")
        lines.append(f"{row['run']:>24} {row['greedy_episodes']:>9} {' '.join(cells)}")
    return "\n".join(lines)


def _play(run: Any, opponent: str, args: argparse.Namespace) -> tuple[list[dict], str]:
    from jaxsample.runs import loaded

    if opponent != "random":
        opponent = loaded.load(opponent, folder_flag="--opponent")
    try:
        rows = run.play(opponent, args.episodes, args.seed)
    except ValueError as e:  # another game's run folder
        raise UsageError(f"--opponent {args.opponent!r}: {e}") from None
    lines = [
        f"{'run':>24} {'games':>6} {'W/D/L':>11} {'opening W/D/L':>14} "
        f"{'second W/D/L':>13} {'win or draw':>12}"
    ]
    for row in rows:
        cells = ["/".join(str(row[f"{seat}{k}"]) for k in ("wins", "draws", "losses"))
                 for seat in ("", "first_", "second_")]  # fmt: skip
        lines.append(
            f"{row['run']:>24} {row['games']:>6} {cells[0]:>11} {cells[1]:>14} "
            f"{cells[2]:>13} {row['win_or_draw']:>12.3f}"
        )
    return rows, "\n".join(lines)

"""Train an env's PPO preset for N seeds, evaluate its greedy policy, write one JSON line.

The measure of issue 44 (gymnax's published PPO baselines, trained with
gymnax-blines' ``agents/<env>/ppo.yaml``): every seed is trained in one
vmapped program (``jaxsample.runs.train``), then each seed's greedy policy
(the argmax of a categorical, ``E[clip(a)]`` of a Gaussian) plays
``--episodes`` episodes (gymnax-blines' ``num_test_rollouts``, 164) and the
result is the median over seeds of each seed's mean return. It is compared
with gymnax's published return, and the steps trained with gymnax-blines'
``num_train_steps``.

Usage (pin it to one core on a shared machine)::

    taskset -c 1 python tools/preset_results.py --env CartPole-v1 --seeds 4 \\
        --out results.jsonl
    # another setting than the preset's, field by field (PPOConfig's names;
    # values are Python literals):
    python tools/preset_results.py --env Acrobot-v1 --set lr=1e-3 \\
        --set hidden_sizes="(64, 64)" --out results.jsonl
    # the plain PPOConfig defaults instead of the env's preset:
    python tools/preset_results.py --env Catch-bsuite --preset none --out results.jsonl
    # another algorithm's preset (ENV:ALGO; its fields for --set):
    python tools/preset_results.py --env Pendulum-v1 --algo sac
    # confirmation: seeds 4-7, evaluation episodes other than the tuning's
    python tools/preset_results.py --env Acrobot-v1 --seed 4 --eval-seed 1 \\
        --out docs/presets/confirmation.jsonl
    # another algorithm's preset for the env (presets.toml's "ENV:ALGO"):
    python tools/preset_results.py --env CartPole-v1 --algo pqn --out pqn.jsonl

The settings start from ``--preset`` (default: the env's own preset in
``jaxsample/algos/presets.toml``; ``none``: PPOConfig's defaults) and
``--set`` overrides them. One JSON object is appended to ``--out`` (JSON
Lines) and printed: ``env``, ``preset``, ``overrides``, ``config`` (every
PPOConfig field), ``steps`` (env steps trained, all envs), ``budget``
(gymnax-blines' ``num_train_steps``), ``target`` (gymnax's published
return), ``seeds``, ``episodes``, ``returns`` (each seed's greedy mean
return), ``median``, ``met`` (median >= target and steps <= budget),
``train_returns`` (each seed's recent training return), ``train_s``,
``eval_s``, ``wall_s`` (seconds, compilation included), ``cpus`` (the cores
the process may use), ``jax`` and ``date``. Exit status 0 whether or not
the target is met; 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

#: gymnax's published PPO returns (its README) and gymnax-blines' step budgets
#: (``num_train_steps`` of ``agents/<env>/ppo.yaml``, env steps over all envs).
TARGETS: dict[str, tuple[float, int]] = {
    "CartPole-v1": (500.0, 150_000),
    "Acrobot-v1": (-80.0, 500_000),
    "Pendulum-v1": (-130.0, 1_000_000),
    "MountainCar-v0": (-118.0, 250_000),
    "MountainCarContinuous-v0": (92.0, 1_000_000),
    "Catch-bsuite": (1.0, 100_000),
}

#: Other algorithms' targets and budgets (issue 51: the median greedy return
#: and the env steps per seed), by ``(env, algo)``; their results go to
#: `OFF_POLICY_RESULTS` (the PPO page's table reads `RESULTS`).
OFF_POLICY_TARGETS: dict[tuple[str, str], tuple[float, int]] = {
    ("Pendulum-v1", "sac"): (-155.0, 10_000),
    ("Pendulum-v1", "td3"): (-160.0, 20_000),
    ("brax/inverted_pendulum", "sac"): (1000.0, 200_000),
    ("CartPole-v1", "pqn"): (500.0, 500_000),
}

#: The MinAtar games: gymnax-blines ships PPO settings (10M steps) but no
#: returns; ``--all`` trains each preset and the plain defaults at
#: ``MINATAR_STEPS`` (what fits a 2-core CPU) and compares their curves.
MINATAR = ("Breakout-MinAtar", "Asterix-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar")
MINATAR_STEPS = 1_000_000

#: Where the results page's measurements are kept.
RESULTS = os.path.join("docs", "presets", "results.jsonl")
#: Presets trained again on other seeds and judged on other episodes.
CONFIRMATION = os.path.join("docs", "presets", "confirmation.jsonl")
OFF_POLICY_RESULTS = os.path.join("docs", "presets", "off_policy.jsonl")


def parse_override(text: str) -> tuple[str, Any]:
    """``"field=value"`` -> ``(field, value)``; the value a Python literal
    (``1e-3``, ``True``, ``(64, 64)``), else the string itself."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"--set wants FIELD=VALUE, got {text!r}")
    try:
        parsed = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        parsed = value.strip()
    return name.strip(), parsed


def make_config(
    env: str, preset: str | None, overrides: dict[str, Any], algo: str = "ppo"
) -> tuple[Any, str | None]:
    """The config of ``algo`` (a PPOConfig for ``ppo``) to train and the name
    of the preset it started from (``preset``: a preset name, ``"none"``, or
    None for the env's own for ``algo``)."""
    from jaxsample.algos import presets, registry

    config_type = registry.get(algo).config_type
    if preset == "none":
        return config_type(env_name=env, **overrides), None
    found = presets.for_env(env, algo) if preset is None else presets.get(preset)
    if found is None:
        return config_type(env_name=env, **overrides), None
    return found.config(env_name=env, **overrides), found.name


def measure(
    config: Any, *, seeds: int, episodes: int, seed: int = 0, folder: str | None = None,
    eval_seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """Train ``config`` for ``seeds`` seeds (from ``seed``) in one program,
    evaluate each seed's greedy policy on ``episodes`` episodes (those of
    ``eval_seed``: `LoadedRun.evaluate`'s ``seed``); the numbers of the JSON
    line (without the env's target)."""
    from jaxsample import runs

    with tempfile.TemporaryDirectory(prefix="preset_results_") as scratch:
        where = folder or os.path.join(scratch, "run")
        start = time.perf_counter()
        result = runs.train(config, seeds=seeds, seed=seed, folder=where, chunks=1,
                            progress=False, say=None)  # fmt: skip
        trained = time.perf_counter()
        rows = runs.load(where).evaluate(episodes=episodes, seed=eval_seed, policy="greedy")
        evaluated = time.perf_counter()
    returns = [row["return_mean"] for row in rows]
    return {
        "steps": config.num_iterations * config.steps_per_iteration,
        "seeds": seeds,
        "seed": seed,
        "eval_seed": eval_seed,
        "episodes": episodes,
        "episodes_finished": [row["episodes"] for row in rows],
        "returns": returns,
        "median": statistics.median(returns),
        "train_returns": [float(r) for r in result.final_returns()],
        "curve": curve_of(result.training.env_steps, result.training.returns),
        "train_s": round(trained - start, 1),
        "eval_s": round(evaluated - trained, 1),
        "wall_s": round(evaluated - start, 1),
    }


def curve_of(env_steps: Any, returns: Any, points: int = 100) -> dict[str, Any]:
    """The learning curves, at most ``points`` per seed: ``steps`` (env steps
    of one seed at the end of each bin of iterations) and ``returns`` (per
    seed, the mean of the bin's finite iteration returns; None where no
    episode ended in the bin)."""
    import numpy as np

    steps = np.asarray(env_steps, np.float64)
    curves = np.asarray(returns, np.float64).reshape(-1, len(steps))
    bins = np.array_split(np.arange(len(steps)), min(points, len(steps)))
    out = []
    for curve in curves:
        row = []
        for b in bins:
            finite = curve[b][np.isfinite(curve[b])]
            row.append(round(float(finite.mean()), 3) if len(finite) else None)
        out.append(row)
    return {"steps": [int(steps[b[-1]]) for b in bins], "returns": out}


def result_line(
    env: str,
    preset: str | None,
    overrides: dict[str, Any],
    *,
    seeds: int,
    episodes: int,
    seed: int = 0,
    note: str = "",
    algo: str = "ppo",
    eval_seed: int = 0,
) -> dict[str, Any]:
    """Measure one setting: the JSON line (see the module docstring)."""
    import platform

    import jax

    config, name = make_config(env, preset, overrides, algo)
    if algo == "ppo":
        target, budget = TARGETS.get(env, (None, None))
    else:
        target, budget = OFF_POLICY_TARGETS.get((env, algo), (None, None))
    line = {
        "env": env,
        **({} if algo == "ppo" else {"algo": algo}),
        "preset": name,
        "overrides": overrides,
        "note": note,
        "config": dataclasses.asdict(config),
        "target": target,
        "budget": budget,
        **measure(config, seeds=seeds, episodes=episodes, seed=seed, eval_seed=eval_seed),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "jax": jax.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    line["met"] = bool(target is not None and line["median"] >= target and line["steps"] <= budget)
    return line


def append(path: str, line: dict[str, Any]) -> None:
    """Append ``line`` to the JSON Lines file ``path`` (its folder made)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def table_jobs(minatar_steps: int) -> list[tuple[str, str | None, dict[str, Any]]]:
    """``--all``: every published env's preset, and each MinAtar game's preset
    and plain defaults at ``minatar_steps``."""
    jobs: list[tuple[str, str | None, dict[str, Any]]] = [(env, None, {}) for env in TARGETS]
    for env in MINATAR:
        budget = {"total_timesteps": minatar_steps}
        jobs += [(env, None, budget), (env, "none", budget)]
    return jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", help="gymnax env id, e.g. CartPole-v1")
    parser.add_argument("--algo", default="ppo",
                        help="the algorithm (ppo; sac, td3, pqn: their ENV:ALGO presets, "
                             f"results to {OFF_POLICY_RESULTS} by default)")  # fmt: skip
    parser.add_argument("--all", action="store_true",
                        help="the results page's whole table, then its figures "
                             "(tools/preset_page.py)")  # fmt: skip
    parser.add_argument("--minatar-steps", type=int, default=MINATAR_STEPS,
                        help=f"with --all: the MinAtar budget ({MINATAR_STEPS:,})")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=4, help="seeds trained together (4)")
    parser.add_argument("--seed", type=int, default=0, help="base seed (0)")
    parser.add_argument("--eval-seed", type=int, default=0,
                        help="the evaluation episodes' seed (0): another for episodes "
                        "not used in tuning")  # fmt: skip
    parser.add_argument("--episodes", type=int, default=164,
                        help="greedy evaluation episodes per seed (164)")  # fmt: skip
    parser.add_argument("--preset", default=None,
                        help="preset to start from (default: the env's; "
                             "'none': PPOConfig's defaults)")  # fmt: skip
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        type=parse_override, metavar="FIELD=VALUE",
                        help="override a PPOConfig field (repeatable)")  # fmt: skip
    parser.add_argument("--note", default="", help="free text stored in the JSON line")
    parser.add_argument("--out", default=None,
                        help=f"JSON Lines file to append the results to ({RESULTS})")  # fmt: skip
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = RESULTS if args.algo == "ppo" else OFF_POLICY_RESULTS
    if args.all and args.algo != "ppo":
        parser.error("--all is PPO's table: give --env with --algo")
    if args.seeds < 1 or args.episodes < 1:
        parser.error("--seeds and --episodes must be >= 1")
    if args.all == bool(args.env):
        parser.error("give --env ENV or --all")
    if args.all:
        jobs = table_jobs(args.minatar_steps)
    else:
        jobs = [(args.env, args.preset, dict(args.overrides))]
    for env, preset, overrides in jobs:
        try:
            make_config(env, preset, overrides, args.algo)
        except (TypeError, ValueError, KeyError) as error:
            parser.error(str(error))
    for env, preset, overrides in jobs:
        line = result_line(env, preset, overrides, seeds=args.seeds, episodes=args.episodes,
                           seed=args.seed, note=args.note, algo=args.algo,
                           eval_seed=args.eval_seed)  # fmt: skip
        append(args.out, line)
        print(json.dumps({k: v for k, v in line.items() if k not in ("config", "curve")}))
    if args.all:  # the page, drawn by its own script (which imports this one: no cycle)
        page = os.path.join(os.path.dirname(os.path.abspath(__file__)), "preset_page.py")
        return subprocess.run([sys.executable, page, "--results", args.out]).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())

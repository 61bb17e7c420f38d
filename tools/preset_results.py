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


def make_config(env: str, preset: str | None, overrides: dict[str, Any]) -> tuple[Any, str | None]:
    """The PPOConfig to train and the name of the preset it started from
    (``preset``: a preset name, ``"none"``, or None for the env's own)."""
    from jaxsample.algos.configs import PPOConfig

    if preset == "none":
        return PPOConfig(env_name=env, **overrides), None
    from jaxsample.algos import presets

    found = presets.for_env(env) if preset is None else presets.get(preset)
    if found is None:
        return PPOConfig(env_name=env, **overrides), None
    return found.config(env_name=env, **overrides), found.name


def measure(
    config: Any, *, seeds: int, episodes: int, seed: int = 0, folder: str | None = None
) -> dict[str, Any]:
    """Train ``config`` for ``seeds`` seeds in one program, evaluate each
    seed's greedy policy on ``episodes`` episodes; the numbers of the JSON
    line (without the env's target)."""
    from jaxsample import runs

    with tempfile.TemporaryDirectory(prefix="preset_results_") as scratch:
        where = folder or os.path.join(scratch, "run")
        start = time.perf_counter()
        result = runs.train(config, seeds=seeds, seed=seed, folder=where, chunks=1,
                            progress=False, say=None)  # fmt: skip
        trained = time.perf_counter()
        rows = runs.load(where).evaluate(episodes=episodes, policy="greedy")
        evaluated = time.perf_counter()
    returns = [row["return_mean"] for row in rows]
    return {
        "steps": config.num_iterations * config.steps_per_iteration,
        "seeds": seeds,
        "seed": seed,
        "episodes": episodes,
        "episodes_finished": [row["episodes"] for row in rows],
        "returns": returns,
        "median": statistics.median(returns),
        "train_returns": [float(r) for r in result.final_returns()],
        "train_s": round(trained - start, 1),
        "eval_s": round(evaluated - trained, 1),
        "wall_s": round(evaluated - start, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", required=True, help="gymnax env id, e.g. CartPole-v1")
    parser.add_argument("--seeds", type=int, default=4, help="seeds trained together (4)")
    parser.add_argument("--seed", type=int, default=0, help="base seed (0)")
    parser.add_argument("--episodes", type=int, default=164,
                        help="greedy evaluation episodes per seed (164)")  # fmt: skip
    parser.add_argument("--preset", default=None,
                        help="preset to start from (default: the env's; "
                             "'none': PPOConfig's defaults)")  # fmt: skip
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        type=parse_override, metavar="FIELD=VALUE",
                        help="override a PPOConfig field (repeatable)")  # fmt: skip
    parser.add_argument("--note", default="", help="free text stored in the JSON line")
    parser.add_argument("--out", required=True, help="JSON Lines file to append the result to")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.episodes < 1:
        parser.error("--seeds and --episodes must be >= 1")

    overrides = dict(args.overrides)
    try:
        config, preset = make_config(args.env, args.preset, overrides)
    except (TypeError, ValueError, KeyError) as error:
        parser.error(str(error))

    import jax

    target, budget = TARGETS.get(args.env, (None, None))
    line = {
        "env": args.env,
        "preset": preset,
        "overrides": overrides,
        "note": args.note,
        "config": dataclasses.asdict(config),
        "target": target,
        "budget": budget,
        **measure(config, seeds=args.seeds, episodes=args.episodes, seed=args.seed),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "jax": jax.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    line["met"] = bool(target is not None and line["median"] >= target and line["steps"] <= budget)
    text = json.dumps(line)
    with open(args.out, "a") as f:
        f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

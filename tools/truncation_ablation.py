"""Truncation treated as termination vs bootstrapped: an off-policy preset
trained both ways, its greedy policy evaluated along the way (issue 51 item 3).

For each setting of ``truncation_as_termination`` (False: a truncated step
bootstraps from its true final observation, the trainers' target; True: it
does not, ``r + gamma * (1 - done) * ...``, rejax's), the preset of ``--env``
and ``--algo`` is trained for ``--steps`` env steps per seed (``--seeds``
seeds under one vmap; the same keys both ways), and after every ``--every``
env steps each seed's greedy policy plays ``--episodes`` episodes (the same
evaluation keys each time). One JSON line per setting is appended to
``--out`` and printed: ``curve`` (env steps, the median over seeds of the
greedy means, each seed's), the final median, and ``steps_to_target`` (the
first evaluation whose median reaches the target, None if none did).

Usage::

    python tools/truncation_ablation.py --algo sac --env Pendulum-v1 --steps 20000
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from preset_results import OFF_POLICY_TARGETS, append

OUT = os.path.join("docs", "presets", "truncation_ablation.jsonl")


def ablation(env: str, algo: str, *, steps: int, every: int, seeds: int, episodes: int,
             as_termination: bool) -> dict:  # fmt: skip
    """One setting's JSON line (see the module docstring)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxsample.algos import presets, registry
    from jaxsample.evaluation import make_evaluator
    from jaxsample.traj_info import summarize

    preset = presets.for_env(env, algo)
    config = preset.config(total_timesteps=steps, truncation_as_termination=as_termination)
    trainer = registry.get(algo).make_train(config)
    per = config.steps_per_iteration
    chunk = max(1, every // per)
    keys = jax.vmap(jax.random.key)(jnp.arange(seeds, dtype=jnp.uint32))
    eval_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
    try:
        limit = int(np.asarray(trainer.env_params.max_steps_in_episode))
    except (AttributeError, TypeError, ValueError):
        limit = 1000
    evaluator = make_evaluator(trainer.env, trainer.env_params, trainer.agent, n_envs=episodes,
                               max_steps=episodes * (limit + 1))  # fmt: skip
    greedy = jax.jit(jax.vmap(lambda k, p: summarize(evaluator.run(k, p))["episode_return_mean"]))
    run = jax.jit(jax.vmap(lambda s: trainer.run(s, chunk)))
    start = time.perf_counter()
    state = jax.jit(jax.vmap(trainer.init))(keys)
    curve = []
    done = 0
    while done + chunk <= config.num_iterations:
        state, _ = run(state)
        done += chunk
        returns = [round(float(r), 2) for r in np.asarray(greedy(eval_keys, state.params))]
        curve.append({"steps": done * per, "median": float(np.median(returns)),
                      "returns": returns})  # fmt: skip
    target, budget = OFF_POLICY_TARGETS[(env, algo)]
    reached = [point["steps"] for point in curve if point["median"] >= target]
    at_budget = [point for point in curve if point["steps"] <= budget]
    return {
        "env": env, "algo": algo, "preset": preset.name,
        "truncation_as_termination": as_termination, "target": target, "budget": budget,
        "seeds": seeds, "episodes": episodes, "every": chunk * per, "curve": curve,
        "final_median": curve[-1]["median"], "final_returns": curve[-1]["returns"],
        "median_at_budget": at_budget[-1]["median"] if at_budget else None,
        "steps_to_target": reached[0] if reached else None,
        "wall_s": round(time.perf_counter() - start, 1), "jax": jax.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--algo", default="sac", choices=("sac", "td3"))
    parser.add_argument("--steps", type=int, default=None,
                        help="env steps per seed (default: twice the budget)")  # fmt: skip
    parser.add_argument("--every", type=int, default=1000, help="env steps between evaluations")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=164)
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args(argv)
    if (args.env, args.algo) not in OFF_POLICY_TARGETS:
        parser.error(f"no target for --algo {args.algo} on {args.env}")
    steps = args.steps or 2 * OFF_POLICY_TARGETS[(args.env, args.algo)][1]
    for as_termination in (False, True):
        line = ablation(args.env, args.algo, steps=steps, every=args.every, seeds=args.seeds,
                        episodes=args.episodes, as_termination=as_termination)  # fmt: skip
        append(args.out, line)
        short = {k: v for k, v in line.items() if k != "curve"}
        short["medians"] = [(p["steps"], round(p["median"], 1)) for p in line["curve"]]
        print(json.dumps(short), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""PPO self-play on Pgx games: win-or-draw rate against a random legal opponent.

Trains :mod:`jaxsample.algos.ppo` by self-play (one network plays both sides,
negamax values) on ``pgx/<game>``, and after every chunk of iterations
evaluates the greedy policy against a uniformly random legal opponent with
:func:`jaxsample.make_evaluator`: the agent is ``TurnTaking((learner,
random))`` (the learner opens in the even-ranked envs, the opponent in the
odd ones), one game per env, and ``seat_returns()`` gives the learner's
result of each game. Writes the curve as JSON and PNG::

    python tools/selfplay_curves.py tic_tac_toe --out docs/figures
    python tools/selfplay_curves.py connect_four --out docs/figures

The settings are :data:`CONFIGS` (the ones docs/benchmarks.md reports).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

import jaxsample as js
from jaxsample.algos import configs, ppo

#: the self-play presets of :mod:`jaxsample.algos.configs`, per game
CONFIGS: dict[str, ppo.PPOConfig] = {
    "tic_tac_toe": configs.SELF_PLAY_TIC_TAC_TOE,
    "connect_four": configs.SELF_PLAY_CONNECT_FOUR,
}

#: the longest game of each (moves): the evaluator's per-env step budget
MAX_MOVES = {"tic_tac_toe": 9, "connect_four": 42}


def win_rates_of(
    env: Any, env_params: Any, agent: Any, params: Any, key: jax.Array, moves: int, games: int
) -> Any:
    """``(win_or_draw, win)`` of ``agent`` (greedy, with ``params``) against a
    uniformly random legal opponent over ``games`` games of at most ``moves``
    moves (one game per env; the agent opens in the even-ranked envs), by the
    evaluator with ``TurnTaking((agent, random))``; jittable."""
    match = js.agents.TurnTaking((agent, js.agents.RandomAgent(env.action_space(env_params))))
    evaluator = js.make_evaluator(
        env,
        env_params,
        match,
        n_envs=games,
        max_steps=games * moves,
        traj_fields=js.agents.seat_returns(),
    )
    infos = evaluator.run(key, (params, ()))
    result = infos.extra["agent0_return"]
    done = infos.completed
    n = done.sum()
    return ((result >= 0) & done).sum() / n, ((result > 0) & done).sum() / n


def win_rates(trainer: Any, params: Any, key: jax.Array, games: int = 500) -> Any:
    """:func:`win_rates_of` a PPO ``trainer``'s agent on its Pgx game."""
    moves = MAX_MOVES[trainer.env.env.id]
    return win_rates_of(trainer.env, trainer.env_params, trainer.agent, params, key, moves, games)


def curve(game: str, chunks: int = 10, seed: int = 0) -> list[dict[str, float]]:
    """Train ``CONFIGS[game]`` in ``chunks`` equal parts, evaluating after each."""
    config = CONFIGS[game]
    trainer = ppo.make_train(config)
    per = config.num_iterations // chunks
    run = jax.jit(trainer.run, static_argnums=1)
    rates = jax.jit(lambda p, k: win_rates(trainer, p, k))
    state = jax.jit(trainer.init)(jax.random.key(seed))
    out, start = [], time.time()
    for c in range(chunks):
        state, _ = run(state, per)
        wd, w = rates(state.params, jax.random.key(1000 + c))
        row = {
            "env_steps": (c + 1) * per * config.steps_per_iteration,
            "win_or_draw": float(wd),
            "win": float(w),
            "seconds": time.time() - start,
        }
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def plot(game: str, rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.array([r["env_steps"] for r in rows]) / 1e6
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(steps, [r["win_or_draw"] for r in rows], "o-", label="win or draw")
    ax.plot(steps, [r["win"] for r in rows], "s--", label="win")
    ax.axhline(0.95, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("env steps (millions, both sides' moves)")
    ax.set_ylabel("rate vs random legal opponent")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"PPO self-play, pgx/{game}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("game", choices=sorted(CONFIGS))
    p.add_argument("--chunks", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("."))
    args = p.parse_args()
    rows = curve(args.game, args.chunks, args.seed)
    stem = args.out / f"selfplay-pgx-{args.game.replace('_', '-')}"
    stem.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    plot(args.game, rows, stem.with_suffix(".png"))


if __name__ == "__main__":
    main()

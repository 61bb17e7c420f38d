"""A Pgx game's self-play preset through the command line, judged outside the trainer.

Trains as the docs show it, every seed in one program::

    jaxsample train --env pgx/<game> --seeds N --seed S --checkpoint-dir DIR [FLAGS]

then loads the run folder (:func:`jaxsample.runs.load`) and plays each run's
greedy policy against a uniformly random legal opponent in a Pgx loop of its
own (:func:`rates_vs_random`: ``pgx.make``, ``init`` and ``step``, none of
jaxsample's evaluator, agents or env adapter): ``--games`` games a run, the
agent opening half of them. Prints one JSON line (and appends it to
``--out``): ``game``, ``command``, ``seed``, ``seeds``, ``runs`` (their names), ``win_or_draw`` and
``win`` (each run's rate), ``median`` (of ``win_or_draw``), ``min``,
``steps`` (env steps a run, both sides' moves), ``wall_s`` (the train
command's seconds, compilation included), ``games``, ``jax``, ``date``::

    python tools/game_rates.py tic_tac_toe --seeds 4 --seed 0
    # other settings than the preset's: train's own flags after --
    python tools/game_rates.py tic_tac_toe --seed 1 -- --ent-coef 0.1 --update-epochs 8

``tests/test_selfplay.py`` judges the presets with :func:`rates_vs_random`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: the evaluation's key: ``key(EVAL_SEED)``, folded with the run's index
EVAL_SEED = 2024


def play(policy: Any, env: Any, games: int, key: jax.Array) -> jax.Array:
    """The agent's result of each of ``games`` games of the Pgx env ``env``
    (``pgx.make(game)``, made outside any jit: Pgx's game modules build
    arrays when first imported) against a uniformly random legal opponent
    (float32 ``[games]``: +1 a win, 0 a draw, -1 a loss); game ``i`` is
    opened by the agent when ``i`` is even. ``policy(observation,
    legal_action_mask) -> action`` acts for one game (Pgx's observation from
    the mover's view, bool ``[num_actions]``); an illegal move loses the game
    (Pgx's rule). Jittable."""
    init_key, key = jax.random.split(key)
    state = jax.vmap(env.init)(jax.random.split(init_key, games))
    opens = jnp.arange(games) % 2 == 0
    me = jnp.where(opens, state.current_player, 1 - state.current_player)
    rows = jnp.arange(games)

    def body(carry: Any) -> Any:
        state, result, key = carry
        key, opponent_key, step_key = jax.random.split(key, 3)
        mine = jax.vmap(policy)(state.observation, state.legal_action_mask)
        legal = jnp.where(state.legal_action_mask, 0.0, -jnp.inf)
        theirs = jax.random.categorical(opponent_key, legal)  # uniform over the legal moves
        action = jnp.where(state.current_player == me, mine, theirs)
        state = jax.vmap(env.step)(state, action, jax.random.split(step_key, games))
        return state, result + state.rewards[rows, me], key

    carry = (state, jnp.zeros(games, jnp.float32), key)
    _, result, _ = jax.lax.while_loop(lambda c: ~c[0].terminated.all(), body, carry)
    return result


def rates_vs_random(run: Any, games: int = 1000, seed: int = EVAL_SEED) -> list[dict[str, float]]:
    """Each run of a loaded run folder (``jaxsample.runs.load``), its greedy
    policy (the argmax of its legal logits) against a uniformly random legal
    opponent over ``games`` games (:func:`play`, key ``fold_in(key(seed),
    r)`` for run ``r``): ``{"win_or_draw", "win", "first", "second"}`` per
    run (``first``/``second``: the win-or-draw rate of the games the agent
    opened / answered)."""
    import pgx

    env = pgx.make(run.config.env_name.removeprefix("pgx/"))
    agent = run.agent

    def results(params: Any, key: jax.Array) -> jax.Array:
        def policy(observation: jax.Array, legal: jax.Array) -> jax.Array:
            logits = agent.forward(params, observation)[0]
            return jnp.argmax(jnp.where(legal, logits, -jnp.inf))

        return play(policy, env, games, key)

    keys = jax.vmap(lambda r: jax.random.fold_in(jax.random.key(seed), r))(
        jnp.arange(len(run.names))
    )
    out = np.asarray(jax.jit(jax.vmap(results))(run.params, keys))
    opened = np.arange(games) % 2 == 0
    return [
        {
            "win_or_draw": float((r >= 0).mean()),
            "win": float((r > 0).mean()),
            "first": float((r[opened] >= 0).mean()),
            "second": float((r[~opened] >= 0).mean()),
        }
        for r in out
    ]


def train_command(game: str, seeds: int, seed: int, folder: str, flags: list[str]) -> list[str]:
    """The ``jaxsample train`` command line of ``game``'s preset."""
    return [
        "jaxsample", "train", "--env", f"pgx/{game}", "--seeds", str(seeds), "--seed", str(seed),
        "--checkpoint-dir", folder, *flags,
    ]  # fmt: skip


def measure(
    game: str, seeds: int, seed: int, flags: list[str], games: int, folder: str
) -> dict[str, Any]:
    """Train through the command line into ``folder``, evaluate, one result line."""
    from jaxsample import runs

    command = train_command(game, seeds, seed, folder, flags)
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", *command], check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - start
    run = runs.load(folder)
    rates = rates_vs_random(run, games)
    wd = [r["win_or_draw"] for r in rates]
    return {
        "game": game, "command": " ".join(command), "seed": seed, "seeds": seeds,
        "runs": run.names, "win_or_draw": wd, "win": [r["win"] for r in rates],
        "first": [r["first"] for r in rates], "second": [r["second"] for r in rates],
        "median": statistics.median(wd), "min": min(wd),
        "steps": run.iteration * run.config.steps_per_iteration, "wall_s": round(wall, 1),
        "games": games, "jax": jax.__version__,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("game", help="a Pgx two-player game with a preset (tic_tac_toe, connect_four)")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--seed", type=int, default=0, help="train's base seed")
    p.add_argument("--games", type=int, default=1000)
    p.add_argument("--checkpoint-dir", help="the run folder (default: a temporary one)")
    p.add_argument("--out", help="append the JSON line here")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args, flags = p.parse_args(argv[:cut]), argv[cut + 1 :]  # train's own flags after --
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.checkpoint_dir or os.path.join(tmp, "run")
        line = measure(args.game, args.seeds, args.seed, flags, args.games, folder)
    text = json.dumps(line)
    print(text, flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()

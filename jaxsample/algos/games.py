"""Two-player zero-sum games: the trained policy against a uniformly random legal opponent.

In self-play (a Pgx game, [`jaxsample.envs.suites.PgxEnv`][jaxsample.envs.suites.PgxEnv]) every
game is decided by one of the two sides the agent plays, so its episode return
is 1 or 0 whatever it has learned. What tells how well it plays is a match
against an opponent: [`VsRandom`][jaxsample.algos.games.VsRandom] plays the greedy policy
against a uniformly random legal opponent with
[`jaxsample.make_evaluator`][jaxsample.evaluation.make_evaluator] and
[`jaxsample.agents.TurnTaking`][jaxsample.agents.TurnTaking] (the policy opens in the games of
even env rank, the opponent in the others: half the games each) and reports
the win, draw and loss rates of the policy's finished games
(`METRICS`), as docs/guides/masks-and-games.md does by hand.

PPO's trainer ([`jaxsample.algos.ppo.make_train`][jaxsample.algos.ppo.make_train]) evaluates so
inside its compiled iteration, every ``eval_every`` iterations and at the
last one, when its env is a zero-sum two-player game (`is_game`); the
other iterations report NaN. The run loop ([`jaxsample.runs.loop`][jaxsample.runs.loop]) carries
the latest evaluation in its progress events and summary.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsample.agents import RandomAgent, TurnTaking, seat_returns
from jaxsample.evaluation import Evaluator, make_evaluator
from jaxsample.types import PyTree

__all__ = [
    "KEY_SALT", "MAX_MOVES", "METRICS", "VsRandom", "is_game", "latest", "vs_random", "when",
]  # fmt: skip

#: The metrics of an evaluation, in order: the fractions of the policy's
#: finished games it won or drew, won, drew and lost.
METRICS = ("win_or_draw_vs_random", "win_vs_random", "draw_vs_random", "loss_vs_random")
#: An evaluation's key is ``jax.random.fold_in(state.key, KEY_SALT)`` of the
#: trainer state after the iteration: the training's own keys are untouched, so
#: a run trains the same with and without evaluations.
KEY_SALT = 0x5EA7
#: Moves a game may last in an evaluation when the env sets no ``episode_length``
#: (a game cut there is left out of the rates).
MAX_MOVES = 10_000


def is_game(env: Any) -> bool:
    """Whether ``env`` is a zero-sum two-player game (its ``zero_sum``
    attribute, True for Pgx's two-player games), whose steps carry Pgx's
    ``env_info`` ``player`` and ``rewards``."""
    return bool(getattr(env, "zero_sum", False))


@dataclasses.dataclass(frozen=True, eq=False)
class VsRandom:
    """Evaluations of a policy against a uniformly random legal opponent, as
    one trainer reports them (build it with `vs_random`).

    Attributes:
      evaluator: the [`Evaluator`][jaxsample.evaluation.Evaluator] of
        ``TurnTaking((agent, RandomAgent(space)))``, one game per env.
      every: evaluate after every ``every``-th iteration ...
      last: ... and after iteration ``last`` (the run's last; 1-based counts).
    """

    evaluator: Evaluator
    every: int
    last: int

    def rates(self, params: PyTree, key: jax.Array) -> dict[str, jax.Array]:
        """`METRICS` of one evaluation of the agent with ``params`` (float32
        scalars; NaN when no game finished); jittable."""
        infos = self.evaluator.run(key, (params, ()))
        done = infos.completed
        result = infos.extra["agent0_return"]
        n = done.sum(dtype=jnp.float32)
        win, draw, loss = (
            (outcome & done).sum(dtype=jnp.float32) / n
            for outcome in (result > 0, result == 0, result < 0)
        )
        return dict(zip(METRICS, (win + draw, win, draw, loss), strict=True))

    def metrics(self, params: PyTree, key: jax.Array, done: jax.Array) -> dict[str, jax.Array]:
        """`rates` after iteration ``done`` (int32, iterations done) when it is
        due, with key ``fold_in(key, KEY_SALT)``; NaN otherwise."""
        due = (done % self.every == 0) | (done == self.last)
        return when(due, self.rates, params, jax.random.fold_in(key, KEY_SALT))


def when(due: jax.Array, fn: Callable[..., PyTree], *args: Any) -> PyTree:
    """``fn(*args)`` where ``due`` (a bool scalar), NaN-filled leaves elsewhere.

    A ``lax.while_loop`` of zero or one trip rather than ``lax.cond``: under
    ``jax.vmap`` (several runs of one program, whose iteration counts agree)
    a ``cond`` whose predicate is batched runs both branches every time,
    while the loop runs as long as any run's predicate holds: ``fn`` runs at
    the due iterations only, batched or not. ``args`` enter the body through
    an optimization barrier with the loop's flag, so that XLA cannot hoist
    ``fn`` out of the loop as loop-invariant (it would then run every time).
    """
    shapes = jax.eval_shape(fn, *args)
    nan = jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)

    def body(carry: tuple) -> tuple:
        flag, _ = carry
        inputs, _ = jax.lax.optimization_barrier((args, flag))
        return jnp.zeros((), bool), fn(*inputs)

    return jax.lax.while_loop(lambda c: c[0], body, (jnp.asarray(due, bool), nan))[1]


def vs_random(
    env: Any, env_params: Any, agent: Any, *, games: int, every: int, last: int
) -> VsRandom | None:
    """The evaluations a trainer reports on ``env``: None unless ``env`` is a
    game (`is_game`) and ``games > 0``.

    ``games`` games (one per env; an even number: half opened by each side)
    of at most ``env.episode_length`` (else `MAX_MOVES`) moves, after every
    ``every``-th iteration and after iteration ``last``.
    """
    if not is_game(env) or not games:
        return None
    moves = getattr(env, "episode_length", None) or MAX_MOVES
    match = TurnTaking((agent, RandomAgent(env.action_space(env_params))))
    evaluator = make_evaluator(
        env, env_params, match, n_envs=games, max_steps=games * moves, traj_fields=seat_returns()
    )
    return VsRandom(evaluator, every, last)


def latest(values: Any) -> np.ndarray:
    """``[R]``: each run's (row of ``values`` ``[R, I]``) last finite value,
    NaN where none is."""
    values = np.asarray(values, np.float64).reshape(np.shape(values)[0], -1)
    out = [row[np.isfinite(row)][-1] if np.isfinite(row).any() else math.nan for row in values]
    return np.asarray(out, np.float64)


def final(metrics: dict[str, Any]) -> dict[str, Any]:
    """The summary of a run's evaluations (JSON-ready; empty without them):
    per metric of `METRICS` in ``metrics`` (``[R, I]`` each),
    ``final_<metric>``, the mean over runs of each run's `latest`
    (None when none is finite), and ``final_<metric>_per_seed``."""
    out: dict[str, Any] = {}
    for name in (m for m in METRICS if m in metrics):
        last = latest(metrics[name])
        finite = np.isfinite(last)
        out[f"final_{name}"] = float(last[finite].mean()) if finite.any() else None
        out[f"final_{name}_per_seed"] = [float(x) if math.isfinite(x) else None for x in last]
    return out


def progress(event: dict[str, Any], metrics: dict[str, Any], held: list[float]) -> dict[str, Any]:
    """``event`` (a progress event of the runner) with ``recent_win_or_draw``
    when ``metrics`` (``[R, I]``) has ``win_or_draw_vs_random``: the mean
    over runs of its `latest` values, else the last one ``held`` (which it
    updates; NaN before the first evaluation)."""
    if METRICS[0] in metrics:
        now = latest(metrics[METRICS[0]])
        if np.isfinite(now).any():
            held[:] = [float(np.nanmean(now))]
        event["recent_win_or_draw"] = held[0] if held else math.nan
    return event

"""Pgx games as gymnax envs: [`from_pgx`][jaxsample.envs.suites.from_pgx].

Pgx (``pgx.make("tic_tac_toe")``) steps ``state = env.step(state, action,
key)``; one env is one game with ``state.num_players`` players who take turns
(``state.current_player`` moves next). The adapter plays every player's moves
in one env (self-play: one agent acts for whoever is to move):

* the observation is Pgx's ``state.observation``, the board from the view of
  the player to move;
* the legal actions are ``state.legal_action_mask``
  ([`PgxEnv.action_mask`][jaxsample.envs.suites.PgxEnv.action_mask],
  bool ``[num_actions]``): jaxsample's agents act only on legal ones;
* ``reward`` is ``state.rewards[player]`` of the player who moved (the acting
  player's view: +1 for the winning move of a two-player game);
* ``env_info`` holds ``player`` (int32, ``current_player`` before the move:
  who acted), ``next_player`` (int32, ``current_player`` after it: whose view
  the next observation and its value are in) and ``rewards`` (float32
  ``[num_players]``, every player's reward of the step);
* ``terminated`` is ``state.terminated`` (the game is over); Pgx's games never
  set ``state.truncated`` themselves ("current Pgx environments do not invoke
  truncation", ``pgx/core.py``), so truncation comes only from the adapter's
  ``episode_length``.

[`player_returns`][jaxsample.envs.suites.player_returns] gives the per-player returns as TrajInfo
fields
(``traj_fields=`` of the sampler and the evaluator).
[`PgxEnv.zero_sum`][jaxsample.envs.suites.PgxEnv.zero_sum]
says that the values of a two-player game are negamax values (one player's
gain is the other's loss): PPO then bootstraps with the sign of
[`jaxsample.algos.returns.turn_signs`][jaxsample.algos.returns.turn_signs].
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from jaxsample.envs.suites.base import SuiteEnv, SuiteState, SuiteStep, box
from jaxsample.traj_info import TrajField
from jaxsample.types import PyTree, key_spec

__all__ = ["PgxEnv", "from_pgx", "make_pgx", "player_returns"]


class PgxEnv(SuiteEnv):
    """A Pgx ``Env`` as a gymnax env (see the module docstring). The key of
    a step is passed to Pgx's step (its stochastic games draw from it)."""

    suite = "pgx"

    def __init__(self, env: Any, episode_length: int | None = None) -> None:
        for name in ("init", "step", "num_players", "id"):
            if not hasattr(env, name):
                raise TypeError(f"env must be a Pgx Env, got {env!r}")
        super().__init__(episode_length, env)
        # abstractly: Pgx's num_actions / observation_shape run init eagerly
        state = jax.eval_shape(env.init, key_spec())
        self._num_actions = int(state.legal_action_mask.shape[0])
        self._observation = state.observation
        self.num_players = int(env.num_players)

    @property
    def zero_sum(self) -> bool:
        """Whether values are negamax values: two players, one's gain the
        other's loss (Pgx's two-player games are)."""
        return self.num_players == 2

    def suite_reset(self, key: jax.Array, params: Any) -> tuple[PyTree, PyTree]:
        state = self.env.init(key)
        return state.observation, state

    def suite_step(self, key: jax.Array, inner: PyTree, action: Any, params: Any) -> SuiteStep:
        player = jnp.asarray(inner.current_player, jnp.int32)
        state = self.env.step(inner, action, key)
        rewards = jnp.asarray(state.rewards, jnp.float32)
        info = {
            "player": player,
            "next_player": jnp.asarray(state.current_player, jnp.int32),
            "rewards": rewards,
        }
        return SuiteStep(
            state.observation, state, rewards[player], state.terminated, state.truncated, info
        )

    def suite_time_limit(self, params: Any) -> float | None:
        """``math.inf``: Pgx's games never truncate by themselves (module
        docstring)."""
        return math.inf

    def action_mask(self, state: SuiteState, params: Any) -> jax.Array:
        """bool ``[num_actions]``: the legal actions of the observation that
        goes with ``state`` (Pgx's ``legal_action_mask``)."""
        return jnp.asarray(state.inner.legal_action_mask, bool)

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(self._num_actions)

    def observation_space(self, params: Any = None) -> spaces.Box:
        obs = self._observation
        high = 1 if obs.dtype == jnp.bool_ else jnp.iinfo(jnp.int32).max
        return box(0, high, obs.shape, obs.dtype)

    @property
    def name(self) -> str:
        """``"pgx/<Pgx's env id>"``, e.g. ``"pgx/tic_tac_toe"``."""
        return f"pgx/{self.env.id}"


def player_returns(num_players: int = 2) -> list[TrajField]:
    """TrajInfo fields ``player<i>_return`` (float32): player ``i``'s return
    of the game, summed from ``env_info["rewards"][i]`` of a
    [`PgxEnv`][jaxsample.envs.suites.PgxEnv]
    (``traj_fields=`` of the sampler or the evaluator)."""
    if isinstance(num_players, bool) or not isinstance(num_players, int) or num_players < 1:
        raise ValueError(f"num_players must be a positive int, got {num_players!r}")

    def field(i: int) -> TrajField:
        return TrajField(f"player{i}_return", 0.0, lambda v, s: v + s.env_info["rewards"][i])

    return [field(i) for i in range(num_players)]


def from_pgx(env: Any, episode_length: int | None = None) -> PgxEnv:
    """Adapt a Pgx env; ``episode_length`` truncates a game that lasts that
    many moves (None: games end only by themselves)."""
    return PgxEnv(env, episode_length)


def make_pgx(name: str, *, episode_length: int | None = None) -> PgxEnv:
    """``from_pgx(pgx.make(name))``, e.g. ``"tic_tac_toe"``, ``"connect_four"``."""
    import pgx

    if name not in pgx.available_envs():
        raise ValueError(f"unknown Pgx env {name!r}; one of {list(pgx.available_envs())}")
    return from_pgx(pgx.make(name), episode_length)

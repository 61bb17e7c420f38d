"""Several agents taking turns in one game: [`TurnTaking`][jaxsample.agents.TurnTaking].

A two-player game adapted for self-play
([`jaxsample.envs.suites.PgxEnv`][jaxsample.envs.suites.PgxEnv])
has one env per game and one agent acting for whoever moves. To play a
trained agent against another one (a uniformly random legal opponent, an
older copy), [`TurnTaking`][jaxsample.agents.TurnTaking] is one agent made of ``agents``: at the
``k``-th move of an episode (0-based) agent ``(k + env_rank) % len(agents)``
acts, so across envs each agent moves first as often as the others (for two
agents: agent 0 opens in the envs of even rank). The move count is the
agent's state, so the sampler's and the evaluator's resets restart it. This
fits games whose players strictly alternate (tic-tac-toe, connect four,
chess, Go: a pass is a move), not games where a player may move twice in a
row (backgammon).

``agent_info`` is ``{"agent": int32}``, the index of the agent that acted;
[`seat_returns`][jaxsample.agents.seat_returns] turns it into every agent's return of the game as
TrajInfo fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxsample.traj_info import TrajField, TrajStep
from jaxsample.types import AgentInputs, AgentStep, PyTree

__all__ = ["TurnTaking", "seat_returns"]


def _select(index: jax.Array, trees: Sequence[PyTree]) -> PyTree:
    """``trees[index]`` leaf by leaf (``index`` a traced int32 scalar)."""
    return jax.tree.map(lambda *x: jnp.stack(x)[index], *trees)


@dataclasses.dataclass(frozen=True)
class TurnTaking:
    """``agents`` taking turns (module docstring); ``params`` is the tuple of
    the agents' params, the state ``(move, rank, states)``: int32 move count,
    the env's rank and each agent's own state (advanced only on its moves).

    The agents' actions must have one structure (the same action space).
    """

    agents: tuple[Any, ...]

    def __post_init__(self) -> None:
        agents = tuple(self.agents)
        if len(agents) < 2:
            raise ValueError(f"agents must hold at least two agents, got {len(agents)}")
        for i, a in enumerate(agents):
            for name in ("initial_state", "step", "value", "as_eval"):
                if not callable(getattr(a, name, None)):
                    raise TypeError(f"agents[{i}] must be an agent with {name}(), got {a!r}")
        object.__setattr__(self, "agents", agents)

    def mover(self, state: tuple[jax.Array, jax.Array, PyTree]) -> jax.Array:
        """int32: the index of the agent that moves at ``state``."""
        move, rank, _ = state
        return (move + rank) % len(self.agents)

    def init(self, key: jax.Array, observation: PyTree) -> tuple[PyTree, ...]:
        """Each agent's ``init`` (``()`` for one without)."""
        keys = jax.random.split(key, len(self.agents))
        return tuple(
            a.init(k, observation) if hasattr(a, "init") else ()
            for a, k in zip(self.agents, keys, strict=True)
        )

    def initial_state(self, env_rank: jax.Array) -> tuple[jax.Array, jax.Array, PyTree]:
        rank = jnp.asarray(env_rank, jnp.int32)
        states = tuple(a.initial_state(env_rank) for a in self.agents)
        return jnp.zeros((), jnp.int32), rank, states

    def step(
        self, params: tuple[PyTree, ...], inputs: AgentInputs, state: Any, key: jax.Array
    ) -> tuple[AgentStep, Any]:
        """The acting agent's action; only its state advances."""
        move, rank, states = state
        who = self.mover(state)
        outs = [
            a.step(p, inputs, s, key) for a, p, s in zip(self.agents, params, states, strict=True)
        ]
        action = _select(who, [step.action for step, _ in outs])
        new_states = tuple(
            jax.tree.map(lambda n, o, i=i: jnp.where(who == i, n, o), new, old)
            for i, ((_, new), old) in enumerate(zip(outs, states, strict=True))
        )
        info = {"agent": who.astype(jnp.int32)}
        return AgentStep(action, info), (move + 1, rank, new_states)

    def value(self, params: tuple[PyTree, ...], inputs: AgentInputs, state: Any) -> jax.Array:
        """The moving agent's value of ``inputs``."""
        _, _, states = state
        values = [
            jnp.asarray(a.value(p, inputs, s), jnp.float32)
            for a, p, s in zip(self.agents, params, states, strict=True)
        ]
        return jnp.stack(values)[self.mover(state)]

    def as_eval(self) -> TurnTaking:
        """Every agent in its evaluation behaviour."""
        return TurnTaking(tuple(a.as_eval() for a in self.agents))


def seat_returns(num_agents: int = 2) -> list[TrajField]:
    """TrajInfo fields ``agent<i>_return`` (float32): the return of the game
    for the player agent ``i`` of a [`TurnTaking`][jaxsample.agents.TurnTaking] plays, in a
    two-player game with per-player rewards (``env_info["rewards"]`` and
    ``env_info["player"]``, the acting player, as a Pgx env gives them): +1 a
    win, 0 a draw, -1 a loss. The player of agent ``i`` is the one who acted
    where it moved, the other one elsewhere."""
    if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents != 2:
        raise ValueError(f"seat_returns is for two agents (two players), got {num_agents!r}")

    def field(i: int) -> TrajField:
        def update(value: jax.Array, step: TrajStep) -> jax.Array:
            acting = step.env_info["player"]
            player = jnp.where(step.agent_info["agent"] == i, acting, 1 - acting)
            return value + step.env_info["rewards"][player]

        return TrajField(f"agent{i}_return", 0.0, update)

    return [field(i) for i in range(num_agents)]

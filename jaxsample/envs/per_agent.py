"""The action space of a team of agents that share one space:
[`PerAgent`][jaxsample.envs.per_agent.PerAgent].

A multi-agent env (``jaxsample.envs.suites.jaxmarl``) takes one action per
agent, stacked on a leading agent axis ``[N, *act]``. gymnax has no space for
that (its ``Discrete`` is a scalar), so the env's ``action_space`` is a
[`PerAgent`][jaxsample.envs.per_agent.PerAgent]: ``sample`` draws every agent's action, ``space`` is
one
agent's space (what a shared agent, [`jaxsample.agents.SharedAgent`][jaxsample.agents.SharedAgent],
is built from).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import spaces

__all__ = ["PerAgent"]


class PerAgent(spaces.Space):
    """The same ``space`` for each of ``num_agents`` agents.

    A value is the agents' values stacked on a leading axis: ``shape`` is
    ``(num_agents, *space.shape)``, ``dtype`` the space's. ``sample(key)``
    draws agent ``i``'s value from ``split(key, num_agents)[i]``.
    """

    def __init__(self, space: Any, num_agents: int) -> None:
        if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
            raise ValueError(f"num_agents must be an int >= 1, got {num_agents!r}")
        if not hasattr(space, "sample"):
            raise TypeError(f"space must be a gymnax space, got {space!r}")
        self.space = space
        self.num_agents = num_agents
        shape = space.shape
        shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
        self.shape = (num_agents, *shape)
        self.dtype = space.dtype

    def __repr__(self) -> str:
        return f"PerAgent({self.space!r}, num_agents={self.num_agents})"

    def sample(self, key: jax.Array) -> jax.Array:
        """Every agent's value ``[num_agents, *space.shape]``."""
        return jax.vmap(self.space.sample)(jax.random.split(key, self.num_agents))

    def contains(self, x: jax.Array) -> jax.Array:
        """Whether every agent's value is in ``space`` (a bool scalar)."""
        return jnp.all(jax.vmap(self.space.contains)(jnp.asarray(x)))

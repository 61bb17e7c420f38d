"""One agent acting for a team of agents with shared parameters:
[`SharedAgent`][jaxsample.agents.SharedAgent].

Parameter sharing (IPPO/MAPPO-style) in jaxsample's terms: a multi-agent env
(``jaxsample.envs.suites.jaxmarl``) stacks its agents on a leading axis of
every per-env input (``observation`` ``[N, *obs]``, ``prev_action``
``[N, *act]``, ``prev_reward`` ``[N]``, ``action_mask`` ``[N, A]``), and
[`SharedAgent`][jaxsample.agents.SharedAgent] vmaps ONE single-agent agent over that axis with the
same ``params``: the agents are one more batch axis, after the sampler's
``[T, B]``. Each agent has its own recurrent state and its own key; its
rank (what ``initial_state`` gets) is ``env_rank * N + i``, so ranks stay
distinct over all envs' agents.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jaxsample.types import AgentInputs, AgentStep, PyTree

__all__ = ["SharedAgent"]


def _first(tree: PyTree) -> PyTree:
    return jax.tree.map(lambda x: x[0], tree)


@dataclasses.dataclass(frozen=True)
class SharedAgent:
    """``agent`` (written for one agent of one env) acting for ``num_agents``
    agents of one env, all with the same ``params``.

    Attributes:
      agent: a single-agent [`Agent`][jaxsample.agents.Agent] (e.g.
        [`CategoricalActorCritic`][jaxsample.agents.CategoricalActorCritic] of one agent's action
        space, ``env.action_space(params).space``).
      num_agents: ``N``, the length of the agent axis.

    Every function takes and returns what ``agent``'s does with a leading
    ``[N]`` axis (``value`` is ``[N]``; ``agent_info`` ``[N, ...]``); ``step``
    draws agent ``i``'s action with ``split(key, N)[i]``. The learner-side
    helpers ``evaluate`` (``[N]`` each) and ``evaluate_sequence`` (``[T, N]``
    each, inputs ``[T, N, ...]``) are ``agent``'s, vmapped, where it has them.
    """

    agent: Any
    num_agents: int

    def __post_init__(self) -> None:
        n = self.num_agents
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"num_agents must be an int >= 1, got {n!r}")
        for name in ("initial_state", "step", "value"):
            if not callable(getattr(self.agent, name, None)):
                raise TypeError(f"agent must be a jaxsample agent (no {name}), got {self.agent!r}")
        if isinstance(self.agent, SharedAgent):
            raise TypeError("agent is already a SharedAgent")

    def _check(self, inputs: AgentInputs) -> None:
        for leaf in jax.tree.leaves(inputs):
            if leaf.ndim < 1 or leaf.shape[0] != self.num_agents:
                raise ValueError(
                    f"SharedAgent of {self.num_agents} agents: every input must have a leading "
                    f"agent axis of {self.num_agents}, got shape {list(leaf.shape)}"
                )

    def init(self, key: jax.Array, observation: PyTree) -> PyTree:
        """``agent.init`` from the first agent's observation (``observation``
        is ``[N, *obs]``): the one set of shared parameters."""
        return self.agent.init(key, _first(observation))

    def initial_state(self, env_rank: jax.Array) -> PyTree:
        """Every agent's initial state ``[N, ...]``; agent ``i`` of env ``r``
        has rank ``r * N + i``."""
        ranks = env_rank * self.num_agents + jnp.arange(self.num_agents, dtype=jnp.int32)
        return jax.vmap(self.agent.initial_state)(ranks)

    def step(
        self, params: PyTree, inputs: AgentInputs, state: PyTree, key: jax.Array
    ) -> tuple[AgentStep, PyTree]:
        """Every agent's step: actions ``[N, *act]``, ``agent_info`` ``[N, ...]``."""
        self._check(inputs)
        keys = jax.random.split(key, self.num_agents)
        return jax.vmap(self.agent.step, in_axes=(None, 0, 0, 0))(params, inputs, state, keys)

    def value(self, params: PyTree, inputs: AgentInputs, state: PyTree) -> jax.Array:
        """Every agent's value ``[N]``."""
        self._check(inputs)
        return jax.vmap(self.agent.value, in_axes=(None, 0, 0))(params, inputs, state)

    def as_eval(self) -> SharedAgent:
        """The same team acting with ``agent.as_eval()``."""
        return dataclasses.replace(self, agent=self.agent.as_eval())

    def evaluate(
        self, params: PyTree, inputs: AgentInputs, action: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``agent.evaluate`` for every agent: ``(log_prob, entropy, value)``, each ``[N]``."""
        return jax.vmap(self.agent.evaluate, in_axes=(None, 0, 0))(params, inputs, action)

    def evaluate_sequence(
        self, params: PyTree, *sequence: Any
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``agent.evaluate_sequence`` for every agent; ``sequence`` is
        ``(inputs, initial_state, reset, action)``: inputs and ``action``
        ``[T, N, ...]``, ``initial_state`` ``[N, ...]``, ``reset`` ``[T]`` (the
        env's). Returns ``(log_prob, entropy, value)``, each ``[T, N]``."""
        run = jax.vmap(self.agent.evaluate_sequence, in_axes=(None, 1, 0, None, 1), out_axes=1)
        return run(params, *sequence)

"""The agent protocol, the null action and [`RandomAgent`][jaxsample.agents.RandomAgent].

An agent is three pure functions written for **one** environment; the sampler
vmaps them over ``B`` environments. No batch dimension appears inside an agent.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from jaxsample.agents.masks import legal, uniform_legal
from jaxsample.types import AgentInputs, AgentStep, PyTree, key_spec


@runtime_checkable
class Agent(Protocol):
    """What the sampler needs from an agent (all functions are per environment).

    * ``initial_state(env_rank)``: the recurrent state at the start of an episode
      (use ``()`` for a feedforward agent); ``env_rank`` is the env's global index
      ``0 .. global_B - 1``, an int32 scalar, so each env can get its own
      constants (e.g. its epsilon).
    * ``step(params, inputs, state, key) -> (AgentStep, state)``: the action for
      one env and whatever ``agent_info`` the learner needs (same structure on
      every call).
    * ``value(params, inputs, state) -> scalar``: the value estimate of ``inputs``,
      used for ``bootstrap_value``; must not need to advance ``state``.
    * ``as_eval()``: the same agent acting in its evaluation (greedy) behaviour.
    """

    def initial_state(self, env_rank: jax.Array) -> PyTree: ...

    def step(
        self, params: PyTree, inputs: AgentInputs, state: PyTree, key: jax.Array
    ) -> tuple[AgentStep, PyTree]: ...

    def value(self, params: PyTree, inputs: AgentInputs, state: PyTree) -> jax.Array: ...

    def as_eval(self) -> Agent: ...


def null_action(space: Any) -> PyTree:
    """The all-zeros action of ``space`` (what ``prev_action`` is after a reset)."""
    shapes = jax.eval_shape(space.sample, key_spec())
    # numpy's zeros, put on the device: eager jnp.zeros would compile a program
    return jax.tree.map(lambda s: jax.device_put(np.zeros(s.shape, s.dtype)), shapes)


def action_spec(space: Any) -> PyTree:
    """``jax.ShapeDtypeStruct`` leaves of one action drawn from ``space``."""
    return jax.eval_shape(space.sample, key_spec())


def num_actions(space: Any) -> int:
    """Number of actions of a ``Discrete`` space, with a clear error otherwise."""
    if not isinstance(space, spaces.Discrete):
        raise TypeError(
            f"action_space must be gymnax.environments.spaces.Discrete, got {type(space).__name__}"
        )
    return int(space.n)


def random_action(space: Any, inputs: AgentInputs, key: jax.Array) -> PyTree:
    """A uniformly random action of ``space``: among the legal ones of
    ``inputs.action_mask`` where it is not None (``space`` then ``Discrete``,
    mask ``[n]``; or a team's ``PerAgent`` of ``Discrete``, mask ``[N, n]``:
    each agent's among its own), else ``space.sample(key)``."""
    if inputs.action_mask is None:
        return space.sample(key)
    n = num_actions(getattr(space, "space", space))  # PerAgent: one agent's space
    return uniform_legal(key, legal(inputs.action_mask, n), jnp.dtype(space.dtype))


class Stateless:
    """The ``initial_state`` of an agent without recurrent state (a base class)."""

    def initial_state(self, env_rank: jax.Array) -> PyTree:
        """Feedforward: the state is ``()``."""
        del env_rank
        return ()


@dataclasses.dataclass(frozen=True)
class RandomAgent(Stateless):
    """Uniformly random actions from ``action_space``; stateless, no parameters.

    With ``inputs.action_mask`` (bool ``[n]``, a ``Discrete(n)`` space) the
    action is uniform over the legal actions; without one it is
    ``action_space.sample(key)``. ``value`` is 0 (a random agent has no value
    estimate) and ``agent_info`` is empty.
    """

    action_space: Any

    def init(self, key: jax.Array, observation: PyTree) -> PyTree:
        """A random agent has no parameters: ``()``."""
        del key, observation
        return ()

    def step(
        self, params: PyTree, inputs: AgentInputs, state: PyTree, key: jax.Array
    ) -> tuple[AgentStep, PyTree]:
        del params
        return AgentStep(action=random_action(self.action_space, inputs, key), agent_info=()), state

    def value(self, params: PyTree, inputs: AgentInputs, state: PyTree) -> jax.Array:
        del params, inputs, state
        return jnp.zeros((), jnp.float32)

    def as_eval(self) -> RandomAgent:
        return self

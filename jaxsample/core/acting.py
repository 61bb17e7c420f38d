"""The agent's half of the per-env step: `AgentCarry` and `AgentStepper`.

Every sampler carries, per env, what the agent sees besides the observation:
its previous action and reward and its recurrent state (`AgentCarry`).
The JAX samplers carry it inside `EnvCarry` (with
the env's state and observation); the host sampler carries it on the device
next to its numpy observations. Both advance it with `AgentStepper.act`
and restart it after an episode end with `restart` — the one place
docs/design.md's rule is written: after ``done`` the agent sees the null
action (zeros), a 0 reward and ``agent.initial_state(env_rank)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsample.agents.base import Agent, random_action
from jaxsample.core.liveness import reads_inputs
from jaxsample.core.masking import agent_inputs
from jaxsample.core.specs import REWARD, act_checked, initial_agent_state
from jaxsample.types import AgentInputs, AgentStep, PyTree

# act(inputs, agent_state, key) -> (AgentStep, agent_state): the agent's step
# with its parameters bound (or random actions, for decorrelation).
ActFn = Callable[[AgentInputs, PyTree, jax.Array], tuple[AgentStep, PyTree]]


def where_leading(cond: jax.Array, x: PyTree, y: PyTree) -> PyTree:
    """``where(cond, x, y)`` leaf by leaf; ``cond``'s axes lead the leaves'
    (a scalar per env, ``[B]`` for a batch, ``[T, B]`` for a batch's steps)."""

    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        b = jnp.asarray(b)
        return jnp.where(cond.reshape(cond.shape + (1,) * (b.ndim - cond.ndim)), a, b)

    return jax.tree.map(pick, x, y)


def restart_where(done: jax.Array, x: PyTree) -> PyTree:
    """``x`` with zeros (the null action, a 0 reward: what the agent sees as
    its previous ones after an episode end) where ``done``; ``done``'s axes
    lead ``x``'s."""
    return where_leading(done, jax.tree.map(jnp.zeros_like, x), x)


@struct.dataclass
class AgentCarry:
    """What the agent sees next besides the observation (scalars per env;
    ``[B, ...]`` batched).

    Attributes:
      prev_action: its previous action (the null action after a reset).
      prev_reward: float32, its previous reward (0 after a reset).
      agent_state: its recurrent state.
      env_rank: int32, the env's global rank (``agent.initial_state``'s argument).
    """

    prev_action: PyTree
    prev_reward: jax.Array
    agent_state: PyTree
    env_rank: jax.Array


def restart(
    carry: AgentCarry,
    done: jax.Array,
    action: PyTree,
    reward: jax.Array,
    agent_state: PyTree,
    initial_state: PyTree,
    previous: bool = True,
) -> AgentCarry:
    """The agent's carry after a step: ``action``, ``reward`` and the state
    ``agent_state`` it returned, restarted where ``done`` (the null action, 0
    and ``initial_state``). ``previous=False`` leaves ``prev_action`` and
    ``prev_reward`` as they are (an agent that does not read them)."""
    carry = carry.replace(agent_state=where_leading(done, initial_state, agent_state))
    if not previous:
        return carry
    return carry.replace(
        prev_action=restart_where(done, action), prev_reward=restart_where(done, reward)
    )


@dataclasses.dataclass(frozen=True, eq=False)
class AgentStepper:
    """One agent, stepped unbatched.

    Attributes:
      agent: the agent (unbatched functions).
      action_space: the gymnax action space of one env; ``null_action`` zeros of
        one action.
      observation: spec of one observation.
      agent_state_spec: spec of ``agent.initial_state``.
      check_actions: callers check the agent's actions with
        `check_actions_fit` (the checked mode; off by default, and then
        nothing of it is in the program).
      reward: spec of one reward (``prev_reward``'s): a scalar, ``[N]`` for a
        team of N agents.
    """

    agent: Agent
    action_space: Any
    null_action: PyTree
    observation: PyTree
    agent_state_spec: PyTree
    check_actions: bool = False
    reward: Any = REWARD

    def initial_state(self, rank: jax.Array) -> PyTree:
        """``agent.initial_state(rank)`` with fixed dtypes."""
        return initial_agent_state(self.agent, self.agent_state_spec, rank)

    def start(self, rank: jax.Array) -> AgentCarry:
        """The carry of a new episode: null previous action, zero previous
        reward, initial agent state."""
        return AgentCarry(
            prev_action=self.null_action,
            prev_reward=jnp.zeros(self.reward.shape, jnp.float32),
            agent_state=self.initial_state(rank),
            env_rank=rank,
        )

    def act(
        self, carry: AgentCarry, observation: PyTree, act: ActFn, key: jax.Array
    ) -> tuple[AgentStep, PyTree]:
        """``act`` on ``observation`` and the carry's inputs and state, with ``key``."""
        inputs = agent_inputs(observation, carry.prev_action, carry.prev_reward)
        return act(inputs, carry.agent_state, key)

    def after(
        self,
        carry: AgentCarry,
        done: jax.Array,
        action: PyTree,
        reward: jax.Array,
        agent_state: PyTree,
        previous: bool = True,
    ) -> AgentCarry:
        """`restart` with this agent's initial state of the carry's env
        (unbatched: one env)."""
        initial = self.initial_state(carry.env_rank)
        return restart(carry, done, action, reward, agent_state, initial, previous)

    def agent_act(self, agent_params: PyTree) -> ActFn:
        """The agent's step with ``agent_params`` bound, checked at trace time."""

        def act(inputs: AgentInputs, state: PyTree, key: jax.Array):
            return act_checked(
                self.agent,
                agent_params,
                inputs,
                state,
                key,
                null_action=self.null_action,
                state_spec=self.agent_state_spec,
                space=self.action_space,
            )

        return act

    def random_act(self, inputs: AgentInputs, state: PyTree, key: jax.Array):
        """Uniformly random actions (decorrelation), among the legal ones of
        ``inputs.action_mask`` where the env has masks; the agent state is kept."""
        return AgentStep(random_action(self.action_space, inputs, key), ()), state

    def random_policy(self, action_spec: PyTree, agent_info_spec: PyTree) -> ActFn:
        """`random_act` cast to ``action_spec``, with zeros of
        ``agent_info_spec`` as agent info: random steps that fit a sampler's
        ``examples`` (initial collect steps)."""

        def act(inputs: AgentInputs, state: PyTree, key: jax.Array):
            step, state = self.random_act(inputs, state, key)
            action = jax.tree.map(
                lambda a, s: jnp.asarray(a).astype(s.dtype).reshape(s.shape),
                step.action,
                action_spec,
            )
            info = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), agent_info_spec)
            return AgentStep(action, info), state

        return act

    def reads_previous(self, act: ActFn) -> bool:
        """Whether ``act`` may read its inputs' ``prev_action`` or
        ``prev_reward`` (a conservative reading of its jaxpr,
        `reads_inputs`; nothing runs)."""

        def act_on(prev_action: PyTree, prev_reward: jax.Array, obs: PyTree, state: PyTree):
            inputs = agent_inputs(obs, prev_action, prev_reward)
            return act(inputs, state, jax.random.key(0))

        args = (self.null_action, self.reward, self.observation, self.agent_state_spec)
        return reads_inputs(act_on, args, which=(0, 1))

    def check_actions_fit(
        self,
        action: PyTree,
        active: jax.Array,
        env_rank: jax.Array,
        t: jax.Array,
        where: str,
        legal: jax.Array | None = None,
    ) -> None:
        """Checked mode, batched (call it outside the vmap over envs): raise at
        run time, inside jit, when an active env's action is outside the action
        space. A no-op unless ``check_actions``.

        Args:
          action: the actions of the ``B`` envs, ``[B, ...]``.
          active: bool ``[B]``, the envs whose action counts (an idle env's
            zeros are not checked).
          env_rank: int32 ``[B]``, for the message.
          t: the step (scalar), for the message; ``where`` says of what.
          legal: bool ``[B, n]``, the legal actions of the observations the
            actions were chosen on (envs with masks): an illegal action is
            reported too. None: no masks.

        The failure is a ``ValueError`` raised in a host callback, which JAX
        re-raises from the jitted call as a ``JaxRuntimeError`` carrying its
        message; the callback runs only at a step where some action is out.
        """
        if not self.check_actions:
            return
        space = self.action_space
        fits = jax.vmap(lambda a: jnp.all(jnp.asarray(space.contains(a))))(action)
        if legal is not None:
            fits = fits & jax.vmap(_is_legal)(legal, action)
        fits = fits | ~active

        def fail(fits: np.ndarray, action: Any, env_rank: np.ndarray, t: np.ndarray) -> None:
            bad = np.flatnonzero(~np.asarray(fits))
            if bad.size == 0:  # vmapped by the caller: cond ran as a select
                return
            first = bad[0]
            value = jax.tree.map(lambda x: np.asarray(x)[first].tolist(), action)
            more = f" (and {bad.size - 1} more envs)" if bad.size > 1 else ""
            raise ValueError(
                f"check_actions: the agent's action is outside the action space {space} "
                "or an illegal action (not in the env's action_mask): "
                f"env rank {int(np.asarray(env_rank)[first])} at {where} {int(t)} chose "
                f"action {value}{more}"
            )

        jax.lax.cond(
            jnp.all(fits),
            lambda *_: None,
            lambda *a: jax.debug.callback(fail, *a),
            fits,
            action,
            env_rank,
            t,
        )


def _is_legal(legal: jax.Array, action: jax.Array) -> jax.Array:
    """Whether ``action`` (an int scalar, or ``[N]`` for N agents) is legal
    under ``legal`` (bool ``[n]`` or ``[N, n]``)."""
    action = jnp.asarray(action).astype(jnp.int32)
    n = legal.shape[-1]
    inside = (action >= 0) & (action < n)
    picked = jnp.take_along_axis(legal, jnp.clip(action, 0, n - 1)[..., None], axis=-1)[..., 0]
    return jnp.all(inside & picked)

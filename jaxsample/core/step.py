"""The per-env step, unbatched: the agent acts, the env steps, done envs reset.

:class:`EnvStepper` is used by the JAX sampler (:mod:`jaxsample.core.rollout`,
decorrelation included) and by the evaluator (:mod:`jaxsample.evaluation`),
which vmap it over their envs. It works on any ``flax.struct`` state with the
fields of :class:`EnvCarry` (``env_state``, ``observation``, ``prev_action``,
``prev_reward``, ``agent_state``, ``env_rank``), so each caller keeps its own
state type and adds fields (keys, counters) of its own.

Reset handling (docs/design.md's conventions): after ``done`` the env has
already reset (gymnax auto-resets inside ``env.step``), and the agent's
inputs restart: ``prev_action`` is the null action, ``prev_reward`` 0 and the
agent state ``agent.initial_state(env_rank)``. In the ``"wait"`` and
``"episodic"`` modes :func:`hold_idle` keeps an env that already finished in
this batch where it is, with zeroed outputs; ``"episodic"`` also truncates the
batch's last step (``truncate``) and restarts every env at the batch start
(:meth:`EnvStepper.start`). Carry dtypes are the env's and agent's own,
strong, so a second ``collect`` does not retrace.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments.environment import Environment

from jaxsample.agents.base import Agent
from jaxsample.core.keys import gymnax_step_keys
from jaxsample.core.liveness import reads_inputs
from jaxsample.core.specs import EnvSpec, act_checked, initial_agent_state, strong
from jaxsample.traj_info import TrajAccumulator, TrajStep
from jaxsample.types import AgentInputs, AgentStep, PyTree, TrajInfo

# act(inputs, agent_state, key) -> (AgentStep, agent_state): the agent's step
# with its parameters bound (or random actions, for decorrelation).
ActFn = Callable[[AgentInputs, PyTree, jax.Array], tuple[AgentStep, PyTree]]


def tree_where(cond: jax.Array, x: PyTree, y: PyTree) -> PyTree:
    """``where(cond, x, y)`` leaf by leaf, for a scalar bool ``cond``."""
    return jax.tree.map(lambda a, b: jnp.where(cond, a, b), x, y)


@struct.dataclass
class EnvCarry:
    """The fields the per-env step reads and writes (scalars per env)."""

    env_state: PyTree
    observation: PyTree
    prev_action: PyTree
    prev_reward: jax.Array
    agent_state: PyTree
    env_rank: jax.Array


class Transition(struct.PyTreeNode):
    """What one step of one env produced (unbatched).

    ``done = terminated | truncated``; ``info`` is gymnax's info dict (with
    ``final_observation``, the true next observation).
    """

    action: PyTree
    agent_info: PyTree
    reward: jax.Array  # float32
    terminated: jax.Array  # bool
    truncated: jax.Array  # bool
    done: jax.Array  # bool
    info: dict[str, Any]


def track(
    acc: TrajAccumulator,
    reward: jax.Array,
    ended: jax.Array,
    discount: float,
    step: TrajStep | None = None,
) -> tuple[TrajAccumulator, TrajInfo]:
    """One step of a trajectory accumulator: the TrajInfo of the step (the
    trajectory's totals, ``completed = ended``) and the accumulator to carry
    (fresh after an end); ``step`` feeds the accumulator's user fields."""
    moved = acc.add(reward, discount, step)
    return tree_where(ended, acc.reset(), moved), moved.info(ended)


@dataclasses.dataclass(frozen=True, eq=False)
class EnvStepper:
    """One env and one agent, stepped unbatched .

    Attributes:
      env, env_params: the gymnax env.
      agent: the agent (unbatched functions).
      env_spec: the env's :class:`~jaxsample.core.specs.EnvSpec`.
      agent_state_spec: spec of ``agent.initial_state``.
      check_actions: callers check the agent's actions with
        :meth:`check_actions_fit` (the checked mode; off by default, and then
        nothing of it is in the program).
    """

    env: Any
    env_params: Any
    agent: Agent
    env_spec: EnvSpec
    agent_state_spec: PyTree
    check_actions: bool = False

    def initial_agent_state(self, rank: jax.Array) -> PyTree:
        """``agent.initial_state(rank)`` with fixed dtypes."""
        return initial_agent_state(self.agent, self.agent_state_spec, rank)

    def reset(self, key: jax.Array) -> tuple[PyTree, PyTree]:
        """``env.reset(key)`` as ``(observation, env_state)`` with the carry's dtypes."""
        spec = (self.env_spec.observation, self.env_spec.env_state)
        return strong(self.env.reset(key, self.env_params), spec)

    def start(self, key: jax.Array, rank: jax.Array) -> dict[str, PyTree]:
        """The :class:`EnvCarry` fields of a new episode from ``env.reset(key)``
        (null previous action, zero previous reward, initial agent state)."""
        obs, env_state = self.reset(key)
        return {
            "env_state": env_state,
            "observation": obs,
            "prev_action": self.env_spec.null_action,
            "prev_reward": jnp.zeros((), jnp.float32),
            "agent_state": self.initial_agent_state(rank),
            "env_rank": rank,
        }

    def agent_act(self, agent_params: PyTree) -> ActFn:
        """The agent's step with ``agent_params`` bound, checked at trace time."""

        def act(inputs: AgentInputs, state: PyTree, key: jax.Array):
            return act_checked(
                self.agent,
                agent_params,
                inputs,
                state,
                key,
                null_action=self.env_spec.null_action,
                state_spec=self.agent_state_spec,
                space=self.env_spec.action_space,
            )

        return act

    def check_actions_fit(
        self, action: PyTree, active: jax.Array, env_rank: jax.Array, t: jax.Array, where: str
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

        The failure is a ``ValueError`` raised in a host callback, which JAX
        re-raises from the jitted call as a ``JaxRuntimeError`` carrying its
        message; the callback runs only at a step where some action is out.
        """
        if not self.check_actions:
            return
        space = self.env_spec.action_space
        fits = jax.vmap(lambda a: jnp.all(jnp.asarray(space.contains(a))))(action)
        fits = fits | ~active

        def fail(fits: np.ndarray, action: Any, env_rank: np.ndarray, t: np.ndarray) -> None:
            bad = np.flatnonzero(~np.asarray(fits))
            if bad.size == 0:  # vmapped by the caller: cond ran as a select
                return
            first = bad[0]
            value = jax.tree.map(lambda x: np.asarray(x)[first].tolist(), action)
            more = f" (and {bad.size - 1} more envs)" if bad.size > 1 else ""
            raise ValueError(
                f"check_actions: the agent's action is outside the action space {space}: "
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

    def reads_previous(self, act: ActFn) -> bool:
        """Whether ``act`` may read its inputs' ``prev_action`` or
        ``prev_reward`` (a conservative reading of its jaxpr,
        :func:`~jaxsample.core.liveness.reads_inputs`; nothing runs)."""
        spec = self.env_spec

        def act_on(prev_action: PyTree, prev_reward: jax.Array, obs: PyTree, state: PyTree):
            inputs = AgentInputs(obs, prev_action, prev_reward)
            return act(inputs, state, jax.random.key(0))

        reward = jax.ShapeDtypeStruct((), jnp.float32)
        args = (spec.null_action, reward, spec.observation, self.agent_state_spec)
        return reads_inputs(act_on, args, which=(0, 1))

    def random_act(self, inputs: AgentInputs, state: PyTree, key: jax.Array):
        """Uniformly random actions (decorrelation); the agent state is kept."""
        del inputs
        return AgentStep(self.env_spec.action_space.sample(key), ()), state

    @property
    def gymnax_step(self) -> bool:
        """Whether the env's ``step`` is gymnax's own auto-resetting step (not
        overridden): then :meth:`env_step` may write it out with a step key
        and a reset key of the caller's."""
        return type(self.env).step is Environment.step

    def env_step(
        self, k_env: jax.Array | tuple[jax.Array, jax.Array], env_state: PyTree, action: PyTree
    ) -> tuple[PyTree, PyTree, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """One auto-resetting step: ``(obs, env_state, reward, terminated,
        truncated, info)`` as gymnax's ``env.step`` returns them.

        ``k_env`` is a key: ``env.step(k_env, env_state, action, env_params)``
        (gymnax's step splits it into a step key and a reset key). Or it is
        the pair ``(k_step, k_reset)``, for an env whose ``step`` is gymnax's
        own (:attr:`gymnax_step`): gymnax's step written out with these keys
        (``env.step_env`` with ``k_step``, ``env.reset_env`` with ``k_reset``
        selected where done), so the caller draws them as it likes (the
        sampler, a whole batch's at once) and nothing splits a key per step.
        """
        if not isinstance(k_env, tuple):
            return self.env.step(k_env, env_state, action, self.env_params)
        k_step, k_reset = k_env
        obs_st, state_st, reward, terminated, truncated, info = self.env_step_no_reset(
            k_step, env_state, action
        )
        done = jnp.logical_or(terminated, truncated)
        obs_re, state_re = self.env.reset_env(k_reset, self.env_params)
        select = functools.partial(jax.lax.select, done)
        state = jax.tree.map(select, state_re, state_st)
        obs = jax.tree.map(select, obs_re, obs_st)
        return obs, state, reward, terminated, truncated, info

    def env_step_no_reset(
        self, k_step: jax.Array, env_state: PyTree, action: PyTree
    ) -> tuple[PyTree, PyTree, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """What gymnax's ``env.step`` does without its reset, with the step
        key ``k_step`` (the key ``step_env`` gets): ``env.step_env``,
        ``env.is_truncated`` and the same info (``final_observation`` is the
        returned observation); the env stays at its final state."""
        obs, env_state, reward, terminated, info = self.env.step_env(
            k_step, env_state, action, self.env_params
        )
        truncated = self.env.is_truncated(env_state, self.env_params)
        info = {
            **info,
            "terminated": terminated,
            "truncated": truncated,
            "final_observation": obs,
        }
        return obs, env_state, reward, terminated, truncated, info

    def step(
        self,
        s: Any,
        act: ActFn,
        k_agent: jax.Array,
        k_env: jax.Array | tuple[jax.Array, jax.Array],
        truncate: jax.Array | None = None,
        auto_reset: bool = True,
        track_previous: bool = True,
    ) -> tuple[Any, Transition]:
        """One step of one env: ``act`` with ``k_agent``, ``env.step`` with
        ``k_env``, and the agent's inputs restarted where the episode ended.

        Args:
          s: a struct with the fields of :class:`EnvCarry` (scalars).
          act: the agent's step (:meth:`agent_act` or :meth:`random_act`).
          k_agent, k_env: this step's keys (the caller's key schedule);
            ``k_env`` a key or a ``(k_step, k_reset)`` pair (:meth:`env_step`).
          truncate: bool scalar: also truncate here unless terminated (the end
            of an ``"episodic"`` batch); None for never.
          auto_reset: True: gymnax's ``env.step`` (it resets where done).
            False: what it does without the reset
            (:meth:`env_step_no_reset` with ``k_step`` of the pair, or gymnax's
            ``split(k_env)[0]`` of a key):
            the env's state and observation stay the final ones, for the
            caller to reset (:mod:`jaxsample.core.resets`).
          track_previous: False: ``prev_action`` and ``prev_reward`` are left
            as they are (for an ``act`` that does not read them,
            :meth:`reads_previous`; the caller sets them after its steps).

        Returns:
          ``(s.replace(...), transition)``: ``s`` after the step (the env's
          next observation and state; ``prev_action``, ``prev_reward`` and
          ``agent_state`` restarted where done).
        """
        inputs = AgentInputs(s.observation, s.prev_action, s.prev_reward)
        agent_step, agent_state = act(inputs, s.agent_state, k_agent)
        action = agent_step.action
        if auto_reset:
            obs, env_state, reward, terminated, truncated, info = self.env_step(
                k_env, s.env_state, action
            )
        else:
            k_step = k_env[0] if isinstance(k_env, tuple) else gymnax_step_keys(k_env)[0]
            obs, env_state, reward, terminated, truncated, info = self.env_step_no_reset(
                k_step, s.env_state, action
            )
        spec = (self.env_spec.observation, self.env_spec.env_state)
        obs, env_state = strong((obs, env_state), spec)
        reward = jnp.asarray(reward, jnp.float32)
        terminated = jnp.asarray(terminated, bool)
        truncated = jnp.asarray(truncated, bool)
        if truncate is not None:
            truncated = truncated | (truncate & ~terminated)
        done = terminated | truncated
        new = s.replace(
            env_state=env_state,
            observation=obs,
            agent_state=tree_where(done, self.initial_agent_state(s.env_rank), agent_state),
        )
        if track_previous:
            new = new.replace(
                prev_action=tree_where(done, self.env_spec.null_action, action),
                prev_reward=jnp.where(done, jnp.float32(0), reward),
            )
        # Positional, in field order: action, agent_info, reward, terminated,
        # truncated, done, info.
        out = Transition(action, agent_step.agent_info, reward, terminated, truncated, done, info)
        return new, out


@dataclasses.dataclass(frozen=True, eq=False)
class RandomPolicyStepper(EnvStepper):
    """An :class:`EnvStepper` whose "agent" acts uniformly at random (initial
    collect steps): ``agent_act`` ignores the parameters and returns
    :meth:`~EnvStepper.random_act`'s actions cast to ``action_spec`` and zeros
    of ``agent_info_spec`` as agent info, so the steps fit the sampler's
    ``examples``; the agent's state is kept (its initial state after resets).
    """

    action_spec: PyTree = ()
    agent_info_spec: PyTree = ()

    def agent_act(self, agent_params: PyTree) -> ActFn:
        del agent_params

        def act(inputs: AgentInputs, state: PyTree, key: jax.Array):
            step, state = self.random_act(inputs, state, key)
            action = jax.tree.map(
                lambda a, s: jnp.asarray(a).astype(s.dtype).reshape(s.shape),
                step.action,
                self.action_spec,
            )
            info = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), self.agent_info_spec)
            return AgentStep(action, info), state

        return act


def hold_idle(s: Any, new: Any, done: jax.Array, out: PyTree) -> tuple[Any, PyTree]:
    """``"wait"``/``"episodic"`` modes: an env idle at this step (``s.idle``,
    it finished earlier in the batch) keeps its state ``s`` and writes zeros;
    otherwise it takes ``new`` and goes idle where ``done``."""
    idle = s.idle
    new = tree_where(idle, s, new.replace(idle=done))
    out = tree_where(idle, jax.tree.map(jnp.zeros_like, out), out)
    return new, out

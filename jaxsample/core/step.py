"""The per-env step, unbatched: the agent acts, the env steps, done envs reset.

`EnvStepper` is used by the JAX sampler (`jaxsample.core.rollout`,
decorrelation included) and by the evaluator ([`jaxsample.evaluation`][jaxsample.evaluation]),
which vmap it over their envs: ``step(carry, ...) -> (carry, transition)`` on
an `EnvCarry`, the carry nested in each caller's state (which adds
fields of its own: keys, counters, trajectory accumulators). It composes the
env with the agent's half, `AgentStepper`, which
the host sampler uses on its own.

Reset handling (docs/design.md's conventions): after ``done`` the env has
already reset (gymnax auto-resets inside ``env.step``), and the agent's
inputs restart (`jaxsample.core.acting.restart`): ``prev_action`` is
the null action, ``prev_reward`` 0 and the agent state
``agent.initial_state(env_rank)``. The reset modes' differences (an idle
env held where it is, the ``"episodic"`` batch's truncation, ``truncate``,
and restart, `EnvStepper.start`) are `jaxsample.core.modes`'.
Carry dtypes are the env's and agent's own, strong, so a second ``collect``
does not retrace.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxsample.agents.base import Agent
from jaxsample.core.acting import ActFn, AgentCarry, AgentStepper, where_leading
from jaxsample.core.keys import EnvKeys, env_step_keys
from jaxsample.core.masking import observe, split
from jaxsample.core.specs import EnvSpec, agent_state_spec, env_spec, recorded_info, strong
from jaxsample.envs.wrappers import inherits_step
from jaxsample.traj_info import TrajAccumulator, TrajStep
from jaxsample.types import PyTree, TrajInfo


@struct.dataclass
class EnvCarry:
    """The per-env carry of every JAX sampler's state (scalars per env;
    ``[B, ...]`` batched): the env's state and observation, and the agent's
    half (`AgentCarry`)."""

    env_state: PyTree
    observation: PyTree
    agent: AgentCarry


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
    return where_leading(ended, acc.reset(), moved), moved.info(ended)


@dataclasses.dataclass(frozen=True, eq=False)
class EnvStepper:
    """One env and one agent, stepped unbatched.

    Attributes:
      env: the gymnax env.
      env_params: its parameters.
      env_spec: the env's `EnvSpec`.
      agent: the agent's half (`AgentStepper`).
    """

    env: Any
    env_params: Any
    env_spec: EnvSpec
    agent: AgentStepper

    @classmethod
    def of(cls, env: Any, env_params: Any, agent: Agent, check_actions: bool) -> EnvStepper:
        """The stepper of ``env`` and ``agent`` (specs derived and checked)."""
        spec = env_spec(env, env_params, same_observation=True)
        acting = AgentStepper(
            agent,
            spec.action_space,
            spec.null_action,
            spec.observation,
            agent_state_spec(agent),
            check_actions,
            spec.reward,
        )
        return cls(env, env_params, spec, acting)

    def reset(self, key: jax.Array) -> tuple[PyTree, PyTree]:
        """``env.reset(key)`` as ``(observation, env_state)`` with the carry's dtypes."""
        spec = (self.env_spec.observation, self.env_spec.env_state)
        obs, env_state = self.env.reset(key, self.env_params)
        return strong((self._observe(obs, env_state), env_state), spec)

    def _observe(self, observation: PyTree, env_state: PyTree) -> PyTree:
        """The observation with the legal actions of ``env_state`` for an env
        with masks (`observe`), else as it is."""
        return observe(self.env, self.env_params, observation, env_state)

    def start(self, key: jax.Array, rank: jax.Array) -> EnvCarry:
        """The carry of a new episode from ``env.reset(key)`` (null previous
        action, zero previous reward, initial agent state)."""
        obs, env_state = self.reset(key)
        return EnvCarry(env_state, obs, self.agent.start(rank))

    def keys_of(self, k_env: jax.Array) -> EnvKeys:
        """The step keys a single env key stands for (decorrelation, the
        evaluator): `env_step_keys`."""
        return env_step_keys(k_env, self.gymnax_step)

    @property
    def gymnax_step(self) -> bool:
        """Whether the env's ``step`` is gymnax's own auto-resetting step (not
        overridden): then `env_step` may write it out with a step key
        and a reset key of the caller's."""
        return inherits_step(self.env)

    def env_step(
        self, k_env: EnvKeys, env_state: PyTree, action: PyTree
    ) -> tuple[PyTree, PyTree, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """One auto-resetting step: ``(obs, env_state, reward, terminated,
        truncated, info)`` as gymnax's ``env.step`` returns them.

        ``k_env`` is the pair ``(k_step, k_reset)``. For an env whose ``step`` is
        gymnax's own (`gymnax_step`): gymnax's step written out with
        these keys (``env.step_env`` with ``k_step``, ``env.reset_env`` with
        ``k_reset`` selected where done), so the caller draws them as it likes
        (the sampler, a whole batch's at once) and nothing splits a key per
        step. Any other env: its own ``env.step(k_step, ...)``.
        """
        k_step, k_reset = k_env
        if not self.gymnax_step:
            return self.env.step(k_step, env_state, action, self.env_params)
        obs_st, state_st, reward, terminated, truncated, info = self.env_step_no_reset(
            k_step, env_state, action
        )
        done = jnp.logical_or(terminated, truncated)
        obs_re, state_re = self.env.reset_env(k_reset, self.env_params)
        obs_re = self._observe(obs_re, state_re)
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
        obs = self._observe(obs, env_state)
        info = {
            **info,
            "terminated": terminated,
            "truncated": truncated,
            "final_observation": obs,
        }
        return obs, env_state, reward, terminated, truncated, info

    def step(
        self,
        carry: EnvCarry,
        act: ActFn,
        k_agent: jax.Array,
        k_env: EnvKeys,
        truncate: jax.Array | None = None,
        auto_reset: bool = True,
        track_previous: bool = True,
    ) -> tuple[EnvCarry, Transition]:
        """One step of one env: ``act`` with ``k_agent``, the env's step with
        ``k_env``, and the agent's carry restarted where the episode ended
        (`restart`).

        Args:
          carry: the env's `EnvCarry` (scalars).
          act: the agent's step (``agent.agent_act`` or ``agent.random_act``).
          k_agent: this step's agent key (the caller's key schedule).
          k_env: this step's env keys, the pair ``(k_step, k_reset)``
            (`env_step`).
          truncate: bool scalar: also truncate here unless terminated (the end
            of an ``"episodic"`` batch); None for never.
          auto_reset: True: the auto-resetting step (`env_step`).
            False: `env_step_no_reset` with ``k_step``: the env's state
            and observation stay the final ones, for the caller to reset
            (`jaxsample.core.resets`).
          track_previous: False: ``prev_action`` and ``prev_reward`` are left
            as they are (for an ``act`` that does not read them,
            ``agent.reads_previous``; the caller sets them after its steps).

        Returns:
          ``(carry, transition)``: the carry after the step, and what it produced.
        """
        agent_step, agent_state = self.agent.act(carry.agent, carry.observation, act, k_agent)
        action = agent_step.action
        if auto_reset:
            stepped = self.env_step(k_env, carry.env_state, action)
        else:
            stepped = self.env_step_no_reset(k_env[0], carry.env_state, action)
        obs, env_state, reward, terminated, truncated, info = stepped
        spec = (self.env_spec.observation, self.env_spec.env_state)
        obs, env_state = strong((obs, env_state), spec)
        reward = jnp.asarray(reward, jnp.float32)
        terminated = jnp.asarray(terminated, bool)
        truncated = jnp.asarray(truncated, bool)
        if truncate is not None:
            truncated = truncated | (truncate & ~terminated)
        done = terminated | truncated
        agent = self.agent.after(carry.agent, done, action, reward, agent_state, track_previous)
        # Positional, in field order: action, agent_info, reward, terminated,
        # truncated, done, info.
        out = Transition(action, agent_step.agent_info, reward, terminated, truncated, done, info)
        return EnvCarry(env_state, obs, agent), out


def traj_step(observation: PyTree, tr: Transition) -> TrajStep:
    """The [`TrajStep`][jaxsample.traj_info.TrajStep] user fields see of the step
    ``tr`` taken on ``observation`` (the carry's: without its mask)."""
    return TrajStep(
        observation=split(observation)[0],
        action=tr.action,
        reward=tr.reward,
        terminated=tr.terminated,
        truncated=tr.truncated,
        env_info=recorded_info(tr.info),
        agent_info=tr.agent_info,
    )

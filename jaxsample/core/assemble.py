"""The assembly of a batch: ``[T, B]`` step outputs -> ``(state, Batch)``.

Both samplers produce, per step, what the env and the agent output
(observation, reward, terminated, truncated, env_info, action, agent_info,
``valid``); the JAX sampler inside its ``lax.scan``, the host sampler in host
buffers. Everything that follows from these is computed here, once, over whole
``[T, B]`` arrays (which keeps the JAX sampler's scanned body small):
``done``, the ``prev_action``/``prev_reward`` shift (the restart rule of
`jaxsample.core.acting.restart_where` over time), ``bootstrap_value``,
and ``TrajInfo`` (a scan per env over its accumulator) unless the caller
has it already: the JAX sampler updates the accumulators in its own scan,
where they cost less than a second loop.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxsample.agents.base import Agent
from jaxsample.core.acting import AgentCarry, restart_where, where_leading
from jaxsample.core.masking import split, split_store
from jaxsample.traj_info import TrajAccumulator, TrajStep, trajectory_end
from jaxsample.types import (
    AgentInputs,
    AgentSamples,
    Batch,
    EnvSamples,
    PyTree,
    Samples,
    TrajInfo,
)


def trajectories(
    discount: float,
    acc: TrajAccumulator,
    reward: jax.Array,
    ended: jax.Array,
    valid: jax.Array,
    steps: TrajStep | None = None,
) -> tuple[TrajAccumulator, TrajInfo]:
    """TrajInfo of one env over ``[T]`` steps, from its accumulator; returns the
    accumulator after the last step too. Invalid (idle) steps leave the
    accumulator unchanged and report zeros. ``ended`` marks trajectory ends
    ([`trajectory_end`][jaxsample.traj_info.trajectory_end]); ``steps`` (leaves ``[T,
    ...]``) feed the user's fields, None without any."""

    def step(acc: TrajAccumulator, x: tuple[Any, ...]):
        reward, ended, valid, one = x
        moved = acc.add(reward, discount, one)
        info = jax.tree.map(
            lambda v: jnp.where(valid, v, jnp.zeros_like(v)), moved.info(completed=ended)
        )
        acc = where_leading(ended, acc.reset(), where_leading(valid, moved, acc))
        return acc, info

    return jax.lax.scan(step, acc, (reward, ended, valid, steps))


def batch_trajectories(
    discount: float, acc: TrajAccumulator, *inputs: Any
) -> tuple[TrajAccumulator, TrajInfo]:
    """`trajectories` of ``B`` envs: accumulators ``[B]``, the inputs
    (``reward``, ``ended``, ``valid`` and optionally ``steps``) and TrajInfo
    ``[T, B, ...]``."""
    run = jax.vmap(trajectories, in_axes=(None, 0, *([1] * len(inputs))), out_axes=(0, 1))
    return run(discount, acc, *inputs)


def bootstrap_values(
    agent: Agent, agent_params: PyTree, inputs: AgentInputs, agent_state: PyTree
) -> jax.Array:
    """``[B]`` float32 values of the agent's inputs ``[B, ...]`` after a batch
    (the agent's state does not advance)."""
    value = jax.vmap(agent.value, in_axes=(None, 0, 0))(agent_params, inputs, agent_state)
    return jnp.asarray(value, jnp.float32)


class Steps(struct.PyTreeNode):
    """What a batch's steps output, ``[T, B, ...]`` (zeros on invalid steps).

    ``valid`` is bool; ``agent_state`` the agent's state before each step, or
    None where it is not stored."""

    observation: PyTree
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    valid: jax.Array
    env_info: PyTree
    action: PyTree
    agent_info: PyTree
    agent_state: PyTree | None

    @classmethod
    def of(cls, source: Any, **fields: Any) -> Steps:
        """The ``fields`` given, and ``source``'s attributes of the same names
        for the others."""
        names = [f.name for f in dataclasses.fields(cls) if f.name not in fields]
        return cls(**{name: getattr(source, name) for name in names}, **fields)


def shift_previous(done: jax.Array, first: PyTree, x: PyTree) -> PyTree:
    """The batch's ``prev_*`` field of ``x`` ``[T, B, ...]``: ``x[t - 1]``,
    restarted after an episode end (``done[t - 1]``), ``first`` ``[B, ...]``
    at ``t = 0``."""

    def previous(first: jax.Array, x: jax.Array) -> jax.Array:
        shifted = restart_where(done[:-1], x[:-1])
        return jnp.concatenate([jnp.asarray(first, x.dtype)[None], shifted], axis=0)

    return jax.tree.map(previous, first, x)


def steps_trajectories(
    discount: float, traj: TrajAccumulator, s: Steps, traj_done: str | None
) -> tuple[TrajAccumulator, TrajInfo]:
    """`batch_trajectories` of a batch's steps (its user fields fed
    when ``traj`` has some)."""
    one = None
    if traj.fields:
        one = TrajStep(
            s.observation, s.action, s.reward, s.terminated, s.truncated, s.env_info, s.agent_info
        )
    ended = trajectory_end(s.terminated | s.truncated, s.truncated, s.env_info, traj_done)
    return batch_trajectories(discount, traj, s.reward, ended, s.valid, one)


def assemble(
    discount: float,
    traj: TrajAccumulator,
    steps: Steps,
    start: AgentCarry,
    final: Any,
    bootstrap_value: jax.Array | None,
    traj_done: str | None = None,
    traj_infos: TrajInfo | None = None,
) -> tuple[TrajAccumulator, Batch]:
    """The [`Batch`][jaxsample.types.Batch] of ``T`` steps of ``B`` envs.

    Args:
      discount: for ``TrajInfo.discounted_return``.
      traj: ``[B]`` accumulators at the start of the batch; after it when
        ``traj_infos`` is given.
      steps: the steps' outputs (`Steps`).
      start: the agents' carry ``[B, ...]`` at the batch start (its state,
        previous action and reward).
      final: the final-observation store (`jaxsample.core.finals.as_batch`).
      bootstrap_value: ``[B]`` or None.
      traj_done: the ``env_info`` key that ends a trajectory (None: every
        episode end does; [`trajectory_end`][jaxsample.traj_info.trajectory_end]).
      traj_infos: ``[T, B]`` TrajInfo the caller computed per step, with
        ``traj`` the accumulators after the batch; None: computed here. The
        user's TrajInfo fields are ``traj.fields``.

    Returns:
      ``(traj, batch)``: the ``[B]`` accumulators after the batch, and the batch
      (``done = terminated | truncated | ~valid``; ``prev_action`` and
      ``prev_reward`` by `shift_previous`).
    """
    s = steps
    ended = s.terminated | s.truncated
    done = ended | ~s.valid
    if traj_infos is None:
        traj, traj_infos = steps_trajectories(discount, traj, s, traj_done)
    observation, action_mask = split(s.observation)
    final, final_mask = split_store(final)
    env = EnvSamples(
        observation=observation,
        reward=s.reward,
        prev_reward=shift_previous(done, start.prev_reward, s.reward),
        terminated=s.terminated,
        truncated=s.truncated,
        done=done,
        env_info=s.env_info,
        final_store=final,
        action_mask=action_mask,
        final_mask_store=final_mask,
    )
    agent = AgentSamples(
        action=s.action,
        prev_action=shift_previous(done, start.prev_action, s.action),
        agent_info=s.agent_info,
        initial_state=start.agent_state,
        state=s.agent_state,
    )
    samples = Samples(env=env, agent=agent, valid=s.valid, bootstrap_value=bootstrap_value)
    return traj, Batch(samples=samples, traj_infos=traj_infos)

"""The assembly of a batch: ``[T, B]`` step outputs -> ``(state, Batch)``.

Both samplers produce, per step, what the env and the agent output
(observation, reward, terminated, truncated, env_info, action, agent_info,
``valid``); the JAX sampler inside its ``lax.scan``, the host sampler in host
buffers. Everything that follows from these is computed here, once, over whole
``[T, B]`` arrays (which keeps the JAX sampler's scanned body small):
``done``, the ``prev_action``/``prev_reward`` shift, the final-observation
store, ``bootstrap_value``, and ``TrajInfo`` (a scan per env over its
accumulator) unless the caller has it already: the JAX sampler updates the
accumulators in its own scan, where they cost less than a second loop.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxsample.agents.base import Agent
from jaxsample.core.step import tree_where
from jaxsample.traj_info import TrajAccumulator, TrajStep, trajectory_end
from jaxsample.types import (
    AgentInputs,
    AgentSamples,
    Batch,
    EnvSamples,
    PyTree,
    Samples,
    SparseFinalObservation,
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
    (:func:`~jaxsample.traj_info.trajectory_end`); ``steps`` (leaves ``[T,
    ...]``) feed the user's fields, None without any."""

    def step(acc: TrajAccumulator, x: tuple[Any, ...]):
        reward, ended, valid, one = x
        moved = acc.add(reward, discount, one)
        info = jax.tree.map(
            lambda v: jnp.where(valid, v, jnp.zeros_like(v)), moved.info(completed=ended)
        )
        acc = tree_where(ended, acc.reset(), tree_where(valid, moved, acc))
        return acc, info

    return jax.lax.scan(step, acc, (reward, ended, valid, steps))


def batch_trajectories(
    discount: float, acc: TrajAccumulator, *inputs: Any
) -> tuple[TrajAccumulator, TrajInfo]:
    """:func:`trajectories` of ``B`` envs: accumulators ``[B]``, the inputs
    (``reward``, ``ended``, ``valid`` and optionally ``steps``) and TrajInfo
    ``[T, B, ...]``."""
    run = jax.vmap(trajectories, in_axes=(None, 0, *([1] * len(inputs))), out_axes=(0, 1))
    return run(discount, acc, *inputs)


def restart_where(done: jax.Array, x: jax.Array) -> jax.Array:
    """``x`` with zeros (the null action, a 0 reward: what the agent sees as
    its previous ones after an episode end) where ``done``; ``done``'s axes
    lead ``x``'s."""
    cond = done.reshape(done.shape + (1,) * (x.ndim - done.ndim))
    return jnp.where(cond, jnp.zeros_like(x), x)


def final_store(mode: str, next_observation: PyTree, stored: PyTree) -> Any:
    """The batch's final-observation store: ``"sparse"``: a
    :class:`~jaxsample.types.SparseFinalObservation` of ``next_observation``
    ``[B, *obs]`` and the slots ``stored`` ``[B, K, *obs]``; ``"dense"``:
    ``stored``, ``[T, B, *obs]``."""
    if mode == "sparse":
        return SparseFinalObservation(next_observation=next_observation, slots=stored)
    return stored


def bootstrap_values(
    agent: Agent, agent_params: PyTree, inputs: AgentInputs, agent_state: PyTree
) -> jax.Array:
    """``[B]`` float32 values of the agent's inputs ``[B, ...]`` after a batch
    (the agent's state does not advance)."""
    value = jax.vmap(agent.value, in_axes=(None, 0, 0))(agent_params, inputs, agent_state)
    return jnp.asarray(value, jnp.float32)


def assemble(
    *,
    discount: float,
    traj: TrajAccumulator,
    observation: PyTree,
    reward: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    valid: jax.Array,
    env_info: PyTree,
    action: PyTree,
    agent_info: PyTree,
    initial_state: PyTree,
    stored_state: PyTree | None,
    start_prev_action: PyTree,
    start_prev_reward: jax.Array,
    final: Any,
    bootstrap_value: jax.Array | None,
    traj_done: str | None = None,
    traj_infos: TrajInfo | None = None,
) -> tuple[TrajAccumulator, Batch]:
    """The :class:`~jaxsample.types.Batch` of ``T`` steps of ``B`` envs.

    Args:
      discount: for ``TrajInfo.discounted_return``.
      traj: ``[B]`` accumulators at the start of the batch; after it when
        ``traj_infos`` is given.
      observation, reward, terminated, truncated, valid, env_info, action,
        agent_info: ``[T, B, ...]`` step outputs (zeros on invalid steps).
      initial_state: ``[B, ...]`` the agent's state at the batch start.
      stored_state: ``[T, B, ...]`` the agent's state before each step, or None.
      start_prev_action, start_prev_reward: ``[B, ...]`` the agent's previous
        action and reward at the batch start.
      final: the final-observation store (:func:`final_store`).
      bootstrap_value: ``[B]`` or None.
      traj_done: the ``env_info`` key that ends a trajectory (None: every
        episode end does; :func:`~jaxsample.traj_info.trajectory_end`).
      traj_infos: ``[T, B]`` TrajInfo the caller computed per step, with
        ``traj`` the accumulators after the batch; None: computed here.
      The user's TrajInfo fields are ``traj.fields``.

    Returns:
      ``(traj, batch)``: the ``[B]`` accumulators after the batch, and the batch
      (``done = terminated | truncated | ~valid``; ``prev_action[t]`` is
      ``action[t - 1]``, zeros after an episode end, ``start_prev_action`` at
      ``t = 0``; likewise ``prev_reward``).
    """
    ended = terminated | truncated
    done = ended | ~valid
    if traj_infos is None:
        steps = None
        if traj.fields:
            steps = TrajStep(
                observation, action, reward, terminated, truncated, env_info, agent_info
            )
        traj_end = trajectory_end(ended, truncated, env_info, traj_done)
        traj, traj_infos = batch_trajectories(discount, traj, reward, traj_end, valid, steps)

    def previous(first: jax.Array, x: jax.Array) -> jax.Array:
        """``x[t - 1]``, zeros (the null action / reward) after an episode end,
        ``first`` at ``t = 0``."""
        shifted = restart_where(done[:-1], x[:-1])
        return jnp.concatenate([jnp.asarray(first, x.dtype)[None], shifted], axis=0)

    samples = Samples(
        env=EnvSamples(
            observation=observation,
            reward=reward,
            prev_reward=previous(start_prev_reward, reward),
            terminated=terminated,
            truncated=truncated,
            done=done,
            env_info=env_info,
            final_store=final,
        ),
        agent=AgentSamples(
            action=action,
            prev_action=jax.tree.map(previous, start_prev_action, action),
            agent_info=agent_info,
            initial_state=initial_state,
            state=stored_state,
        ),
        valid=valid,
        bootstrap_value=bootstrap_value,
    )
    return traj, Batch(samples=samples, traj_infos=traj_infos)

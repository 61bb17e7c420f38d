"""Value targets that bootstrap through truncation, not through termination.

* `gae`: generalized advantage estimation whose TD target is
  ``r + gamma * V(final_observation)`` at a truncated step and ``r`` at a
  terminated one, the lambda-recursion stopped at every episode end;
* `final_values`: ``V(final_observation[t])``, the critic's value of the true
  next observation of every step (not the reset observation after it);
  `truncation_values` the same at the truncated steps only (all `gae` reads);
* `td_target`: DQN's one-step target from the true next observation;
* `turn_signs`: self-play's negamax signs for `gae` in a zero-sum game.

Time-major ``[T, B]`` arrays, ``final_observation`` and ``bootstrap_value`` are
the sampler's conventions (``docs/design.md``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxsample.agents.masks import masked_argmax, masked_max
from jaxsample.types import AgentInputs, PyTree, Samples, SparseFinalObservation

__all__ = ["final_values", "gae", "td_target", "truncation_values", "turn_signs"]


def gae(
    reward: jax.Array,
    value: jax.Array,
    final_value: jax.Array,
    bootstrap_value: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    *,
    gamma: float | jax.Array,
    lam: float | jax.Array,
    valid: jax.Array | None = None,
    next_sign: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Generalized advantage estimation that bootstraps through truncation only.

    Time-major: every per-step array is ``[T, ...]`` (``[T]`` for one env, ``[T, B]``
    for a batch), ``bootstrap_value`` is ``[...]`` (``[]`` or ``[B]``).

    Args:
      reward: ``r[t]``, the reward for the action at step ``t``.
      value: ``V(s[t])``, the critic's value of the inputs at step ``t`` (e.g.
        ``samples.agent.agent_info.value``).
      final_value: ``V(final_observation[t])`` (`final_values`), read only
        where ``truncated``.
      bootstrap_value: the value of the inputs after the last step
        (``samples.bootstrap_value``); read only if step ``T - 1`` is not done.
      terminated: bool, the episode reached a terminal state at step ``t``.
      truncated: bool, the episode was cut (time limit) at step ``t``. A step
        that is both counts as terminated.
      gamma: the discount.
      lam: GAE's lambda.
      valid: optional bool mask (the sampler's ``samples.valid``); an invalid
        (idle) step ends the recursion and gets advantage 0.
      next_sign: optional float ``+1``/``-1`` per step (`turn_signs`): the
        next value and advantage seen from the acting player's view (negamax
        self-play: ``-1`` where the opponent moves next); None: ``+1``.

    A team of ``N`` agents: ``reward``, ``value``, ``final_value`` ``[T, B,
    N]``, ``bootstrap_value`` ``[B, N]``; the env's ends ``[T, B]`` broadcast.

    With ``next_value[t] = final_value[t]`` if ``truncated[t]``, else
    ``value[t + 1]`` (``bootstrap_value`` for ``t = T - 1``), and
    ``done[t] = terminated[t] | truncated[t] | ~valid[t]``::

        delta[t] = r[t] + gamma * (1 - terminated[t]) * next_value[t] - value[t]
        A[t]     = delta[t] + gamma * lam * (1 - done[t]) * A[t + 1],   A[T] = 0

    so a truncated step's TD target is ``r + gamma * V(final observation)``, a
    terminated step's is ``r``, and no advantage flows across an episode end.
    With ``next_sign`` both ``next_value[t]`` and ``A[t + 1]`` are multiplied
    by ``next_sign[t]``.

    Returns:
      ``(advantages, returns)``, both ``[T, ...]`` float32, ``returns = A + value``
      (the value targets; on invalid steps ``A = 0``).
    """
    signed = next_sign is not None
    x = _gae_inputs(
        reward, value, final_value, bootstrap_value, terminated, truncated, valid, next_sign
    )
    following = jnp.concatenate([x.value[1:], x.bootstrap_value[None]], axis=0)
    next_value = jnp.where(x.truncated, x.final_value, following)
    not_terminated = 1.0 - x.terminated.astype(jnp.float32)
    not_done = 1.0 - (x.terminated | x.truncated | ~x.valid).astype(jnp.float32)
    if signed:  # the next player's view, seen from the acting player's
        next_value = x.sign * next_value
        not_done = x.sign * not_done
    delta = x.reward + gamma * not_terminated * next_value - x.value
    advantages = _advantages(delta, not_done, x.valid, x.bootstrap_value, gamma * lam)
    return advantages, advantages + x.value


class _GAEInputs(NamedTuple):
    """`gae`'s per-step arrays (``[T, ...]``, the env's ends broadcast over an
    agent axis) and ``bootstrap_value`` (``[...]``), as float32 and bool."""

    reward: jax.Array
    value: jax.Array
    final_value: jax.Array
    bootstrap_value: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    valid: jax.Array
    sign: jax.Array


def _gae_inputs(
    reward: Any, value: Any, final_value: Any, bootstrap_value: Any, terminated: Any,
    truncated: Any, valid: Any, next_sign: Any,
) -> _GAEInputs:  # fmt: skip
    """`gae`'s arguments as arrays, their shapes checked (a ``ValueError`` names one)."""
    reward = jnp.asarray(reward, jnp.float32)
    value = jnp.asarray(value, jnp.float32)
    final_value = jnp.asarray(final_value, jnp.float32)
    bootstrap_value = jnp.asarray(bootstrap_value, jnp.float32)
    terminated = jnp.asarray(terminated, bool)
    truncated = jnp.asarray(truncated, bool)
    valid = jnp.ones_like(terminated) if valid is None else jnp.asarray(valid, bool)
    shape = reward.shape
    if len(shape) < 1:
        raise ValueError(f"reward must be time-major [T, ...], got shape {shape}")
    if terminated.ndim < len(shape) and terminated.shape == shape[: terminated.ndim]:
        # the env's ends (and valid) for every agent: broadcast over the agent axis
        ends = terminated.shape
        extra = (1,) * (len(shape) - len(ends))
        terminated, truncated, valid = (
            jnp.broadcast_to(x.reshape(ends + extra), shape) if x.shape == ends else x
            for x in (terminated, truncated, valid)
        )
    signed = next_sign is not None
    sign = jnp.asarray(next_sign if signed else 1.0, jnp.float32)
    for name, x in (
        *((("next_sign", sign),) if signed else ()),
        ("value", value),
        ("final_value", final_value),
        ("terminated", terminated),
        ("truncated", truncated),
        ("valid", valid),
    ):
        if x.shape != shape:
            raise ValueError(f"{name} must have reward's shape {shape}, got {x.shape}")
    if bootstrap_value.shape != shape[1:]:
        raise ValueError(
            f"bootstrap_value must have shape {shape[1:]}, got {bootstrap_value.shape}"
        )
    return _GAEInputs(
        reward, value, final_value, bootstrap_value, terminated, truncated, valid, sign
    )


def _advantages(
    delta: jax.Array, not_done: jax.Array, valid: jax.Array, bootstrap_value: jax.Array,
    gamma_lam: Any,
) -> jax.Array:  # fmt: skip
    """``A[t] = delta[t] + gamma_lam * not_done[t] * A[t + 1]`` (0 where not
    ``valid``), ``A[T] = 0``: a reverse ``lax.scan``."""

    def step(next_advantage: jax.Array, x: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        delta_t, not_done_t, valid_t = x
        advantage = jnp.where(valid_t, delta_t + gamma_lam * not_done_t * next_advantage, 0.0)
        return advantage, advantage

    _, advantages = jax.lax.scan(
        step, jnp.zeros_like(bootstrap_value), (delta, not_done, valid), reverse=True
    )
    return advantages


def final_values(agent: Any, params: PyTree, samples: Samples) -> jax.Array:
    """``V(final_observation[t])`` for every step: ``[T, B]`` float32.

    The value of the true next observation of step ``t`` is what the agent would
    have reported at step ``t + 1`` had the episode not ended:
    ``agent.value(params, AgentInputs(final_observation[t], action[t], reward[t],
    final_action_mask[t]), state_after[t])`` (``samples.next_agent_inputs``),
    where ``state_after[t]`` is the agent's recurrent state after its step
    ``t``, before the sampler reset it. That state is not in the batch when
    the episode ended at ``t`` (the next stored state is the reset one), so
    it is recomputed from the state BEFORE step ``t``
    (``samples.agent.state``, kept by a sampler built with
    ``store_agent_state=True``) by re-running ``agent.step`` on step ``t``'s
    inputs: one parallel cell application per step, no sequential scan. (This
    assumes the state transition does not depend on the step's key, which holds
    for jaxsample's agents: the key only samples the action.) A stateless agent
    (``initial_state`` is ``()``) needs no stored state.

    On non-done steps this equals ``agent_info.value[t + 1]``; on terminated
    steps it is meaningless (the sparse store keeps zeros; `gae` never reads it).
    """
    env, ag = samples.env, samples.agent
    next_inputs = samples.next_agent_inputs
    value = jax.vmap(jax.vmap(agent.value, in_axes=(None, 0, 0)), in_axes=(None, 0, 0))
    if ag.state is None:
        if jax.tree.leaves(ag.initial_state):
            raise ValueError(
                "final_values needs the agent's state before every step for a recurrent "
                "agent: build the sampler with store_agent_state=True"
            )
        T, B = env.reward.shape[:2]  # [T, B, N] for a team of N agents
        stateless = jax.tree.map(
            lambda x: jnp.broadcast_to(x, (T, B, *x.shape[1:])), ag.initial_state
        )
        return value(params, next_inputs, stateless).astype(jnp.float32)
    inputs = samples.agent_inputs
    key = jax.random.key(0)  # unused by the state transition (see docstring)

    def state_after(step_inputs: AgentInputs, state: PyTree) -> PyTree:
        return agent.step(params, step_inputs, state, key)[1]

    after = jax.vmap(jax.vmap(state_after))(inputs, ag.state)
    return value(params, next_inputs, after).astype(jnp.float32)


def truncation_values(agent: Any, params: PyTree, samples: Samples) -> jax.Array:
    """`final_values` where ``samples.env.truncated`` (where `gae` reads it),
    zeros elsewhere: ``[T, B]`` float32.

    A stateless agent with the default sparse final-observation store is
    evaluated on the store's ``K`` slots per env only (``[B, K]`` rows, each
    with the inputs of the step that wrote it), not on all ``T x B`` steps; a
    recurrent agent, or a dense store, gets `final_values`, masked.
    """
    env = samples.env
    store = env.final_store
    if not isinstance(store, SparseFinalObservation) or jax.tree.leaves(
        samples.agent.initial_state
    ):
        return jnp.where(
            _per_step(env.truncated, env.reward), final_values(agent, params, samples), 0.0
        )
    truncated = env.truncated
    B = truncated.shape[1]
    K = jax.tree.leaves(store.slots)[0].shape[1]
    # The slot of each truncated step, and the step of each slot.
    slot = env.truncation_slot(K)
    writes = truncated[:, :, None] & (slot[:, :, None] == jnp.arange(K)[None, None])  # [T, B, K]
    step = jnp.argmax(writes, axis=0)  # [B, K] (0 for an unused slot: any value)
    envs = jnp.arange(B)[:, None]

    def at_slots(x: jax.Array) -> jax.Array:  # [T, B, ...] -> [B, K, ...]
        return x[step, envs]

    masks = env.final_mask_store
    inputs = AgentInputs(
        store.slots,
        jax.tree.map(at_slots, samples.agent.action),
        at_slots(env.reward),
        None if masks is None else masks.slots,
    )
    value = jax.vmap(jax.vmap(agent.value, in_axes=(None, 0, None)), in_axes=(None, 0, None))
    values = value(params, inputs, samples.agent.initial_state).astype(jnp.float32)  # [B, K, ...]
    per_step = values[envs.T, slot]  # [T, B, ...]
    return jnp.where(_per_step(truncated, per_step), per_step, 0.0)


def _per_step(mask: jax.Array, like: jax.Array) -> jax.Array:
    """``mask`` ``[T, B]`` with trailing axes to broadcast against ``like``."""
    return mask.reshape(mask.shape + (1,) * (like.ndim - mask.ndim))


def td_target(
    reward: jax.Array,
    terminated: jax.Array,
    next_q_target: jax.Array,
    gamma: jax.Array | float,
    next_q_online: jax.Array | None = None,
    next_action_mask: jax.Array | None = None,
) -> jax.Array:
    """The one-step TD target ``r + gamma * (1 - terminated) * V(s')``.

    ``V(s') = max_a next_q_target[..., a]``, or with ``next_q_online`` (double
    DQN) ``next_q_target[..., argmax_a next_q_online[..., a]]``. ``s'`` must be
    the true next observation (``samples.env.final_observation``), so that a
    truncated step bootstraps from the state the env reached. A terminated step
    does not bootstrap: its ``V`` is ignored, even where it is not finite (the
    sparse final-observation store gives zeros there).

    Args:
      reward: float ``[...]``.
      terminated: bool ``[...]``; ``truncated`` is deliberately not an input.
      next_q_target: ``[..., A]``, the target network's Q-values of ``s'``.
      gamma: scalar discount.
      next_q_online: optional ``[..., A]``, the online network's Q-values of ``s'``.
      next_action_mask: optional bool ``[..., A]``, the legal actions of
        ``s'`` (``samples.env.final_action_mask``): the max (and double DQN's
        argmax) are over those only.

    Returns:
      float32 ``[...]``.
    """
    shape = tuple(jnp.shape(reward))
    if tuple(jnp.shape(terminated)) != shape:
        raise ValueError(
            f"terminated must have reward's shape {list(shape)}, got {list(jnp.shape(terminated))}"
        )
    if tuple(jnp.shape(next_q_target))[:-1] != shape or jnp.ndim(next_q_target) != len(shape) + 1:
        raise ValueError(
            f"next_q_target must be reward's shape {list(shape)} + [A], got "
            f"{list(jnp.shape(next_q_target))}"
        )
    if jnp.shape(gamma) != ():
        raise ValueError(f"gamma must be a scalar, got shape {list(jnp.shape(gamma))}")
    next_q_target = jnp.asarray(next_q_target, jnp.float32)
    if next_action_mask is not None and jnp.shape(next_action_mask) != jnp.shape(next_q_target):
        raise ValueError(
            f"next_action_mask must have next_q_target's shape "
            f"{list(jnp.shape(next_q_target))}, got {list(jnp.shape(next_action_mask))}"
        )
    if next_q_online is None:
        next_v = masked_max(next_q_target, next_action_mask)
    else:
        if jnp.shape(next_q_online) != jnp.shape(next_q_target):
            raise ValueError(
                f"next_q_online must have next_q_target's shape "
                f"{list(jnp.shape(next_q_target))}, got {list(jnp.shape(next_q_online))}"
            )
        best = masked_argmax(next_q_online, next_action_mask)
        next_v = jnp.take_along_axis(next_q_target, best[..., None], axis=-1)[..., 0]
    next_v = jnp.where(jnp.asarray(terminated, bool), 0.0, next_v)
    return jnp.asarray(reward, jnp.float32) + jnp.asarray(gamma, jnp.float32) * next_v


def turn_signs(env_info: dict[str, Any]) -> jax.Array:
    """float32 ``+1`` where the same player acts at the next step, ``-1``
    where another does: from ``env_info["player"]`` (who acted) and
    ``env_info["next_player"]`` (who moves next, in the final state at an
    episode's end), any common shape (a Pgx env's info,
    [`jaxsample.envs.suites.PgxEnv`][jaxsample.envs.suites.PgxEnv]).
    [`gae`][jaxsample.algos.returns.gae]'s ``next_sign``."""
    missing = [k for k in ("player", "next_player") if k not in env_info]
    if missing:
        raise ValueError(
            f"turn_signs needs env_info keys 'player' and 'next_player' (a turn-based "
            f"env such as Pgx's), missing {missing} of {sorted(env_info)}"
        )
    same = jnp.asarray(env_info["player"]) == jnp.asarray(env_info["next_player"])
    return jnp.where(same, 1.0, -1.0).astype(jnp.float32)

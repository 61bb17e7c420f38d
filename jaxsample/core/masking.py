"""Legal-action masks inside the samplers: the observation an env makes,
together with its mask.

An env with legal actions has ``env.action_mask(state, params)`` (bool: ``[n]``
for one agent, ``[N, n]`` for N agents) for the observation that goes with
``state``. Inside the JAX samplers such an env's observation travels with its
mask as one `MaskedObservation` wherever an observation goes (the
carry, reset pools, the final-observation stores, recomputed steps), so every
path that makes a new observation (reset, step, auto-reset, a pooled reset)
makes its mask too, and the final observation's mask is stored exactly as the
final observation is. `agent_inputs` gives the agent
``AgentInputs(observation, ..., action_mask)``; the batch's assembly splits the
pair into ``samples.env.observation`` / ``action_mask`` and the final store
into ``final_store`` / ``final_mask_store`` (`split`,
`split_store`).

An env without the method is untouched: its observation is what it was, no
pair, no mask, and nothing of this module is in its program.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxsample.envs.wrappers import inherits_step
from jaxsample.types import AgentInputs, PyTree, SparseFinalObservation

__all__ = [
    "MaskedObservation",
    "agent_inputs",
    "has_action_mask",
    "legal_actions",
    "observe",
    "split",
    "split_store",
]


class MaskedObservation(NamedTuple):
    """An env's observation and the legal actions that go with it (bool)."""

    observation: PyTree
    action_mask: jax.Array


def has_action_mask(env: Any) -> bool:
    """Whether ``env`` gives legal-action masks (an ``action_mask`` method); a
    clear error for one whose ``step`` is not gymnax's own (the sampler needs
    the final state of a step, before its reset, to make the final
    observation's mask)."""
    if not callable(getattr(env, "action_mask", None)):
        return False
    if not inherits_step(env):
        raise TypeError(
            f"env {type(env).__name__} has action_mask but its own step: an env with "
            "legal-action masks must use gymnax's Environment.step (the sampler makes the "
            "final observation's mask from the state before the reset), as SuiteEnv does"
        )
    return True


def observe(env: Any, env_params: Any, observation: PyTree, state: PyTree) -> PyTree:
    """``observation`` with ``env.action_mask(state)`` for a masked env (a
    `MaskedObservation`), else ``observation`` as it is."""
    if not has_action_mask(env):
        return observation
    mask = jnp.asarray(env.action_mask(state, env_params))
    if mask.dtype != jnp.bool_:
        raise TypeError(f"env.action_mask must return bools, got {mask.dtype}")
    return MaskedObservation(observation, mask)


def split(view: PyTree) -> tuple[PyTree, jax.Array | None]:
    """``(observation, action_mask)`` of what `observe` made (any leading
    axes); ``(view, None)`` for an env without masks."""
    if isinstance(view, MaskedObservation):
        return view.observation, view.action_mask
    return view, None


def legal_actions(view: PyTree) -> jax.Array | None:
    """The ``action_mask`` of ``view`` (None without masks)."""
    return split(view)[1]


def agent_inputs(view: PyTree, prev_action: PyTree, prev_reward: jax.Array) -> AgentInputs:
    """What the agent sees: ``AgentInputs(observation, prev_action,
    prev_reward, action_mask)`` from the observation ``view``."""
    observation, mask = split(view)
    return AgentInputs(observation, prev_action, prev_reward, mask)


def split_store(store: Any) -> tuple[Any, Any]:
    """``(final_store, final_mask_store)`` of a batch's final-observation
    store kept over observation views (dense ``[T, B]`` or sparse); the mask
    store is None for an env without masks."""
    if isinstance(store, SparseFinalObservation):
        nxt, slots = split(store.next_observation), split(store.slots)
        if nxt[1] is None:
            return store, None
        return (
            SparseFinalObservation(next_observation=nxt[0], slots=slots[0]),
            SparseFinalObservation(next_observation=nxt[1], slots=slots[1]),
        )
    return split(store)

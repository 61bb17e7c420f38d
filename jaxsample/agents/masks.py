"""Legal-action masks: the masked distributions every discrete agent acts with.

An env with legal actions gives a bool mask ``[n]`` per observation
(``AgentInputs.action_mask``; None for an env without one, and then nothing
here is in the program). One env, no batch axis:

* [`masked_logits`][jaxsample.agents.masked_logits]: illegal logits become ``finfo.min`` (a large
  negative FINITE number, not ``-inf``): a softmax puts probability 0 on them,
  while log-probabilities, entropies and their gradients stay finite;
* [`uniform_legal`][jaxsample.agents.uniform_legal]: a uniform draw among the legal actions (random
  agents, epsilon-greedy exploration);
* [`masked_argmax`][jaxsample.agents.masked_argmax], [`masked_max`][jaxsample.agents.masked_max]:
  the greedy action and the
  value over legal actions only (DQN's greedy action and target).

A mask with no legal action at all (Pgx's terminal states have every action
legal, so jaxsample never sees one from Pgx) is treated as all legal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["legal", "masked_argmax", "masked_logits", "masked_max", "uniform_legal"]


def legal(mask: jax.Array, n: int | None = None) -> jax.Array:
    """The bool ``[..., n]`` mask of legal actions: ``mask``, or all True where
    it has none. ``n``, when given, must be its last axis."""
    mask = jnp.asarray(mask)
    if mask.dtype != jnp.bool_:
        raise TypeError(f"action_mask must be bool, got {mask.dtype}")
    if n is not None and (mask.ndim < 1 or mask.shape[-1] != n):
        raise ValueError(f"action_mask must be [..., {n}] (one flag per action), got {mask.shape}")
    return mask | ~jnp.any(mask, axis=-1, keepdims=True)


def masked_logits(logits: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``where(mask, logits, finfo.min)``; ``logits`` as is when ``mask`` is None."""
    if mask is None:
        return logits
    low = jnp.finfo(logits.dtype).min
    return jnp.where(legal(mask, logits.shape[-1]), logits, low)


def uniform_legal(key: jax.Array, mask: jax.Array, dtype: jnp.dtype = jnp.int32) -> jax.Array:
    """One action drawn uniformly among the legal ones of ``mask`` ``[..., n]``
    (``[N, n]``: one per agent): ``[...]`` of ``dtype``."""
    mask = legal(mask)
    return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf)).astype(dtype)


def masked_argmax(values: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``argmax`` over the legal actions of the last axis (int32 ``[...]``)."""
    if mask is not None:
        values = jnp.where(legal(mask, values.shape[-1]), values, -jnp.inf)
    return jnp.argmax(values, axis=-1).astype(jnp.int32)


def masked_max(values: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``max`` over the legal actions of the last axis (``[...]``)."""
    if mask is not None:
        values = jnp.where(legal(mask, values.shape[-1]), values, -jnp.inf)
    return jnp.max(values, axis=-1)

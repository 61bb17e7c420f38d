"""Prioritized replay (rlpyt's prioritized buffers, Schaul et al. 2016), in jit.

The ring of `uniform` (``[B, capacity, ...]``, one
ring per env) plus a priority per stored step, ``ReplayState.priority``
``[B, capacity]`` (stored raised to ``alpha``). A sequence's priority is that
of its first step.

Sampling is an inverse-CDF draw over the flattened ``[B * capacity]``
priorities in two levels, the array form of a sum tree cut at one level:
block sums of 128 leaves (one pass), a binary search over their prefix sum,
then a prefix sum within each drawn block. ``O(B * capacity)`` work per
``sample`` call (one fused masked reduction), ``O(N)`` per
``update_priorities`` (a scatter, with no tree to repair). Starts where a
whole sequence does not fit (each ring's newest ``sequence_length - 1``
steps, and unwritten slots) are masked at sampling time, so any
``sequence_length`` works with one priority array.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsample._checks import check_int, check_key
from jaxsample.replay import ring
from jaxsample.replay.steps import as_samples
from jaxsample.replay.types import (
    MAX_CAPACITY,
    PrioritizedInfo,
    PrioritizedReplayer,
    ReplayState,
)
from jaxsample.types import Batch, PyTree, Samples

__all__ = ["prioritized"]


# Leaves per block of the two-level draw (a sum tree cut at one level).
_BLOCK = 128


def _last_positive(x: jax.Array) -> jax.Array:
    """int32 ``[...]``: the index of the last positive entry along the last axis."""
    n = x.shape[-1]
    return (n - 1 - jnp.argmax(x[..., ::-1] > 0, axis=-1)).astype(jnp.int32)


def _draw(w: jax.Array, key: jax.Array, n_draws: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(index [N], w[index] [N], total [])``: ``N`` indices drawn with probability
    ``w / sum(w)`` (``w`` float32 ``[n]``, >= 0), by inverse CDF in two levels.

    The sums of blocks of `_BLOCK` leaves (one pass over ``w``), their
    prefix sum and a binary search pick each draw's block; a prefix sum of
    that block's leaves picks the leaf. Zero-weight leaves are never drawn
    (the search is clamped to the last positive block and leaf, which float
    rounding at the top end of a sum could otherwise pass).
    """
    n = w.shape[0]
    G = min(_BLOCK, n)
    padded = jnp.pad(w, (0, -n % G)).reshape(-1, G)  # [n_blocks, G]
    block = jnp.sum(padded, axis=1)
    cum = jnp.cumsum(block)
    total = cum[-1]
    u = jax.random.uniform(key, (n_draws,), jnp.float32) * total
    b = jnp.minimum(jnp.searchsorted(cum, u, side="right"), _last_positive(block))
    rows = padded[b]  # [N, G]
    within = u - (cum[b] - block[b])
    j = jnp.sum(jnp.cumsum(rows, axis=1) <= within[:, None], axis=1, dtype=jnp.int32)
    j = jnp.minimum(j, _last_positive(rows))
    return b.astype(jnp.int32) * G + j, rows[jnp.arange(n_draws), j], total


def _check_exponent(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise TypeError(f"{name} must be a float, got {value!r}")
    if not 0.0 <= float(value) <= 1.0:  # NaN fails too
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return float(value)


def prioritized(
    examples: Samples,
    B: int,
    capacity: int,
    *,
    alpha: float = 0.6,
    beta: float = 0.4,
    store_agent_state: bool = False,
) -> PrioritizedReplayer:
    """Prioritized replay: a ring of ``capacity`` steps per env, sampled by priority.

    ``add`` is `uniform`'s (any ``T``; ``env_ids`` /
    ``env_mask`` for some envs) and gives the new steps the largest priority
    seen so far. ``sample`` draws each sequence's (env, start) with probability
    ``p^alpha / sum p^alpha`` over the starts where a whole sequence fits, and
    returns a [`PrioritizedInfo`][jaxsample.replay.PrioritizedInfo] (slot, probability,
    importance weight). ``update_priorities(state, info, priority)`` sets the
    sampled starts' priorities (see
    [`PrioritizedReplayer`][jaxsample.replay.PrioritizedReplayer]).

    Args:
      examples: ``sampler.examples``.
      B: number of envs.
      capacity: steps kept per env (``1 .. 2**30``).
      alpha: priority exponent in ``[0, 1]`` (0: uniform).
      beta: default importance-weight exponent in ``[0, 1]`` (1: full
        correction); ``sample`` takes another, e.g. annealed to 1.
      store_agent_state: as for `uniform`.
    """
    capacity = check_int("capacity", capacity, 1, MAX_CAPACITY)
    alpha = _check_exponent("alpha", alpha)
    beta = _check_exponent("beta", beta)
    base = ring.replayer(
        "prioritized",
        examples,
        B,
        capacity,
        unroll_length=None,
        store_agent_state=store_agent_state,
    )
    num_envs, default_beta = base.num_envs, beta

    def init() -> ReplayState:
        return base.init().replace(
            priority=jnp.zeros((num_envs, capacity), jnp.float32),
            max_priority=jnp.ones((), jnp.float32),
        )

    def add(
        state: ReplayState, batch: Batch | Samples, agent_state: PyTree = None, **subset: Any
    ) -> ReplayState:
        if not isinstance(state, ReplayState) or state.priority is None:
            raise TypeError("state must be the ReplayState from prioritized(...).init()")
        new = base.add(state, batch, agent_state, **subset)  # checks env_ids / env_mask
        T = jnp.shape(as_samples(batch).valid)[0]
        return new.replace(priority=_new_priority(state, T, subset, alpha, num_envs, capacity))

    def sample(
        state: ReplayState,
        key: jax.Array,
        batch_size: int,
        sequence_length: int,
        beta: Any = None,
    ) -> tuple[Samples, PrioritizedInfo]:
        return _sample(state, key, batch_size, sequence_length, beta, default_beta, capacity)

    def update_priorities(
        state: ReplayState, info: PrioritizedInfo, priority: jax.Array
    ) -> ReplayState:
        priority = _check_priority(info, priority)
        return _update_priorities(state, info, priority, alpha, num_envs)

    replayer = PrioritizedReplayer(
        **{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
        alpha=alpha,
        beta=beta,
        update_priorities=update_priorities,
    )
    return dataclasses.replace(replayer, init=init, add=add, sample=sample)


# ----------------------------------------------------------------------------
# The replayer's functions (pure; the ring's shape is the replayer's)
# ----------------------------------------------------------------------------


def _new_priority(
    state: ReplayState, T: int, subset: dict[str, Any], alpha: float, num_envs: int, C: int
) -> jax.Array:
    """``state.priority`` with the ``T`` steps ``add`` writes (to all ``num_envs``
    rings of ``C`` slots, or to those of ``env_ids`` / ``env_mask``) given
    ``max_priority ** alpha``."""
    ids, mask = subset.get("env_ids"), subset.get("env_mask")
    ids = None if ids is None else jnp.asarray(ids, jnp.int32)
    rows, drop = ring.target_rows(num_envs, ids, None if mask is None else jnp.asarray(mask))
    _, slots = ring.written_slots(state.position, rows, T, C)
    return state.priority.at[rows[:, None], slots].set(
        jnp.power(state.max_priority, alpha), mode="drop" if drop else "promise_in_bounds"
    )


def _start_weights(state: ReplayState, L: int, C: int) -> tuple[jax.Array, jax.Array]:
    """``(w [B * C], oldest [B])``: the stored priority of each (env, start) where
    a whole sequence of ``L`` steps fits, 0 elsewhere (flattened env-major), and
    each ring's oldest slot (``C``: the capacity)."""
    oldest = ring.oldest_slots(state, C)  # [B]
    age = (jnp.arange(C, dtype=jnp.int32)[None, :] - oldest[:, None]) % C
    fits = age < (state.filled - L + 1)[:, None]  # [B, C]
    return jnp.where(fits, state.priority, 0.0).reshape(-1), oldest


def _sample(
    state: ReplayState,
    key: jax.Array,
    batch_size: int,
    sequence_length: int,
    beta: Any,
    default_beta: float,
    C: int,
) -> tuple[Samples, PrioritizedInfo]:
    """``sample`` of a replayer of capacity ``C``: ``batch_size`` sequences drawn
    by priority, their importance weights with exponent ``beta`` (None: the
    replayer's ``default_beta``)."""
    N = check_int("batch_size", batch_size, 1)
    L = check_int("sequence_length", sequence_length, 1, C)
    check_key(key)
    ring.check_fill(state, L)
    b = default_beta if beta is None else jnp.asarray(beta, jnp.float32)
    w, oldest = _start_weights(state, L, C)
    index, mass, total = _draw(w, key, N)
    env, slot = index // C, index % C
    ok = mass > 0
    probability = jnp.where(ok, mass / total, 0.0)
    p_min = jnp.min(jnp.where(w > 0, w, jnp.inf)) / total
    weight = jnp.where(ok, (p_min / jnp.where(ok, probability, 1.0)) ** b, 0.0)
    out, info = ring.with_info(
        ring.read(state.data, ring.sequence_slots(slot, L, C), env),
        env,
        (slot - oldest[env]) % C,
        ok,
    )
    return out, PrioritizedInfo(
        **{f.name: getattr(info, f.name) for f in dataclasses.fields(info)},
        slot=slot,
        probability=probability,
        weight=weight,
    )


def _check_priority(info: Any, priority: Any) -> jax.Array:
    """``priority`` as float32 ``[N]``, or a clear error unless ``info`` is a
    ``PrioritizedInfo`` and ``priority`` float ``[N]`` (finite and ``>= 0`` when
    concrete)."""
    if not isinstance(info, PrioritizedInfo):
        raise TypeError(f"info must be the PrioritizedInfo of sample(), got {type(info).__name__}")
    n = jnp.shape(info.slot)[0]
    priority = jnp.asarray(priority)
    if priority.shape != (n,) or not jnp.issubdtype(priority.dtype, jnp.floating):
        raise ValueError(
            f"update_priorities: priority must be float [N] = [{n}] (one per sampled "
            f"sequence), got {priority.dtype}{list(priority.shape)}"
        )
    priority = priority.astype(jnp.float32)
    if not isinstance(priority, jax.core.Tracer):
        values = np.asarray(priority)
        if not (np.isfinite(values).all() and (values >= 0).all()):
            raise ValueError(f"update_priorities: priority must be finite and >= 0, got {values}")
    return priority


def _update_priorities(
    state: ReplayState, info: PrioritizedInfo, priority: jax.Array, alpha: float, num_envs: int
) -> ReplayState:
    """``update_priorities`` of a checked ``priority`` (float32 ``[N]``)."""
    rows = jnp.where(info.ok, info.env_index, num_envs)  # not ok: dropped
    table = state.priority.at[rows, info.slot].set(jnp.power(priority, alpha), mode="drop")
    top = jnp.max(jnp.where(info.ok, priority, 0.0))
    return state.replace(priority=table, max_priority=jnp.maximum(state.max_priority, top))

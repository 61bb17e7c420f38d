"""Branches that stay branches under ``jax.vmap``.

``jax.vmap`` turns a ``lax.cond`` whose predicate is batched into a select:
both branches run at every call, for every element. A trainer is vmapped over
seeds (``jaxsample train``), so a branch meant to run rarely (the sparse
final-observation store's recomputed step, DQN's learning phase) would run
always. `any_in_batch` reduces a predicate over the vmapped axes as well
(a ``custom_vmap`` rule), so a ``lax.cond`` on it stays a conditional that runs
its branch when the predicate holds for some element; `cond_any` uses it
for a per-element ``lax.cond``. `max_in_batch` does the same for a loop
bound (a ``fori_loop`` with a batched trip count otherwise runs every element
to the largest with selects at each round).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import custom_batching

from jaxsample.types import PyTree


def _across(reduce: Callable[[jax.Array], jax.Array]) -> Callable[[jax.Array], jax.Array]:
    """``reduce`` over all axes of its argument, and over every vmapped axis."""

    @custom_batching.custom_vmap
    def across(x: jax.Array) -> jax.Array:
        return reduce(x)

    @across.def_vmap
    def rule(axis_size: int, in_batched: list[bool], x: jax.Array) -> tuple[jax.Array, bool]:
        del axis_size, in_batched
        return across(x), False  # ``x`` holds the vmapped axis: reduced too

    return across


#: ``jnp.any(x)`` over all of ``x``'s axes and every axis it is vmapped over
#: (an unbatched bool scalar).
any_in_batch = _across(jnp.any)

#: ``jnp.max(x)`` over all of ``x``'s axes and every axis it is vmapped over
#: (an unbatched scalar).
max_in_batch = _across(jnp.max)


def cond_any(
    pred: jax.Array, true_fn: Callable[..., PyTree], false_fn: Callable[..., PyTree], *operands: Any
) -> PyTree:
    """``lax.cond(pred, true_fn, false_fn, *operands)`` (``pred`` a bool scalar),
    that stays a conditional under ``vmap``.

    Where ``pred`` is vmapped, ``true_fn`` runs (for every element) only at
    calls where it holds for some element, and each element takes
    ``true_fn``'s outputs where its ``pred`` holds and ``false_fn``'s
    elsewhere: the same values as ``lax.cond``, without running ``true_fn``
    when no element needs it. Both functions must return the same structure.
    """

    def per_element(*ops: Any) -> PyTree:
        taken, other = true_fn(*ops), false_fn(*ops)
        return jax.tree.map(lambda a, b: jnp.where(pred, a, b), taken, other)

    return jax.lax.cond(any_in_batch(pred), per_element, false_fn, *operands)

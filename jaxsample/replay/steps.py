"""What a replayer stores: the per-step spec derived from ``sampler.examples``,
and a batch's steps in that layout, checked field by field at trace time."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsample.types import Batch, PyTree, Samples, SparseFinalObservation

__all__ = [
    "as_samples",
    "check_env_subset",
    "check_examples",
    "check_tree",
    "stored_spec",
    "stored_steps",
]


def _spec_str(shape: tuple[int, ...], dtype: Any) -> str:
    return f"{np.dtype(dtype).name}{list(shape)}"


def _specs(tree: PyTree) -> PyTree:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), tree)


def check_examples(examples: Any) -> Samples:
    """``examples`` (``sampler.examples``: one step, no ``T``/``B`` axes) as specs,
    or a ``TypeError``/``ValueError`` that says what is wrong."""
    if not isinstance(examples, Samples):
        raise TypeError(
            "examples must be sampler.examples (a jaxsample Samples of one step), got "
            f"{type(examples).__name__}"
        )
    if isinstance(examples.env.final_store, SparseFinalObservation):
        raise ValueError(
            "examples.env.final_store must be one dense observation, as in sampler.examples"
        )
    for leaf in jax.tree.leaves(examples):
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise TypeError(
                "examples leaves must be jax.ShapeDtypeStruct or arrays (one step, no T/B "
                f"axes), got {leaf!r}"
            )
    for name, spec in (
        ("examples.env.reward", examples.env.reward),
        ("examples.env.done", examples.env.done),
        ("examples.valid", examples.valid),
    ):
        if tuple(spec.shape) != ():
            raise ValueError(
                f"{name} must be a scalar spec (one step, no T/B axes), got shape "
                f"{list(spec.shape)}"
            )
    return _specs(examples)


def stored_spec(examples: Samples, store_agent_state: bool) -> Samples:
    """One stored step, leaves ``jax.ShapeDtypeStruct``: the per-step fields of
    ``examples``, ``agent.initial_state`` the recurrent state before the step
    when ``store_agent_state`` (else ``()``), no ``agent.state`` and no
    ``bootstrap_value``."""
    initial_state = examples.agent.initial_state if store_agent_state else ()
    return _specs(
        Samples(
            env=examples.env,
            agent=examples.agent.replace(initial_state=initial_state, state=None),
            valid=examples.valid,
            bootstrap_value=None,
        )
    )


def as_samples(batch: Batch | Samples) -> Samples:
    """The [`Samples`][jaxsample.types.Samples] of a ``Batch`` (or ``batch`` itself)."""
    samples = batch.samples if isinstance(batch, Batch) else batch
    if not isinstance(samples, Samples):
        raise TypeError(f"batch must be a jaxsample Batch or Samples, got {type(batch).__name__}")
    return samples


def check_env_subset(
    env_ids: Any, env_mask: Any, num_envs: int, allowed: bool, kind: str
) -> tuple[jax.Array | None, jax.Array | None]:
    """``add``'s ``env_ids`` (int ``[M]``, distinct, in ``0..B-1``) and ``env_mask``
    (bool ``[B]``) as arrays, checked (values only when concrete, outside jit),
    or a ``TypeError``/``ValueError`` naming the argument."""
    if env_ids is None and env_mask is None:
        return None, None
    if not allowed:
        raise ValueError(
            f"replay add: {kind} stores whole batches; env_ids/env_mask are for the other replayers"
        )
    if env_ids is not None and env_mask is not None:
        raise ValueError("replay add: give env_ids or env_mask, not both")
    if env_mask is not None:
        mask = jnp.asarray(env_mask)
        if mask.dtype != bool or mask.shape != (num_envs,):
            raise ValueError(
                f"replay add: env_mask must be bool [B] = bool[{num_envs}], got "
                f"{_spec_str(mask.shape, mask.dtype)}"
            )
        return None, mask
    ids = jnp.asarray(env_ids)
    if not jnp.issubdtype(ids.dtype, jnp.integer) or ids.ndim != 1 or ids.shape[0] < 1:
        raise TypeError(
            f"replay add: env_ids must be a 1-D array of env indices (int [M], M >= 1), got "
            f"{_spec_str(ids.shape, ids.dtype)}"
        )
    if not isinstance(ids, jax.core.Tracer):
        values = np.asarray(ids)
        if values.min() < 0 or values.max() >= num_envs:
            raise ValueError(f"replay add: env_ids must be in 0..{num_envs - 1}, got {values}")
        if len(set(values.tolist())) != values.size:
            raise ValueError(f"replay add: env_ids must be distinct, got {values}")
    return ids.astype(jnp.int32), None


def _layout(
    samples: Samples, agent_state: PyTree, final_observation: PyTree, final_mask: PyTree
) -> Samples:
    """The stored fields of ``samples`` (leaves ``[T, B, ...]``), in storage
    layout: the final observation and its action mask dense."""
    return samples.replace(
        env=samples.env.replace(final_store=final_observation, final_mask_store=final_mask),
        agent=samples.agent.replace(initial_state=agent_state, state=None),
        bootstrap_value=None,
    )


# The stored fields, by their names in error messages; the final observation
# last, since it is computed from the others.
_STEP_FIELDS = (
    "env.observation",
    "env.reward",
    "env.prev_reward",
    "env.terminated",
    "env.truncated",
    "env.done",
    "env.env_info",
    "env.action_mask",
    "agent.action",
    "agent.prev_action",
    "agent.agent_info",
)
_FIELDS: tuple[tuple[str, Callable[[Samples], PyTree]], ...] = (
    *((name, operator.attrgetter(name)) for name in _STEP_FIELDS),
    ("agent_state", operator.attrgetter("agent.initial_state")),
    ("valid", operator.attrgetter("valid")),
    ("env.final_observation", operator.attrgetter("env.final_store", "env.final_mask_store")),
)


def check_tree(
    name: str, expected: PyTree, got: PyTree, lead: tuple[int, ...], lead_str: str
) -> None:
    """Raise a ValueError naming ``name`` unless ``got`` is ``expected`` with ``lead`` axes."""
    e_leaves, e_def = jax.tree_util.tree_flatten_with_path(expected)
    g_leaves, g_def = jax.tree_util.tree_flatten_with_path(got)
    if e_def != g_def:
        raise ValueError(
            f"replay add: field {name} has structure {g_def}, but the replayer was "
            f"built for {e_def} (from examples)"
        )
    for (path, e), (_, g) in zip(e_leaves, g_leaves, strict=True):
        shape, dtype = tuple(jnp.shape(g)), jnp.result_type(g)
        want = lead + tuple(e.shape)
        if shape != want or dtype != e.dtype:
            where = f"{name}{jax.tree_util.keystr(path)}"
            raise ValueError(
                f"replay add: field {where} must be {lead_str} + one step "
                f"{_spec_str(e.shape, e.dtype)} = {_spec_str(want, e.dtype)}, got "
                f"{_spec_str(shape, dtype)}"
            )


def stored_steps(
    spec: Samples,
    samples: Samples,
    agent_state: PyTree,
    *,
    num_envs: int,
    unroll_length: int | None,
    store_agent_state: bool,
    kind: str,
    envs_from: str = "this replayer",
) -> Samples:
    """The steps of ``samples`` to store, leaves ``[T, B, ...]`` laid out as ``spec``.

    Checks at trace time that ``samples`` has ``num_envs`` envs, ``unroll_length``
    steps (unless None) and, field by field, the structure, shapes and dtypes of
    ``spec`` (the error names the field). ``agent_state`` is as for
    ``Replayer.add``; the final observation is read through
    ``samples.env.final_observation`` (sparse or dense store).
    """
    reward_shape = tuple(jnp.shape(samples.env.reward))
    if len(reward_shape) != 2:
        raise ValueError(
            f"replay add: field env.reward must be [T, B], got shape {list(reward_shape)}"
        )
    T, B = reward_shape
    if num_envs != B:
        raise ValueError(f"replay add: the batch has B={B} envs, {envs_from} {num_envs}")
    if unroll_length is not None and unroll_length != T:
        raise ValueError(f"replay add: {kind} needs batches of T={unroll_length} steps, got T={T}")
    state_spec = spec.agent.initial_state
    if store_agent_state:
        if agent_state is None:
            agent_state = samples.agent.state  # the sampler's store_agent_state=True
        if agent_state is None:
            if jax.tree.leaves(state_spec):
                raise TypeError(
                    "replay add: store_agent_state=True needs agent_state, the agent's "
                    "recurrent state before each step with leaves [T, B, *state]: build "
                    "the sampler with store_agent_state=True or pass agent_state"
                )
            agent_state = state_spec
    elif agent_state is not None:
        raise ValueError("replay add: agent_state given, but store_agent_state=False")
    else:
        agent_state = ()
    # Check the raw fields first: the final observation is computed from them.
    new = _layout(samples, agent_state, spec.env.final_store, spec.env.final_mask_store)
    for name, get in _FIELDS[:-1]:
        check_tree(name, get(spec), get(new), (T, B), "[T, B]")
    env = samples.env
    new = _layout(samples, agent_state, env.final_observation, env.final_action_mask)
    name, get = _FIELDS[-1]
    check_tree(name, get(spec), get(new), (T, B), "[T, B]")
    return new

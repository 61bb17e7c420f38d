"""The final-observation store: one strategy, chosen when a sampler is built.

A batch keeps the true final observation of the steps that end an episode
(``samples.env.final_store``). How the JAX sampler's scan gets it depends on
the sampler, so `choose` picks one strategy once, and the scan body reads
*step -> store -> reset* (`jaxsample.core.rollout`):

* `DenseStore` (``final_observation="dense"``): every step's final
  observation, stacked ``[T, B, *obs]``;
* the sparse stores (the default): ``K`` slots per env for the truncated
  steps' final observations (a terminated step's is not needed: it is not
  bootstrapped), written inside a ``lax.cond`` that runs only at steps where
  some env truncated; they differ in where the final observations come from:

  - `PooledStore` (pooled resets, `jaxsample.core.resets`): the
    step did not reset, so the env's observation after it is the final one;
  - `RecomputeStore` (a known time limit, so truncations are rare, and
    an observation larger than half the env state, `recompute_finals`):
    the cond recomputes the step from its keys, so the common path never
    holds the final observations;
  - `InfoStore` (otherwise): the step's own ``info["final_observation"]``.

``K`` is `final_slots` (``ceil(T / limit)`` only for an env whose time
limit is known for sure, else ``T``), so the store is exact for any env. The
host sampler stores in numpy buffers (`jaxsample.host.buffers`) and makes the
batch's store with the same `as_batch`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Protocol

import jax
import jax.numpy as jnp

from jaxsample.core.batched import any_in_batch
from jaxsample.core.options import SamplerOptions
from jaxsample.core.specs import EnvSpec, known_time_limit
from jaxsample.core.step import EnvCarry, EnvStepper
from jaxsample.types import PyTree, SparseFinalObservation


def final_slots(reset_mode: str, T: int, time_limit: float | None) -> int:
    """``K``, the slots per env of the sparse final-observation store: 1 where
    an env ends at most one episode per batch (``"wait"``, ``"episodic"``),
    ``ceil(T / time_limit)`` for a known time limit, else ``T``."""
    if reset_mode != "auto":
        return 1
    if time_limit is None:
        return T
    return max(1, min(T, math.ceil(T / time_limit)))


def truncation_bound(env: Any, env_params: Any, T: int) -> int:
    """Upper bound on the truncations of one env in ``T`` auto-reset steps:
    ``ceil(T / limit)`` for an env of
    `known_time_limit` (two truncations are at
    least ``limit`` steps apart), else ``T`` (exact for any env)."""
    return final_slots("auto", T, known_time_limit(env, env_params))


def recompute_finals(spec: EnvSpec, time_limit: float | None) -> bool:
    """Whether the sparse store recomputes a truncated step's final
    observation inside its ``lax.cond`` (from the env state, action and keys
    of the step) rather than take the step's own.

    Only for a known time limit (truncations are rare), and only where the
    observation is larger than half the env state: recomputing spares the
    step a materialized final observation next to the observation, but the
    cond's operands (the env state before the step, kept while the step
    writes the new one) are copied at every step, which costs more where the
    state is the bigger of the two (measured on Navix and MinAtar Breakout:
    docs/benchmarks.md, "The core overhead benchmark").
    """
    if time_limit is None:
        return False

    def nbytes(tree: PyTree) -> int:
        return sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree))

    return 2 * nbytes(spec.observation) > nbytes(spec.env_state)


def as_batch(dense: bool, stored: PyTree, next_observation: PyTree) -> Any:
    """The batch's ``final_store``: dense: ``stored``, ``[T, B, *obs]``;
    sparse: a [`SparseFinalObservation`][jaxsample.types.SparseFinalObservation] of
    ``next_observation`` ``[B, *obs]`` and the slots ``stored`` ``[B, K, *obs]``."""
    if dense:
        return stored
    return SparseFinalObservation(next_observation=next_observation, slots=stored)


class FinalStore(Protocol):
    """The strategies' interface (see `DenseStore` for the methods)."""

    emits: ClassVar[bool]

    def init(self, observation: PyTree) -> Any: ...

    def store(
        self, carry: Any, out: Any, before: EnvCarry, after: EnvCarry, k_env: Any
    ) -> tuple[Any, Any]: ...

    def batch(self, carry: Any, out: Any, next_observation: PyTree) -> Any: ...


@dataclasses.dataclass(frozen=True)
class DenseStore:
    """Every step's final observation, stacked by the scan."""

    emits: ClassVar[bool] = True  # the per-env step outputs its final observation

    def init(self, observation: PyTree) -> Any:
        """The store's carry for ``B`` envs of ``observation`` ``[B, *obs]``."""
        del observation
        return ()

    def store(
        self, carry: Any, out: Any, before: EnvCarry, after: EnvCarry, k_env: Any
    ) -> tuple[Any, Any]:
        """One step of the scan: ``(carry, out)`` after storing the step's
        finals (``out`` ``[B]``: the step's outputs; ``before``/``after``: the
        envs' carries around the step; ``k_env``: its keys)."""
        del before, after, k_env
        return carry, out

    def batch(self, carry: Any, out: Any, next_observation: PyTree) -> Any:
        """The batch's ``final_store`` from the carry and the stacked outputs."""
        del carry
        return as_batch(True, out.final_observation, next_observation)


@dataclasses.dataclass(frozen=True)
class SparseStore(DenseStore):
    """``slots`` (``K``) final observations per env, of its truncated steps."""

    slots: int = 1
    emits: ClassVar[bool] = False

    def init(self, observation: PyTree) -> tuple[PyTree, jax.Array]:
        B = jax.tree.leaves(observation)[0].shape[0]
        buffers = jax.tree.map(
            lambda o: jnp.zeros((B, self.slots, *o.shape[1:]), o.dtype), observation
        )
        return buffers, jnp.zeros((B,), jnp.int32)

    def source(
        self, out: Any, before: EnvCarry, after: EnvCarry, k_env: Any
    ) -> tuple[Any, tuple[Any, ...]]:
        """``(out, operands)``: the outputs to stack and the operands of
        `finals` (the cond's)."""
        raise NotImplementedError

    def finals(self, *operands: Any) -> PyTree:
        """The ``[B, *obs]`` final observations of the step, from its operands."""
        (final,) = operands
        return final

    def store(
        self, carry: Any, out: Any, before: EnvCarry, after: EnvCarry, k_env: Any
    ) -> tuple[Any, Any]:
        out, operands = self.source(out, before, after, k_env)

        def write(buffers: PyTree, n: jax.Array, truncated: jax.Array, *operands: Any):
            return self._write(buffers, n, truncated, self.finals(*operands))

        # Safe to run for every env once any env (of any vmapped run)
        # truncated: an env that did not writes nothing.
        carry = jax.lax.cond(
            any_in_batch(out.truncated), write, lambda *a: a[:2], *carry, out.truncated, *operands
        )
        return carry, out

    def batch(self, carry: Any, out: Any, next_observation: PyTree) -> Any:
        return as_batch(False, carry[0], next_observation)

    def _write(
        self, buffers: PyTree, n_truncated: jax.Array, truncated: jax.Array, final: PyTree
    ) -> tuple[PyTree, jax.Array]:
        """Write the final observations ``final`` ``[B, *obs]`` of the envs
        truncated at this step into their next free slot."""
        B = truncated.shape[0]
        index = jnp.where(truncated, n_truncated, self.slots)  # not truncated: dropped
        buffers = jax.tree.map(
            lambda buf, x: buf.at[jnp.arange(B), index].set(x, mode="drop"), buffers, final
        )
        return buffers, n_truncated + truncated.astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class InfoStore(SparseStore):
    """The step's own ``info["final_observation"]`` (not stacked)."""

    emits: ClassVar[bool] = True

    def source(self, out: Any, before: EnvCarry, after: EnvCarry, k_env: Any):
        return out.replace(final_observation=()), (out.final_observation,)


@dataclasses.dataclass(frozen=True)
class PooledStore(SparseStore):
    """Pooled resets: the env's observation after the step (not reset yet)."""

    def source(self, out: Any, before: EnvCarry, after: EnvCarry, k_env: Any):
        return out, (after.observation,)


@dataclasses.dataclass(frozen=True)
class RecomputeStore(SparseStore):
    """The step recomputed inside the cond from the same keys (gymnax envs are
    pure functions), so the common path never materializes the final
    observation next to the observation."""

    stepper: EnvStepper | None = None

    def source(self, out: Any, before: EnvCarry, after: EnvCarry, k_env: Any):
        return out, (k_env, before.env_state, out.action)

    def finals(self, *operands: Any) -> PyTree:
        assert self.stepper is not None
        return jax.vmap(self.stepper.env_step)(*operands)[5]["final_observation"]


def choose(
    options: SamplerOptions, stepper: EnvStepper, pooled: bool, time_limit: float | None
) -> FinalStore:
    """The store of a JAX sampler with ``options`` and ``stepper``'s env
    (``pooled``: pooled resets; ``time_limit``: the env's known one, or None)."""
    if options.final_observation == "dense":
        return DenseStore()
    slots = final_slots(options.reset_mode, options.batch_spec.T, time_limit)
    if pooled:
        return PooledStore(slots)
    if recompute_finals(stepper.env_spec, time_limit):
        return RecomputeStore(slots, stepper)
    return InfoStore(slots)

"""The resets of the envs that ended: gymnax's own, computed only at steps
where some env ended (`EndedResets`, the default), or cheap ones, a
pool of ``R`` resets per block of ``G`` envs per step (`ResetPool`).

gymnax's ``env.step`` computes ``env.reset_env`` for every env at every step
and selects it where the episode ended. The sampler steps a gymnax env with
``env.step_env`` instead and restarts the envs that ended after the step: by
default each with its own reset key, exactly the reset gymnax's step would
select (`EndedResets`), but inside a ``lax.cond`` that runs only at
steps where some env of the batch (of any vmapped run) ended. Where episodes
are long against the number of envs (a learning agent on a few envs: PPO's
CartPole) most steps then compute no reset at all, not even its key's hash
(on CPU a rolled loop of ~100 kernel launches per step); where some env ends
at nearly every step (thousands of envs) the branch runs at nearly every
step, as gymnax's reset does (docs/benchmarks.md measures both).

Where many envs end at every step and resets are costly (MinAtar,
procedurally generated worlds), ``make_sampler(reset_pool=R)`` hands the envs
that ended at this step resets from a pool (Craftax's optimistic resets,
without sharing a reset):

* the ``B`` envs form blocks of ``G`` (``reset_pool_block``) consecutive
  global ranks, ``[j G, (j + 1) G)``; a sampler (or a device's shard) holds
  whole blocks;
* at each step, block ``j``'s pool holds the ``R`` resets that the envs of
  ranks ``j G .. j G + R - 1`` would draw by default at that step (with
  their reset key of the step, `jaxsample.core.keys`);
* the ``m``-th env of the block (in rank order) that ended at this step takes
  pool reset ``m``; if more than ``R`` ended, the envs past the ``R``-th take
  the reset their own key draws (computed, for the whole batch, inside a
  ``lax.cond`` that runs only at steps where some block overflows).

So no reset state is ever given to two envs, every reset comes from a key no
other reset of the run uses, and the keys depend only on global ranks and the
step count: the samples are the same on 1 or n devices. Everything but *which*
reset an ended env receives is exactly the default's: the step itself
(``env.step_env`` with the step key), reward, terminated,
truncated, the true final observation and TrajInfo.

`ResetPool` is the batch-level part (it looks across the envs of a
block, so it cannot be per env); the per-env step without the auto-reset is
`jaxsample.core.step.EnvStepper.step` with ``auto_reset=False``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsample._checks import check_int
from jaxsample.core.batched import any_in_batch, max_in_batch
from jaxsample.envs.wrappers import inherits_step
from jaxsample.types import PyTree

#: ``reset_pool_block`` when not given: the largest divisor of ``B`` up to this.
DEFAULT_BLOCK = 64

# reset(key) -> (observation, env_state): one env's reset (unbatched).
ResetFn = Callable[[jax.Array], tuple[PyTree, PyTree]]
# reset_keys(positions int32 [n]) -> keys [n]: the reset keys of those envs.
ResetKeys = Callable[[jax.Array], jax.Array]
# (observation, env_state) of the B envs, leaves [B, ...].
Envs = tuple[PyTree, PyTree]


def where_envs(mask: jax.Array, x: PyTree, y: PyTree) -> PyTree:
    """``where(mask[b], x[b], y[b])`` for every env ``b``: ``mask`` ``[B]``,
    leaves ``[B, ...]``."""

    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b)

    return jax.tree.map(pick, x, y)


@dataclasses.dataclass(frozen=True)
class EndedResets:
    """gymnax's auto-reset, computed at the steps where some env ended: every
    env that ended takes ``reset`` of its own reset key of the step, the
    reset gymnax's ``env.step`` selects there (the same samples, bit for bit)."""

    def restart(self, reset: ResetFn, reset_keys: ResetKeys, done: jax.Array, envs: Envs) -> Envs:
        """Give the envs that ended (``done`` ``[B]``) their own reset; arguments
        and result as `ResetPool.restart`'s."""

        def fresh(envs: Envs) -> Envs:
            positions = jnp.arange(done.shape[0], dtype=jnp.int32)
            return where_envs(done, jax.vmap(reset)(reset_keys(positions)), envs)

        return jax.lax.cond(any_in_batch(done), fresh, lambda envs: envs, envs)


@dataclasses.dataclass(frozen=True)
class ResetPool:
    """``R`` (``size``) resets per block of ``G`` (``block``) envs per step."""

    size: int
    block: int

    def restart(self, reset: ResetFn, reset_keys: ResetKeys, done: jax.Array, envs: Envs) -> Envs:
        """Give the envs that ended (``done``) a reset, from the pool.

        Args:
          reset: one env's ``env.reset`` as ``(observation, env_state)``.
          reset_keys: the reset keys (this step's) of the envs at the given
            local positions, ``int32 [n] -> keys [n]``.
          done: ``[B]`` bool, the envs whose episode ended at this step.
          envs: ``(observation, env_state)``, ``[B, ...]``, after ``env.step_env``.

        Returns:
          ``(observation, env_state)`` ``[B, ...]``: the reset ones where done.
        """
        B = done.shape[0]
        G, R = self.block, self.size
        n_blocks = B // G
        ended = done.reshape(n_blocks, G)
        order = jnp.cumsum(ended, axis=1, dtype=jnp.int32) - 1  # m of each ended env
        first = jnp.arange(n_blocks, dtype=jnp.int32)[:, None] * G

        def deal(k: jax.Array, current: Envs) -> Envs:
            """Round ``k``: the ended envs ``m`` in ``[k R, (k + 1) R)`` of every
            block get the resets of the keys of the block's positions ``m``."""
            m = jnp.minimum(k * R + jnp.arange(R, dtype=jnp.int32), G - 1)  # m < G
            pool = jax.vmap(reset)(reset_keys((first + m[None, :]).reshape(-1)))
            # Position in its block of each ended env of this round (G: none).
            where = jax.vmap(lambda e: jnp.nonzero(e, size=R, fill_value=G)[0])(
                ended & (order >= k * R)
            )
            target = jnp.where(where < G, first + where, B).reshape(-1)  # B: dropped
            # A scatter of n_blocks * R rows: only the ended envs are written.
            return jax.tree.map(lambda c, x: c.at[target].set(x, mode="drop"), current, pool)

        # ceil(most ended in a block / R), over every vmapped run too (a round
        # without an env of its range writes nothing).
        rounds = (max_in_batch(order[:, -1]) + R) // R
        return jax.lax.fori_loop(0, rounds, deal, envs)


#: How the sampler restarts the envs that ended (None: the env's own step does).
Resets = EndedResets | ResetPool


def check_split(resets: Resets | None, B: int, n: int) -> None:
    """Raise a ``ValueError`` unless pooled resets' blocks divide the ``B / n``
    envs of each of ``n`` devices (any other resets split anywhere)."""
    if isinstance(resets, ResetPool) and (B // n) % resets.block:
        raise ValueError(
            f"reset_pool_block={resets.block} must divide the envs per device "
            f"(B={B} over {n} devices: {B // n})"
        )


def default_block(B: int) -> int:
    """``reset_pool_block``'s default: the largest divisor of ``B`` up to
    `DEFAULT_BLOCK`."""
    return max(g for g in range(1, min(DEFAULT_BLOCK, B) + 1) if B % g == 0)


def check_reset_pool(
    reset_pool: Any,
    reset_pool_block: Any,
    env: Any,
    B: int,
    env_ranks: Sequence[int],
) -> Resets | None:
    """The resets of ``make_sampler``'s ``reset_pool`` and ``reset_pool_block``:
    a `ResetPool`; for ``reset_pool=0`` `EndedResets` for a
    gymnax env whose ``step`` is gymnax's own, None (the env's own
    auto-resetting ``step``) for any other; or a clear error naming the bad
    argument."""
    R = check_int("reset_pool", reset_pool, 0)
    own_step = inherits_step(env)
    if R == 0:
        if reset_pool_block is not None:
            raise ValueError("reset_pool_block needs reset_pool >= 1")
        return EndedResets() if own_step else None
    if not own_step:
        raise TypeError(
            "reset_pool needs a gymnax Environment whose step is gymnax's own "
            "(step_env + is_truncated + reset_env); "
            f"{type(env).__name__} replaces step, so its resets cannot be pooled"
        )
    if reset_pool_block is None:
        G = default_block(B)
    else:
        G = check_int("reset_pool_block", reset_pool_block, 1)
    if B % G:
        raise ValueError(f"reset_pool_block={G} must divide batch_spec.B={B}")
    if R > G:
        raise ValueError(f"reset_pool must be <= reset_pool_block={G}, got {R}")
    ranks = np.asarray(env_ranks).reshape(B // G, G)
    first = ranks[:, :1]
    if np.any(first % G) or np.any(ranks != first + np.arange(G)):
        raise ValueError(
            f"reset_pool: env_ranks must be whole blocks of reset_pool_block={G} "
            "consecutive global ranks starting at a multiple of it (so that each block's "
            "pool is the same on any number of devices)"
        )
    return ResetPool(size=R, block=G)

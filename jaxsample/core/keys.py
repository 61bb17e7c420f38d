"""The key schedules: which key every random draw of one env comes from.

Every key of an env derives from the run's key and the env's *global* rank
``r``, never from a split whose shape depends on ``B``, so the same key gives
the same samples on 1 or 8 devices and in 1 or several processes.

Samplers (the JAX sampler, :mod:`jaxsample.core.rollout`, and the host sampler,
:mod:`jaxsample.host.sampler`), for the env of global rank ``r``:

* start: ``k_reset, k_decorrelate, k_run = split(fold_in(key, r), 3)``
  (:func:`env_keys`); the env starts from ``env.reset(k_reset)``.
  Decorrelation draws the number of random steps ``n ~ U{1..max}`` from
  ``split(k_decorrelate)[0]`` and takes random step ``i`` with
  ``k_action, k_env = split(fold_in(split(k_decorrelate)[1], i))``
  (:func:`decorrelation_keys`).
* each env counts its steps ``n`` (over all batches) in epochs of
  ``EPOCH = 2**30`` steps: ``k_run`` is the key of epoch 0 and
  ``split(k_epoch)[0]`` the key of the next epoch; ``i = n mod EPOCH``.
* step ``n``: the agent acts with ``fold_in(k_epoch, 3 i)`` and the env steps
  with ``env.step(fold_in(k_epoch, 3 i + 1), ...)`` (which auto-resets with
  its own split of that key, as gymnax does) (:func:`step_key`). With pooled
  resets (:mod:`jaxsample.core.resets`) the env steps with
  ``env.step_env(k_step, ...)`` and a reset of that step is drawn from
  ``k_reset``, where ``k_step, k_reset = split(fold_in(k_epoch, 3 i + 1))`` is
  gymnax's own split (:func:`gymnax_step_keys`).
* ``"episodic"`` mode, at the start of a batch whose first step is ``n``: the
  env restarts from ``env.reset(fold_in(k_epoch, 3 i + 2))``.

Two ``fold_in`` per step are much cheaper than a per-env ``split``; the keys
depend only on ``n``, so collecting ``2 x T`` steps gives the same samples as
``T`` steps twice (in ``"auto"`` mode), and the epochs keep the uint32 counter
from ever wrapping onto keys already used, however long the run.

The evaluator (:mod:`jaxsample.evaluation`), for the env of rank ``b``:
``k_reset, k_run = split(fold_in(key, b))`` (:func:`eval_env_keys`); at step
``t`` of the run the agent acts with ``fold_in(k_run, 2 t)`` and the env steps
with ``env.step(fold_in(k_run, 2 t + 1), ...)`` (:func:`eval_step_keys`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

EPOCH = 2**30  # steps per key epoch: 3 * EPOCH fits in uint32

AGENT, ENV, EPISODIC_RESET = 0, 1, 2  # the streams of a step's keys


class EpochKeys(struct.PyTreeNode):
    """One env's key material for a batch: the epoch key, the next epoch's key
    and the step count in the epoch at the start of the batch (scalars; ``[B]``
    when vmapped)."""

    key: jax.Array
    next_key: jax.Array
    step: jax.Array  # uint32 scalar, < EPOCH

    @classmethod
    def of(cls, key: jax.Array, step: jax.Array) -> EpochKeys:
        """The key material of a batch from one env's epoch key and step count."""
        return cls(key=key, next_key=jax.random.split(key)[0], step=step)


def env_keys(key: jax.Array, rank: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(k_reset, k_decorrelate, k_run)`` of the env of global rank ``rank``."""
    k_reset, k_decorrelate, k_run = jax.random.split(jax.random.fold_in(key, rank), 3)
    return k_reset, k_decorrelate, k_run


def decorrelation_keys(k_decorrelate: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(k_count, k_steps)``: the key of the number of random steps, and the key
    that random step ``i`` folds ``i`` into (see :func:`decorrelation_step_keys`)."""
    k_count, k_steps = jax.random.split(k_decorrelate)
    return k_count, k_steps


def decorrelation_step_keys(k_steps: jax.Array, i: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(k_action, k_env)`` of random decorrelation step ``i``."""
    k_action, k_env = jax.random.split(jax.random.fold_in(k_steps, i))
    return k_action, k_env


def gymnax_step_keys(k_env: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(k_step, k_reset)``: the split of an env key that gymnax's
    ``Environment.step`` makes (``step_env`` with the first, ``reset_env`` with
    the second)."""
    k_step, k_reset = jax.random.split(k_env)
    return k_step, k_reset


def epoch_position(keys: EpochKeys, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Epoch key and index in it of the step ``t`` steps after the batch start."""
    n = keys.step + jnp.asarray(t, jnp.uint32)  # < 2 * EPOCH: no uint32 wrap
    crossed = n >= EPOCH
    data = jnp.where(crossed, jax.random.key_data(keys.next_key), jax.random.key_data(keys.key))
    key = jax.random.wrap_key_data(data, impl=jax.random.key_impl(keys.key))
    return key, jnp.where(crossed, n - EPOCH, n)


def step_key(keys: EpochKeys, t: jax.Array, stream: int) -> jax.Array:
    """Key of stream ``stream`` (:data:`AGENT`, :data:`ENV` or
    :data:`EPISODIC_RESET`) of step ``t`` of the batch."""
    key, i = epoch_position(keys, t)
    return jax.random.fold_in(key, 3 * i + stream)


def reset_key(keys: EpochKeys, t: jax.Array) -> jax.Array:
    """The key of the reset that step ``t`` of the batch draws (gymnax's
    ``split(k_env)[1]``; used by pooled resets)."""
    return gymnax_step_keys(step_key(keys, t, ENV))[1]


def advance_epoch(keys: EpochKeys, T: int) -> tuple[jax.Array, jax.Array]:
    """The env's epoch key and step count after the ``T`` steps of a batch."""
    return epoch_position(keys, jnp.uint32(T))


def eval_env_keys(key: jax.Array, rank: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The evaluator's ``(k_reset, k_run)`` of the env of rank ``rank``."""
    k_reset, k_run = jax.random.split(jax.random.fold_in(key, rank))
    return k_reset, k_run


def eval_step_keys(k_run: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The evaluator's ``(k_agent, k_env)`` of step ``t`` (int32) of the run."""
    i = 2 * t.astype(jnp.uint32)
    return jax.random.fold_in(k_run, i), jax.random.fold_in(k_run, i + 1)

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
* step ``n``: the agent acts with ``fold_in(k_epoch, 4 i)``; the env steps
  with ``k_step = fold_in(k_epoch, 4 i + 1)`` and, where the step ends the
  episode, resets with ``k_reset = fold_in(k_epoch, 4 i + 2)``
  (:func:`step_key`): gymnax's auto-resetting ``env.step`` written out,
  ``env.step_env(k_step, ...)`` then ``env.reset_env(k_reset)`` where done
  (:meth:`jaxsample.core.step.EnvStepper.env_step`); pooled resets
  (:mod:`jaxsample.core.resets`) draw the reset of that step from the same
  ``k_reset``. An env that overrides gymnax's ``step`` (a wrapper with its own
  auto-reset) is stepped as it is, ``env.step(k_step, ...)``.
* ``"episodic"`` mode, at the start of a batch whose first step is ``n``: the
  env restarts from ``env.reset(fold_in(k_epoch, 4 i + 3))``.

One ``fold_in`` per key is much cheaper than a per-env ``split``, and the
sampler draws the keys of a whole batch before its scan, one hash per stream
with the env's one epoch key (:func:`batch_step_keys`), so nothing is hashed
inside the scan. The keys depend only
on ``n``, so collecting ``2 x T`` steps gives the same samples as
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

from jaxsample.core.batched import any_in_batch

EPOCH = 2**30  # steps per key epoch: 4 * EPOCH - 1 fits in uint32

AGENT, ENV, RESET, EPISODIC_RESET = 0, 1, 2, 3  # the streams of a step's keys
STREAMS = 4


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


#: The keys of one env step: ``(k_step, k_reset)``, the key of the env's
#: step and of its reset where the step ends the episode.
EnvKeys = tuple[jax.Array, jax.Array]


def env_step_keys(k_env: jax.Array, gymnax_step: bool) -> EnvKeys:
    """The step keys that one env key ``k_env`` stands for (decorrelation, the
    evaluator): gymnax's own split of it, :func:`gymnax_step_keys`, for an env
    whose ``step`` is gymnax's (its step is written out with them, the same
    bits as ``env.step(k_env)``); else ``k_env`` itself as the step key (the
    env's own ``step`` gets it whole) and as the unused reset key."""
    if gymnax_step:
        return gymnax_step_keys(k_env)
    return k_env, k_env


def epoch_position(keys: EpochKeys, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Epoch key and index in it of the step ``t`` steps after the batch start."""
    n = keys.step + jnp.asarray(t, jnp.uint32)  # < 2 * EPOCH: no uint32 wrap
    crossed = n >= EPOCH
    data = jnp.where(crossed, jax.random.key_data(keys.next_key), jax.random.key_data(keys.key))
    key = jax.random.wrap_key_data(data, impl=jax.random.key_impl(keys.key))
    return key, jnp.where(crossed, n - EPOCH, n)


def step_key(keys: EpochKeys, t: jax.Array, stream: int) -> jax.Array:
    """Key of stream ``stream`` (:data:`AGENT`, :data:`ENV`, :data:`RESET` or
    :data:`EPISODIC_RESET`) of step ``t`` of the batch."""
    key, i = epoch_position(keys, t)
    return jax.random.fold_in(key, STREAMS * i + stream)


def batch_step_keys(keys: EpochKeys, T: int, reset_keys: bool) -> tuple[jax.Array, EnvKeys]:
    """One env's keys of every step of a ``T``-step batch, drawn at once (a
    vectorized hash per stream instead of hashes at every step of the scan).

    A batch that stays in one key epoch (all but one batch in ``2**30`` steps)
    hashes with the env's one epoch key; only where some env of the batch (of
    any vmapped run) crosses into the next epoch does each step hash with its
    own epoch's key, chosen per step before the hash. So each stream is one
    hash in either branch of the crossing's ``lax.cond`` (hashing with both
    keys and choosing after would compile three), and the common branch keeps
    the cheaper hash of one key (a key per step costs the hash more; measured
    in docs/benchmarks.md).
    Each stream is its own hash, so XLA drops the keys that nothing uses (an
    env whose step ignores its key, as CartPole's and Navix's do).

    Returns:
      ``(k_agent, (k_step, k_reset))``, each ``[T]``: :func:`step_key`'s
      :data:`AGENT`, :data:`ENV` and :data:`RESET` keys of steps ``0 .. T-1``;
      without ``reset_keys`` (nothing resets with them) ``k_reset`` is
      ``k_step``, unused.
    """
    n = keys.step + jnp.arange(T, dtype=jnp.uint32)  # < 2 * EPOCH: no uint32 wrap
    crossing = any_in_batch(keys.step + jnp.uint32(T) > EPOCH)

    def per_step() -> jax.Array:  # [T] keys: the next epoch's from the step entering it
        data = jnp.where(
            (n >= EPOCH)[:, None], jax.random.key_data(keys.next_key), jax.random.key_data(keys.key)
        )
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(keys.key))

    def stream(s: int) -> jax.Array:  # [T]; one hash per stream, so an unused one is dropped
        # STREAMS * n + s wraps (uint32) past the epoch onto the next epoch's
        # STREAMS * (n - EPOCH) + s, as STREAMS * EPOCH == 2**32: the counter
        # of step_key's index in the step's own epoch.
        counter = jnp.uint32(STREAMS) * n + jnp.uint32(s)
        return jax.lax.cond(
            crossing,
            lambda: jax.vmap(jax.random.fold_in)(per_step(), counter),
            lambda: jax.vmap(jax.random.fold_in, (None, 0))(keys.key, counter),
        )

    k_step = stream(ENV)
    return stream(AGENT), (k_step, stream(RESET) if reset_keys else k_step)


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

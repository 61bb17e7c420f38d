"""The key schedules: which key every random draw of one env comes from.

Every key of an env derives from the run's key and the env's *global* rank
``r``, never from a split whose shape depends on ``B``, so the same key gives
the same samples on 1 or 8 devices and in 1 or several processes.

Samplers (the JAX sampler, `jaxsample.core.rollout`, and the host sampler,
`jaxsample.host.sampler`), for the env of global rank ``r``:

* start: ``k_reset, k_decorrelate, k_run = split(fold_in(key, r), 3)``
  (`env_keys`); the env starts from ``env.reset(k_reset)``.
  Decorrelation draws the number of random steps ``n ~ U{1..max}`` from
  ``split(k_decorrelate)[0]`` and takes random step ``i`` with
  ``k_action, k_env = split(fold_in(split(k_decorrelate)[1], i))``
  (`decorrelation_keys`).
* each env counts its steps ``n`` (over all batches) as a key epoch ``e =
  n // EPOCH`` (``EPOCH = 2**30``, uint32) and a step ``i = n mod EPOCH`` in
  it, so the counts never wrap on a real run (``2**62`` steps).
* step ``n``'s key of stream ``s`` hashes the 64-bit counter ``(e, 4 i + s)``
  with the run key, `counter_key`: ``threefry_2x32(k_run, (e, 4 i + s))``
  for JAX's default (threefry) keys, which in epoch 0 is exactly
  ``fold_in(k_run, 4 i + s)``. The agent acts with stream 0; the env steps
  with ``k_step`` (stream 1) and, where the step ends the episode, resets with
  ``k_reset`` (stream 2) (`step_key`): gymnax's auto-resetting
  ``env.step`` written out, ``env.step_env(k_step, ...)`` then
  ``env.reset_env(k_reset)`` where done
  (`jaxsample.core.step.EnvStepper.env_step`); pooled resets
  (`jaxsample.core.resets`) draw the reset of that step from the same
  ``k_reset``. An env that overrides gymnax's ``step`` (a wrapper with its own
  auto-reset) is stepped as it is, ``env.step(k_step, ...)``.
* ``"episodic"`` mode, at the start of a batch whose first step is ``n``: the
  env restarts from ``env.reset(key of stream 3 of step n)``.

One hash per key is much cheaper than a per-env ``split``, and the sampler
draws the keys of a whole batch before its scan, one hash per stream with
the env's one run key (`batch_step_keys`), so nothing is hashed inside
the scan; a batch that enters a new epoch needs no other key, only the
counter's high word, so every batch is the same program. The keys depend only
on ``n``, so collecting ``2 x T`` steps gives the same samples as ``T`` steps
twice (in ``"auto"`` mode).

The evaluator ([`jaxsample.evaluation`][jaxsample.evaluation]), for the env of rank ``b``:
``k_reset, k_run = split(fold_in(key, b))`` (`eval_env_keys`); at step
``t`` of the run the agent acts with ``fold_in(k_run, 2 t)`` and the env steps
with ``env.step(fold_in(k_run, 2 t + 1), ...)`` (`eval_step_keys`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jax.extend.random import threefry2x32_p, threefry_prng_impl

EPOCH = 2**30  # steps per key epoch: 4 * EPOCH - 1 fits in uint32

AGENT, ENV, RESET, EPISODIC_RESET = 0, 1, 2, 3  # the streams of a step's keys
STREAMS = 4


class EpochKeys(struct.PyTreeNode):
    """One env's key material for a batch: its run key, and its step count
    (the key epoch and the step in it) at the start of the batch (scalars;
    ``[B]`` when vmapped)."""

    key: jax.Array
    epoch: jax.Array  # uint32 scalar
    step: jax.Array  # uint32 scalar, < EPOCH


def env_keys(key: jax.Array, rank: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(k_reset, k_decorrelate, k_run)`` of the env of global rank ``rank``."""
    k_reset, k_decorrelate, k_run = jax.random.split(jax.random.fold_in(key, rank), 3)
    return k_reset, k_decorrelate, k_run


def decorrelation_keys(k_decorrelate: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(k_count, k_steps)``: the key of the number of random steps, and the key
    that random step ``i`` folds ``i`` into (see `decorrelation_step_keys`)."""
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
    evaluator): gymnax's own split of it, `gymnax_step_keys`, for an env
    whose ``step`` is gymnax's (its step is written out with them, the same
    bits as ``env.step(k_env)``); else ``k_env`` itself as the step key (the
    env's own ``step`` gets it whole) and as the unused reset key."""
    if gymnax_step:
        return gymnax_step_keys(k_env)
    return k_env, k_env


def counter_key(key: jax.Array, hi: jax.Array, lo: jax.Array) -> jax.Array:
    """The key of the 64-bit counter ``(hi, lo)`` (uint32 words, broadcast
    against each other) under ``key``: ``fold_in(key, lo)`` where ``hi == 0``.

    Threefry keys (JAX's default) hash both words at once, ``threefry_2x32``
    of ``(hi, lo)`` with the key's two words (what ``fold_in`` computes with
    ``hi = 0``): one hash, whatever ``hi`` is. Keys of another implementation
    fold ``hi`` in after ``lo`` where it is not 0.
    """
    hi, lo = jnp.broadcast_arrays(jnp.asarray(hi, jnp.uint32), jnp.asarray(lo, jnp.uint32))
    impl = jax.random.key_impl(key)
    if str(impl) == threefry_prng_impl.name:
        data = jax.random.key_data(key)
        words = threefry2x32_p.bind(  # the key's words broadcast in the hash
            data[0].reshape((1,) * lo.ndim), data[1].reshape((1,) * lo.ndim), hi, lo
        )
        return jax.random.wrap_key_data(jnp.stack(words, -1), impl=impl)
    fold = jnp.vectorize(jax.random.fold_in, signature="(),()->()")
    first = fold(key, lo)
    return jnp.where(hi == 0, first, fold(first, hi))


def epoch_position(keys: EpochKeys, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(epoch, step)`` of the step ``t`` steps after the batch start."""
    n = keys.step + jnp.asarray(t, jnp.uint32)  # < 2 * EPOCH: no uint32 wrap
    crossed = (n >= EPOCH).astype(jnp.uint32)
    return keys.epoch + crossed, n - crossed * jnp.uint32(EPOCH)


def step_key(keys: EpochKeys, t: jax.Array, stream: int) -> jax.Array:
    """Key of stream ``stream`` (`AGENT`, `ENV`, `RESET` or
    `EPISODIC_RESET`) of step ``t`` of the batch."""
    epoch, i = epoch_position(keys, t)
    return counter_key(keys.key, epoch, jnp.uint32(STREAMS) * i + jnp.uint32(stream))


def batch_step_keys(keys: EpochKeys, T: int, reset_keys: bool) -> tuple[jax.Array, EnvKeys]:
    """One env's keys of every step of a ``T``-step batch, drawn at once (a
    vectorized hash per stream instead of hashes at every step of the scan):
    `counter_key` of the env's run key, with the steps' epochs as the
    high words (a batch that enters the next epoch changes only those). Each
    stream is its own hash, so XLA drops the keys that nothing uses (an env
    whose step ignores its key, as CartPole's and Navix's do).

    Returns:
      ``(k_agent, (k_step, k_reset))``, each ``[T]``: `step_key`'s
      `AGENT`, `ENV` and `RESET` keys of steps ``0 .. T-1``;
      without ``reset_keys`` (nothing resets with them) ``k_reset`` is
      ``k_step``, unused.
    """
    epoch, i = epoch_position(keys, jnp.arange(T, dtype=jnp.uint32))

    def stream(s: int) -> jax.Array:
        return counter_key(keys.key, epoch, jnp.uint32(STREAMS) * i + jnp.uint32(s))

    k_step = stream(ENV)
    return stream(AGENT), (k_step, stream(RESET) if reset_keys else k_step)


def advance_epoch(keys: EpochKeys, T: int) -> tuple[jax.Array, jax.Array]:
    """The env's ``(epoch, step)`` after the ``T`` steps of a batch."""
    return epoch_position(keys, jnp.uint32(T))


def eval_env_keys(key: jax.Array, rank: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The evaluator's ``(k_reset, k_run)`` of the env of rank ``rank``."""
    k_reset, k_run = jax.random.split(jax.random.fold_in(key, rank))
    return k_reset, k_run


def eval_step_keys(k_run: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The evaluator's ``(k_agent, k_env)`` of step ``t`` (int32) of the run."""
    i = 2 * t.astype(jnp.uint32)
    return jax.random.fold_in(k_run, i), jax.random.fold_in(k_run, i + 1)

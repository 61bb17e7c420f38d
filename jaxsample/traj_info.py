"""Per-environment trajectory accumulators and :func:`summarize`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxsample.types import TrajInfo

#: The largest ``TrajInfo.length`` / ``nonzero_rewards``: they saturate there.
COUNT_MAX = 2**31 - 1


def _saturating_increment(count: jax.Array, by_one: jax.Array) -> jax.Array:
    """``count + by_one`` (int32), held at :data:`COUNT_MAX` instead of wrapping."""
    return count + (by_one & (count < COUNT_MAX)).astype(jnp.int32)


@struct.dataclass
class TrajAccumulator:
    """Running statistics of one environment's current trajectory (scalars).

    ``discount_power`` is ``discount**length``, the weight of the next reward in
    ``discounted_return``. The int32 counts ``length`` and ``nonzero_rewards``
    saturate at ``2**31 - 1`` (:data:`COUNT_MAX`) instead of wrapping to
    negative numbers in an episode of more than ``2**31`` steps.
    """

    length: jax.Array
    episode_return: jax.Array
    discounted_return: jax.Array
    discount_power: jax.Array
    nonzero_rewards: jax.Array

    @classmethod
    def zeros(cls) -> TrajAccumulator:
        """The accumulator of a trajectory that has not taken a step yet."""
        return cls(
            length=jnp.zeros((), jnp.int32),
            episode_return=jnp.zeros((), jnp.float32),
            discounted_return=jnp.zeros((), jnp.float32),
            discount_power=jnp.ones((), jnp.float32),
            nonzero_rewards=jnp.zeros((), jnp.int32),
        )

    def add(self, reward: jax.Array, discount: float) -> TrajAccumulator:
        """Account for one more step with float32 scalar ``reward``."""
        return TrajAccumulator(
            length=_saturating_increment(self.length, jnp.ones((), bool)),
            episode_return=self.episode_return + reward,
            discounted_return=self.discounted_return + self.discount_power * reward,
            discount_power=self.discount_power * jnp.float32(discount),
            nonzero_rewards=_saturating_increment(self.nonzero_rewards, reward != 0),
        )

    def info(self, completed: jax.Array) -> TrajInfo:
        """The :class:`TrajInfo` of this step (``completed``: a bool scalar)."""
        return TrajInfo(
            completed=completed,
            length=self.length,
            episode_return=self.episode_return,
            discounted_return=self.discounted_return,
            nonzero_rewards=self.nonzero_rewards,
        )


_FIELDS = ("length", "episode_return", "discounted_return", "nonzero_rewards")


def summarize(traj_infos: TrajInfo) -> dict[str, jax.Array]:
    """Statistics over the completed trajectories of ``traj_infos``; jittable.

    Args:
      traj_infos: a :class:`TrajInfo` with fields of any common shape (``[T, B]``
        from a batch, ``[N]`` from an evaluator); only entries whose
        ``completed`` is True count.

    Returns:
      A dict of float32 scalars: ``n_trajectories`` and, for each of
      ``length``, ``episode_return``, ``discounted_return`` and
      ``nonzero_rewards``, its ``_mean``, ``_std``, ``_min`` and ``_max``. The
      statistics are NaN when no trajectory completed.
    """
    mask = jnp.asarray(traj_infos.completed, bool)
    n = jnp.sum(mask, dtype=jnp.float32)
    nan = jnp.float32(jnp.nan)
    out = {"n_trajectories": n}
    for name in _FIELDS:
        x = jnp.asarray(getattr(traj_infos, name), jnp.float32)
        mean = jnp.sum(jnp.where(mask, x, 0.0)) / jnp.maximum(n, 1.0)
        var = jnp.sum(jnp.where(mask, (x - mean) ** 2, 0.0)) / jnp.maximum(n, 1.0)
        some = n > 0
        out[f"{name}_mean"] = jnp.where(some, mean, nan)
        out[f"{name}_std"] = jnp.where(some, jnp.sqrt(var), nan)
        out[f"{name}_min"] = jnp.where(some, jnp.min(jnp.where(mask, x, jnp.inf)), nan)
        out[f"{name}_max"] = jnp.where(some, jnp.max(jnp.where(mask, x, -jnp.inf)), nan)
    return out

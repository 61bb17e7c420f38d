"""Per-environment trajectory accumulators, user fields and
[`summarize`][jaxsample.traj_info.summarize].

rlpyt's ``TrajInfoCls``/``traj_info_kwargs`` in pure form: a
[`TrajField`][jaxsample.traj_info.TrajField] is a named per-step reducer ``update(value, step) ->
value``
over a [`TrajStep`][jaxsample.traj_info.TrajStep] of one env; the sampler carries its value with the
built-in fields (``traj_fields=`` of [`jaxsample.make_sampler`][jaxsample.sampler.make_sampler]),
reports
it in ``TrajInfo.extra[name]`` and [`summarize`][jaxsample.traj_info.summarize] reports its
statistics.
``traj_done=KEY`` (rlpyt's ``env_info.traj_done``) ends a trajectory only where
``info[KEY]`` says the game is over: see [`trajectory_end`][jaxsample.traj_info.trajectory_end].
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsample.types import PyTree, TrajInfo

#: The largest ``TrajInfo.length`` / ``nonzero_rewards``: they saturate there.
COUNT_MAX = 2**31 - 1


def _saturating_increment(count: jax.Array, by_one: jax.Array) -> jax.Array:
    """``count + by_one`` (int32), held at `COUNT_MAX` instead of wrapping."""
    return count + (by_one & (count < COUNT_MAX)).astype(jnp.int32)


class TrajStep(NamedTuple):
    """One step of one env as a [`TrajField`][jaxsample.traj_info.TrajField] sees it (unbatched: no
    ``T``/``B`` axes): the inputs and outputs of step ``t`` (the batch's fields
    at ``t``, before the ``prev_*`` shift)."""

    observation: PyTree
    action: PyTree
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    env_info: dict[str, Any]
    agent_info: PyTree


@dataclasses.dataclass(frozen=True, eq=False)
class TrajField:
    """A user field of [`TrajInfo`][jaxsample.types.TrajInfo]: a pure per-step reducer.

    Attributes:
      name: the key in ``TrajInfo.extra`` (and the prefix of its
        [`summarize`][jaxsample.traj_info.summarize] entries).
      init: the value at the start of a trajectory (a scalar or array; its
        dtype is the field's: ``0.0`` float32, ``0`` int32, ``False`` bool).
      update: ``update(value, step: TrajStep) -> value``, pure, for one env;
        called on every valid step of the trajectory, the last one included.

    Example: ``TrajField("max_reward", -np.inf, lambda v, s: jnp.maximum(v,
    s.reward))``, ``TrajField("success", False, lambda v, s: v |
    s.env_info["success"])``.
    """

    name: str
    init: Any
    update: Callable[[jax.Array, TrajStep], jax.Array]

    def initial(self) -> jax.Array:
        """The initial value, a strongly typed array (x64 off: 32-bit)."""
        value = np.asarray(self.init)
        return jnp.asarray(value, jax.dtypes.canonicalize_dtype(value.dtype))

    def apply(self, value: jax.Array, step: TrajStep) -> jax.Array:
        """``update(value, step)`` with its shape checked and its dtype kept."""
        out = jnp.asarray(self.update(value, step))
        if out.shape != value.shape:
            raise ValueError(
                f"traj_fields {self.name!r}: update must return the shape of init "
                f"{list(value.shape)}, got {list(out.shape)}"
            )
        return out.astype(value.dtype)


_FIELDS = ("length", "episode_return", "discounted_return", "nonzero_rewards")


def check_traj_fields(fields: Any) -> tuple[TrajField, ...]:
    """``tuple(fields)``, or a clear error unless it is a sequence of
    [`TrajField`][jaxsample.traj_info.TrajField] with distinct identifier names unlike the built-in
    ones."""
    if isinstance(fields, TrajField) or not isinstance(fields, Sequence):
        raise TypeError(f"traj_fields must be a list of TrajField, got {fields!r}")
    names: set[str] = set()
    for n, f in enumerate(fields):
        if not isinstance(f, TrajField):
            raise TypeError(f"traj_fields[{n}] must be a jaxsample.TrajField, got {f!r}")
        if not isinstance(f.name, str) or not f.name.isidentifier():
            raise ValueError(f"traj_fields[{n}].name must be an identifier, got {f.name!r}")
        if f.name in names or f.name in (*_FIELDS, "completed", "n_trajectories"):
            raise ValueError(f"traj_fields[{n}].name {f.name!r} is taken")
        if not callable(f.update):
            raise TypeError(f"traj_fields[{n}].update must be callable, got {f.update!r}")
        if np.asarray(f.init).dtype == object:
            raise TypeError(f"traj_fields[{n}].init must be a number or array, got {f.init!r}")
        names.add(f.name)
    return tuple(fields)


def trajectory_end(
    ended: jax.Array, truncated: jax.Array, env_info: dict[str, Any], traj_done: str | None
) -> jax.Array:
    """Where a trajectory (a TrajInfo) ends: ``ended`` (``terminated |
    truncated``) without ``traj_done``; with it, a truncation (a time limit) or
    a termination whose ``env_info[traj_done]`` is True (rlpyt's
    ``traj_done``: a lost life terminates the episode, not the game). Any
    shape; ``env_info[traj_done]`` must have ``ended``'s."""
    if traj_done is None:
        return ended
    if not isinstance(env_info, dict) or traj_done not in env_info:
        keys = sorted(env_info) if isinstance(env_info, dict) else env_info
        raise ValueError(f"traj_done={traj_done!r} is not a key of the env's info: {keys}")
    flag = jnp.asarray(env_info[traj_done])
    if flag.shape != jnp.shape(ended):
        raise ValueError(
            f"info[{traj_done!r}] (traj_done) must be a scalar per step, got shape "
            f"{list(flag.shape)} for steps {list(jnp.shape(ended))}"
        )
    return ended & (flag.astype(bool) | truncated)


def check_traj_done(traj_done: str | None, env_info: dict[str, Any]) -> None:
    """Raise `trajectory_end`'s clear error now (at build time) for a
    ``traj_done`` that is not a scalar entry of the env's info (``env_info``:
    its spec, one step)."""
    if traj_done is not None:
        flag = jax.ShapeDtypeStruct((), bool)
        jax.eval_shape(lambda *a: trajectory_end(*a, traj_done), flag, flag, env_info)


@struct.dataclass
class TrajAccumulator:
    """Running statistics of one environment's current trajectory (scalars).

    ``discount_power`` is ``discount**length``, the weight of the next reward in
    ``discounted_return``. The int32 counts ``length`` and ``nonzero_rewards``
    saturate at ``2**31 - 1`` (`COUNT_MAX`) instead of wrapping to
    negative numbers in an episode of more than ``2**31`` steps. ``extra`` holds
    the values of the user's ``fields`` (static). ``agent_returns`` (``[N]``)
    is kept for a multi-agent env's reward ``[N]`` (``reward_shape``), where
    the other returns are the team's (the mean over the agents, see
    [`TrajInfo`][jaxsample.types.TrajInfo]); None for a scalar reward.
    """

    length: jax.Array
    episode_return: jax.Array
    discounted_return: jax.Array
    discount_power: jax.Array
    nonzero_rewards: jax.Array
    extra: dict[str, jax.Array] = struct.field(default_factory=dict)
    fields: tuple[TrajField, ...] = struct.field(pytree_node=False, default=())
    agent_returns: jax.Array | None = None

    @classmethod
    def zeros(
        cls, fields: tuple[TrajField, ...] = (), reward_shape: tuple[int, ...] = ()
    ) -> TrajAccumulator:
        """The accumulator of a trajectory that has not taken a step yet, for
        rewards of ``reward_shape`` (``()``, or ``(N,)`` for N agents)."""
        if len(reward_shape) > 1:
            raise ValueError(f"the reward must be a scalar or [N] per agent, got {reward_shape}")
        return cls(
            length=jnp.zeros((), jnp.int32),
            episode_return=jnp.zeros((), jnp.float32),
            discounted_return=jnp.zeros((), jnp.float32),
            discount_power=jnp.ones((), jnp.float32),
            nonzero_rewards=jnp.zeros((), jnp.int32),
            extra={f.name: f.initial() for f in fields},
            fields=tuple(fields),
            agent_returns=jnp.zeros(reward_shape, jnp.float32) if reward_shape else None,
        )

    def reset(self) -> TrajAccumulator:
        """A fresh accumulator with the same fields."""
        shape = () if self.agent_returns is None else self.agent_returns.shape
        return TrajAccumulator.zeros(self.fields, shape)

    def add(
        self, reward: jax.Array, discount: float, step: TrajStep | None = None
    ) -> TrajAccumulator:
        """Account for one more step with float32 ``reward`` (a scalar, or
        ``[N]`` for an accumulator made for N agents) and ``step`` for the
        user's fields (required when there are some)."""
        if self.fields and step is None:
            raise ValueError("an accumulator with traj_fields needs the step")
        shape = () if self.agent_returns is None else self.agent_returns.shape
        if jnp.shape(reward) != shape:
            raise ValueError(f"reward must have shape {shape}, got {jnp.shape(reward)}")
        team = reward if self.agent_returns is None else jnp.mean(reward)
        return TrajAccumulator(
            length=_saturating_increment(self.length, jnp.ones((), bool)),
            episode_return=self.episode_return + team,
            discounted_return=self.discounted_return + self.discount_power * team,
            discount_power=self.discount_power * jnp.float32(discount),
            nonzero_rewards=_saturating_increment(self.nonzero_rewards, jnp.any(reward != 0)),
            extra={f.name: f.apply(self.extra[f.name], step) for f in self.fields},
            fields=self.fields,
            agent_returns=None if self.agent_returns is None else self.agent_returns + reward,
        )

    def info(self, completed: jax.Array) -> TrajInfo:
        """The [`TrajInfo`][jaxsample.types.TrajInfo] of this step (``completed``: a bool
        scalar)."""
        return TrajInfo(
            completed=completed,
            length=self.length,
            episode_return=self.episode_return,
            discounted_return=self.discounted_return,
            nonzero_rewards=self.nonzero_rewards,
            extra=dict(self.extra),
            agent_returns=self.agent_returns,
        )


STATS = ("mean", "std", "min", "max")


def summarize(
    traj_infos: TrajInfo,
    fields: Sequence[str] | None = None,
    stats: Sequence[str] = STATS,
) -> dict[str, jax.Array]:
    """Statistics over the completed trajectories of ``traj_infos``; jittable.

    Args:
      traj_infos: a [`TrajInfo`][jaxsample.types.TrajInfo] with fields of any common shape
        (``[T, B]``
        from a batch, ``[N]`` from an evaluator); only entries whose
        ``completed`` is True count.
      fields: the fields to summarize (default: ``length``,
        ``episode_return``, ``discounted_return``, ``nonzero_rewards`` and
        each user field, ``traj_infos.extra``, that is a scalar per step; a
        field named here must be one).
      stats: which of ``"mean"``, ``"std"``, ``"min"``, ``"max"`` (default
        all; a trainer's per-iteration metrics ask for the means only, which
        keeps its program small).

    Returns:
      A dict of float32 scalars: ``n_trajectories`` and, for each field, its
      ``_mean``, ``_std``, ``_min`` and ``_max`` (those of ``stats``; a bool
      field's mean is a rate). The statistics are NaN when no trajectory
      completed.
    """
    unknown = set(stats) - set(STATS)
    if unknown:
        raise ValueError(f"stats must be among {STATS}, got {sorted(unknown)}")
    mask = jnp.asarray(traj_infos.completed, bool)
    n = jnp.sum(mask, dtype=jnp.float32)
    nan = jnp.float32(jnp.nan)
    out = {"n_trajectories": n}
    extra = getattr(traj_infos, "extra", {})
    available = {**{name: getattr(traj_infos, name) for name in _FIELDS}, **extra}
    asked = fields is not None
    if fields is None:
        fields = list(available)
    missing = [name for name in fields if name not in available]
    if missing:
        raise ValueError(f"fields: no trajectory field {missing}; there are {list(available)}")
    named = [(name, available[name]) for name in fields]
    some = n > 0
    for name, value in named:
        x = jnp.asarray(value).astype(jnp.float32)
        if x.shape != mask.shape:  # a user field that is not a scalar per step
            if asked:
                raise ValueError(
                    f"fields: {name!r} is not a scalar per step (shape {list(x.shape)}, "
                    f"completed {list(mask.shape)}): it has no summary"
                )
            continue
        mean = jnp.sum(jnp.where(mask, x, 0.0)) / jnp.maximum(n, 1.0)
        if "mean" in stats:
            out[f"{name}_mean"] = jnp.where(some, mean, nan)
        if "std" in stats:
            var = jnp.sum(jnp.where(mask, (x - mean) ** 2, 0.0)) / jnp.maximum(n, 1.0)
            out[f"{name}_std"] = jnp.where(some, jnp.sqrt(var), nan)
        if "min" in stats:
            out[f"{name}_min"] = jnp.where(some, jnp.min(jnp.where(mask, x, jnp.inf)), nan)
        if "max" in stats:
            out[f"{name}_max"] = jnp.where(some, jnp.max(jnp.where(mask, x, -jnp.inf)), nan)
    return out

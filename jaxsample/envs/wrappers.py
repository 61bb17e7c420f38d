"""Environment wrappers: [`MaskObservation`][jaxsample.envs.MaskObservation] and
[`mask_velocity`][jaxsample.envs.mask_velocity].

Hiding part of a fully observed environment's observation makes a POMDP: e.g.
CartPole with its two velocities hidden ([`mask_velocity`][jaxsample.envs.mask_velocity]) can only
be
balanced by an agent that infers the velocities from its memory of past
positions and angles (a recurrent agent); a feedforward one cannot.

A wrapper here is a gymnax `Environment`
subclass that delegates ``step_env`` / ``reset_env`` to the inner environment and
masks the observations they return. It inherits gymnax's ``step`` (auto-reset,
``terminated`` / ``truncated`` / ``final_observation`` info) and delegates
``is_truncated`` to the inner environment. The env state and the env params are
the inner environment's, unchanged; the samplers look through a wrapper to the
inner env when they bound the truncations per batch (the wrapper's
``time_limit_env``, read by `jaxsample.core.specs.known_time_limit`).

`inherits_step` is the one test of whether an env keeps gymnax's own
``step`` (the samplers write that step out, or step without its reset).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces
from gymnax.environments.environment import Environment

from jaxsample.types import key_spec

__all__ = ["VELOCITY_INDICES", "MaskObservation", "mask_velocity"]

#: Per gymnax environment name, the indices of the observation vector that are
#: velocities (what [`mask_velocity`][jaxsample.envs.mask_velocity] hides).
VELOCITY_INDICES: dict[str, tuple[int, ...]] = {
    "CartPole-v1": (1, 3),  # [x, x_dot, theta, theta_dot]
    "Pendulum-v1": (2,),  # [cos theta, sin theta, theta_dot]
    "Acrobot-v1": (4, 5),  # [cos1, sin1, cos2, sin2, dtheta1, dtheta2]
    "MountainCar-v0": (1,),  # [position, velocity]
    "MountainCarContinuous-v0": (1,),  # [position, velocity]
}


def inherits_step(env: Any, base: type = Environment) -> bool:
    """Whether ``env`` is a ``base`` (gymnax's ``Environment`` by default)
    whose class keeps ``base.step`` (does not override it): for gymnax, the
    auto-resetting step over ``step_env``, ``is_truncated`` and ``reset_env``."""
    return isinstance(env, base) and type(env).step is base.step


def _overrides(env: Any, name: str) -> bool:
    """Whether ``env``'s class replaces gymnax's ``Environment.<name>``."""
    return getattr(type(env), name, None) is not getattr(Environment, name)


class MaskObservation(Environment):
    """Keep only some entries of the last axis of the inner env's observation.

    Args:
      env: a gymnax ``Environment`` with an array observation ``[..., D]`` whose
        logic is in ``step_env`` / ``reset_env`` (every gymnax built-in; an env
        that overrides ``step`` or ``reset`` themselves is a TypeError, since
        delegating to ``step_env`` would skip its override).
      keep_indices: distinct indices into the observation's last axis, in the
        order the masked observation lists them: the observation becomes
        ``obs[..., keep_indices]``, ``[..., len(keep_indices)]``, same dtype.

    The dynamics, rewards, termination, time limit, env state and env params are
    the inner env's; only what the agent sees changes (``reset`` and ``step``
    observations and ``info["final_observation"]``). ``observation_space`` is the
    inner ``Box`` restricted to the kept entries. ``is_truncated`` is the inner
    env's (gymnax's time limit, or the inner env's own).
    """

    def __init__(self, env: Any, keep_indices: Sequence[int]) -> None:
        super().__init__()
        if not isinstance(env, Environment):
            raise TypeError(
                f"env must be a gymnax Environment, got {type(env).__name__} (a "
                "GymnaxWrapper is not: wrap the underlying Environment)"
            )
        for name in ("step", "reset"):
            if _overrides(env, name):
                raise TypeError(
                    f"env ({type(env).__name__}) overrides {name}(); MaskObservation "
                    "delegates to step_env/reset_env and would skip it"
                )
        obs = jax.eval_shape(env.reset, key_spec(), env.default_params)[0]
        if not isinstance(obs, jax.ShapeDtypeStruct) or len(obs.shape) < 1:
            raise TypeError(
                "MaskObservation needs an array observation with at least one axis, got "
                f"{jax.tree.map(lambda s: (s.shape, s.dtype), obs)}"
            )
        size = obs.shape[-1]
        try:
            keep = tuple(keep_indices)
        except TypeError:
            raise TypeError(
                f"keep_indices must be a sequence of ints, got {keep_indices!r}"
            ) from None
        if not keep:
            raise ValueError("keep_indices must keep at least one entry")
        for i in keep:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"keep_indices must contain ints, got {keep_indices!r}")
            if not 0 <= i < size:
                raise ValueError(
                    f"keep_indices must be in [0, {size}) (the observation's last axis), "
                    f"got {keep_indices!r}"
                )
        if len(set(keep)) != len(keep):
            raise ValueError(f"keep_indices must be distinct, got {keep_indices!r}")
        self.env = env
        self.keep_indices = tuple(int(i) for i in keep)
        self.obs_shape = (*obs.shape[:-1], len(keep))

    # -- masking ---------------------------------------------------------------

    def mask(self, observation: jax.Array) -> jax.Array:
        """``observation[..., keep_indices]``: ``[..., D] -> [..., len(keep_indices)]``."""
        return jnp.take(observation, np.asarray(self.keep_indices), axis=-1)

    def time_limit_env(self) -> Any:
        """The env whose time limit (and truncations) this one has: the inner
        env, whose dynamics it delegates to; None for a subclass (it may
        change them). `jaxsample.core.specs.known_time_limit` reads it."""
        return self.env if type(self) is MaskObservation else None

    # -- gymnax Environment --------------------------------------------------

    @property
    def default_params(self) -> Any:
        return self.env.default_params

    def step_env(
        self, key: jax.Array, state: Any, action: Any, params: Any
    ) -> tuple[jax.Array, Any, jax.Array, jax.Array, dict[Any, Any]]:
        """The inner ``step_env`` with the observation masked."""
        obs, state, reward, terminated, info = self.env.step_env(key, state, action, params)
        return self.mask(obs), state, reward, terminated, info

    def reset_env(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        """The inner ``reset_env`` with the observation masked."""
        obs, state = self.env.reset_env(key, params)
        return self.mask(obs), state

    def observe(self, key: jax.Array, state: Any, action: Any, params: Any) -> jax.Array:
        return self.mask(self.env.observe(key, state, action, params))

    def get_obs(self, state: Any, params: Any = None, key: Any = None) -> jax.Array:
        return self.mask(self.env.get_obs(state, params=params, key=key))

    def is_terminated(self, state: Any, params: Any) -> jax.Array:
        return self.env.is_terminated(state, params)

    def is_truncated(self, state: Any, params: Any) -> jax.Array:
        """The inner env's time limit (gymnax's, or its own)."""
        return self.env.is_truncated(state, params)

    def discount(self, state: Any, params: Any) -> jax.Array:
        return self.env.discount(state, params)

    @property
    def name(self) -> str:
        return f"MaskObservation({self.env.name}, keep={list(self.keep_indices)})"

    @property
    def num_actions(self) -> int:
        return self.env.num_actions

    def action_space(self, params: Any = None) -> Any:
        return self.env.action_space(params)

    def observation_space(self, params: Any) -> spaces.Box:
        """The inner ``Box`` restricted to the kept entries of its last axis."""
        space = self.env.observation_space(params)
        if not isinstance(space, spaces.Box):
            raise TypeError(
                f"MaskObservation needs a Box observation space, got {type(space).__name__}"
            )
        shape = tuple(np.shape(jnp.zeros(space.shape)))
        low = self.mask(jnp.broadcast_to(jnp.asarray(space.low), shape))
        high = self.mask(jnp.broadcast_to(jnp.asarray(space.high), shape))
        return spaces.Box(low, high, self.obs_shape, space.dtype)

    def state_space(self, params: Any) -> Any:
        return self.env.state_space(params)


def mask_velocity(env: Any) -> MaskObservation:
    """Hide the velocities of a classic-control env (a POMDP needing memory).

    CartPole-v1 keeps ``[x, theta]`` (drops ``x_dot``, ``theta_dot``); see
    `VELOCITY_INDICES` for the others. Raises ValueError for an env whose
    name is not there (use [`MaskObservation`][jaxsample.envs.MaskObservation] with explicit
    indices).
    """
    name = getattr(env, "name", None)
    if name not in VELOCITY_INDICES:
        raise ValueError(
            f"mask_velocity knows the velocities of {sorted(VELOCITY_INDICES)}, not of "
            f"{name!r}; use MaskObservation(env, keep_indices)"
        )
    size = jax.eval_shape(env.reset, key_spec(), env.default_params)[0].shape[-1]
    hidden = VELOCITY_INDICES[name]
    return MaskObservation(env, tuple(i for i in range(size) if i not in hidden))

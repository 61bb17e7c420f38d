"""Brax (and MJX-backed Brax) envs as gymnax envs: [`from_brax`][jaxsample.envs.suites.from_brax].

Termination and truncation (reference: ``brax/envs/wrappers/training.py``,
``EpisodeWrapper``): a raw Brax env's ``State.done`` is its natural end
(e.g. an unhealthy pose), the termination; Brax's ``EpisodeWrapper`` adds the
time limit, ending step ``episode_length`` with ``info["truncation"] = 1 -
done``. The adapter takes the raw env (``brax.envs.get_environment``, no
``EpisodeWrapper``/``AutoResetWrapper``/``VmapWrapper``) and does the same:
``terminated = done``, ``truncated = not done and t == episode_length``;
jaxsample resets the env itself (no second, hidden reset).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from jaxsample.envs.suites.base import (
    SuiteEnv,
    SuiteStep,
    box,
    check_episode_length,
    import_quietly,
)
from jaxsample.types import PyTree

__all__ = ["BraxEnv", "from_brax", "make_brax"]


class BraxEnv(SuiteEnv):
    """A raw Brax env (``brax.envs.base.Env``) as a gymnax env.

    Observation ``[observation_size]`` float32; action a ``Box(-1, 1,
    [action_size])`` float32; the env's key is used only by ``reset`` (Brax's
    step is deterministic). ``info`` records Brax's ``State.metrics``.
    """

    suite = "brax"

    def __init__(self, env: Any, episode_length: int = 1000) -> None:
        # looked up on the class: Brax's observation_size is a property that
        # runs reset eagerly (an MJX reset op by op takes ~25 s on a CPU)
        for name in ("reset", "step", "observation_size", "action_size"):
            if not hasattr(type(env), name):
                raise TypeError(f"env must be a Brax env (brax.envs.base.Env), got {env!r}")
        if hasattr(env, "env"):
            raise TypeError(
                "env must be a raw Brax env without wrappers (brax.envs.get_environment); "
                f"got the wrapper {type(env).__name__}: jaxsample does the time limit and "
                "the reset itself"
            )
        super().__init__(check_episode_length(episode_length, required=True), env)
        obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs
        if not isinstance(obs, jax.ShapeDtypeStruct) or obs.ndim != 1:
            raise TypeError(
                f"env must return one flat observation vector, got {obs!r} from its reset"
            )
        self._observation_size = obs.shape[0]

    def suite_reset(self, key: jax.Array, params: Any) -> tuple[PyTree, PyTree]:
        state = self.env.reset(key)
        return state.obs, state

    def suite_step(self, key: jax.Array, inner: PyTree, action: Any, params: Any) -> SuiteStep:
        state = self.env.step(inner, action)
        return SuiteStep(
            observation=state.obs,
            inner=state,
            reward=state.reward,
            terminated=state.done > 0,
            truncated=jnp.zeros((), bool),
            info=dict(state.metrics),
        )

    def suite_time_limit(self, params: Any) -> float | None:
        """A raw Brax env never truncates (its ``done`` is a termination): the
        adapter's ``episode_length`` is the only time limit."""
        return math.inf

    def action_space(self, params: Any = None) -> spaces.Box:
        return box(-1.0, 1.0, (self.env.action_size,), jnp.float32)

    def observation_space(self, params: Any = None) -> spaces.Box:
        return box(-jnp.inf, jnp.inf, (self._observation_size,), jnp.float32)


def from_brax(env: Any, episode_length: int = 1000) -> BraxEnv:
    """Adapt a raw Brax env (``brax.envs.get_environment(name, backend=...)``;
    ``backend="mjx"`` for MuJoCo XLA) with Brax's usual time limit
    ``episode_length`` (1000 steps, as ``brax.envs.create``)."""
    return BraxEnv(env, episode_length)


def make_brax(name: str, *, episode_length: int = 1000, backend: str | None = None) -> BraxEnv:
    """``from_brax(brax.envs.get_environment(name, backend=backend))``
    (Brax's default backend when None)."""
    envs = import_quietly("brax.envs")
    kwargs = {} if backend is None else {"backend": backend}
    return from_brax(envs.get_environment(name, **kwargs), episode_length)

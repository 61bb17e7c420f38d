"""Navix envs as gymnax envs: [`from_navix`][jaxsample.envs.suites.from_navix].

Termination and truncation (reference: ``navix/environments/environment.py``,
``Timestep.step_type``): ``0`` a transition, ``1`` a truncation (``t >=
max_steps``), ``2`` a termination (goal reached, lava, ...). Navix's public
``step`` auto-resets when given a done timestep; the adapter calls its
``_step`` (the step without that reset), so jaxsample's reset is the only one.
The suite state is Navix's ``Timestep``; the step's randomness is Navix's own
key in its state (seeded by ``reset``'s key).

The state is carried without Navix's rendering cache (``state.cache``, the
background tiles of the episode's grid, ~5 KB per env): the step rebuilds it
from the grid (``RenderingCache.init``, what Navix's reset computes), so XLA
drops it where the observation does not render (symbolic observations), and
an auto-reset does not select a fresh cache against the carried one for every
env at every step.
"""

from __future__ import annotations

from typing import Any

import jax
from gymnax.environments import spaces

from jaxsample.envs.suites.base import SuiteEnv, SuiteStep, box
from jaxsample.types import PyTree

__all__ = ["NavixEnv", "from_navix", "make_navix"]

_TRUNCATION, _TERMINATION = 1, 2  # navix.environments.environment.StepType


class NavixEnv(SuiteEnv):
    """A Navix ``Environment`` as a gymnax env (``Discrete`` actions, the
    env's observation array)."""

    suite = "navix"

    def __init__(self, env: Any) -> None:
        if not (hasattr(env, "_step") and hasattr(env, "reset") and hasattr(env, "action_set")):
            raise TypeError(f"env must be a Navix Environment, got {env!r}")
        super().__init__(None, env)

    def suite_reset(self, key: jax.Array, params: Any) -> tuple[PyTree, PyTree]:
        ts = self.env.reset(key)
        return ts.observation, _without_cache(ts)

    def suite_step(self, key: jax.Array, inner: PyTree, action: Any, params: Any) -> SuiteStep:
        from navix.rendering.cache import RenderingCache

        cache = RenderingCache.init(inner.state.grid)
        ts = self.env._step(inner.replace(state=inner.state.replace(cache=cache)), action)
        return SuiteStep(
            observation=ts.observation,
            inner=_without_cache(ts),
            reward=ts.reward,
            terminated=ts.step_type == _TERMINATION,
            truncated=ts.step_type == _TRUNCATION,
            info={},
        )

    def suite_time_limit(self, params: Any) -> float | None:
        """Navix's ``Environment.termination`` truncates exactly where the
        timestep's ``t`` (0 after ``reset``, +1 per ``_step``) reaches
        ``max_steps``; known for envs that keep Navix's own ``_step`` and
        ``termination``."""
        from navix.environments.environment import Environment

        cls = type(self.env)
        if cls._step is not Environment._step or cls.termination is not Environment.termination:
            return None
        return int(self.env.max_steps)

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(len(self.env.action_set))

    def observation_space(self, params: Any = None) -> spaces.Box:
        s = self.env.observation_space
        return box(s.minimum, s.maximum, s.shape, s.dtype)


def _without_cache(ts: Any) -> Any:
    """A Navix ``Timestep`` without its state's rendering cache (rebuilt by the step)."""
    return ts.replace(state=ts.state.replace(cache=None))


def from_navix(env: Any) -> NavixEnv:
    """Adapt a Navix env (its ``max_steps`` is the time limit)."""
    return NavixEnv(env)


def make_navix(name: str, *, max_steps: int = 100, **kwargs: Any) -> NavixEnv:
    """``from_navix(navix.make(name, max_steps=max_steps, **kwargs))``, e.g.
    ``"Navix-Empty-5x5-v0"``."""
    import navix

    return from_navix(navix.make(name, max_steps=max_steps, **kwargs))

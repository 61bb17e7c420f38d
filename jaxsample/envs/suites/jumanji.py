"""Jumanji envs as gymnax envs: [`from_jumanji`][jaxsample.envs.suites.from_jumanji].

Termination and truncation (reference: ``jumanji/types.py``, dm_env's
convention): a ``TimeStep`` whose ``step_type`` is ``LAST`` ends the episode;
``discount == 0`` there is a termination (``termination(...)``), ``discount
!= 0`` a truncation (``truncation(...)``, e.g. Snake's ``time_limit``). The
adapter calls the env's own ``reset``/``step`` (``jumanji.make`` returns the
env without ``AutoResetWrapper``); observations stay the suite's pytrees
(e.g. Snake's ``Observation(grid, step_count, action_mask)``); ``extras`` are
recorded in ``env_info``.

Legal actions: a Jumanji env whose observation has a bool ``action_mask``
``[num_actions]`` field for its ``Discrete`` action (Snake, Maze, Knapsack,
TSP, ...) is adapted as a `MaskedJumanjiEnv`, whose
`action_mask` is that field (kept next to the suite's
state, since some envs have it only in the observation); jaxsample's agents
then act only on legal actions.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from jaxsample.envs.suites.base import SuiteEnv, SuiteState, SuiteStep, box, dm_env_step
from jaxsample.types import PyTree

__all__ = ["JumanjiEnv", "MaskedJumanjiEnv", "from_jumanji", "make_jumanji", "space_of_spec"]


def space_of_spec(spec: Any) -> Any:
    """A gymnax space from a Jumanji spec: ``DiscreteArray`` -> ``Discrete``,
    ``BoundedArray``/``Array`` -> ``Box``, a structured spec -> ``Dict`` of its
    fields (``MultiDiscreteArray`` has no gymnax space: TypeError)."""
    from jumanji import specs

    if isinstance(spec, specs.MultiDiscreteArray):
        raise TypeError(f"a MultiDiscreteArray spec has no gymnax space: {spec}")
    if isinstance(spec, specs.DiscreteArray):
        if spec.shape != ():
            raise TypeError(f"a DiscreteArray action must be a scalar, got {spec}")
        return spaces.Discrete(int(spec.num_values))
    if isinstance(spec, specs.BoundedArray):
        return box(spec.minimum, spec.maximum, spec.shape, spec.dtype)
    if isinstance(spec, specs.Array):
        return box(-jnp.inf, jnp.inf, spec.shape, spec.dtype)
    fields = {k: v for k, v in vars(spec).items() if isinstance(v, specs.Spec)}
    return spaces.Dict({k: space_of_spec(v) for k, v in fields.items()})


class JumanjiEnv(SuiteEnv):
    """A Jumanji ``Environment`` (no wrappers) as a gymnax env. The key is used
    only by ``reset`` (Jumanji's step is keyed by its own state)."""

    suite = "jumanji"

    def __init__(self, env: Any, episode_length: int | None = None) -> None:
        for name in ("reset", "step", "action_spec", "observation_spec"):
            if not hasattr(env, name):
                raise TypeError(f"env must be a Jumanji Environment, got {env!r}")
        if type(env).__name__.endswith("Wrapper"):
            raise TypeError(
                f"env must be a Jumanji env without wrappers, got {type(env).__name__}: "
                "jaxsample resets the env itself"
            )
        super().__init__(episode_length, env)
        self._action_space = space_of_spec(env.action_spec)

    def suite_reset(self, key: jax.Array, params: Any) -> tuple[PyTree, PyTree]:
        state, timestep = self.env.reset(key)
        return timestep.observation, state

    def suite_step(self, key: jax.Array, inner: PyTree, action: Any, params: Any) -> SuiteStep:
        state, ts = self.env.step(inner, action)
        return dm_env_step(ts, state, dict(ts.extras))

    def suite_time_limit(self, params: Any) -> float | None:
        """Known for Snake: its ``step`` ends an episode only with
        ``termination`` (its ``time_limit`` too), never ``truncation``
        (``jumanji/environments/routing/snake/env.py``). Unknown for the others."""
        from jumanji.environments.routing.snake import Snake

        return math.inf if type(self.env) is Snake else None

    def action_space(self, params: Any = None) -> Any:
        return self._action_space

    def observation_space(self, params: Any = None) -> Any:
        return space_of_spec(self.env.observation_spec)


class MaskedJumanjiEnv(JumanjiEnv):
    """A [`JumanjiEnv`][jaxsample.envs.suites.JumanjiEnv] whose observation has an ``action_mask``:
    the
    suite state is ``(state, action_mask)``, the Jumanji state and the mask of
    the observation that goes with it."""

    def suite_reset(self, key: jax.Array, params: Any) -> tuple[PyTree, PyTree]:
        obs, state = super().suite_reset(key, params)
        return obs, (state, obs.action_mask)

    def suite_step(self, key: jax.Array, inner: PyTree, action: Any, params: Any) -> SuiteStep:
        out = super().suite_step(key, inner[0], action, params)
        return out._replace(inner=(out.inner, out.observation.action_mask))

    def suite_time_limit(self, params: Any) -> float | None:
        """[`JumanjiEnv.suite_time_limit`][jaxsample.envs.suites.JumanjiEnv.suite_time_limit] (the
        same step)."""
        return super().suite_time_limit(params)

    def action_mask(self, state: SuiteState, params: Any) -> jax.Array:
        """bool ``[num_actions]``: the observation's ``action_mask``."""
        return jnp.asarray(state.inner[1], bool)


def has_action_mask(env: Any) -> bool:
    """Whether a Jumanji env's observation has a bool ``action_mask`` of
    shape ``[n]`` for its ``Discrete(n)`` action."""
    from jumanji import specs

    action = getattr(env, "action_spec", None)
    mask = getattr(getattr(env, "observation_spec", None), "action_mask", None)
    return (
        isinstance(action, specs.DiscreteArray)
        and isinstance(mask, specs.Array)
        and mask.shape == (int(action.num_values),)
        and jnp.dtype(mask.dtype) == jnp.bool_
    )


def from_jumanji(env: Any, episode_length: int | None = None) -> JumanjiEnv:
    """Adapt a Jumanji env; ``episode_length`` adds a time limit to the
    env's own (None: only the env's own). A `MaskedJumanjiEnv` where
    the observation has an action mask (`has_action_mask`)."""
    cls = MaskedJumanjiEnv if has_action_mask(env) else JumanjiEnv
    return cls(env, episode_length)


def make_jumanji(name: str, *, episode_length: int | None = None, **kwargs: Any) -> JumanjiEnv:
    """``from_jumanji(jumanji.make(name, **kwargs))``, e.g. ``"Snake-v1"``."""
    import jumanji

    return from_jumanji(jumanji.make(name, **kwargs), episode_length)

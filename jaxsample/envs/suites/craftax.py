"""Craftax (Symbolic and Classic) envs as gymnax envs:
[`from_craftax`][jaxsample.envs.suites.from_craftax].

Craftax 1.x envs use the *old* gymnax step signature, ``step(key, state,
action, params) -> (obs, state, reward, done, info)``, with one ``done``
(reference: ``craftax/craftax/game_logic.py::is_game_over``): ``done_steps |
is_dead | defeated_boss`` where ``done_steps = state.timestep >=
params.max_timesteps`` is the time limit. The adapter takes the
``auto_reset=False`` env and splits that ``done``: ``terminated`` is the
env's own ``is_terminal`` with the time limit lifted (death, or the boss
beaten), ``truncated`` is ``state.timestep >= params.max_timesteps`` without
termination. The env params are Craftax's own (``max_timesteps`` is the
time limit, 10000 by default).
"""

from __future__ import annotations

from typing import Any

import jax
from gymnax.environments import spaces

from jaxsample.envs.suites.base import SuiteEnv, SuiteStep, box
from jaxsample.types import PyTree

__all__ = ["CraftaxEnv", "from_craftax", "make_craftax"]

_NO_LIMIT = 2**31 - 1


class CraftaxEnv(SuiteEnv):
    """A Craftax ``EnvironmentNoAutoReset`` as a gymnax env; its params are the
    Craftax env's params. ``info`` records Craftax's achievement info."""

    def __init__(self, env: Any) -> None:
        if not (hasattr(env, "step_env") and hasattr(env, "reset_env")):
            raise TypeError(f"env must be a Craftax env, got {env!r}")
        if not type(env).__name__.endswith("NoAutoReset"):
            raise TypeError(
                f"env must be a Craftax env without auto-reset (auto_reset=False), got "
                f"{type(env).__name__}: jaxsample resets the env itself"
            )
        super().__init__(None, env)

    @property
    def default_params(self) -> Any:
        return self.env.default_params

    def suite_reset(self, key: jax.Array, params: Any) -> tuple[PyTree, PyTree]:
        return self.env.reset_env(key, params)

    def suite_step(self, key: jax.Array, inner: PyTree, action: Any, params: Any) -> SuiteStep:
        obs, state, reward, _done, info = self.env.step_env(key, inner, action, params)
        terminated = self.env.is_terminal(state, params.replace(max_timesteps=_NO_LIMIT))
        truncated = state.timestep >= params.max_timesteps
        info = {k: v for k, v in info.items() if k != "discount"}
        return SuiteStep(obs, state, reward, terminated, truncated, info)

    def suite_time_limit(self, params: Any) -> float | None:
        """The adapter truncates where Craftax's ``state.timestep`` (0 after
        ``reset``, +1 per ``step_env``) reaches ``params.max_timesteps``."""
        try:
            return int(params.max_timesteps)
        except (TypeError, jax.errors.ConcretizationTypeError):  # traced params
            return None

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(int(self.env.action_space(params).n))

    def observation_space(self, params: Any = None) -> spaces.Box:
        s = self.env.observation_space(self.default_params if params is None else params)
        return box(s.low, s.high, s.shape, s.dtype)

    @property
    def name(self) -> str:
        return f"craftax/{self.env.name}"


def from_craftax(env: Any) -> CraftaxEnv:
    """Adapt a Craftax env made with ``auto_reset=False``."""
    return CraftaxEnv(env)


def make_craftax(name: str) -> CraftaxEnv:
    """``from_craftax(make_craftax_env_from_name(name, auto_reset=False))``,
    e.g. ``"Craftax-Symbolic-v1"``, ``"Craftax-Classic-Symbolic-v1"``."""
    from craftax.craftax_env import make_craftax_env_from_name

    return from_craftax(make_craftax_env_from_name(name, auto_reset=False))

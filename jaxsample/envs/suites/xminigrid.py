"""XLand-MiniGrid envs as gymnax envs: [`from_xminigrid`][jaxsample.envs.suites.from_xminigrid].

Termination and truncation (reference: ``xminigrid/environment.py``,
``Environment.step``, dm_env's convention): ``step_type == LAST`` ends the
episode; ``discount == 0`` there is the goal reached (termination),
``discount == 1`` the time limit ``params.max_steps`` (truncation). The
adapter calls the env's own ``reset``/``step`` (no ``GymAutoResetWrapper``).
The env params are XLand-MiniGrid's own (``xminigrid.make`` returns them);
``XLand-MiniGrid-*`` envs need a ruleset in them
(``params.replace(ruleset=...)``), the ``MiniGrid-*`` envs do not.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from jaxsample.envs.suites.base import SuiteEnv, SuiteStep, box, dm_env_step
from jaxsample.envs.wrappers import inherits_step
from jaxsample.types import PyTree

__all__ = ["XMiniGridEnv", "from_xminigrid", "make_xminigrid"]


class XMiniGridEnv(SuiteEnv):
    """An XLand-MiniGrid ``Environment`` as a gymnax env; its params are the
    env's ``EnvParams``."""

    suite = "xminigrid"

    def __init__(self, env: Any, env_params: Any) -> None:
        if not (hasattr(env, "reset") and hasattr(env, "step") and hasattr(env, "num_actions")):
            raise TypeError(f"env must be an XLand-MiniGrid Environment, got {env!r}")
        if hasattr(env, "_env"):
            raise TypeError(
                f"env must be an XLand-MiniGrid env without wrappers, got {type(env).__name__}"
            )
        super().__init__(None, env)
        self._default_params = env_params

    @property
    def default_params(self) -> Any:
        return self._default_params

    def suite_reset(self, key: jax.Array, params: Any) -> tuple[PyTree, PyTree]:
        ts = self.env.reset(params, key)
        return ts.observation, ts

    def suite_step(self, key: jax.Array, inner: PyTree, action: Any, params: Any) -> SuiteStep:
        ts = self.env.step(params, inner, action)
        return dm_env_step(ts, ts, {})

    def suite_time_limit(self, params: Any) -> float | None:
        """XLand-MiniGrid's ``Environment.step`` truncates exactly where the
        state's ``step_num`` (0 after ``reset``, +1 per step) equals
        ``params.max_steps``; known for envs that keep that ``step``."""
        from xminigrid.environment import Environment

        if not inherits_step(self.env, Environment):
            return None
        try:
            return int((params or self._default_params).max_steps)
        except (TypeError, jax.errors.ConcretizationTypeError):  # traced params
            return None

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(int(self.env.num_actions(params or self._default_params)))

    def observation_space(self, params: Any = None) -> spaces.Box:
        shape = self.env.observation_shape(params or self._default_params)
        return box(0, 255, shape, jnp.uint8)


def from_xminigrid(env: Any, env_params: Any) -> XMiniGridEnv:
    """Adapt an XLand-MiniGrid env; ``env_params`` become its default params."""
    return XMiniGridEnv(env, env_params)


def make_xminigrid(name: str, **kwargs: Any) -> XMiniGridEnv:
    """``from_xminigrid(*xminigrid.make(name, **kwargs))``, e.g.
    ``"MiniGrid-Empty-5x5"``."""
    import xminigrid

    return from_xminigrid(*xminigrid.make(name, **kwargs))

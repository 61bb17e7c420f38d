"""The one adapter every JAX suite goes through: [`SuiteEnv`][jaxsample.envs.suites.SuiteEnv].

A suite env (Brax, Jumanji, Craftax, Navix, XLand-MiniGrid) has its own
``reset``/``step`` API, its own way of saying "terminated" and "truncated", and
usually its own auto-reset wrapper. [`SuiteEnv`][jaxsample.envs.suites.SuiteEnv] is a gymnax (>=
1.0)
``Environment`` whose ``reset_env``/``step_env`` call the suite's *own* reset
and step with no auto-reset wrapper; gymnax's inherited ``step`` does the one
auto-reset (its ``info["final_observation"]`` is the true next observation), so
every part of jaxsample takes the env as it takes a gymnax one
(see ``docs/design.md``, "Suites").

A subclass implements [`SuiteEnv.suite_reset`][jaxsample.envs.suites.SuiteEnv.suite_reset] and
[`SuiteEnv.suite_step`][jaxsample.envs.suites.SuiteEnv.suite_step] for one env (no batch axis) and
the two spaces.
The adapter counts the steps of the episode (``SuiteState.time``) and, when
given an ``episode_length``, truncates there; the suite's own truncation
(e.g. a built-in time limit) is kept too. Where the suite's own truncation
rule is known for sure
([`SuiteEnv.suite_time_limit`][jaxsample.envs.suites.SuiteEnv.suite_time_limit], from the suite's
source), the adapter's time limit is known
([`SuiteEnv.known_time_limit`][jaxsample.envs.suites.SuiteEnv.known_time_limit])
and the sampler's sparse final-observation store holds ``ceil(T / limit)``
slots per env instead of ``T``. ``terminated`` and ``truncated`` are
exclusive, as in Brax's ``EpisodeWrapper`` and dm_env's ``discount``: a step
that terminates is not truncated.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces
from gymnax.environments.environment import Environment

from jaxsample.envs.wrappers import inherits_step
from jaxsample.types import PyTree

__all__ = [
    "NoParams",
    "SuiteEnv",
    "SuiteState",
    "SuiteStep",
    "box",
    "check_episode_length",
    "dm_env_ends",
    "dm_env_step",
]

_LAST = 2  # dm_env's StepType.LAST (Jumanji's and XLand-MiniGrid's too)


@struct.dataclass
class NoParams:
    """The env params of a suite whose env holds its own configuration."""


@struct.dataclass
class SuiteState:
    """The adapter's state of one env.

    Attributes:
      inner: the suite's own state (a Brax ``State``, a Jumanji state, a Navix
        or XLand-MiniGrid ``TimeStep``, a Craftax ``EnvState``).
      time: int32 scalar, steps taken in this episode.
      truncated: bool scalar, whether the last step truncated the episode.
    """

    inner: PyTree
    time: jax.Array
    truncated: jax.Array


class SuiteStep(NamedTuple):
    """What [`SuiteEnv.suite_step`][jaxsample.envs.suites.SuiteEnv.suite_step] returns for one env:
    the next
    observation and suite state, the scalar reward, whether the suite
    terminated the episode (a true end: no bootstrap) and whether the suite
    itself truncated it (a time limit of its own), and the info recorded in
    ``samples.env.env_info`` (a dict of fixed-shape arrays, may be empty)."""

    observation: PyTree
    inner: PyTree
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    info: dict[str, Any]


def dm_env_ends(last: jax.Array, discount: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(terminated, truncated)`` of a dm_env-style ``TimeStep`` (Jumanji,
    XLand-MiniGrid): a ``LAST`` step with ``discount == 0`` terminates, one with
    ``discount != 0`` truncates."""
    return last & (discount == 0), last & (discount != 0)


def dm_env_step(ts: Any, inner: PyTree, info: dict[str, Any]) -> SuiteStep:
    """The [`SuiteStep`][jaxsample.envs.suites.SuiteStep] of a dm_env-style ``TimeStep`` ``ts`` (its
    ``observation``, ``reward``, and the ends by `dm_env_ends`), with the
    suite state ``inner`` and ``info``."""
    terminated, truncated = dm_env_ends(ts.step_type == _LAST, ts.discount)
    return SuiteStep(ts.observation, inner, ts.reward, terminated, truncated, info)


def check_episode_length(episode_length: Any, *, required: bool = False) -> int | None:
    """``episode_length`` as an int >= 1 (None allowed unless ``required``);
    a clear error otherwise."""
    if episode_length is None and not required:
        return None
    if isinstance(episode_length, bool) or not isinstance(episode_length, int | np.integer):
        raise TypeError(f"episode_length must be an int, got {episode_length!r}")
    if episode_length < 1:
        raise ValueError(f"episode_length must be >= 1, got {episode_length}")
    return int(episode_length)


def box(low: Any, high: Any, shape: tuple[int, ...], dtype: Any) -> spaces.Box:
    """A gymnax ``Box`` (bounds as arrays or scalars)."""
    return spaces.Box(jnp.asarray(low), jnp.asarray(high), tuple(shape), jnp.dtype(dtype))


class SuiteEnv(Environment):
    """A suite's env as a gymnax (>= 1.0) ``Environment`` (abstract).

    Args:
      episode_length: the time limit the adapter adds (int >= 1): step
        ``episode_length`` of an episode is truncated unless it terminated.
        None: only the suite's own truncation.
      env: the suite's own env, kept as ``self.env`` (None for an adapter
        that holds none).

    ``step(key, state, action, params)`` returns ``(obs, state, reward,
    terminated, truncated, info)`` with ``info["final_observation"]`` and
    resets a done env with the second half of ``split(key)``, as gymnax does.
    """

    #: the prefix of [`name`][jaxsample.envs.suites.SuiteEnv.name] (``"brax"``, ...); None: the
    #: class name alone
    suite: ClassVar[str | None] = None

    def __init__(self, episode_length: int | None = None, env: Any = None) -> None:
        super().__init__()
        self.episode_length = check_episode_length(episode_length)
        self.env = env

    # --- what a suite implements -------------------------------------------
    def suite_reset(self, key: jax.Array, params: Any) -> tuple[PyTree, PyTree]:
        """``(observation, inner_state)`` of a new episode, from the suite's reset."""
        raise NotImplementedError

    def suite_step(self, key: jax.Array, inner: PyTree, action: Any, params: Any) -> SuiteStep:
        """One step of the suite's own (non-auto-resetting) step."""
        raise NotImplementedError

    def suite_time_limit(self, params: Any) -> float | None:
        """The suite's own truncation rule where it is known for sure (read
        from the suite's source, for the env classes the adapter knows):
        ``math.inf`` if [`suite_step`][jaxsample.envs.suites.SuiteEnv.suite_step] never truncates,
        ``L`` if it
        truncates only where the episode's step count (0 after a reset, +1
        per step) reaches ``L``; None (the default) if not known."""
        return None

    def known_time_limit(self, params: Any) -> float | None:
        """The time limit of every truncation, where known for sure: the
        smaller of ``episode_length`` and
        [`suite_time_limit`][jaxsample.envs.suites.SuiteEnv.suite_time_limit]
        (``math.inf``: the env never truncates); None if the suite's rule is
        unknown or a subclass changed the step without saying its own rule.
        `jaxsample.core.specs.known_time_limit` reads it."""
        cls = type(self)
        same_step = (
            inherits_step(self)
            and cls.step_env is SuiteEnv.step_env
            and cls.is_truncated is SuiteEnv.is_truncated
        )
        if not same_step or _defining(cls, "suite_step") is not _defining(cls, "suite_time_limit"):
            return None
        own = self.suite_time_limit(params)
        if own is None:
            return None
        return min(own, math.inf if self.episode_length is None else self.episode_length)

    # --- gymnax's Environment ----------------------------------------------
    @property
    def default_params(self) -> Any:
        return NoParams()

    def reset_env(self, key: jax.Array, params: Any) -> tuple[PyTree, SuiteState]:
        obs, inner = self.suite_reset(key, params)
        return obs, SuiteState(inner, jnp.zeros((), jnp.int32), jnp.zeros((), bool))

    def step_env(
        self, key: jax.Array, state: SuiteState, action: Any, params: Any
    ) -> tuple[PyTree, SuiteState, jax.Array, jax.Array, dict[str, Any]]:
        out = self.suite_step(key, state.inner, action, params)
        time = state.time + 1
        terminated = jnp.asarray(out.terminated, bool)
        truncated = jnp.asarray(out.truncated, bool)
        if self.episode_length is not None:
            truncated = truncated | (time >= self.episode_length)
        truncated = truncated & ~terminated
        reward = jnp.asarray(out.reward, jnp.float32)
        return out.observation, SuiteState(out.inner, time, truncated), reward, terminated, out.info

    def is_truncated(self, state: SuiteState, params: Any) -> jax.Array:
        return state.truncated

    def is_terminated(self, state: SuiteState, params: Any) -> jax.Array:
        raise NotImplementedError("SuiteEnv's termination comes from the suite's step")

    @property
    def name(self) -> str:
        """``"<suite>/<the suite env's class name>"``; the class name without a
        `suite`."""
        if self.suite is None:
            return type(self).__name__
        return f"{self.suite}/{type(self.env).__name__}"


def _defining(cls: type, name: str) -> type:
    """The class of ``cls``'s MRO that defines attribute ``name``."""
    return next(c for c in cls.__mro__ if name in c.__dict__)


#: lines jaxmarl 0.2.0 prints whenever it is imported without its optional
#: git-submodule envs
_NOISE = frozenset(
    ("Importing submoduled environments...", "Submoduled environments not found. Skipping import.")
)


def import_quietly(name: str) -> Any:
    """``importlib.import_module(name)`` without the lines some suites print
    while importing that a user cannot act on (MuJoCo's ``Failed to import
    warp: No module named 'warp'``, printed by Brax's import of MJX when the
    optional NVIDIA Warp is not installed; jaxmarl's notes on its optional
    submodule envs); anything else printed is kept. An import that sets
    ``sys.stdout``/``sys.stderr`` back to ``sys.__stdout__``/``__stderr__``
    (jaxmarl 0.2.0's MABrax module does) writes to the capture too, and the
    streams are restored afterwards."""
    import contextlib
    import importlib
    import io
    import sys

    if name in sys.modules:
        return sys.modules[name]
    printed = io.StringIO()
    saved = sys.stdout, sys.stderr, sys.__stdout__
    try:
        with contextlib.redirect_stdout(printed):
            sys.__stdout__ = printed
            module = importlib.import_module(name)
    finally:
        sys.stdout, sys.stderr, sys.__stdout__ = saved
    for line in printed.getvalue().splitlines():
        if not ((line.startswith("Failed to import ") and "warp" in line) or line in _NOISE):
            print(line)
    return module

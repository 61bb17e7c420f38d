"""JaxMARL multi-agent envs as gymnax envs with an agent axis:
[`from_jaxmarl`][jaxsample.envs.suites.from_jaxmarl].

A JaxMARL env (``MultiAgentEnv``) keys observations, actions, rewards and
dones by agent name. The adapter stacks them on a leading agent axis, in the
order of ``env.agents`` (`JaxMARLEnv.agents`): per env, the observation
is ``[N, *obs]``, the action ``[N]`` (discrete) or ``[N, *act]``
([`PerAgent`][jaxsample.envs.per_agent.PerAgent] is the action space), the reward
``[N]`` float32, one per agent. The episode ends for the whole env at
JaxMARL's ``dones["__all__"]`` (the per-agent dones, e.g. SMAX's dead units,
are not episode ends); the adapter calls the env's own ``step_env`` (the step
without JaxMARL's auto-reset), so jaxsample's reset is the only one.
Observation keys that are not agents (SMAX's ``"world_state"``) are left out;
``info`` entries keyed by agent (Overcooked's ``shaped_reward``) are stacked
to ``[N]``.

Parameter sharing needs one observation space and one action space for every
agent: an env whose agents differ (MPE ``simple_tag``'s adversaries and good
agents, SMAX with unequal teams) is refused with a ``TypeError`` naming the
agents of each space.

Termination and truncation (JaxMARL has one ``done``; the rules below are read
from jaxmarl 0.2.0's source,
[`JaxMARLEnv.suite_time_limit`][jaxsample.envs.suites.JaxMARLEnv.suite_time_limit]):

* MPE: the only end is the time limit, ``state.step >= max_steps`` tested
  before the step count is raised: every end is a truncation, at the
  ``max_steps + 1``-th step;
* SMAX (and the heuristic-enemy SMAX): a team wiped out terminates; the time
  limit (``state.step >= max_steps``, before the count is raised) truncates;
* Overcooked: the only end is ``step >= max_steps``: a truncation;
* Hanabi: every end (the game over) is a termination;
* any other env: every end is a termination (what JaxMARL's own baselines
  assume); ``episode_length`` adds a time limit of the adapter's own.

An env with legal-action masks (``get_avail_actions``, e.g. SMAX; Hanabi's
``get_legal_moves``) is a [`MaskedJaxMARLEnv`][jaxsample.envs.suites.MaskedJaxMARLEnv], whose
[`action_mask`][jaxsample.envs.suites.MaskedJaxMARLEnv.action_mask] is ``[N, num_actions]`` bool.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from jaxsample.envs.per_agent import PerAgent
from jaxsample.envs.suites.base import SuiteEnv, SuiteState, SuiteStep, box
from jaxsample.types import PyTree, key_spec

__all__ = ["JaxMARLEnv", "MaskedJaxMARLEnv", "from_jaxmarl", "make_jaxmarl", "space_of"]


def space_of(space: Any) -> Any:
    """A gymnax space from a JaxMARL one: ``Discrete`` -> ``Discrete`` (int32;
    the adapter casts actions back to the env's dtype), ``Box`` -> ``Box``;
    anything else a ``TypeError``."""
    from jaxmarl.environments import spaces as marl

    if isinstance(space, marl.Discrete):
        return spaces.Discrete(int(space.n))
    if isinstance(space, marl.Box):
        shape = tuple(int(s) for s in np.atleast_1d(space.shape))
        return box(space.low, space.high, shape, space.dtype)
    raise TypeError(f"no gymnax space for the JaxMARL space {type(space).__name__}: {space!r}")


def _describe(space: Any) -> str:
    if isinstance(space, spaces.Discrete):
        return f"Discrete({space.n})"
    return f"Box(shape={tuple(space.shape)}, dtype={jnp.dtype(space.dtype).name})"


def _same_box_bounds(a: Any, b: Any) -> bool:
    return all(
        np.array_equal(np.broadcast_to(x, a.shape), np.broadcast_to(y, b.shape))
        for x, y in ((a.low, b.low), (a.high, b.high))
    )


def _check_shared(env: Any, kind: str, by_agent: dict[str, Any], bounds: bool) -> None:
    """A ``TypeError`` unless every agent has the same space (shape, dtype,
    number of actions; with ``bounds`` a ``Box``'s bounds too)."""
    groups: dict[str, list[str]] = {}
    for agent, space in by_agent.items():
        groups.setdefault(_describe(space), []).append(agent)
    first = next(iter(by_agent.values()))
    odd = [
        a
        for a, s in by_agent.items()
        if bounds and isinstance(s, spaces.Box) and not _same_box_bounds(first, s)
    ]
    if len(groups) > 1 or odd:
        described = "; ".join(f"{k}: {v}" for k, v in groups.items())
        if odd:
            described += f"; bounds unlike {next(iter(by_agent))}'s: {odd}"
        raise TypeError(
            f"jaxmarl env {type(env).__name__}: the agents' {kind} spaces differ ({described}); "
            "jaxsample shares one agent over a team whose agents have one observation space "
            "and one action space (configure the env so they match, e.g. equal SMAX teams)"
        )


def _observation_space(env: Any, agent: str, spec: Any) -> spaces.Box:
    """Agent ``agent``'s observation space: ``spec``'s shape and dtype (the
    reset's observation), the declared space's bounds where they broadcast to
    it, else unbounded."""
    if not isinstance(spec, jax.ShapeDtypeStruct):
        raise TypeError(
            f"jaxmarl env {type(env).__name__}: agent {agent!r}'s observation must be one "
            f"array, got {spec!r}"
        )
    declared = env.observation_space(agent)
    try:
        low = jnp.broadcast_to(jnp.asarray(declared.low, jnp.float32), spec.shape)
        high = jnp.broadcast_to(jnp.asarray(declared.high, jnp.float32), spec.shape)
    except (AttributeError, TypeError, ValueError):
        low = jnp.full(spec.shape, -jnp.inf)
        high = jnp.full(spec.shape, jnp.inf)
    return box(low, high, spec.shape, spec.dtype)


def _stack(by_agent: dict[str, Any], agents: tuple[str, ...]) -> Any:
    return jax.tree.map(lambda *x: jnp.stack(x), *(by_agent[a] for a in agents))


class JaxMARLEnv(SuiteEnv):
    """A JaxMARL ``MultiAgentEnv`` as a gymnax env whose observation, action
    and reward have a leading agent axis ``[N, ...]`` (agents in the order of
    ``env.agents``, kept as `agents`).

    Args:
      env: the JaxMARL env (``jaxmarl.make(...)``, no wrappers).
      episode_length: a time limit of the adapter's own (None: the env's).
    """

    suite = "jaxmarl"

    def __init__(self, env: Any, episode_length: int | None = None) -> None:
        for name in ("reset", "step_env", "agents", "observation_space", "action_space"):
            if not hasattr(env, name):
                raise TypeError(f"env must be a JaxMARL MultiAgentEnv, got {env!r}")
        super().__init__(episode_length, env)
        self.agents: tuple[str, ...] = tuple(env.agents)
        if not self.agents:
            raise ValueError(f"jaxmarl env {type(env).__name__} has no agents")
        # the observations' shapes and dtypes are the reset's (Overcooked
        # 0.2.0 declares its grid's width and height swapped), bounds the
        # declared spaces' where they broadcast to that shape
        reset = jax.eval_shape(env.reset, key_spec())[0]
        observations = {a: _observation_space(env, a, reset[a]) for a in self.agents}
        actions = {a: space_of(env.action_space(a)) for a in self.agents}
        _check_shared(env, "observation", observations, bounds=False)
        _check_shared(env, "action", actions, bounds=True)
        first = self.agents[0]
        self._env_action_dtype = jnp.dtype(env.action_space(first).dtype)
        self._agent_action_space = actions[first]
        obs = observations[first]
        self._observation_space = box(
            jnp.stack([observations[a].low for a in self.agents]),
            jnp.stack([observations[a].high for a in self.agents]),
            (len(self.agents), *obs.shape),
            obs.dtype,
        )

    @property
    def num_agents(self) -> int:
        """``N``, the length of the agent axis."""
        return len(self.agents)

    # --- the suite -----------------------------------------------------------
    def suite_reset(self, key: jax.Array, params: Any) -> tuple[PyTree, PyTree]:
        obs, state = self.env.reset(key)
        return _stack(obs, self.agents), state

    def suite_step(self, key: jax.Array, inner: PyTree, action: Any, params: Any) -> SuiteStep:
        action = jnp.asarray(action).astype(self._env_action_dtype)
        actions = {a: action[i] for i, a in enumerate(self.agents)}
        obs, state, rewards, dones, info = self.env.step_env(key, inner, actions)
        done = jnp.asarray(dones["__all__"], bool)
        truncated = done & self._time_limit_end(state)
        return SuiteStep(
            observation=_stack(obs, self.agents),
            inner=state,
            reward=jnp.stack([jnp.asarray(rewards[a], jnp.float32) for a in self.agents]),
            terminated=done & ~truncated,
            truncated=truncated,
            info=self._info(info),
        )

    def _time_limit_end(self, state: Any) -> jax.Array:
        """Whether an end of the env's episode reached at ``state`` (after the
        step) is a truncation (the module docstring's rules)."""
        family = _family(self.env)
        if family in ("mpe", "overcooked"):
            return jnp.ones((), bool)
        if family == "smax":
            alive = (state.state if hasattr(state, "enemy_policy_state") else state).unit_alive
            allies = self.env.num_allies
            return jnp.any(alive[:allies]) & jnp.any(alive[allies:])
        return jnp.zeros((), bool)

    def suite_time_limit(self, params: Any) -> float | None:
        """MPE and SMAX truncate where the step count reaches ``max_steps + 1``
        (their test precedes the count's increment), Overcooked where it
        reaches ``max_steps``; Hanabi never truncates; other envs: unknown."""
        family = _family(self.env)
        if family in ("mpe", "smax"):
            return int(self.env.max_steps) + 1
        if family == "overcooked":
            return int(self.env.max_steps)
        if family == "hanabi":
            return math.inf
        return None

    def _info(self, info: Any) -> dict[str, Any]:
        """``info``'s arrays; its dicts keyed by the agents stacked ``[N, ...]``."""
        out: dict[str, Any] = {}
        if not isinstance(info, dict):
            return out
        for k, v in info.items():
            if isinstance(v, dict) and set(v) >= set(self.agents):
                out[k] = _stack(v, self.agents)
            elif isinstance(v, jax.Array | np.ndarray):
                out[k] = v
        return out

    # --- spaces ----------------------------------------------------------------
    def action_space(self, params: Any = None) -> PerAgent:
        """Every agent's action: [`PerAgent`][jaxsample.envs.per_agent.PerAgent] of one agent's
        space."""
        return PerAgent(self._agent_action_space, self.num_agents)

    def observation_space(self, params: Any = None) -> spaces.Box:
        """The stacked observations ``[N, *obs]``."""
        return self._observation_space

    @property
    def name(self) -> str:
        return f"jaxmarl/{self.env.name}"


class MaskedJaxMARLEnv(JaxMARLEnv):
    """A [`JaxMARLEnv`][jaxsample.envs.suites.JaxMARLEnv] whose env says which actions are legal
    (``get_avail_actions``, or Hanabi's ``get_legal_moves``)."""

    def action_mask(self, state: SuiteState, params: Any) -> jax.Array:
        """``[N, num_actions]`` bool: the legal actions of every agent at
        ``state`` (the env's ``get_avail_actions``)."""
        env = self.env
        legal = (
            env.get_legal_moves(state.inner)
            if _family(env) == "hanabi"
            else env.get_avail_actions(state.inner)
        )
        return _stack(legal, self.agents).astype(bool)


def _family(env: Any) -> str | None:
    """``"mpe"``, ``"smax"``, ``"overcooked"``, ``"hanabi"`` for the envs whose
    end rules are known (the classes of jaxmarl 0.2.0 that keep their step)."""
    from jaxmarl.environments import SMAX, Hanabi, Overcooked
    from jaxmarl.environments.mpe.simple import SimpleMPE
    from jaxmarl.environments.mpe.simple_facmac import SimpleFacmacMPE
    from jaxmarl.environments.smax.heuristic_enemy_smax_env import EnemySMAX

    step = type(env).step_env
    if isinstance(env, SimpleMPE) and step in (SimpleMPE.step_env, SimpleFacmacMPE.step_env):
        return "mpe"
    own_terminal = getattr(type(env), "is_terminal", None) is SMAX.is_terminal
    if isinstance(env, SMAX) and step is SMAX.step_env and own_terminal:
        return "smax"
    if isinstance(env, EnemySMAX) and step is EnemySMAX.step_env:
        return "smax"
    if isinstance(env, Overcooked) and step is Overcooked.step_env:
        return "overcooked"
    if isinstance(env, Hanabi) and step is Hanabi.step_env:
        return "hanabi"
    return None


def _has_masks(env: Any) -> bool:
    from jaxmarl.environments import Hanabi
    from jaxmarl.environments.multi_agent_env import MultiAgentEnv

    if isinstance(env, Hanabi):
        return True
    own = getattr(type(env), "get_avail_actions", None)
    return own is not None and own is not MultiAgentEnv.get_avail_actions


def from_jaxmarl(env: Any, episode_length: int | None = None) -> JaxMARLEnv:
    """Adapt a JaxMARL env (a [`MaskedJaxMARLEnv`][jaxsample.envs.suites.MaskedJaxMARLEnv] where it
    has legal-action
    masks); ``episode_length`` adds a time limit to the env's own."""
    cls = MaskedJaxMARLEnv if _has_masks(env) else JaxMARLEnv
    return cls(env, episode_length)


def make_jaxmarl(name: str, *, episode_length: int | None = None, **kwargs: Any) -> JaxMARLEnv:
    """``from_jaxmarl(jaxmarl.make(name, **kwargs))``, e.g. ``"MPE_simple_spread_v3"``."""
    from jaxsample.envs.suites.base import import_quietly

    return from_jaxmarl(import_quietly("jaxmarl").make(name, **kwargs), episode_length)

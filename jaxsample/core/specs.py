"""What an env and an agent look like, derived and checked once at build time.

`env_spec` reads a gymnax env's spaces and step outputs
(`EnvSpec`), `agent_spec` checks an agent against them
given its parameters (`AgentSpec`; `FromParams` defers that to
the first parameters given when they are not known at build time),
`act_checked` is the agent step with those checks at trace time,
`step_examples` builds a sampler's ``examples``, and
`known_time_limit` reads an env's time limit where it is known for sure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments.environment import Environment

from jaxsample.agents.base import Agent, action_spec, null_action
from jaxsample.core.masking import agent_inputs, observe, split
from jaxsample.envs.wrappers import inherits_step
from jaxsample.types import (
    AgentInputs,
    AgentSamples,
    AgentStep,
    EnvSamples,
    PyTree,
    Samples,
    key_spec,
)

# Keys of gymnax's info dict that have fields of their own in EnvSamples.
INFO_KEYS_WITH_FIELDS = ("final_observation", "terminated", "truncated")


def specs(tree: PyTree) -> PyTree:
    """``jax.ShapeDtypeStruct`` of every leaf (arrays, scalars or specs)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), tree)


def _describe(tree: PyTree) -> str:
    return str(jax.tree.map(lambda s: f"{s.dtype}{list(s.shape)}", specs(tree)))


def check_same(what: str, expected: PyTree, got: PyTree, hint: str) -> None:
    """Raise a ``ValueError`` naming ``what`` unless ``got`` has the structure,
    shapes and dtypes of ``expected``."""
    e, g = specs(expected), specs(got)
    if jax.tree.structure(e) != jax.tree.structure(g) or any(
        a.shape != b.shape or a.dtype != b.dtype
        for a, b in zip(jax.tree.leaves(e), jax.tree.leaves(g), strict=True)
    ):
        raise ValueError(f"{what} mismatch: expected {_describe(e)}, got {_describe(g)}. {hint}")


def strong(tree: PyTree, spec: PyTree) -> PyTree:
    """``tree`` with the dtypes of ``spec``, strong: gymnax returns some
    weak-typed leaves, which would make the next ``collect`` retrace."""
    return jax.tree.map(lambda x, s: jnp.asarray(x, s.dtype), tree, spec)


#: the spec of a scalar reward (one agent)
REWARD = jax.ShapeDtypeStruct((), jnp.float32)


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """One env's spaces and the specs of what it returns (no batch axis).

    Attributes:
      action_space: the gymnax action space.
      action: spec of one action; ``null_action`` is zeros of it.
      observation: spec of one observation, as ``env.step`` returns it (the
        carry's dtypes).
      env_state: spec of the env's state, as ``env.step`` returns it.
      info: spec of ``env.step``'s info dict.
      reward: spec of one reward (float32): a scalar, or ``[N]`` for a team
        of N agents (one reward per agent, e.g. a JaxMARL env).
    """

    action_space: Any
    action: PyTree
    null_action: PyTree
    observation: PyTree
    env_state: PyTree
    info: dict[str, Any]
    reward: Any = REWARD

    @property
    def env_info(self) -> dict[str, Any]:
        """Spec of the info entries recorded in ``samples.env.env_info``."""
        return recorded_info(self.info)


def recorded_info(info: dict[str, Any]) -> dict[str, Any]:
    """The entries of gymnax's ``info`` recorded in ``samples.env.env_info``
    (those without fields of their own)."""
    return {k: v for k, v in info.items() if k not in INFO_KEYS_WITH_FIELDS}


def env_spec(env: Any, env_params: Any, *, same_observation: bool = False) -> EnvSpec:
    """Derive and check a gymnax (>= 1.0) env's specs; a clear error if its
    ``step`` does not return ``(obs, state, reward, terminated, truncated,
    info)`` with scalar flags, a scalar (or per-agent ``[N]``) reward and
    ``info["final_observation"]``, or (with
    ``same_observation``) if ``step``'s observation differs from ``reset``'s."""
    space = env.action_space(env_params)
    key = key_spec()
    try:
        obs_spec, env_state_spec = jax.eval_shape(env.reset, key, env_params)
        act_spec = action_spec(space)
        step_spec = jax.eval_shape(env.step, key, env_state_spec, act_spec, env_params)
    except ValueError as e:
        if "vmap was requested to map its argument" not in str(e):
            raise
        raise TypeError(
            f"env must be ONE environment ({type(env).__name__}.reset/step vmap over a batch "
            "of keys inside, a batched env?): pass the unbatched env, the sampler vmaps it "
            "over batch_spec.B itself"
        ) from None
    if not (isinstance(step_spec, tuple) and len(step_spec) == 6):
        raise TypeError(
            "env.step must return (obs, state, reward, terminated, truncated, info) "
            "as gymnax >= 1.0 does"
        )
    info_spec = step_spec[5]
    if not isinstance(info_spec, dict) or "final_observation" not in info_spec:
        raise TypeError("env.step's info must be a dict with 'final_observation' (gymnax >= 1.0)")
    if step_spec[2].ndim > 1:
        raise ValueError(
            f"env.step's reward must be a scalar (or [N], one per agent of a team), got shape "
            f"{step_spec[2].shape}"
        )
    for i, name in ((3, "terminated"), (4, "truncated")):
        if step_spec[i].shape != ():
            raise ValueError(
                f"env.step's {name} must be a scalar, got shape {step_spec[i].shape} (a batched "
                "env? pass ONE environment: the sampler vmaps it over batch_spec.B itself)"
            )
    if same_observation:
        check_same(
            "env.step observation",
            obs_spec,
            step_spec[0],
            "env.step must return observations like env.reset's.",
        )
    # an env with legal-action masks: the observation travels with its mask
    observation = jax.eval_shape(partial(observe, env, env_params), step_spec[0], step_spec[1])
    info_spec = {**info_spec, "final_observation": observation}
    return EnvSpec(
        action_space=space,
        action=act_spec,
        null_action=null_action(space),
        observation=observation,
        env_state=step_spec[1],
        info=info_spec,
        reward=jax.ShapeDtypeStruct(step_spec[2].shape, jnp.float32),
    )


def act_checked(
    agent: Agent,
    agent_params: PyTree,
    inputs: AgentInputs,
    state: PyTree,
    key: jax.Array,
    *,
    null_action: PyTree,
    state_spec: PyTree,
    space: Any,
) -> tuple[AgentStep, PyTree]:
    """``agent.step`` for one env, with a clear error (at trace time) when the
    action does not fit the action space or the state changes structure."""
    agent_step, new_state = agent.step(agent_params, inputs, state, key)
    check_same(
        "agent action",
        null_action,
        agent_step.action,
        f"The action must fit the env's {space}.",
    )
    check_same(
        "agent state",
        state_spec,
        new_state,
        "agent.step must return a state with the structure of agent.initial_state.",
    )
    return agent_step, new_state


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    """An agent's specs for one env: ``params`` (the example parameters),
    ``state`` (of ``initial_state``), ``info`` (of ``AgentStep.agent_info``)."""

    params: PyTree
    state: PyTree
    info: PyTree


def agent_state_spec(agent: Agent) -> PyTree:
    """Spec of ``agent.initial_state`` (it takes no parameters)."""
    return jax.eval_shape(agent.initial_state, jax.ShapeDtypeStruct((), jnp.int32))


def default_params(agent: Agent, agent_params: PyTree, observation: PyTree) -> PyTree:
    """``agent_params`` if given, else ``jax.eval_shape(agent.init, key,
    observation)`` when the agent has ``init``, else None (not known before
    the parameters are given to ``init``/``collect``/``run``)."""
    if agent_params is None and callable(getattr(agent, "init", None)):
        return jax.eval_shape(agent.init, key_spec(), split(observation)[0])
    return agent_params


def agent_spec(
    agent: Agent,
    agent_params: PyTree,
    observation: PyTree,
    action_space: Any,
    *,
    value: bool = False,
    reward: Any = REWARD,
) -> AgentSpec:
    """Check ``agent`` with ``agent_params`` (arrays, tracers or
    ``jax.ShapeDtypeStruct``, never None: the agent is never called with
    made-up values) for one env of ``observation``, ``action_space`` and
    ``reward`` (spec; ``[N]`` for a team): its action, its state, and with
    ``value`` its value, one per reward (a scalar, or ``[N]``)."""
    key = key_spec()
    state_spec = agent_state_spec(agent)
    act_spec = action_spec(action_space)
    inputs = agent_inputs(observation, act_spec, reward)

    def act(params: PyTree, inputs: AgentInputs, state: PyTree, key: jax.Array):
        return act_checked(
            agent,
            params,
            inputs,
            state,
            key,
            null_action=null_action(action_space),
            state_spec=state_spec,
            space=action_space,
        )

    agent_params = specs(agent_params)
    agent_step, _ = jax.eval_shape(act, agent_params, inputs, state_spec, key)
    if value:
        value_spec = jax.eval_shape(agent.value, agent_params, inputs, state_spec)
        if value_spec.shape != reward.shape:
            raise ValueError(
                f"agent.value must return the reward's shape {reward.shape} (a scalar; [N] for "
                f"a team of N agents), got shape {value_spec.shape}"
            )
    return AgentSpec(params=agent_params, state=state_spec, info=specs(agent_step.agent_info))


class FromParams:
    """What a sampler derives from the agent's parameters (its ``examples``,
    for the host sampler its compiled device functions), derived once.

    At build time when the parameters are known (``agent_params=``, or
    ``agent.init``'s shapes); else from the parameters first given to
    ``init`` (an agent without ``init`` is never called with made-up
    parameters). Until then `get` raises a ``ValueError`` that says to
    pass ``agent_params=``.
    """

    def __init__(
        self, derive: Callable[[PyTree], Any], agent_params: PyTree, *, what: str, factory: str
    ) -> None:
        self._derive = derive
        self._what, self._factory = what, factory
        self._value = None if agent_params is None else derive(agent_params)
        self._params = agent_params

    def of(self, agent_params: PyTree) -> Any:
        """The derived value, derived now from ``agent_params`` (checking the
        agent with them) if it is not known yet; parameters of another
        structure than the known ones raise a ``TypeError`` naming
        ``agent_params``."""
        if self._value is None:
            self._value = self._derive(agent_params)
            self._params = agent_params
        else:
            check_same_params(self._params, agent_params)
        return self._value

    def get(self) -> Any:
        """The derived value; a clear error while the parameters are unknown."""
        if self._value is None:
            raise ValueError(
                f"{self._what} is not known yet: the agent has no init method and "
                f"{self._factory} got no agent_params=, so the agent's outputs are "
                f"unknown. Pass agent_params= (an example of the parameters, arrays "
                "or jax.ShapeDtypeStruct) to it, or call init(key, agent_params) first."
            )
        return self._value


def _param_leaves(tree: PyTree) -> dict[str, tuple[int, ...]]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(p) or "(the root)": tuple(np.shape(x)) for p, x in leaves}


def check_same_params(known: PyTree, given: PyTree) -> None:
    """Raise a ``TypeError`` naming ``agent_params`` unless ``given`` has the
    structure and leaf shapes of ``known`` (e.g. ``()`` for a learning agent:
    otherwise the agent fails deep inside the rollout)."""
    if not jax.tree.leaves(known) and not jax.tree.leaves(given):
        return  # e.g. () and None: no parameters either way
    if jax.tree.structure(known) == jax.tree.structure(given):
        want, have = _param_leaves(known), _param_leaves(given)
        for (path, shape), other in zip(want.items(), have.values(), strict=True):
            if shape != other:
                raise TypeError(
                    f"agent_params{path if path != '(the root)' else ''} has shape {other}, "
                    f"but the agent's parameters have shape {shape} there (from agent.init or "
                    "agent_params=): parameters of another configuration?"
                )
        return
    want, have = _param_leaves(known), _param_leaves(given)
    if not have:
        got = f"{given!r}"[:60] + " (no arrays)"
    else:
        got = f"{len(have)} array(s) at {', '.join(list(have)[:3])}"
    missing = [p for p in want if p not in have]
    raise TypeError(
        f"agent_params do not have the structure of the agent's parameters (from agent.init "
        f"or agent_params=): expected {len(want)} array(s)"
        + (f", e.g. at {', '.join(missing[:3])}" if missing else "")
        + f"; got {got}. Pass the parameters from agent.init(key, observation)."
    )


def initial_agent_state(agent: Agent, state_spec: PyTree, rank: jax.Array) -> PyTree:
    """``agent.initial_state(rank)`` with the dtypes of ``state_spec`` (no weak
    types in a carry)."""
    return strong(agent.initial_state(rank), state_spec)


def step_examples(
    observation: PyTree,
    action: PyTree,
    env_info: PyTree,
    agent_info: PyTree,
    agent_state: PyTree,
    *,
    store_agent_state: bool,
    bootstrap_value: bool,
    reward: Any = REWARD,
) -> Samples:
    """A sampler's ``examples``: [`Samples`][jaxsample.types.Samples] of one step (no ``T``/``B``
    axes) with ``jax.ShapeDtypeStruct`` leaves, from the specs of one env's
    observation, action, info, reward (``[N]`` for a team: the rewards and
    the bootstrap value are per agent), and the agent's info and state."""
    boolean = jax.ShapeDtypeStruct((), bool)
    observation, mask = split(observation)
    return Samples(
        env=EnvSamples(
            observation=specs(observation),
            reward=reward,
            prev_reward=reward,
            terminated=boolean,
            truncated=boolean,
            done=boolean,
            env_info=specs(env_info),
            final_store=specs(observation),
            action_mask=specs(mask),
            final_mask_store=specs(mask),
        ),
        agent=AgentSamples(
            action=specs(action),
            prev_action=specs(action),
            agent_info=specs(agent_info),
            initial_state=specs(agent_state),
            state=specs(agent_state) if store_agent_state else None,
        ),
        valid=boolean,
        bootstrap_value=reward if bootstrap_value else None,
    )


def _time_limit_env(env: Any) -> Any:
    """The env whose time limit ``env`` has, where its class says so (a
    wrapper's ``time_limit_env()``), else None."""
    hook = getattr(type(env), "time_limit_env", None)
    return hook(env) if callable(hook) else None


def known_time_limit(env: Any, env_params: Any) -> float | None:
    """The time limit of ``env`` where it is known for sure, else None.

    An env's class may declare it: a method ``known_time_limit(env_params)``, as the
    suite adapters have ([`jaxsample.envs.suites.SuiteEnv`][jaxsample.envs.suites.SuiteEnv];
    ``math.inf``
    for an env that never truncates). Otherwise it is known only for an
    unmodified built-in gymnax env (its class is defined in
    the ``gymnax.environments`` package and keeps gymnax's ``step`` and
    ``is_truncated``: ``state.time`` advances 1 per step and truncates at
    ``params.max_steps_in_episode``), possibly under wrappers that delegate
    the dynamics to it and say so (a method ``time_limit_env()`` returning
    the inner env, as jaxsample's own wrappers have), with a concrete, finite
    limit. Any other env (a subclass, one with its own time bookkeeping) may
    truncate more often, so it has no known limit.
    """
    # Both hooks are read from the env's own class, not through a wrapper's
    # __getattr__ (a wrapper may truncate more often than the env it
    # delegates to).
    while (inner := _time_limit_env(env)) is not None:
        env = inner
    declared = getattr(type(env), "known_time_limit", None)
    if callable(declared):
        return declared(env, env_params)
    cls = type(env)
    if not isinstance(env, Environment) or not cls.__module__.startswith("gymnax.environments."):
        return None
    if cls.is_truncated is not Environment.is_truncated or not inherits_step(env):
        return None
    try:
        limit = float(np.asarray(getattr(env_params, "max_steps_in_episode", None)))
    except (TypeError, ValueError, jax.errors.ConcretizationTypeError):
        return None
    if not math.isfinite(limit) or limit < 1:
        return None
    return math.ceil(limit)

"""An agent without ``init`` and no ``agent_params=`` (issue 13 item 1).

The documented agent protocol (``initial_state``, ``step``, ``value``) does not
require ``init``. Such an agent is never called with made-up parameters: the
factories only read ``initial_state``, and the agent is checked with the
parameters first given to ``init`` (or ``run``). ``examples`` says to pass
``agent_params=`` until then.
"""

import dataclasses
from typing import Any

import gymnasium as gym
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsample as js
from jaxsample import host

KEY = jax.random.key(7)


@dataclasses.dataclass(frozen=True)
class LinearAgent:
    """Greedy on ``params["w"] @ obs`` (no ``init``): indexing ``params`` is
    what crashed when the factories called ``step(None, ...)``."""

    n_actions: int = 2

    def initial_state(self, env_rank):
        return ()

    def step(self, params, inputs, state, key):
        logits = params["w"] @ jnp.asarray(inputs.observation, jnp.float32)
        return js.AgentStep(jnp.argmax(logits).astype(jnp.int32), {"logits": logits}), state

    def value(self, params, inputs, state):
        return jnp.sum(params["w"]) * jnp.sum(inputs.observation)

    def as_eval(self):
        return self


@dataclasses.dataclass(frozen=True)
class WideActionAgent(LinearAgent):
    """Returns a ``[2]`` action for a ``Discrete`` space."""

    def step(self, params, inputs, state, key):
        step, state = super().step(params, inputs, state, key)
        return step._replace(action=jnp.zeros((2,), jnp.int32)), state


def params(seed: int = 0) -> dict[str, jax.Array]:
    return {"w": jax.random.normal(jax.random.key(seed), (2, 4))}


def _leaves_equal(a: Any, b: Any) -> None:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _sampler(agent, **kw) -> js.Sampler:
    env, env_params = gymnax.make("CartPole-v1")
    return js.make_sampler(
        env, env_params, agent, js.BatchSpec(T=8, B=3), bootstrap_value=True, **kw
    )


def test_sampler_checks_the_agent_with_the_first_parameters_given() -> None:
    lazy = _sampler(LinearAgent())  # used to crash: 'NoneType' not subscriptable
    with pytest.raises(ValueError, match=r"sampler.examples .*agent_params="):
        _ = lazy.examples
    eager = _sampler(LinearAgent(), agent_params=params())
    state = jax.jit(lazy.init)(KEY, params())
    assert lazy.examples == eager.examples  # known once init has seen params
    _, batch = jax.jit(lazy.collect)(state, params(1))
    _, expected = jax.jit(eager.collect)(jax.jit(eager.init)(KEY, params()), params(1))
    _leaves_equal(batch, expected)
    # The agent really acted on its parameters: greedy, so it is w-dependent.
    logits = np.asarray(batch.samples.agent.agent_info["logits"])
    np.testing.assert_array_equal(
        np.asarray(batch.samples.agent.action), logits.argmax(-1).astype(np.int32)
    )


def test_an_agent_without_init_is_still_checked_at_init() -> None:
    lazy = _sampler(WideActionAgent())
    with pytest.raises(ValueError, match=r"agent action mismatch.*Discrete"):
        lazy.init(KEY, params())


def test_sharded_sampler_checks_at_init_too() -> None:
    mesh = jax.make_mesh((1,), ("envs",))
    lazy = _sampler(WideActionAgent(), mesh=mesh)
    with pytest.raises(ValueError, match="agent action mismatch"):
        lazy.init(KEY, params())


def test_evaluator_without_agent_params() -> None:
    env, env_params = gymnax.make("CartPole-v1")
    kw = dict(n_envs=2, max_steps=200)
    lazy = js.make_evaluator(env, env_params, LinearAgent(), **kw)
    eager = js.make_evaluator(env, env_params, LinearAgent(), agent_params=params(), **kw)
    _leaves_equal(lazy.run(KEY, params(2)), eager.run(KEY, params(2)))
    bad = js.make_evaluator(env, env_params, WideActionAgent(), **kw)
    with pytest.raises(ValueError, match="agent action mismatch"):
        bad.run(KEY, params())


def test_host_sampler_without_agent_params() -> None:
    def make(agent_params=None):
        envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
        return host.make_host_sampler(
            envs, LinearAgent(), js.BatchSpec(T=6, B=2), agent_params=agent_params
        )

    lazy, eager = make(), make(params())
    with pytest.raises(ValueError, match=r"examples .*agent_params="):
        _ = lazy.examples
    state = lazy.init(KEY, params())
    assert lazy.examples == eager.examples
    _, batch = lazy.collect(state, params(3))
    _, expected = eager.collect(eager.init(KEY, params()), params(3))
    _leaves_equal(batch, expected)

"""The epsilon-greedy agent: per-rank final epsilons (rlpyt's log-spaced
ranks), the decay, the action frequencies it promises, and its Q-values
against numpy. The shared fixtures are tests/test_agents.py's.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_agents import (
    N_ACTIONS,
    OBS,
    B,
    discrete,
    np_features,
    one,
    random_obs,
    setup,
    vstep,
    vvalue,
)

import jaxsample.agents as A
from jaxsample.types import AgentInputs

# conftest.py sets this too; repeated so the file is strict when run on its own.
jax.config.update("jax_numpy_rank_promotion", "raise")


def test_epsilon_per_rank_matches_numpy_logspace():
    global_B = 7
    agent = A.EpsilonGreedyAgent(
        discrete(), global_B=global_B, epsilon_final=0.1, epsilon_final_min=0.001
    )
    ranks = jnp.arange(global_B, dtype=jnp.int32)
    eps = jax.jit(jax.vmap(agent.initial_state))(ranks)
    expected = np.logspace(np.log10(0.001), np.log10(0.1), global_B)
    assert eps.dtype == jnp.float32 and eps.shape == (global_B,)
    np.testing.assert_allclose(eps, expected, rtol=1e-5)
    np.testing.assert_allclose(jax.vmap(agent.initial_state)(ranks), expected, rtol=1e-5)
    np.testing.assert_allclose(agent.final_epsilons(), expected)
    assert eps[0] == pytest.approx(0.001, rel=1e-5) and eps[-1] == pytest.approx(0.1, rel=1e-5)

    flat = A.EpsilonGreedyAgent(discrete(), global_B=global_B, epsilon_final=0.05)
    np.testing.assert_allclose(jax.vmap(flat.initial_state)(ranks), np.full(global_B, 0.05))
    single = A.EpsilonGreedyAgent(discrete(), global_B=1, epsilon_final=0.1, epsilon_final_min=0.01)
    np.testing.assert_allclose(
        single.initial_state(jnp.zeros((), jnp.int32)),
        np.logspace(np.log10(0.01), np.log10(0.1), 1)[0],
        rtol=1e-6,
    )


def test_epsilon_decay_interpolates():
    agent, params, inputs, states, keys = setup("epsilon-greedy")  # init 0.5, finals 1e-3..0.1
    assert params.decay.shape == () and params.decay.dtype == jnp.float32
    assert float(params.decay) == 0.0
    finals = np.logspace(-3, -1, B)
    for decay in (0.0, 0.25, 1.0):
        p = params.replace(decay=jnp.asarray(decay, jnp.float32))
        info = vstep(agent)(p, inputs, states, keys)[0].agent_info
        np.testing.assert_allclose(info.epsilon, 0.5 + decay * (finals - 0.5), rtol=1e-5)


def test_epsilon_greedy_action_frequencies():
    agent = A.EpsilonGreedyAgent(
        discrete(), global_B=1, hidden_sizes=(8,), epsilon_init=1.0, epsilon_final=0.0
    )
    params = agent.init(jax.random.key(0), OBS)
    obs = random_obs(jax.random.key(1), 1)
    inputs = AgentInputs(one(obs), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32))
    state = agent.initial_state(jnp.zeros((), jnp.int32))
    greedy = int(np.argmax(agent.q_values(params.network, inputs.observation)))
    n = 8000
    keys = jax.random.split(jax.random.key(2), n)

    @jax.jit
    def run(p):
        return jax.vmap(lambda k: agent.step(p, inputs, state, k)[0].action)(keys)

    def actions(decay):
        return np.asarray(run(params.replace(decay=jnp.asarray(decay, jnp.float32))))

    uniform = np.bincount(actions(0.0), minlength=N_ACTIONS) / n  # epsilon 1
    np.testing.assert_allclose(uniform, np.full(N_ACTIONS, 1 / N_ACTIONS), atol=0.02)
    np.testing.assert_array_equal(actions(1.0), np.full(n, greedy))  # epsilon 0
    for eps in (0.5, 0.2):
        freq = np.mean(actions(1.0 - eps) == greedy)
        assert abs(freq - (1 - eps + eps / N_ACTIONS)) < 0.02
    # The eval agent ignores decay and acts with eval_epsilon.
    ev = dataclasses.replace(agent, eval_epsilon=0.2).as_eval()
    for decay in (0.0, 1.0):
        p = params.replace(decay=jnp.asarray(decay, jnp.float32))
        info = ev.step(p, inputs, state, keys[0])[0].agent_info
        np.testing.assert_allclose(info.epsilon, 0.2)


def test_epsilon_greedy_q_values_and_value():
    agent, params, inputs, states, keys = setup("epsilon-greedy")
    assert isinstance(params, A.EpsilonGreedyParams)
    q = jax.vmap(agent.q_values, in_axes=(None, 0))(params.network, inputs.observation)
    assert q.shape == (B, N_ACTIONS) and q.dtype == jnp.float32
    p = params.network["params"]
    x = np_features(inputs.observation)
    layer = p["torso"]["dense_0"]
    h = np.maximum(x @ np.asarray(layer["kernel"]) + np.asarray(layer["bias"]), 0.0)
    q_np = h @ np.asarray(p["q_head"]["kernel"]) + np.asarray(p["q_head"]["bias"])
    np.testing.assert_allclose(q, q_np, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(vvalue(agent)(params, inputs, states), q_np.max(-1), rtol=1e-4)
    out, next_states = vstep(agent)(params, inputs, states, keys)
    np.testing.assert_allclose(out.agent_info.q_values, q, rtol=1e-6)
    np.testing.assert_array_equal(next_states, states)

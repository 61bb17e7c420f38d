"""The sampler's ``prev_action``/``prev_reward`` for agents that do not read them.

An agent that does not read its previous action and reward (a reading of its
jaxpr, ``jaxsample.core.liveness``) gets neither carried through the batch's
scan; the state's are set from the batch's last step. Checked here against
the same agent made to read them (so the sampler carries them step by step):
the batches and the states must be equal, in every reset mode.
"""

from __future__ import annotations

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsample as js
from jaxsample.core.liveness import reads_inputs
from jaxsample.types import AgentStep

F32 = jax.ShapeDtypeStruct((3,), jnp.float32)


def test_reads_inputs_follows_the_data_not_the_arguments():
    assert not reads_inputs(lambda a, b: a * 2, [F32, F32], [1])
    assert reads_inputs(lambda a, b: a * b, [F32, F32], [1])
    # Into a jit: an argument the inner function ignores is not read...
    assert not reads_inputs(lambda a, b: jax.jit(lambda x, y: x * 2)(a, b), [F32, F32], [1])
    assert reads_inputs(lambda a, b: jax.jit(lambda x, y: x * y)(a, b), [F32, F32], [1])
    # ...a branch or an effect that takes it is (conservatively).
    assert reads_inputs(lambda a, b: jax.lax.cond(a[0] > 0, lambda: a, lambda: b), [F32, F32], [1])
    assert reads_inputs(lambda a, b: (jax.debug.print("{}", b), a)[1], [F32, F32], [1])
    # A constant output (a literal in the jaxpr) reads nothing.
    assert not reads_inputs(lambda a, b: (a, 1.0), [F32, F32], [1])
    # Pytree arguments: any leaf counts.
    tree = (F32, {"x": F32})
    assert reads_inputs(lambda a, b: a + b[0], [F32, tree], [1])
    assert not reads_inputs(lambda a, b: a, [F32, tree], [1])
    assert reads_inputs(lambda a, b: b[1]["x"], [F32, tree], [1])


class ReadsPrevious(js.agents.RandomAgent):
    """The random agent, made to read its previous action and reward (times 0)."""

    def step(self, params, inputs, state, key):
        out, state = super().step(params, inputs, state, key)
        dtype = out.action.dtype
        touch = (inputs.prev_reward * 0).astype(dtype) + (inputs.prev_action * 0).astype(dtype)
        return AgentStep(out.action + touch, out.agent_info), state


def test_the_random_and_actor_critic_agents_do_not_read_their_previous_inputs():
    env, env_params = gymnax.make("CartPole-v1")
    space = env.action_space(env_params)
    spec = js.BatchSpec(4, 2)
    samplers = {
        "random": js.make_sampler(env, env_params, js.agents.RandomAgent(space), spec),
        "reads": js.make_sampler(env, env_params, ReadsPrevious(space), spec),
    }
    stepper = samplers["random"]._stepper.agent
    assert not stepper.reads_previous(stepper.agent_act(()))
    stepper = samplers["reads"]._stepper.agent
    assert stepper.reads_previous(stepper.agent_act(()))
    for use_a, use_r, reads in [(False, False, False), (True, False, True), (False, True, True)]:
        agent = js.agents.RecurrentActorCritic(
            space, hidden_size=8, use_prev_action=use_a, use_prev_reward=use_r
        )
        obs = jnp.zeros(env.observation_space(env_params).shape, jnp.float32)
        params = agent.init(jax.random.key(0), obs)
        sampler = js.make_sampler(env, env_params, agent, spec, agent_params=params)
        stepper = sampler._stepper.agent
        assert stepper.reads_previous(stepper.agent_act(params)) is reads
    agent = js.agents.CategoricalActorCritic(space, hidden_sizes=(8,))
    params = agent.init(jax.random.key(0), obs)
    stepper = js.make_sampler(env, env_params, agent, spec, agent_params=params)._stepper.agent
    assert not stepper.reads_previous(stepper.agent_act(params))


@pytest.mark.parametrize("reset_mode", ["auto", "wait", "episodic"])
def test_batches_and_state_equal_those_of_an_agent_that_reads_them(reset_mode):
    env, env_params = gymnax.make("CartPole-v1")
    env_params = env_params.replace(max_steps_in_episode=9)  # truncations too
    space = env.action_space(env_params)
    runs = {}
    for name, agent in [("random", js.agents.RandomAgent(space)), ("reads", ReadsPrevious(space))]:
        sampler = js.make_sampler(
            env, env_params, agent, js.BatchSpec(12, 6), reset_mode=reset_mode
        )

        collect = jax.jit(sampler.collect)
        state = jax.jit(sampler.init)(jax.random.key(3), ())
        batches, states = [], []
        for _ in range(3):  # consecutive batches: each starts from the last one's state
            state, batch = collect(state, ())
            batches.append(batch)
            states.append(state)
        runs[name] = (batches, states)
    got, want = runs["random"], runs["reads"]
    ends = sum(int(np.asarray(b.samples.env.done).sum()) for b in want[0])
    assert ends > 6  # episodes end inside batches, where the previous action restarts
    paths = jax.tree_util.tree_leaves_with_path(want)
    for (path, w), g in zip(paths, jax.tree.leaves(got), strict=True):
        if jnp.issubdtype(w.dtype, jax.dtypes.prng_key):
            w, g = jax.random.key_data(w), jax.random.key_data(g)
        np.testing.assert_array_equal(
            np.asarray(g), np.asarray(w), err_msg=jax.tree_util.keystr(path)
        )

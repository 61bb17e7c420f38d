"""Branches that stay branches under vmap (jaxsample.core.batched): their values
equal lax.cond's per element, and the sampler's final-observation store, its
resets and DQN's learning phase stay conditionals in a program vmapped over
runs."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments.classic_control.cartpole import CartPole

import jaxsample as js
from jaxsample.algos import dqn
from jaxsample.core.batched import any_in_batch, cond_any, max_in_batch


def _primitives(jaxpr) -> set[str]:
    """Every primitive of a (closed) jaxpr, sub-jaxprs included."""
    found = set()
    for eqn in jaxpr.jaxpr.eqns if hasattr(jaxpr, "jaxpr") else jaxpr.eqns:
        found.add(eqn.primitive.name)
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else [param]:
                if hasattr(sub, "eqns") or hasattr(sub, "jaxpr"):
                    found |= _primitives(sub)
    return found


def test_reductions_cover_the_vmapped_axes() -> None:
    x = jnp.array([[False, False, False], [False, True, False]])
    assert bool(any_in_batch(x))
    np.testing.assert_array_equal(jax.vmap(any_in_batch)(x), [True, True])
    np.testing.assert_array_equal(jax.vmap(jax.vmap(any_in_batch))(x), np.ones((2, 3), bool))
    np.testing.assert_array_equal(jax.vmap(any_in_batch)(jnp.zeros((2, 3), bool)), [False] * 2)
    y = jnp.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(jax.jit(jax.vmap(max_in_batch))(y), [5, 5])
    assert int(max_in_batch(y[0])) == 2


@pytest.mark.parametrize("preds", [[True, False, True], [False, False, False], [True] * 3])
def test_cond_any_equals_cond_per_element_and_stays_a_conditional(preds) -> None:
    pred = jnp.array(preds)
    x = jnp.arange(3.0)

    def branches(fn):
        return lambda p, v: fn(p, lambda v: (v * 10, v + 1), lambda v: (-v, v - 1), v)

    expected = jax.vmap(branches(jax.lax.cond))(pred, x)
    got = jax.jit(jax.vmap(branches(cond_any)))(pred, x)
    jax.tree.map(np.testing.assert_array_equal, got, expected)
    # lax.cond under vmap is a select of both branches; cond_any stays a cond.
    assert "cond" not in _primitives(jax.make_jaxpr(jax.vmap(branches(jax.lax.cond)))(pred, x))
    assert "cond" in _primitives(jax.make_jaxpr(jax.vmap(branches(cond_any)))(pred, x))


def test_the_store_runs_as_a_conditional_for_vmapped_runs_and_equals_each_run() -> None:
    # A time limit of 5 in 16 steps: every run truncates, at different steps.
    env, params = gymnax.make("CartPole-v1")
    params = params.replace(max_steps_in_episode=5)
    agent = js.agents.RandomAgent(env.action_space(params))
    sampler = js.make_sampler(env, params, agent, js.BatchSpec(T=16, B=3))
    keys = jax.random.split(jax.random.key(3), 2)
    states = jax.jit(jax.vmap(sampler.init, in_axes=(0, None)))(keys, ())
    collect = jax.vmap(sampler.collect, in_axes=(0, None))
    assert "cond" in _primitives(jax.make_jaxpr(collect)(states, ()))
    _, batches = jax.jit(collect)(states, ())
    assert bool(jnp.any(batches.samples.env.truncated))
    for r in range(2):
        alone = jax.jit(sampler.collect)(jax.tree.map(lambda x, r=r: x[r], states), ())[1]
        jax.tree.map(
            lambda a, b, r=r: np.testing.assert_array_equal(np.asarray(a)[r], np.asarray(b)),
            batches,
            alone,
        )


def test_resets_run_only_at_the_steps_where_some_env_of_some_run_ended() -> None:
    """gymnax's auto-reset (the default) is computed at the steps where some env
    of some vmapped run ended, once per such step: the env's ``reset_env``
    runs there and nowhere else, where gymnax's ``env.step`` runs it at every
    step. (The samples are gymnax's step's: tests/test_sampler_reference.py.)"""
    calls = []

    class CountedCartPole(CartPole):
        def reset_env(self, key, params):
            jax.debug.callback(lambda: calls.append(1))
            return super().reset_env(key, params)

    env = CountedCartPole()
    params = env.default_params.replace(max_steps_in_episode=6)
    agent = js.agents.RandomAgent(env.action_space(params))
    sampler = js.make_sampler(env, params, agent, js.BatchSpec(T=16, B=3))
    keys = jax.random.split(jax.random.key(3), 2)
    states = jax.jit(jax.vmap(sampler.init, in_axes=(0, None)))(keys, ())
    collect = jax.jit(jax.vmap(sampler.collect, in_axes=(0, None)))
    calls.clear()
    _, batches = collect(states, ())
    jax.effects_barrier()
    ended = np.asarray(batches.samples.env.done).any(axis=(0, 2))  # [2, T, B] -> [T]
    assert 0 < ended.sum() < 16 and len(calls) == ended.sum()


def test_dqn_learning_phase_is_a_conditional_for_vmapped_runs() -> None:
    config = dqn.DQNConfig(
        num_envs=2, num_steps=2, total_timesteps=16, buffer_capacity=8, batch_size=4,
        learning_starts=8, hidden_sizes=(4,), eval_episodes=1,
    )  # fmt: skip
    trainer = dqn.make_train(config)
    keys = jax.random.split(jax.random.key(0), 2)
    state = jax.eval_shape(jax.vmap(trainer.init), keys)
    jaxpr = jax.make_jaxpr(jax.vmap(trainer.iteration))(state)
    assert "cond" in _primitives(jaxpr)

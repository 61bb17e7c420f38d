"""Rough edges of the API found by attacking it (issue 13 item 7): each bad
input gets a clear, early error naming the argument, and reasonable input is
accepted."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments.classic_control.cartpole import CartPole

import jaxsample as js


def _make(**kw):
    env, params = kw.pop("env", None) or gymnax.make("CartPole-v1")
    agent = kw.pop("agent", None) or js.agents.RandomAgent(env.action_space(params))
    spec = kw.pop("batch_spec", js.BatchSpec(T=4, B=2))
    return js.make_sampler(env, kw.pop("env_params", params), agent, spec, **kw)


@pytest.mark.parametrize("discount", [np.float32(0.9), jnp.float32(0.9), np.float64(0.9), 1])
def test_numpy_and_jax_scalar_discounts_are_accepted(discount) -> None:
    assert _make(discount=discount).options.discount == pytest.approx(float(discount))
    env, params = gymnax.make("CartPole-v1")
    agent = js.agents.RandomAgent(env.action_space(params))
    js.make_evaluator(env, params, agent, n_envs=2, max_steps=8, discount=discount)


def test_a_discount_array_is_still_rejected() -> None:
    with pytest.raises(TypeError, match="discount must be a float"):
        _make(discount=np.array([0.9, 0.9]))


def test_batch_spec_must_be_a_batch_spec() -> None:
    with pytest.raises(
        TypeError, match=r"batch_spec must be a jaxsample.BatchSpec\(T, B\), got \(8, 4\)"
    ):
        _make(batch_spec=(8, 4))


def test_env_params_of_another_env() -> None:
    _, mountain_car_params = gymnax.make("MountainCar-v0")
    with pytest.raises(TypeError, match=r"env_params must be a EnvParams .* another env"):
        _make(env_params=mountain_car_params)


def test_an_agent_or_env_class_instead_of_an_instance() -> None:
    with pytest.raises(TypeError, match=r"agent must be an agent instance.*RandomAgent\(\.\.\.\)"):
        _make(agent=js.agents.RandomAgent)
    _, params = gymnax.make("CartPole-v1")
    with pytest.raises(TypeError, match="env must be an environment instance"):
        js.make_sampler(CartPole, params, js.agents.RandomAgent(None), js.BatchSpec(4, 2))


class _ShrinkingCartPole(CartPole):
    """step returns 3-vectors while reset returns CartPole's 4-vector."""

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = super().step(key, state, action, params)
        info = {**info, "final_observation": info["final_observation"][:3]}
        return obs[:3], state, reward, terminated, truncated, info


def test_step_observation_unlike_reset_is_caught_at_construction() -> None:
    env = _ShrinkingCartPole()
    with pytest.raises(ValueError, match=r"env\.step observation mismatch"):
        _make(env=(env, env.default_params))


def test_a_hand_made_state_past_the_key_epoch_is_rejected() -> None:
    sampler = _make()
    state = sampler.init(jax.random.key(0), None)
    sampler.collect(state, None)  # a genuine state is fine
    bad = state.replace(step=jnp.full_like(state.step, 2**30))
    with pytest.raises(ValueError, match=r"state.step must be < 2\*\*30"):
        sampler.collect(bad, None)


# --- Issue 30 item 8: each caught at the call that received it, naming the argument.


def test_a_learning_agent_given_no_parameters_fails_at_init() -> None:
    env, params = gymnax.make("CartPole-v1")
    agent = js.agents.CategoricalActorCritic(env.action_space(params), hidden_sizes=(8,))
    sampler = _make(agent=agent)
    with pytest.raises(TypeError, match=r"agent_params do not have the structure.*got \(\)"):
        sampler.init(jax.random.key(0), ())
    agent_params = agent.init(jax.random.key(1), jnp.zeros(4))
    state = sampler.init(jax.random.key(0), agent_params)  # the right ones work
    with pytest.raises(TypeError, match="agent_params do not have the structure"):
        sampler.collect(state, ())
    wrong = jax.tree.map(lambda x: jnp.zeros((*x.shape, 2), x.dtype), agent_params)
    with pytest.raises(TypeError, match=r"agent_params\[.*has shape"):
        sampler.collect(state, wrong)


class _BatchedCartPole(CartPole):
    """An env that already vmaps over a batch of keys (a batched env)."""

    def reset(self, key, params=None):
        return jax.vmap(super().reset, in_axes=(0, None))(key, params)

    def step(self, key, state, action, params=None):
        return jax.vmap(super().step, in_axes=(0, 0, 0, None))(key, state, action, params)


def test_a_batched_env_is_named_at_make_sampler() -> None:
    env = _BatchedCartPole()
    with pytest.raises(TypeError, match=r"env must be ONE environment.*batched env"):
        _make(env=(env, env.default_params))


def test_a_raw_prng_key_is_named_with_its_type() -> None:
    sampler = _make()
    with pytest.raises(TypeError) as info:
        sampler.init(jax.random.PRNGKey(0), ())
    message = str(info.value)
    assert "ArrayImpluint32" not in message
    assert "of dtype uint32 and shape (2,)" in message and "jax.random.PRNGKey" in message

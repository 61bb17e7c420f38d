"""HeldNoise: a Gaussian policy's exploration noise held for ``repeat`` steps,
drawn anew at each episode's start; the learner's numbers are the inner
agent's."""

from __future__ import annotations

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsample import BatchSpec, make_sampler
from jaxsample.agents import CategoricalActorCritic, GaussianActorCritic, HeldNoise
from jaxsample.algos.configs import PPOConfig
from jaxsample.types import AgentInputs


def _noise(agent_info) -> np.ndarray:
    """``(mean, std)`` of each action's Gaussian: the draw behind ``a`` is ``(a - mean) / std``."""
    mean, log_std = agent_info.dist_params
    return np.asarray(mean), np.asarray(jnp.exp(log_std))


def test_the_noise_is_held_repeat_steps_and_log_probs_are_the_inner_agents() -> None:
    env, params = gymnax.make("Pendulum-v1")
    inner = GaussianActorCritic(env.action_space(params), log_std_init=-0.5)
    agent = HeldNoise(inner, 4)
    p = agent.init(jax.random.key(0), jnp.zeros(3))
    state = agent.initial_state(jnp.int32(0))
    step = jax.jit(agent.step)
    draws = []
    for t in range(10):
        obs = jnp.array([np.cos(t), np.sin(t), 0.1 * t], jnp.float32)  # a new state each step
        inputs = AgentInputs(obs, jnp.zeros(1), jnp.float32(0), None)
        out, state = step(p, inputs, state, jax.random.key(t))
        mean, std = _noise(out.agent_info)
        draws.append((np.asarray(out.action) - mean) / std)
        np.testing.assert_allclose(
            out.agent_info.log_prob, inner.dist_log_prob(out.agent_info.dist_params, out.action)
        )
        np.testing.assert_allclose(mean, inner.forward(p, obs)[0][0], rtol=1e-6)
    draws = np.concatenate(draws)
    for t in range(1, 10):
        if t % 4:
            np.testing.assert_allclose(draws[t], draws[t - 1], rtol=1e-5)
        else:
            assert abs(draws[t] - draws[t - 1]) > 1e-3  # a fresh draw (keys differ)
    assert int(state.age) == 10 % 4
    assert agent.as_eval() == inner.as_eval()


def test_each_episode_draws_its_first_noise_through_the_sampler() -> None:
    env, params = gymnax.make("Pendulum-v1")  # episodes of exactly 200 steps
    agent = HeldNoise(GaussianActorCritic(env.action_space(params)), 7)
    sampler = make_sampler(env, params, agent, BatchSpec(210, 2))
    p = agent.init(jax.random.key(1), jnp.zeros(3))
    _, batch = jax.jit(sampler.collect)(jax.jit(sampler.init)(jax.random.key(2), p), p)
    samples = batch.samples
    assert np.asarray(samples.env.done)[199].all() and not np.asarray(samples.env.done)[:199].any()
    mean, std = _noise(samples.agent.agent_info)
    draws = (np.asarray(samples.agent.action) - mean) / std  # [T, B, 1]
    for t in range(1, 210):
        age = t if t < 200 else t - 200
        same = np.isclose(draws[t], draws[t - 1], rtol=1e-4, atol=1e-5).all()
        assert same == (age % 7 != 0), t


def test_ppo_holds_the_noise_of_a_gaussian_policy() -> None:
    from jaxsample.algos import ppo

    config = PPOConfig(env_name="Pendulum-v1", num_envs=2, num_steps=8, total_timesteps=32,
                       noise_repeat=3)  # fmt: skip
    trainer = ppo.make_train(config)
    assert isinstance(trainer.agent, HeldNoise) and trainer.agent.repeat == 3
    assert trainer.sampler.options.store_agent_state
    state = jax.jit(trainer.init)(jax.random.key(0))
    state, metrics = jax.jit(trainer.run, static_argnums=1)(state, 2)
    assert np.isfinite(np.asarray(metrics["loss"])).all()
    assert not isinstance(ppo.make_train(PPOConfig(env_name="Pendulum-v1")).agent, HeldNoise)


def test_bad_arguments_are_clear_errors() -> None:
    env, params = gymnax.make("Pendulum-v1")
    gaussian = GaussianActorCritic(env.action_space(params))
    with pytest.raises(ValueError, match="repeat must be an int >= 1"):
        HeldNoise(gaussian, 0)
    with pytest.raises(ValueError, match="repeat must be an int >= 1"):
        HeldNoise(gaussian, True)
    cart, cparams = gymnax.make("CartPole-v1")
    with pytest.raises(TypeError, match="must be a GaussianActorCritic"):
        HeldNoise(CategoricalActorCritic(cart.action_space(cparams)), 4)
    with pytest.raises(ValueError, match="noise_repeat"):
        PPOConfig(noise_repeat=0)

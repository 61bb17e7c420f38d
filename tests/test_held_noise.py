"""HeldNoise: a Gaussian policy's exploration noise (a categorical one's
Gumbel noise) held for ``repeat`` steps, drawn anew at each episode's start;
the learner's numbers are the inner agent's."""

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
    discrete = ppo.make_train(PPOConfig(env_name="MountainCar-v0", noise_repeat=8))
    assert isinstance(discrete.agent, HeldNoise) and discrete.agent.repeat == 8


def test_a_categorical_policy_holds_its_gumbel_noise() -> None:
    """Each step's action is ``argmax(logits + g)`` with the Gumbel draw ``g``
    held ``repeat`` steps: with ``repeat = 1`` exactly the inner agent's
    sample (``jax.random.categorical``'s own draw); under held noise each
    step's action still follows ``softmax(logits)`` (frequencies over many
    keys), and an action mask keeps it legal."""
    env, params = gymnax.make("MountainCar-v0")
    inner = CategoricalActorCritic(env.action_space(params))
    p = inner.init(jax.random.key(0), jnp.zeros(2))
    obs = [jnp.array([-0.5 + 0.01 * t, 0.001 * t], jnp.float32) for t in range(12)]

    def actions(agent, key, mask=None):  # [12] actions, log-probs checked
        state, out = agent.initial_state(jnp.int32(0)), []
        for t, o in enumerate(obs):
            inputs = AgentInputs(o, jnp.int32(0), jnp.float32(0), mask)
            step, state = agent.step(p, inputs, state, jax.random.fold_in(key, t))
            expected = inner.dist_log_prob(step.agent_info.dist_params, step.action)
            out.append(jnp.where(jnp.isclose(step.agent_info.log_prob, expected),
                                 step.action, -1))  # fmt: skip
        return jnp.stack(out)

    key = jax.random.key(3)
    one = np.asarray(jax.jit(actions, static_argnums=0)(HeldNoise(inner, 1), key))
    np.testing.assert_array_equal(one, jax.jit(actions, static_argnums=0)(inner, key))
    held = HeldNoise(inner, 4)
    logits = np.asarray(inner.forward(p, obs[5])[0])
    keys = jax.random.split(jax.random.key(7), 2000)
    runs = np.asarray(jax.jit(jax.vmap(lambda k: actions(held, k)))(keys))  # [2000, 12]
    assert (runs >= 0).all()  # every log-probability was the inner agent's
    # step 5 (age 1): its noise was drawn at step 4, its action is softmax(logits(s_5))'s
    freq = np.bincount(runs[:, 5], minlength=3) / len(runs)
    np.testing.assert_allclose(freq, np.exp(logits) / np.exp(logits).sum(), atol=0.04)
    # near-uniform logits and held noise: the action is kept within a window
    kept = np.mean([runs[:, t] == runs[:, t - 1] for t in (1, 2, 3, 5, 6, 7)])
    fresh = np.mean([runs[:, t] == runs[:, t - 1] for t in (4, 8)])
    assert kept > 0.85 and fresh < 0.6, (kept, fresh)
    mask = jnp.array([True, False, True])
    masked = np.asarray(jax.vmap(lambda k: actions(held, k, mask))(keys[:50]))
    assert (masked >= 0).all() and 1 not in masked


def test_bad_arguments_are_clear_errors() -> None:
    env, params = gymnax.make("Pendulum-v1")
    gaussian = GaussianActorCritic(env.action_space(params))
    with pytest.raises(ValueError, match="repeat must be an int >= 1"):
        HeldNoise(gaussian, 0)
    with pytest.raises(ValueError, match="repeat must be an int >= 1"):
        HeldNoise(gaussian, True)
    cart, cparams = gymnax.make("CartPole-v1")
    from jaxsample.agents import RecurrentActorCritic

    with pytest.raises(TypeError, match="must be a GaussianActorCritic or Categorical"):
        HeldNoise(RecurrentActorCritic(cart.action_space(cparams)), 4)
    with pytest.raises(ValueError, match="noise_repeat"):
        PPOConfig(noise_repeat=0)
    with pytest.raises(ValueError, match=r"noise_repeat.*recurrent"):
        PPOConfig(noise_repeat=4, recurrent=True)

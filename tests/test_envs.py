"""Tests of jaxsample.envs: observation masking (POMDPs)."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces
from gymnax.environments.environment import Environment

import jaxsample as js
from jaxsample.core.finals import truncation_bound
from jaxsample.envs import VELOCITY_INDICES, MaskObservation, mask_velocity

jax.config.update("jax_numpy_rank_promotion", "raise")


def cartpole():
    return gymnax.make("CartPole-v1")


def test_mask_velocity_cartpole_keeps_position_and_angle():
    env, params = cartpole()
    masked = mask_velocity(env)
    assert isinstance(masked, MaskObservation) and isinstance(masked, Environment)
    assert masked.keep_indices == (0, 2)
    assert masked.obs_shape == (2,)
    obs, state = masked.reset(jax.random.key(0), params)
    assert obs.shape == (2,) and obs.dtype == jnp.float32
    np.testing.assert_array_equal(obs, [state.x, state.theta])
    space = masked.observation_space(params)
    assert isinstance(space, spaces.Box) and space.shape == (2,)
    inner = env.observation_space(params)
    np.testing.assert_array_equal(space.low, np.asarray(inner.low)[[0, 2]])
    np.testing.assert_array_equal(space.high, np.asarray(inner.high)[[0, 2]])
    assert masked.action_space(params).n == 2
    assert masked.num_actions == 2
    assert "CartPole-v1" in masked.name


def test_dynamics_agree_with_inner_env_on_kept_indices():
    """Same keys, same actions: the masked env is the inner env, observed less.

    Both envs run side by side in one jitted scan (one program, not 600 calls
    from Python); every step's outputs are compared afterwards."""
    env, params = cartpole()
    masked = mask_velocity(env)
    key = jax.random.key(3)
    obs, state = env.reset(key, params)
    mobs, mstate = masked.reset(key, params)
    np.testing.assert_array_equal(mobs, obs[jnp.array([0, 2])])

    def step(carry, t):
        state, mstate = carry
        k = jax.random.fold_in(key, t)
        action = jax.random.randint(jax.random.fold_in(k, 1), (), 0, 2)
        out = env.step(k, state, action, params)
        mout = masked.step(k, mstate, action, params)
        return (out[1], mout[1]), (out, mout)

    # 600 steps cross several episode ends (terminations and resets).
    _, (out, mout) = jax.jit(lambda c: jax.lax.scan(step, c, jnp.arange(600)))((state, mstate))
    obs, states, reward, term, trunc, info = jax.device_get(out)
    mobs, mstates, mreward, mterm, mtrunc, minfo = jax.device_get(mout)
    jax.tree.map(np.testing.assert_array_equal, mstates, states)
    np.testing.assert_array_equal(mobs, obs[:, [0, 2]])
    np.testing.assert_array_equal(minfo["final_observation"], info["final_observation"][:, [0, 2]])
    np.testing.assert_array_equal(mreward, reward)
    np.testing.assert_array_equal(mterm, term)
    np.testing.assert_array_equal(mtrunc, trunc)
    assert int(np.sum(term | trunc)) >= 10


def test_time_limit_truncates_and_sampler_keeps_its_bound():
    env, params = cartpole()
    params = params.replace(max_steps_in_episode=20)
    masked = mask_velocity(env)
    # gymnax's own time limit is inherited, so the sampler's bound still applies.
    assert truncation_bound(masked, params, 128) == truncation_bound(env, params, 128) == 7
    agent = js.agents.RandomAgent(masked.action_space(params))
    sampler = js.make_sampler(masked, params, agent, js.BatchSpec(T=64, B=3), bootstrap_value=True)
    plain = js.make_sampler(env, params, agent, js.BatchSpec(T=64, B=3), bootstrap_value=True)
    collect = jax.jit(sampler.collect)
    state = sampler.init(jax.random.key(1), ())
    pstate = plain.init(jax.random.key(1), ())
    _, batch = collect(state, ())
    _, pbatch = jax.jit(plain.collect)(pstate, ())
    s, p = batch.samples.env, pbatch.samples.env
    assert s.observation.shape == (64, 3, 2)
    assert sampler.examples.env.observation.shape == (2,)
    np.testing.assert_array_equal(s.observation, p.observation[..., jnp.array([0, 2])])
    np.testing.assert_array_equal(s.reward, p.reward)
    np.testing.assert_array_equal(s.truncated, p.truncated)
    np.testing.assert_array_equal(s.terminated, p.terminated)
    assert np.asarray(s.truncated).any()  # the 20-step limit truncates
    keep = np.asarray(~(s.terminated & ~s.truncated))
    np.testing.assert_array_equal(
        np.asarray(s.final_observation)[keep],
        np.asarray(p.final_observation)[..., [0, 2]][keep],
    )


@pytest.mark.parametrize("name", sorted(VELOCITY_INDICES))
def test_mask_velocity_known_envs(name):
    env, params = gymnax.make(name)
    masked = mask_velocity(env)
    obs, _ = masked.reset(jax.random.key(0), params)
    full = env.reset(jax.random.key(0), params)[0].shape[-1]
    assert obs.shape == (full - len(VELOCITY_INDICES[name]),)
    assert masked.observation_space(params).shape == obs.shape


def test_custom_truncation_is_delegated():
    env, params = cartpole()

    class ShortCartPole(type(env)):
        def is_truncated(self, state, params):
            return state.time >= 5

    masked = MaskObservation(ShortCartPole(), (0,))
    # The sampler cannot assume gymnax's limit for this env: one slot per step.
    assert truncation_bound(masked, params, 16) == 16
    _, state = masked.reset(jax.random.key(0), params)
    truncs = []
    for t in range(5):
        _, state, _, _, trunc, _ = masked.step(jax.random.key(t), state, 0, params)
        truncs.append(bool(trunc))
    assert truncs[-1]


def test_errors():
    env, _ = cartpole()
    with pytest.raises(ValueError, match="keep_indices"):
        MaskObservation(env, (0, 4))
    with pytest.raises(ValueError, match="keep_indices"):
        MaskObservation(env, ())
    with pytest.raises(ValueError, match="keep_indices"):
        MaskObservation(env, (1, 1))
    with pytest.raises(TypeError, match="keep_indices"):
        MaskObservation(env, (0.5,))
    with pytest.raises(TypeError, match="gymnax Environment"):
        MaskObservation(object(), (0,))
    catch, _ = gymnax.make("Catch-bsuite")
    with pytest.raises(ValueError, match="mask_velocity"):
        mask_velocity(catch)

"""Pytree (dict) observations go through collect like arrays do."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import environment, spaces

import jaxsample as js


class DictCartPole(environment.Environment):
    """CartPole whose observation is ``{"position": [2], "velocity": [2]}``."""

    def __init__(self) -> None:
        super().__init__()
        self.inner, _ = gymnax.make("CartPole-v1")

    @property
    def default_params(self):
        return self.inner.default_params

    @staticmethod
    def _split(obs: jax.Array) -> dict[str, jax.Array]:
        return {"position": obs[jnp.array([0, 2])], "velocity": obs[jnp.array([1, 3])]}

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = self.inner.step_env(key, state, action, params)
        return self._split(obs), state, reward, terminated, info

    def reset_env(self, key, params):
        obs, state = self.inner.reset_env(key, params)
        return self._split(obs), state

    def action_space(self, params=None) -> spaces.Discrete:
        return self.inner.action_space(params)


@pytest.mark.slow  # ~9 s; the Jumanji reference test keeps pytree observations in the default set
def test_dict_observations_match_the_flat_env() -> None:
    flat_env, params = gymnax.make("CartPole-v1")
    params = params.replace(max_steps_in_episode=9)  # several truncations per batch
    dict_env = DictCartPole()
    agent = js.agents.RandomAgent(flat_env.action_space(params))
    spec = js.BatchSpec(20, 3)
    flat = js.make_sampler(flat_env, params, agent, spec, max_decorrelation_steps=4)
    tree = js.make_sampler(dict_env, params, agent, spec, max_decorrelation_steps=4)
    # The built-in env's time limit bounds its truncations: ceil(20 / 9) slots.
    # A custom env's time bookkeeping is its own: a slot per step (exact for any env).
    assert (flat._finals.slots, tree._finals.slots) == (3, 20)
    s_flat = jax.jit(flat.init)(jax.random.key(0), ())
    s_tree = jax.jit(tree.init)(jax.random.key(0), ())
    truncations, flat_collect, tree_collect = 0, jax.jit(flat.collect), jax.jit(tree.collect)
    for _ in range(2):
        s_flat, b_flat = flat_collect(s_flat, ())
        s_tree, b_tree = tree_collect(s_tree, ())
        for field in ("observation", "final_observation"):
            f = np.asarray(getattr(b_flat.samples.env, field))
            t = jax.tree.map(np.asarray, getattr(b_tree.samples.env, field))
            assert set(t) == {"position", "velocity"}
            np.testing.assert_array_equal(t["position"], f[..., [0, 2]], err_msg=field)
            np.testing.assert_array_equal(t["velocity"], f[..., [1, 3]], err_msg=field)
        np.testing.assert_array_equal(b_tree.samples.env.reward, b_flat.samples.env.reward)
        truncations += int(b_tree.samples.env.truncated.sum())
    assert truncations >= 3
    assert tree.examples.env.observation["position"].shape == (2,)


def test_dict_observations_in_wait_mode_with_dense_store() -> None:
    env = DictCartPole()
    params = env.default_params.replace(max_steps_in_episode=7)
    agent = js.agents.RandomAgent(env.action_space(params))
    sampler = js.make_sampler(
        env, params, agent, js.BatchSpec(10, 2), reset_mode="wait", final_observation="dense"
    )
    state = sampler.init(jax.random.key(1), ())
    state, batch = jax.jit(sampler.collect)(state, ())
    valid = np.asarray(batch.samples.valid)
    assert (~valid).any()
    for leaf in jax.tree.leaves(batch.samples.env.observation):
        assert np.all(np.asarray(leaf)[~valid] == 0)  # idle steps are zeros
    final = batch.samples.env.final_observation
    obs = batch.samples.env.observation
    done = np.asarray(batch.samples.env.done)
    for key in ("position", "velocity"):
        nxt = np.asarray(obs[key])[1:]
        keep = ~done[:-1]
        np.testing.assert_array_equal(np.asarray(final[key])[:-1][keep], nxt[keep])

"""Every registered gymnax env through ``jaxsample.make_sampler``: the batch's
shapes and dtypes against the env's own spaces, ``sampler.examples`` against a
step of the batch, no NaN, and no retrace on the returned state (one env of
each family in the default run, every other one in the slow set).
"""

from __future__ import annotations

import chex
import gymnax
import gymnax.utils.load_mnist
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsample as js


def _fake_mnist(directory="/tmp/mnist"):
    del directory
    rng = np.random.default_rng(0)
    images = rng.integers(-128, 128, (64, 28, 28), dtype=np.int8)
    labels = rng.integers(0, 10, (64,), dtype=np.uint8)
    return (images, labels), (images[:16], labels[:16])


ENV_NAMES = list(gymnax.registered_envs)
# One env of each family in the default run (discrete and Box actions, vector
# and image observations); every other registered env is in the slow set.
DEFAULT_ENVS = (
    "CartPole-v1",
    "Pendulum-v1",
    "Breakout-MinAtar",
    "DiscountingChain-bsuite",
    "GaussianBandit-misc",
)


def _aval_changes(before, after) -> list[str]:
    """Leaves whose abstract value (shape, dtype, weak type) differs: a retrace."""
    a = jax.tree_util.tree_flatten_with_path(jax.tree.map(jax.typeof, before))[0]
    b = jax.tree.leaves(jax.tree.map(jax.typeof, after))
    return [
        f"{jax.tree_util.keystr(k)}: {x} -> {y}" for (k, x), y in zip(a, b, strict=True) if x != y
    ]


@pytest.mark.parametrize(
    "name",
    [n if n in DEFAULT_ENVS else pytest.param(n, marks=pytest.mark.slow) for n in ENV_NAMES],
)
def test_every_registered_env(name, monkeypatch):
    if name == "MNISTBandit-bsuite":
        # It downloads MNIST when constructed; there is no network here.
        monkeypatch.setattr(gymnax.utils.load_mnist, "load_mnist", _fake_mnist)
    if name == "Swimmer-misc":
        # gymnax's own Swimmer.step_env broadcasts [2] against [5, 2]
        # (gymnax/environments/misc/swimmer.py); not the sampler's doing.
        with jax.numpy_rank_promotion("allow"):
            _check_env(name)
    else:
        _check_env(name)


def _check_env(name):
    env, env_params = gymnax.make(name)
    space = env.action_space(env_params)
    sampler = js.make_sampler(
        env, env_params, js.agents.RandomAgent(space), js.BatchSpec(4, 2), discount=0.9
    )
    traces = []

    def counted(state, p):
        traces.append(1)
        return sampler.collect(state, p)

    collect = jax.jit(counted)
    state0 = jax.jit(sampler.init)(jax.random.key(0), ())
    state1, first = collect(state0, ())
    _, batch = collect(state1, ())

    obs_spec, _ = jax.eval_shape(env.reset, jax.random.key(0), env_params)
    act_spec = jax.eval_shape(space.sample, jax.random.key(0))
    for b in (first, batch):
        s = b.samples
        chex.assert_trees_all_equal_shapes_and_dtypes(
            s.env.observation,
            jax.tree.map(lambda x: jnp.zeros((4, 2, *x.shape), x.dtype), obs_spec),
        )
        chex.assert_trees_all_equal_shapes_and_dtypes(s.env.final_observation, s.env.observation)
        chex.assert_trees_all_equal_shapes_and_dtypes(
            s.agent.action,
            jax.tree.map(lambda x: jnp.zeros((4, 2, *x.shape), x.dtype), act_spec),
        )
        chex.assert_trees_all_equal_shapes_and_dtypes(s.agent.prev_action, s.agent.action)
        for x, dtype in (
            (s.env.reward, jnp.float32),
            (s.env.prev_reward, jnp.float32),
            (s.env.terminated, jnp.bool_),
            (s.env.truncated, jnp.bool_),
            (s.env.done, jnp.bool_),
            (s.valid, jnp.bool_),
            (b.traj_infos.completed, jnp.bool_),
            (b.traj_infos.length, jnp.int32),
            (b.traj_infos.episode_return, jnp.float32),
            (b.traj_infos.discounted_return, jnp.float32),
            (b.traj_infos.nonzero_rewards, jnp.int32),
        ):
            assert x.shape == (4, 2) and x.dtype == dtype, (x.shape, x.dtype)
        # sampler.examples describes one step of these samples.
        one_step = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape[2:], x.dtype),
            (s.env.observation, s.env.final_observation, s.agent.action, s.env.env_info),
        )
        ex = sampler.examples
        assert one_step == (
            ex.env.observation,
            ex.env.final_store,
            ex.agent.action,
            ex.env.env_info,
        )
        for leaf in jax.tree.leaves(b):
            leaf = np.asarray(leaf)
            if np.issubdtype(leaf.dtype, np.floating):
                assert not np.isnan(leaf).any(), name
        assert np.asarray(b.traj_infos.length).min() >= 1
    # docs/design.md: a second collect on the returned state must not retrace.
    assert len(traces) == 1, (
        "the second collect on the returned state retraced; SamplerState leaves "
        f"changed: {_aval_changes(state0, state1)}"
    )

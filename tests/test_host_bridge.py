"""``jaxsample.host.make_bridge``: a host vector env driven from inside ``jax.jit``.

A jitted ``lax.scan`` rollout steps the bridge; every output is compared with a
plain Python loop over one gymnasium env per rank (seeded with
``jaxsample.host.env_seeds``, reset at once after a done step), for each
gymnasium autoreset mode and for envpool.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import Crash, crashing

from jaxsample import host

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*precision lowered by casting to float32:UserWarning"
)

T, B, LIMIT = 16, 4, 16
KEY = jax.random.key(4)


def make_single() -> gym.Env:
    return gym.make("CartPole-v1", max_episode_steps=LIMIT)


def make_env(backend: str):
    if backend == "envpool":
        return host.envpool_factory("CartPole-v1", max_episode_steps=LIMIT)
    return gym.vector.SyncVectorEnv([make_single] * B, autoreset_mode=backend)


def rollout(bridge: host.HostEnvBridge, obs: jax.Array, key: jax.Array):
    """T steps of random actions, as a jitted training step would take them."""

    def body(obs, t):
        keys = jax.random.split(jax.random.fold_in(key, t), B)
        action = jax.vmap(bridge.action_space.sample)(keys)
        step = bridge.step(action)
        return step.observation, (obs, action, step)

    return jax.lax.scan(body, obs, jnp.arange(T))


class OneEnvpool:
    """envpool's CartPole as one env (a pool of one), seeded at creation."""

    def __init__(self, seed: int):
        import envpool

        self.pool = envpool.make(
            "CartPole-v1", env_type="gymnasium", num_envs=1, seed=[seed], max_episode_steps=LIMIT
        )

    def reset(self):
        return self.pool.reset()[0][0], {}

    def step(self, action):
        o, r, te, tr, info = self.pool.step(np.asarray([action], np.int32))
        return o[0], r[0], bool(te[0]), bool(tr[0]), info


def reference(backend: str, actions: np.ndarray, seeds: list[int]) -> dict[str, np.ndarray]:
    """One env per rank in a plain loop, with the given actions."""
    out = {k: [] for k in ("obs", "next", "final", "reward", "terminated", "truncated")}
    if backend == "envpool":
        envs = [OneEnvpool(s) for s in seeds]
        obs = [env.reset()[0] for env in envs]
    else:
        envs = [make_single() for _ in seeds]
        obs = [env.reset(seed=s)[0] for env, s in zip(envs, seeds, strict=True)]
    for t in range(actions.shape[0]):
        row = {k: [] for k in out}
        for b, env in enumerate(envs):
            row["obs"].append(obs[b])
            o, r, te, tr, _ = env.step(int(actions[t, b]))
            row["final"].append(o)
            if te or tr:
                o = env.reset()[0]
            obs[b] = o
            for k, v in (("next", o), ("reward", r), ("terminated", te), ("truncated", tr)):
                row[k].append(v)
        for k in out:
            out[k].append(np.stack(row[k]))
    return {k: np.stack(v) for k, v in out.items()}


@functools.cache
def bridged(backend: str):
    """Two jitted rollouts of T steps after a jitted reset: the second continues
    the first (the callbacks are ordered across calls)."""
    bridge = host.make_bridge(make_env(backend), B)
    obs = jax.jit(bridge.reset)(KEY)
    run = jax.jit(functools.partial(rollout, bridge))
    obs1, first = run(obs, jax.random.key(1))
    _, second = run(obs1, jax.random.key(2))
    assert run._cache_size() == 1
    return bridge, jax.device_get(jax.tree.map(lambda a, b: jnp.concatenate([a, b]), first, second))


@pytest.mark.parametrize("backend", ["SameStep", "NextStep", "Disabled", "envpool"])
def test_jitted_rollout_matches_a_plain_loop(backend):
    bridge, (obs, action, step) = bridged(backend)
    assert bridge.autoreset_mode == ("NextStep" if backend == "envpool" else backend)
    ref = reference(backend, np.asarray(action), host.env_seeds(KEY, range(B)))
    np.testing.assert_array_equal(obs, ref["obs"])
    np.testing.assert_array_equal(step.observation, ref["next"])
    np.testing.assert_array_equal(step.final_observation, ref["final"])
    np.testing.assert_array_equal(step.reward, ref["reward"])
    np.testing.assert_array_equal(step.terminated, ref["terminated"])
    np.testing.assert_array_equal(step.truncated, ref["truncated"])
    assert step.observation.dtype == np.float32 and step.reward.dtype == np.float32
    # Both kinds of episode end happened, and the true final observation of a
    # done step is not the reset observation the agent sees next.
    done = ref["terminated"] | ref["truncated"]
    assert ref["terminated"].any() and ref["truncated"].any()
    assert not np.any(np.all(step.final_observation[done] == step.observation[done], axis=-1))


def test_autoreset_modes_agree():
    outs = [bridged(m)[1] for m in ("SameStep", "NextStep", "Disabled")]
    for other in outs[1:]:
        for a, b in zip(jax.tree.leaves(outs[0]), jax.tree.leaves(other), strict=True):
            np.testing.assert_array_equal(a, b)


def test_bridge_errors():
    bridge = host.make_bridge(make_env("SameStep"), B)
    with pytest.raises(ValueError, match=r"action must be int32\[4\]"):
        bridge.step(jnp.zeros((B,), jnp.float32))
    bridge.reset(KEY)  # eagerly, outside jit, too
    with pytest.raises(ValueError, match="vmap"):
        jax.vmap(bridge.step)(jnp.zeros((2, B), jnp.int32))
    fresh = host.make_bridge(host.gymnasium_factory("CartPole-v1"), B)
    with pytest.raises(Exception, match="before reset"):
        jax.block_until_ready(fresh.step(jnp.zeros((B,), jnp.int32)))
    with pytest.raises(TypeError, match="num_envs is required"):
        host.make_bridge(host.gymnasium_factory("CartPole-v1"))
    with pytest.raises(ValueError, match=r"num_envs=4, but batch_spec\.B=2"):
        host.make_bridge(make_env("SameStep"), 2)


def test_env_crash_stops_later_rollouts_until_reset():
    """An env that raises mid-rollout has advanced steps whose outputs were
    never returned: the next rollout fails with an error naming the crash
    instead of running on, until ``reset``."""

    vec = gym.vector.SyncVectorEnv([lambda: crashing(make_single())] * B, autoreset_mode="SameStep")
    bridge = host.make_bridge(vec, B)
    run = jax.jit(functools.partial(rollout, bridge))
    reset = jax.jit(bridge.reset)
    obs = reset(KEY)
    obs, _ = jax.block_until_ready(run(obs, jax.random.key(1)))
    Crash.on = True
    with pytest.raises(Exception, match="simulator crashed"):
        jax.block_until_ready(run(obs, jax.random.key(2)))
    Crash.on = False
    with pytest.raises(Exception, match=r"after the host env failed \(OSError: simulator"):
        jax.block_until_ready(run(obs, jax.random.key(3)))
    obs = reset(KEY)
    jax.block_until_ready(run(obs, jax.random.key(3)))  # reset starts again

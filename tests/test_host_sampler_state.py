"""``jaxsample.host.make_host_sampler``: determinism and seeding, the state
after an error (kept when the envs have not moved, invalidated when they
have), continuous actions, the packed record, and bad input and missing
extras named early. The reference cases are tests/test_host_sampler.py's.
"""

from __future__ import annotations

import importlib
import sys

import gymnasium as gym
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import CounterAgent, Crash, crashing
from helpers import counter_params as params
from test_host_sampler import (
    CASES,
    KEY,
    LIMIT,
    WS,
    B,
    case_sampler,
    collect,
    make_single,
    make_vec,
    run,
    sampler_of,
)

import jaxsample as js
from jaxsample import host

pytestmark = pytest.mark.filterwarnings(
    # envpool builds its Box spaces from float64 bounds
    "ignore:.*precision lowered by casting to float32:UserWarning"
)


# ----------------------------------------------------------------------------
# Determinism, seeding, state handling, retracing
# ----------------------------------------------------------------------------


def test_same_key_same_samples_other_key_other_samples():
    sampler = sampler_of("auto-nextstep")
    _, a = collect(sampler, ws=WS[:2])
    _, b = collect(sampler, ws=WS[:2])
    _, c = collect(sampler, key=jax.random.key(99), ws=WS[:2])
    for x, y, z in zip(a, b, c, strict=True):
        for lx, ly in zip(jax.tree.leaves(x), jax.tree.leaves(y), strict=True):
            np.testing.assert_array_equal(lx, ly)
        assert not np.array_equal(x.samples.env.observation, z.samples.env.observation)
    # A fresh init gives the cached run's stream (nothing leaks between inits).
    cached = run("auto-nextstep")[0].samples.env.observation
    np.testing.assert_array_equal(a[0].samples.env.observation, cached)


def test_env_seeds_come_from_the_global_rank():
    key = jax.random.key(5)
    seeds = host.env_seeds(key, range(6))
    assert len(set(seeds)) == 6 and all(0 <= s < 2**31 for s in seeds)
    # A rank's seed does not depend on which other ranks a process holds.
    assert host.env_seeds(key, [4, 1]) == [seeds[4], seeds[1]]
    # No rlpyt-style overlap between neighbouring run seeds.
    other = host.env_seeds(jax.random.key(6), range(6))
    assert not set(seeds) & set(other)


def test_stale_state_and_no_retrace():
    sampler = sampler_of("auto-samestep")
    state = sampler.init(KEY, params(1.0))
    new, _ = sampler.collect(state, params(1.0))
    with pytest.raises(ValueError, match="stale"):
        sampler.collect(state, params(1.0))
    for w in (3.0, 4.0, 5.0):
        new, batch = sampler.collect(new, params(w))
    # New params every call, one compilation of each device function.
    for fn in (sampler._device.act, sampler._device.finish, sampler._device.begin):
        assert fn._cache_size() == 1
    values = np.asarray(batch.samples.agent.agent_info["value"])
    assert values.dtype == np.float32 and np.isfinite(values).all()
    with pytest.raises(TypeError, match="HostSamplerState"):
        sampler.collect({"not": "a state"}, params(1.0))
    with pytest.raises(ValueError, match="another host sampler"):
        sampler_of("auto-nextstep").collect(new, params(1.0))


def test_check_params_as_the_jax_sampler():
    """``check_params`` (the JAX Sampler's name): the known parameters pass,
    others of another structure raise a TypeError naming agent_params."""
    sampler = sampler_of("wait-samestep")
    sampler.check_params(params(3.0))
    with pytest.raises(TypeError, match="agent_params"):
        sampler.check_params({"other": jnp.zeros((3,))})


def _leaves_equal(a, b) -> None:
    def raw(x):
        return jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x

    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(raw(x)), np.asarray(raw(y)))


@pytest.mark.parametrize("name", ["auto-samestep", "auto-nextstep"])
def test_agent_error_before_the_envs_move_keeps_the_state(name):
    """A collect whose agent fails at its first step (params without "w") moved
    no env: its state stays valid, and retrying with good params gives exactly
    the batches of an uninterrupted run."""
    sampler = sampler_of(name)
    runs = []
    for fail in (False, True):
        state = sampler.init(KEY, params(1.0))
        batches = []
        for i, w in enumerate(WS):
            if fail and i > 0:
                with pytest.raises(KeyError, match="'w'"):
                    sampler.collect(state, {"v": jnp.float32(w)})
            state, batch = sampler.collect(state, params(w))
            batches.append(batch)
        runs.append((batches, state))
    _leaves_equal(*runs)


def test_error_after_the_envs_move_invalidates_the_state():
    """In "episodic" mode the envs are reset before the agent's first step, so
    an agent error there loses the state; so does an env that raises mid-batch.
    The next collect names what happened; init starts again."""
    sampler = sampler_of("episodic-nextstep-ranks")
    state = sampler.init(KEY, params(1.0))
    with pytest.raises(KeyError, match="'w'"):
        sampler.collect(state, {"v": jnp.float32(1.0)})
    with pytest.raises(ValueError, match=r"stale: an error interrupted the envs.*KeyError"):
        sampler.collect(state, params(1.0))

    # the "auto-samestep" case on envs that crash: its programs are compiled already
    vec = gym.vector.SyncVectorEnv([lambda: crashing(make_single())] * B, autoreset_mode="SameStep")
    sampler = case_sampler(CASES["auto-samestep"], vec)
    state, _ = sampler.collect(sampler.init(KEY, params(1.0)), params(1.0))
    Crash.on = True
    with pytest.raises(OSError, match="simulator crashed"):
        sampler.collect(state, params(1.0))
    Crash.on = False
    with pytest.raises(ValueError, match=r"interrupted the envs.*OSError: simulator crashed"):
        sampler.collect(state, params(1.0))
    state = sampler.init(KEY, params(1.0))
    sampler.collect(state, params(1.0))  # init starts again


def test_continuous_actions_reach_the_env():
    """A Box action space (Pendulum): the agent's float actions are the ones the
    env applied — each reward re-computed from the recorded observation and
    action with Pendulum's cost — and truncations keep their true final
    observation (dense store)."""
    vec = gym.vector.SyncVectorEnv(
        [lambda: gym.make("Pendulum-v1", max_episode_steps=5)] * 2, autoreset_mode="NextStep"
    )
    space = host.gymnax_space(vec.single_action_space)
    assert isinstance(space, gymnax.environments.spaces.Box) and space.shape == (1,)
    sampler = host.make_host_sampler(
        vec,
        js.agents.RandomAgent(space),
        js.BatchSpec(8, 2),
        max_decorrelation_steps=3,
        final_observation="dense",
    )
    state = sampler.init(KEY, ())
    batches = []
    for _ in range(2):
        state, batch = sampler.collect(state, ())
        batches.append(jax.device_get(batch))
    obs = np.concatenate([b.samples.env.observation for b in batches])
    action = np.concatenate([b.samples.agent.action for b in batches])
    reward = np.concatenate([b.samples.env.reward for b in batches])
    final = np.concatenate([b.samples.env.final_observation for b in batches])
    trunc = np.concatenate([b.samples.env.truncated for b in batches])
    assert action.shape == (16, 2, 1) and action.dtype == np.float32
    assert np.all(np.abs(action) <= 2.0) and np.unique(action).size > 10
    theta = np.arctan2(obs[..., 1], obs[..., 0])
    u = action[..., 0]
    cost = theta**2 + 0.1 * obs[..., 2] ** 2 + 0.001 * u**2
    np.testing.assert_allclose(reward, -cost, rtol=1e-4, atol=1e-4)
    # Truncated every 5 steps; the final observation is not the next (reset) one.
    assert trunc.sum() >= 4
    t, b = np.nonzero(trunc[:-1])
    assert not np.any(np.all(final[t, b] == obs[t + 1, b], axis=-1))
    state.env.close()


def test_packed_record_round_trip():
    """The per-step record (action, agent_info, stored state) travels bit-packed
    in one uint32 buffer; every dtype comes back exactly."""
    from jaxsample.host.device import Record, pack, unpack

    rng = np.random.default_rng(0)
    record = Record(
        action=rng.integers(-5, 5, (B, 2)).astype(np.int32),
        agent_info={
            "flag": rng.random((B,)) > 0.5,
            "small": rng.integers(-128, 127, (B, 3)).astype(np.int8),
            "byte": rng.integers(0, 255, (B,)).astype(np.uint8),
            "half": rng.normal(size=(B, 2)).astype(np.float16),
            "value": rng.normal(size=(B,)).astype(np.float32),
            "bits": rng.integers(0, 2**32, (B,), dtype=np.uint64).astype(np.uint32),
        },
        agent_state=(rng.integers(-(2**15), 2**15, (B, 1)).astype(np.int16),),
    )
    spec = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), record)
    packed = jax.jit(pack)(record)
    assert packed.dtype == jnp.uint32 and packed.shape == (B, 2 + 1 + 3 + 1 + 2 + 1 + 1 + 1)
    stacked = jnp.stack([packed, packed])  # [T=2, B, K]
    back = jax.jit(lambda p: unpack(p, spec))(stacked)
    for x, y in zip(jax.tree.leaves(record), jax.tree.leaves(back), strict=True):
        assert y.dtype == x.dtype and y.shape == (2, *x.shape)
        np.testing.assert_array_equal(np.asarray(y[1]), x)


def test_sparse_store_overflow_is_an_error():
    """An env that truncates more often than its spec's time limit says
    overflows the sparse store: a clear error, not dropped observations."""

    class EveryTwo(gym.Wrapper):
        def reset(self, **kwargs):
            self.n = 0
            return self.env.reset(**kwargs)

        def step(self, action):
            self.n += 1
            obs, reward, terminated, _, info = self.env.step(action)
            return obs, reward, terminated, self.n % 2 == 0, info

    vec = gym.vector.SyncVectorEnv(
        [lambda: EveryTwo(gym.make("CartPole-v1", max_episode_steps=LIMIT))] * 2,
        autoreset_mode="SameStep",
    )
    agent = js.agents.RandomAgent(gymnax.environments.spaces.Discrete(2))
    sampler = host.make_host_sampler(vec, agent, js.BatchSpec(8, 2))
    state = sampler.init(KEY, ())
    with pytest.raises(RuntimeError, match="final_observation='dense'"):
        sampler.collect(state, ())


# ----------------------------------------------------------------------------
# Bad input, optional dependencies
# ----------------------------------------------------------------------------


def _make(**kwargs):
    env = kwargs.pop("env", None) or make_vec("SameStep", n=2)
    agent = kwargs.pop("agent", CounterAgent(gymnax.environments.spaces.Discrete(2)))
    spec = kwargs.pop("spec", js.BatchSpec(4, 2))
    return host.make_host_sampler(env, agent, spec, agent_params=params(1.0), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"spec": js.BatchSpec(0, 2)}, ValueError, "batch_spec.T"),
        ({"spec": js.BatchSpec(4, 3)}, ValueError, "num_envs=2, but batch_spec.B=3"),
        ({"reset_mode": "bogus"}, ValueError, "reset_mode"),
        ({"max_decorrelation_steps": -1}, ValueError, "max_decorrelation_steps"),
        ({"max_decorrelation_steps": 3, "reset_mode": "episodic"}, ValueError, "episodic"),
        ({"discount": 1.5}, ValueError, "discount"),
        ({"final_observation": "x"}, ValueError, "final_observation"),
        ({"bootstrap_value": 1}, TypeError, "bootstrap_value"),
        ({"env_ranks": [0, 0]}, ValueError, "env_ranks"),
        ({"autoreset_mode": "Sometimes"}, ValueError, "autoreset_mode"),
        ({"info_spec": {"count": int}}, TypeError, "info_spec"),
        ({"env": "CartPole-v1"}, TypeError, "env must be a gymnasium"),
        ({"agent": object()}, TypeError, "agent must have a method"),
        (
            {"agent": js.agents.RandomAgent(gymnax.environments.spaces.Box(0.0, 1.0, (2,)))},
            ValueError,
            "agent action",
        ),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        _make(**kwargs)


def test_bad_key():
    sampler = sampler_of("auto-samestep")
    with pytest.raises(TypeError, match="key"):
        sampler.init(jax.random.PRNGKey(0), params(1.0))


def test_envpool_instance_needs_a_factory():
    import envpool

    pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2, seed=0)
    with pytest.raises(TypeError, match="envpool_factory"):
        _make(env=pool)


def test_missing_extras_name_the_extra(monkeypatch):
    with monkeypatch.context() as m:
        m.delattr(gym.vector, "AutoresetMode")  # gymnasium 1.0
        with pytest.raises(ImportError, match=r">= 1.1.*pip install 'jaxsample\[host\]'"):
            host.make_host_sampler(make_vec("SameStep", n=2), None, js.BatchSpec(2, 2))
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    with pytest.raises(ImportError, match=r"pip install 'jaxsample\[host\]'"):
        host.make_host_sampler(object(), None, js.BatchSpec(2, 2))
    with pytest.raises(ImportError, match=r"jaxsample\[host\]"):
        host.make_bridge(object(), 2)
    monkeypatch.setitem(sys.modules, "gymnasium", gym)
    monkeypatch.setitem(sys.modules, "envpool", None)
    with pytest.raises(ImportError, match=r"pip install 'jaxsample\[envpool\]'"):
        host.envpool_factory("CartPole-v1")


def test_host_package_imports_without_envpool_or_new_gymnasium(monkeypatch):
    """jaxsample.host imports (afresh) without envpool and with a gymnasium
    older than 1.1 (gymnax itself needs some gymnasium), and then its functions
    say which extra to install."""
    import jaxsample as jaxsample_pkg

    for name in [m for m in sys.modules if m.startswith("jaxsample.host")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(jaxsample_pkg, "host", None, raising=False)
    monkeypatch.setitem(sys.modules, "envpool", None)
    monkeypatch.delattr(gym.vector, "AutoresetMode")
    fresh = importlib.import_module("jaxsample.host")
    assert fresh is not host and callable(fresh.make_bridge)
    with pytest.raises(ImportError, match=r">= 1.1.*jaxsample\[host\]"):
        fresh.make_host_sampler(None, None, js.BatchSpec(2, 1))
    with pytest.raises(ImportError, match=r"jaxsample\[host\]"):
        fresh.envpool_factory("CartPole-v1")  # envpool needs gymnasium >= 1.1 first

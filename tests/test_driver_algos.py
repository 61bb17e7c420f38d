"""The actor/learner driver's PPO and DQN adapters (jaxsample.algos.drivers) on
the real trainers at small budgets: bit for bit the trainer's own run in sync
mode, an async run replayed exactly from its recorded versions, the replay
ratio held. The schedule itself is tested on toy functions in test_driver.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import no_leftover_driver_threads  # noqa: F401 (an autouse fixture)

from jaxsample import driver as jd
from jaxsample.algos import dqn, drivers, ppo

# One worker builds the module fixtures for all its tests.
pytestmark = pytest.mark.xdist_group("test_driver_algos")

ACTOR, LEARNER = jax.devices()[:2]


PPO_SMALL = ppo.PPOConfig(
    num_envs=4,
    num_steps=32,
    total_timesteps=4 * 32 * 6,
    update_epochs=2,
    num_minibatches=2,
    hidden_sizes=(16,),
)
DQN_SMALL = dqn.DQNConfig(
    num_envs=4,
    total_timesteps=4 * 60,
    learning_starts=40,
    target_update_interval=20,
    buffer_capacity=50,
    batch_size=16,
    hidden_sizes=(16,),
)


def jitted_init(d: jd.Driver) -> jd.Driver:
    """``d`` with its adapter's ``init(key, num_actors)`` jitted: the same
    function, compiled as one program instead of op by op (with XLA's usual
    optimizations, as the trainer's own ``train`` compiles it: bit for bit)."""
    return d.replace(init=jax.jit(d.options.init, static_argnums=1))


def tree_equal(a, b) -> bool:
    def host(x):
        if jax.dtypes.issubdtype(jnp.result_type(x), jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x)

    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.array_equal(host(x), host(y), equal_nan=True) for x, y in zip(la, lb, strict=True)
    )


@pytest.fixture(scope="module")
def ppo_trainer():
    return ppo.make_train(PPO_SMALL)


@pytest.fixture(scope="module")
def ppo_drivers(ppo_trainer):
    """Drivers that share compiled functions (one jit per driver object)."""
    base = drivers.ppo_driver(
        ppo_trainer, refresh=False, actor_devices=[ACTOR], learner_device=LEARNER
    )
    base = jitted_init(base)
    return {"async": base, "sync": base.replace(mode="sync")}


@pytest.mark.slow
def test_ppo_sync_with_one_buffer_is_trainer_run_bit_for_bit(ppo_trainer, ppo_drivers):
    key = jax.random.key(3)
    ref_state, ref_metrics = jax.jit(ppo_trainer.train)(key)
    d = ppo_drivers["sync"].replace(num_buffers=1)
    r = d.train(key)
    s = r.learner_state
    assert tree_equal(s.params, ref_state.params)
    assert tree_equal(s.opt_state, ref_state.opt_state)
    assert tree_equal(s.metrics, ref_state.metrics)
    assert tree_equal(r.actor_states[0], ref_state.sampler_state)
    assert tree_equal(r.metrics, ref_metrics)
    assert r.records["staleness"].tolist() == [0] * ppo_trainer.num_iterations


@pytest.mark.slow
def test_ppo_sync_mode_reproduces_itself(ppo_drivers):
    d = ppo_drivers["sync"]
    a = d.train(jax.random.key(5))
    b = d.train(jax.random.key(5))
    assert tree_equal(a.learner_state, b.learner_state)
    assert tree_equal(a.actor_states, b.actor_states)
    assert tree_equal(a.metrics, b.metrics)
    assert a.records["staleness"].tolist() == [0] + [1] * (len(a.records["index"]) - 1)
    c = d.train(jax.random.key(6))
    assert not tree_equal(a.learner_state.params, c.learner_state.params)


def test_ppo_async_run_is_replayed_exactly_from_its_versions(ppo_trainer, ppo_drivers):
    """Recollect every batch of an async run serially, each with the parameters
    of the version the run recorded for it, and relearn them: the same final
    actor and learner states, bit for bit."""
    base = ppo_drivers["async"]
    published = []

    def publish(state):
        published.append(jax.device_get(state.params))
        return state.params

    d = base.replace(publish=publish)
    key = jax.random.key(7)
    n = ppo_trainer.num_iterations
    r = d.train(key, n)
    assert r.published == list(range(n + 1))
    params_of = dict(zip(r.published, published, strict=True))
    assert r.records["staleness"].max() <= 1

    learner, actors = d.options.init(key, 1)
    actor = jax.device_put(actors[0], ACTOR)
    learner = jax.device_put(learner, LEARNER)
    for i, version in enumerate(r.records["version"]):
        params = jax.device_put(params_of[int(version)], ACTOR)
        actor, batch = d.programs.collect(actor, params, np.int32(i))
        learner, _ = d.programs.learn(learner, jax.device_put(batch, LEARNER))
    assert tree_equal(actor, r.actor_states[0])
    assert tree_equal(learner, r.learner_state)
    # one compiled program each, for every batch and version
    assert d.programs.collect._cache_size() == 1 and d.programs.learn._cache_size() == 1


# the feedforward case (agent.evaluate) is slow; the recurrent one (evaluate_sequence) stays
@pytest.mark.parametrize("recurrent", [pytest.param(False, marks=pytest.mark.slow), True])
def test_refresh_behaviour_with_the_collecting_params_changes_nothing(recurrent):
    """Re-evaluating a batch under the parameters that collected it gives back
    its log-probabilities, values and (where read) bootstrap values."""
    config = ppo.PPOConfig(
        num_envs=4,
        num_steps=64,
        total_timesteps=256,
        recurrent=recurrent,
        rnn_hidden_size=8,
        mask_velocity=recurrent,
    )
    trainer = ppo.make_train(config)
    init = jax.jit(trainer.init)
    state = init(jax.random.key(0))
    refresh = jax.jit(lambda params, b: drivers.refresh_behaviour(trainer, params, b))
    _, batch = jax.jit(trainer.sampler.collect)(state.sampler_state, state.params)
    fresh = refresh(state.params, batch)
    old, new = batch.samples.agent.agent_info, fresh.samples.agent.agent_info
    assert bool(batch.samples.env.done.any())  # resets inside the batch are exercised
    np.testing.assert_allclose(new.log_prob, old.log_prob, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(new.value, old.value, rtol=1e-5, atol=1e-5)
    read = ~np.asarray(batch.samples.env.done[-1])  # GAE reads the bootstrap only there
    np.testing.assert_allclose(
        np.asarray(fresh.samples.bootstrap_value)[read],
        np.asarray(batch.samples.bootstrap_value)[read],
        rtol=1e-5,
        atol=1e-5,
    )
    # and under other parameters they do change
    moved = refresh(init(jax.random.key(1)).params, batch)
    assert not np.allclose(moved.samples.agent.agent_info.value, old.value)


def test_ppo_async_two_actors(ppo_drivers):
    # two actor threads on one device: nothing compiles for another device
    d = ppo_drivers["async"].replace(actor_devices=[ACTOR, ACTOR])
    r = d.train(jax.random.key(0), 6)
    assert r.records["actor"].tolist() == [0, 1, 0, 1, 0, 1]
    assert r.records["staleness"].max() <= 1
    assert int(r.learner_state.iteration) == 6
    assert r.env_steps == 6 * PPO_SMALL.batch_size
    # the two actors ran different streams of the same envs
    assert not tree_equal(r.actor_states[0].env.observation, r.actor_states[1].env.observation)


@pytest.fixture(scope="module")
def dqn_reference():
    trainer = dqn.make_train(DQN_SMALL)
    key = jax.random.key(3)
    return trainer, key, jax.jit(trainer.train)(key)


@pytest.mark.slow  # the DQN adapter (~18 s cold); PPO's is in the default set
def test_dqn_sync_with_one_buffer_is_trainer_run_bit_for_bit(dqn_reference):
    trainer, key, (ref_state, ref_metrics) = dqn_reference
    d = drivers.dqn_driver(
        trainer, mode="sync", num_buffers=1, actor_devices=[ACTOR], learner_device=LEARNER
    )
    d = jitted_init(d)
    r = d.train(key)
    s = r.learner_state
    assert tree_equal(s.params.network, ref_state.params.network)
    assert tree_equal(s.target_params, ref_state.target_params)
    assert tree_equal(s.replay_state, ref_state.replay_state)
    assert tree_equal(r.actor_states[0], ref_state.sampler_state)
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), r.metrics)
    assert tree_equal(flat, ref_metrics)


@pytest.mark.slow
def test_dqn_async_holds_the_replay_ratio_and_fills_the_replay(dqn_reference):
    """Async with several iterations per batch: every step reaches the replay
    buffer on the learner, and the learner does exactly the synchronous number
    of gradient steps (replay ratio gradient_steps / steps_per_iteration)."""
    c = DQN_SMALL
    trainer, key, (_, ref_metrics) = dqn_reference
    K = 3
    d = drivers.dqn_driver(
        trainer, iterations_per_batch=K, actor_devices=[ACTOR], learner_device=LEARNER
    )
    d = jitted_init(d)
    r = d.train(key)
    n_iter = trainer.num_iterations
    s = r.learner_state
    learning = sum((i + 1) * c.steps_per_iteration >= c.learning_starts for i in range(n_iter))
    assert int(s.updates) == learning * c.gradient_steps
    assert int(s.iteration) == n_iter
    assert r.env_steps == n_iter * c.steps_per_iteration
    assert int(s.metrics.environment_steps.to_int()) == r.env_steps
    assert r.metrics["updates"].shape == (n_iter // K, K)
    np.testing.assert_array_equal(r.metrics["updates"].reshape(-1), ref_metrics["updates"])
    # epsilon followed the batch index: exactly the synchronous schedule
    np.testing.assert_array_equal(
        r.metrics["epsilon_mean"].reshape(-1), ref_metrics["epsilon_mean"]
    )
    assert r.records["staleness"].max() <= 1
    assert s.replay_state.data.valid.devices() == {LEARNER}


@pytest.mark.slow
def test_ppo_async_learns_cartpole():
    """A short async run (5e4 steps, the default PPO, refreshed behaviour) beats a
    random policy's ~22 by far; the full-budget scores are in
    ``python -m jaxsample.bench.driver``."""
    trainer = ppo.make_train(ppo.PPOConfig(total_timesteps=50_000))
    d = drivers.ppo_driver(trainer, actor_devices=[ACTOR], learner_device=LEARNER)
    r = d.train(jax.random.key(0))
    assert r.records["staleness"].max() <= 1
    final = float(r.metrics["average_return"][-1])
    print(f"final average_return {final:.1f}, {r.wall_seconds:.1f} s")
    assert final > 100.0, final

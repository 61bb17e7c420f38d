"""The actor/learner driver (jaxsample.driver): schedule, staleness, back-pressure,
determinism, reproducibility, shutdown, and the PPO / DQN adapters
(jaxsample.algos.drivers).

Toy functions first (a counter "env" whose batches record the parameters they
were collected with), then the real trainers at small budgets. Speed is not
measured here (``python -m jaxsample.bench.driver``).
"""

from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsample import driver as jd
from jaxsample.algos import dqn, drivers, ppo

DEVICES = jax.devices()
ACTOR, LEARNER, ACTOR2 = DEVICES[0], DEVICES[1], DEVICES[2]


# ----------------------------------------------------------------------------
# Toy actor and learner
# ----------------------------------------------------------------------------
# Actor state: int32 count of batches collected. Params: int32, the number of
# batches the learner had learned when it published them (= the version).
# Batch: what the actor collected with. Learner state: int32 batches learned.


def toy_collect(count, params, index):
    return count + 1, {"count": count, "params": params, "index": index}


def toy_learn(learned, batch):
    return learned + 1, {
        "count": batch["count"],
        "params": batch["params"],
        "index": batch["index"],
        "learned_before": learned,
    }


def toy_publish(learned):
    return learned


def toy_driver(**kwargs):
    kwargs.setdefault("actor_devices", [ACTOR])
    kwargs.setdefault("learner_device", LEARNER)
    return jd.make_driver(toy_collect, toy_learn, toy_publish, **kwargs)


def toy_states(n_actors=1):
    return jnp.int32(0), [jnp.int32(1000 * a) for a in range(n_actors)]


def driver_threads():
    return [t for t in threading.enumerate() if t.name.startswith(jd.THREAD_PREFIX)]


class Slow:
    """Wraps a jitted function: sleeps ``delay`` s before each call, blocks on
    the result, counts completed calls and records what another counter read at
    each call (for back-pressure checks); ``fail_at`` raises on that call."""

    def __init__(self, fn, delay=0.0, fail_at=None, message="boom"):
        self.fn, self.delay, self.fail_at, self.message = jax.jit(fn), delay, fail_at, message
        self.calls = 0
        self.done = 0
        self.seen: list[tuple[int, int]] = []
        self.other: Slow | None = None

    def __call__(self, *args):
        call = self.calls
        self.calls += 1
        if self.other is not None:
            self.seen.append((call, self.other.done))
        if call == self.fail_at:
            raise ValueError(f"{self.message} at call {call}")
        time.sleep(self.delay)
        out = jax.block_until_ready(self.fn(*args))
        self.done += 1
        return out


@pytest.fixture(autouse=True)
def no_leftover_threads():
    yield
    assert driver_threads() == [], "driver threads left running"


# ----------------------------------------------------------------------------
# Exactly once, in order, with the recorded version
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("n_actors", [1, 2])
@pytest.mark.parametrize("num_buffers", [1, 2])
def test_each_batch_learned_exactly_once(mode, n_actors, num_buffers):
    actors = [ACTOR, ACTOR2][:n_actors]
    d = toy_driver(mode=mode, actor_devices=actors, num_buffers=num_buffers, steps_per_batch=7)
    learner, states = toy_states(n_actors)
    n = 23
    r = d.run(learner, states, n)
    m = r.metrics
    np.testing.assert_array_equal(r.records["index"], np.arange(n))
    np.testing.assert_array_equal(m["index"], np.arange(n))
    np.testing.assert_array_equal(r.records["actor"], np.arange(n) % n_actors)
    # actor a's k-th batch is its k-th collect: nothing lost, duplicated or reordered
    expected_count = 1000 * (np.arange(n) % n_actors) + np.arange(n) // n_actors
    np.testing.assert_array_equal(m["count"], expected_count)
    np.testing.assert_array_equal(m["learned_before"], np.arange(n))
    assert int(r.learner_state) == n and r.num_learned == n and r.num_dropped == 0
    assert [int(s) for s in r.actor_states] == [
        1000 * a + len(range(a, n, n_actors)) for a in range(n_actors)
    ]
    # the recorded version is the one the batch was really collected with
    np.testing.assert_array_equal(r.records["version"], m["params"])
    np.testing.assert_array_equal(r.records["staleness"], np.arange(n) - m["params"])
    assert r.env_steps == 7 * n
    assert r.actor_states[0].devices() == {ACTOR}
    assert r.learner_state.devices() == {LEARNER}
    assert max(r.max_in_flight) <= num_buffers


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_collect_and_learn_are_traced_once(mode):
    traces = {"collect": 0, "learn": 0}

    def collect(*args):
        traces["collect"] += 1
        return toy_collect(*args)

    def learn(*args):
        traces["learn"] += 1
        return toy_learn(*args)

    d = jd.make_driver(
        collect, learn, toy_publish, mode=mode, actor_devices=[ACTOR], learner_device=LEARNER
    )
    d.run(*toy_states(), 10)
    d.run(*toy_states(), 5)  # a second run with new states: no retrace either
    assert traces == {"collect": 1, "learn": 1}


def test_sync_schedule_is_the_eager_actor_schedule():
    """Sync mode: batch i is collected with the newest version the buffers and
    max_staleness force the learner to have published."""
    n = 12
    for num_buffers, sync_every, max_staleness, expected in [
        (1, 1, None, [0] * n),  # the plain loop: collect i with version i
        (2, 1, None, [0] + [1] * (n - 1)),  # double buffer: one step stale
        (3, 1, None, [0, 1, 2] + [2] * (n - 3)),
        (2, 3, None, [0, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2]),  # v = 3 * ((i - 1) // 3)
        (2, 3, 2, [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]),
        (3, 2, 1, [0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1]),
    ]:
        d = toy_driver(
            mode="sync", num_buffers=num_buffers, sync_every=sync_every, max_staleness=max_staleness
        )
        r = d.run(*toy_states(), n)
        assert r.records["staleness"].tolist() == expected, (num_buffers, sync_every, max_staleness)
        assert r.published == list(range(0, n + 1, sync_every))


# ----------------------------------------------------------------------------
# Staleness bound, back-pressure
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num_buffers", "sync_every", "max_staleness"),
    [(2, 1, 0), (3, 1, 1), (4, 2, 1), (3, 3, 2), (4, 1, 2)],
)
def test_staleness_never_exceeds_the_bound(num_buffers, sync_every, max_staleness):
    learn = Slow(toy_learn, delay=0.01)
    d = jd.make_driver(
        toy_collect,
        learn,
        toy_publish,
        actor_devices=[ACTOR],
        learner_device=LEARNER,
        num_buffers=num_buffers,
        sync_every=sync_every,
        max_staleness=max_staleness,
        jit=False,
    )
    r = d.run(*toy_states(), 25)
    s = r.records["staleness"]
    assert s.max() <= max_staleness
    # the actor did run ahead to the bound: the bound, not luck, held it
    assert s.max() == max_staleness
    np.testing.assert_array_equal(r.records["version"], r.metrics["params"])
    assert r.num_learned == 25


@pytest.mark.parametrize("num_buffers", [1, 2, 3])
def test_back_pressure_holds_the_actor_to_its_buffers(num_buffers):
    """A slow learner: the actor starts batch i only once the learner is done
    with batch i - num_buffers (at most num_buffers batches held at a time)."""
    learn = Slow(toy_learn, delay=0.02)
    collect = Slow(toy_collect)
    collect.other = learn  # record how many learns had finished at each collect
    d = jd.make_driver(
        collect,
        learn,
        toy_publish,
        actor_devices=[ACTOR],
        learner_device=LEARNER,
        num_buffers=num_buffers,
        jit=False,
    )
    n = 20
    r = d.run(*toy_states(), n)
    ahead = [i - learned for i, learned in collect.seen]  # batches held incl. this one - 1
    assert max(ahead) == num_buffers - 1  # reached, never exceeded
    assert r.max_in_flight == [num_buffers]
    assert r.actor_wait_seconds[0] > 0.0  # the actor was made to wait
    assert r.num_learned == n


def test_slow_actor_starves_the_learner_but_nothing_is_lost():
    collect = Slow(toy_collect, delay=0.02)
    d = jd.make_driver(
        collect, toy_learn, toy_publish, actor_devices=[ACTOR], learner_device=LEARNER, jit=False
    )
    r = d.run(*toy_states(), 15)
    assert r.learner_wait_seconds > 0.1
    np.testing.assert_array_equal(r.metrics["count"], np.arange(15))
    assert r.records["staleness"].max() <= 1


def test_drop_policy_drops_stale_batches_only():
    learn = Slow(toy_learn, delay=0.02)
    d = jd.make_driver(
        toy_collect,
        learn,
        toy_publish,
        actor_devices=[ACTOR],
        learner_device=LEARNER,
        num_buffers=2,
        max_staleness=0,
        stale="drop",
        jit=False,
    )
    n = 20
    r = d.run(*toy_states(), n)
    learned = r.records["learned"]
    assert r.num_dropped > 0 and r.num_learned + r.num_dropped == n
    assert np.all(r.records["staleness"][learned] == 0)
    assert np.all(r.records["staleness"][~learned] > 0)
    assert int(r.learner_state) == r.num_learned == learn.done
    np.testing.assert_array_equal(r.metrics["index"], np.flatnonzero(learned))
    # sync mode (the actor as far ahead as the buffers allow): batch i + 1 is
    # collected before batch i is learned, so every other batch is one version
    # stale and dropped (a dropped batch frees a buffer but publishes nothing)
    r = d.replace(mode="sync").run(*toy_states(), n)
    assert r.records["learned"].tolist() == [i % 2 == 0 for i in range(n)]


# ----------------------------------------------------------------------------
# Shutdown
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["actor", "learner", "callback"])
@pytest.mark.parametrize("slow", ["actor", "learner"])
def test_a_failure_stops_everything_and_reraises_the_original(side, slow):
    collect = Slow(toy_collect, delay=0.05 if slow == "actor" else 0.0)
    learn = Slow(toy_learn, delay=0.05 if slow == "learner" else 0.0)
    if side == "actor":
        collect.fail_at, collect.message = 3, "actor exploded"
    elif side == "learner":
        learn.fail_at, learn.message = 3, "learner exploded"

    def callback(info, metrics):
        if side == "callback" and info.index == 3:
            raise KeyError("callback exploded")

    d = jd.make_driver(
        collect,
        learn,
        toy_publish,
        actor_devices=[ACTOR, ACTOR2],
        learner_device=LEARNER,
        jit=False,
        join_timeout=5.0,
    )
    t0 = time.perf_counter()
    with pytest.raises((ValueError, KeyError), match=f"{side} exploded") as info:
        d.run(*toy_states(2), 60, callback=callback)
    assert time.perf_counter() - t0 < 5.0
    assert info.type is (KeyError if side == "callback" else ValueError)
    if side != "callback":  # the traceback reaches the frame that raised
        frames = [f.name for f in info.traceback]
        assert "__call__" in frames
    assert driver_threads() == []
    assert collect.calls < 50 and learn.calls < 50  # stopped, not run to the end


def test_a_stuck_collect_is_joined_after_it_returns():
    """The learner fails while an actor is inside a long collect: the run ends
    when the collect returns, with the learner's error."""
    collect = Slow(toy_collect, delay=0.0)
    learn = Slow(toy_learn, fail_at=2, message="learner exploded")
    calls = []

    def slow_third(state, params, index):
        calls.append(int(index))
        if int(index) == 3:
            time.sleep(1.0)
        return collect(state, params, index)

    d = jd.make_driver(
        slow_third, learn, toy_publish, actor_devices=[ACTOR], learner_device=LEARNER, jit=False
    )
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="learner exploded"):
        d.run(*toy_states(), 100)
    assert time.perf_counter() - t0 < 3.0
    assert driver_threads() == []


def test_a_thread_that_does_not_stop_is_reported():
    entered, release = threading.Event(), threading.Event()

    def hang(state, params, index):
        if int(index) == 1:
            entered.set()
            release.wait(10.0)
        return toy_collect(state, params, index)

    def fail(learned, batch):
        entered.wait(5.0)  # the actor is stuck inside batch 1
        raise ValueError("learner exploded")

    d = jd.make_driver(hang, fail, toy_publish, actor_devices=[ACTOR], jit=False, join_timeout=0.3)
    try:
        with pytest.raises(ValueError, match="learner exploded") as info:
            d.run(*toy_states(), 5)
        assert any("did not stop" in note for note in getattr(info.value, "__notes__", []))
    finally:
        release.set()
        for t in driver_threads():
            t.join(5.0)


# ----------------------------------------------------------------------------
# Argument checks
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "fast"}, ValueError, "mode"),
        ({"num_buffers": 0}, ValueError, "num_buffers"),
        ({"num_buffers": 2.0}, TypeError, "num_buffers"),
        ({"sync_every": 0}, ValueError, "sync_every"),
        ({"max_staleness": -1}, ValueError, "max_staleness"),
        ({"sync_every": 3, "max_staleness": 1}, ValueError, "max_staleness"),
        # drop would learn max_staleness + 1 batches, then drop all the rest
        ({"sync_every": 3, "max_staleness": 1, "stale": "drop"}, ValueError, "stall"),
        ({"stale": "drop"}, ValueError, "max_staleness"),
        ({"stale": "skip", "max_staleness": 1}, ValueError, "stale"),
        ({"actor_devices": []}, ValueError, "actor_devices"),
        ({"actor_devices": DEVICES[0]}, TypeError, "actor_devices"),
        ({"actor_devices": ["cpu:0"]}, TypeError, r"actor_devices\[0\]"),
        ({"learner_device": "cpu:1"}, TypeError, "learner_device"),
        ({"steps_per_batch": 0}, ValueError, "steps_per_batch"),
        ({"jit": 1}, TypeError, "jit"),
        ({"join_timeout": 0}, ValueError, "join_timeout"),
    ],
)
def test_bad_arguments_fail_early_naming_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        toy_driver(**kwargs)


def test_bad_run_arguments():
    d = toy_driver()
    learner, states = toy_states()
    with pytest.raises(ValueError, match="num_batches"):
        d.run(learner, states, 0)
    with pytest.raises(TypeError, match="actor_states"):
        d.run(learner, states[0], 3)
    with pytest.raises(ValueError, match="actor_states"):
        d.run(learner, states * 2, 3)
    with pytest.raises(TypeError, match="collect"):
        jd.make_driver(None, toy_learn, toy_publish)
    with pytest.raises(ValueError, match="init"):
        d.train(jax.random.key(0), 3)
    with pytest.raises(TypeError, match="trainer"):
        drivers.ppo_driver(object())
    with pytest.raises(TypeError, match="trainer"):
        drivers.dqn_driver(object())


# ----------------------------------------------------------------------------
# PPO and DQN adapters
# ----------------------------------------------------------------------------

PPO_SMALL = ppo.PPOConfig(
    num_envs=4, num_steps=32, total_timesteps=4 * 32 * 6, update_epochs=2, num_minibatches=2
)
DQN_SMALL = dqn.DQNConfig(
    num_envs=4,
    total_timesteps=4 * 60,
    learning_starts=40,
    target_update_interval=20,
    buffer_capacity=50,
    batch_size=16,
)


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

    learner, actors = d.init(key, 1)
    actor = jax.device_put(actors[0], ACTOR)
    learner = jax.device_put(learner, LEARNER)
    for i, version in enumerate(r.records["version"]):
        params = jax.device_put(params_of[int(version)], ACTOR)
        actor, batch = d._collect(actor, params, np.int32(i))
        learner, _ = d._learn(learner, jax.device_put(batch, LEARNER))
    assert tree_equal(actor, r.actor_states[0])
    assert tree_equal(learner, r.learner_state)
    # one compiled program each, for every batch and version
    assert d._collect._cache_size() == 1 and d._learn._cache_size() == 1


@pytest.mark.parametrize("recurrent", [False, True])
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
    state = trainer.init(jax.random.key(0))

    def collect_and_refresh(state):
        _, batch = trainer.sampler.collect(state.sampler_state, state.params)
        return batch, drivers.refresh_behaviour(trainer, state.params, batch)

    batch, fresh = jax.jit(collect_and_refresh)(state)
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
    other = trainer.init(jax.random.key(1)).params
    moved = jax.jit(lambda b: drivers.refresh_behaviour(trainer, other, b))(batch)
    assert not np.allclose(moved.samples.agent.agent_info.value, old.value)


def test_ppo_async_two_actors(ppo_drivers):
    d = ppo_drivers["async"].replace(actor_devices=[ACTOR, ACTOR2])
    r = d.train(jax.random.key(0), 6)
    assert r.records["actor"].tolist() == [0, 1, 0, 1, 0, 1]
    assert r.records["staleness"].max() <= 1
    assert int(r.learner_state.iteration) == 6
    assert r.env_steps == 6 * PPO_SMALL.batch_size
    # the two actors ran different streams of the same envs
    assert not tree_equal(r.actor_states[0].observation, r.actor_states[1].observation)


@pytest.fixture(scope="module")
def dqn_reference():
    trainer = dqn.make_train(DQN_SMALL)
    key = jax.random.key(3)
    return trainer, key, jax.jit(trainer.train)(key)


def test_dqn_sync_with_one_buffer_is_trainer_run_bit_for_bit(dqn_reference):
    trainer, key, (ref_state, ref_metrics) = dqn_reference
    d = drivers.dqn_driver(
        trainer, mode="sync", num_buffers=1, actor_devices=[ACTOR], learner_device=LEARNER
    )
    r = d.train(key)
    s = r.learner_state
    assert tree_equal(s.params.network, ref_state.params.network)
    assert tree_equal(s.target_params, ref_state.target_params)
    assert tree_equal(s.replay_state, ref_state.replay_state)
    assert tree_equal(r.actor_states[0], ref_state.sampler_state)
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), r.metrics)
    assert tree_equal(flat, ref_metrics)


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

"""The actor/learner driver (jaxsample.driver): schedule, staleness, back-pressure,
determinism, reproducibility, shutdown, the batch hook, bad arguments.

On toy functions (a counter "env" whose batches record the parameters they
were collected with); the PPO and DQN adapters on the real trainers are in
test_driver_algos.py. Speed is not measured here (``python -m
jaxsample.bench.driver``).
"""

from __future__ import annotations

import threading
import time

import chex
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import driver_threads, no_leftover_driver_threads  # noqa: F401 (autouse)

import jaxsample as js
from jaxsample import driver as jd
from jaxsample.algos import drivers

# One worker builds the module fixtures for all its tests.
pytestmark = pytest.mark.xdist_group("test_driver")


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
# Learner queue (learn_queue_cap): N batches per update
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(("sync_every", "max_staleness"), [(1, None), (1, 1), (2, 3)])
def test_learn_queue_learns_every_batch_once_in_groups(mode, sync_every, max_staleness):
    """2 actor threads, learn_queue_cap=2: update g learns batches 2g (actor 0) and
    2g + 1 (actor 1) stacked in that order; per-part versions and staleness are
    the ones each part was collected with; versions step by 2 * sync_every."""
    cap, n = 2, 12

    def learn(learned, batch):  # the state counts batches, as versions do
        return learned + cap, toy_learn(learned, batch)[1]

    d = jd.make_driver(
        toy_collect,
        learn,
        toy_publish,
        learner_device=LEARNER,
        mode=mode,
        actor_devices=[ACTOR, ACTOR2],
        learn_queue_cap=cap,
        sync_every=sync_every,
        max_staleness=max_staleness,
        join_timeout=20.0,
    )
    r = d.run(*toy_states(2), n)
    m = r.metrics
    assert m["index"].shape == (n // cap, cap)
    # Every collected batch learned exactly once, in the documented order.
    np.testing.assert_array_equal(m["index"].reshape(-1), np.arange(n))
    expected_count = 1000 * (np.arange(n) % 2) + np.arange(n) // 2
    np.testing.assert_array_equal(m["count"].reshape(-1), expected_count)
    np.testing.assert_array_equal(m["learned_before"], cap * np.arange(n // cap))
    assert int(r.learner_state) == n and r.num_learned == n
    np.testing.assert_array_equal(r.records["update"], np.arange(n) // cap)
    np.testing.assert_array_equal(r.records["actor"], np.arange(n) % 2)
    # Per part: the version it was really collected with, staleness against the
    # batches learned when the learner took the group.
    np.testing.assert_array_equal(r.records["version"], m["params"].reshape(-1))
    taken = cap * (np.arange(n) // cap)
    np.testing.assert_array_equal(r.records["staleness"], taken - r.records["version"])
    assert r.published == list(range(0, n + 1, cap * sync_every))
    if max_staleness is not None:
        assert r.records["staleness"].max() <= max_staleness
    assert max(r.max_in_flight) <= d.options.num_buffers


def test_learn_queue_sync_mode_learns_whole_groups_only_when_needed():
    """One actor, four buffers, learn_queue_cap=3: the sync schedule learns a group
    only when a buffer must be freed, so the learner sees groups of 3 collected
    with version 0, 3, ... (the eager async schedule)."""
    d = toy_driver(mode="sync", num_buffers=4, learn_queue_cap=3)
    r = d.run(*toy_states(1), 9)
    # Batch i waits until batch i - 4 is released: group 0 (0..2) is learned
    # before batch 4, group 1 (3..5) before batch 7.
    assert r.records["version"].tolist() == [0, 0, 0, 0, 3, 3, 3, 6, 6]
    np.testing.assert_array_equal(r.metrics["index"], np.arange(9).reshape(3, 3))


def test_learn_queue_rejects_what_it_cannot_schedule():
    with pytest.raises(ValueError, match="learn_queue_cap"):
        toy_driver(learn_queue_cap=3)  # one actor, two buffers
    with pytest.raises(ValueError, match="stale='wait'"):
        toy_driver(learn_queue_cap=2, stale="drop", max_staleness=4)
    with pytest.raises(ValueError, match="max_staleness"):
        toy_driver(learn_queue_cap=2, sync_every=2, max_staleness=2)
    with pytest.raises(TypeError, match="combine"):
        toy_driver(learn_queue_cap=2, combine=1)
    with pytest.raises(ValueError, match="multiple of learn_queue_cap"):
        toy_driver(learn_queue_cap=2).run(*toy_states(), 3)
    with pytest.raises(TypeError, match="step_metrics"):
        toy_driver(step_metrics={})
    with pytest.raises(TypeError, match=r"observers\[0\]"):
        toy_driver(observers=[print])
    with pytest.raises(TypeError, match="batch_view"):
        toy_driver(step_metrics=js.StepMetrics.init(), batch_view=1)
    with pytest.raises(TypeError, match="batch_view"):  # the hook needs Batches
        toy_driver(step_metrics=js.StepMetrics.init()).run(*toy_states(), 1)


# ----------------------------------------------------------------------------
# A real sampler: concat_envs and the step-metrics / observer hook
# ----------------------------------------------------------------------------

HOOK_T, HOOK_B, HOOK_N = 16, 2, 6
HOOK_KEYS = (10, 11)
concat = jax.jit(jd.concat_envs)  # one compile for the tests below


@pytest.fixture(scope="module")
def hook():
    """A small CartPole sampler, its jitted init/collect (compiled once for all
    the tests here), and each actor's batches collected in a plain loop (batch
    ``i`` is actor ``i % 2``'s)."""
    env, params = gymnax.make("CartPole-v1")
    agent = js.agents.RandomAgent(env.action_space(params))
    sampler = js.make_sampler(env, params, agent, js.BatchSpec(HOOK_T, HOOK_B))
    init, collect = jax.jit(sampler.init), jax.jit(sampler.collect)
    states = [init(jax.random.key(k), None) for k in HOOK_KEYS]
    ref = []
    for i in range(HOOK_N):
        states[i % 2], batch = collect(states[i % 2], None)
        ref.append(batch)
    return init, collect, ref


def test_concat_envs_joins_along_the_env_axis(hook):
    """concat_envs against numpy: [T, B] fields on axis 1, [B] fields on axis 0."""
    a, b = hook[2][:2]
    c = concat([a, b])
    T, B = HOOK_T, HOOK_B
    assert c.samples.valid.shape == (T, 2 * B)
    for x, y, z in zip(jax.tree.leaves(a), jax.tree.leaves(b), jax.tree.leaves(c), strict=True):
        axis = 1 if np.ndim(x) >= 2 and np.shape(x)[:2] == (T, B) else 0
        np.testing.assert_array_equal(z, np.concatenate([x, y], axis))
    store = c.samples.env.final_store
    assert store.next_observation.shape[0] == 2 * B and store.slots.shape[0] == 2 * B
    with pytest.raises(TypeError, match=r"batches\[1\]"):
        jd.concat_envs([a, {}])


def test_driver_hook_runs_step_metrics_and_observers_on_every_batch(hook):
    """Async, 2 actors, learn_queue_cap=2 with concat_envs: the learner's update g
    is [actor 0's batch g | actor 1's batch g] (recollected in a plain loop);
    the hook's StepMetrics equal a loop over those batches in index order; a
    per-step observer saw every step of every env, in order."""
    init, collect, ref = hook
    steps: list[dict] = []
    observer = js.metrics.make_step_observer(steps.append)
    batches_seen: list[int] = []
    counter = js.metrics.make_step_observer(
        lambda d: batches_seen.append(int(d)),
        select=lambda b: b.samples.valid.sum(),  # a reduction compiled in
        per_step=False,
    )
    d = jd.make_driver(
        lambda s, p, i: collect(s, p),  # already jitted: jit=False
        lambda n, batch: (n + 1, batch),  # the learner returns what it learned
        lambda n: None,
        # Two actor threads; one device for all, so nothing compiles twice.
        actor_devices=[ACTOR, ACTOR],
        learner_device=ACTOR,
        learn_queue_cap=2,
        combine=concat,
        step_metrics=js.StepMetrics.init(window=3),
        observers=[observer, counter],
        jit=False,
        join_timeout=20.0,
    )
    r = d.run(jnp.int32(0), [init(jax.random.key(k), None) for k in HOOK_KEYS], HOOK_N)
    learned = r.metrics  # stacked [n // 2, T, 2B] combined batches
    for g in range(HOOK_N // 2):
        want = concat([ref[2 * g], ref[2 * g + 1]])
        got = jax.tree.map(lambda x, g=g: x[g], learned)
        chex.assert_trees_all_equal(jax.device_get(want), got)
    # Step metrics: numpy over the batches in index order, episodes in (t, b) order.
    completed = np.concatenate([np.asarray(b.traj_infos.completed) for b in ref])
    returns = np.concatenate([np.asarray(b.traj_infos.episode_return) for b in ref])[completed]
    lengths = np.concatenate([np.asarray(b.traj_infos.length) for b in ref])[completed]
    assert completed.sum() >= 3
    got = js.metrics.as_dict(r.step_metrics)
    assert got["number_of_episodes"] == completed.sum()
    assert got["environment_steps"] == HOOK_N * HOOK_T * HOOK_B
    np.testing.assert_allclose(got["average_return"], returns[-3:].mean(), rtol=1e-6)
    np.testing.assert_allclose(got["average_episode_length"], lengths[-3:].mean(), rtol=1e-6)
    # Observers: T calls per batch with [B] leaves, in batch then time order.
    assert len(steps) == HOOK_N * HOOK_T and batches_seen == [HOOK_T * HOOK_B] * HOOK_N
    rewards = np.stack([s["reward"] for s in steps])
    np.testing.assert_array_equal(
        rewards, np.concatenate([np.asarray(b.samples.env.reward) for b in ref])
    )
    np.testing.assert_array_equal(np.stack([s["traj_info"].completed for s in steps]), completed)


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

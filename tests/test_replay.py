"""Tests of the experience replayers (jaxsample.replay)."""

import math
import re

import chex
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import CounterAgent, counter_params

import jaxsample as js
from jaxsample import replay
from jaxsample.replay.ring import episode_mask
from jaxsample.types import AgentSamples, EnvSamples, Samples

T, B = 5, 3


# One worker builds the module fixtures for all its tests.
pytestmark = pytest.mark.xdist_group("test_replay")


def cartpole_examples() -> Samples:
    """``examples`` of a CartPole sampler with a random agent (no bootstrap value)."""
    env, params = gymnax.make("CartPole-v1")
    agent = js.agents.RandomAgent(env.action_space(params))
    return js.make_sampler(env, params, agent, js.BatchSpec(1, 1)).examples


@pytest.fixture(scope="module")
def sampler() -> js.Sampler:
    env, params = gymnax.make("CartPole-v1")
    agent = js.agents.RandomAgent(env.action_space(params))
    return js.make_sampler(env, params, agent, js.BatchSpec(T, B), bootstrap_value=True)


@pytest.fixture(scope="module")
def batches(sampler: js.Sampler) -> list[js.Batch]:
    """Six consecutive batches of one stream (CartPole ends episodes often)."""
    collect = jax.jit(sampler.collect)
    state = sampler.init(jax.random.key(0), ())
    out = []
    for _ in range(6):
        state, batch = collect(state, ())
        out.append(batch)
    return out


@jax.jit
def _fields(s: Samples) -> dict[str, jax.Array]:
    return {
        "observation": s.env.observation,
        "final_observation": s.env.final_observation,
        "reward": s.env.reward,
        "prev_reward": s.env.prev_reward,
        "done": s.env.done,
        "terminated": s.env.terminated,
        "truncated": s.env.truncated,
        "discount": s.env.env_info["discount"],
        "action": s.agent.action,
        "prev_action": s.agent.prev_action,
        "valid": s.valid,
    }


def fields(s: Samples) -> dict[str, np.ndarray]:
    """The stored fields of a batch's or a replay's samples (time-major), as numpy."""
    return {k: np.asarray(v) for k, v in _fields(s).items()}


@pytest.fixture(scope="module")
def per_batch(batches: list[js.Batch]) -> list[dict[str, np.ndarray]]:
    return [fields(b.samples) for b in batches]


def stream(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Fields of consecutive batches, concatenated along time: [sum T, B, ...]."""
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def assert_fields_equal(got: dict, want: dict) -> None:
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


# --------------------------------------------------------------- synthetic data


def synthetic(examples: Samples, t0: int, n_steps: int, n_envs: int, agent_state: bool = False):
    """A Samples batch whose step (t, b) is labelled: observation = [t0 + t, b, 0, 0].

    ``final_observation`` is the observation + 0.5, reward is the absolute step,
    done every 7th absolute step (env-dependent phase). With ``agent_state``,
    also returns a per-step agent state [T, B, 2] = (absolute step, env).
    """
    t = np.arange(t0, t0 + n_steps, dtype=np.float32)[:, None] * np.ones((1, n_envs), np.float32)
    b = np.ones((n_steps, 1), np.float32) * np.arange(n_envs, dtype=np.float32)[None, :]
    obs = np.stack([t, b, np.zeros_like(t), np.zeros_like(t)], axis=-1)
    done = (t.astype(np.int64) + b.astype(np.int64)) % 7 == 6
    samples = Samples(
        env=EnvSamples(
            observation=jnp.asarray(obs),
            reward=jnp.asarray(t),
            prev_reward=jnp.asarray(t - 1),
            terminated=jnp.asarray(done),
            truncated=jnp.zeros(t.shape, bool),
            done=jnp.asarray(done),
            env_info={"discount": jnp.asarray(1.0 - done, jnp.float32)},
            final_store=jnp.asarray(obs + 0.5),
        ),
        agent=AgentSamples(
            action=jnp.asarray(t.astype(np.int32) % 2),
            prev_action=jnp.zeros(t.shape, jnp.int32),
            agent_info=(),
            initial_state=jax.tree.map(
                lambda s: jnp.zeros((n_envs, *s.shape), s.dtype), examples.agent.initial_state
            ),
        ),
        valid=jnp.ones(t.shape, bool),
        bootstrap_value=None,
    )
    if agent_state:
        return samples, jnp.asarray(np.stack([t, b], axis=-1))
    return samples


@pytest.fixture(scope="module")
def examples(sampler: js.Sampler) -> Samples:
    """sampler.examples without bootstrap_value (for the synthetic batches)."""
    return sampler.examples.replace(bootstrap_value=None)


def labels(s: Samples) -> tuple[np.ndarray, np.ndarray]:
    """(absolute step, env) of every step of replayed samples [L, N]."""
    obs = np.asarray(s.env.observation)
    return obs[..., 0].astype(np.int64), obs[..., 1].astype(np.int64)


# ---------------------------------------------------------------------- tests


def test_validation(sampler: js.Sampler, examples: Samples) -> None:
    ex = sampler.examples
    with pytest.raises(TypeError, match="examples"):
        replay.uniform({"obs": 1}, B, 10)
    with pytest.raises(TypeError, match="B must be an int"):
        replay.uniform(ex, 2.0, 10)
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        replay.uniform(ex, B, 0)
    with pytest.raises(ValueError, match="capacity must be <="):
        replay.uniform(ex, B, 2**31)
    with pytest.raises(TypeError, match="T must be an int"):
        replay.one_time(ex, B, None)
    with pytest.raises(ValueError, match="unroll_length must be >= 1"):
        replay.cycle_one_time(ex, B, 0)
    with pytest.raises(TypeError, match="store_agent_state must be a bool"):
        replay.uniform(ex, B, 10, store_agent_state=1)
    with pytest.raises(ValueError, match="scalar spec"):
        replay.uniform(ex.replace(valid=jax.ShapeDtypeStruct((T, B), bool)), B, 10)

    rep = replay.uniform(examples, B, 10)
    state = rep.init()
    good = synthetic(examples, 0, T, B)
    with pytest.raises(ValueError, match=r"env\.observation"):
        rep.add(
            state, good.replace(env=good.env.replace(observation=good.env.observation[..., :3]))
        )
    with pytest.raises(ValueError, match=r"env\.reward.*float32\[5, 3\].*int32"):
        rep.add(state, good.replace(env=good.env.replace(reward=good.env.reward.astype(jnp.int32))))
    with pytest.raises(ValueError, match=r"env\.env_info"):
        rep.add(state, good.replace(env=good.env.replace(env_info={})))
    with pytest.raises(ValueError, match=r"env\.final_observation"):
        rep.add(state, good.replace(env=good.env.replace(final_store=good.env.final_store[0])))
    with pytest.raises(ValueError, match=r"agent\.action"):
        rep.add(state, good.replace(agent=good.agent.replace(action=good.agent.action[..., None])))
    with pytest.raises(ValueError, match="B=2 envs"):
        rep.add(state, synthetic(examples, 0, T, 2))
    with pytest.raises(ValueError, match="store_agent_state=False"):
        rep.add(state, good, jnp.zeros((T, B, 2)))
    with pytest.raises(TypeError, match="Batch or Samples"):
        rep.add(state, {"x": 1})
    with pytest.raises(ValueError, match="T=5 steps, got T=4"):
        replay.cycle_one_time(examples, B, T).add(
            replay.cycle_one_time(examples, B, T).init(), synthetic(examples, 0, 4, B)
        )
    with pytest.raises(ValueError, match="sequence_length must be <= 10"):
        rep.sample(state, jax.random.key(0), 4, 11)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        rep.sample(state, jax.random.key(0), 0, 2)
    with pytest.raises(TypeError, match="typed PRNG key"):
        rep.sample(state, jax.random.PRNGKey(0), 4, 2)

    stateful = replay.uniform(
        examples.replace(
            agent=examples.agent.replace(initial_state=jax.ShapeDtypeStruct((2,), jnp.float32))
        ),
        B,
        10,
        store_agent_state=True,
    )
    with pytest.raises(TypeError, match="needs agent_state"):
        stateful.add(stateful.init(), good)
    with pytest.raises(ValueError, match=r"agent_state.*\[5, 3, 2\]"):
        stateful.add(stateful.init(), good, jnp.zeros((T, B, 3)))


def test_init_layout(sampler: js.Sampler) -> None:
    rep = replay.uniform(sampler.examples, B, 7)
    state = rep.init()
    assert state.data.env.observation.shape == (B, 7, 4)
    assert state.data.env.final_store.shape == (B, 7, 4)
    assert state.data.agent.action.dtype == jnp.int32
    assert state.data.env.env_info["discount"].shape == (B, 7)
    assert bool(state.data.env.done.all()) and not bool(state.data.valid.any())
    assert state.position.dtype == jnp.int32 and state.filled.dtype == jnp.int32
    assert not bool(rep.can_sample(state, 1))


@pytest.mark.parametrize("capacity", [10, 3])
def test_uniform_ring_nothing_lost_or_duplicated(examples: Samples, capacity: int) -> None:
    """After every add (of varying T, some > capacity), the ring is the stream's tail."""
    chex.clear_trace_counter()
    rep = replay.uniform(examples, B, capacity)
    add = jax.jit(chex.assert_max_traces(rep.add, n=3), donate_argnums=0)  # one per T
    replay_all = jax.jit(rep.replay_all)
    state = rep.init()
    total = 0
    for n_steps in (4, 4, 4, 13, 4, 1, 4, 13):
        state = add(state, synthetic(examples, total, n_steps, B))
        total += n_steps
        out, info = replay_all(state)
        steps, envs = labels(out)
        filled = min(total, capacity)
        assert (np.asarray(state.filled) == filled).all()
        assert (np.asarray(state.position) == total % capacity).all()
        pad = capacity - filled
        np.testing.assert_array_equal(np.asarray(info.start), np.full(B, -pad))
        want = np.arange(total - filled, total)[:, None] * np.ones((1, B), np.int64)
        np.testing.assert_array_equal(steps[pad:], want)
        np.testing.assert_array_equal(envs[pad:], np.ones((filled, 1)) * np.arange(B))
        valid = np.broadcast_to(np.arange(capacity)[:, None] >= pad, (capacity, B))
        np.testing.assert_array_equal(np.asarray(out.valid), valid)
        np.testing.assert_array_equal(np.asarray(out.env.done)[:pad], True)
        np.testing.assert_array_equal(
            np.asarray(out.env.final_observation)[pad:], np.asarray(out.env.observation)[pad:] + 0.5
        )
        np.testing.assert_array_equal(np.asarray(out.env.reward)[pad:], want)
        assert bool(rep.can_sample(state, min(filled, capacity)))


def test_uniform_with_real_batches(
    sampler: js.Sampler, batches: list[js.Batch], per_batch: list
) -> None:
    """Sampler batches in a ring of 12 (> 2 batches, wraps): contents and sequences."""
    capacity = 12
    rep = replay.uniform(sampler.examples, B, capacity)
    add = jax.jit(rep.add, donate_argnums=0)
    sample = jax.jit(rep.sample, static_argnums=(2, 3))
    replay_all = jax.jit(rep.replay_all)
    state = rep.init()
    for k, batch in enumerate(batches):
        state = add(state, batch)
        total = (k + 1) * T
        want = {key: v[max(0, total - capacity) : total] for key, v in stream(per_batch).items()}
        out, _ = replay_all(state)
        got = {key: v[capacity - min(total, capacity) :] for key, v in fields(out).items()}
        assert_fields_equal(got, want)
    # Sampled sequences are contiguous slices of the stream, in order.
    L, N = 4, 64
    full = stream(per_batch)
    seq, info = sample(state, jax.random.key(3), N, L)
    assert seq.env.observation.shape == (L, N, 4) and seq.valid.shape == (L, N)
    assert seq.agent.initial_state == () and seq.bootstrap_value is None
    got = fields(seq)
    oldest = len(batches) * T - capacity
    for n in range(N):
        e, s = int(info.env_index[n]), oldest + int(info.start[n])
        assert 0 <= int(info.start[n]) <= capacity - L
        for key in full:
            np.testing.assert_array_equal(got[key][:, n], full[key][s : s + L, e], err_msg=key)
    # The episode mask agrees with done: steps up to and including the first end.
    done = np.asarray(seq.env.done)
    ends_before = np.cumsum(done, axis=0) - done
    np.testing.assert_array_equal(np.asarray(info.same_episode), ends_before == 0)
    np.testing.assert_array_equal(np.asarray(info.crosses_episode), done[:-1].any(axis=0))
    assert bool(np.asarray(info.crosses_episode).any())  # CartPole: some sequences cross


def chi2_threshold(df: int, z: float) -> float:
    """Upper quantile of chi-square(df) at the standard-normal quantile z (Wilson-Hilferty).

    Accurate to ~0.1% for df >= 30: chi2(51) at 1 - 1e-3 is 87.97; this gives 88.05.
    """
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def test_uniform_sampling_is_uniform(examples: Samples) -> None:
    """Pearson chi-square over all (env, start) cells after the ring wrapped around.

    B=4 envs, a ring of 16 after 23 steps (position 7, so the oldest step is
    not at slot 0 and the ring wraps), sequences of 4: 13 starts per env, 52 cells, 400 expected
    draws per cell. Under uniform sampling the statistic is chi-square with 51
    degrees of freedom; the threshold is its 1 - 1e-3 quantile, so for a random
    seed this test fails falsely with probability 1e-3 (the seed is fixed, so it
    is deterministic).
    """
    n_envs, capacity, L = 4, 16, 4
    rep = replay.uniform(examples, n_envs, capacity)
    n_starts = capacity - L + 1
    cells = n_envs * n_starts
    N = 400 * cells

    @jax.jit
    def run(first: Samples, second: Samples, key: jax.Array):
        state = rep.add(rep.add(rep.init(), first), second)
        return state, rep.sample(state, key, N, L)

    state, (seq, info) = run(
        synthetic(examples, 0, 10, n_envs), synthetic(examples, 10, 13, n_envs), jax.random.key(7)
    )
    assert (np.asarray(state.position) == 23 % 16).all()
    assert (np.asarray(state.filled) == capacity).all()
    steps, envs = labels(seq)
    # Contiguous, in order, one env per sequence; info agrees with the contents.
    np.testing.assert_array_equal(steps, steps[:1] + np.arange(L)[:, None])
    np.testing.assert_array_equal(envs, np.broadcast_to(envs[:1], envs.shape))
    np.testing.assert_array_equal(envs[0], np.asarray(info.env_index))
    start = steps[0] - (23 - capacity)
    np.testing.assert_array_equal(start, np.asarray(info.start))
    assert start.min() >= 0 and start.max() <= n_starts - 1
    counts = np.bincount(envs[0] * n_starts + start, minlength=cells)
    expected = N / cells
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < chi2_threshold(cells - 1, z=3.0902), (chi2, counts)
    # Every cell is hit: the extremes (oldest start, newest start) are reachable.
    assert counts.min() > 0


def test_cycle_one_time_overlaps_by_one_step(
    sampler: js.Sampler, batches: list[js.Batch], per_batch: list
) -> None:
    rep = replay.cycle_one_time(sampler.examples, B, T)
    assert rep.capacity == T + 1
    add = jax.jit(rep.add, donate_argnums=0)
    replay_all = jax.jit(rep.replay_all)
    state = rep.init()
    windows = []
    for k, batch in enumerate(batches):
        state = add(state, batch)
        out, info = replay_all(state)
        w = fields(out)
        assert w["observation"].shape == (T + 1, B, 4)
        assert_fields_equal({key: v[1:] for key, v in w.items()}, per_batch[k])
        if k == 0:  # nothing before the first batch: padding
            assert not w["valid"][0].any() and w["done"][0].all()
            np.testing.assert_array_equal(np.asarray(info.start), -1)
        else:  # row 0 is the previous batch's last step, replayed again
            prev = per_batch[k - 1]
            assert_fields_equal(
                {key: v[0] for key, v in w.items()}, {key: v[-1] for key, v in prev.items()}
            )
            assert_fields_equal(
                {key: v[0] for key, v in w.items()}, {key: v[-1] for key, v in windows[-1].items()}
            )
            np.testing.assert_array_equal(np.asarray(info.start), 0)
        windows.append(w)
    # Windows minus their overlapping first row rebuild the stream exactly.
    rebuilt = {key: np.concatenate([w[key][1:] for w in windows]) for key in windows[0]}
    assert_fields_equal(rebuilt, stream(per_batch))


def test_one_time_replays_the_last_batch(
    sampler: js.Sampler, batches: list[js.Batch], per_batch: list
) -> None:
    rep = replay.one_time(sampler.examples, B, T)
    add = jax.jit(rep.add, donate_argnums=0)
    state = rep.init()
    replay_all = jax.jit(rep.replay_all)
    for batch, want in zip(batches[:3], per_batch, strict=False):
        state = add(state, batch)
        out, info = replay_all(state)
        assert_fields_equal(fields(out), want)
        np.testing.assert_array_equal(
            np.asarray(out.bootstrap_value), np.asarray(batch.samples.bootstrap_value)
        )
        assert out.agent.initial_state == ()
        np.testing.assert_array_equal(np.asarray(info.start), 0)
        assert (np.asarray(state.position) == 0).all() and (np.asarray(state.filled) == T).all()
    sample = jax.jit(rep.sample, static_argnums=(2, 3))
    seq, info = sample(state, jax.random.key(0), 8, T)  # the only start is 0
    np.testing.assert_array_equal(np.asarray(info.start), 0)
    want = per_batch[2]
    got = fields(seq)
    for n, e in enumerate(np.asarray(info.env_index)):
        assert_fields_equal(
            {k: v[:, n] for k, v in got.items()}, {k: v[:, e] for k, v in want.items()}
        )


def test_store_agent_state(examples: Samples) -> None:
    ex = examples.replace(
        agent=examples.agent.replace(initial_state=jax.ShapeDtypeStruct((2,), jnp.float32))
    )
    rep = replay.uniform(ex, B, 8, store_agent_state=True)
    cyc = replay.cycle_one_time(ex, B, 5, store_agent_state=True)
    assert rep.init().data.agent.initial_state.shape == (B, 8, 2)
    first = synthetic(ex, 0, 5, B, agent_state=True)
    second = synthetic(ex, 5, 5, B, agent_state=True)
    total = 10

    @jax.jit
    def run(first, second, key):
        state = rep.add(rep.add(rep.init(), *first), *second)
        cstate = cyc.add(cyc.add(cyc.init(), *first), *second)
        return rep.sample(state, key, 32, 3), rep.replay_all(state), cyc.replay_all(cstate)

    (seq, _), (out, _), (cout, _) = run(first, second, jax.random.key(1))
    steps, envs = labels(seq)
    np.testing.assert_array_equal(
        np.asarray(seq.agent.initial_state), np.stack([steps[0], envs[0]], -1)
    )
    np.testing.assert_array_equal(
        np.asarray(out.agent.initial_state), np.stack([np.full(B, total - 8), np.arange(B)], -1)
    )
    # cycle_one_time: the state before the replayed last step of the first unroll.
    np.testing.assert_array_equal(np.asarray(cout.agent.initial_state)[:, 0], 4)


@pytest.mark.parametrize(
    ("factory", "length"), [("uniform", 997), ("cycle_one_time", T), ("one_time", T)]
)
def test_add_is_in_place_and_does_not_retrace(
    sampler: js.Sampler, batches: list[js.Batch], factory: str, length: int
) -> None:
    """Donated add writes into the same buffers: no copy of a [B, capacity, ...] leaf
    (uniform's ring of 997, and the rings of T + 1 and T steps of the other two)."""
    chex.clear_trace_counter()
    rep = getattr(replay, factory)(sampler.examples, B, length)
    capacity = rep.capacity
    state = rep.init()
    add = jax.jit(chex.assert_max_traces(rep.add, n=1), donate_argnums=0)
    hlo = add.lower(state, batches[0]).compile().as_text()
    ring_dim = re.compile(rf",{capacity}[,\]]")  # a [.., capacity, ..] shape
    copies = [line for line in hlo.splitlines() if " copy(" in line and ring_dim.search(line)]
    assert not copies, copies
    old = state.data.env.observation
    pointer = old.unsafe_buffer_pointer()
    for batch in batches:
        state = add(state, batch)
    assert old.is_deleted()
    if jax.default_backend() == "cpu":
        assert state.data.env.observation.unsafe_buffer_pointer() == pointer


@pytest.mark.slow  # op by op: ~7 s
def test_eager_equals_jit(sampler: js.Sampler, batches: list[js.Batch]) -> None:
    rep = replay.uniform(sampler.examples, B, 8)
    eager = rep.init()
    jitted = rep.init()
    for batch in batches[:2]:
        eager = rep.add(eager, batch)
        jitted = jax.jit(rep.add)(jitted, batch)
    chex.assert_trees_all_equal(eager, jitted)
    key = jax.random.key(5)
    chex.assert_trees_all_equal(
        rep.sample(eager, key, 6, 3), jax.jit(rep.sample, static_argnums=(2, 3))(jitted, key, 6, 3)
    )


def test_positions_never_overflow() -> None:
    """Position and fill level stay in [0, capacity] over 200k adds (no growing counter)."""
    ex = Samples(
        env=EnvSamples(
            observation=jax.ShapeDtypeStruct((), jnp.float32),
            reward=jax.ShapeDtypeStruct((), jnp.float32),
            prev_reward=jax.ShapeDtypeStruct((), jnp.float32),
            terminated=jax.ShapeDtypeStruct((), bool),
            truncated=jax.ShapeDtypeStruct((), bool),
            done=jax.ShapeDtypeStruct((), bool),
            env_info={},
            final_store=jax.ShapeDtypeStruct((), jnp.float32),
        ),
        agent=AgentSamples(
            action=jax.ShapeDtypeStruct((), jnp.int32),
            prev_action=jax.ShapeDtypeStruct((), jnp.int32),
            agent_info=(),
            initial_state=(),
        ),
        valid=jax.ShapeDtypeStruct((), bool),
    )
    rep = replay.uniform(ex, 1, 7)
    one = jax.tree.map(lambda s: jnp.zeros((3, 1), s.dtype), ex)
    n = 200_000

    @jax.jit
    def run(state):
        return jax.lax.fori_loop(0, n, lambda i, s: rep.add(s, one), state)

    state = run(rep.init())
    assert int(state.position[0]) == (3 * n) % 7 and int(state.filled[0]) == 7


def test_episode_mask_with_idle_and_padding_steps() -> None:
    """``wait``-mode idle steps (done held True, invalid) and padding rows do not start a
    new episode; the first valid ``done`` step is the last step of the first episode."""
    # One column per case, rows are time: (done, valid).
    done = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]], bool)
    valid = np.array([[0, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1], [1, 0, 1, 1], [1, 1, 1, 1]], bool)
    same, crosses = episode_mask(jnp.asarray(done), jnp.asarray(valid))
    want = np.array([[0, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1], [1, 0, 0, 1], [1, 0, 0, 1]], bool)
    np.testing.assert_array_equal(np.asarray(same), want)
    np.testing.assert_array_equal(np.asarray(crosses), [False, True, True, False])


def test_store_agent_state_from_sampler() -> None:
    """A sampler built with store_agent_state=True feeds the replayer directly.

    The agent is the counter agent of tests/helpers.py: its recurrent state is a
    step counter (100 * env rank at a reset, +1 per step), so a state stored at
    the wrong step or env shows."""
    env, env_params = gymnax.make("CartPole-v1")
    agent = CounterAgent(env.action_space(env_params))
    params = counter_params(0.5)
    sampler = js.make_sampler(env, env_params, agent, js.BatchSpec(6, 3), store_agent_state=True)
    state = sampler.init(jax.random.key(0), params)
    collect = jax.jit(sampler.collect)
    rep = replay.uniform(sampler.examples, 3, 12, store_agent_state=True)
    batches = []
    for _ in range(2):
        state, batch = collect(state, params)
        batches.append(batch)

    @jax.jit
    def store(first, second, key):  # both adds, the replay and a sample: one program
        buf = rep.add(rep.add(rep.init(), first), second)
        return rep.replay_all(buf), rep.sample(buf, key, 16, 4)

    (stored, _), (seq, info) = store(*batches, jax.random.key(3))
    want = np.concatenate([np.asarray(b.samples.agent.state) for b in batches], axis=0)
    # The state before step 0 of a batch is the batch's initial state.
    np.testing.assert_array_equal(want[6], np.asarray(batches[1].samples.agent.initial_state))
    np.testing.assert_array_equal(np.asarray(stored.agent.initial_state), want[0])
    starts, envs = np.asarray(info.start), np.asarray(info.env_index)
    np.testing.assert_array_equal(np.asarray(seq.agent.initial_state), want[starts, envs])
    assert len(set(starts.tolist())) > 1


def test_sampling_too_few_steps_refuses_or_flags(sampler: js.Sampler, batches) -> None:
    """An empty or under-filled buffer never hands zeros over as data: outside
    jit sample raises; under jit ReplayInfo.ok is False and same_episode masks
    every step."""
    B, T = sampler.batch_spec.B, sampler.batch_spec.T
    rep = replay.uniform(sampler.examples, B, capacity=4 * T)
    empty = rep.init()
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"holds 0 steps.*can_sample"):
        rep.sample(empty, key, 8, 1)
    sample = jax.jit(rep.sample, static_argnums=(2, 3))
    _, info = sample(empty, key, 8, 1)
    assert not np.asarray(info.ok).any() and not np.asarray(info.same_episode).any()

    one = rep.add(empty, batches[0])  # T steps per env stored
    with pytest.raises(ValueError, match=rf"sequences of {T + 1} steps: the buffer holds {T}"):
        rep.sample(one, key, 8, T + 1)
    _, info = sample(one, key, 8, T + 1)
    assert not np.asarray(info.ok).any() and not np.asarray(info.same_episode).any()
    _, info = sample(one, key, 8, T)
    assert np.asarray(info.ok).all() and np.asarray(info.same_episode).any()
    assert bool(rep.can_sample(one, T)) and not bool(rep.can_sample(one, T + 1))

"""Replay writes for some envs only (ALF's env_ids) and initial collect steps
(ALF's initial_collect_steps): jaxsample.replay add(env_ids=, env_mask=),
Sampler.collect_random and replay.prefill."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_replay import cartpole_examples, chi2_threshold, fields, labels, synthetic

import jaxsample as js
from jaxsample import replay
from jaxsample.types import Samples

B, C = 4, 6


# One worker builds the module fixtures for all its tests.
pytestmark = pytest.mark.xdist_group("test_replay_writes")


@pytest.fixture(scope="module")
def examples() -> Samples:
    return cartpole_examples()


def _cols(samples: Samples, ids) -> Samples:
    return jax.tree.map(lambda x: x[:, np.asarray(ids)], samples)


# (first absolute step, T, which envs: None = all, a list = env_ids, a tuple = env_mask)
WRITES = [(0, 3, None), (3, 4, [2, 0]), (7, 5, (True, False, True, False)), (12, 8, [3]),
          (20, 2, None)]  # fmt: skip


@pytest.fixture(scope="module")
def subset_run(examples: Samples):
    """The writes above in one jitted program (the mask traced), a replay_all and
    a large uniform sample of sequences of 2."""
    rep = replay.uniform(examples, B, C)
    N = 400 * 19  # 19 (env, start) cells at the end (see the reference below)

    @jax.jit
    def run(masks, key):
        state = rep.init()
        for (t0, n, which), mask in zip(WRITES, masks, strict=True):
            full = synthetic(examples, t0, n, B)
            if which is None:
                state = rep.add(state, full)
            elif isinstance(which, list):
                state = rep.add(state, _cols(full, which), env_ids=np.asarray(which))
            else:
                state = rep.add(state, full, env_mask=mask)
        return state, rep.replay_all(state), rep.sample(state, key, N, 2)

    masks = [None if not isinstance(w, tuple) else jnp.asarray(w) for _, _, w in WRITES]
    return run(masks, jax.random.key(11)), N


def _reference() -> list[list[int]]:
    """A plain-Python model: per env the list of stored absolute steps (last C)."""
    rings: list[list[int]] = [[] for _ in range(B)]
    for t0, n, which in WRITES:
        if which is None:
            envs = range(B)
        elif isinstance(which, list):
            envs = which
        else:
            envs = [b for b in range(B) if which[b]]
        for b in envs:
            rings[b] = (rings[b] + list(range(t0, t0 + n)))[-C:]
    return rings


def test_subset_writes_match_a_python_model(subset_run) -> None:
    (state, (out, info), _), _ = subset_run
    rings = _reference()
    filled = [len(r) for r in rings]
    np.testing.assert_array_equal(np.asarray(state.filled), filled)
    np.testing.assert_array_equal(np.asarray(info.start), np.asarray(filled) - C)
    steps, envs = labels(out)  # [C, B]
    got = fields(out)
    for b, ring in enumerate(rings):
        pad = C - len(ring)
        assert not got["valid"][:pad, b].any() and got["done"][:pad, b].all()
        np.testing.assert_array_equal(steps[pad:, b], ring)  # oldest first, in order
        np.testing.assert_array_equal(envs[pad:, b], b)  # never another env's steps
        np.testing.assert_array_equal(got["reward"][pad:, b], ring)
        np.testing.assert_array_equal(
            got["final_observation"][pad:, b], got["observation"][pad:, b] + 0.5
        )


def test_subset_sampling_is_uniform_over_what_is_stored(subset_run) -> None:
    """Rings of unequal fill: every stored (env, start) pair is equally likely
    (Pearson chi-square, 1 - 1e-3 quantile), whatever its env's fill."""
    (_, _, (seq, info)), N = subset_run
    rings = _reference()
    cells = [(b, s) for b, r in enumerate(rings) for s in range(len(r) - 1)]
    assert len(cells) == 19
    steps, envs = labels(seq)
    np.testing.assert_array_equal(envs[0], np.asarray(info.env_index))
    assert np.asarray(info.ok).all()
    index = {cell: k for k, cell in enumerate(cells)}
    counts = np.zeros(len(cells))
    for e, s, first, second in zip(envs[0], np.asarray(info.start), *steps, strict=True):
        # start counts from the env's own oldest step; the sequence is contiguous in its ring
        assert (rings[e][s], rings[e][s + 1]) == (first, second)
        counts[index[(e, s)]] += 1
    expected = N / len(cells)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # df = 18 < 30: Wilson-Hilferty is ~1% off there, a margin far below the test's slack.
    assert chi2 < chi2_threshold(len(cells) - 1, z=3.0902), (chi2, counts)


def test_subset_write_errors_name_the_argument(examples: Samples) -> None:
    rep = replay.uniform(examples, B, C)
    state = rep.init()
    full = synthetic(examples, 0, 2, B)
    two = _cols(full, [0, 1])
    with pytest.raises(ValueError, match=r"env_ids must be in 0\.\.3"):
        rep.add(state, two, env_ids=np.array([0, 4]))
    with pytest.raises(ValueError, match="env_ids must be distinct"):
        rep.add(state, two, env_ids=np.array([1, 1]))
    with pytest.raises(TypeError, match="env_ids must be a 1-D array"):
        rep.add(state, two, env_ids=np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="batch has B=2 envs, env_ids 3"):
        rep.add(state, two, env_ids=np.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"env_mask must be bool \[B\]"):
        rep.add(state, full, env_mask=np.array([1, 0, 1, 0]))
    with pytest.raises(ValueError, match="not both"):
        rep.add(state, full, env_ids=np.arange(B), env_mask=np.ones(B, bool))
    one = replay.one_time(examples, B, 2)
    with pytest.raises(ValueError, match="one_time stores whole batches"):
        one.add(one.init(), two, env_ids=np.array([0, 1]))
    # A masked-out env's ring is untouched, even its write position.
    after = rep.add(state, full, env_mask=np.array([True, False, False, True]))
    np.testing.assert_array_equal(np.asarray(after.position), [2, 0, 0, 2])
    assert not bool(np.asarray(after.data.valid)[1:3].any())


# ----------------------------------------------------------- initial collect


@pytest.mark.slow  # ~9 s
def test_prefill_is_the_random_policy_stream_and_continues_it() -> None:
    """prefill with an epsilon-greedy sampler stores exactly what a RandomAgent
    sampler with the same key collects (uniform actions from the same keys),
    with zeros as the agent's info; the sampler's state continues that stream
    (its next step is the reference's step 3T)."""
    env, env_params = gymnax.make("CartPole-v1")
    T, n_envs = 3, 2
    greedy = js.agents.EpsilonGreedyAgent(
        env.action_space(env_params), global_B=2, hidden_sizes=(4,)
    )
    params = greedy.init(jax.random.key(1), jnp.zeros(4))
    sampler = js.make_sampler(env, env_params, greedy, js.BatchSpec(T, n_envs))
    random = js.make_sampler(
        env, env_params, js.agents.RandomAgent(env.action_space(env_params)),
        js.BatchSpec(4 * T, n_envs),
    )  # fmt: skip
    rep = replay.uniform(sampler.examples, n_envs, 16)

    @jax.jit
    def run(key):
        state, buf = replay.prefill(
            sampler, rep, sampler.init(key, params), rep.init(), params, 2 * T * n_envs + 1
        )  # rounds up to 3 batches
        _, ref = random.collect(random.init(key, ()), ())
        return state, buf, ref

    state, buf, ref = run(jax.random.key(4))
    np.testing.assert_array_equal(np.asarray(buf.filled), 3 * T)
    stored, _ = rep.replay_all(buf)
    got, want = fields(stored), fields(ref.samples)
    for k in want:
        np.testing.assert_array_equal(got[k][16 - 3 * T :], want[k][: 3 * T], err_msg=k)
    assert not np.asarray(stored.agent.agent_info.q_values).any()
    # The sampler's next batch starts where the random stream stopped.
    np.testing.assert_array_equal(np.asarray(state.env.observation), want["observation"][3 * T])
    agent = state.env.agent
    np.testing.assert_array_equal(np.asarray(agent.prev_reward), want["prev_reward"][3 * T])
    np.testing.assert_array_equal(np.asarray(agent.prev_action), want["prev_action"][3 * T])
    np.testing.assert_array_equal(np.asarray(state.step), 3 * T)
    with pytest.raises(ValueError, match="num_steps must be >= 0"):
        replay.prefill(sampler, rep, None, None, params, -1)
    with pytest.raises(TypeError, match="sampler must be a jaxsample Sampler"):
        replay.prefill(object(), rep, None, None, params, 1)


@pytest.mark.slow  # ~12 s: two devices, greedy agent
def test_sharded_collect_random_acts_randomly_on_every_shard() -> None:
    """A sharded sampler's collect_random is the one-device one's (its shards
    must take the random policy too, not the agent)."""
    env, env_params = gymnax.make("CartPole-v1")
    greedy = js.agents.EpsilonGreedyAgent(
        env.action_space(env_params), global_B=2, hidden_sizes=(4,)
    )
    params = jax.jit(greedy.init)(jax.random.key(1), jnp.zeros(4))
    spec = js.BatchSpec(3, 2)
    one = js.make_sampler(env, env_params, greedy, spec)
    two = js.make_sampler(env, env_params, greedy, spec, mesh=jax.make_mesh((2,), ("envs",)))
    key = jax.random.key(4)
    # The one-device reference in one compiled program (init and collect_random).
    _, want = jax.jit(lambda k, p: one.collect_random(one.init(k, p), p))(key, params)
    state = two.init(key, params)  # eager, as a user would
    jitted = jax.jit(two.init)(key, params)  # and under jit: the same state
    for x, y in zip(jax.tree.leaves(state), jax.tree.leaves(jitted), strict=True):
        np.testing.assert_array_equal(
            *(
                jax.random.key_data(v) if jnp.issubdtype(v.dtype, jax.dtypes.prng_key) else v
                for v in (x, y)
            )
        )
    _, got = jax.jit(two.collect_random)(state, params)
    got = jax.tree.map(np.asarray, got)  # one host array per leaf (the store is sharded)
    for name, x in fields(want.samples).items():
        np.testing.assert_array_equal(fields(got.samples)[name], x, err_msg=name)
    assert not np.asarray(got.samples.agent.agent_info.q_values).any()

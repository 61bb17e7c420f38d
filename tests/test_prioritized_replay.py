"""Prioritized replay (jaxsample.replay.prioritized) and DQN with it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_replay import cartpole_examples, chi2_threshold, labels, synthetic

from jaxsample import replay
from jaxsample.algos import dqn
from jaxsample.types import Samples

B, C, L = 3, 8, 2
ALPHA, BETA = 0.7, 0.5


# One worker builds the module fixtures for all its tests.
pytestmark = pytest.mark.xdist_group("test_prioritized_replay")


@pytest.fixture(scope="module")
def examples() -> Samples:
    return cartpole_examples()


def _priorities() -> np.ndarray:
    """Raw priorities [B, C] in 0.5..3, with two zeros (never drawn)."""
    p = np.random.default_rng(0).uniform(0.5, 3.0, (B, C)).astype(np.float32)
    p[0, 1] = p[1, 6] = 0.0
    return p


@pytest.fixture(scope="module")
def per(examples: Samples):
    """Env 1 wraps (11 steps in a ring of 8, env_ids), envs 0, 2 hold 5 steps; the
    table is set to _priorities() ** alpha, then 20000 sequences of 2 are drawn."""
    rep = replay.prioritized(examples, B, C, alpha=ALPHA, beta=BETA)
    N = 20_000

    @jax.jit
    def run(table, key):
        state = rep.add(rep.init(), synthetic(examples, 0, 5, B))
        one = jax.tree.map(lambda x: x[:, 1:2], synthetic(examples, 5, 6, B))
        state = rep.add(state, one, env_ids=np.array([1]))
        fresh = state.priority
        state = state.replace(priority=table**ALPHA)
        return state, fresh, rep.sample(state, key, N, L)

    return rep, run(jnp.asarray(_priorities()), jax.random.key(2)), N


def _reference() -> tuple[dict, np.ndarray]:
    """Per drawable start (env, slot) its step label and probability, from numpy:
    starts where a sequence of L fits, weighted by p ** alpha."""
    rings = {0: list(range(5)), 1: list(range(11))[-C:], 2: list(range(5))}
    first_slot = {0: 0, 1: 11 % C, 2: 0}  # the oldest step's slot
    p = _priorities() ** ALPHA
    cells = {}
    for b, ring in rings.items():
        for age in range(len(ring) - L + 1):
            slot = (first_slot[b] + age) % C
            if p[b, slot] > 0:
                cells[(b, slot)] = (ring[age], age, p[b, slot])
    total = sum(w for *_, w in cells.values())
    return {k: (step, age, w / total) for k, (step, age, w) in cells.items()}, p


def test_sampling_follows_the_priorities(per) -> None:
    """Pearson chi-square of the drawn (env, start) against p^alpha / sum p^alpha
    (1 - 1e-3 quantile); zero-priority and too-new starts are never drawn."""
    _, (_, _, (seq, info)), N = per
    cells, _ = _reference()
    env, slot = np.asarray(info.env_index), np.asarray(info.slot)
    assert np.asarray(info.ok).all()
    keys = list(cells)
    code = {e * C + s: i for i, (e, s) in enumerate(keys)}
    drawn = env * C + slot
    assert set(drawn.tolist()) <= set(code), "a start that cannot be drawn was drawn"
    which = np.array([code[d] for d in drawn.tolist()])
    counts = np.bincount(which, minlength=len(keys)).astype(float)
    steps, envs = labels(seq)
    want = np.array([cells[keys[i]][:2] for i in which])  # (step, age) per draw
    np.testing.assert_array_equal(steps[0], want[:, 0])
    np.testing.assert_array_equal(steps[1], want[:, 0] + 1)
    np.testing.assert_array_equal(envs[0], env)
    np.testing.assert_array_equal(np.asarray(info.start), want[:, 1])
    expected = N * np.array([cells[k][2] for k in keys])
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < chi2_threshold(len(keys) - 1, z=3.0902), (chi2, counts, expected)


def test_probabilities_and_importance_weights(per) -> None:
    """info.probability and info.weight against numpy: (P_min / P)^beta."""
    _, (_, fresh, (_, info)), _ = per
    cells, _ = _reference()
    drawn = zip(np.asarray(info.env_index).tolist(), np.asarray(info.slot).tolist(), strict=True)
    prob = np.array([cells[cell][2] for cell in drawn])
    np.testing.assert_allclose(np.asarray(info.probability), prob, rtol=1e-5)
    p_min = min(c[2] for c in cells.values())
    np.testing.assert_allclose(np.asarray(info.weight), (p_min / prob) ** BETA, rtol=1e-5)
    # New steps got the largest priority so far (1 at the start): 1 ** alpha.
    want = np.zeros((B, C), np.float32)
    want[[0, 2], :5] = 1.0
    want[1] = 1.0
    np.testing.assert_array_equal(np.asarray(fresh), want)


def test_update_priorities(per) -> None:
    rep, (state, _, _), _ = per
    new = jnp.arange(1.0, 7.0) * 2

    @jax.jit
    def run(state, key, new):
        seq, info = rep.sample(state, key, 6, L, beta=1.0)
        info = info.replace(ok=info.ok.at[0].set(False))  # a row to skip
        after = rep.update_priorities(state, info, new)
        # the next add gives the new steps 12 ** alpha
        added = rep.add(after, jax.tree.map(lambda x: x[:1, :B], seq), env_ids=np.arange(B))
        return info, after, added

    info, after, added = run(state, jax.random.key(5), new)
    got = np.asarray(after.priority)
    want = np.array(state.priority)
    drawn: dict[tuple[int, int], list[float]] = {}
    for n in range(1, 6):
        cell = (int(info.env_index[n]), int(info.slot[n]))
        drawn.setdefault(cell, []).append(float(new[n]) ** ALPHA)
    for cell, values in drawn.items():  # a start drawn twice keeps one of its values
        assert any(np.isclose(got[cell], v, rtol=1e-6) for v in values), (cell, values)
        want[cell] = got[cell]
    np.testing.assert_array_equal(got, want)  # nothing else changed (row 0 skipped)
    assert float(after.max_priority) == 12.0
    np.testing.assert_allclose(np.asarray(added.priority)[[0, 2], 5], 12.0**ALPHA, rtol=1e-6)
    with pytest.raises(ValueError, match="finite and >= 0"):
        rep.update_priorities(state, info, -new)
    with pytest.raises(ValueError, match=r"priority must be float \[N\] = \[6\]"):
        rep.update_priorities(state, info, new[:3])
    with pytest.raises(TypeError, match="PrioritizedInfo"):
        plain = replay.ReplayInfo(
            env_index=info.env_index,
            start=info.start,
            same_episode=info.same_episode,
            crosses_episode=info.crosses_episode,
            ok=info.ok,
        )
        rep.update_priorities(state, plain, new)
    with pytest.raises(ValueError, match="alpha must be in"):
        replay.prioritized(rep.examples, B, C, alpha=1.5)


@pytest.mark.slow
def test_dqn_with_prioritized_replay_updates_priorities() -> None:
    """A tiny DQN run with prioritized_replay: the loss is finite and the
    sampled steps' priorities moved off the initial max-priority value."""
    config = dqn.DQNConfig(
        num_envs=2, num_steps=4, total_timesteps=64, buffer_capacity=16, batch_size=8,
        learning_starts=16, hidden_sizes=(8,), eval_episodes=1, prioritized_replay=True,
    )  # fmt: skip
    trainer = dqn.make_train(config)
    assert isinstance(trainer.replayer, replay.PrioritizedReplayer)
    state, metrics = jax.jit(trainer.train)(jax.random.key(0))
    loss = np.asarray(metrics["loss"])
    assert np.isfinite(loss[1:]).all() and np.isnan(loss[0])
    table = np.asarray(state.replay_state.priority)
    assert table.shape == (2, 16) and (table > 0).all()
    assert len(np.unique(table)) > 8  # |td| + eps, not one max priority
    with pytest.raises(ValueError, match="priority_alpha"):
        dqn.DQNConfig(priority_alpha=2.0)


def test_two_level_draw_over_several_blocks() -> None:
    """The draw itself over 300 weights (blocks of 128: three, the last padded),
    with zero runs, against w / sum(w) (chi-square, 1 - 1e-3 quantile)."""
    from jaxsample.replay.prioritized import _draw

    w = np.random.default_rng(1).uniform(0.2, 1.0, 300).astype(np.float32)
    w[100:140] = 0.0  # across the first block boundary
    w[-30:] = 0.0  # the tail: the clamp to the last positive leaf
    N = 60_000
    index, mass, total = jax.jit(_draw, static_argnums=2)(jnp.asarray(w), jax.random.key(3), N)
    index = np.asarray(index)
    assert (w[index] > 0).all()
    np.testing.assert_allclose(np.asarray(mass), w[index])
    np.testing.assert_allclose(float(total), w.sum(), rtol=1e-5)
    drawable = np.flatnonzero(w > 0)
    counts = np.bincount(index, minlength=300)[drawable]
    expected = N * w[drawable] / w.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < chi2_threshold(drawable.size - 1, z=3.0902), chi2

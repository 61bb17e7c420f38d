"""Tests of the step metrics, the wrap-safe counters and the host observers."""

import math

import chex
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsample as js
from jaxsample import metrics
from jaxsample.metrics import Counter, StepMetrics
from jaxsample.types import TrajInfo

T, B, WINDOW = 16, 4, 7


# One worker builds the module fixtures for all its tests.
pytestmark = pytest.mark.xdist_group("test_metrics")


@pytest.fixture(scope="module")
def sampler() -> js.Sampler:
    env, params = gymnax.make("CartPole-v1")
    agent = js.agents.RandomAgent(env.action_space(params))
    return js.make_sampler(env, params, agent, js.BatchSpec(T, B))


@pytest.fixture(scope="module")
def batches(sampler: js.Sampler) -> list[js.Batch]:
    collect = jax.jit(sampler.collect)
    state = jax.jit(sampler.init)(jax.random.key(0), ())
    out = []
    for _ in range(8):  # ~23 episodes of a random CartPole agent: the window wraps
        state, batch = collect(state, ())
        out.append(batch)
    return out


def reference(batches: list[js.Batch], window: int) -> dict[str, float]:
    """The metrics computed with numpy: episodes in time order, then env order."""
    returns, lengths, steps = [], [], 0
    for batch in batches:
        info = batch.traj_infos
        completed = np.asarray(info.completed)
        for t, b in zip(*np.nonzero(completed), strict=True):  # row-major: t, then b
            returns.append(float(np.asarray(info.episode_return)[t, b]))
            lengths.append(int(np.asarray(info.length)[t, b]))
        steps += int(np.asarray(batch.samples.valid).sum())
    last_r, last_l = returns[-window:], lengths[-window:]
    return {
        "number_of_episodes": len(returns),
        "environment_steps": steps,
        "average_return": float(np.mean(last_r)) if last_r else math.nan,
        "average_episode_length": float(np.mean(last_l)) if last_l else math.nan,
    }


def assert_matches(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key in ("number_of_episodes", "environment_steps"):
        assert isinstance(got[key], int) and got[key] == want[key], key
    for key in ("average_return", "average_episode_length"):
        assert isinstance(got[key], float)
        np.testing.assert_allclose(got[key], want[key], rtol=1e-12, err_msg=key)


def test_metrics_agree_with_numpy(batches: list[js.Batch]) -> None:
    update = jax.jit(chex.assert_max_traces(StepMetrics.update, n=1))
    summary = jax.jit(StepMetrics.summary)
    state = StepMetrics.init(window=WINDOW)
    d = metrics.as_dict(state)
    assert d["number_of_episodes"] == 0 and d["environment_steps"] == 0
    assert math.isnan(d["average_return"]) and math.isnan(d["average_episode_length"])
    assert bool(jnp.isnan(summary(state)["average_return"]))
    for k in range(len(batches)):
        state = update(state, batches[k])
        want = reference(batches[: k + 1], WINDOW)
        assert_matches(metrics.as_dict(state), want)
        s = summary(state)
        for key, value in want.items():
            assert s[key].dtype == jnp.float32
            np.testing.assert_allclose(float(s[key]), value, rtol=1e-6, err_msg=key)
    # The window wrapped: more episodes than the window over the run.
    assert metrics.as_dict(state)["number_of_episodes"] > 2 * WINDOW
    # Eager and jitted updates agree.
    eager = StepMetrics.init(window=WINDOW)
    for batch in batches[:2]:
        eager = eager.update(batch)
    jitted = StepMetrics.init(window=WINDOW)
    for batch in batches[:2]:
        jitted = update(jitted, batch)
    chex.assert_trees_all_equal(eager, jitted)


def synthetic_batch(batch: js.Batch, seed: int) -> js.Batch:
    """``batch`` with random validity and many completed episodes (more than the window)."""
    rng = np.random.default_rng(seed)
    shape = np.asarray(batch.samples.valid).shape
    valid = rng.random(shape) < 0.7
    completed = valid & (rng.random(shape) < 0.5)
    info = TrajInfo(
        completed=jnp.asarray(completed),
        length=jnp.asarray(rng.integers(1, 500, shape), jnp.int32),
        episode_return=jnp.asarray(rng.normal(size=shape), jnp.float32),
        discounted_return=jnp.zeros(shape, jnp.float32),
        nonzero_rewards=jnp.zeros(shape, jnp.int32),
    )
    samples = batch.samples.replace(valid=jnp.asarray(valid))
    return js.Batch(samples=samples, traj_infos=info)


def test_valid_steps_and_many_episodes_per_batch(batches: list[js.Batch]) -> None:
    """Only valid steps count; with more episodes than the window in one batch, the last
    ``window`` in (t, b) order remain."""
    synth = [synthetic_batch(batches[0], seed) for seed in range(3)]
    assert int(np.asarray(synth[0].traj_infos.completed).sum()) > WINDOW
    update = jax.jit(StepMetrics.update)
    state = StepMetrics.init(window=WINDOW)
    for k, batch in enumerate(synth):
        state = update(state, batch)
        assert_matches(metrics.as_dict(state), reference(synth[: k + 1], WINDOW))
    assert metrics.as_dict(state)["environment_steps"] < 3 * T * B


def test_counter_is_exact_past_2_to_the_31_and_32() -> None:
    """32-bit mode (the default): counts past int32 and uint32 stay exact."""
    assert not jax.config.jax_enable_x64
    add = jax.jit(Counter.add)
    for start, n in ((2**31 - 3, 10), (2**32 - 2, 5), (2**32 - 1, 1), (5 * 2**32 - 7, 2**32 - 1)):
        c = add(Counter.of(start), jnp.asarray(n, jnp.int32 if n < 2**31 else jnp.uint32))
        assert c.hi.dtype == jnp.uint32 and c.lo.dtype == jnp.uint32
        assert c.to_int() == start + n, (start, n)
        np.testing.assert_allclose(float(c.to_float()), start + n, rtol=1e-7)
    # Many carries inside a jitted loop: 3000 adds of 2**21 + 7 (> 2**32 in total).
    n, inc = 3000, 2**21 + 7
    total = jax.jit(lambda c: jax.lax.fori_loop(0, n, lambda i, c: c.add(jnp.int32(inc)), c))(
        Counter.zeros()
    )
    assert total.to_int() == n * inc > 2**32
    with pytest.raises(ValueError, match="2\\*\\*64"):
        Counter.of(2**64)
    with pytest.raises(TypeError):
        Counter.of(1.0)


def test_step_metrics_counters_do_not_overflow(batches: list[js.Batch]) -> None:
    """Start the counters just below 2**31 and 2**32 and add real batches."""
    state = StepMetrics.init(window=WINDOW).replace(
        number_of_episodes=Counter.of(2**31 - 1), environment_steps=Counter.of(2**32 - 10)
    )
    update = jax.jit(StepMetrics.update)
    for batch in batches[:2]:
        state = update(state, batch)
    want = reference(batches[:2], WINDOW)
    d = metrics.as_dict(state)
    assert d["number_of_episodes"] == 2**31 - 1 + want["number_of_episodes"]
    assert d["environment_steps"] == 2**32 - 10 + want["environment_steps"] == 2**32 + 118


def test_validation() -> None:
    with pytest.raises(ValueError, match="window"):
        StepMetrics.init(window=0)
    with pytest.raises(TypeError, match="window"):
        StepMetrics.init(window=True)
    with pytest.raises(TypeError, match="Batch"):
        StepMetrics.init().update({"completed": 1})
    with pytest.raises(TypeError, match="StepMetrics"):
        metrics.as_dict({})
    with pytest.raises(ValueError, match="at least one"):
        metrics.make_observer()
    with pytest.raises(TypeError, match="callable"):
        metrics.make_observer(1)


def test_observer_in_jitted_scan_of_collects(sampler: js.Sampler) -> None:
    """One call per collected batch, in order, with the right values; two functions
    called in the order given; twice the jitted loop keeps the order across calls."""
    log: list[dict] = []
    seen: list[str] = []

    def record(m: StepMetrics) -> None:
        assert isinstance(m.returns, np.ndarray)  # numpy on the host
        seen.append("record")
        log.append(metrics.as_dict(m))

    def second(m: StepMetrics) -> None:
        seen.append("second")

    observer = metrics.make_observer(record, second)
    steps = 3

    @jax.jit
    def train(s, m):
        def body(carry, _):
            s, m = carry
            s, batch = sampler.collect(s, ())
            m = m.update(batch)
            observer(m)
            return (s, m), batch

        return jax.lax.scan(body, (s, m), None, length=steps)

    carry = (jax.jit(sampler.init)(jax.random.key(1), ()), StepMetrics.init(window=WINDOW))
    collected = []
    for _ in range(2):
        carry, stacked = train(*carry)
        collected += [jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(steps)]
    jax.effects_barrier()
    assert len(log) == 2 * steps
    assert seen == ["record", "second"] * (2 * steps)
    for k, got in enumerate(log):
        assert_matches(got, reference(collected[: k + 1], WINDOW))
    assert_matches(metrics.as_dict(carry[1]), reference(collected, WINDOW))

    # Outside jit, and through observe(): called at once with numpy leaves.
    out = []
    metrics.observe({"x": jnp.arange(3)}, lambda d: out.append(d["x"]))
    jax.effects_barrier()
    assert len(out) == 1 and isinstance(out[0], np.ndarray)
    np.testing.assert_array_equal(out[0], [0, 1, 2])


def test_step_observer_sees_every_step_of_every_env(batches: list[js.Batch]) -> None:
    """Per step: T calls per batch with [B] leaves, in time order, equal to the
    batch's own arrays (jitted and eager); per batch: a reduction compiled in."""
    seen: list[dict] = []
    order: list[str] = []
    observer = metrics.make_step_observer(seen.append, lambda s: order.append("second"))
    jitted = jax.jit(observer.__call__)
    for batch in batches[:2]:
        jitted(batch)
    observer(batches[2])  # eager
    jax.effects_barrier()
    assert len(seen) == 3 * T and order == ["second"] * (3 * T)
    assert seen[0]["reward"].shape == (B,) and isinstance(seen[0]["valid"], np.ndarray)
    for name, get in (
        ("reward", lambda b: b.samples.env.reward),
        ("done", lambda b: b.samples.env.done),
        ("valid", lambda b: b.samples.valid),
    ):
        want = np.concatenate([np.asarray(get(b)) for b in batches[:3]])
        np.testing.assert_array_equal(np.stack([s[name] for s in seen]), want, err_msg=name)
    returns = np.stack([s["traj_info"].episode_return for s in seen])
    want = np.concatenate([np.asarray(b.traj_infos.episode_return) for b in batches[:3]])
    np.testing.assert_array_equal(returns, want)

    # A per-batch reduction compiled in: the host gets two numbers per batch.
    totals: list[tuple[int, int]] = []
    counts = metrics.make_step_observer(
        lambda d: totals.append((int(d["steps"]), int(d["episodes"]))),
        select=lambda b: {"steps": b.samples.valid.sum(), "episodes": b.traj_infos.completed.sum()},
        per_step=False,
    )
    for batch in batches:
        counts(batch)
    jax.effects_barrier()
    assert totals == [
        (int(np.sum(b.samples.valid)), int(np.sum(b.traj_infos.completed))) for b in batches
    ]


def test_step_observer_validation(batches: list[js.Batch]) -> None:
    with pytest.raises(ValueError, match="at least one"):
        metrics.make_step_observer()
    with pytest.raises(TypeError, match="select"):
        metrics.make_step_observer(print, select=1)
    with pytest.raises(TypeError, match="per_step"):
        metrics.make_step_observer(print, per_step=1)
    with pytest.raises(TypeError, match="Batch"):
        metrics.make_step_observer(print)({"reward": 1})
    bad = metrics.make_step_observer(print, select=lambda b: {"x": b.samples.valid.sum(0)})
    with pytest.raises(ValueError, match=r"\[T, B\].*\['x'\]"):
        bad(batches[0])

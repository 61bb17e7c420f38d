"""The per-env key schedule: chunk invariance and no key reuse on long runs."""

import functools

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsample as js
from jaxsample.core.keys import EPOCH, EpochKeys, step_key


def _samplers(T: int, B: int = 4):
    env, env_params = gymnax.make("CartPole-v1")
    agent = js.agents.RandomAgent(env.action_space(env_params))
    return [js.make_sampler(env, env_params, agent, js.BatchSpec(t, B)) for t in (T, 2 * T)]


def _flat(batches: list[js.Batch]) -> dict[str, np.ndarray]:
    fields = {
        "observation": lambda b: b.samples.env.observation,
        "final_observation": lambda b: b.samples.env.final_observation,
        "action": lambda b: b.samples.agent.action,
        "reward": lambda b: b.samples.env.reward,
        "done": lambda b: b.samples.env.done,
        "length": lambda b: b.traj_infos.length,
    }
    return {k: np.concatenate([np.asarray(f(b)) for b in batches]) for k, f in fields.items()}


def test_two_batches_equal_one_across_the_key_epoch_boundary() -> None:
    """The uint32 step count starts 5 steps before its epoch ends: collecting
    2 x 8 steps and 1 x 16 steps still gives the same stream, and the state's
    counter comes back into range instead of wrapping."""
    short, long = _samplers(8)
    key = jax.random.key(7)
    s_short, s_long = short.init(key, ()), long.init(key, ())
    near_end = jnp.full((4,), EPOCH - 5, jnp.uint32)
    s_short, s_long = s_short.replace(step=near_end), s_long.replace(step=near_end)
    batches, collect = [], jax.jit(short.collect)
    for _ in range(2):
        s_short, b = collect(s_short, ())
        batches.append(b)
    s_long, b_long = jax.jit(long.collect)(s_long, ())
    a, b = _flat(batches), _flat([b_long])
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    np.testing.assert_array_equal(np.asarray(s_short.step), 11)
    np.testing.assert_array_equal(np.asarray(s_long.step), 11)
    for x, y in zip(jax.tree.leaves(s_short), jax.tree.leaves(s_long), strict=True):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_new_epoch_uses_new_keys() -> None:
    """Step EPOCH uses the next epoch key, not the key of step 0 again."""
    k = jax.random.key(3)
    nxt = jax.random.split(k)[0]
    keys = EpochKeys(key=k, next_key=nxt, step=jnp.uint32(EPOCH - 1))

    def data(key: jax.Array) -> np.ndarray:
        return np.asarray(jax.random.key_data(key))

    for stream in (0, 1, 2, 3):
        last = step_key(keys, jnp.int32(0), stream)
        first_of_next = step_key(keys, jnp.int32(1), stream)
        np.testing.assert_array_equal(
            data(last), data(jax.random.fold_in(k, np.uint32(4 * (EPOCH - 1) + stream)))
        )
        np.testing.assert_array_equal(data(first_of_next), data(jax.random.fold_in(nxt, stream)))
        assert not np.array_equal(data(first_of_next), data(jax.random.fold_in(k, stream)))


class RankAgent:
    """Random actions; its state is its env rank, so initial_state(rank) shows up."""

    def __init__(self, space) -> None:
        self.space = space

    def init(self, key, observation):
        return ()

    def initial_state(self, env_rank):
        return jnp.asarray(env_rank, jnp.int32)

    def step(self, params, inputs, state, key):
        return js.AgentStep(self.space.sample(key), state), state

    def value(self, params, inputs, state):
        return jnp.asarray(state, jnp.float32)

    def as_eval(self):
        return self


def _rank_samplers(ranks: range | None) -> js.Sampler:
    env, env_params = gymnax.make("CartPole-v1")
    agent = RankAgent(env.action_space(env_params))
    kw = dict(max_decorrelation_steps=6, bootstrap_value=True)
    if ranks is None:
        return js.make_sampler(env, env_params, agent, js.BatchSpec(12, 8), **kw)
    return js.make_sampler(
        env, env_params, agent, js.BatchSpec(12, 4), env_ranks=ranks, global_B=8, **kw
    )


def _two_batches(sampler: js.Sampler) -> list[js.Batch]:
    state, collect = jax.jit(sampler.init)(jax.random.key(11), ()), jax.jit(sampler.collect)
    out = []
    for _ in range(2):
        state, batch = collect(state, ())
        out.append(jax.device_get(batch))
    return out


@functools.cache
def _whole() -> list[js.Batch]:
    """Two batches of one B=8 sampler."""
    return _two_batches(_rank_samplers(None))


@pytest.mark.parametrize("ranks", [range(4), range(4, 8)], ids=["0-3", "4-7"])
def test_env_ranks_split_one_global_batch(ranks: range) -> None:
    """A sampler owning ranks 0..3 or 4..7 of global_B=8 gives exactly those
    columns of one B=8 sampler: keys and agent states come from global ranks."""
    cols = np.asarray(ranks)
    for b_whole, b in zip(_whole(), _two_batches(_rank_samplers(ranks)), strict=True):
        # [T, B, ...] leaves are columns of axis 1, per-batch [B, ...] leaves of axis 0.
        picked = jax.tree.map(
            lambda a: np.take(np.asarray(a), cols, axis=1 if a.shape[0] == 12 else 0), b_whole
        )
        for x, y in zip(jax.tree.leaves(picked), jax.tree.leaves(b), strict=True):
            np.testing.assert_array_equal(x, np.asarray(y))
    b_whole = _whole()[-1]
    np.testing.assert_array_equal(np.asarray(b_whole.samples.agent.agent_info[0]), np.arange(8))
    np.testing.assert_array_equal(np.asarray(b_whole.samples.bootstrap_value), np.arange(8))

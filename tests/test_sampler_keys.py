"""The per-env key schedule: chunk invariance and no key reuse on long runs."""

import functools

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import step_key as ref_step_key
from jax.extend.random import threefry_2x32

import jaxsample as js
from jaxsample.core.keys import EPOCH, EpochKeys, batch_step_keys, step_key


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


@pytest.mark.parametrize("impl", ["threefry2x32", pytest.param("rbg", marks=pytest.mark.slow)])
def test_two_batches_equal_one_across_the_key_epoch_boundary(impl: str) -> None:
    """The uint32 step count starts 5 steps before its epoch ends: collecting
    2 x 8 steps and 1 x 16 steps still gives the same stream, and the state's
    counter comes back into range in the next epoch instead of wrapping (with
    JAX's default keys and with keys of another implementation)."""
    short, long = _samplers(8)
    key = jax.random.key(7, impl=impl)
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
    for s in (s_short, s_long):
        np.testing.assert_array_equal(np.asarray(s.step), 11)
        np.testing.assert_array_equal(np.asarray(s.epoch), 1)
    if impl == "threefry2x32":  # the random actions from the schedule's own keys
        space = gymnax.make("CartPole-v1")[0].action_space()
        k_run = short.init(key, ()).key
        for e in range(4):
            want = [int(space.sample(ref_step_key(k_run[e], EPOCH - 5 + t, 0))) for t in range(16)]
            np.testing.assert_array_equal(a["action"][:, e], want)
    for x, y in zip(jax.tree.leaves(s_short), jax.tree.leaves(s_long), strict=True):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _data(key: jax.Array) -> np.ndarray:
    return np.asarray(jax.random.key_data(key))


def test_a_new_epoch_uses_new_keys() -> None:
    """Step EPOCH hashes the 64-bit count (1, stream) with the run key
    (Threefry-2x32, what fold_in computes in epoch 0), not the key of step 0
    again; a batch's keys drawn at once equal the keys of its steps one by one."""
    k = jax.random.key(3)
    keys = EpochKeys(key=k, epoch=jnp.uint32(0), step=jnp.uint32(EPOCH - 2))
    words = jax.random.key_data(k)
    for stream in (0, 1, 2, 3):
        last = step_key(keys, jnp.int32(1), stream)
        first_of_next = step_key(keys, jnp.int32(2), stream)
        np.testing.assert_array_equal(
            _data(last), _data(jax.random.fold_in(k, np.uint32(4 * (EPOCH - 1) + stream)))
        )
        want = threefry_2x32(words, np.array([1, stream], np.uint32))
        np.testing.assert_array_equal(_data(first_of_next), np.asarray(want))
        assert not np.array_equal(_data(first_of_next), _data(jax.random.fold_in(k, stream)))
    k_agent, (k_step, k_reset) = jax.jit(batch_step_keys, static_argnums=(1, 2))(keys, 5, True)
    for t in range(5):
        for got, stream in ((k_agent, 0), (k_step, 1), (k_reset, 2)):
            want = step_key(keys, jnp.int32(t), stream)
            np.testing.assert_array_equal(_data(got[t]), _data(want), err_msg=f"{t} {stream}")


def test_keys_of_another_implementation_fold_the_epoch_in() -> None:
    """Keys that are not Threefry's: ``fold_in(k, 4 i + s)`` in epoch 0, that
    key with the epoch folded in after, in later epochs."""
    k = jax.random.key(3, impl="rbg")
    keys = EpochKeys(key=k, epoch=jnp.uint32(2), step=jnp.uint32(EPOCH - 1))
    got = step_key(keys, jnp.int32(0), 1)
    in_epoch = jax.random.fold_in(k, np.uint32(4 * (EPOCH - 1) + 1))
    np.testing.assert_array_equal(_data(got), _data(jax.random.fold_in(in_epoch, np.uint32(2))))
    zero = keys.replace(epoch=jnp.uint32(0))
    np.testing.assert_array_equal(_data(step_key(zero, jnp.int32(0), 1)), _data(in_epoch))
    k_agent, _ = batch_step_keys(keys, 3, False)
    np.testing.assert_array_equal(_data(k_agent[1]), _data(step_key(keys, jnp.int32(1), 0)))


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


@pytest.mark.parametrize(
    "ranks", [range(4), pytest.param(range(4, 8), marks=pytest.mark.slow)], ids=["0-3", "4-7"]
)
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

"""The per-env key schedule: chunk invariance and no key reuse on long runs."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np

import jaxsample as js
from jaxsample.sampler import EPOCH, _EpochKeys, _step_key


def _samplers(T: int, B: int = 3):
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
    near_end = jnp.full((3,), EPOCH - 5, jnp.uint32)
    s_short, s_long = s_short.replace(step=near_end), s_long.replace(step=near_end)
    batches = []
    for _ in range(2):
        s_short, b = jax.jit(short.collect)(s_short, ())
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
    keys = _EpochKeys(key=k, next_key=nxt, step=jnp.uint32(EPOCH - 1))

    def data(key: jax.Array) -> np.ndarray:
        return np.asarray(jax.random.key_data(key))

    for stream in (0, 1, 2):
        last = _step_key(keys, jnp.int32(0), stream)
        first_of_next = _step_key(keys, jnp.int32(1), stream)
        np.testing.assert_array_equal(
            data(last), data(jax.random.fold_in(k, np.uint32(3 * (EPOCH - 1) + stream)))
        )
        np.testing.assert_array_equal(data(first_of_next), data(jax.random.fold_in(nxt, stream)))
        assert not np.array_equal(data(first_of_next), data(jax.random.fold_in(k, stream)))

"""TrajInfo counts never wrap: they saturate at 2**31 - 1."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np

import jaxsample as js
from jaxsample.traj_info import COUNT_MAX, TrajAccumulator


def test_accumulator_counts_saturate_instead_of_wrapping() -> None:
    acc = TrajAccumulator.zeros().replace(
        length=jnp.int32(COUNT_MAX - 2), nonzero_rewards=jnp.int32(COUNT_MAX - 1)
    )
    add = jax.jit(lambda a, r: a.add(r, 0.99))
    lengths, nonzero = [], []
    for reward in (1.0, 0.0, 1.0, 1.0):
        acc = add(acc, jnp.float32(reward))
        lengths.append(int(acc.length))
        nonzero.append(int(acc.nonzero_rewards))
    assert lengths == [COUNT_MAX - 1, COUNT_MAX, COUNT_MAX, COUNT_MAX]
    assert nonzero == [COUNT_MAX, COUNT_MAX, COUNT_MAX, COUNT_MAX]
    # Below the limit the counts are exact.
    small = add(TrajAccumulator.zeros(), jnp.float32(0.0))
    assert int(small.length) == 1 and int(small.nonzero_rewards) == 0


def test_sampler_reports_no_negative_length_in_a_very_long_episode() -> None:
    env, params = gymnax.make("CartPole-v1")
    agent = js.agents.RandomAgent(env.action_space(params))
    sampler = js.make_sampler(env, params, agent, js.BatchSpec(T=8, B=4))
    state = sampler.init(jax.random.key(0), None)
    near = jnp.full((4,), COUNT_MAX - 3, jnp.int32)
    state = state.replace(traj=state.traj.replace(length=near, nonzero_rewards=near))
    _, batch = jax.jit(sampler.collect)(state, None)
    length = np.asarray(batch.traj_infos.length)
    assert length.min() >= 0 and length.max() == COUNT_MAX
    # Env 0's first steps continue the long episode: COUNT_MAX - 2, -1, then held.
    assert length[:2, 0].tolist() == [COUNT_MAX - 2, COUNT_MAX - 1]

"""The batch contract, one check for every sampler: the JAX sampler (every reset
mode, both final-observation stores) over gymnax CartPole and the host sampler
(every case of tests/test_host_sampler.py) over gymnasium's and envpool's.

:func:`check_batch_contract` takes 3 consecutive batches of any sampler and
checks docs/design.md's conventions: the stream seams (consecutive batches
continue the same stream: step 0 of batch k+1 follows step T-1 of batch k),
the restart values after an episode end (reset observation, null previous
action, 0 previous reward, the agent's initial state, a new trajectory), the
final-observation store, ``TrajInfo``, the idle steps of ``"wait"`` and
``"episodic"``, and every valid step against gymnax's CartPole dynamics (the
gymnasium and envpool CartPoles have the same dynamics).
"""

from __future__ import annotations

import functools
import itertools

import gymnax
import jax
import numpy as np
import pytest
import test_host_sampler as host_cases
from gymnax.environments.classic_control.cartpole import EnvState
from helpers import concat
from helpers import counter_value as np_value
from test_host_sampler import LIMIT, WS, B, T

pytestmark = host_cases.pytestmark

#: The JAX sampler's configurations: (reset mode, store, options).
JAX_CASES = {
    "jax-auto-sparse": ("auto", "sparse", {}),
    "jax-auto-dense": ("auto", "dense", {"final_observation": "dense"}),
    "jax-wait": ("wait", "sparse", {"reset_mode": "wait"}),
    "jax-episodic": (
        "episodic",
        "sparse",
        {"reset_mode": "episodic", "max_decorrelation_steps": 0},
    ),
}


@functools.cache
def _gymnax_cartpole_step(limit: int):
    env, env_params = gymnax.make("CartPole-v1")
    env_params = env_params.replace(max_steps_in_episode=limit)
    step = jax.vmap(env.step, in_axes=(None, 0, 0, None))
    return jax.jit(lambda state, action: step(jax.random.key(0), state, action, env_params))


def gymnax_step(obs, length, action, limit):
    """gymnax's CartPole step from each recorded (observation, time) (flat)."""
    flat = obs.reshape(-1, 4)
    state = EnvState(
        x=flat[:, 0],
        x_dot=flat[:, 1],
        theta=flat[:, 2],
        theta_dot=flat[:, 3],
        time=np.maximum(length.reshape(-1) - 1, 0).astype(np.int32),
    )
    out = _gymnax_cartpole_step(limit)(state, action.reshape(-1).astype(np.int32))
    _, _, reward, terminated, truncated, info = jax.device_get(out)
    return reward, terminated, truncated, info["final_observation"]


def check_batch_contract(
    batches,
    mode: str,
    store: str,
    ranks=tuple(range(B)),
    *,
    limit: int = LIMIT,
    envpool: bool = False,
) -> None:
    """docs/design.md's conventions on consecutive batches of CartPole, from any
    sampler (``mode``: its reset mode; ``store``: its final-observation
    store), and every valid step against gymnax's CartPole dynamics.

    ``envpool``: envpool reports a step that both reaches a terminal state and
    hits the time limit as truncated only (gymnax and gymnasium: both).
    """
    get = functools.partial(concat, batches)
    obs = get(lambda b: b.samples.env.observation)
    final = get(lambda b: b.samples.env.final_observation)
    action = get(lambda b: b.samples.agent.action)
    prev_action = get(lambda b: b.samples.agent.prev_action)
    reward = get(lambda b: b.samples.env.reward)
    prev_reward = get(lambda b: b.samples.env.prev_reward)
    term = get(lambda b: b.samples.env.terminated)
    trunc = get(lambda b: b.samples.env.truncated)
    done = get(lambda b: b.samples.env.done)
    valid = get(lambda b: b.samples.valid)
    count = get(lambda b: b.samples.agent.agent_info["count"])
    length = get(lambda b: b.traj_infos.length)
    ti = {f: get(lambda b, f=f: getattr(b.traj_infos, f)) for f in ("completed", "episode_return")}
    ranks = 100 * np.asarray(ranks)
    ended = (term | trunc) & valid

    np.testing.assert_array_equal(done, ended | ~valid)
    np.testing.assert_array_equal(ti["completed"], ended)
    # Every valid step follows CartPole's dynamics (gymnax's implementation),
    # re-stepped from the recorded state: time = length - 1 before the step.
    v = valid.reshape(-1)
    g_reward, g_term, g_trunc, g_final = (x[v] for x in gymnax_step(obs, length, action, limit))
    np.testing.assert_array_equal(reward.reshape(-1)[v], g_reward)
    if envpool:
        g_term = g_term & ~g_trunc
    np.testing.assert_array_equal(term.reshape(-1)[v], g_term)
    forced = trunc.reshape(-1)[v] & ~g_trunc  # "episodic": the batch end
    if mode != "episodic":
        assert not forced.any()
    np.testing.assert_array_equal(trunc.reshape(-1)[v] & ~forced, g_trunc)
    kept = ~term.reshape(-1)[v] | trunc.reshape(-1)[v]  # what any store keeps
    np.testing.assert_allclose(final.reshape(-1, 4)[v][kept], g_final[kept], rtol=1e-5, atol=1e-5)
    # The store: terminated-only steps are zeros in the sparse one (never
    # bootstrapped), the true final observation in the dense one.
    term_only = term & ~trunc & valid
    assert term_only.any()
    if store == "sparse":
        assert np.all(final[term_only] == 0)
    else:
        assert np.all(np.any(final[term_only] != 0, axis=-1))
    # Each batch's initial_state is the agent's state at its step 0.
    for k, b in enumerate(batches):
        np.testing.assert_array_equal(np.asarray(b.samples.agent.initial_state), count[k * T])
    # TrajInfo: CartPole pays 1 per step.
    np.testing.assert_array_equal(ti["episode_return"][valid], length[valid])
    assert np.all(length[valid] >= 1)
    # Seams, within and across batches (auto mode: one stream).
    if mode == "auto":
        go, end = ~done[:-1], done[:-1]
        np.testing.assert_array_equal(obs[1:][go], final[:-1][go])
        np.testing.assert_array_equal(prev_action[1:][go], action[:-1][go])
        np.testing.assert_array_equal(prev_reward[1:][go], reward[:-1][go])
        np.testing.assert_array_equal(count[1:][go], count[:-1][go] + 1)
        np.testing.assert_array_equal(length[1:][go], length[:-1][go] + 1)
        assert end.any() and go.any()
        assert np.all(np.abs(obs[1:][end]) <= 0.05)  # a reset observation
        assert np.all(prev_action[1:][end] == 0) and np.all(prev_reward[1:][end] == 0)
        assert np.all(length[1:][end] == 1)
        np.testing.assert_array_equal(count[1:], np.where(end, ranks, count[1:]))
        # A truncated step's final observation is the true one, not the reset one.
        tr = trunc[:-1]
        assert tr.any()
        assert not np.any(np.all(final[:-1][tr] == obs[1:][tr], axis=-1))
        assert np.all(np.abs(final[:-1][tr]).max(axis=-1) > 0)
        # bootstrap_value of batch k is the value of batch k+1's first inputs.
        for k in range(len(batches) - 1):
            nxt = batches[k + 1].samples
            expected = np_value(
                WS[k],
                nxt.env.observation[0],
                nxt.env.prev_reward[0],
                nxt.agent.agent_info["count"][0],
            )
            np.testing.assert_allclose(batches[k].samples.bootstrap_value, expected, rtol=1e-5)
    else:
        for b in batches:
            s = b.samples
            bvalid = np.asarray(s.valid)
            bended = np.asarray(s.env.terminated | s.env.truncated) & bvalid
            assert np.all(bended.sum(axis=0) <= 1)  # one episode end per env and batch
            before = np.cumsum(bended, axis=0) - bended
            np.testing.assert_array_equal(bvalid, before == 0)
            for x in (s.env.observation, s.env.reward, s.agent.action, b.traj_infos.length):
                assert np.all(np.asarray(x)[~bvalid] == 0)
            if mode == "episodic":
                assert np.all(np.asarray(s.env.done)[-1]) and np.all(bvalid[0])
                assert np.all(np.asarray(b.traj_infos.length)[0] == 1)
        for b, nxt in itertools.pairwise(batches):
            e = np.asarray(b.samples.env.done)[-1]  # ended (or idle) at the end
            n = nxt.samples
            assert np.all(np.abs(np.asarray(n.env.observation[0])[e]) <= 0.05)
            assert np.all(np.asarray(n.agent.prev_action[0])[e] == 0)
            assert np.all(np.asarray(nxt.traj_infos.length[0])[e] == 1)
            np.testing.assert_array_equal(np.asarray(n.agent.initial_state)[e], ranks[e])


@pytest.mark.parametrize("name", [*JAX_CASES, *host_cases.CASES])
def test_batch_contract(name):
    if name in JAX_CASES:
        mode, store, options = JAX_CASES[name]
        batches = host_cases.jax_batches(**options)
        check_batch_contract(batches, mode, store)
    else:
        c = host_cases.CASES[name]
        batches = host_cases.run(name)
        check_batch_contract(batches, c.mode, c.store, c.env_ranks, envpool=c.backend == "envpool")

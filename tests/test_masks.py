"""Legal-action masks in the agents and the learners' targets, against numpy.

Every discrete agent acts only on legal actions (``AgentInputs.action_mask``);
the actor-critics' log-probabilities and entropies are the masked
distribution's (renormalised softmax over the legal actions, computed here in
numpy); DQN's greedy action and target maximise over legal actions; GAE with
``next_sign`` (negamax self-play) equals a plain Python loop. Without a mask
nothing changes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

import jaxsample.agents as A
from jaxsample.algos.returns import gae, td_target, turn_signs
from jaxsample.types import AgentInputs

N, K = 6, 400  # actions; draws per check
SPACE = spaces.Discrete(N)
OBS = jnp.arange(4, dtype=jnp.float32)


def masks(key: jax.Array, k: int) -> jax.Array:
    """``[k, N]`` random masks with at least one legal action each."""
    m = jax.random.bernoulli(key, 0.4, (k, N))
    return m.at[:, 0].set(m[:, 0] | ~m.any(axis=1))


def inputs(mask: jax.Array | None, obs: jax.Array = OBS) -> AgentInputs:
    return AgentInputs(obs, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32), mask)


def np_masked_log_softmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    z = np.where(mask, logits, -np.inf)
    z = z - z.max()
    return z - np.log(np.exp(z).sum())


AGENTS = {
    "categorical": lambda: A.CategoricalActorCritic(SPACE, hidden_sizes=(8,)),
    "recurrent": lambda: A.RecurrentActorCritic(SPACE, hidden_size=8),
    "epsilon": lambda: A.EpsilonGreedyAgent(SPACE, global_B=1, epsilon_init=0.5),
    "random": lambda: A.RandomAgent(SPACE),
}


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_every_discrete_agent_acts_only_on_legal_actions(name: str) -> None:
    agent = AGENTS[name]()
    params = agent.init(jax.random.key(0), OBS)
    m = masks(jax.random.key(1), K)
    keys = jax.random.split(jax.random.key(2), K)
    state = agent.initial_state(jnp.zeros((), jnp.int32))

    def act(a, mask, key):
        return a.step(params, inputs(mask), state, key)[0].action

    for a in (agent, agent.as_eval()):
        actions = np.asarray(jax.jit(jax.vmap(lambda mk, k, a=a: act(a, mk, k)))(m, keys))
        assert np.asarray(m)[np.arange(K), actions].all()
    # a random draw is uniform over the legal actions: one mask, many keys
    if name in ("random", "epsilon"):
        one = jnp.array([True, False, True, True, False, False])
        draws = jax.vmap(lambda k: act(agent, one, k))(jax.random.split(jax.random.key(3), 3000))
        counts = np.bincount(np.asarray(draws), minlength=N)
        assert counts[~np.asarray(one)].sum() == 0
        if name == "random":  # 1000 expected each; 5 sigma ~ 130
            assert np.all(np.abs(counts[np.asarray(one)] - 1000) < 130), counts


def test_actor_critic_log_prob_and_entropy_are_the_masked_distributions() -> None:
    agent = AGENTS["categorical"]()
    params = agent.init(jax.random.key(0), OBS)
    obs = jax.random.normal(jax.random.key(4), (K, 4))
    m = masks(jax.random.key(5), K)
    actions = jax.vmap(lambda o, mk, k: agent.step(params, inputs(mk, o), (), k)[0])(
        obs, m, jax.random.split(jax.random.key(6), K)
    )
    axes = AgentInputs(0, None, None, 0)
    log_prob, entropy, _ = jax.vmap(agent.evaluate, in_axes=(None, axes, 0))(
        params, inputs(m, obs), actions.action
    )
    raw, _ = jax.vmap(agent.forward, in_axes=(None, 0))(params, obs)
    for i in range(K):
        ref = np_masked_log_softmax(np.asarray(raw[i], np.float64), np.asarray(m[i]))
        a = int(actions.action[i])
        np.testing.assert_allclose(log_prob[i], ref[a], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(actions.agent_info.log_prob[i], ref[a], rtol=1e-5, atol=1e-6)
        legal = np.isfinite(ref)
        want = -np.sum(np.exp(ref[legal]) * ref[legal])
        np.testing.assert_allclose(entropy[i], want, rtol=1e-5, atol=1e-6)
    assert np.isfinite(np.asarray(actions.agent_info.dist_params)).all()
    # gradients of the masked log-probability are finite
    grad = jax.grad(lambda p: agent.log_prob(p, obs[0], actions.action[0], m[0]))(params)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grad))


def test_epsilon_greedy_greedy_action_and_value_over_legal_actions() -> None:
    agent = A.EpsilonGreedyAgent(SPACE, global_B=1, eval_epsilon=0.0).as_eval()
    params = agent.init(jax.random.key(0), OBS)
    q = agent.q_values(params.network, OBS)
    best = int(jnp.argmax(q))
    mask = jnp.ones(N, bool).at[best].set(False)
    step, _ = agent.step(params, inputs(mask), agent.initial_state(0), jax.random.key(1))
    want = int(np.argmax(np.where(np.asarray(mask), np.asarray(q), -np.inf)))
    assert int(step.action) == want != best
    np.testing.assert_allclose(
        agent.value(params, inputs(mask), ()), np.asarray(q)[np.asarray(mask)].max()
    )


def test_without_a_mask_nothing_changes() -> None:
    """An all-legal mask gives the actor-critic's unmasked actions and
    log-probabilities bit for bit; None leaves the random agents' draws as
    ``action_space.sample`` / ``randint``."""
    agent = AGENTS["categorical"]()
    params = agent.init(jax.random.key(0), OBS)
    key = jax.random.key(7)
    plain, _ = agent.step(params, inputs(None), (), key)
    full, _ = agent.step(params, inputs(jnp.ones(N, bool)), (), key)
    assert int(plain.action) == int(full.action)
    assert float(plain.agent_info.log_prob) == float(full.agent_info.log_prob)
    random, _ = A.RandomAgent(SPACE).step((), inputs(None), (), key)
    assert int(random.action) == int(SPACE.sample(key))


def test_dqn_target_maximises_over_the_next_legal_actions() -> None:
    key = jax.random.key(8)
    q_t, q_o = jax.random.normal(key, (2, 5, 3, N))
    m = masks(jax.random.key(9), 15).reshape(5, 3, N)
    r = jax.random.normal(jax.random.key(10), (5, 3))
    term = jax.random.bernoulli(jax.random.key(11), 0.3, (5, 3))
    qt, qo, mm = np.asarray(q_t), np.asarray(q_o), np.asarray(m)
    v = np.where(mm, qt, -np.inf).max(-1)
    best = np.where(mm, qo, -np.inf).argmax(-1)
    v_double = np.take_along_axis(qt, best[..., None], -1)[..., 0]
    for got, want in (
        (td_target(r, term, q_t, 0.9, None, m), v),
        (td_target(r, term, q_t, 0.9, q_o, m), v_double),
    ):
        ref = np.asarray(r) + 0.9 * np.where(np.asarray(term), 0.0, want)
        np.testing.assert_allclose(got, ref, rtol=1e-6)
    assert bool(jnp.all(td_target(r, term, q_t, 0.9) == td_target(r, term, q_t, 0.9, None, None)))
    with pytest.raises(ValueError, match="next_action_mask must have"):
        td_target(r, term, q_t, 0.9, None, m[..., :2])


def test_negamax_gae_equals_a_python_loop() -> None:
    T, B = 12, 3
    ks = jax.random.split(jax.random.key(12), 6)
    reward = jax.random.normal(ks[0], (T, B))
    value, final = jax.random.normal(ks[1], (2, T, B))
    boot = jax.random.normal(ks[2], (B,))
    term = jax.random.bernoulli(ks[3], 0.15, (T, B))
    trunc = jax.random.bernoulli(ks[4], 0.1, (T, B)) & ~term
    player = jax.random.randint(ks[5], (T, B), 0, 2)
    info = {"player": player, "next_player": jnp.roll(player, -1, axis=0)}
    sign = turn_signs(info)
    adv, ret = gae(reward, value, final, boot, term, trunc, gamma=0.9, lam=0.8, next_sign=sign)
    r, v, f, s = (np.asarray(x, np.float64) for x in (reward, value, final, sign))
    te, tr = np.asarray(term), np.asarray(trunc)
    want = np.zeros((T, B))
    nxt = np.zeros(B)
    for t in reversed(range(T)):
        following = np.asarray(boot) if t == T - 1 else v[t + 1]
        nv = np.where(tr[t], f[t], following)
        delta = r[t] + 0.9 * (1 - te[t]) * s[t] * nv - v[t]
        nxt = delta + 0.9 * 0.8 * (1 - (te[t] | tr[t])) * s[t] * nxt
        want[t] = nxt
    np.testing.assert_allclose(adv, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, want + v, rtol=1e-5, atol=1e-5)
    # all +1 is the ordinary GAE, bit for bit
    plain = gae(reward, value, final, boot, term, trunc, gamma=0.9, lam=0.8)
    ones = gae(
        reward, value, final, boot, term, trunc, gamma=0.9, lam=0.8, next_sign=jnp.ones((T, B))
    )
    np.testing.assert_array_equal(plain[0], ones[0])
    with pytest.raises(ValueError, match="turn_signs needs env_info keys"):
        turn_signs({"player": player})


def test_bad_masks_are_clear_errors() -> None:
    agent = AGENTS["categorical"]()
    params = agent.init(jax.random.key(0), OBS)
    with pytest.raises(TypeError, match="action_mask must be bool"):
        agent.step(params, inputs(jnp.ones(N, jnp.int32)), (), jax.random.key(0))
    with pytest.raises(ValueError, match=r"action_mask must be \[..., 6\]"):
        agent.step(params, inputs(jnp.ones(N + 1, bool)), (), jax.random.key(0))
    gauss = A.GaussianActorCritic(spaces.Box(-1.0, 1.0, (2,)), hidden_sizes=(4,))
    gp = gauss.init(jax.random.key(0), OBS)
    with pytest.raises(ValueError, match="Box action space has no legal-action mask"):
        gauss.step(gp, inputs(jnp.ones(2, bool)), (), jax.random.key(0))

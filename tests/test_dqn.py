"""DQN (jaxsample.algos.dqn): TD targets, vector epsilon, jit/vmap, determinism, learning."""

from __future__ import annotations

import dataclasses

import chex
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsample.algos import dqn

# One worker builds the module fixtures for all its tests.
pytestmark = pytest.mark.xdist_group("test_dqn")

# A tiny run: 4 envs x 4 steps per iteration (12), learning from the 3rd (48 env
# steps); the ring holds every step (48 per env). It runs on CartPole with a
# time limit of 12 (SHORT), so its replayed steps hold many truncations.
TINY = dqn.DQNConfig(
    num_envs=4,
    num_steps=4,
    total_timesteps=4 * 4 * 12,
    buffer_capacity=48,
    batch_size=16,
    lr=1e-3,
    learning_starts=48,
    target_update_interval=32,
    exploration_fraction=0.5,  # the decay reaches 1 at iteration 6
    epsilon_init=0.9,
    epsilon_final=0.1,
    epsilon_final_min=0.001,
    hidden_sizes=(16,),
    eval_episodes=2,
)


def short_cartpole():
    """CartPole with a time limit of 12 steps: ``(env, env_params)``."""
    env, env_params = gymnax.make("CartPole-v1")
    return env, env_params.replace(max_steps_in_episode=12)


@pytest.fixture(scope="module")
def tiny() -> dqn.DQN:
    env, env_params = short_cartpole()
    return dqn.make_train(TINY, env=env, env_params=env_params)


@pytest.fixture(scope="module")
def tiny_train(tiny: dqn.DQN):
    return jax.jit(tiny.train)


@pytest.fixture(scope="module")
def tiny_run(tiny_train):
    """``tiny_train(key(7))``: one compiled run, shared by the tests that read it."""
    return tiny_train(jax.random.key(7))


def _numpy(x) -> np.ndarray:
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def _leaves_equal(a, b) -> bool:
    return all(
        np.array_equal(_numpy(x), _numpy(y), equal_nan=True)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


# ----------------------------------------------------------------------------
# numpy references
# ----------------------------------------------------------------------------


def _np_td_target(reward, terminated, next_q_target, gamma, next_q_online=None):
    reward = np.asarray(reward, np.float64)
    out = np.empty_like(reward)
    for idx in np.ndindex(*reward.shape):
        if terminated[idx]:
            out[idx] = reward[idx]
            continue
        if next_q_online is None:
            v = max(next_q_target[idx])
        else:
            v = next_q_target[idx][int(np.argmax(next_q_online[idx]))]
        out[idx] = reward[idx] + gamma * v
    return out


def _np_cartpole_next(obs: np.ndarray, action: np.ndarray, p) -> np.ndarray:
    """gymnax CartPole's Euler step, in float64, from observation = state."""
    x, x_dot, theta, theta_dot = (obs[..., i].astype(np.float64) for i in range(4))
    force = np.where(action == 1, p.force_mag, -p.force_mag)
    cos, sin = np.cos(theta), np.sin(theta)
    temp = (force + p.polemass_length * theta_dot**2 * sin) / p.total_mass
    theta_acc = (p.gravity * sin - cos * temp) / (
        p.length * (4.0 / 3.0 - p.masspole * cos**2 / p.total_mass)
    )
    x_acc = temp - p.polemass_length * theta_acc * cos / p.total_mass
    return np.stack(
        [
            x + p.tau * x_dot,
            x_dot + p.tau * x_acc,
            theta + p.tau * theta_dot,
            theta_dot + p.tau * theta_acc,
        ],
        axis=-1,
    )


def _np_q(network, obs: np.ndarray) -> np.ndarray:
    """The agent's QNetwork (ReLU MLP torso + linear head) in float64 numpy."""
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), network["params"])
    h = obs.astype(np.float64)
    for i in range(len(p["torso"])):
        layer = p["torso"][f"dense_{i}"]
        h = np.maximum(h @ layer["kernel"] + layer["bias"], 0.0)
    return h @ p["q_head"]["kernel"] + p["q_head"]["bias"]


# ----------------------------------------------------------------------------
# TD targets
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("double", [False, True])
def test_td_target_matches_numpy(double: bool):
    rng = np.random.default_rng(0)
    shape, A = (5, 7), 3
    reward = rng.normal(size=shape).astype(np.float32)
    terminated = rng.random(shape) < 0.3
    next_q_target = rng.normal(size=(*shape, A)).astype(np.float32)
    next_q_online = rng.normal(size=(*shape, A)).astype(np.float32) if double else None
    # A terminal step's next value is never used, even when it is not finite.
    next_q_target[terminated] = np.inf
    got = dqn.td_target(reward, terminated, next_q_target, 0.9, next_q_online)
    want = _np_td_target(reward, terminated, next_q_target, 0.9, next_q_online)
    assert got.dtype == jnp.float32 and got.shape == shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_td_target_checks_shapes():
    r, t = jnp.zeros((4,)), jnp.zeros((4,), bool)
    with pytest.raises(ValueError, match="next_q_target"):
        dqn.td_target(r, t, jnp.zeros((4,)), 0.9)
    with pytest.raises(ValueError, match="terminated"):
        dqn.td_target(r, t[:3], jnp.zeros((4, 2)), 0.9)
    with pytest.raises(ValueError, match="next_q_online"):
        dqn.td_target(r, t, jnp.zeros((4, 2)), 0.9, jnp.zeros((4, 3)))


@pytest.mark.parametrize("double", [False, True])
def test_trainer_targets_bootstrap_truncation_not_termination(
    double: bool, tiny: dqn.DQN, tiny_run
):
    """Targets of replayed CartPole steps (time limit 12, so many truncations)
    against numpy: the true next state from CartPole's physics, the Q-networks
    in float64. Bootstrapping from the next stored observation (the reset one
    after an episode end) differs exactly on the truncated steps. (The steps
    are the tiny run's, all 48 per env; ``double`` only changes the targets.)"""
    state, _ = tiny_run
    samples, _ = jax.jit(tiny.replayer.replay_all)(state.replay_state)  # [48, 4, ...]
    online = state.params.network
    env, env_params = short_cartpole()
    config = dataclasses.replace(TINY, double_dqn=double)
    trainer = dqn.make_train(config, env=env, env_params=env_params)
    target = trainer.agent.init(jax.random.key(99), jnp.zeros(4)).network  # != online
    gamma = jnp.float32(0.9)
    got = np.asarray(jax.jit(trainer.targets)(online, target, samples, gamma))

    env_s = jax.tree.map(np.asarray, samples.env)
    obs, action = env_s.observation, np.asarray(samples.agent.action)
    terminated, truncated = env_s.terminated, env_s.truncated
    assert np.asarray(samples.valid).all()
    assert truncated.sum() >= 4 and terminated.sum() >= 4 and (truncated & ~terminated).any()
    true_next = _np_cartpole_next(obs, action, env_params)
    q_next_target = _np_q(target, true_next)
    q_next_online = _np_q(online, true_next) if double else None
    want = _np_td_target(env_s.reward, terminated, q_next_target, 0.9, q_next_online)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    # The naive targets, from the next stored observation (all rows but the last).
    next_stored = obs[1:]
    q_naive = _np_q(target, next_stored)
    if double:
        v_naive = q_naive[
            np.arange(47)[:, None], np.arange(4), _np_q(online, next_stored).argmax(-1)
        ]
    else:
        v_naive = q_naive.max(-1)
    r = env_s.reward[:-1]
    done, trunc, term = env_s.done[:-1], truncated[:-1], terminated[:-1]
    for naive in (
        r + 0.9 * np.where(done, 0.0, v_naive),  # truncation treated as termination
        r + 0.9 * np.where(term, 0.0, v_naive),  # bootstraps from the reset observation
    ):
        gap = np.abs(naive - want[:-1])
        assert (gap[trunc & ~term] > 1e-3).all()
        np.testing.assert_allclose(naive[~trunc], want[:-1][~trunc], rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------
# Vector epsilon
# ----------------------------------------------------------------------------


def test_epsilons_per_env_from_env_rank_decayed_by_iteration(tiny: dqn.DQN, tiny_run):
    """What the envs acted with (stored in the replay buffer): every env anneals
    linearly from epsilon_init to its own final epsilon, log-spaced over env
    ranks (rlpyt's vector epsilon), by iteration."""
    B, steps, iterations = TINY.num_envs, TINY.num_steps, TINY.num_iterations
    assert (B, steps, iterations, TINY.buffer_capacity) == (4, 4, 12, 48)  # nothing overwritten
    state, metrics = tiny_run
    finals = np.logspace(np.log10(0.001), np.log10(0.1), B)
    epsilons = state.sampler_state.env.agent.agent_state
    np.testing.assert_allclose(np.asarray(epsilons), finals, rtol=1e-5)
    np.testing.assert_allclose(tiny.agent.final_epsilons(), finals)
    decay = np.minimum(np.arange(iterations) / 6.0, 1.0)  # [iterations]
    want = (1 - decay)[None, :] * 0.9 + decay[None, :] * finals[:, None]  # [B, iterations]
    used = np.asarray(state.replay_state.data.agent.agent_info.epsilon)  # [B, capacity]
    # Every step of an iteration acts with that iteration's epsilon.
    np.testing.assert_allclose(used, np.repeat(want, steps, axis=1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(metrics["epsilon_mean"]), want.mean(0), rtol=1e-5)
    assert float(state.params.decay) == 1.0


# ----------------------------------------------------------------------------
# jit / vmap / determinism / validation
# ----------------------------------------------------------------------------


@pytest.mark.slow
def test_train_vmaps_over_seeds_and_learning_rates(tiny: dqn.DQN, tiny_train):
    keys = jax.random.split(jax.random.key(0), 2)
    hparams = tiny.hparams(lr=jnp.array([1e-3, 3e-3]))
    state, metrics = jax.jit(jax.vmap(tiny.train))(keys, hparams)
    I = TINY.num_iterations
    assert all(v.shape == (2, I) for v in metrics.values())
    np.testing.assert_array_equal(np.asarray(metrics["env_steps"][0]), 16.0 * np.arange(1, I + 1))
    loss = np.asarray(metrics["loss"])
    assert np.isnan(loss[:, :2]).all() and np.isfinite(loss[:, 2:]).all()  # learning starts at 48
    np.testing.assert_array_equal(np.asarray(metrics["updates"][:, -1]), [I - 2, I - 2])
    np.testing.assert_allclose(np.asarray(metrics["lr"][:, -1]), [1e-3, 3e-3], rtol=1e-6)
    assert state.iteration.shape == (2,)
    # Run 0 of the vmapped pair is the unbatched run with the same key and lr.
    single_state, single = tiny_train(keys[0], tiny.hparams(lr=1e-3))
    np.testing.assert_array_equal(np.asarray(single["n_episodes"]), metrics["n_episodes"][0])
    np.testing.assert_allclose(
        np.asarray(single["loss"]), np.asarray(metrics["loss"][0]), rtol=1e-4, atol=1e-6
    )
    for a, b in zip(
        jax.tree.leaves(single_state.params), jax.tree.leaves(state.params), strict=True
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b[0]), rtol=1e-4, atol=1e-6)
    # The greedy evaluation vmaps too.
    evaluation = jax.jit(jax.vmap(tiny.evaluate))(state, keys)
    assert evaluation["episode_return_mean"].shape == (2,)
    assert np.all(np.asarray(evaluation["n_trajectories"]) == TINY.eval_episodes)


def test_same_key_same_result(tiny: dqn.DQN, tiny_train, tiny_run):
    a = tiny_run
    b = tiny_train(jax.random.key(7))
    c = tiny_train(jax.random.key(8))
    assert _leaves_equal(a, b)
    assert not _leaves_equal(a[0].params, c[0].params)


@pytest.mark.slow  # op by op: every primitive of an iteration compiles (~18 s)
def test_eager_iteration_matches_jit_and_does_not_retrace(tiny: dqn.DQN):
    iteration = jax.jit(chex.assert_max_traces(tiny.iteration, n=1))
    state = jax.jit(tiny.init)(jax.random.key(1))  # one program, not op by op
    for _ in range(3):  # 48 env steps, with the jitted iteration tested below
        state, _ = iteration(state)
    # Iteration 4 learns (from 48 steps) and updates the target (every 32 steps).
    eager_state, eager = tiny.iteration(state)
    jit_state, out = iteration(state)
    assert int(out["updates"]) == 2 * TINY.gradient_steps and np.isfinite(out["loss"])
    assert not _leaves_equal(state.target_params, jit_state.target_params)
    assert _leaves_equal(jit_state.target_params, jit_state.params.network)  # tau = 1
    for k in eager:
        np.testing.assert_allclose(np.asarray(eager[k]), np.asarray(out[k]), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(eager_state), jax.tree.leaves(jit_state), strict=True):
        np.testing.assert_allclose(_numpy(a), _numpy(b), rtol=1e-5, atol=1e-6)
    # A new state with other hyperparameters is data: no retrace.
    iteration(jit_state.replace(hparams=tiny.hparams(lr=5e-3, gamma=0.5)))


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("num_envs", 0, ValueError),
        ("num_steps", 1.5, TypeError),
        ("total_timesteps", 3, ValueError),
        ("buffer_capacity", 0, ValueError),
        ("batch_size", 0, ValueError),
        ("lr", 0.0, ValueError),
        ("gamma", 1.5, ValueError),
        ("tau", 0.0, ValueError),
        ("learning_starts", -1, ValueError),
        ("gradient_steps", 0, ValueError),
        ("target_update_interval", 0, ValueError),
        ("epsilon_final", 2.0, ValueError),
        ("epsilon_final_min", 0.5, ValueError),
        ("exploration_fraction", -0.1, ValueError),
        ("double_dqn", 1, TypeError),
        ("loss", "l1", ValueError),
        ("max_grad_norm", -1.0, ValueError),
        ("hidden_sizes", (0,), ValueError),
    ],
)
def test_config_validation_names_the_field(field, value, error):
    with pytest.raises(error, match=field):
        dataclasses.replace(TINY, **{field: value})


def test_make_train_and_hparams_validation(tiny: dqn.DQN):
    with pytest.raises(ValueError, match="env_name"):
        dqn.make_train(dataclasses.replace(TINY, env_name="NoSuchEnv-v0"))
    with pytest.raises(TypeError, match="Discrete"):
        dqn.make_train(dataclasses.replace(TINY, env_name="Pendulum-v1"))
    with pytest.raises(ValueError, match="unknown hparams"):
        tiny.hparams(learning_rate=1e-3)
    with pytest.raises(ValueError, match=r"hparams\.lr"):
        tiny.init(jax.random.key(0), tiny.hparams(lr=jnp.ones(2)))


# ----------------------------------------------------------------------------
# Learning (the slow test)
# ----------------------------------------------------------------------------

# The default CartPole config on a 6e4-step budget (the benchmark's is 5e5),
# learning from 2e3 steps on, epsilon annealed over the first 30%.
LEARN = dqn.DQNConfig(total_timesteps=60_000, learning_starts=2_000, exploration_fraction=0.3)


@pytest.mark.slow
def test_dqn_learns_cartpole():
    """8 seeds in one vmapped program (~15 s on 2 cores).

    Calibration (seeds 0-15, this config): the mean return of the first 100
    iterations is 17-22 (random play); after 6e4 steps the last 100 training
    episodes average 151-389 (one seed of 16: 21) and the greedy policy
    114-500 (median ~440). For seeds 0-7: final 151-389 (median ~300),
    greedy 276-491 (median ~450).
    """
    trainer = dqn.make_train(LEARN)
    keys = jax.vmap(jax.random.key)(jnp.arange(8, dtype=jnp.uint32))
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys)
    eval_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
    greedy = np.asarray(
        jax.jit(jax.vmap(trainer.evaluate))(state, eval_keys)["episode_return_mean"]
    )
    average = np.asarray(metrics["average_return"])  # [8, iterations], last 100 episodes
    early, final = np.nanmean(average[:, :100], axis=1), average[:, -1]
    assert (early < 40).all(), early
    assert np.median(final) > 150 and (final > 100).sum() >= 6, final
    assert np.median(greedy) > 250 and (greedy > 100).sum() >= 6, greedy

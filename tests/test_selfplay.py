"""Two-player Pgx games through the public API: masks, turns, self-play PPO.

The default set checks the machinery in a few iterations (legal moves only,
masked logits, negamax chosen by the env, the evaluator with an opponent as a
second agent, zero-sum per-agent results); the slow set trains the presets of
:mod:`jaxsample.algos.configs` and checks the win-or-draw rate against a
uniformly random legal opponent (tools/selfplay_curves.py, the same
evaluation as the curves of docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import load_tool

import jaxsample as js
from jaxsample.algos import configs, ppo, returns
from jaxsample.envs import suites

pytest.importorskip("pgx")


def _tool():
    return load_tool("selfplay_curves")


@pytest.mark.slow  # CI time: ~10 s cold each
def test_self_play_ppo_machinery_on_tic_tac_toe() -> None:
    config = dataclasses.replace(
        configs.SELF_PLAY_TIC_TAC_TOE, num_envs=8, num_steps=16, total_timesteps=8 * 16 * 2
    )
    trainer = ppo.make_train(config)
    assert trainer.negamax  # chosen by the env: a zero-sum two-player game
    assert not ppo.make_train(dataclasses.replace(config, negamax="off")).negamax
    state, metrics = jax.jit(trainer.train)(jax.random.key(0))
    assert np.isfinite(np.asarray(metrics["loss"])).all()
    _, batch = jax.jit(trainer.sampler.collect)(state.sampler_state, state.params)
    env = batch.samples.env
    action = np.asarray(batch.samples.agent.action)
    mask = np.asarray(env.action_mask)
    assert mask.shape == (16, 8, 9)
    assert np.take_along_axis(mask, action[..., None], -1).all()  # legal moves only
    logits = np.asarray(batch.samples.agent.agent_info.dist_params)
    assert (logits[~mask] == np.finfo(np.float32).min).all()
    # the acting player alternates within a game; the reward is the mover's
    player, nxt = np.asarray(env.env_info["player"]), np.asarray(env.env_info["next_player"])
    live = ~np.asarray(env.terminated)
    assert (player[live] != nxt[live]).all()
    rewards = np.asarray(env.env_info["rewards"])
    np.testing.assert_array_equal(
        np.asarray(env.reward), np.take_along_axis(rewards, player[..., None], -1)[..., 0]
    )


@pytest.mark.slow  # CI time: ~10 s cold each
def test_evaluator_plays_an_opponent_as_a_second_agent() -> None:
    env, params = suites.make("pgx/tic_tac_toe")
    space = env.action_space(params)
    learner = js.agents.CategoricalActorCritic(space, hidden_sizes=(8,))
    p = learner.init(jax.random.key(1), env.reset(jax.random.key(2), params)[0])
    match = js.agents.TurnTaking((learner, js.agents.RandomAgent(space)))
    evaluator = js.make_evaluator(
        env, params, match, n_envs=16, max_steps=16 * 9, traj_fields=js.agents.seat_returns()
    )
    infos = jax.jit(evaluator.run)(jax.random.key(3), (p, ()))
    done = np.asarray(infos.completed)
    assert done.sum() == 16  # one game per env, each within 9 moves
    a0, a1 = (np.asarray(infos.extra[f"agent{i}_return"])[done] for i in (0, 1))
    assert set(np.unique(a0)) <= {-1.0, 0.0, 1.0}
    np.testing.assert_array_equal(a0, -a1)  # zero-sum
    # learner vs itself as agent 1: the seats only relabel who moves
    rates = jax.jit(lambda p, k: _tool().win_rates_of(env, params, learner, p, k, 9, 64))
    wd, w = rates(p, jax.random.key(4))
    assert 0.0 <= float(w) <= float(wd) <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("game", ["tic_tac_toe", "connect_four"])
def test_self_play_ppo_beats_a_random_legal_opponent(game: str) -> None:
    """The preset trains to a win-or-draw rate >= 0.95 against a uniformly
    random legal opponent (500 games, greedy policy; each side opens half)."""
    tool = _tool()
    config = tool.CONFIGS[game]
    trainer = ppo.make_train(config)
    state, _ = jax.jit(trainer.train)(jax.random.key(0))
    wd, _ = jax.jit(lambda p, k: tool.win_rates(trainer, p, k))(state.params, jax.random.key(1))
    assert float(wd) >= 0.95


def test_masked_sampler_errors_and_checked_mode() -> None:
    """An agent that ignores the mask is reported by ``check_actions=True``."""
    env, params = suites.make("pgx/tic_tac_toe")

    class Stubborn(js.agents.RandomAgent):
        def step(self, params, inputs, state, key):
            return js.AgentStep(jnp.zeros((), jnp.int32), ()), state

    sampler = js.make_sampler(
        env, params, Stubborn(env.action_space(params)), js.BatchSpec(4, 2), check_actions=True
    )
    with pytest.raises(Exception, match="illegal action"):
        jax.block_until_ready(jax.jit(sampler.collect)(sampler.init(jax.random.key(0), ()), ()))


@pytest.mark.slow
def test_dqn_target_maximises_over_the_final_observations_legal_moves() -> None:
    """DQN on tic-tac-toe with a time limit of 4 moves (truncations in every
    batch): it trains, and its targets maximise Q over the legal moves of the
    true final observation (``final_action_mask``), checked against numpy."""
    from jaxsample.algos import dqn

    env = suites.make_pgx("tic_tac_toe", episode_length=4)
    config = dqn.DQNConfig(
        env_name="pgx/tic_tac_toe",
        num_envs=4,
        num_steps=4,
        total_timesteps=4 * 4 * 6,
        buffer_capacity=48,
        batch_size=16,
        learning_starts=32,
        target_update_interval=32,
        hidden_sizes=(16,),
        eval_episodes=2,
    )
    trainer = dqn.make_train(config, env=env, env_params=suites.NoParams())
    state, metrics = jax.jit(trainer.train)(jax.random.key(0))
    assert np.isfinite(np.asarray(metrics["loss"])[-1])
    params = trainer.acting_params(state)
    _, batch = jax.jit(trainer.sampler.collect)(state.sampler_state, params)
    samples = batch.samples
    env_s = samples.env
    got = jax.jit(lambda s: trainer.targets(params.network, params.network, s, 0.9))(samples)
    final = jax.tree.map(lambda x: x.reshape(16, *x.shape[2:]), env_s.final_observation)
    q = np.asarray(trainer.q_values(params.network, final)).reshape(4, 4, 9)
    mask = np.asarray(env_s.final_action_mask)
    trunc, term = np.asarray(env_s.truncated), np.asarray(env_s.terminated)
    assert trunc.any() and not mask[trunc].all()  # the final masks matter
    v = np.where(mask, q, -np.inf).max(-1)
    want = np.asarray(env_s.reward) + 0.9 * np.where(term, 0.0, v)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # PPO's truncation values evaluate only the store's slots, with their kept
    # legal actions: at the truncated steps, final_values' (a stateless agent:
    # the epsilon state is not read by the value).
    stateless = samples.replace(agent=samples.agent.replace(initial_state=()))
    agent = trainer.agent
    both = (returns.truncation_values, returns.final_values)
    tv, fv = (np.asarray(jax.jit(f, static_argnums=0)(agent, params, stateless)) for f in both)
    np.testing.assert_allclose(tv[trunc], fv[trunc], rtol=1e-6, atol=1e-6)
    assert (tv[~trunc] == 0).all() and (fv[trunc] != 0).any()

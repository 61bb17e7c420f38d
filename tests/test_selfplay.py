"""Two-player Pgx games through the public API: masks, turns, self-play PPO.

The default set checks the machinery in a few iterations (legal moves only,
masked logits, negamax chosen by the env, the evaluator with an opponent as a
second agent, zero-sum per-agent results) and the Pgx loop that judges the
presets against an exact reference; the slow set trains the presets through
the command line, as docs/benchmarks.md does, and checks each seed's
win-or-draw rate against a uniformly random legal opponent in that loop
(tools/game_rates.py: Pgx directly, outside the trainer).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import load_tool

import jaxsample as js
from jaxsample.algos import configs, games, ppo, registry, returns
from jaxsample.envs import suites

pytest.importorskip("pgx")


def make_train(config):
    """PPO of ``config`` as runs build it: with the games' evaluation hook."""
    return registry.of_config(config).make_train(config)


def _tool():
    return load_tool("selfplay_curves")


@pytest.mark.slow  # CI time: ~10 s cold each
def test_self_play_ppo_machinery_on_tic_tac_toe() -> None:
    config = dataclasses.replace(
        configs.SELF_PLAY_TIC_TAC_TOE, num_envs=8, num_steps=16, total_timesteps=8 * 16 * 2
    )
    trainer = make_train(config)
    assert trainer.next_sign is returns.turn_signs  # the env is a zero-sum two-player game
    assert ppo.make_train(dataclasses.replace(config, negamax="off")).next_sign is None
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


#: tic-tac-toe's winning lines (Pgx's cells: 0..8 row by row)
LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def _exact_lowest_cell_vs_random(board: tuple, agent_moves: bool) -> tuple[float, float]:
    """``(P(win), P(win or draw))`` of the player who always takes the lowest
    empty cell (1 on ``board``) against a uniformly random one (2), by
    enumerating the game tree from ``board`` (0: an empty cell)."""
    empty = [i for i, c in enumerate(board) if c == 0]
    outcomes = []
    for cell in empty[:1] if agent_moves else empty:
        after = tuple(1 + (not agent_moves) if i == cell else c for i, c in enumerate(board))
        if any(all(after[i] == after[cell] for i in line) for line in LINES if cell in line):
            outcomes.append((1.0, 1.0) if agent_moves else (0.0, 0.0))
        elif len(empty) == 1:
            outcomes.append((0.0, 1.0))  # a full board: a draw
        else:
            outcomes.append(_exact_lowest_cell_vs_random(after, not agent_moves))
    return tuple(float(np.mean([o[k] for o in outcomes])) for k in (0, 1))


def test_the_judging_pgx_loop_matches_an_exact_reference() -> None:
    """tools/game_rates.py's loop (Pgx directly, the agent opening the even
    games) with a policy that takes the lowest legal cell, against its
    uniformly random legal opponent: the rates of the opened and answered
    games equal the exact probabilities of the game tree within 4 standard
    errors, and an illegal move loses (Pgx's rule)."""
    import pgx

    tool, env = load_tool("game_rates"), pgx.make("tic_tac_toe")
    games = 4000
    lowest = lambda observation, legal: jnp.argmax(legal)  # noqa: E731
    result = np.asarray(jax.jit(lambda k: tool.play(lowest, env, games, k))(
        jax.random.key(0)
    ))  # fmt: skip
    assert result.shape == (games,) and set(np.unique(result)) <= {-1.0, 0.0, 1.0}
    opened = np.arange(games) % 2 == 0
    for mask, agent_opens in ((opened, True), (~opened, False)):
        win, win_or_draw = _exact_lowest_cell_vs_random((0,) * 9, agent_opens)
        for got, want in (((result[mask] > 0).mean(), win), ((result[mask] >= 0).mean(),
                                                            win_or_draw)):  # fmt: skip
            assert abs(got - want) <= 4 * np.sqrt(want * (1 - want) / mask.sum()), (got, want)
    # the lowest taken cell (cell 0 on an empty board): every game lost, at
    # the agent's first move when it answers, at its second when it opens
    taken = lambda observation, legal: jnp.argmin(legal)  # noqa: E731
    lost = np.asarray(jax.jit(lambda k: tool.play(taken, env, 64, k))(jax.random.key(1)))
    np.testing.assert_array_equal(lost, -1.0)


#: each game's documented command trains 4 seeds (base seed 0, train's
#: default); the presets were tuned on others (base seed 1, presets.toml)
CLI_SEEDS = 4


@pytest.mark.slow  # on 2 shared cores: tic-tac-toe ~1 min, connect four ~35 min
@pytest.mark.parametrize("game", ["tic_tac_toe", "connect_four"])
def test_the_documented_command_beats_a_random_legal_opponent(
    game: str, tmp_path, monkeypatch
) -> None:
    """``jaxsample train --env pgx/<game> --seeds 4 --checkpoint-dir DIR`` (the
    preset; docs/benchmarks.md's command), each seed's greedy policy loaded
    with ``jaxsample.runs.load`` and judged outside the trainer: against a
    uniformly random legal opponent in a Pgx loop (tools/game_rates.py), 1000
    games, half opened by the agent. The median win-or-draw rate over the
    seeds is >= 0.95, every seed's >= 0.9."""
    from jaxsample import runs
    from jaxsample.cli import main

    tool = load_tool("game_rates")
    monkeypatch.chdir(tmp_path)  # train.csv goes to the working folder
    folder = str(tmp_path / "run")
    argv = tool.train_command(game, CLI_SEEDS, 0, folder, [])[1:]
    assert argv[:3] == ["train", "--env", f"pgx/{game}"]
    assert main(argv) == 0
    run = runs.load(folder)
    assert run.complete and run.record["preset"] == f"pgx/{game}"
    rates = [r["win_or_draw"] for r in tool.rates_vs_random(run, games=1000)]
    assert len(rates) == CLI_SEEDS
    assert np.median(rates) >= 0.95 and min(rates) >= 0.9, rates


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


# ----------------------------------------------------------------------------
# Training reports win-or-draw against a random opponent
# ----------------------------------------------------------------------------

#: a tiny tic-tac-toe run: 5 iterations, evaluated after 2 and 4 and the last
TINY_GAME = dataclasses.replace(
    configs.SELF_PLAY_TIC_TAC_TOE, num_envs=8, num_steps=16, total_timesteps=8 * 16 * 5,
    hidden_sizes=(16,), eval_every=2, eval_games=16,
)  # fmt: skip
EVALUATED = [1, 3, 4]  # 0-based iterations


@functools.cache
def _reference_evaluation(agent):
    """The jitted run of 16 games of ``agent`` (greedy) against a uniformly
    random legal opponent, half opened by each side."""
    env, env_params = suites.make("pgx/tic_tac_toe")
    space = env.action_space(env_params)
    match = js.agents.TurnTaking((agent, js.agents.RandomAgent(space)))
    evaluator = js.make_evaluator(
        env, env_params, match, n_envs=16, max_steps=16 * 9, traj_fields=js.agents.seat_returns()
    )
    return jax.jit(evaluator.run)


def _reference_rates(trainer, params, key) -> dict[str, float]:
    """Win, draw and loss rates of ``trainer.agent`` (greedy, ``params``)
    against a uniformly random legal opponent over 16 games, half opened by
    each side, computed here from the evaluator's per-game results."""
    run = _reference_evaluation(trainer.agent)
    infos = run(jax.random.fold_in(key, 0x5EA7), (params, ()))
    done = np.asarray(infos.completed)
    result = np.asarray(infos.extra["agent0_return"])[done]
    assert done.sum() == 16  # every game ends within 9 moves
    win, draw, loss = (result == 1).mean(), (result == 0).mean(), (result == -1).mean()
    return {"win_or_draw_vs_random": win + draw, "win_vs_random": win,
            "draw_vs_random": draw, "loss_vs_random": loss}  # fmt: skip


def test_ppo_reports_win_or_draw_vs_random_at_its_evaluations() -> None:
    """Iteration by iteration: the rates are finite exactly at the evaluation
    iterations (every ``eval_every`` and the last), NaN elsewhere, and equal
    an independent evaluation of the parameters after that iteration (key
    ``fold_in(state.key, 0x5EA7)``, the documented one)."""
    trainer = make_train(TINY_GAME)
    assert trainer.evaluation is not None and trainer.evaluation.every == 2
    assert trainer.reports.evaluation == games.METRICS
    state = jax.jit(trainer.init)(jax.random.key(0))
    iteration = jax.jit(trainer.iteration)
    for i in range(TINY_GAME.num_iterations):
        state, metrics = iteration(state)
        rates = {k: float(metrics[k]) for k in games.METRICS}
        if i not in EVALUATED:
            assert all(np.isnan(v) for v in rates.values()), (i, rates)
            continue
        assert all(0.0 <= v <= 1.0 for v in rates.values()), (i, rates)
        assert rates == pytest.approx(_reference_rates(trainer, state.params, state.key), abs=0)


@pytest.mark.slow  # two more compiles of a training program
def test_evaluations_leave_the_training_bit_for_bit() -> None:
    """A game trains the same with and without its evaluations (their key is
    folded from the state's, never split from it): equal metrics and
    parameters after every iteration of ``train``."""
    trainer = make_train(TINY_GAME)
    plain = make_train(dataclasses.replace(TINY_GAME, eval_games=0))
    assert plain.evaluation is None and plain.reports.evaluation == ()
    state, metrics = jax.jit(trainer.train)(jax.random.key(0))
    plain_state, plain_metrics = jax.jit(plain.train)(jax.random.key(0))
    assert set(metrics) - set(plain_metrics) == set(games.METRICS)
    for k, v in plain_metrics.items():
        np.testing.assert_array_equal(metrics[k], v, err_msg=k)
    jax.tree.map(np.testing.assert_array_equal, state.params, plain_state.params)


def test_train_run_shows_writes_and_summarises_win_or_draw(tmp_path) -> None:
    """``jaxsample.runs.train`` of a game with two seeds (one vmapped program):
    the progress events carry the latest win-or-draw and the display shows
    it, the CSV has the columns (NaN between evaluations), the JSON and the
    summary table each run's last evaluation, which equals an independent
    evaluation of the run's final parameters. A CartPole trainer reports no
    such metric."""
    import csv
    import io
    import json

    from jaxsample import runs
    from jaxsample.runs import report
    from jaxsample.runs.display import LiveDisplay
    from jaxsample.runs.run import build_trainer

    events = []
    out = runs.train(
        TINY_GAME, seeds=2, chunks=5, json=str(tmp_path / "run.json"), progress=events.append,
        say=None,
    )  # fmt: skip
    metrics = out.training.metrics
    wd = metrics["win_or_draw_vs_random"]
    assert wd.shape == (2, 5)
    assert np.isfinite(wd[:, EVALUATED]).all() and np.isnan(np.delete(wd, EVALUATED, 1)).all()
    trainer = build_trainer(TINY_GAME)
    final = [
        _reference_rates(trainer, jax.tree.map(lambda x, r=r: x[r], out.state.params),
                         out.state.key[r])
        for r in range(2)
    ]  # fmt: skip
    np.testing.assert_array_equal(wd[:, -1], [f["win_or_draw_vs_random"] for f in final])
    # progress: the latest evaluation (mean over the runs), shown instead of the
    # return under the headline metric's name
    running = [e for e in events if e.get("phase") == "running"]
    assert list(running[-1]["evaluation"]) == list(games.METRICS)  # the headline first
    assert running[-1]["evaluation"]["win_or_draw_vs_random"] == pytest.approx(wd[:, -1].mean())
    shown = io.StringIO()
    LiveDisplay(shown, live=False)(running[-1])
    assert f"win_or_draw_vs_random {wd[:, -1].mean():.3f}" in shown.getvalue()
    assert "recent return" not in shown.getvalue()
    # CSV: the four columns, NaN between evaluations
    rows = list(csv.DictReader(io.StringIO((tmp_path / "run.csv").read_text())))
    assert len(rows) == 10 and set(games.METRICS) <= set(rows[0])
    got = [float(r["win_or_draw_vs_random"]) for r in rows if r["run"] == "1"]
    np.testing.assert_array_equal(got, wd[1])
    # JSON and the summary table: each run's last evaluation
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["final_win_or_draw_vs_random_per_seed"] == [float(x) for x in wd[:, -1]]
    assert data["final_win_or_draw_vs_random"] == pytest.approx(wd[:, -1].mean())
    assert data["final_loss_vs_random_per_seed"] == [f["loss_vs_random"] for f in final]
    table = report.summary_table(out.training).splitlines()
    assert "win_or_draw_vs_random" in table[0]
    assert table[1].split()[-1] == f"{wd[0, -1]:.3f}"
    # CartPole: not a game, no evaluation, no such metric anywhere
    cartpole = make_train(ppo.PPOConfig(total_timesteps=4 * 128 * 2))
    assert cartpole.evaluation is None
    shapes = jax.eval_shape(cartpole.train, jax.random.key(0))[1]
    assert not set(games.METRICS) & set(shapes)
    plain = {"phase": "running", "steps": 1, "total_steps": 2, "fraction": 0.5,
             "steps_per_second": 1.0, "recent_return": 12.0, "recent_loss": 0.5}  # fmt: skip
    shown = io.StringIO()
    LiveDisplay(shown, live=False)(plain)
    assert "recent return 12.0" in shown.getvalue() and "win_or_draw" not in shown.getvalue()


@pytest.mark.parametrize("width", [80, 160])
def test_the_live_bar_of_a_game_fits_and_shows_win_or_draw(monkeypatch, width: int) -> None:
    """A game's progress event on rich's bar: the headline evaluation metric
    instead of the return, nothing cut at 80 columns (its name's leading
    words) or at 160 (in full)."""
    import io

    from jaxsample.runs.display import LiveDisplay

    monkeypatch.setenv("COLUMNS", str(width))
    stream = io.StringIO()
    display = LiveDisplay(stream, live=True)
    display({"phase": "compiling", "total_steps": 1_000_000})
    display({"phase": "running", "steps": 405_504, "total_steps": 1_000_000, "fraction": 0.4055,
             "steps_per_second": 31_250.0, "elapsed": 75.0, "eta": 19.0, "recent_return": 1.0,
             "recent_loss": 0.004066,
             "evaluation": {"win_or_draw_vs_random": 0.9296875, "win_vs_random": 0.5}})  # fmt: skip
    display.close()
    last = [x for x in stream.getvalue().splitlines() if x.strip()][-1]
    assert "…" not in last and len(last) <= width, last
    wide = "win_or_draw_vs_random 0.930  loss 0.004066"
    assert ("win_or_draw 0.93 L 0.0041" if width == 80 else wide) in last
    assert "R 1" not in last and "return" not in last, last

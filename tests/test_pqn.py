"""PQN (jaxsample.algos.pqn): Q(lambda) targets worked out by hand, legal-action
masks in acting and targets, bad input, a run folder that resumes bit for bit,
and (slow) CartPole at its preset."""

from __future__ import annotations

import inspect
import os
import signal
import statistics

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from jaxsample import runs
from jaxsample.agents import EpsilonGreedyInfo, EpsilonGreedyParams
from jaxsample.algos import pqn, presets
from jaxsample.types import AgentSamples, EnvSamples, Samples

pytestmark = pytest.mark.xdist_group("test_pqn")

QUIET = {"progress": False, "say": None}


def _leaves(tree) -> list[np.ndarray]:
    def plain(x):
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            return np.asarray(jax.random.key_data(x))
        return np.asarray(x)

    return [plain(x) for x in jax.tree.leaves(tree)]


def _same(a, b) -> bool:
    la, lb = _leaves(a), _leaves(b)
    return len(la) == len(lb) and all(
        x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
        for x, y in zip(la, lb, strict=True)
    )


# ----------------------------------------------------------------------------
# Targets worked out by hand
# ----------------------------------------------------------------------------


def test_q_lambda_targets_of_a_crafted_batch_worked_out_by_hand() -> None:
    """T = 5 steps of 2 envs, 3 actions; the Q-network is the identity (no hidden
    layer, kernel I, bias 0), so ``Q(s) = s``; gamma = lambda = 0.5.

    env 0: t0 r=1 (legal Q of s1 = [0, 4, 2] with action 1 illegal: 2, not 4);
    t1 r=0 truncated, final observation [3, 8, 1] with action 1 illegal: 3, not 8;
    t2 r=2 terminated; t3 r=1 next V = max [2, 0, 0] = 2; t4 r=3, the batch's
    last step, bootstrap value 4::

        G4 = 3 + .5 * 4                        = 5
        G3 = 1 + .5 * (.5 * 2 + .5 * 5)        = 2.75
        G2 = 2                                 (terminated)
        G1 = 0 + .5 * 3                        = 1.5    (truncated: legal max of the final obs)
        G0 = 1 + .5 * (.5 * 2 + .5 * 1.5)      = 1.875

    env 1: t0 r=2 terminated AND truncated (its final observation [9, 9, 9]
    must not be bootstrapped from); then V = 1 everywhere, rewards 0,
    bootstrap 2::

        G4 = .5 * 2 = 1;  G3 = .5 * (.5 + .5) = .5;  G2 = .5 * (.5 + .25) = .375
        G1 = .5 * (.5 + .1875) = .34375;  G0 = 2
    """
    trainer = pqn.make_train(
        pqn.PQNConfig(env_name="Acrobot-v1", hidden_sizes=(), reward_scale=1.0)
    )
    params = EpsilonGreedyParams(
        network={"params": {"q_head": {"kernel": jnp.eye(3), "bias": jnp.zeros(3)}}},
        decay=jnp.zeros(()),
    )
    T, B = 5, 2
    obs = np.zeros((T, B, 3), np.float32)
    obs[:, 0] = [[1, 2, 0], [0, 4, 2], [1, 1, 1], [0, 0, 6], [2, 0, 0]]
    obs[:, 1] = [[5, 5, 5], [1, 0, 0], [1, 0, 0], [1, 0, 0], [1, 0, 0]]
    mask = np.ones((T, B, 3), bool)
    mask[1, 0, 1] = False  # s1 of env 0: action 1 illegal
    final = np.concatenate([obs[1:], np.zeros((1, B, 3), np.float32)])  # the next observation
    final_mask = np.concatenate([mask[1:], np.ones((1, B, 3), bool)])
    final[1, 0], final_mask[1, 0] = [3, 8, 1], [True, False, True]  # env 0 truncated at t1
    final[2, 0], final_mask[2, 0] = 0, False  # env 0 terminated at t2 (the sparse store's zeros)
    final[0, 1] = [9, 9, 9]  # env 1 terminated and truncated at t0
    reward = np.array([[1, 2], [0, 0], [2, 0], [1, 0], [3, 0]], np.float32)
    terminated = np.zeros((T, B), bool)
    truncated = np.zeros((T, B), bool)
    terminated[2, 0] = truncated[1, 0] = terminated[0, 1] = truncated[0, 1] = True
    zeros = np.zeros((T, B), np.float32)
    samples = Samples(
        env=EnvSamples(
            observation=obs, reward=reward, prev_reward=zeros, terminated=terminated,
            truncated=truncated, done=terminated | truncated, env_info={}, final_store=final,
            action_mask=mask, final_mask_store=final_mask,
        ),
        agent=AgentSamples(
            action=np.zeros((T, B), np.int32), prev_action=np.zeros((T, B), np.int32),
            agent_info=EpsilonGreedyInfo(q_values=obs, epsilon=zeros), initial_state=zeros[0],
        ),
        valid=np.ones((T, B), bool),
        bootstrap_value=np.array([4.0, 2.0], np.float32),
    )  # fmt: skip
    target = jax.jit(trainer.targets)(params, samples, jnp.float32(0.5), jnp.float32(0.5))
    expected = [[1.875, 2.0], [1.5, 0.34375], [2.0, 0.375], [2.75, 0.5], [5.0, 1.0]]
    np.testing.assert_allclose(np.asarray(target), expected, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------
# Legal-action masks: acting and targets
# ----------------------------------------------------------------------------


@struct.dataclass
class CorridorState(environment.EnvState):
    pos: jax.Array


class Corridor(environment.Environment):
    """Positions 0..4, one-hot observations, actions left / stay / right;
    reaching 4 terminates with reward 1, a time limit of 6 truncates. Left is
    illegal at 0, stay at even positions."""

    @property
    def default_params(self) -> environment.EnvParams:
        return environment.EnvParams(max_steps_in_episode=6)

    def step_env(self, key, state, action, params):
        pos = jnp.clip(state.pos + jnp.asarray(action, jnp.int32) - 1, 0, 4)
        state = CorridorState(time=state.time + 1, pos=pos)
        done = pos == 4
        return self.get_obs(state), state, done.astype(jnp.float32), done, {}

    def reset_env(self, key, params):
        state = CorridorState(time=0, pos=jax.random.randint(key, (), 0, 2))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jax.nn.one_hot(state.pos, 5)

    def action_mask(self, state, params):
        return jnp.array([state.pos > 0, state.pos % 2 == 1, True])

    def action_space(self, params=None):
        return spaces.Discrete(3)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (5,), jnp.float32)


def test_masks_are_honoured_in_acting_and_in_the_targets() -> None:
    env = Corridor()
    config = pqn.PQNConfig(
        num_envs=8, num_steps=16, total_timesteps=8 * 16 * 4, hidden_sizes=(16,),
        num_minibatches=2, update_epochs=1, exploration_fraction=0.5,
    )  # fmt: skip
    trainer = pqn.make_train(config, env=env)
    state, metrics = jax.jit(trainer.run, static_argnums=1)(trainer.init(jax.random.key(0)), 4)
    assert np.isfinite(np.asarray(metrics["loss"])).all()
    # a network that values "stay" most, where it is illegal too (even positions)
    network = state.params.network
    bias = network["params"]["q_head"]["bias"] + jnp.array([0.0, 10.0, 0.0])
    network = {"params": {**network["params"], "q_head": {**network["params"]["q_head"],
                                                          "bias": bias}}}  # fmt: skip
    state = state.replace(params=state.params.replace(network=network))
    _, batch = jax.jit(trainer.sampler.collect)(state.sampler_state, state.params)
    s = batch.samples
    action, mask = np.asarray(s.agent.action), np.asarray(s.env.action_mask)
    assert mask.shape == (16, 8, 3) and not mask.all()
    assert np.take_along_axis(mask, action[..., None], -1).all()  # legal actions only
    # a truncated step bootstraps from max Q over its final observation's legal actions
    target = np.asarray(jax.jit(trainer.targets)(state.params, s, 0.99, 0.95))
    truncated = np.asarray(s.env.truncated)
    assert truncated.any()
    final = np.asarray(s.env.final_observation)[truncated]
    final_mask = np.asarray(s.env.final_action_mask)[truncated]
    q = np.asarray(jax.vmap(trainer.agent.q_values, in_axes=(None, 0))(state.params.network, final))
    legal_max, any_max = np.where(final_mask, q, -np.inf).max(-1), q.max(-1)
    assert (legal_max != any_max).any()  # the mask changes some of these targets
    scaled = np.asarray(s.env.reward)[truncated] * config.reward_scale
    np.testing.assert_allclose(target[truncated], scaled + 0.99 * legal_max, rtol=1e-6)
    # the greedy evaluation acts on legal actions too
    stats = jax.jit(trainer.evaluate)(state, jax.random.key(1))
    assert np.isfinite(float(stats["episode_return_mean"]))


# ----------------------------------------------------------------------------
# Bad input, config, registry, presets
# ----------------------------------------------------------------------------


def test_a_box_action_space_says_which_algorithms_fit() -> None:
    message = (
        r"^env_name 'Pendulum-v1': PQN needs a Discrete action space, got Box: "
        r"for continuous actions use ppo, sac or td3$"
    )
    with pytest.raises(TypeError, match=message) as info:
        pqn.make_train(pqn.PQNConfig(env_name="Pendulum-v1"))
    assert info.value.field == "env_name"  # the CLI names its flag, --env


def test_the_command_line_says_it_in_one_line(capsys) -> None:
    from jaxsample.cli import main

    with pytest.raises(SystemExit) as info:
        main(["train", "--algo", "pqn", "--env", "Pendulum-v1", "--total-steps", "4096"])
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    err = [x for x in lines if not x.startswith("note:")]  # jaxsample's notes
    assert len(err) == 1 and err[0].endswith("use ppo, sac or td3"), err


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("q_lambda", 1.5, ValueError),
        ("num_minibatches", 3, ValueError),
        ("optimizer", "sgd", ValueError),
        ("layer_norm", 1, TypeError),
        ("epsilon_final_min", 0.5, ValueError),
        ("update_epochs", 0, ValueError),
    ],
)
def test_config_validation_names_the_field(field, value, error) -> None:
    with pytest.raises(error, match=f"^{field} "):
        pqn.PQNConfig(**{field: value})


def test_the_preset_is_found_by_env_and_algo(ran) -> None:
    preset = presets.for_env("CartPole-v1", "pqn")
    assert preset.name == "CartPole-v1:pqn" and preset.algo == "pqn"
    assert "purejaxql" in preset.source
    assert presets.for_env("CartPole-v1", "ppo").name == "CartPole-v1"
    call = ran("--env", "CartPole-v1", "--algo", "pqn")
    assert call["preset"] == "CartPole-v1:pqn" and call["config"] == preset.config()
    assert ran("--env", "CartPole-v1")["preset"] == "CartPole-v1"
    for game in ("Breakout", "Asterix", "SpaceInvaders", "Freeway"):
        config = presets.for_env(f"{game}-MinAtar", "pqn").config()
        assert isinstance(config, pqn.PQNConfig) and config.total_timesteps == 1_000_000


# ----------------------------------------------------------------------------
# Jit, vmap over hyperparameters, a run folder that resumes bit for bit
# ----------------------------------------------------------------------------

# 6 iterations of 32 steps: chunks=6 checkpoints after every iteration.
TINY = pqn.PQNConfig(
    num_envs=4, num_steps=8, total_timesteps=6 * 32, hidden_sizes=(8,), num_minibatches=2,
    update_epochs=2, exploration_fraction=0.5, eval_episodes=2,
)  # fmt: skip


def test_vmaps_over_seeds_and_hparams_without_retracing() -> None:
    trainer = pqn.make_train(TINY)
    hp = trainer.hparams(q_lambda=jnp.array([0.0, 0.95]), lr=1e-3)
    keys = jax.random.split(jax.random.key(0), 2)
    run = jax.jit(chex.assert_max_traces(lambda k, h: jax.vmap(trainer.train)(k, h), n=1))
    _, m1 = run(keys, hp)
    _, m2 = run(keys, trainer.hparams(q_lambda=jnp.array([0.5, 1.0]), lr=3e-3))
    assert m1["loss"].shape == (2, TINY.num_iterations)
    assert not np.array_equal(np.asarray(m1["loss"]), np.asarray(m2["loss"]))
    decay = [float(trainer.decay(i)) for i in range(4)]
    assert decay == pytest.approx([0.0, 32 / 96, 64 / 96, 1.0])


def test_a_run_folder_resumes_bit_for_bit(tmp_path) -> None:
    full = runs.train(TINY, seeds=2, folder=tmp_path / "full", chunks=6, **QUIET)
    seen = []

    def progress(event) -> None:
        if event.get("phase") == "running":
            seen.append(event["steps"])
            if len(seen) == 3:
                os.kill(os.getpid(), signal.SIGINT)

    folder = tmp_path / "run"
    stopped = runs.train(TINY, seeds=2, folder=folder, chunks=6, progress=progress, say=None)
    assert stopped.interrupted and runs.load(folder).iteration == 3
    resumed = runs.train(TINY, seeds=2, folder=folder, chunks=6, **QUIET)
    assert not resumed.interrupted and resumed.training.start_iteration == 3
    assert _same(resumed.state, full.state)
    loaded = runs.load(folder)
    assert loaded.record["algo"] == "pqn" and loaded.config == TINY
    rows = loaded.evaluate(episodes=2)
    assert all(r["episodes"] == 2 for r in rows)


# ----------------------------------------------------------------------------
# Learning (slow): CartPole-v1 at its preset
# ----------------------------------------------------------------------------


def test_the_cartpole_preset_compiles_one_chunk_program() -> None:
    """A run folder trains in chunks, one compiled program per chunk length:
    the preset's iterations split into equal chunks at the default number
    of reports (500k steps were 244 iterations, chunks of 13 and of 10)."""
    from jaxsample.runs.loop import chunk_size

    config = presets.for_env("CartPole-v1", "pqn").config()
    n = config.num_iterations
    size = chunk_size(n, inspect.signature(runs.train).parameters["chunks"].default)
    assert n % size == 0, (n, size)
    assert n * config.steps_per_iteration <= 500_000


@pytest.mark.slow
def test_pqn_learns_cartpole_at_its_preset(tmp_path) -> None:
    """The preset's measure on seeds it was not tuned on (``seed=1``: run r's
    key ``fold_in(key(1), r)``; it was tuned on ``seed=0``) and fresh
    evaluation episodes: 4 seeds in one program, each seed's greedy mean over
    164 episodes, the median 500 and none under 475."""
    config = presets.for_env("CartPole-v1", "pqn").config()
    assert config.num_iterations * config.steps_per_iteration <= 500_000
    runs.train(config, seeds=4, seed=1, folder=tmp_path / "run", chunks=1, **QUIET)
    rows = runs.load(tmp_path / "run").evaluate(episodes=164, seed=1, policy="greedy")
    returns = [r["return_mean"] for r in rows]
    assert statistics.median(returns) == 500.0 and min(returns) >= 475.0, rows


@pytest.mark.slow  # the driver adapter compiles collect and learn apart (~20 s cold)
def test_the_driver_in_sync_mode_is_trainer_run_bit_for_bit() -> None:
    """The registry's adapter (DQN's: epsilon by the batch index, each batch
    learned once) with one buffer in sync mode is the trainer's own run."""
    from jaxsample.algos import registry

    trainer = pqn.make_train(TINY)
    key = jax.random.key(3)
    ref_state, ref_metrics = jax.jit(trainer.train)(key)
    actor, learner = jax.devices()[:2]
    d = registry.get("pqn").make_driver(
        trainer, 1, mode="sync", num_buffers=1, actor_devices=[actor], learner_device=learner
    )
    d = d.replace(init=jax.jit(d.options.init, static_argnums=1))
    r = d.train(key)
    # (the learner's params.decay is not the acting one: the actor sets it per batch)
    assert _same(r.learner_state.params.network, ref_state.params.network)
    assert _same(r.actor_states[0], ref_state.sampler_state)
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), r.metrics)
    assert _same(flat, ref_metrics)

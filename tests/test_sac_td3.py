"""Issue 51: SAC and TD3. Their targets on a crafted batch against numbers
worked out by hand (a truncated step bootstraps from its true final
observation, a terminated one does not); a Discrete action space is one line
naming the algorithms that fit; a short run through ``jaxsample.runs.train``,
one program and a run folder stopped and resumed, gives the same state bit
for bit, the replay buffer included; learning runs (slow) reach the presets'
targets."""

from __future__ import annotations

import dataclasses
import math
import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsample import runs
from jaxsample.algos import presets, sac, td3
from jaxsample.types import AgentSamples, EnvSamples, Samples

# ----------------------------------------------------------------------------
# Targets on a crafted batch
# ----------------------------------------------------------------------------

# Pendulum-v1: observations [3], actions [1] in [-2, 2] (loc 0, scale 2).
# Four transitions [L=1, N=4]; only the first component s0 of the final
# observations matters to the crafted critics. The observation after the
# truncated step 2 (what an auto-reset stores as the next observation) is
# (-0.9, 0, 0): bootstrapping from it would give other targets.
REWARD = [-1.0, -2.0, -3.0, -4.0]
TERMINATED = [False, True, False, True]
TRUNCATED = [False, False, True, True]  # step 3 both: a termination
FINAL_S0 = [0.5, 0.0, 2.5, 0.0]  # zeros where terminated (the sparse store's)
GAMMA = 0.9


def _samples() -> Samples:
    final = jnp.zeros((1, 4, 3)).at[0, :, 0].set(jnp.asarray(FINAL_S0))
    obs = jnp.zeros((1, 4, 3)).at[0, :, 0].set(jnp.asarray([0.1, 0.2, 0.3, -0.9]))
    term, trunc = jnp.asarray([TERMINATED]), jnp.asarray([TRUNCATED])
    env = EnvSamples(
        observation=obs, reward=jnp.asarray([REWARD], jnp.float32),
        prev_reward=jnp.zeros((1, 4)), terminated=term, truncated=trunc, done=term | trunc,
        env_info={}, final_store=final,
    )  # fmt: skip
    agent = AgentSamples(action=jnp.zeros((1, 4, 1)), prev_action=jnp.zeros((1, 4, 1)),
                         agent_info=(), initial_state=())  # fmt: skip
    return Samples(env=env, agent=agent, valid=jnp.ones((1, 4), bool))


def _linear_critics() -> dict:
    """Two linear critics on ``(s0, s1, s2, a / 2)`` (the action in [-1, 1]
    units): ``Q1 = s0 + a/2`` and ``Q2 = 3 - s0 - a/2``."""
    kernel = jnp.asarray([[[1.0], [0.0], [0.0], [1.0]], [[-1.0], [0.0], [0.0], [-1.0]]])
    return {"params": {"head": {"kernel": kernel, "bias": jnp.asarray([[0.0], [3.0]])}}}


def _crafted(module, config):
    trainer = module.make_train(config)
    state = jax.jit(trainer.init)(jax.random.key(0))
    return trainer, state


@pytest.mark.parametrize("ablation", [False, True])
def test_sac_targets_worked_out_by_hand(ablation: bool) -> None:
    """The actor's mean is atanh(0.5) and its log_std log(0.5) for
    every observation, the noise 0: the next action is 2 tanh(atanh 0.5) = 1
    (1/2 in the critics' units) and its log-density
    -log(0.5) - log(2 pi)/2 - log(1 - 0.5**2) - log(2)
    = 0.693147 - 0.918939 + 0.287682 - 0.693147 = -0.631256;
    alpha = 0.5, so -alpha log pi = +0.315628.

    step 0, plain, s0' = 0.5: min(0.5 + 0.5, 3 - 0.5 - 0.5) = 1.0;
      y = -1 + 0.9 (1.0 + 0.315628) = 0.184065
    step 1, terminated: y = -2
    step 2, truncated, s0' = 2.5: min(3.0, 0.0) = 0.0;
      y = -3 + 0.9 (0.0 + 0.315628) = -2.715935
      (from the reset observation s0 = -0.9 it would be min(-0.4, 3.4) = -0.4:
      y = -3.075935; treated as a termination: -3)
    step 3, terminated and truncated: y = -4
    """
    config = sac.SACConfig(hidden_sizes=(), truncation_as_termination=ablation)
    trainer, state = _crafted(sac, config)
    bias = jnp.asarray([math.atanh(0.5), math.log(0.5)])  # mean, log_std
    actor = {"params": {"head": {"kernel": jnp.zeros((3, 2)), "bias": bias}}}
    params = state.params.replace(actor=actor)
    learner = state.learner.replace(target_critic=_linear_critics(),
                                    log_alpha=jnp.asarray(math.log(0.5), jnp.float32))  # fmt: skip
    got = jax.jit(trainer.targets)(params, learner, _samples(), jnp.float32(GAMMA),
                                   jnp.zeros((1, 4, 1)))  # fmt: skip
    want = [0.184065, -2.0, -3.0 if ablation else -2.715935, -4.0]
    np.testing.assert_allclose(np.asarray(got), [want], atol=2e-6)


@pytest.mark.parametrize("ablation", [False, True])
def test_td3_targets_worked_out_by_hand(ablation: bool) -> None:
    """The target actor is 2 tanh(atanh 0.75) = 1.5 everywhere; the noise
    0.2 * eps is clipped to [-0.5, 0.5], times the scale 2; the action then
    clipped to [-2, 2].

    step 0, plain, s0' = 0.5, eps = 1: a' = 1.5 + 0.2 * 2 = 1.9 (0.95 in the
      critics' units): min(0.5 + 0.95, 3 - 0.5 - 0.95) = 1.45; y = -1 + 0.9 * 1.45 = 0.305
    step 1, terminated: y = -2
    step 2, truncated, s0' = 2.5, eps = 10: the noise 2.0 is clipped to 0.5,
      a' = 1.5 + 1.0 = 2.5 clipped to 2 (1.0): min(3.5, -0.5) = -0.5;
      y = -3 + 0.9 * -0.5 = -3.45 (as a termination: -3)
    step 3, terminated and truncated: y = -4
    """
    config = td3.TD3Config(hidden_sizes=(), target_noise=0.2, target_noise_clip=0.5,
                           truncation_as_termination=ablation)  # fmt: skip
    trainer, state = _crafted(td3, config)
    actor = {"params": {"head": {"kernel": jnp.zeros((3, 1)),
                                 "bias": jnp.asarray([math.atanh(0.75)])}}}  # fmt: skip
    learner = state.learner.replace(target_actor=actor, target_critic=_linear_critics())
    hparams = trainer.hparams(gamma=GAMMA)
    noise = jnp.asarray([1.0, 1.0, 10.0, 1.0]).reshape(1, 4, 1)
    got = jax.jit(trainer.targets)(state.params, learner, _samples(), hparams, noise)
    want = [0.305, -2.0, -3.0 if ablation else -3.45, -4.0]
    np.testing.assert_allclose(np.asarray(got), [want], atol=2e-6)


# ----------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(("module", "config", "name"), [
    (sac, sac.SACConfig, "SAC"), (td3, td3.TD3Config, "TD3"),
])  # fmt: skip
def test_a_discrete_action_space_is_one_line_naming_what_fits(module, config, name) -> None:
    from jaxsample.errors import ConfigError

    with pytest.raises(TypeError) as info:
        module.make_train(config(env_name="CartPole-v1"))
    message = str(info.value)
    assert isinstance(info.value, ConfigError) and info.value.field == "env_name"
    assert "\n" not in message and message.startswith("env_name 'CartPole-v1': ")
    assert f"{name} is for continuous actions" in message
    assert all(a in message for a in ("PPO", "DQN", "PQN"))


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_the_command_line_says_it_in_one_line(algo, capsys) -> None:
    from jaxsample.cli import main

    with pytest.raises(SystemExit) as info:
        main(["train", "--algo", algo, "--env", "CartPole-v1", "--total-steps", "100"])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1
    assert "--env 'CartPole-v1'" in err[0] and "use PPO, DQN or PQN" in err[0]


@pytest.mark.parametrize(("config", "field", "value", "error"), [
    (sac.SACConfig, "tau", 0.0, ValueError), (sac.SACConfig, "alpha_init", -1.0, ValueError),
    (sac.SACConfig, "log_std_min", 3.0, ValueError),
    (sac.SACConfig, "activation", "elu", ValueError),
    (sac.SACConfig, "gradient_steps", 0, ValueError),
    (td3.TD3Config, "policy_delay", 0, ValueError),
    (td3.TD3Config, "target_noise", -0.1, ValueError),
    (td3.TD3Config, "learning_starts", 1.5, TypeError),
])  # fmt: skip
def test_config_validation_names_the_field(config, field, value, error) -> None:
    with pytest.raises(error, match=f"^{field} "):
        config(**{field: value})


# ----------------------------------------------------------------------------
# One program and a run folder, resumed bit for bit with the replay buffer
# ----------------------------------------------------------------------------

# 8 iterations of 2 envs x 2 steps: random actions in the first two, learning
# from the second on (8 env steps in); chunks=8: a checkpoint after every iteration.
TINY = {
    "num_envs": 2, "num_steps": 2, "total_timesteps": 32, "learning_starts": 8,
    "buffer_capacity": 16, "batch_size": 8, "gradient_steps": 2, "hidden_sizes": (8,),
    "normalize_observations": True, "eval_episodes": 2,
}  # fmt: skip
QUIET = {"progress": False, "say": None}


def _leaves(tree) -> list[np.ndarray]:
    def plain(x):
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            return np.asarray(jax.random.key_data(x))
        return np.asarray(x)

    return [plain(x) for x in jax.tree.leaves(tree)]


def _same(a, b) -> bool:
    la, lb = _leaves(a), _leaves(b)
    return len(la) == len(lb) and all(x.dtype == y.dtype and np.array_equal(x, y)
                                      for x, y in zip(la, lb, strict=True))  # fmt: skip


@pytest.mark.long
@pytest.mark.parametrize("config", [sac.SACConfig(**TINY),
                                    td3.TD3Config(**TINY, prioritized_replay=True)])  # fmt: skip
def test_one_program_and_a_resumed_folder_agree_bit_for_bit(config, tmp_path) -> None:
    whole = runs.train(config, seeds=2, **QUIET)  # one program
    stops = []

    def progress(event) -> None:
        if event.get("phase") == "running":
            stops.append(event["steps"])
            if len(stops) == 3:
                os.kill(os.getpid(), signal.SIGINT)

    folder = tmp_path / "run"
    stopped = runs.train(config, seeds=2, folder=folder, chunks=8, progress=progress, say=None)
    assert stopped.interrupted and runs.load(folder).iteration == 3
    saved = runs.load(folder).state.replay_state  # the buffer is in the checkpoint
    assert (np.asarray(saved.filled) == 6).all()  # 3 iterations x 2 steps per env
    resumed = runs.train(config, seeds=2, folder=folder, chunks=8, **QUIET)
    assert not resumed.interrupted and resumed.training.start_iteration == 3
    assert int(np.asarray(resumed.state.updates)[0]) == 7 * config.gradient_steps
    assert _same(resumed.state, whole.state)
    for name in ("loss", "q_mean", "episode_return_mean"):
        np.testing.assert_array_equal(resumed.training.metrics[name], whole.training.metrics[name])
    loaded = runs.load(folder)
    assert loaded.complete and _same(loaded.state, whole.state)
    rows = loaded.evaluate(episodes=2)
    assert [r["episodes"] for r in rows] == [2, 2]


# ----------------------------------------------------------------------------
# Learning (slow): the presets reach their targets
# ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("name", "target", "budget"), [
    ("Pendulum-v1:sac", -155.0, 10_000), ("Pendulum-v1:td3", -160.0, 20_000),
    ("brax/inverted_pendulum:sac", 1000.0, 200_000),
])  # fmt: skip
def test_the_presets_learn(name: str, target: float, budget: int) -> None:
    """Median over 4 seeds of each seed's 164-episode greedy mean (issue 51's
    measure; docs/guides/off-policy.md has the figures), within the budget."""
    if name.startswith("brax/"):
        pytest.importorskip("brax")
    from helpers import load_tool

    config = presets.get(name).config()
    # tools/preset_results.py's measure: runs.train (its iterations compiled at
    # LLVM -O2, as the command line's are) then each seed's greedy policy on 164
    # episodes. (XLA's CPU backend at -O0, this suite's default, miscompiles SAC's
    # iteration: a NaN at its 36th, where -O1 and -O2 give finite values.)
    result = load_tool("preset_results").measure(config, seeds=4, episodes=164)
    assert result["steps"] <= budget
    assert result["median"] >= target, result["returns"]


def test_presets_name_their_algorithm() -> None:
    for name, algo in (("Pendulum-v1:sac", "sac"), ("Pendulum-v1:td3", "td3")):
        preset = presets.get(name)
        assert preset.algo == algo and presets.for_env("Pendulum-v1", algo) is preset
        assert dataclasses.asdict(preset.config())["env_name"] == "Pendulum-v1"
    assert presets.for_env("Pendulum-v1", "ppo").name == "Pendulum-v1"


@pytest.mark.long
def test_the_command_line_trains_sweeps_and_evaluates(tmp_path, capsys) -> None:
    """``jaxsample train --algo td3`` with a swept ``tau`` into a folder, then
    ``jaxsample eval``: the greedy and the sampled policy of each run; the
    help lists the fields."""
    import json

    from jaxsample.cli import main

    folder, out = tmp_path / "ck", tmp_path / "eval.json"
    argv = ["train", "--algo", "td3", "--env", "Pendulum-v1", "--preset", "none",
            "--num-envs", "2", "--num-steps", "2", "--total-steps", "32", "--learning-starts", "8",
            "--buffer-capacity", "16", "--batch-size", "8", "--hidden-sizes", "8",
            "--tau", "0.01,0.1", "--checkpoint-dir", str(folder),
            "--csv", str(tmp_path / "m.csv")]  # fmt: skip
    assert main(argv) == 0
    rows = (tmp_path / "m.csv").read_text().splitlines()
    assert len(rows) == 1 + 8 * 2 and "actor_loss" in rows[0]
    assert main(["eval", "--checkpoint", str(folder), "--episodes", "2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["sweep"] == {"tau": [0.01, 0.1]} and len(result["runs"]) == 2
    assert all(r["greedy_episodes"] == r["sampled_episodes"] == 2 for r in result["runs"])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["train", "--algo", "sac", "--help"])
    text = capsys.readouterr().out
    assert all(f"--{f}" in text for f in ("target-entropy", "learn-alpha", "gradient-steps"))

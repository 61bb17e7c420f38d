"""The PPO end-to-end comparison (jaxsample.bench.training) and its
PureJaxRL-equivalent peer (jaxsample.bench.purejaxrl)."""

import math

import jax
import numpy as np
import pytest

from jaxsample.algos import ppo, runner
from jaxsample.bench import purejaxrl, training

TINY = ppo.PPOConfig(
    num_envs=2, num_steps=8, total_timesteps=64, hidden_sizes=(8,), update_epochs=1,
    num_minibatches=2,
)  # fmt: skip


@pytest.mark.slow
def test_the_comparison_times_three_programs_and_train_equals_reference_run() -> None:
    result = training.training_comparison(TINY, seeds=2, reps=2, compile_reps=1, chunks=2)
    assert result["settings"]["total_timesteps"] == 64 and result["settings"]["seeds"] == 2
    for name in training.PROGRAMS:
        stages = result["compile_s"][name]
        assert all(stages[s] > 0 for s in training.STAGES)
        assert stages["total"] == pytest.approx(sum(stages[s] for s in training.STAGES))
        assert len(result["run_s"][name]["all"]) == 2
        assert len(result["final_return"][name]) == 2
    ratio = result["ratios"]["train/purejaxrl"]
    run = result["run_s"]["train"]["median"] / result["run_s"]["purejaxrl"]["median"]
    assert ratio["run"] == pytest.approx(run)
    # The train command's one program and reference_run train the same runs.
    np.testing.assert_allclose(
        result["final_return"]["train"], result["final_return"]["reference_run"], rtol=1e-6
    )
    table = training.format_training(result)
    assert all(name in table for name in training.PROGRAMS) and "train/reference_run" in table
    # The sizes are the programs' own: the same on a fresh trace and compile
    # (train's: its init's and its loop's, summed).
    for name, (parts, args) in training._programs(TINY, 2, 1).items():
        assert len(parts) == (2 if name == "train" else 1)
        total = {"jaxpr_eqns": 0, "hlo_fusions": 0}
        for part in parts:
            traced = part.fn.trace(*args)
            exe = traced.lower().compile(part.options)
            for k, v in training.program_size(traced.jaxpr, exe.as_text()).items():
                total[k] += v
            args = (exe(*args),)
        assert total == result["size"][name] and min(total.values()) > 0, name
    assert result["size"]["train"]["jaxpr_eqns"] > result["size"]["purejaxrl"]["jaxpr_eqns"]


@pytest.mark.slow
def test_the_purejaxrl_peer_learns_cartpole() -> None:
    config = ppo.PPOConfig(total_timesteps=100_000)
    trainer = ppo.make_train(config)
    train = purejaxrl.make_train(config, trainer.env, trainer.env_params)
    keys = jax.random.split(jax.random.key(0), 2)
    returns = np.asarray(purejaxrl.mean_returns(jax.jit(jax.vmap(train))(keys)["metrics"]))
    assert returns.shape == (2, config.num_iterations)
    first, last = np.nanmean(returns[:, :10]), np.nanmean(returns[:, -10:])
    assert first < 40 and last > 100, (first, last)  # random play lasts ~22 steps


def test_the_peer_takes_discrete_actions_and_the_comparison_feedforward_ppo() -> None:
    import gymnax

    env, params = gymnax.make("Pendulum-v1")
    with pytest.raises(TypeError, match="Discrete"):
        purejaxrl.make_train(ppo.PPOConfig(), env, params)
    with pytest.raises(TypeError, match="PPOConfig"):
        purejaxrl.make_train({"num_envs": 4}, env, params)
    with pytest.raises(ValueError, match="recurrent"):
        training.training_comparison(ppo.PPOConfig(recurrent=True))
    for bad in ({"seeds": 0}, {"reps": 0}, {"compile_reps": 0}, {"chunks": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            training.training_comparison(TINY, **bad)
    with pytest.raises(TypeError, match="PPOConfig"):
        training.training_comparison({"num_envs": 4})
    assert math.isnan(runner.final_returns(np.full((1, 3), np.nan))[0])
    np.testing.assert_array_equal(runner.final_returns([[1.0, np.nan, 3.0]], window=1), [3.0])


@pytest.mark.slow
def test_the_peer_flattens_image_observations() -> None:
    import gymnax

    env, params = gymnax.make("Breakout-MinAtar")
    config = ppo.PPOConfig(
        env_name="Breakout-MinAtar", num_envs=4, num_steps=8, total_timesteps=64,
        update_epochs=1, num_minibatches=2,
    )  # fmt: skip
    out = jax.jit(purejaxrl.make_train(config, env, params))(jax.random.key(0))
    kernel = out["runner_state"][0]["params"]["Dense_0"]["kernel"]
    assert kernel.shape == (10 * 10 * 4, 64)  # the [10, 10, 4] image, flattened
    assert purejaxrl.mean_returns(out["metrics"]).shape == (config.num_iterations,)

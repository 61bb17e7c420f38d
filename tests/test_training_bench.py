"""The PPO end-to-end comparison (jaxsample.bench.training) and its
PureJaxRL-equivalent peer (jaxsample.bench.purejaxrl); DQN's counterpart
(jaxsample.bench.dqn_training), PPO against a hand-written rollout
(jaxsample.bench.ppo) and the reference runs' compile by stage."""

import functools
import math

import jax
import numpy as np
import pytest

from jaxsample.algos import dqn, ppo
from jaxsample.bench import dqn_training, driver, measure, purejaxrl, training
from jaxsample.bench import ppo as ppo_bench
from jaxsample.bench.reference import reference_run
from jaxsample.runs import loop

TINY = ppo.PPOConfig(
    num_envs=2, num_steps=8, total_timesteps=64, hidden_sizes=(8,), update_epochs=1,
    num_minibatches=2,
)  # fmt: skip
TINY_DQN = dqn.DQNConfig(
    num_envs=2, total_timesteps=64, learning_starts=16, batch_size=8, hidden_sizes=(8,),
    buffer_capacity=16, target_update_interval=8, eval_episodes=2,
)  # fmt: skip
COLUMNS = ("trace", "lower", "XLA", "compile", "run", "eqns", "fusions", "final return")


def fresh_size(parts: list, args: tuple) -> dict[str, int]:
    """A program's size from a fresh trace and compile of its parts, summed."""
    total = {"jaxpr_eqns": 0, "hlo_fusions": 0}
    for part in parts:
        traced = part.fn.trace(*args)
        exe = traced.lower().compile(part.options)
        for k, v in measure.program_size(traced.jaxpr, exe.as_text()).items():
            total[k] += v
        args = (exe(*args),)
    return total


def check_stages(compile_s: dict, compile_reps: int, overlapped: bool = False) -> None:
    """Every stage timed; with one compile, the total is the stages' sum, or
    where a part compiled beside the next (``train``'s init: ``overlapped``)
    the wall time of both, no more than their sum."""
    assert all(compile_s[s] > 0 for s in measure.STAGES) and len(compile_s["all"]) == compile_reps
    if compile_reps == 1:
        stage_sum = sum(compile_s[s] for s in measure.STAGES)
        if overlapped:
            assert 0 < compile_s["total"] <= stage_sum * 1.05 + 0.05
        else:
            assert compile_s["total"] == pytest.approx(stage_sum)


def test_the_three_programs_are_built_with_their_inputs() -> None:
    """What the slow comparison compiles: ``train`` (init, then the loop),
    ``reference_run`` and the PureJaxRL peer, each a jitted callable with the
    same keys (built, not compiled: the default set's check of the wiring)."""
    built = training._programs(TINY, 2, 1)
    assert list(built) == list(training.PROGRAMS)
    keys = built["train"][1][0]
    assert [len(parts) for parts, _ in built.values()] == [2, 1, 1]
    assert all(callable(part.fn) for parts, _ in built.values() for part in parts)
    assert built["reference_run"][1][0] is keys and built["purejaxrl"][1] == (keys,)


@pytest.mark.slow
def test_the_comparison_times_three_programs_and_train_equals_reference_run() -> None:
    result = training.training_comparison(TINY, seeds=2, reps=2, compile_reps=1, chunks=2)
    assert result["settings"]["total_timesteps"] == 64 and result["settings"]["seeds"] == 2
    for name in training.PROGRAMS:
        check_stages(result["compile_s"][name], 1, overlapped=name == "train")
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
        total = fresh_size(parts, args)
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
    assert math.isnan(loop.final_returns(np.full((1, 3), np.nan))[0])
    np.testing.assert_array_equal(loop.final_returns([[1.0, np.nan, 3.0]], window=1), [3.0])


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


@pytest.mark.slow
def test_dqn_training_times_its_programs_and_train_equals_reference_run() -> None:
    result = dqn_training.dqn_training(TINY_DQN, seeds=2, reps=2, compile_reps=1, chunks=2)
    assert result["settings"]["total_timesteps"] == 64 and result["settings"]["seeds"] == 2
    for name in dqn_training.PROGRAMS:
        check_stages(result["compile_s"][name], 1, overlapped=name == "train")
        assert len(result["run_s"][name]["all"]) == 2
        assert all(math.isfinite(x) for x in result["final_return"][name])
        assert len(result["final_return"][name]) == 2
    # The train command's programs and reference_run's train the same runs.
    np.testing.assert_allclose(
        result["final_return"]["train"], result["final_return"]["reference_run"], rtol=1e-6
    )
    ratio = result["ratios"]["train/reference_run"]
    run = result["run_s"]["train"]["median"] / result["run_s"]["reference_run"]["median"]
    assert ratio["run"] == pytest.approx(run)
    table = dqn_training.format_dqn_training(result)
    assert all(c in table for c in COLUMNS) and "train/reference_run" in table
    for name in dqn_training.PROGRAMS:
        size = result["size"][name]
        assert f"{size['jaxpr_eqns']:>7}{size['hlo_fusions']:>9}" in table
    every = max(1, TINY_DQN.num_iterations // 2)
    for name, (parts, args) in dqn_training._programs(TINY_DQN, 2, every).items():
        assert len(parts) == (2 if name == "train" else 1)
        total = fresh_size(parts, args)
        assert total == result["size"][name] and min(total.values()) > 0, name
    # reference_run compiles that same reference_run program: through the
    # driver benchmark's compiler, its stages and size (which the bench prints).
    staged: dict = {}
    report = reference_run(
        dqn.make_train(TINY_DQN),
        seeds=(0, 1),
        compiler=functools.partial(driver._compile_into, staged),
    )
    assert staged["size"] == result["size"]["reference_run"]
    assert staged["compile_s"]["total"] == pytest.approx(
        sum(staged["compile_s"][s] for s in measure.STAGES)
    )
    assert report["compile_s"] >= staged["compile_s"]["total"]
    assert np.isfinite(report["final_return"]).all()


@pytest.mark.slow
def test_ppo_overhead_reports_compile_by_stage_and_sizes() -> None:
    result = ppo_bench.ppo_overhead(config=TINY, seeds=2, reps=2, compile_reps=1)
    assert result["total_timesteps"] == 64 and result["seeds"] == 2
    for name in ppo_bench.PROGRAMS:
        check_stages(result["compile_s"][name], 1)
        assert len(result["run_s"][name]["all"]) == 2
        assert len(result["final_return"][name]) == 2
    assert result["ratio"] == pytest.approx(
        result["run_s"]["jaxsample"]["median"] / result["run_s"]["inline"]["median"]
    )
    assert result["compile_ratio"] == pytest.approx(
        result["compile_s"]["jaxsample"]["total"] / result["compile_s"]["inline"]["total"]
    )
    keys = jax.vmap(jax.random.key)(np.arange(2, dtype=np.uint32))
    for name, fn in ppo_bench._programs(TINY).items():
        total = fresh_size([measure.Part(fn, {})], (keys,))
        assert total == result["size"][name] and min(total.values()) > 0, name
    table = ppo_bench.format_overhead(result)
    assert all(c in table for c in COLUMNS) and "jaxsample/inline: run" in table


def test_dqn_and_overhead_benchmarks_name_bad_arguments() -> None:
    with pytest.raises(TypeError, match="DQNConfig"):
        dqn_training.dqn_training(TINY)
    for bad in ({"seeds": 0}, {"reps": 0}, {"compile_reps": 0}, {"chunks": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            dqn_training.dqn_training(TINY_DQN, **bad)
    with pytest.raises(TypeError, match="seeds"):
        dqn_training.dqn_training(TINY_DQN, seeds=1.5)
    for bad in ({"seeds": 0}, {"reps": 0}, {"compile_reps": 0}, {"total_timesteps": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ppo_bench.ppo_overhead(**bad)
    with pytest.raises(TypeError, match="PPOConfig"):
        ppo_bench.ppo_overhead(config=TINY_DQN)

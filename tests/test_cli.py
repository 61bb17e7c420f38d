"""The command line runs end to end at tiny sizes and writes what it says."""

import json
import math

import pytest

from jaxsample.cli import main


def test_collect_prints_and_writes_json(tmp_path, capsys) -> None:
    out = tmp_path / "collect.json"
    assert main(["collect", "--B", "4", "--T", "8", "--batches", "3", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "collect compile" in printed and "steps/s" in printed
    result = json.loads(out.read_text())
    assert result["T"] == 8 and result["B"] == 4
    assert result["compile_seconds"] > 0 and result["steps_per_second"] > 0
    # 3 batches of 4 random CartPole envs x 8 steps: some episodes finish.
    assert result["trajectories"] >= 1
    assert math.isfinite(result["episode_return_mean"]) and result["episode_return_mean"] >= 1


def test_collect_rejects_unknown_env() -> None:
    with pytest.raises(SystemExit, match="--env"):
        main(["collect", "--env", "NoSuchEnv-v0", "--B", "2", "--T", "2"])


def test_bench_reports_ratio_and_memory(tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    args = ["bench", "--envs", "CartPole-v1", "--B", "8", "--T", "4", "--reps", "1"]
    assert main([*args, "--json", str(out)]) == 0
    assert "ratio" in capsys.readouterr().out
    (row,) = json.loads(out.read_text())
    assert row["env"] == "CartPole-v1" and row["B"] == 8 and row["T"] == 4
    assert row["ratio"] > 0 and row["steps_per_s"]["sampler"] > 0
    assert row["compile_s"]["sampler"] > 0 and row["compile_s"]["bare"] > 0
    # The batch the sampler returns: obs 4 floats and 12 more step fields per env-step.
    assert row["batch_bytes"] > 8 * 4 * 16


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_train_writes_summary_json_and_plot(tmp_path, capsys, algo: str) -> None:
    out, png = tmp_path / "train.json", tmp_path / "curve.png"
    args = ["train", "--algo", algo, "--seeds", "2", "--total-steps", "3000", "--chunks", "3"]
    assert main([*args, "--json", str(out), "--plot", str(png)]) == 0
    printed = capsys.readouterr().out
    assert "steps/s" in printed and "recent return" in printed and "mean" in printed
    result = json.loads(out.read_text())
    for field in ("final_return", "total_steps", "wall_seconds", "compile_seconds"):
        assert field in result
    assert result["seeds"] == 2 and 0 < result["total_steps"] <= 3000
    assert result["steps_per_second"] > 0
    assert len(result["curve"]["returns"]) == 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_train_rejects_bad_arguments() -> None:
    with pytest.raises(SystemExit, match="seeds"):
        main(["train", "--seeds", "0"])
    with pytest.raises(SystemExit, match="mask-velocity"):
        main(["train", "--algo", "dqn", "--mask-velocity"])


def test_mask_velocity_uses_the_pomdp_preset() -> None:
    import argparse

    from jaxsample.algos import ppo
    from jaxsample.cli import _make_trainer

    args = argparse.Namespace(
        algo="ppo-rnn", env="CartPole-v1", total_steps=None, mask_velocity=True
    )
    trainer, steps = _make_trainer(args)
    preset = ppo.MASKED_CARTPOLE_RECURRENT
    assert trainer.config == preset and steps == preset.num_envs * preset.num_steps
    assert trainer.sampler.examples.env.observation.shape == (2,)  # velocities hidden
    args.algo = "ppo"
    assert _make_trainer(args)[0].config.recurrent is False

"""The command line runs end to end at tiny sizes and writes what it says."""

import json
import math
import re

import pytest
from helpers import HANG_SECONDS

from jaxsample.cli import main


def test_collect_prints_and_writes_json(tmp_path, capsys) -> None:
    out = tmp_path / "collect.json"
    assert main(["collect", "--B", "4", "--T", "8", "--batches", "3", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"collect (compiled|loaded from the compile cache) in", printed)
    assert "steps/s" in printed
    result = json.loads(out.read_text())
    assert result["T"] == 8 and result["B"] == 4
    assert result["compile_seconds"] > 0 and result["steps_per_second"] > 0
    # 3 batches of 4 random CartPole envs x 8 steps: some episodes finish.
    assert result["trajectories"] >= 1
    assert math.isfinite(result["episode_return_mean"]) and result["episode_return_mean"] >= 1


def test_collect_rejects_unknown_env() -> None:
    with pytest.raises(SystemExit, match="--env"):
        main(["collect", "--env", "NoSuchEnv-v0", "--B", "2", "--T", "2"])


def test_bench_prints_the_table_and_writes_json_and_png(tmp_path, capsys) -> None:
    import jsonschema

    from jaxsample import bench

    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    args = ["bench", "--envs", "CartPole-v1", "--B", "4", "--T", "4", "--reps", "2"]
    args += ["--methods", "bare", "random", "--markdown"]
    assert main([*args, "--json", str(out), "--plot", str(png)]) == 0
    printed = capsys.readouterr().out
    assert "ratio" in printed and "| env | B | T | bare | random |" in printed
    result = json.loads(out.read_text())
    jsonschema.validate(result, bench.RESULT_SCHEMA)
    (cell,) = result["cells"]
    assert (cell["env"], cell["B"], cell["T"]) == ("CartPole-v1", 4, 4)
    assert list(cell["methods"]) == ["bare", "random"]
    row = cell["methods"]["random"]
    assert row["ratio_to_floor"] > 0 and row["compile_s"] > 0
    # The Batch: obs 4 floats and 12 more step fields per env-step.
    assert row["output_bytes"] > 4 * 4 * 16
    # Printed as in the JSON.
    assert f"{row['ratio_to_floor']:.3f}" in printed
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_quick_runs_the_quick_grid_into_default_files(tmp_path, monkeypatch, capsys) -> None:
    import dataclasses

    from jaxsample import bench

    seen, results = [], []
    real = bench.run_grid

    def smaller(spec, progress=None):  # the quick grid itself takes ~2 minutes
        seen.append(spec)
        if not results:  # measure once; later calls only check the spec
            small = dataclasses.replace(spec, envs=("CartPole-v1",), Bs=(4,), Ts=(4,), reps=1)
            small = dataclasses.replace(small, methods=("bare", "gymnasium"))  # bare: as above
            results.append(real(small, progress=progress))
        return results[0]

    monkeypatch.setattr(bench, "run_grid", smaller)
    # The PPO comparison (~2 minutes; measured for real in test_training_bench):
    # here only that --quick runs it, prints its table and writes it to the JSON.
    from jaxsample.bench import training

    compared = []

    def comparison():
        compared.append(True)
        stages = {"trace": 1.0, "lower": 0.5, "compile": 4.0, "total": 5.5, "all": [5.5]}
        return {
            "settings": {"env": "CartPole-v1", "seeds": 1, "total_timesteps": 499_712,
                         "num_envs": 4, "num_steps": 128, "reps": 1, "compile_reps": 1},
            "compile_s": dict.fromkeys(training.PROGRAMS, stages),
            "size": {key: {"jaxpr_eqns": 9, "hlo_fusions": 5} for key in training.PROGRAMS},
            "run_s": {key: {"median": 4.0, "all": [4.0]} for key in training.PROGRAMS},
            "ratios": {"train/purejaxrl": {"run": 0.97, "compile": 1.03}},
            "final_return": {key: [500.0] for key in training.PROGRAMS},
        }  # fmt: skip

    monkeypatch.setattr(training, "training_comparison", comparison)
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--quick"]) == 0
    assert seen == [bench.GridSpec.quick()] and compared == [True]
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["training"]["ratios"]["train/purejaxrl"]["compile"] == 1.03
    printed = capsys.readouterr().out
    assert "train/purejaxrl: run 0.97x, compile 1.03x" in printed
    assert list(result["cells"][0]["methods"]) == ["bare", "gymnasium"]
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote bench.json" in printed and "wrote bench.png" in printed
    # Flags given with --quick replace the quick grid's values.
    seen.clear()
    args = ["bench", "--quick", "--reps", "3", "--B", "1:4", "--json", "", "--plot", ""]
    assert main([*args, "--no-training"]) == 0
    assert seen == [bench.GridSpec.quick(reps=3, Bs=(1, 2, 4))] and compared == [True]
    seen.clear()
    assert main(["bench", "--max-call-seconds", "0", "--peer-max-B", "8", "--json", ""]) == 0
    assert seen == [bench.GridSpec(max_call_seconds=None, peer_max_B=8)]


def test_bench_runs_the_dqn_and_overhead_tables_on_request(tmp_path, monkeypatch, capsys) -> None:
    # Both take minutes: measured for real in test_training_bench; here only
    # that the flags run them, print their tables and write them to the JSON.
    from jaxsample.bench import dqn_training
    from jaxsample.bench import ppo as ppo_bench

    stages = {"trace": 1.0, "lower": 0.5, "compile": 4.0, "total": 5.5, "all": [5.5]}
    called = []

    def dqn_result():
        called.append("dqn")
        names = dqn_training.PROGRAMS
        return {
            "settings": {"env": "CartPole-v1", "seeds": 1, "total_timesteps": 500_000,
                         "num_envs": 10, "num_steps": 1, "reps": 1, "compile_reps": 1},
            "compile_s": dict.fromkeys(names, stages),
            "size": {n: {"jaxpr_eqns": 1234, "hlo_fusions": 321} for n in names},
            "run_s": {n: {"median": 40.0, "all": [40.0]} for n in names},
            "ratios": {"train/reference_run": {"run": 0.98, "compile": 0.91}},
            "final_return": {n: [480.0] for n in names},
        }  # fmt: skip

    def overhead_result():
        called.append("overhead")
        names = ppo_bench.PROGRAMS
        return {
            "env": "CartPole-v1", "seeds": 1, "total_timesteps": 99_840, "reps": 1,
            "compile_reps": 1, "compile_s": dict.fromkeys(names, stages),
            "size": {n: {"jaxpr_eqns": 987, "hlo_fusions": 210} for n in names},
            "run_s": {n: {"median": 2.0, "all": [2.0]} for n in names},
            "ratio": 1.02, "compile_ratio": 1.17, "final_return": {n: [150.0] for n in names},
        }  # fmt: skip

    from jaxsample import bench

    real_sampler_compile = bench.sampler_compile

    def sampler_compile():  # the real one, on a small batch of one env
        called.append("sampler_compile")
        return real_sampler_compile(("CartPole-v1",), B=2, T=4, compile_reps=1, reps=1)

    monkeypatch.setattr(dqn_training, "dqn_training", dqn_result)
    monkeypatch.setattr(ppo_bench, "ppo_overhead", overhead_result)
    monkeypatch.setattr(bench, "sampler_compile", sampler_compile)
    out = tmp_path / "bench.json"
    args = ["bench", "--envs", "CartPole-v1", "--B", "4", "--T", "4", "--reps", "1"]
    args += ["--methods", "bare", "--no-training", "--plot", "", "--json", str(out)]
    assert main([*args, "--dqn-training", "--ppo-overhead", "--sampler-compile"]) == 0
    assert called == ["dqn", "overhead", "sampler_compile"]
    printed = capsys.readouterr().out
    assert "DQN end to end" in printed
    assert "train/reference_run: run 0.98x, compile 0.91x" in printed
    assert "jaxsample/inline: run 1.02x, compile 1.17x" in printed
    assert printed.count("   1234      321  480") == 2 and printed.count("    987      210") == 2
    result = json.loads(out.read_text())
    assert result["dqn_training"]["size"]["train"]["hlo_fusions"] == 321
    assert result["ppo_overhead"]["compile_ratio"] == 1.17
    ratio = result["sampler_compile"]["envs"]["CartPole-v1"]["ratios"]["collect/bare"]
    assert f"collect/bare: run {ratio['run']:.2f}x, compile {ratio['compile']:.2f}x" in printed
    called.clear()
    assert main(args) == 0 and called == []  # off by default


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--B", "0"], "--B"),
        (["--B", "8:2"], "--B"),
        (["--T", "x"], "--T"),
        (["--envs", "NoSuchEnv-v0"], "envs"),
        (["--reps", "0"], "reps"),
        (["--memory-budget-gb", "-1"], "--memory-budget-gb"),
    ],
)
def test_bench_rejects_bad_arguments(args, match) -> None:
    with pytest.raises(SystemExit, match=match):
        main(["bench", *args])


def test_bench_sizes_take_ranges() -> None:
    from jaxsample.cli.commands import sizes

    assert sizes(["1:16"], "--B") == (1, 2, 4, 8, 16)
    assert sizes(["3:20", "100"], "--B") == (3, 6, 12, 100)
    assert sizes(None, "--B") is None


@pytest.mark.slow
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
    from jaxsample.cli.train import make_trainer

    args = argparse.Namespace(
        algo="ppo-rnn", env="CartPole-v1", total_steps=None, mask_velocity=True
    )
    trainer, steps = make_trainer(args)
    preset = ppo.MASKED_CARTPOLE_RECURRENT
    assert trainer.config == preset and steps == preset.num_envs * preset.num_steps
    assert trainer.sampler.examples.env.observation.shape == (2,)  # velocities hidden
    args.algo = "ppo"
    assert make_trainer(args)[0].config.recurrent is False


@pytest.mark.slow
def test_train_eight_seeds_finishes_within_a_timeout(tmp_path) -> None:
    """The README's multi-seed command, run as a user runs it, must not hang.

    jaxlib 0.10.0-0.11.0 deadlock here on a 2-core CPU: vmapping the trainer's
    init over 8 seeds batches the orthogonal initializers' LAPACK calls, and
    each one blocked an intra-op pool thread waiting for batch chunks queued on
    that same pool (docs/design.md, "Supported JAX"). The network is the
    README's (64x64: a tiny one stays under the size where jaxlib splits the
    batch, and so never hung); the run is short (two iterations). Without
    ``jaxsample.agents.initializers.orthogonal`` this command hangs on jaxlib
    0.10.2; a timeout turns a hang into a failure.
    """
    import subprocess
    import sys

    out = tmp_path / "train.json"
    cmd = [sys.executable, "-m", "jaxsample", "train", "--algo", "ppo", "--seeds", "8"]
    cmd += ["--total-steps", "1024", "--update-epochs", "1", "--num-minibatches", "1"]
    cmd += ["--chunks", "1", "--no-compile-cache", "--json", str(out)]
    try:
        run = subprocess.run(
            cmd, capture_output=True, text=True, timeout=HANG_SECONDS, cwd=tmp_path
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(cmd[1:])}` did not finish in 240 s (a deadlock?)")
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(out.read_text())["seeds"] == 8


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["collect", "--B", "0"], "--B must be"),
        (["collect", "--T", "-1"], "--T must be"),
        (["collect", "--discount", "2"], "--discount must be in"),
        (["collect", "--reset-mode", "episodic", "--decorrelation", "5"], "--decorrelation"),
        (["collect", "--batches", "0"], "--batches"),
        (["train", "--chunks", "0"], "--chunks"),
        (["train", "--chunks", "-1"], "--chunks"),
        (["train", "--seeds", "0"], "--seeds"),
        (["train", "--json", "/no/such/folder/out.json"], "--json .*does not exist"),
        (["train", "--plot", "/no/such/folder/out.png"], "--plot .*does not exist"),
        (["collect", "--json", "/no/such/folder/out.json"], "--json"),
        (["bench", "--B", "4", "--T", "4", "--plot", "/no/such/x.png"], "--plot"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(args, match, capsys) -> None:
    with pytest.raises(SystemExit, match=match) as info:
        main(args)
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    err = "\n".join(x for x in lines if not x.startswith("note:"))  # jaxsample's notes
    assert err.count("\n") == 0 and err.startswith(f"jaxsample {args[0]}: error:"), err
    assert "Traceback" not in err


@pytest.mark.slow
def test_bad_output_path_fails_before_any_work(tmp_path) -> None:
    """A bad --json is caught before the run (it used to lose the whole run to a
    FileNotFoundError at the end); the process exits 2 with one line."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "jaxsample", "train", "--json", str(tmp_path / "no" / "x.json")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_SECONDS)
    assert run.returncode == 2
    assert run.stdout == ""  # nothing started: no banner, no progress
    # XLA's C++ logging may add lines of its own in the test session (its
    # persistent cache warns about CPU features at a hit on some machines).
    lines = [x for x in run.stderr.splitlines() if x and not re.match(r"[EWIF]\d{4} ", x)]
    assert len(lines) == 1 and "--json" in lines[0], run.stderr

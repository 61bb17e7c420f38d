"""``jaxsample train`` as a user drives it, the rough edges of issue 30:
Ctrl-C keeps what was trained (exit 130), every bad input is one line naming
the flag or config key (exit 2), the JSON records a replayable run, a damaged
checkpoint folder is named and left as it is, and the output reads well
(narrow terminals, sweeps grouped by setting).

The toy trainer keeps the run loop's tests to a few flops; the tests that train
PPO (or start a subprocess) are marked slow and share test_cli_train's
module fixture run where they can.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxsample.runs import loop, report

sys.path.insert(0, str(Path(__file__).parent))
from helpers import HANG_SECONDS
from test_cli_train import _error_of, _toml, _ToyTrainer, _tree_digest

# --- item 1: Ctrl-C keeps what was trained -----------------------------------------


def _toy_reference(key: int, lr: np.ndarray, seeds: int, n: int) -> np.ndarray:
    """``[R, n]`` average_return of the toy trainer, a plain Python loop."""
    combos = len(lr)
    out = np.zeros((seeds * combos, n))
    for r in range(seeds * combos):
        x = float(jax.random.uniform(jax.random.fold_in(jax.random.key(key), r // combos)))
        for i in range(n):
            x = x * (1 - lr[r % combos]) + 1.0
            out[r, i] = x
    return out


@pytest.mark.parametrize("one_program", [True, False])
def test_a_stop_ends_the_run_early_with_the_iterations_run(one_program) -> None:
    """``stop`` (what Ctrl-C sets) ends the one program from inside within a
    check or two, or the chunked run after its current chunk; the result holds
    exactly the iterations that ran, marked interrupted."""
    trainer = _ToyTrainer()
    trainer.num_iterations = n = 3000
    lr = np.asarray([0.5, 0.25], np.float32)
    common = dict(seeds=2, num_iterations=n, chunks=300, hparams={"lr": lr})
    events, stopped = [], []

    def progress(event):
        events.append(event)
        if event["phase"] == "running" and not stopped:
            stopped.append(event["steps"] // 10)  # iterations done at the request

    result = loop.run_training(
        trainer, jax.random.key(3), progress=progress, one_program=one_program,
        stop=lambda: bool(stopped), **common,
    )  # fmt: skip
    done = len(result.env_steps)
    assert result.interrupted and stopped and stopped[0] <= done < n
    if not one_program:
        assert done == stopped[0]  # the chunk that was running, no further
    assert result.metrics["average_return"].shape == (4, done)
    np.testing.assert_allclose(
        result.metrics["average_return"], _toy_reference(3, lr, 2, done), rtol=1e-5
    )
    assert list(result.env_steps) == [10 * (i + 1) for i in range(done)]
    # Never stopped: the whole run, the same numbers as without a stop at all.
    full = loop.run_training(
        trainer, jax.random.key(3), one_program=one_program, stop=lambda: False, **common
    )
    plain = loop.run_training(trainer, jax.random.key(3), one_program=one_program, **common)
    assert not full.interrupted and len(full.env_steps) == n
    np.testing.assert_array_equal(full.metrics["average_return"], plain.metrics["average_return"])
    np.testing.assert_array_equal(
        full.metrics["average_return"][:, :done], result.metrics["average_return"]
    )


LONG_RUN = [
    "--num-envs", "4", "--num-steps", "8", "--hidden-sizes", "8", "--update-epochs", "1",
    "--num-minibatches", "1", "--total-steps", "4000000", "--chunks", "500",
]  # fmt: skip


def _start(argv: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "jaxsample", "train", *argv],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.slow  # a subprocess compiles and trains PPO (~30 s)
@pytest.mark.parametrize("folder", [False, True], ids=["one-program", "checkpoint-dir"])
def test_ctrl_c_writes_what_was_trained_and_exits_130(folder, tmp_path) -> None:
    """A 4e6-step run (minutes) interrupted after its first progress line:
    it exits 130 within seconds, with one line, and its JSON / CSV / PNG (and
    checkpoint) hold the iterations it completed; the JSON's curve equals an
    independent in-process run of those iterations."""
    argv = [*LONG_RUN, "--json", "a.json", "--plot", "a.png"]
    if folder:
        argv += ["--checkpoint-dir", "ck"]
    proc = _start(argv, tmp_path)
    try:
        for line in proc.stdout:  # compiling ..., then one line per update
            if "steps/s" in line:
                break
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_SECONDS)
        delay = time.perf_counter() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert delay < HANG_SECONDS / 10, delay  # ~1.5 s on 2 CPU cores, the PNG included
    # Not ours: jaxsample's notes, XLA's own log lines (e.g. the compile cache's).
    err_lines = [x for x in err.splitlines() if not re.match(r"note:|[EWIF]\d{4} ", x)]
    assert len(err_lines) == 1 and err_lines[0].startswith("interrupted (Ctrl-C) after ")
    data = json.loads((tmp_path / "a.json").read_text())
    done, n = data["completed_iterations"], 4_000_000 // 32
    assert data["interrupted"] is True and 0 < done < n // 10
    assert f"after {done} of {n} iterations" in err_lines[0]
    assert len(data["curve"]["env_steps"]) == len(data["curve"]["returns"][0]) == done
    assert data["total_steps"] == done * 32 and data["seeds"] == 1
    rows = (tmp_path / "a.csv").read_text().splitlines()
    assert len(rows) == 1 + done
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    if folder:
        from jaxsample import checkpoint

        assert checkpoint.latest_step(tmp_path / "ck") == done
        assert f"checkpoint ck at iteration {done}" in err_lines[0]
    # The same first iterations, run here in chunks by the library (from the
    # default env's preset, as the command line).
    from jaxsample.algos import presets
    from jaxsample.cli.config import resolve_config
    from jaxsample.runs.run import build_trainer as _build

    flags = dict(num_envs=4, num_steps=8, hidden_sizes=(8,), update_epochs=1, num_minibatches=1)
    flags["total_timesteps"] = n * 32
    preset = presets.get("CartPole-v1")
    config = resolve_config("ppo", "CartPole-v1", False, {}, flags, None, preset).config
    assert data["config"] == json.loads(json.dumps(dataclasses.asdict(config)))
    trainer = _build(config)
    first = min(done, 10)
    keys, hparams = loop.run_inputs(trainer, jax.random.key(0), 1)
    state = jax.jit(jax.vmap(trainer.init))(keys, hparams)
    _, metrics = jax.jit(jax.vmap(lambda s: trainer.run(s, first)))(state)
    want = np.asarray(metrics["episode_return_mean"]).reshape(first)
    got = np.asarray([np.nan if x is None else x for x in data["curve"]["returns"][0][:first]])
    np.testing.assert_allclose(got, want, rtol=1e-5)


# --- item 2: flags typed by argparse are one line too ------------------------------


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["train", "--seeds", "abc"], "argument --seeds: invalid int value: 'abc'"),
        (["train", "--algo", "a2c"], "argument --algo: invalid choice: 'a2c'"),
        (["collect", "--B", "abc"], "argument --B: invalid int value: 'abc'"),
        (["bench", "--reps", "abc"], "argument --reps: invalid int value: 'abc'"),
        (["eval", "--episodes", "x"], "argument --episodes: invalid int value: 'x'"),
        (["eval"], "required: --checkpoint"),
        (["train", "--lrr", "1e-3"], "unrecognized arguments: --lrr 1e-3 (did you mean --lr?)"),
    ],
)
def test_argparse_errors_are_one_line_naming_the_flag(argv, match, capsys) -> None:
    line = _error_of(argv, capsys)
    assert line.startswith(f"jaxsample {argv[0]}: error: ") and match in line, line


# --- item 4: the JSON's config is a valid --config ---------------------------------


def _config_back(values: dict, path: Path):
    """The config the train command resolves from ``values`` written to
    ``path`` and passed as ``--config`` alone."""
    from jaxsample.cli.config import load_config_file, resolve_config
    from jaxsample.cli.parser import _train_algo
    from jaxsample.cli.train import settings

    if path.suffix == ".toml":
        path.write_text(_toml(values))
    else:
        import yaml

        path.write_text(yaml.safe_dump(values))
    algo = _train_algo(["--config", str(path)])
    file_values = load_config_file(str(path))
    args = argparse_namespace(algo=None, env=None, seed=None, seeds=None, chunks=None)
    s = settings(args, file_values)
    assert s["algo"] == algo
    config, sweep, _ = resolve_config(
        s["algo"], s["env"], s["mask_velocity"], file_values, {}, str(path)
    )
    assert sweep == {}
    return config


def argparse_namespace(**kw):
    import argparse

    return argparse.Namespace(mask_velocity=None, **kw)


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_a_recorded_config_resolves_to_the_same_config(suffix, tmp_path) -> None:
    from jaxsample.algos.configs import MASKED_CARTPOLE_RECURRENT, DQNConfig, PPOConfig

    configs = [
        PPOConfig(env_name="Acrobot-v1", num_envs=2, gamma=0.9, hidden_sizes=(8, 8)),
        PPOConfig(recurrent=True, rnn_cell="lstm", num_envs=2, num_minibatches=2),
        MASKED_CARTPOLE_RECURRENT,
        dataclasses.replace(MASKED_CARTPOLE_RECURRENT, recurrent=False),
        DQNConfig(batch_size=32, max_grad_norm=10.0, epsilon_final_min=0.02),
    ]
    if suffix == ".yaml":  # TOML has no null: DQN's None defaults go to YAML
        configs.append(DQNConfig(double_dqn=True))
    for i, config in enumerate(configs):
        recorded = json.loads(json.dumps(dataclasses.asdict(config)))  # as the JSON has it
        back = _config_back(recorded, tmp_path / f"c{i}{suffix}")
        assert back == config, (config, back)


# --- item 9: config and flag values --------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "files", "match"),
    [
        (["--config", "Y"], {"Y": "lr: abc\n"}, "--config '{Y}': lr must be a float, got 'abc'"),
        (["--config", "Y"], {"Y": "lr: 0.0\n"}, "--config '{Y}': lr must be in (0.0, inf]"),
        (["--lr", "0"], {}, "--lr must be in (0.0, inf], got 0.0"),
        (["--lr", "1e-3,0"], {}, "--lr must be in (0.0, inf], got 0.0"),
        (["--hidden-sizes", "64,,64"], {}, "--hidden-sizes '64,,64': an empty size"),
        (["--env", "CartPol-v1"], {}, "(did you mean 'CartPole-v1'?); `jaxsample envs` lists"),
        (["--config", "T"], {"T": "num_envz = 4\n"}, "num_envz for --algo ppo (did you mean"),
    ],
)
def test_bad_values_name_the_flag_or_config_key(argv, files, match, tmp_path, capsys) -> None:
    paths = {}
    for name, text in files.items():
        paths[name] = tmp_path / ("c.yaml" if name == "Y" else "c.toml")
        paths[name].write_text(text)
    argv = [str(paths.get(a, a)) for a in argv]
    line = _error_of(["train", *argv], capsys)
    assert match.format(**{k: str(v) for k, v in paths.items()}) in line, line
    if "did you mean" in match and "--config" in argv:
        hint = "(did you mean num_envs?); `jaxsample train --algo ppo --help` lists them"
        assert line.endswith(hint), line


def test_yaml_numbers_read_as_strings_are_accepted(tmp_path) -> None:
    """PyYAML reads ``1e-3`` (no dot) as a string: the float field takes it."""
    from jaxsample.cli.config import load_config_file, resolve_config

    (tmp_path / "c.yaml").write_text("lr: 1e-3\nclip_eps: 2e-1\nent_coef: [1e-2, 5e-3]\n")
    values = load_config_file(str(tmp_path / "c.yaml"))
    assert values["lr"] == "1e-3"  # what PyYAML gives
    config, sweep, _ = resolve_config("ppo", "CartPole-v1", False, values, {}, "c.yaml")
    assert config.lr == 1e-3 and config.clip_eps == 0.2 and sweep == {"ent_coef": [1e-2, 5e-3]}


# --- item 5: a damaged checkpoint folder --------------------------------------------


def test_a_damaged_run_json_is_one_line_and_nothing_changes(tmp_path, capsys) -> None:
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "run.json").write_text("{")
    before = _tree_digest(folder)
    for argv in (
        ["train", "--num-envs", "2", "--num-steps", "8", "--total-steps", "64",
         "--checkpoint-dir", str(folder), "--csv", str(tmp_path / "m.csv")],
        ["eval", "--checkpoint", str(folder)],
    ):  # fmt: skip
        line = _error_of(argv, capsys)
        assert str(folder) in line and "run.json is damaged" in line, line
    assert _tree_digest(folder) == before


# --- item 10: what a new user sees ------------------------------------------------


def test_the_live_bar_fits_an_80_column_terminal(monkeypatch) -> None:
    """rich's bar at 80 columns: the bar, the elapsed time, ETA and the
    figures, no word cut (…); at 160 every figure in full."""
    from jaxsample.runs.display import LiveDisplay

    for width in (80, 160):
        monkeypatch.setenv("COLUMNS", str(width))  # rich's console width
        stream = io.StringIO()
        display = LiveDisplay(stream, live=True)
        display({"phase": "compiling", "total_steps": 4_000_000})
        assert display._live.console.width == width
        display(
            {
                "phase": "running", "steps": 1_234_944, "total_steps": 4_000_000,
                "fraction": 0.3087, "steps_per_second": 74816.0, "elapsed": 75.0,
                "eta": 37.0, "recent_return": 440.3, "recent_loss": 0.004066,
            }
        )  # fmt: skip
        display.close()
        last = [x for x in stream.getvalue().splitlines() if x.strip()][-1]
        assert "…" not in last and len(last) <= width, last
        assert "━" in last and "ETA 0:37" in last and "0:00:0" in last, last  # bar, elapsed
        if width == 80:
            assert "1.23M/4.00M" in last and "74.8k/s" in last and "R 440.3" in last, last
        else:
            assert "1,234,944/4,000,000 steps" in last and "74,816 steps/s" in last, last


def _sweep_result() -> loop.TrainingResult:
    rng = np.random.default_rng(0)
    returns = rng.uniform(0, 500, (6, 30))
    returns[3, -5:] = np.nan  # a run without episodes at the end
    return loop.TrainingResult(
        env_steps=np.arange(1, 31) * 100, returns=returns, compile_seconds=1.0,
        wall_seconds=2.0, final_state=None,
    )  # fmt: skip


def test_a_sweep_is_summarized_and_plotted_per_setting(tmp_path) -> None:
    """3 seeds x 2 learning rates: per setting the mean, std and range over
    its seeds (numpy's, of each run's final return: the mean of the episodes
    of its last 10 iterations, a 30-iteration run's recent window; no episode
    counts here, so each iteration with episodes weighs 1)."""
    result = _sweep_result()
    groups = {"lr=0.001": [0, 2, 4], "lr=0.0003": [1, 3, 5]}
    names = [f"seed{r // 2}_lr{(0.001, 0.0003)[r % 2]:g}" for r in range(6)]
    table = report.summary_table(result, labels=names, groups=groups)
    assert result.recent_window == loop.recent_window(30) == 10
    finals = [np.nanmean(c[-10:]) for c in result.returns]
    for label, runs in groups.items():
        values = np.asarray(finals)[runs]
        row = next(x for x in table.splitlines() if x.strip().startswith(label))
        assert row.split()[1:4] == [
            f"{values.mean():.1f}",
            f"{values.std():.1f}",
            f"{values.min():.1f}..{values.max():.1f}",
        ], row
        assert row.split()[-1] == "3"
    fig_path = tmp_path / "p.png"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    created = []
    real = plt.subplots

    def spy(*a, **k):
        created.append(real(*a, **k))
        return created[-1]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(plt, "close", lambda fig: None)
        m.setattr(plt, "subplots", spy)
        report.plot(result, str(fig_path), "t", labels=names, groups=groups)
    ax = created[0][1]
    assert [line.get_label() for line in ax.get_lines()] == [
        "lr=0.001 (mean of 3)",
        "lr=0.0003 (mean of 3)",
    ]
    assert len(ax.collections) == 2  # a min..max band per setting
    plt.close(created[0][0])
    assert fig_path.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # imports every installed suite in a fresh process (~10 s)
def test_envs_prints_no_import_chatter() -> None:
    code = "from jaxsample.cli import main; main(['envs'])"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_SECONDS
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Failed to import" not in done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith("gymnax (")
    if "brax" in done.stdout:
        from jaxsample.envs import suites

        env, _ = suites.make("brax/inverted_pendulum")  # the adapter's import too
        assert env is not None

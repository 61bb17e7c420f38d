"""What a run says, from a notebook as from the command line: a preset from
Python (``runs.train(preset=...)``, the command line's config), the first line
(the preset and the steps per seed), a stopped run's line (a real ``SIGINT``
to a Python process running ``runs.train``), one recent return (the display,
the CSV, the JSON and the closing table, whatever the chunks), a game's
closing table, and the live line at every terminal width."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import HANG_SECONDS

from jaxsample import runs
from jaxsample.algos import presets
from jaxsample.algos.configs import PPOConfig
from jaxsample.algos.trainer import Reports
from jaxsample.cli import main
from jaxsample.runs import loop, report
from jaxsample.runs.display import LiveDisplay, _short

pytestmark = pytest.mark.xdist_group("runs")

#: The CartPole-v1 preset made tiny: 8 iterations of 16 steps.
SMALL = {
    "num_envs": 2, "num_steps": 8, "total_timesteps": 128, "hidden_sizes": (8,),
    "update_epochs": 1, "num_minibatches": 1,
}  # fmt: skip
SMALL_FLAGS = [
    "--num-envs", "2", "--num-steps", "8", "--total-steps", "128", "--hidden-sizes", "8",
    "--update-epochs", "1", "--num-minibatches", "1",
]  # fmt: skip


# --- a preset from Python ---------------------------------------------------------


def test_a_preset_trains_from_python_as_the_command_line_builds_it(tmp_path, capsys) -> None:
    """``runs.train(preset="CartPole-v1", overrides=...)`` trains the config
    ``jaxsample train --env CartPole-v1`` with the same flags trains, and its
    first line is the command's: the preset and the steps per seed."""
    lines: list[str] = []
    result = runs.train(preset="CartPole-v1", overrides=SMALL, progress=False, say=lines.append)
    want = presets.get("CartPole-v1").config(**SMALL)
    assert want != PPOConfig(env_name="CartPole-v1", **SMALL)  # the preset's lr, epochs ...
    assert result.record["preset"] == "CartPole-v1"
    assert result.record["config"] == json.loads(json.dumps(dataclasses.asdict(want)))
    first = "jaxsample train: ppo on CartPole-v1 (preset CartPole-v1), 128 steps per seed "
    assert lines[0].startswith(first + "(8 iterations x 16), 1 seed (1 run under one vmap)")
    assert main(["train", *SMALL_FLAGS, "--csv", str(tmp_path / "t.csv")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == lines[0], printed[:2]
    # a config given is trained as given, and says it came from no preset
    plain = PPOConfig(env_name="CartPole-v1", **SMALL)
    lines.clear()
    again = runs.train(plain, progress=False, say=lines.append)
    assert again.record["preset"] is None and "(no preset), 128 steps per seed" in lines[0]


def test_the_command_line_passes_its_preset_and_the_fields_over_it(ran) -> None:
    """The command line hands the run the preset's name and what it sets over
    it; the run builds them with the function ``runs.train(preset=)`` uses."""
    call = ran("--env", "Acrobot-v1", "--num-envs", "4", "--lr", "1e-3,2e-3")
    assert call["preset"] == "Acrobot-v1"
    assert call["overrides"] == {"env_name": "Acrobot-v1", "num_envs": 4, "lr": 1e-3,
                                 "recurrent": False}  # fmt: skip
    assert call["config"] == presets.get("Acrobot-v1").config(num_envs=4, lr=1e-3)
    assert call["sweep"] == {"lr": [1e-3, 2e-3]}
    plain = ran("--env", "Acrobot-v1", "--preset", "none")
    assert plain["preset"] is None and "overrides" not in plain
    assert plain["config"] == PPOConfig(env_name="Acrobot-v1")
    sac = ran("--env", "Pendulum-v1", "--algo", "sac")
    assert sac["config"] == presets.resolve(preset="Pendulum-v1:sac")[0]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"preset": "CartPole-v1"}, ValueError, "pass config or preset, not both"),
        ({"overrides": {"lr": 1e-3}}, ValueError, "overrides go with preset=NAME"),
    ],
)
def test_a_config_is_trained_as_given(kwargs, error, match) -> None:
    """A config and a preset, or overrides of a config: one clear error,
    before anything trains."""
    with pytest.raises(error, match=match):
        runs.train(PPOConfig(env_name="CartPole-v1", **SMALL), progress=False, say=None, **kwargs)


def test_a_bad_preset_or_override_is_named() -> None:
    with pytest.raises(ValueError, match=r"no preset 'CartPol-v1' \(did you mean CartPole-v1, "):
        runs.train(preset="CartPol-v1", progress=False, say=None)
    with pytest.raises(ValueError, match=r"presets: none, CartPole-v1, Acrobot-v1"):
        runs.train(preset="Pendulum-v1:sak", progress=False, say=None)
    with pytest.raises(TypeError, match=r"num_env is not a field of PPOConfig \(did you mean "):
        runs.train(preset="CartPole-v1", overrides={"num_env": 2}, progress=False, say=None)
    with pytest.raises(TypeError, match="a run needs a config, or preset=NAME"):
        runs.train(progress=False, say=None)


# --- a stopped run's line -----------------------------------------------------------

SCRIPT = """\
from jaxsample import runs
from jaxsample.algos.configs import PPOConfig

config = PPOConfig(env_name="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=4_000_000,
                   hidden_sizes=(8,), update_epochs=1, num_minibatches=1)
result = runs.train(config, folder="ck", json="a.json", chunks=5000)
print("RESULT", result.interrupted, result.iterations, flush=True)
"""


@pytest.mark.slow  # a Python process compiles and trains PPO (~20 s)
def test_a_python_run_stopped_by_sigint_says_what_it_kept(tmp_path) -> None:
    """``runs.train`` in a plain Python process (a notebook's kernel gets the
    same ``SIGINT`` from its interrupt button): it returns normally and says
    the command line's line, what stopped it and what it kept."""
    (tmp_path / "run.py").write_text(SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, "run.py"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        lines = []
        for line in proc.stdout:  # the first line, compiling ..., then one line per chunk
            lines.append(line.rstrip("\n"))
            if "steps/s" in line:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=HANG_SECONDS)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    data = json.loads((tmp_path / "a.json").read_text())
    done = data["completed_iterations"]
    assert data["interrupted"] is True and data["stopped_by"] == "SIGINT" and 0 < done < 250_000
    said = (
        f"interrupted (Ctrl-C) after {done} of 250000 iterations: wrote a.csv, a.json, "
        f"checkpoint ck at iteration {done}"
    )
    assert out.splitlines()[-2:] == [said, f"RESULT True {done}"], out[-2000:]
    assert runs.load(tmp_path / "ck").iteration == done
    first = "jaxsample train: ppo on CartPole-v1 (no preset), 4,000,000 steps per seed "
    assert lines[0].startswith(first + "(250,000 iterations x 16)"), lines[0]


# --- one recent return --------------------------------------------------------------

#: 240 iterations of 8 steps: episodes end in some iterations, not in others.
SHORT = PPOConfig(
    env_name="CartPole-v1", num_envs=2, num_steps=4, total_timesteps=1920, hidden_sizes=(8,),
    update_epochs=1, num_minibatches=1,
)  # fmt: skip


def _independent(means: np.ndarray, counts: np.ndarray, window: int) -> np.ndarray:
    """The recent return by hand: per run and iteration, the episodes that
    ended in the last ``window`` iterations (each iteration's mean times its
    count), else the previous value."""
    out = np.full(means.shape, np.nan)
    for r in range(means.shape[0]):
        for i in range(means.shape[1]):
            total = episodes = 0.0
            for j in range(max(0, i - window + 1), i + 1):
                if counts[r, j] > 0:
                    total += float(means[r, j]) * float(counts[r, j])
                    episodes += float(counts[r, j])
            out[r, i] = total / episodes if episodes else (out[r, i - 1] if i else np.nan)
    return out


def _csv_columns(path) -> dict[str, np.ndarray]:
    """``{column: [R, I]}`` of a run's CSV (NaN for a column it lacks)."""
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    shape = (1 + max(int(r["run"]) for r in rows), 1 + max(int(r["iteration"]) for r in rows))
    out = {}
    for key in ("episode_return_mean", "n_episodes", "recent_return"):
        table = np.full(shape, np.nan)
        for r in rows:
            table[int(r["run"]), int(r["iteration"])] = float(r.get(key, "nan"))
        out[key] = table
    return out


def test_one_recent_return_whatever_the_chunks(tmp_path) -> None:
    """The display's, the CSV's, the JSON's and the closing table's recent
    return: identical between one program (no folder, 4 reports) and chunks
    (a folder, 3 chunks), and equal to the episodes' own mean over the last
    ``recent_window`` iterations."""
    got = {}
    ways = {"one": {"chunks": 4}, "chunked": {"chunks": 3, "folder": tmp_path / "ck"}}
    for name, kwargs in ways.items():
        events: list[dict] = []
        lines: list[str] = []
        result = runs.train(
            SHORT, seeds=2, progress=events.append, say=lines.append,
            json=str(tmp_path / f"{name}.json"), **kwargs,
        )  # fmt: skip
        got[name] = (result, [e for e in events if e["phase"] == "running"], lines)
    one, chunked = got["one"][0], got["chunked"][0]
    for key in ("episode_return_mean", "n_episodes"):  # the same run, bit for bit
        np.testing.assert_array_equal(one.training.metrics[key], chunked.training.metrics[key])
    window = 12  # a 240-iteration run's: loop.recent_window
    columns = {name: _csv_columns(tmp_path / f"{name}.csv") for name in got}
    means, counts = columns["one"]["episode_return_mean"], columns["one"]["n_episodes"]
    assert (counts == 0).any() and (counts > 1).any()  # a hold and a weight are tested
    want = _independent(means, counts, window)
    per_iteration = SHORT.num_envs * SHORT.num_steps
    for _, events, _ in got.values():
        for event in events:  # each report, at its own iteration: the mean over the runs
            i = event["steps"] // per_iteration - 1
            assert event["recent_return"] == pytest.approx(np.nanmean(want[:, i]), rel=1e-9)
    assert got["one"][1][-1]["recent_return"] == got["chunked"][1][-1]["recent_return"]
    np.testing.assert_allclose(columns["one"]["recent_return"], want, rtol=1e-9)
    recent = {name: columns[name]["recent_return"] for name in got}
    np.testing.assert_array_equal(recent["one"], recent["chunked"])
    assert loop.recent_window(240) == one.training.recent_window == window
    for name, (result, events, lines) in got.items():
        data = json.loads((tmp_path / f"{name}.json").read_text())
        assert data["final_return_per_seed"] == list(columns[name]["recent_return"][:, -1])
        assert data["final_return_per_seed"] == list(result.final_returns())
        assert data["final_return"] == events[-1]["recent_return"]
        assert data["recent_window"] == window
        lines = "\n".join(lines).splitlines()
        table = next(i for i, x in enumerate(lines) if x.split()[:3] == ["seed", "final", "return"])
        rows = {x.split()[0]: x.split()[1] for x in lines[table + 1 : table + 4]}
        assert rows == {"seed0": f"{want[0, -1]:.1f}", "seed1": f"{want[1, -1]:.1f}",
                        "mean": f"{np.mean(want[:, -1]):.1f}"}  # fmt: skip
        assert lines[table + 4].startswith(
            f"final return: the mean return of the episodes that ended in each run's last "
            f"{window} iterations ({window * per_iteration} steps)"
        )


def test_recent_returns_hold_and_weigh() -> None:
    means = np.asarray([[10.0, np.nan, 40.0, np.nan, np.nan, np.nan]])
    counts = np.asarray([[1, 0, 3, 0, 0, 0]])
    got = loop.recent_returns(means, counts, window=3)
    np.testing.assert_array_equal(got, [[10.0, 10.0, 32.5, 40.0, 40.0, 40.0]])
    np.testing.assert_array_equal(got, _independent(means, counts, 3))
    two = loop.recent_returns(means, counts, 2)
    np.testing.assert_array_equal(two, _independent(means, counts, 2))
    unweighted = loop.recent_returns(means, None, window=3)
    np.testing.assert_array_equal(unweighted, [[10.0, 10.0, 25.0, 40.0, 40.0, 40.0]])
    assert math.isnan(loop.recent_returns([[np.nan, 1.0]], [[0, 1]], 1)[0, 0])
    assert [loop.recent_window(n) for n in (3, 10, 60, 200, 1000)] == [3, 10, 10, 10, 50]


# --- a game's closing table ----------------------------------------------------------


def test_a_games_closing_table_shows_its_evaluation_not_its_return() -> None:
    """A self-play game's return is 1 or 0 whatever is learned: its table
    shows the headline evaluation (the latest value per run) instead."""
    rates = np.asarray([[np.nan, 0.5, np.nan, 0.75], [np.nan, 0.625, np.nan, 0.875]])
    result = loop.TrainingResult(
        env_steps=np.arange(1, 5) * 100, returns=np.ones((2, 4)), compile_seconds=1.0,
        wall_seconds=2.0, final_state=None,
        metrics={"episode_return_mean": np.ones((2, 4)), "win_or_draw_vs_random": rates},
        reports=Reports(evaluation=("win_or_draw_vs_random",)),
    )  # fmt: skip
    lines = report.summary_table(result, labels=["seed0", "seed1"]).splitlines()
    assert lines[0].split() == ["seed", "win_or_draw_vs_random"]
    assert [x.split() for x in lines[1:4]] == [["seed0", "0.750"], ["seed1", "0.875"],
                                               ["mean", "0.812"]]  # fmt: skip
    assert "return" not in "\n".join(lines[:4])
    assert lines[4] == "win_or_draw_vs_random: each run's latest evaluation"


# --- the live line at every width -----------------------------------------------------


def _live_line(monkeypatch, width: int, event: dict) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    stream = io.StringIO()
    display = LiveDisplay(stream, live=True)
    display({"phase": "compiling", "total_steps": event["total_steps"]})
    display(event)
    display.close()
    lines = [x for x in stream.getvalue().splitlines() if x.strip()]
    assert all(len(x) <= width and "…" not in x for x in lines), (width, lines)
    return lines[-1]


BIG = {
    "phase": "running", "steps": 100_000_000, "total_steps": 100_000_000, "fraction": 1.0,
    "steps_per_second": 13_600_000.0, "elapsed": 3975.0, "eta": 0.0, "recent_return": 1.0,
    "recent_loss": 0.004066, "evaluation": {"win_or_draw_vs_random": 0.9296875},
}  # fmt: skip


@pytest.mark.parametrize("width", [30, 50, 80, 100, 120, 130, 150, 160, 200])
def test_the_live_line_fits_every_width(monkeypatch, width: int) -> None:
    """Nothing cut or wrapped at any width: the fullest layout that fits
    (every figure in full wherever they fit beside a bar of at least 10
    columns: a 100M-step game at 13.6M steps/s), short figures below, fewer
    figures on a narrow terminal."""
    last = _live_line(monkeypatch, width, BIG)
    widest = _live_line(monkeypatch, 400, BIG)
    assert widest.count("━") == 40  # the bar's most
    full = width >= len(widest) - 30  # the bar's fewest: 10
    assert ("training" in last) == full, last
    if full:
        assert "100,000,000/100,000,000 steps 13,600,000 steps/s" in last, last
        assert "win_or_draw_vs_random 0.930  loss 0.004066" in last and "━" in last, last
    elif width >= 80:
        assert "100M/100M 13.6M/s 0:00:0" in last, last  # the elapsed time ticks
        assert "ETA 0:00 win_or_draw 0.93 L 0.0041" in last, last
    else:
        assert "100M/100M" in last and "win_or" in last, last
    if width == 160:  # a 160-column terminal cut the full line at 160
        assert len(widest) - 40 + last.count("━") == len(last) <= 160


def test_short_figures_have_three_digits_and_no_stray_point(monkeypatch) -> None:
    assert [_short(x) for x in (500, 999.4, 999.6, 9_996, 74_816, 136_000, 999_600,
                                1_234_944)] == [
        "500", "999", "1.00k", "10.0k", "74.8k", "136k", "1.00M", "1.23M",
    ]  # fmt: skip
    event = {**BIG, "steps": 38_400, "total_steps": 150_000, "fraction": 0.256,
             "steps_per_second": 136_000.0, "eta": 0.8, "evaluation": None,
             "recent_return": 272.4}  # fmt: skip
    last = _live_line(monkeypatch, 100, event)
    assert "38.4k/150k 136k/s" in last and "R 272.4 L 0.0041" in last, last
    assert "136.k" not in last


def test_the_runs_guide_and_notebook_show_a_preset() -> None:
    """The runs guide, its Colab recipe and the PPO notebook train a preset
    from Python, as the command line does."""
    root = Path(__file__).resolve().parents[1]
    guide = (root / "docs" / "guides" / "runs.md").read_text()
    colab = guide[guide.index("### Colab") :]
    assert 'runs.train(preset="CartPole-v1"' in guide and 'preset="CartPole-v1"' in colab
    assert 'PPOConfig(env_name="CartPole-v1"), seeds=4' not in colab
    notebooks = (root / "notebooks" / "make_notebooks.py").read_text()
    assert 'runs.train(preset="CartPole-v1"' in notebooks

"""The presets' results page: tools/preset_results.py's curves and JSON lines,
tools/preset_page.py's figures and table (no training: made-up lines);
tools/pqn_vs_rejax.py's commands and arguments (nothing runs)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import pqn_vs_rejax
import preset_page
import preset_results


def test_the_curve_is_the_mean_of_each_bins_finite_returns() -> None:
    steps = np.arange(1, 11) * 100
    returns = np.array([[1, np.nan, 3, 4, np.nan, np.nan, 7, 8, 9, 10]] * 2, np.float64)
    returns[1] *= -1
    curve = preset_results.curve_of(steps, returns, points=4)
    # np.array_split(10 iterations, 4): [0..2], [3..5], [6..7], [8..9]
    assert curve["steps"] == [300, 600, 800, 1000]
    assert curve["returns"][0] == [2.0, 4.0, 7.5, 9.5]
    assert curve["returns"][1] == [-2.0, -4.0, -7.5, -9.5]
    none_ended = preset_results.curve_of(steps[:2], np.full((1, 2), np.nan), points=4)
    assert none_ended == {"steps": [100, 200], "returns": [[None, None]]}


def test_all_trains_each_published_preset_and_minatar_beside_the_defaults() -> None:
    jobs = preset_results.table_jobs(123)
    assert [env for env, _, _ in jobs[:6]] == list(preset_results.TARGETS)
    assert all(preset is None and not over for _, preset, over in jobs[:6])
    minatar = jobs[6:]
    assert {env for env, _, _ in minatar} == set(preset_results.MINATAR)
    assert sorted(preset or "preset" for _, preset, _ in minatar) == ["none"] * 4 + ["preset"] * 4
    assert all(over == {"total_timesteps": 123} for _, _, over in minatar)


def _line(env: str, preset: str | None, python: str, median: float, **more) -> dict:
    target, budget = preset_results.TARGETS.get(env, (None, None))
    seeds = [median - 1, median, median, median + 1]
    rows = [[median - 50 + i, median - 10 + i, None, median + i] for i in range(4)]
    line = {
        "env": env, "preset": preset, "overrides": more.pop("overrides", {}), "note": "",
        "target": target, "budget": budget, "steps": 1000, "seeds": 4, "episodes": 164,
        "returns": seeds, "median": median, "wall_s": 12.3, "jax": "0.11.2",
        "python": python, "date": "2026-12-04T00:00:00+00:00",
        "curve": {"steps": [250, 500, 750, 1000], "returns": rows},
        "met": target is not None and median >= target,
    }  # fmt: skip
    line.update(more)
    return line


def _write(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_page_shows_the_latest_line_of_each_env_start_and_python(tmp_path) -> None:
    results = tmp_path / "results.jsonl"
    _write(results, [
        _line("CartPole-v1", "CartPole-v1", "3.12.1", 300.0),  # replaced by the next
        _line("CartPole-v1", "CartPole-v1", "3.12.1", 500.0),
        _line("CartPole-v1", "CartPole-v1", "3.11.7", 499.0),
        _line("Pendulum-v1", "Pendulum-v1", "3.12.1", -200.0),
        _line("Breakout-MinAtar", "Breakout-MinAtar", "3.12.1", 20.0,
              overrides={"total_timesteps": 1000}),
        _line("Breakout-MinAtar", None, "3.12.1", 5.0, overrides={"total_timesteps": 1000}),
    ])  # fmt: skip
    page = tmp_path / "presets.md"
    page.write_text(f"intro\n\n{preset_page.START}\nold table\n{preset_page.END}\n\nafter\n")
    assert preset_page.main(["--results", str(results), "--page", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("intro\n") and text.endswith("\nafter\n") and "old table" not in text
    rows = [r for r in text.splitlines() if r.startswith("| ")]
    # five columns (the Pythons share one): the page's content column at 1280 px
    # fits them (tests/test_docs.py measures it in a browser where there is one)
    assert rows[0] == "| env | target | ours, Python 3.12 / 3.11 | steps / budget | wall |"
    assert "the median over 4 seeds of each seed's greedy mean return" in text
    cart, pend, breakout, defaults = rows[1:]
    assert (
        cart == "| CartPole-v1 | 500 | **500**&nbsp;✓ / **499**&nbsp;✗ | 1,000 / 150,000 | 12 s |"
    )
    assert pend.startswith("| Pendulum-v1 | -130 | **-200**&nbsp;✗ / not run |")
    assert breakout.startswith("| Breakout-MinAtar | - | **20** / not run | 1,000 / - |")
    assert defaults.startswith("| Breakout-MinAtar (plain defaults) | - | **5** / not run |")
    assert (
        "taskset -c 1 python tools/preset_results.py --env Breakout-MinAtar --preset none "
        "--set total_timesteps=1000 --seeds 4" in text
    )
    figures = tmp_path / "figures" / "presets"
    for env in ("CartPole-v1", "Pendulum-v1", "Breakout-MinAtar"):
        png = figures / f"{env}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"![{env}](figures/presets/{env}.png)" in text
    assert not list(tmp_path.glob("*.tmp"))


def test_seeds_get_a_column_only_where_the_rows_differ() -> None:
    lines = [_line("CartPole-v1", "CartPole-v1", "3.12.1", 500.0),
             _line("Acrobot-v1", "Acrobot-v1", "3.12.1", -80.0, seeds=8)]  # fmt: skip
    latest = {(line["env"], line["env"], "3.12"): line for line in lines}
    text = preset_page.table(latest, ["3.12"])
    assert text[-4].endswith("| steps / budget | wall | seeds |"), text
    assert text[-2].endswith("| 12 s | 4 |") and text[-1].endswith("| 12 s | 8 |"), text
    assert "the median over the seeds" in " ".join(text)


def test_quartiles_are_over_the_seeds_finite_values() -> None:
    low, mid, high = preset_page.quartiles([[1.0, None], [2.0, None], [3.0, 5.0], [4.0, None]])
    assert (low[0], mid[0], high[0]) == (1.75, 2.5, 3.25)
    assert (low[1], mid[1], high[1]) == (5.0, 5.0, 5.0)
    assert all(math.isnan(q[0]) for q in preset_page.quartiles([[None], [None]]))


def test_a_page_without_markers_is_refused(tmp_path) -> None:
    results = tmp_path / "results.jsonl"
    _write(results, [_line("CartPole-v1", "CartPole-v1", "3.12.1", 500.0)])
    page = tmp_path / "presets.md"
    page.write_text("no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        preset_page.main(["--results", str(results), "--page", str(page)])
    assert page.read_text() == "no markers\n"


def test_pqn_vs_rejax_runs_the_preset_and_rejax_hyperparameters_as_flags(ran) -> None:
    """The ``ours`` rows are the documented command on the CartPole-v1 PQN
    preset; ``ours-rejax-hp`` gives every one of rejax's settings as a flag."""
    from jaxsample.algos import presets

    def flags(cmd: list[str]) -> list[str]:  # after "python -m jaxsample train", less --csv
        assert cmd[1:4] == ["-m", "jaxsample", "train"]
        at = cmd.index("--csv")
        return cmd[4:at] + cmd[at + 2 :]

    cold = pqn_vs_rejax.ours_command("D", cold=True, rejax_hp=False)
    assert flags(cold) == ["--algo", "pqn", "--seeds", "4", "--checkpoint-dir", "D",
                           "--no-compile-cache"]  # fmt: skip
    call = ran(*flags(pqn_vs_rejax.ours_command("D", cold=False, rejax_hp=False)))
    assert call["preset"] == "CartPole-v1:pqn" and call["seeds"] == 4
    assert call["config"] == presets.get("CartPole-v1:pqn").config()
    config = ran(*flags(pqn_vs_rejax.ours_command("D", cold=False, rejax_hp=True)))["config"]
    changed = 0
    for name, value in pqn_vs_rejax.REJAX_AS_OURS.items():
        want = tuple(int(w) for w in value.split(",")) if name == "hidden_sizes" else value
        assert getattr(config, name) == want, name
        changed += getattr(call["config"], name) != want
    assert changed >= 8  # most of them differ from the preset's


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--rounds", "0"], "--rounds must be >= 1"), (["--rows", "ours,pqn"], "--rows: pqn")],
)
def test_pqn_vs_rejax_refuses_bad_arguments_before_it_runs(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        pqn_vs_rejax.main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err

"""tools/time_to_solve.py (issue 53 item 1): the alternation, the statistics, the
breakdown read from a process's lines, and one tiny real train process timed,
its saved run evaluated afterwards; PureJaxRL absent is a note."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import time_to_solve as tts


def test_repetitions_alternate_the_order() -> None:
    calls = []
    out = tts.alternate(["a", "b", "c"], 3, lambda rep, name: calls.append((rep, name)) or rep)
    assert [n for _, n in calls] == list("abccbaabc")
    assert out == {"a": [0, 1, 2], "b": [0, 1, 2], "c": [0, 1, 2]}


def test_spread_and_paired_ratios() -> None:
    s = tts.spread([4.0, 1.0, 3.0, 2.0, 5.0, None])
    assert s == {"median": 3.0, "q25": 2.0, "q75": 4.0, "min": 1.0, "max": 5.0}
    assert tts.spread([None]) is None
    assert tts.spread([2.0])["q25"] == 2.0
    assert tts.paired_ratios([2.0, None, 9.0], [1.0, 3.0, 3.0]) == [2.0, 3.0]


def _timed(lines: list[tuple[float, str]], wall: float) -> tts.Timed:
    return tts.Timed(["x"], wall, 1.0, 0.1, 0, lines, 0.0, 0.0)


def test_the_breakdown_reads_the_commands_own_figures() -> None:
    lines = [
        (0.2, "every metric goes to /tmp/train.csv (--csv to choose)"),
        (2.5, "jaxsample train: ppo on CartPole-v1 (preset CartPole-v1), 1 run(s) ..."),
        (2.6, "compiling the training program ..."),
        (6.0, "loaded from the compile cache in 0.4 s (tracing and lowering 0.3 s, XLA 0.1 s)"),
        (6.1, "149,760 steps per seed, 96,082 steps/s (all seeds), run 1.6 s, compile 0.4 s"),
        (6.3, "wrote train.csv"),
    ]
    got = tts.breakdown(_timed(lines, 7.0), "jaxsample")
    assert got["startup"] == 2.5 and got["compile"] == 0.4 and got["run"] == 1.6
    assert got["other"] == pytest.approx(6.1 - 2.5 - 2.0)
    assert got["outputs"] == pytest.approx(0.9) and got["cached"] is True
    peer = [(5.5, "global step=512, episodic return=21.0"), (9.0, "global step=...")]
    assert tts.breakdown(_timed(peer, 10.0), "purejaxrl") == {
        "to_first_episode": 5.5,
        "after": 4.5,
    }
    failed = tts.breakdown(_timed([(1.0, "Traceback")], 2.0), "jaxsample")
    assert failed["startup"] is None and failed["compile"] is None


def test_the_import_profile_sums_the_top_level_imports() -> None:
    lines = [
        "import time: self [us] | cumulative | imported package",
        "import time:       100 |        100 |   numpy.core",
        "import time:       400 |        500 | numpy",
        "import time:      1000 |       1500 |   jax._src",
        "import time:       500 |       2000 | jax",
    ]
    got = tts.import_profile(_timed([(0.0, line) for line in lines], 1.0))
    assert got["total_s"] == pytest.approx(0.0025)
    assert got["own_s"] == {"jax": 0.0015, "numpy": 0.0005}


def test_checkouts_and_a_missing_peer(tmp_path) -> None:
    assert tts.parse_checkout(f"before={tts.ROOT}") == ("before", tts.ROOT)
    with pytest.raises(ValueError, match="holds no jaxsample"):
        tts.parse_checkout(f"x={tmp_path}")
    with pytest.raises(ValueError, match="the name"):
        tts.parse_checkout(f"a b={tts.ROOT}")
    args = tts._parser().parse_args(["--purejaxrl", str(tmp_path / "bin" / "python")])
    targets, notes = tts.targets_of(args)
    assert [t.name for t in targets] == ["ours"] and "PureJaxRL skipped" in notes[0]


def test_the_peer_runs_its_own_script_for_another_env(tmp_path) -> None:
    peer = tts.Target("purejaxrl", "purejaxrl", "py", tmp_path)
    assert peer.argv("CartPole-v1", None, ["--x"], 1) == ["py", "ppo.py"]
    assert peer.argv("Acrobot-v1", None, [], 1)[-1] == "Acrobot-v1"
    env = peer.environ({"JAX_COMPILATION_CACHE_DIR": "mine", "A": "1"}, tmp_path / "c")
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "c") and env["A"] == "1"
    ours = tts.Target("ours", "jaxsample", "py", tts.ROOT)
    env = ours.environ({"JAX_COMPILATION_CACHE_DIR": "mine"}, tmp_path / "c")
    assert "JAX_COMPILATION_CACHE_DIR" not in env  # the command's own cache folder
    assert env["XDG_CACHE_HOME"] == str(tmp_path / "c")
    assert env["PYTHONPATH"].split(":")[0] == str(tts.ROOT)
    argv = ours.argv("Acrobot-v1", tmp_path / "run", ["--chunks", "1"], 2, ("-X", "importtime"))
    assert argv[:3] == ["py", "-X", "importtime"]
    assert argv[3:] == ["-m", "jaxsample", "train", "--env", "Acrobot-v1", "--seeds", "2",
                        "--checkpoint-dir", str(tmp_path / "run"), "--chunks", "1"]  # fmt: skip


@pytest.mark.long
def test_one_tiny_real_process_is_timed_and_its_saved_run_evaluated(tmp_path, capsys) -> None:
    out = tmp_path / "tts.json"
    code = tts.main(
        [
            "--envs", "CartPole-v1", "--modes", "cold", "--reps", "1", "--episodes", "2",
            "--train-args", "--total-steps 256 --num-envs 2 --num-steps 64 --chunks 1 "
            "--update-epochs 1 --num-minibatches 1",
            "--purejaxrl", str(tmp_path / "absent" / "python"), "--json", str(out),
            "--keep", str(tmp_path / "work"), "--no-byte-compile",
        ]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "note: PureJaxRL skipped" in printed and "| CartPole-v1 | cold | ours |" in printed
    result = json.loads(out.read_text())
    (cell,) = result["cells"]
    entry = cell["targets"]["ours"]
    (run,) = entry["runs"]
    assert run["returncode"] == 0, run["tail"]
    assert run["breakdown"]["cached"] is False  # cold: an empty cache
    parts = [run["breakdown"][k] for k in ("startup", "compile", "run", "other", "outputs")]
    assert all(p is not None and p >= -0.15 for p in parts), parts  # figures in 0.1 s
    assert sum(parts) == pytest.approx(run["wall_s"], abs=0.3)
    assert len(entry["greedy_returns"]) == 1 and entry["greedy_min"] > 0
    assert entry["solved"] in (True, False) and cell["threshold"] == 475.0
    assert result["notes"] and result["targets"][0]["commit"]


def test_byte_compiling_writes_bytecode_whatever_the_env_says(tmp_path, monkeypatch) -> None:
    """``compile_folders`` (what ``byte_compile`` runs on a venv's packages
    and a checkout) writes each module's ``.pyc`` even where
    ``PYTHONDONTWRITEBYTECODE`` keeps imports from writing it."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text("X = 1\n")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    tts.compile_folders(sys.executable, [str(package)])
    assert list((package / "__pycache__").glob("mod.*.pyc"))

"""What the command line says, as a user reads it: errors name the flag as it
was typed (an alias, ``--total-steps`` or ``--total-timesteps``), ``eval``
takes the run folder under ``train``'s name for it, every ``--help`` shows a
flag's default once, ``runs.load`` says when there is no run, and the
README's and ``.gitignore``'s promises about what a run prints and writes.
Nothing here trains."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from test_cli_flags import _error  # one line, exit status 2

from jaxsample.algos import registry
from jaxsample.cli import main
from jaxsample.cli.parser import _parse_args, _parser

ROOT = Path(__file__).resolve().parent.parent


# --- errors name the flag as typed -------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--total-timesteps", "10"], "--total-timesteps (10) must be >= num_envs * num_steps"),
        (["--total-steps", "10"], "--total-steps (10) must be >= num_envs * num_steps"),
        (["--total-timesteps", "10x"], "--total-timesteps '10x': expected int"),
        (["--total-steps=10x"], "--total-steps '10x': expected int"),
        (["--learning-rate", "abc"], "--learning-rate 'abc': expected float"),
        (["--learning-rate", "0"], "--learning-rate must be in (0.0, inf], got 0.0"),
        (["--lr", "0"], "--lr must be in (0.0, inf], got 0.0"),
        (["--clip-coef", "-1"], "--clip-coef must be in [0.0, inf], got -1.0"),
        (["--hidden-sizes", "64,,64"], "--hidden-sizes '64,,64': an empty size between commas"),
        # the value argparse keeps is the last one given: its flag is named
        (["--total-steps", "20000", "--total-timesteps", "10"], "--total-timesteps (10)"),
        (["--algo", "dqn", "--target-network-frequency", "0"], "--target-network-frequency must"),
    ],
)
def test_an_error_names_the_flag_as_typed(argv, message, capsys) -> None:
    err = _error(["train", *argv], capsys)
    assert err.startswith("jaxsample train: error: ") and message in err, err


def test_a_prefix_is_still_refused_under_its_own_name(capsys) -> None:
    err = _error(["train", "--total-step", "10"], capsys)
    assert "unrecognized arguments: --total-step 10 (did you mean --total-steps?)" in err, err


# --- eval's run folder ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["--checkpoint-dir", "--checkpoint"])
def test_eval_takes_the_run_folder_under_trains_name_and_its_own(name) -> None:
    parser, sub, _ = _parser(["eval"])
    args = _parse_args(parser, sub, ["eval", name, "runs/cp"])
    assert args.checkpoint == "runs/cp" and args.flag_names == {"checkpoint": name}


@pytest.mark.parametrize("name", ["--checkpoint-dir", "--checkpoint"])
def test_eval_of_a_missing_or_empty_folder_says_there_is_no_run(name, tmp_path, capsys) -> None:
    missing = tmp_path / "missing"
    err = _error(["eval", name, str(missing)], capsys)
    assert f"{name} '{missing}' does not exist: no run there" in err, err
    err = _error(["eval", name, str(tmp_path)], capsys)
    assert f"{name} '{tmp_path}' holds no jaxsample run" in err, err


def test_eval_of_a_file_says_what_to_pass(tmp_path, capsys) -> None:
    out = tmp_path / "out.json"
    out.write_text('{"algo": "ppo"}')
    err = _error(["eval", "--checkpoint", str(out)], capsys)
    assert f"--checkpoint '{out}' is a file, not a run folder" in err, err
    assert "jaxsample train --checkpoint-dir DIR" in err and "--json" in err, err
    run_json = tmp_path / "run.json"
    run_json.write_text("{}")
    err = _error(["eval", "--checkpoint-dir", str(run_json)], capsys)
    assert err.endswith(f"pass its folder: --checkpoint-dir '{tmp_path}'"), err


# --- runs.load where there is no run ------------------------------------------------------


def test_load_says_there_is_no_run(tmp_path) -> None:
    from jaxsample import runs
    from jaxsample.runs.errors import FolderMismatch, RunError, RunNotFound

    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "started").mkdir()
    (tmp_path / "started" / "run.json").write_text(
        '{"algo": "ppo", "config": {}, "seed": 0, "seeds": 1, "sweep": {}}'
    )
    cases = {
        "missing": "run folder '{}' does not exist: no run there",
        "file": "run folder '{}' is a file, not a run folder",
        "empty": "run folder '{}' holds no jaxsample run (no run.json, no checkpoint)",
        "started": "run folder '{}': its run has no checkpoint yet",
    }
    for name, message in cases.items():
        path = tmp_path / name
        with pytest.raises(RunNotFound) as info:
            runs.load(path)
        assert str(info.value).startswith(message.format(path)), info.value
        assert isinstance(info.value, RunError) and not isinstance(info.value, FolderMismatch)
    assert runs.RunNotFound is RunNotFound


# --- --help: each default once ---------------------------------------------------------


def _help_entries(text: str) -> dict[str, str]:
    """``{flags: help}`` of a ``--help`` text's option entries, each joined
    onto one line."""
    entries: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if re.match(r"  -", line):
            current, _, rest = line.strip().partition("  ")
            entries[current] = rest.strip()
        elif current and line.startswith("    ") and line.strip():
            entries[current] += " " + line.strip()
        else:
            current = None
    return {k: v.strip() for k, v in entries.items()}


def _helps() -> list[list[str]]:
    sub = _parser([])[1]
    commands = [[name] for name in sub.choices if name != "train"]
    return [*commands, *(["train", "--algo", algo] for algo in registry.ALGORITHMS)]


@pytest.mark.parametrize("argv", _helps(), ids=" ".join)
def test_help_shows_each_default_once(argv, capsys) -> None:
    """``(default: ...)`` at most once per flag, never ``(default: None)``
    (argparse's, for a flag whose help says what applies) nor a switch's
    ``(default: False)``."""
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    entries = _help_entries(capsys.readouterr().out)
    assert "-h, --help" in entries and (len(entries) >= 3 or argv == ["envs"]), entries
    doubled = {k: v for k, v in entries.items() if v.count("(default") > 1}
    assert not doubled, doubled
    wrong = {k: v for k, v in entries.items() if re.search(r"\(default: (None|False)\)", v)}
    assert not wrong, wrong


def test_help_still_shows_the_defaults_that_say_something(capsys) -> None:
    for argv, flag, default in (
        (["eval"], "--episodes EPISODES", "(default: 10)"),
        (["eval"], "--opponent random|DIR", "(default: random for a game)"),
        (["bench"], "--json JSON", "(default: bench.json)"),
        (["collect"], "--B B", "(default: 1024)"),
        (["train", "--preset", "none"], "--lr FLOAT[,FLOAT...]", "(default: 0.00025)"),
        (["train"], "--lr FLOAT[,FLOAT...]", "(default: 0.001)"),  # CartPole-v1's preset
    ):
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        entries = _help_entries(capsys.readouterr().out)
        assert default in entries[flag], (argv, entries[flag])


# --- what a run writes is ignored, what it prints is what the README quotes -------------


def test_gitignore_holds_what_the_command_line_writes_by_default() -> None:
    """``train``'s metrics without ``--csv`` (``train.csv``), the Quickstart's
    outputs, ``bench``'s default files, the run folders of the guides'
    examples and the site ``mkdocs build`` writes."""
    readme = (ROOT / "README.md").read_text()
    quickstart = re.search(r"python3 -m jaxsample train [^\n`]*", readme).group(0)
    words = shlex.split(quickstart)
    written = [words[i + 1] for i, w in enumerate(words) if w in ("--json", "--plot")]
    assert written == ["ppo.json", "ppo.png"], quickstart
    written.append("ppo.csv")  # the --json path with .csv (the train command's --help)
    bench = _parser(["bench"])[1].choices["bench"]
    written += [a.default for a in bench._actions if a.dest in ("json", "plot")]
    written += ["train.csv", "eval.json", "runs/cp/run.json", "ckpt/run.json", "site/index.html"]
    out = subprocess.run(
        ["git", "check-ignore", "--no-index", *written],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert sorted(out.stdout.split()) == sorted(written), out.stdout + out.stderr
    tracked_but_ignored = subprocess.run(
        ["git", "ls-files", "--cached", "--ignored", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert not tracked_but_ignored, tracked_but_ignored


def test_readme_quotes_the_lines_the_compile_cache_prints(monkeypatch) -> None:
    """The Quickstart says what the first and the second run print about
    their programs; those are `CompileWatch.summary`'s lines (the second
    run's, every program loaded: tests/test_jax_versions.py runs it)."""
    from jaxsample.compile_cache import CompileWatch

    readme = (ROOT / "README.md").read_text()
    quickstart = readme[readme.index("## Quickstart") : readme.index("```bash")]
    quoted = re.findall(r"`([^`]* X s)`", quickstart)
    assert quoted == ["compiled in X s", "loaded from the compile cache in X s"], quoted
    watch = CompileWatch()
    for hits, compiles, line in ((0, 3, quoted[0]), (3, 0, quoted[1])):
        monkeypatch.setattr(CompileWatch, "hits", property(lambda self, h=hits: h))
        monkeypatch.setattr(CompileWatch, "compiles", property(lambda self, c=compiles: c))
        printed = watch.summary(1.5)
        assert printed.startswith(line.replace("X", "1.5")), (printed, line)


def test_train_help_says_where_the_metrics_go_by_default(capsys) -> None:
    """The CSV default that the .gitignore test relies on."""
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    entries = _help_entries(capsys.readouterr().out)
    assert "the --json path with .csv, else train.csv" in entries["--csv CSV"]

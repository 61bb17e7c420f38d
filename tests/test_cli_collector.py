"""``jaxsample train`` pauses Python's garbage collector from its start until
its training program runs, then freezes what the start made and collects
again (`jaxsample.cli.train`); a caller's collector is left as it was."""

from __future__ import annotations

import gc

import pytest

from jaxsample.cli import main

TINY = [
    "--env", "CartPole-v1", "--num-envs", "2", "--num-steps", "8", "--hidden-sizes", "8",
    "--update-epochs", "1", "--num-minibatches", "1", "--total-timesteps", "64",
]  # fmt: skip


@pytest.fixture
def collector():
    """The collector as the test found it, restored after (frozen objects
    thawed: the next collections see them again)."""
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("folder", [False, True])
def test_train_collects_no_garbage_until_its_program_runs(
    folder, collector, monkeypatch, tmp_path
) -> None:
    """While the program compiles the collector is off; once it runs it is on,
    with the start's objects frozen; after the command, on (as found)."""
    from jaxsample.runs import programs

    seen: list[tuple[str, bool]] = []
    for cls in (programs.Chunks, programs.OneProgram):
        for name in ("compile", "run"):
            original = getattr(cls, name)

            def probe(*args, _original=original, _name=name, **kwargs):
                seen.append((_name, gc.isenabled()))
                if _name == "compile":  # a classmethod: _original is bound already
                    args = args[1:]
                return _original(*args, **kwargs)

            monkeypatch.setattr(cls, name, classmethod(probe) if name == "compile" else probe)
    monkeypatch.chdir(tmp_path)
    gc.enable()
    gc.unfreeze()
    argv = ["train", *TINY, *(["--checkpoint-dir", str(tmp_path / "run")] if folder else [])]
    assert main(argv) == 0
    assert seen[0] == ("compile", False)
    assert seen[1][0] == "run"
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0  # the start's objects, frozen when the program ran


def test_train_leaves_a_paused_collector_paused_and_restores_it_after_an_error(
    collector, monkeypatch, tmp_path, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    gc.disable()
    assert main(["train", *TINY]) == 0
    assert not gc.isenabled()  # the caller's choice: not turned on at the run
    gc.enable()
    with pytest.raises(SystemExit):
        main(["train", "--env", "CartPole-v1", "--total-timesteps", "10"])  # a usage error
    assert gc.isenabled()

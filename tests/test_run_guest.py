"""The library is a guest in the user's process (issue 50 item 6):
``runs.train`` leaves ``threading.excepthook`` and ``sys.unraisablehook`` the
very objects the user had (after a run with checkpoints, one that raises, one
interrupted) and orbax's own ``run_sync`` as it was; a user's thread that
fails while a checkpoint is being saved reaches the user's hooks; and the
operations orbax abandons when a save or restore fails print nothing (a real
process, a real damaged checkpoint, a real full tmpfs)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading

import orbax.checkpoint as ocp
import pytest
from helpers import HANG_SECONDS
from orbax.checkpoint._src import asyncio_utils
from test_runs import QUIET, TINY, small_disk

from jaxsample import checkpoint, runs
from jaxsample.runs.errors import FolderMismatch

pytestmark = pytest.mark.xdist_group("runs")

# TINY, 2 seeds, a checkpoint after every iteration (as test_runs: one compile)
RUN = {"seeds": 2, "chunks": 8, "checkpoint_seconds": 0, **QUIET}  # a checkpoint per chunk


@pytest.fixture
def user_hooks(monkeypatch):
    """The user's own hooks, set as a user sets them, recording what reaches
    them: ``(thread name, exception)``."""
    seen: dict[str, list[tuple[str, BaseException]]] = {"thread": [], "unraisable": []}

    def thread_hook(args) -> None:
        seen["thread"].append((args.thread.name, args.exc_value))

    def unraisable_hook(args) -> None:
        seen["unraisable"].append((threading.current_thread().name, args.exc_value))

    monkeypatch.setattr(threading, "excepthook", thread_hook)
    monkeypatch.setattr(sys, "unraisablehook", unraisable_hook)
    return thread_hook, unraisable_hook, seen


def _hooks_are(thread_hook, unraisable_hook, run_sync) -> bool:
    return (
        threading.excepthook is thread_hook
        and sys.unraisablehook is unraisable_hook
        and asyncio_utils.run_sync is run_sync
    )


def _damage(step_folder) -> None:
    """Overwrite the array data of a checkpoint step (every byte inverted)."""
    for path in step_folder.rglob("*"):
        if path.is_file() and "/d/" in str(path):
            path.write_bytes(bytes(b ^ 0xFF for b in path.read_bytes()))


def test_a_run_with_checkpoints_and_one_that_raises_leave_the_users_hooks(
    tmp_path, user_hooks
) -> None:
    thread_hook, unraisable_hook, seen = user_hooks
    run_sync = asyncio_utils.run_sync
    folder = tmp_path / "run"
    runs.train(TINY, folder=folder, **RUN)
    assert {"7", "8"} <= set(os.listdir(folder))
    assert _hooks_are(thread_hook, unraisable_hook, run_sync)
    _damage(folder / "8")
    with pytest.raises(FolderMismatch, match="the checkpoint of iteration 8 cannot be read"):
        runs.train(TINY, folder=folder, **RUN)
    assert _hooks_are(thread_hook, unraisable_hook, run_sync)
    assert seen == {"thread": [], "unraisable": []}


@pytest.mark.parametrize("how", ["SIGINT", "KeyboardInterrupt"])
def test_an_interrupted_run_leaves_the_users_hooks(how, tmp_path, user_hooks, monkeypatch) -> None:
    """Interrupted in its first checkpoint save: by SIGINT (the run stops after
    that chunk and returns) or by a KeyboardInterrupt raised there (a second
    Ctrl-C: the call raises it)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are handled in the main thread only")
    thread_hook, unraisable_hook, seen = user_hooks
    run_sync = asyncio_utils.run_sync
    save = ocp.CheckpointManager.save

    def interrupted(self, *args, **kwargs):
        if how == "KeyboardInterrupt":
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGINT)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", interrupted)
    if how == "SIGINT":
        result = runs.train(TINY, folder=tmp_path / "run", **RUN)
        assert result.interrupted and result.stopped_by == "SIGINT"
    else:
        with pytest.raises(KeyboardInterrupt):
            runs.train(TINY, folder=tmp_path / "run", **RUN)
    assert _hooks_are(thread_hook, unraisable_hook, run_sync)
    assert seen == {"thread": [], "unraisable": []}


def test_a_user_thread_failing_while_a_checkpoint_is_saved_reaches_the_users_hooks(
    tmp_path, user_hooks, monkeypatch
) -> None:
    """The user's thread runs (and fails, and leaves an unraisable error in a
    ``__del__``) inside the first checkpoint save, after orbax has started
    writing it in the background and before the save returns: joined there,
    so its errors are handled at that moment, whatever the machine's load."""
    thread_hook, unraisable_hook, seen = user_hooks
    save = ocp.CheckpointManager.save
    during = []

    class Leaky:
        def __del__(self) -> None:
            raise ValueError("the user's __del__ failed")

    def users_work() -> None:
        Leaky()
        raise RuntimeError("the user's thread failed")

    def saving(self, *args, **kwargs):
        started = save(self, *args, **kwargs)
        if not during:
            during.append(threading.excepthook is thread_hook)
            during.append(sys.unraisablehook is unraisable_hook)
            user = threading.Thread(target=users_work, name="users-thread")
            user.start()
            user.join(HANG_SECONDS)
            during.append(not user.is_alive())
        return started

    monkeypatch.setattr(ocp.CheckpointManager, "save", saving)
    runs.train(TINY, folder=tmp_path / "run", **RUN)
    assert during == [True, True, True]
    assert [(name, repr(e)) for name, e in seen["thread"]] == [
        ("users-thread", repr(RuntimeError("the user's thread failed")))
    ]
    assert [(name, repr(e)) for name, e in seen["unraisable"]] == [
        ("users-thread", repr(ValueError("the user's __del__ failed")))
    ]


def test_orbax_run_sync_is_wrapped_until_the_last_of_overlapping_calls_ends() -> None:
    """Two calls that overlap (as two runs in two threads do): the first to
    end leaves the wrap to the other; the last puts orbax's own back."""
    run_sync = asyncio_utils.run_sync
    first, second = checkpoint._failed_steps_end_cleanly(), checkpoint._failed_steps_end_cleanly()
    with first:
        wrapped = asyncio_utils.run_sync
        assert wrapped is not run_sync
        second.__enter__()
    assert asyncio_utils.run_sync is wrapped
    second.__exit__(None, None, None)
    assert asyncio_utils.run_sync is run_sync


# Six restores of a damaged checkpoint and (on a full tmpfs) six saves, through
# the run folder; each used to leave tensorstore operations that printed
# "Exception ignored ... RuntimeError: Event loop is closed" (most after the
# call had returned). The process then collects and waits: whatever was left
# would print by its exit.
_FAILING = """
import gc, sys, time
from pathlib import Path
import jax, numpy as np
from jaxsample.runs.errors import FolderMismatch, WriteFailed
from jaxsample.runs.folder import RunFolder

where, disk = Path(sys.argv[1]), sys.argv[2:]
state = {f"w{i}": jax.numpy.arange(100_000.0) + i for i in range(20)}
with RunFolder(where / "run") as folder:
    folder.save(state, 1, {"x": np.zeros((1, 1))})
    for path in (where / "run" / "1").rglob("*"):
        if path.is_file() and "/d/" in str(path):
            path.write_bytes(bytes(b ^ 0xFF for b in path.read_bytes()))
    for _ in range(6):
        try:
            folder.restore(state, 1)
            sys.exit("a damaged checkpoint was restored")
        except FolderMismatch:
            pass
if disk:
    big = {f"w{i}": jax.random.normal(jax.random.key(i), (300_000,)) for i in range(6)}
    with RunFolder(Path(disk[0]) / "run") as folder:
        for step in range(1, 7):
            try:
                folder.save(big, step, {"x": np.zeros((1, step))})
                sys.exit("saved 7 MB on a 2 MB disk")
            except WriteFailed:
                pass
gc.collect()
time.sleep(0.5)
gc.collect()
print("failed as expected")
"""


def _fail_quietly(tmp_path, *disk) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_FAILING), str(tmp_path), *map(str, disk)],
        capture_output=True, text=True, timeout=HANG_SECONDS,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "failed as expected\n", done.stderr[-3000:]
    # nothing on stderr (XLA's own log lines of cache loads, on jax 0.9, are not orbax's)
    assert [x for x in done.stderr.splitlines() if not re.match(r"[EWIF]\d{4} ", x)] == [], (
        done.stderr[-3000:]
    )


def test_restores_of_a_damaged_checkpoint_leave_nothing_that_prints(tmp_path) -> None:
    _fail_quietly(tmp_path)


def test_saves_on_a_full_disk_leave_nothing_that_prints(tmp_path) -> None:
    with small_disk() as disk:
        _fail_quietly(tmp_path, disk)

"""A run folder: the lock, the settings (``run.json``), the metrics history
(``metrics.npz``) and the trainer's checkpoints (``<iteration>/``, orbax).

`RunFolder` is what `jaxsample.runs.train` and `jaxsample.runs.load` read and
write; it takes the folder's lock (`jaxsample.runs.lock.FolderLock`) before
anything else. Every file is written beside and renamed into place; a
checkpoint step appears only once orbax has finalized it. Errors are one line
(`FolderMismatch` for another run's or a damaged folder, `WriteFailed` for a
full disk), with orbax's own log output kept off the terminal; the
process's exception hooks are left as they are.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import shutil
from collections.abc import Iterator
from typing import Any

import numpy as np

from jaxsample.runs.errors import FolderMismatch, RunError, WriteFailed
from jaxsample.runs.files import cause, replace_file, write_json
from jaxsample.runs.lock import FolderLock

__all__ = ["RECORD_KEYS", "RunFolder", "differences", "quiet_orbax"]

#: The keys of ``run.json``: what fixes a run's results.
RECORD_KEYS = ("algo", "config", "seed", "seeds", "sweep")
#: Checkpoints kept (the newest): the last one, and one before it in case the
#: last is damaged.
KEEP = 2


@contextlib.contextmanager
def quiet_orbax() -> Iterator[None]:
    """No orbax log lines during the block (on a full disk it logs ~1,000):
    the run says what is wrong in one line. The exception hooks stay the
    user's: orbax's abandoned operations after a failed step, whose
    ``Event loop is closed`` tracebacks went there, are cancelled by
    `jaxsample.checkpoint` before the step raises."""
    loggers = [logging.getLogger(n) for n in ("absl", "orbax", "asyncio")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def differences(
    saved: dict[str, Any], record: dict[str, Any], defaults: dict[str, Any] | None = None
) -> list[str]:
    """Every setting that differs: ``name: saved X, now Y`` (config fields one
    by one; the `RECORD_KEYS` only: the others, such as the preset's name,
    say where the settings came from, not what they are). A config field
    the saved record lacks (a folder written before the field existed) is the
    same when it is now at its default (``defaults``: the config's)."""
    out = []
    missing = object()
    for key in RECORD_KEYS:
        value = record.get(key)
        have = saved.get(key)
        if key == "config" and isinstance(have, dict) and isinstance(value, dict):
            for name in value.keys() | have.keys():
                old = have.get(name, (defaults or {}).get(name, missing))
                if old is missing or old != value.get(name):
                    was = repr(have[name]) if name in have else "not recorded"
                    out.append(f"{name}: saved {was}, now {value.get(name)!r}")
        elif have != value:
            out.append(f"{key}: saved {have!r}, now {value!r}")
    return sorted(out)


class RunFolder:
    """The folder of one training run.

    Args:
      path: the folder (created by `open` when missing).
      what: how messages name it (default ``run folder '<path>'``; the
        command line says ``--checkpoint-dir '<path>'``).
    """

    def __init__(self, path: str | os.PathLike[str], what: str | None = None) -> None:
        self.path = os.fspath(path)
        self.what = what or f"run folder {self.path!r}"
        self.lock = FolderLock(self.path, self.what)

    # -- the lock ----------------------------------------------------------------

    def open(self) -> RunFolder:
        """Take the folder's lock (before anything in it is read or written).

        Raises:
          FolderBusy: another live run holds it.
          FolderMismatch: ``path`` is a file.
        """
        if os.path.isfile(self.path):
            raise FolderMismatch(f"{self.what} is a file, not a folder")
        self.lock.acquire()
        return self

    def close(self) -> None:
        """Give the lock back."""
        self.lock.release()

    def __enter__(self) -> RunFolder:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------

    def latest_step(self) -> int | None:
        """The newest finalized checkpoint (its iteration count), or None."""
        try:
            if not os.path.isdir(self.path) or not any(n.isdigit() for n in os.listdir(self.path)):
                return None  # no step's folder (named by its number): orbax not imported
            from jaxsample import checkpoint

            with quiet_orbax():
                return checkpoint.latest_step(self.path)
        except Exception as e:  # an unreadable folder
            raise FolderMismatch(
                f"{self.what}: its checkpoints cannot be listed ({cause(e)})"
            ) from None

    def read(self) -> tuple[dict[str, Any] | None, int | None]:
        """``(run.json's record or None, latest checkpoint step or None)``.

        Raises:
          FolderMismatch: ``run.json`` is damaged or not a run's record.
        """
        step = self.latest_step()
        path = os.path.join(self.path, "run.json")
        if not os.path.isfile(path):
            return None, step
        import json

        try:
            with open(path) as f:
                record = json.load(f)
        except (OSError, ValueError) as e:
            raise FolderMismatch(
                f"{self.what}: run.json is damaged ({cause(e)}); repair it or give another folder"
            ) from None
        if not isinstance(record, dict) or not all(k in record for k in RECORD_KEYS):
            raise FolderMismatch(
                f"{self.what}: run.json is not the record of a jaxsample run (needs "
                f"{', '.join(RECORD_KEYS)}); repair it or give another folder"
            )
        return record, step

    def restore(self, like: Any, step: int) -> tuple[Any, dict[str, np.ndarray]]:
        """``(state, metrics history [R, step])`` of checkpoint ``step``.

        Raises:
          FolderMismatch: the checkpoint or ``metrics.npz`` is damaged.
        """
        from jaxsample import checkpoint

        try:
            with quiet_orbax():
                state = checkpoint.restore(self.path, like, step=step)
        except Exception as e:  # orbax's errors are long tracebacks
            raise FolderMismatch(
                f"{self.what}: the checkpoint of iteration {step} cannot be read ({cause(e)}); "
                "repair or remove that step folder, or give another folder"
            ) from None
        path = os.path.join(self.path, "metrics.npz")
        try:
            with np.load(path) as saved_metrics:
                history = {k: saved_metrics[k][:, :step] for k in saved_metrics.files}
            if any(v.shape[1] != step for v in history.values()):
                raise ValueError(f"it holds fewer than {step} iterations")
        except Exception as e:
            raise FolderMismatch(
                f"{self.what}: metrics.npz is damaged or missing ({cause(e)}); give another folder"
            ) from None
        return state, history

    # -- writing (with the lock held) --------------------------------------------

    def start_or_resume(
        self, record: dict[str, Any], like: Any, defaults: dict[str, Any] | None = None
    ) -> Any:
        """Check ``record`` against the folder's and return what to resume:
        ``(state, history)`` of the latest checkpoint, or None (a new run: then
        ``run.json`` is written). ``like`` is a function returning the state's
        abstract shape (called only to restore); ``defaults``: the config
        fields' defaults (a field the folder's record lacks is its default).

        Raises:
          FolderMismatch: the folder holds a run with other settings (whether
            or not it has saved a step yet), or is damaged; nothing changed.
        """
        self._check_held()
        saved, step = self.read()
        if step is not None and saved is None:
            raise FolderMismatch(
                f"{self.what} holds checkpoints without the run.json of a jaxsample run: "
                "give another folder"
            )
        if saved is not None:
            diff = differences(saved, record, defaults)
            if diff:
                raise FolderMismatch(
                    f"{self.what} holds a run with other settings: {'; '.join(diff)} "
                    "(give the same arguments to resume, or another folder)"
                )
        if step is None:
            if saved is None:
                write_json(os.path.join(self.path, "run.json"), record)
            return None
        return self.restore(like(), step)

    def save(self, state: Any, done: int, metrics: dict[str, np.ndarray]) -> None:
        """Save the metrics history, then ``state`` as checkpoint ``done``.

        Raises:
          WriteFailed: a full disk or another `OSError` (earlier checkpoints
            are kept; a half-written step is removed).
        """
        from jaxsample import checkpoint

        self._check_held()
        # written first: it may run ahead of the state, never behind it
        replace_file(os.path.join(self.path, "metrics.npz"), lambda tmp: np.savez(tmp, **metrics))
        try:
            with quiet_orbax():
                checkpoint.save(self.path, state, step=done, keep=KEEP)
        except Exception as e:
            for partial in glob.glob(os.path.join(self.path, f"{done}.orbax-checkpoint-tmp*")):
                shutil.rmtree(partial, ignore_errors=True)
            reason = _os_reason(e)
            if reason is None:  # not the file system's: a defect, with its traceback
                raise
            raise WriteFailed(
                f"{self.what}: cannot save the checkpoint of iteration {done} ({reason})"
            ) from None

    def _check_held(self) -> None:
        if not self.lock.held:
            raise RunError(f"{self.what}: open() the folder (take its lock) before writing")


def _os_reason(error: BaseException) -> str | None:
    """The operating system's reason (``No space left on device``) anywhere
    in an exception chain (orbax wraps an ``OSError``, or tensorstore's
    ``os_error_code``, in several layers), else None."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        code = re.search(r"os_error_code='?(\d+)", str(seen))
        if code:
            return os.strerror(int(code.group(1)))
        inner = seen.__cause__ or seen.__context__
        seen = None if inner is seen else inner
    return None

"""One writer per run folder: an advisory lock held for the whole run.

The lock is `fcntl.flock` on the folder itself (on file systems that cannot
lock a directory, on a ``.lock`` file in it), taken before anything else in
the folder is read or written. The kernel releases it when its holder exits,
however it exits (a crash, ``SIGKILL``, a lost Colab runtime), so a lock is
never left behind by a process that is gone. Beside it ``.lock.json`` says who
holds it (host, pid, since when); it is removed on a clean release, so finding
it while taking a free lock means its holder died: the new run takes over and
says so.

Network file systems: on Linux, NFS clients implement `flock` with the
server's byte-range locks (NFSv4, or NFSv3 with its lock daemon), so two
machines on one NFS folder exclude each other. FUSE mounts (Google Drive in
Colab, sshfs, many cloud buckets) may keep locks local to one machine: there
one writer is guaranteed between processes of one machine only.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import socket
import time

from jaxsample.runs.errors import FolderBusy, WriteFailed
from jaxsample.runs.files import cause, write_json

__all__ = ["FolderLock"]


def _describe(holder: dict | None) -> str:
    if not holder:
        return "a process that has not yet said who it is"
    return f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}"


def _lock(fd: int, folder: str) -> int:
    """Lock the folder's descriptor ``fd`` (exclusive, not waiting) and return
    the locked descriptor. Where a directory cannot be locked (NFS implements
    ``flock`` with byte-range locks, which need a file open for writing), lock
    ``<folder>/.lock`` instead.

    Raises:
      BlockingIOError: another process holds the lock (``fd`` is closed).
      WriteFailed: neither can be locked.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError:
        os.close(fd)
    try:
        fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise WriteFailed(f"cannot create the lock file of {folder!r} ({cause(e)})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError as e:
        os.close(fd)
        raise WriteFailed(f"cannot lock {folder!r} ({cause(e)})") from None
    return fd


class FolderLock:
    """The lock of the run folder ``folder`` (created if missing).

    Use `acquire` and `release`, or ``with FolderLock(folder):``.

    Args:
      folder: the run folder.
      what: how error messages name the folder (e.g. ``--checkpoint-dir 'ck'``).
    """

    def __init__(self, folder: str | os.PathLike[str], what: str | None = None) -> None:
        self.folder = os.fspath(folder)
        self.what = what or f"run folder {self.folder!r}"
        self._fd: int | None = None
        #: after `acquire`: one line when a dead holder's lock was taken over
        self.took_over: str | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def _holder_path(self) -> str:
        return os.path.join(self.folder, ".lock.json")

    def _read_holder(self) -> dict | None:
        with contextlib.suppress(OSError, ValueError):
            with open(self._holder_path()) as f:
                data = json.load(f)
            return data if isinstance(data, dict) else None
        return None

    def acquire(self) -> FolderLock:
        """Take the lock, or raise.

        Raises:
          FolderBusy: a live process holds it (nothing in the folder changed).
          WriteFailed: the folder or its lock file cannot be created.
        """
        if self._fd is not None:
            return self
        try:
            os.makedirs(self.folder, exist_ok=True)
            fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise WriteFailed(f"{self.what}: cannot create or open it ({cause(e)})") from None
        try:
            fd = _lock(fd, self.folder)
        except BlockingIOError:
            holder = None
            for _ in range(20):  # the holder writes who it is right after locking
                holder = self._read_holder()
                if holder:
                    break
                time.sleep(0.05)
            raise FolderBusy(
                f"{self.what} is in use by another run ({_describe(holder)}): one run "
                "writes a folder at a time; wait for it to end or give another folder"
            ) from None
        self._fd = fd
        stale = self._read_holder()
        self.took_over = None
        if stale:
            self.took_over = (
                f"{self.what}: took over the lock of a run that is gone ({_describe(stale)})"
            )
        me = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        }
        try:
            write_json(self._holder_path(), me)
        except WriteFailed:
            self.release()
            raise
        return self

    def release(self) -> None:
        """Give the lock back (and remove ``.lock.json``); safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self._holder_path())
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            os.close(fd)

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

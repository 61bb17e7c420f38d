"""What can go wrong around a run, as one-line errors with an exit status.

Every error a run raises about its folder or its outputs is a `RunError`: its
message is one line naming the path and the cause, and `exit_status` is what
`jaxsample train` exits with (the Errors table of the README lists them).
"""

from __future__ import annotations

__all__ = ["FolderBusy", "FolderMismatch", "RunError", "RunNotFound", "WriteFailed"]


class RunError(Exception):
    """A run cannot go on: one line naming the path and the cause.

    Attributes:
      exit_status: the command line's exit status for it.
    """

    exit_status = 2


class FolderBusy(RunError):
    """Another live process holds the run folder's lock (exit status 2)."""


class FolderMismatch(RunError):
    """The folder holds a run with other settings, or is damaged (exit status 2)."""


class RunNotFound(RunError):
    """There is no run to load at the path: it does not exist, is a file, or
    is a folder without a run's ``run.json`` and checkpoint (exit status 2)."""


class WriteFailed(RunError):
    """A file of the run could not be written: a full disk, a read-only file
    system, a missing permission (exit status 74, ``EX_IOERR``). What was
    there before is left as it was."""

    exit_status = 74

"""What every ``jaxsample`` subcommand shares: the usage error (one line, exit
status 2; defined in [`jaxsample.errors`][jaxsample.errors], below the benchmarks
that raise it too) and the early check of an output path."""

from __future__ import annotations

import os
from typing import Any, TextIO

from jaxsample.errors import UsageError

__all__ = ["UsageError", "check_output", "flush", "start_compiling"]


def check_output(path: str | None, flag: str) -> None:
    """Fail now, not after the run, if ``path`` cannot be written."""
    if not path:
        return
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a directory, not a file")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"{flag} {path!r}: folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{flag} {path!r}: folder {folder!r} is not writable")


def start_compiling(args: Any) -> None:
    """Set up JAX's compile cache as the command line asked (the parser's
    ``compile_setup``): a command calls it once its arguments are checked, so
    that a bad argument is answered before JAX is imported. Runs once; a
    namespace without it (a command called from Python) is left alone."""
    setup = getattr(args, "compile_setup", None)
    if setup is not None:
        args.compile_setup = None
        setup()


def flush(*streams: TextIO | None) -> None:
    """Flush each of ``streams`` that is there and still open (a closed or
    broken pipe is left as it is)."""
    for stream in streams:
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass

"""Files written beside and renamed into place.

A run never opens one of its outputs for writing: it writes a temporary file
in the same folder and renames it over the target (`os.replace`, atomic on
POSIX file systems), so a crash, a signal or a full disk leaves either the old
file or the new one, never a truncated mix. An `OSError` becomes a
`WriteFailed` naming the path and the cause, and the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from typing import Any

from jaxsample.runs.errors import WriteFailed

__all__ = ["cause", "replace_file", "write_json", "write_text"]


def cause(error: BaseException) -> str:
    """One line of an exception: its OS reason, else its first message line."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    return f"{type(error).__name__}: {first[:160]}" if first else type(error).__name__


def _temporary(path: str) -> str:
    """A name beside ``path`` that keeps its extension (numpy and matplotlib
    choose the format from it)."""
    folder, name = os.path.split(os.path.abspath(path))
    stem, ext = os.path.splitext(name)
    return os.path.join(folder, f".{stem}.{os.getpid()}.tmp{ext}")


def replace_file(path: str | os.PathLike[str], write: Callable[[str], None]) -> None:
    """Call ``write(tmp)`` to write a temporary file beside ``path``, flush it
    to disk and rename it onto ``path``.

    Raises:
      WriteFailed: ``write`` or the rename failed with an `OSError` (the
        temporary file is removed; ``path`` is as it was).
    """
    path = os.fspath(path)
    tmp = _temporary(path)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise WriteFailed(f"cannot write {path}: {cause(e)}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8) beside and rename it into place."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)

    replace_file(path, write)


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as indented JSON, beside and renamed into place."""
    write_text(path, json.dumps(data, indent=2) + "\n")

"""jaxlib 0.9's notes on each program it loads from JAX's compile cache, kept
off the ``jaxsample`` command's standard error; every other line passes.

jaxlib before 0.11 (0.9.2 is the newest that Python 3.11 gets) writes, for
every program it loads from the persistent compilation cache, a warning
(``pjrt_executable.cc ... Assume version compatibility. PjRt-IFRT does not
track XLA executable versions.``) and two errors (``cpu_aot_loader.cc ...
Target machine feature +prefer-no-gather is not supported on the host
machine ... This could lead to execution errors such as SIGILL.``, and the
same for ``+prefer-no-scatter``), for programs compiled on this very machine,
with this process's own options. The cause is jaxlib's: its loader asks that
every LLVM feature the program was compiled with be one of the host CPU's
ISA features, and ``+prefer-no-gather``/``+prefer-no-scatter`` are LLVM's
tuning preferences for the CPU model, never reported as ISA features, so the
check fails wherever LLVM's model sets them (reported upstream as
openxla/xla#44565; jaxlib 0.11 prints none of it). The program loads and runs
as compiled. Nothing in the cache key or the compile options changes it:
the preferences come from the CPU model, not from an option JAX passes.

`filter_known_lines` (the command's process, before jaxlib is imported, and
jaxlib < 0.11 only; `jaxsample.cli.main` called where JAX runs already
filters nothing) points
file descriptor 2 at a pipe; a process forked for it copies every line to the
original standard error except `KNOWN` lines (a line still being written is
passed on at once unless it may begin one of them) and outlives a crash of
ours. `Filter.stop` (at exit, and before an early exit on a signal) puts
descriptor 2 back and waits for the copier to finish.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import sys
import time

from jaxsample.cli.base import flush

__all__ = ["KNOWN", "Filter", "filter_known_lines", "needs_filter"]

#: The lines dropped: absl's prefix (severity, date, time, thread id), then
#: jaxlib 0.9's two notes on a cache load, and nothing else.
KNOWN = re.compile(
    rb"^[EW]\d{4} [\d:.]+ +\d+ (?:"
    rb"cpu_aot_loader\.cc:\d+\] Loading XLA:CPU AOT result\. Target machine feature "
    rb"\+prefer-no-(?:gather|scatter) is not +supported on the host machine"
    rb"|pjrt_executable\.cc:\d+\] Assume version compatibility\. "
    rb"PjRt-IFRT does not track XLA executable versions\.$)"
)

#: What may begin a `KNOWN` line: held back until its line is complete.
_MAY_BE_KNOWN = re.compile(
    rb"^(?:[EW](?:\d{0,4}(?: [\d:.]*(?: +\d*)?)?)?)$|^[EW]\d{4} [\d:.]+ +\d+ "
)


def needs_filter() -> bool:
    """Whether the installed jaxlib writes the `KNOWN` lines (before 0.11).
    Its version from the name of its ``.dist-info`` folder (no
    ``importlib.metadata``: the command's start pays for every import)."""
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        return False
    site = os.path.dirname(next(iter(spec.submodule_search_locations)))
    found = [n for n in os.listdir(site) if re.match(r"jaxlib-[\d.]+.*\.dist-info$", n)]
    if len(found) != 1:  # not a plain install: ask the metadata
        from importlib import metadata

        try:
            found = [f"jaxlib-{metadata.version('jaxlib')}"]
        except metadata.PackageNotFoundError:
            return False
    major, minor = (int(part) for part in re.findall(r"\d+", found[0])[:2])
    return (major, minor) < (0, 11)


class Filter:
    """Copies what is written to descriptor ``fd`` (2) to where it pointed
    before, less the `KNOWN` lines, from a process of its own: one forked
    now, before any thread or lock of ours, that reads to the end of the pipe
    and exits, so that what a crashing process wrote last (an XLA fatal
    error before its abort) still comes out. `stop` undoes it (idempotent)."""

    def __init__(self, fd: int = 2) -> None:
        self._fd = fd
        target = os.dup(fd)
        read, write = os.pipe()
        self._pid = os.fork()
        if self._pid == 0:  # the copier: it never returns
            _copier(read, target, keep_open=(read, target))
        os.close(read)
        os.dup2(write, fd)
        os.close(write)
        self._target = target

    def stop(self, timeout: float = 5.0) -> None:
        """Point ``fd`` back at the original stream; wait (up to ``timeout``
        seconds, longer only if a child process holds the pipe) for the
        copier to pass on what is left."""
        if self._target < 0:
            return
        flush(sys.stderr, sys.__stderr__)
        os.dup2(self._target, self._fd)  # our end of the pipe: closed
        os.close(self._target)
        self._target = -1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if os.waitpid(self._pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:
                return
            time.sleep(0.002)


def _copier(read: int, target: int, keep_open: tuple[int, ...]) -> None:
    """The forked copier's life: every other descriptor closed (a reader of
    our standard output must not wait for it), signals from the terminal
    ignored (it ends when the pipe does), lines copied, then ``os._exit``."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        low = 0
        for fd in sorted(keep_open):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 65536)
        lines = _Lines()
        while chunk := os.read(read, 65536):
            _write(target, lines.pass_on(chunk))
        _write(target, lines.held)
    finally:
        os._exit(0)


class _Lines:
    """What of each chunk to pass on; a line that may be a `KNOWN` one is
    held until its newline, any other passed on as it comes."""

    def __init__(self) -> None:
        self.held = b""  # the start of a line that may be a known one
        self._passing = False  # within a line already passed on

    def pass_on(self, chunk: bytes) -> bytes:
        out = []
        for piece in re.split(rb"(?<=\n)", chunk):
            if not piece:
                continue
            if self._passing:
                out.append(piece)
            else:
                line = self.held + piece
                self.held = b""
                if not line.endswith(b"\n"):
                    if _MAY_BE_KNOWN.match(line):
                        self.held = line
                    else:
                        out.append(line)
                        self._passing = True
                    continue
                if not KNOWN.match(line):
                    out.append(line)
            self._passing = self._passing and not piece.endswith(b"\n")
        return b"".join(out)


def _write(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data) :]
        except OSError:
            return


def filter_known_lines() -> Filter | None:
    """A started `Filter` on standard error where jaxlib writes the `KNOWN`
    lines (jaxlib < 0.11) and is not imported yet (a process that runs JAX
    must not fork: the command's own process starts it first), else None."""
    return Filter() if "jaxlib" not in sys.modules and needs_filter() else None

"""Stop a run on ``SIGINT`` (Ctrl-C, a notebook's interrupt) or ``SIGTERM``
(what SLURM, Kubernetes and Colab send before they kill).

`StopSignals` turns the first of these signals into a stop request that the
training loop reads at its next check: the run ends after the iterations it
has completed, and keeps them (outputs, checkpoint). A second signal of the
same kind takes its default action (the process ends at once).

With ``exit_early=True`` (the command line) a signal that arrives before the
run has `started` ends the process within milliseconds: one line on stderr
and exit status ``128 + signal`` (130 for ``SIGINT``, 143 for ``SIGTERM``),
no traceback — there is nothing to keep yet, and a compile of several seconds
would otherwise delay it. That path reads the signal on a thread of its own
(`signal.set_wakeup_fd`), since the main thread runs no Python while it waits
in a compile. A library caller (a notebook) keeps the default
``exit_early=False``: there a stop never ends the process.

This module imports nothing heavy: the command line installs it first thing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["StopSignals"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """Turns ``SIGINT`` / ``SIGTERM`` into a stop request while installed.

    Args:
      exit_early: before `started`, a signal ends the process at once (one
        line on stderr, exit status ``128 + signal``), after running
        `on_exit` callbacks.
      prefix: the start of that line (e.g. ``"jaxsample train"``).

    Outside the main thread no handler can be installed: `install` then does
    nothing and `stop_requested` stays False.
    """

    def __init__(self, *, exit_early: bool = False, prefix: str = "jaxsample") -> None:
        self.exit_early = exit_early
        self.prefix = prefix
        #: what the early-exit line adds after the signal's name
        self.early_note = ""
        self.signum: int | None = None
        self._event = threading.Event()
        self._started = threading.Event()
        self._previous: dict[int, Any] = {}
        self._wakeup: tuple[int, int] | None = None
        self._old_wakeup = -1
        self._on_exit: list[Callable[[], None]] = []
        self._installed = False
        self._exiting = threading.Lock()

    # -- state ---------------------------------------------------------------

    def stop_requested(self) -> bool:
        """Whether a stop was asked for (the run's ``stop`` callable)."""
        return self._event.is_set()

    @property
    def name(self) -> str | None:
        """The signal's name (``"SIGTERM"``), or None before one arrived."""
        return None if self.signum is None else signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        """``128 + signal``: what a shell reports for a process ended by it."""
        return 128 + (self.signum or signal.SIGINT)

    def started(self) -> None:
        """The run has work to keep: from now on a signal stops, not exits."""
        self._started.set()

    def on_exit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` before an early exit (e.g. release a folder lock)."""
        self._on_exit.append(callback)

    def request(self, signum: int) -> None:
        """Record a stop request, as the signal ``signum`` does."""
        if self.signum is None:
            self.signum = signum
        self._event.set()

    # -- installation ----------------------------------------------------------

    def install(self) -> StopSignals:
        """Install the handlers (main thread only; else do nothing)."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return self
        for s in _SIGNALS:
            self._previous[s] = signal.signal(s, self._handler)
        self._installed = True
        if self.exit_early:
            r, w = os.pipe()
            os.set_blocking(w, False)
            self._wakeup = (r, w)
            self._old_wakeup = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            threading.Thread(target=self._watch, args=(r,), name="jaxsample-signals",
                             daemon=True).start()  # fmt: skip
        return self

    def uninstall(self) -> None:
        """Restore the handlers that were there before."""
        if not self._installed:
            return
        for s, previous in self._previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(s, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
        if self._wakeup is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            os.close(self._wakeup[1])  # the watcher's read ends: it returns
            self._wakeup = None
        self._installed = False

    def __enter__(self) -> StopSignals:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # -- handling --------------------------------------------------------------

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self._early_exit(signum)
        self.request(signum)
        # A second signal of this kind acts as without us: on the command line
        # the default action (the process ends at once); in a notebook the
        # handler that was there (a second interrupt raises KeyboardInterrupt).
        second = signal.SIG_DFL if self.exit_early else self._previous.get(signum)
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(signum, second if second is not None else signal.SIG_DFL)

    def _watch(self, fd: int) -> None:
        """The early-exit path, on its own thread: the main thread may be
        inside a compile and run no Python handler for seconds."""
        with contextlib.closing(os.fdopen(fd, "rb", buffering=0)) as pipe:
            while True:
                try:
                    data = pipe.read(64)
                except OSError:
                    return
                if not data:
                    return
                for signum in data:
                    if signum in _SIGNALS:
                        self._early_exit(signum)

    def _early_exit(self, signum: int) -> None:
        if not self.exit_early or self._started.is_set():
            return
        if not self._exiting.acquire(blocking=False):  # the other path is exiting
            threading.Event().wait()
        for callback in self._on_exit:
            with contextlib.suppress(Exception):
                callback()
        name = signal.Signals(signum).name
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            os.write(2, f"{self.prefix}: stopped by {name}{self.early_note}\n".encode())
        os._exit(128 + signum)

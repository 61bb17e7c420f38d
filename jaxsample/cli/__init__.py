"""Command line: ``jaxsample train``, ``eval``, ``collect``, ``bench`` and ``envs``.

``jaxsample train`` trains PPO or DQN end to end (every config field a flag,
logs, checkpoints, a live display); ``jaxsample eval`` evaluates a train
checkpoint; ``jaxsample collect`` compiles a sampler and reports its speed;
``jaxsample bench`` measures a grid of environments and sizes;
``jaxsample envs`` lists the env names (gymnax and the installed suites).

Modules: `parser` (the parser and `main`),
`commands` (``envs``, ``collect``, ``bench``),
`train` (``train``, ``eval``, resume),
`config` (config fields as flags, TOML/YAML files, sweeps),
`log` (CSV, TensorBoard, W&B),
`display` (the live display),
`base` (usage errors),
`lazy_imports` (imports training never uses, deferred in the command's process) and
`xla_log` (jaxlib 0.9's notes on each cached program it loads, kept off standard error).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

__all__ = ["command", "main"]


def command() -> NoReturn:
    """The ``jaxsample`` command's process (its console script and ``python
    -m jaxsample``): `main`, then the process ends as soon as its work is
    kept: the standard streams flushed, its threads joined and its ``atexit``
    handlers run (logging, W&B, JAX's own), as the interpreter would, but
    without tearing down every module first, which took a quarter of a
    second after a run (docs/benchmarks.md). Called from Python, `main`
    returns instead."""
    try:
        status = main()
    except SystemExit as e:  # argparse's errors, `UsageError`s, a run's exit status
        status = e.code
    except BrokenPipeError:  # its reader went away (`jaxsample envs | head -1`): quietly
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 1
    if status is not None and not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    _exit(status or 0)


def _exit(status: int) -> NoReturn:
    """``os._exit(status)`` after what the interpreter's own exit does that
    anyone could need: flushed streams, non-daemon threads joined (and
    ``concurrent.futures``' workers), ``atexit`` handlers."""
    import atexit
    import os
    import threading

    from jaxsample.cli.base import flush

    flush(sys.stdout, sys.stderr)
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None:  # not CPython's threading: the interpreter's own exit
        sys.exit(status)
    shutdown()
    atexit._run_exitfuncs()
    flush(sys.stdout, sys.stderr)
    os._exit(status)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jaxsample`` command: starts
    `jaxsample.cli.xla_log`'s filter where jaxlib needs it, installs the
    signal handlers (a Ctrl-C or ``SIGTERM`` while JAX imports or compiles
    ends the process quietly, 130 / 143), defers what training imports and never uses
    to its first use (`jaxsample.cli.lazy_imports`), then parses and runs
    (`jaxsample.cli.parser.main`)."""
    import os

    # JAX's own default (its INFO lines off), set before XLA starts; a user's
    # setting wins. Warnings and errors show, but for jaxlib 0.9's notes on
    # each cached program it loads (`jaxsample.cli.xla_log`: a process forked
    # before any thread starts).
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from jaxsample.cli.xla_log import filter_known_lines

    log_filter = filter_known_lines()
    from jaxsample.runs.signals import StopSignals

    signals = StopSignals(exit_early=True, prefix="jaxsample").install()
    if log_filter is not None:
        signals.on_exit(log_filter.stop)
    from jaxsample.cli.lazy_imports import defer_imports

    undo_deferral = defer_imports()  # what training imports and never uses, until used
    _matplotlib_cache()
    from jaxsample.cli.parser import main as run

    try:
        return run(argv, signals)
    finally:
        undo_deferral()
        signals.uninstall()
        if log_filter is not None:
            log_filter.stop()


def _matplotlib_cache() -> None:
    """Where the user's cache folder cannot be written (``XDG_CACHE_HOME``
    naming a file, a read-only mount), give matplotlib (gymnax imports it) a
    temporary one of its own: else it adds lines of its own to the one
    warning the command prints about its compile cache."""
    import os
    import tempfile

    if os.environ.get("MPLCONFIGDIR"):
        return
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    folder = os.path.join(base, "matplotlib")
    target = folder if os.path.exists(folder) else base
    if os.path.isdir(target) and os.access(target, os.W_OK) and _writable(target):
        return
    os.environ["MPLCONFIGDIR"] = tempfile.mkdtemp(prefix="jaxsample-matplotlib-")


def _writable(folder: str) -> bool:
    """Whether a file can be created in ``folder`` (root ignores the mode
    bits; a read-only mount refuses everyone)."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".writable-"):
            return True
    except OSError:
        return False

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
`base` (usage errors) and
`lazy_imports` (imports training never uses, deferred in the command's process).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jaxsample`` command: installs the signal handlers
    first (a Ctrl-C or ``SIGTERM`` while JAX imports or compiles ends the
    process quietly, 130 / 143), defers what training imports and never uses
    to its first use (`jaxsample.cli.lazy_imports`), then parses and runs
    (`jaxsample.cli.parser.main`)."""
    from jaxsample.runs.signals import StopSignals

    signals = StopSignals(exit_early=True, prefix="jaxsample").install()
    from jaxsample.cli.lazy_imports import defer_imports

    undo_deferral = defer_imports()  # what training imports and never uses, until used
    import os

    # XLA's C++ log lines (e.g. jaxlib 0.9's AOT-loader notes on a cache load)
    # are not the command's output; the user's own setting wins.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    _matplotlib_cache()
    from jaxsample.cli.parser import main as run

    try:
        return run(argv, signals)
    finally:
        undo_deferral()
        signals.uninstall()


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

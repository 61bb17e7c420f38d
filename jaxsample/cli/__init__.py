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
`display` (the live display) and
`base` (usage errors).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jaxsample`` command: installs the signal handlers
    first (a Ctrl-C or ``SIGTERM`` while JAX imports or compiles ends the
    process quietly, 130 / 143), then parses and runs
    (`jaxsample.cli.parser.main`)."""
    import os

    from jaxsample.runs.signals import StopSignals

    # XLA's C++ log lines (e.g. jaxlib 0.9's AOT-loader notes on a cache load)
    # are not the command's output; the user's own setting wins.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    signals = StopSignals(exit_early=True, prefix="jaxsample").install()
    from jaxsample.cli.parser import main as run

    try:
        return run(argv, signals)
    finally:
        signals.uninstall()

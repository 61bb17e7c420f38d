"""Command line: ``jaxsample train``, ``eval``, ``collect``, ``bench`` and ``envs``.

``jaxsample train`` trains PPO or DQN end to end (every config field a flag,
logs, checkpoints, a live display); ``jaxsample eval`` evaluates a train
checkpoint; ``jaxsample collect`` compiles a sampler and reports its speed;
``jaxsample bench`` measures a grid of environments and sizes;
``jaxsample envs`` lists the env names (gymnax and the installed suites).

Modules: :mod:`~jaxsample.cli.parser` (the parser and :func:`main`),
:mod:`~jaxsample.cli.commands` (``envs``, ``collect``, ``bench``),
:mod:`~jaxsample.cli.train` (``train``, ``eval``, resume),
:mod:`~jaxsample.cli.config` (config fields as flags, TOML/YAML files, sweeps),
:mod:`~jaxsample.cli.log` (CSV, TensorBoard, W&B),
:mod:`~jaxsample.cli.display` (the live display) and
:mod:`~jaxsample.cli.base` (usage errors).
"""

from jaxsample.cli.parser import main

__all__ = ["main"]

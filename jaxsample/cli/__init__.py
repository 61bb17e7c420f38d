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

from jaxsample.cli.parser import main

__all__ = ["main"]

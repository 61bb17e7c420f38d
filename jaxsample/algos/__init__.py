"""End-to-end jitted training built on the sampler (import explicitly:
``from jaxsample.algos import ppo``).

* [`ppo`][jaxsample.algos.ppo], [`dqn`][jaxsample.algos.dqn],
  [`pqn`][jaxsample.algos.pqn]: the reference trainers (frozen objects of
  pure functions);
* [`configs`][jaxsample.algos.configs]: their static configurations;
* [`registry`][jaxsample.algos.registry]: the algorithms by name (``--algo``),
  each with its config, trainer and the facts its callers need;
* [`returns`][jaxsample.algos.returns]: value targets that bootstrap through
  truncation (``gae``, ``final_values``, ``td_target``);
* [`trainer`][jaxsample.algos.trainer]: the Trainer protocol, all that runs,
  checkpoints and benchmarks know of an algorithm;
* [`common`][jaxsample.algos.common]: the trainers' small shared helpers;
* [`games`][jaxsample.algos.games]: a game's evaluation hook (the greedy policy
  against a random opponent);
* [`drivers`][jaxsample.algos.drivers]: their actor/learner adapters for
  [`jaxsample.driver`][jaxsample.driver];
* [`runner`][jaxsample.algos.runner]: runs a trainer as one program or in
  compiled chunks, with progress (``jaxsample train``);
  [`programs`][jaxsample.algos.programs] those programs and how they are
  compiled;
  [`report`][jaxsample.algos.report] its summary table, JSON and PNG;
  [`program_store`][jaxsample.algos.program_store] keeps the one program's traced parts
  between processes.
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    """The submodules load on first use (``jaxsample.algos.ppo``), so that
    [`configs`][jaxsample.algos.configs] imports without JAX (the command
    line's ``--help`` and argument errors)."""
    if name not in __all__:
        raise AttributeError(f"module 'jaxsample.algos' has no attribute {name!r}")
    module = importlib.import_module(f"jaxsample.algos.{name}")
    globals()[name] = module
    return module


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "common",
    "configs",
    "dqn",
    "drivers",
    "games",
    "ppo",
    "pqn",
    "program_store",
    "programs",
    "registry",
    "report",
    "returns",
    "runner",
    "trainer",
]

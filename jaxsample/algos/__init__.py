"""End-to-end jitted training built on the sampler (import explicitly:
``from jaxsample.algos import ppo``).

* [`ppo`][jaxsample.algos.ppo], [`dqn`][jaxsample.algos.dqn],
  [`sac`][jaxsample.algos.sac], [`td3`][jaxsample.algos.td3],
  [`pqn`][jaxsample.algos.pqn]: the reference
  trainers (frozen objects of pure functions);
  [`off_policy`][jaxsample.algos.off_policy] what SAC and TD3 share (their
  state, collection and replay-learning loop);
* [`configs`][jaxsample.algos.configs] (PPO, DQN, PQN) and
  [`off_policy_configs`][jaxsample.algos.off_policy_configs] (SAC, TD3): their
  static configurations;
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
* [`trainer`][jaxsample.algos.trainer]: the Trainer protocol, all that
  [`jaxsample.runs`][jaxsample.runs] (the run loop, checkpoints) and the
  benchmarks know of an algorithm.
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
    "off_policy",
    "off_policy_configs",
    "ppo",
    "pqn",
    "registry",
    "returns",
    "sac",
    "td3",
    "trainer",
]

"""The algorithms by name: one record each, all the command line, the runs and
the benchmarks know of an algorithm.

``jaxsample train --algo NAME``, a run folder's ``run.json`` (its ``algo``)
and the driver benchmark look an algorithm up here ([`get`][jaxsample.algos.registry.get],
or [`of_config`][jaxsample.algos.registry.of_config] from a config) instead of
testing its name; adding an algorithm is one more record in `ALGORITHMS`.

Importing this module loads no JAX (nor numpy): it holds the config classes
([`configs`][jaxsample.algos.configs]) and names each trainer's module, which
loads on first use ([`Algorithm.make_train`][jaxsample.algos.registry.Algorithm.make_train]),
so that the command line's ``--help`` and argument errors answer at once.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType, ModuleType
from typing import Any

from jaxsample.algos.configs import MASKED_CARTPOLE_RECURRENT, DQNConfig, PPOConfig
from jaxsample.algos.off_policy_configs import PQNConfig, SACConfig, TD3Config

__all__ = ["ALGORITHMS", "DEFAULT", "Algorithm", "get", "of_config"]


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One algorithm: its config, its trainer (loaded on first use) and the
    facts its callers need.

    Attributes:
      name: its ``--algo`` name (``"ppo-rnn"``), recorded in ``run.json``.
      trainer: its trainer module in ``jaxsample.algos`` (``"ppo"``), which
        has ``make_train`` and ``HParams``; also the
        ``algo`` of its presets (`jaxsample.algos.presets`).
      config_type: its config dataclass.
      fixed: config fields the name fixes (``ppo-rnn``: ``recurrent=True``):
        a config is this algorithm's when it is a ``config_type`` with these
        values (`of_config`).
      masked_config: the config ``--mask-velocity`` starts from, or None where
        the flag does not apply.
      driver: its actor/learner adapter in `jaxsample.algos.drivers`
        (``"ppo_driver"``), or None where it has none (SAC, TD3):
        `make_driver` then raises.
      batch_iterations: whether that adapter takes ``iterations_per_batch``
        (several trainer iterations per driver batch).
      updates_per_iteration: a config's gradient updates per iteration (DQN's
        once learning has started).
      greedy_eval: the trainer has ``evaluate(state, key)``, the greedy
        policy's episodes, reported beside the training returns.
      replay: the trainer learns from a replay buffer (its state counts
        ``updates``; the config has ``learning_starts`` and ``gradient_steps``).
      evaluation: a module of ``jaxsample.algos`` whose ``evaluation(config)``
        is the trainer's evaluation hook factory (``games``: PPO's match
        against a random opponent in a game), or None.
    """

    name: str
    trainer: str
    config_type: type
    updates_per_iteration: Callable[[Any], int]
    driver: str | None = None
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    masked_config: Any = None
    batch_iterations: bool = False
    greedy_eval: bool = False
    replay: bool = False
    evaluation: str | None = None

    @property
    def hparams_fields(self) -> tuple[str, ...]:
        """The fields of the trainer's ``HParams`` (those a list may sweep):
        its config's ``HPARAMS``."""
        return self.config_type.HPARAMS

    def module(self) -> ModuleType:
        """The trainer's module (imports JAX)."""
        return importlib.import_module(f"jaxsample.algos.{self.trainer}")

    def config(self, masked: bool = False, **fields: Any) -> Any:
        """Its config of ``fields`` (and the `fixed` ones); ``masked``: on top of
        `masked_config` instead of the defaults."""
        fields = {**fields, **self.fixed}
        if masked:
            if self.masked_config is None:
                raise ValueError(f"{self.name} has no masked-velocity config")
            return dataclasses.replace(self.masked_config, **fields)
        return self.config_type(**fields)

    def make_train(self, config: Any, **kwargs: Any) -> Any:
        """The trainer's ``make_train(config, **kwargs)`` (with its `evaluation`
        hook): a frozen trainer of the Trainer protocol."""
        if self.evaluation is not None and "evaluation" not in kwargs:
            hooks = importlib.import_module(f"jaxsample.algos.{self.evaluation}")
            kwargs["evaluation"] = hooks.evaluation(config)
        return self.module().make_train(config, **kwargs)

    def make_driver(self, trainer: Any, iterations_per_batch: int = 1, **kwargs: Any) -> Any:
        """Its actor/learner [`Driver`][jaxsample.driver.Driver] of ``trainer``;
        ``iterations_per_batch`` where the adapter takes it (`batch_iterations`)."""
        if self.driver is None:
            raise ValueError(f"{self.name} has no actor/learner adapter (jaxsample.algos.drivers)")
        if self.batch_iterations:
            kwargs["iterations_per_batch"] = iterations_per_batch
        drivers = importlib.import_module("jaxsample.algos.drivers")  # by name, as `module`
        return getattr(drivers, self.driver)(trainer, **kwargs)


_PPO = Algorithm(
    name="ppo",
    trainer="ppo",
    config_type=PPOConfig,
    updates_per_iteration=lambda c: c.update_epochs * c.num_minibatches,
    driver="ppo_driver",
    fixed=MappingProxyType({"recurrent": False}),
    masked_config=MASKED_CARTPOLE_RECURRENT,
    evaluation="games",
)

#: Every algorithm by name, the default first (the order of ``--algo``'s choices).
ALGORITHMS: Mapping[str, Algorithm] = MappingProxyType(
    {
        "ppo": _PPO,
        "ppo-rnn": dataclasses.replace(
            _PPO, name="ppo-rnn", fixed=MappingProxyType({"recurrent": True})
        ),
        "dqn": Algorithm(
            name="dqn",
            trainer="dqn",
            config_type=DQNConfig,
            updates_per_iteration=lambda c: c.gradient_steps,
            driver="dqn_driver",
            batch_iterations=True,
            greedy_eval=True,
            replay=True,
        ),
        "sac": Algorithm(
            name="sac",
            trainer="sac",
            config_type=SACConfig,
            updates_per_iteration=lambda c: c.gradient_steps,
            greedy_eval=True,
            replay=True,
        ),
        "td3": Algorithm(
            name="td3",
            trainer="td3",
            config_type=TD3Config,
            updates_per_iteration=lambda c: c.gradient_steps,
            greedy_eval=True,
            replay=True,
        ),
        "pqn": Algorithm(
            name="pqn",
            trainer="pqn",
            config_type=PQNConfig,
            updates_per_iteration=lambda c: c.update_epochs * c.num_minibatches,
            # DQN's adapter fits: epsilon by the batch index, each batch learned once
            driver="dqn_driver",
            batch_iterations=True,
            greedy_eval=True,
        ),
    }
)

#: The algorithm of ``jaxsample train`` without ``--algo``.
DEFAULT = "ppo"


def get(name: str) -> Algorithm:
    """The algorithm ``name``; a ``ValueError`` naming the known ones for another."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def of_config(config: Any) -> Algorithm:
    """The algorithm a config is for: the first whose ``config_type`` it is,
    with its `fixed` values; a ``TypeError`` for another object."""
    for algorithm in ALGORITHMS.values():
        if isinstance(config, algorithm.config_type) and all(
            getattr(config, k) == v for k, v in algorithm.fixed.items()
        ):
            return algorithm
    types = " or ".join(sorted({a.config_type.__name__ for a in ALGORITHMS.values()}))
    raise TypeError(f"config must be a {types}, got {type(config).__name__}")

"""jaxsample: a JAX-native vectorized sampler for reinforcement learning.

Environment, agent and buffer writes are pure functions, vmapped over ``B``
environments and scanned over ``T`` steps, so a whole batch collection compiles
under ``jax.jit`` into one XLA program. See ``README.md`` and ``docs/design.md``.

The package root holds the sampler-level layers only. The layers built on top
of them are submodules to import explicitly: [`jaxsample.algos`][jaxsample.algos] (PPO, DQN,
``from jaxsample.algos import ppo``) and [`jaxsample.driver`][jaxsample.driver] (the
actor/learner runtime).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the public names, for type checkers and readers
    from jaxsample import agents, compile_cache, distributed, envs, host, metrics, replay
    from jaxsample.compile_cache import enable_compile_cache
    from jaxsample.evaluation import EvalStats, Evaluator, make_evaluator
    from jaxsample.metrics import StepMetrics
    from jaxsample.sampler import Sampler, SamplerState, make_sampler
    from jaxsample.traj_info import TrajField, TrajStep, summarize
    from jaxsample.types import (
        AgentInputs,
        AgentSamples,
        AgentStep,
        Batch,
        BatchSpec,
        EnvSamples,
        Samples,
        SparseFinalObservation,
        TrajInfo,
    )

_MODULES = "agents compile_cache distributed envs host metrics replay runs"
_NAMES = {
    "jaxsample.compile_cache": "enable_compile_cache",
    "jaxsample.evaluation": "EvalStats Evaluator make_evaluator",
    "jaxsample.metrics": "StepMetrics",
    "jaxsample.sampler": "Sampler SamplerState make_sampler",
    "jaxsample.traj_info": "TrajField TrajStep summarize",
    "jaxsample.types": "AgentInputs AgentSamples AgentStep Batch BatchSpec EnvSamples Samples "
    "SparseFinalObservation TrajInfo",
}
#: Where each public name is defined: it is imported on first use, so that
#: ``import jaxsample`` (and the command line's ``--help``) loads no JAX.
_WHERE = {m: f"jaxsample.{m}" for m in _MODULES.split()} | {
    name: module for module, names in _NAMES.items() for name in names.split()
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'jaxsample' has no attribute {name!r}")
    module = importlib.import_module(where)
    value = module if where == f"jaxsample.{name}" else getattr(module, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__version__ = "0.1.0"

__all__ = [
    "AgentInputs",
    "AgentSamples",
    "AgentStep",
    "Batch",
    "BatchSpec",
    "EnvSamples",
    "EvalStats",
    "Evaluator",
    "Sampler",
    "SamplerState",
    "Samples",
    "SparseFinalObservation",
    "StepMetrics",
    "TrajField",
    "TrajInfo",
    "TrajStep",
    "__version__",
    "agents",
    "compile_cache",
    "distributed",
    "enable_compile_cache",
    "envs",
    "host",
    "make_evaluator",
    "make_sampler",
    "metrics",
    "replay",
    "runs",
    "summarize",
]

"""jaxsample: a JAX-native vectorized sampler for reinforcement learning.

Environment, agent and buffer writes are pure functions, vmapped over ``B``
environments and scanned over ``T`` steps, so a whole batch collection compiles
under ``jax.jit`` into one XLA program. See ``README.md`` and ``docs/design.md``.

The package root holds the sampler-level layers only. The layers built on top
of them are submodules to import explicitly: [`jaxsample.algos`][jaxsample.algos] (PPO, DQN,
``from jaxsample.algos import ppo``) and [`jaxsample.driver`][jaxsample.driver] (the
actor/learner runtime).
"""

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
    "summarize",
]

"""Small pure helpers the trainers ([`ppo`][jaxsample.algos.ppo],
[`dqn`][jaxsample.algos.dqn]) share: their env, sampler, optimizer,
hyperparameters as data, annealed learning rate and episode metrics."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxsample.envs import suites
from jaxsample.errors import ConfigError
from jaxsample.metrics import StepMetrics
from jaxsample.sampler import SamplerProtocol, make_sampler
from jaxsample.traj_info import summarize
from jaxsample.types import Batch, BatchSpec, PyTree

__all__ = [
    "RunLength", "annealed_lr", "episode_metrics", "hparams_of", "hparams_type", "make_env",
    "make_optimizer", "make_trainer_sampler", "start",
]  # fmt: skip


class RunLength:
    """A trainer's ``num_iterations`` and ``steps_per_iteration``: its config's."""

    num_iterations = property(lambda self: int(self.config.num_iterations))
    steps_per_iteration = property(lambda self: int(self.config.steps_per_iteration))


def make_env(config: Any, env: Any, env_params: Any) -> tuple[Any, Any]:
    """``(env, env_params)`` named by ``config.env_name`` (`suites.make`) when
    ``env`` is None (an unknown name: a ``ConfigError`` of ``env_name``), else
    ``env`` with ``env_params`` (default: its ``default_params``)."""
    if env is None:
        if env_params is not None:
            raise ValueError("env_params given without env")
        try:
            return suites.make(config.env_name)
        except ValueError as e:
            raise ConfigError("env_name", f"{config.env_name!r}: {e}") from None
    return env, env.default_params if env_params is None else env_params


def make_trainer_sampler(
    env: Any, env_params: Any, agent: Any, config: Any, **options: Any
) -> SamplerProtocol:
    """The ``"auto"``-reset sampler of ``[num_steps, num_envs]`` batches (its
    sparse final-observation store: exact wherever a target bootstraps)."""
    spec = BatchSpec(T=config.num_steps, B=config.num_envs)
    return make_sampler(
        env, env_params, agent, spec, max_decorrelation_steps=config.max_decorrelation_steps,
        reset_mode="auto", discount=config.gamma, **options,
    )  # fmt: skip


def make_optimizer(config: Any) -> optax.GradientTransformation:
    """``clip_by_global_norm`` (unless ``max_grad_norm`` is None), then Adam's
    scaling, on the parameters raveled into one vector (fewer kernels: a
    faster compile); a trainer steps by ``-lr`` times it (lr can be vmapped)."""
    transforms = []
    if config.max_grad_norm is not None:
        transforms.append(optax.clip_by_global_norm(config.max_grad_norm))
    transforms.append(optax.scale_by_adam(eps=config.adam_eps))
    return optax.flatten(optax.chain(*transforms))


def hparams_type(config_type: type, module: str) -> type:
    """``HParams``: a ``flax.struct`` dataclass with one float32 ``jax.Array``
    field per name of ``config_type.HPARAMS`` (the light layer's one list of
    the hyperparameters that are data), in that order."""
    fields = {name: "jax.Array" for name in config_type.HPARAMS}
    algo = config_type.__name__.removesuffix("Config")
    doc = (
        f"{algo}'s hyperparameters as data: one float32 field per name of "
        f"{config_type.__name__}.HPARAMS ({', '.join(fields)})."
    )
    namespace = {"__annotations__": fields, "__doc__": doc, "__module__": module}
    cls = type("HParams", (), {**namespace, "__qualname__": "HParams"})
    return struct.dataclass(cls)


def hparams_of(hparams_type: type, config: Any, **overrides: Any) -> Any:
    """``hparams_type`` (a struct of float32 fields) from ``config``'s fields of
    the same names, with ``overrides`` (e.g. ``lr=[...]``), broadcast to one
    common shape: one field an ``[N]`` array makes ``N`` runs to vmap over."""
    fields = [f.name for f in dataclasses.fields(hparams_type)]
    unknown = set(overrides) - set(fields)
    if unknown:
        raise ValueError(f"unknown hparams {sorted(unknown)}; the fields are {fields}")
    raw = [overrides.get(name, getattr(config, name)) for name in fields]
    # numpy, then put on the device (eager jnp would compile a program for
    # each); jnp inside a traced function
    traced = any(isinstance(v, jax.core.Tracer) for v in raw)
    xp = jnp if traced else np
    values = [xp.asarray(v, xp.float32) for v in raw]
    shape = xp.broadcast_shapes(*(v.shape for v in values))
    out = [xp.broadcast_to(v, shape) for v in values]
    return hparams_type(*(out if traced else map(jax.device_put, out)))


def start(
    trainer: Any, hparams_type: type, key: jax.Array, hparams: Any
) -> tuple[Any, PyTree, jax.Array, jax.Array]:
    """``(hparams, params, k_sampler, k_train)`` for a trainer's ``init``: one
    run's checked float32 hyperparameters (the config's when None), the agent's
    first parameters (from a zeros observation), and ``key`` split in three."""
    hparams = hparams_of(hparams_type, trainer.config) if hparams is None else hparams
    if not isinstance(hparams, hparams_type):
        raise TypeError(f"hparams must be an HParams, got {type(hparams).__name__}")
    for f in dataclasses.fields(hparams_type):
        if jnp.shape(getattr(hparams, f.name)) != ():
            raise ValueError(
                f"hparams.{f.name} must be a scalar for one run (vmap to run several), "
                f"got shape {jnp.shape(getattr(hparams, f.name))}"
            )
    hparams = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), hparams)
    k_params, k_sampler, k_train = jax.random.split(key, 3)
    example = jax.tree.map(
        lambda s: jnp.zeros(s.shape, s.dtype), trainer.sampler.examples.env.observation
    )
    return hparams, trainer.agent.init(k_params, example), k_sampler, k_train


def annealed_lr(config: Any, iteration: jax.Array, lr: jax.Array) -> jax.Array:
    """The learning rate of iteration ``iteration`` (0-based): ``lr``, times
    ``1 - iteration / num_iterations`` (floored at 0) with ``config.anneal_lr``."""
    if not config.anneal_lr:
        return lr * 1.0
    frac = 1.0 - iteration.astype(jnp.float32) / config.num_iterations
    return lr * jnp.maximum(frac, 0.0)


def episode_metrics(batch: Batch, metrics: StepMetrics) -> dict[str, jax.Array]:
    """The per-iteration episode figures both trainers report: ``env_steps``
    (after the iteration), ``episode_return_mean``, ``episode_length_mean``,
    ``n_episodes`` (this batch's completed episodes; NaN means when none),
    ``average_return``, ``average_episode_length`` (last ``metrics_window``
    episodes)."""
    episodes = summarize(batch.traj_infos, ("episode_return", "length"), ("mean",))
    summary = metrics.summary()
    return {
        "env_steps": summary["environment_steps"],
        "episode_return_mean": episodes["episode_return_mean"],
        "episode_length_mean": episodes["length_mean"],
        "n_episodes": episodes["n_trajectories"],
        "average_return": summary["average_return"],
        "average_episode_length": summary["average_episode_length"],
    }

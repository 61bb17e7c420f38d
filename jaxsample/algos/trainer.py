"""The Trainer protocol: all that runs, checkpoints and the bench know of an algorithm.

A trainer is a frozen object of pure functions that a factory
(``jaxsample.algos.ppo.make_train(config)``) closes over its config, as
optax's ``GradientTransformation`` closes over its hyperparameters::

    trainer = ppo.make_train(PPOConfig())
    state = trainer.init(key, trainer.hparams(lr=1e-3))     # one run
    state, metrics = trainer.iteration(state)               # one collect + learn
    state, metrics = train(trainer, key)                     # the whole run (a scan)

``init`` and ``iteration`` are jittable and vmappable (over keys and
``hparams``); ``metrics`` is a flat dict of float32 scalars per iteration.
The run loop (``jaxsample.runs``), checkpoints and the benchmarks use these
members and nothing else of a trainer; a trainer imports nothing of what runs
it. What it reports is data (`Reports`): which metric is the episode return,
which the loss, and the metrics of an evaluation it runs inside its
iterations (a game's match against a random opponent): NaN at the iterations
where none is due, the first of them the headline that a display shows.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol, runtime_checkable

__all__ = ["Reports", "Trainer", "chunk_size", "over_runs", "train"]


@dataclasses.dataclass(frozen=True)
class Reports:
    """What a trainer's per-iteration metrics mean to whoever shows them.

    Attributes:
      returns: the mean return of the episodes completed in the iteration
        (NaN when none did): learning curves, the recent return.
      loss: the iteration's loss, or None.
      evaluation: the metrics of an evaluation the trainer runs inside some
        iterations (NaN at the others), the headline first; empty for none.
    """

    returns: str = "episode_return_mean"
    loss: str | None = "loss"
    evaluation: tuple[str, ...] = ()


@runtime_checkable
class Trainer(Protocol):
    """An algorithm as pure functions (a structural type: implement it, don't
    inherit from it).

    Attributes:
      num_iterations: iterations of a full run (from the config).
      steps_per_iteration: environment steps of one run per iteration.
      reports: what its metrics are (`Reports`).
      env, env_params, agent: what it acts in and with: a run loaded from its
        folder evaluates ``agent`` with the state's ``params`` in ``env``.
    """

    @property
    def num_iterations(self) -> int: ...

    @property
    def steps_per_iteration(self) -> int: ...

    @property
    def reports(self) -> Reports: ...

    @property
    def env(self) -> Any: ...

    @property
    def env_params(self) -> Any: ...

    @property
    def agent(self) -> Any: ...

    def hparams(self, **overrides: Any) -> Any:
        """The run's hyperparameters that are data (float32 leaves; an ``[N]``
        field makes ``N`` runs to vmap over), the config's unless overridden."""
        ...

    def init(self, key: Any, hparams: Any = None) -> Any:
        """A fresh run's state from a ``jax.random.key``."""
        ...

    def iteration(self, state: Any) -> tuple[Any, dict[str, Any]]:
        """One iteration: ``(state, metrics)``, metrics float32 scalars."""
        ...


def train(
    trainer: Trainer, key: Any, hparams: Any = None, num_iterations: int | None = None
) -> tuple[Any, dict[str, Any]]:
    """``init`` then ``num_iterations`` (default: the trainer's) iterations in a
    ``lax.scan``; metrics stacked ``[num_iterations]``. Pure: jit it, vmap it
    over keys and hparams."""
    import jax

    n = trainer.num_iterations if num_iterations is None else int(num_iterations)
    if n < 1:
        raise ValueError(f"num_iterations must be >= 1, got {n}")
    state = trainer.init(key, hparams)
    return jax.lax.scan(lambda s, _: trainer.iteration(s), state, None, length=n)


def over_runs(fn: Any) -> Any:
    """``jax.vmap(fn)`` over the runs' leading axis ``[R]`` of every argument
    leaf; for one run (``R = 1``, every leading axis 1) ``fn`` of the run's
    own arguments with the axis added back to its outputs, the same values
    and shapes without a batch trace (vmapping a trainer's scans re-traces
    their bodies; docs/benchmarks.md measures it). A single PureJaxRL run (its
    ``ppo.py``) is not vmapped either. Every program of a run uses it, so
    chunks, one program and resumed runs compute the same either way."""
    import jax
    import jax.numpy as jnp

    batched = jax.vmap(fn)

    def call(*args: Any) -> Any:
        leaves = jax.tree.leaves(args)
        if leaves and all(jnp.shape(x)[:1] == (1,) for x in leaves):
            out = fn(*jax.tree.map(lambda x: x[0], args))
            return jax.tree.map(lambda x: x[None], out)
        return batched(*args)

    return call


def chunk_size(num_iterations: int, chunks: int) -> int:
    """Iterations between two reports of a run split into about ``chunks``
    (its compiled chunks, or the one program's progress reports): a divisor of
    ``num_iterations`` giving about ``chunks`` chunks when there is one (one
    program to compile), else ``ceil(num_iterations / chunks)`` and a
    remainder chunk. A trainer's evaluation may fall on them (PPO's default
    ``eval_every`` is ``chunk_size(num_iterations, 20)``)."""
    target = max(1, math.ceil(num_iterations / max(chunks, 1)))
    for size in range(target, min(num_iterations, 2 * target) + 1):
        if num_iterations % size == 0:
            return size
    return min(num_iterations, target)

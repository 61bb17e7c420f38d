"""The Trainer protocol: all that runs, checkpoints and the bench know of an algorithm.

A trainer is a frozen object of pure functions that a factory
(``jaxsample.algos.ppo.make_train(config)``) closes over its config, as
optax's ``GradientTransformation`` closes over its hyperparameters::

    trainer = ppo.make_train(PPOConfig())
    state = trainer.init(key, trainer.hparams(lr=1e-3))     # one run
    state, metrics = trainer.iteration(state)               # one collect + learn
    state, metrics = train(trainer, key)                     # the whole run (a scan)
    state, metrics = run(trainer, state, 10)                 # 10 more iterations

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
from typing import Any, Protocol, runtime_checkable

__all__ = ["Reports", "Trainer", "run", "train"]


@dataclasses.dataclass(frozen=True)
class Reports:
    """What a trainer's per-iteration metrics mean to whoever shows them.

    Attributes:
      returns: the mean return of the episodes completed in the iteration
        (NaN when none did): learning curves, the recent return.
      episodes: the number of episodes completed in the iteration (what
        weighs each iteration's mean in the recent return:
        `jaxsample.runs.loop.recent_returns`), or None (each iteration with
        episodes weighs 1).
      loss: the iteration's loss, or None.
      evaluation: the metrics of an evaluation the trainer runs inside some
        iterations (NaN at the others), the headline first; empty for none.
        Where there is one, the headline stands for the return wherever one
        figure tells how a run does (the live display, the closing table): a
        self-play game's return is 1 or 0 whatever is learned.
    """

    returns: str = "episode_return_mean"
    episodes: str | None = "n_episodes"
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
      env: the environment it acts in: a run loaded from its folder evaluates
        ``agent`` with the state's ``params`` in it.
      env_params: its parameters.
      agent: the agent it acts with.
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


def run(trainer: Trainer, state: Any, num_iterations: int) -> tuple[Any, dict[str, Any]]:
    """``num_iterations`` (static, >= 1) iterations of ``trainer`` from ``state`` in
    a ``lax.scan``; metrics stacked ``[num_iterations]``. Pure: jit it."""
    import jax

    n = int(num_iterations)
    if n < 1:
        raise ValueError(f"num_iterations must be >= 1, got {num_iterations}")
    return jax.lax.scan(lambda s, _: trainer.iteration(s), state, None, length=n)


def train(
    trainer: Trainer, key: Any, hparams: Any = None, num_iterations: int | None = None
) -> tuple[Any, dict[str, Any]]:
    """``init`` then ``num_iterations`` (default: the trainer's) iterations
    (`run`). Pure: jit it, vmap it over keys and hparams."""
    n = trainer.num_iterations if num_iterations is None else num_iterations
    return run(trainer, trainer.init(key, hparams), n)

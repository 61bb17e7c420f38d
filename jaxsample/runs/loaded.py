"""`load`: a finished or stopped run, back from its folder, in Python.

```python
from jaxsample import runs

run = runs.load("runs/cartpole")         # the folder of runs.train(..., folder=)
run.config, run.iteration, run.names     # what it trained, and how far
params = run.params_of(0)                # run 0's parameters (no [R] axis)
stats = run.evaluate(episodes=10)        # the greedy policy of every run
```

Loading takes no lock: a run still writing the folder is read at its latest
finalized checkpoint.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import numpy as np

from jaxsample.runs.errors import FolderMismatch
from jaxsample.runs.files import cause
from jaxsample.runs.folder import RunFolder
from jaxsample.runs.logs import run_names
from jaxsample.runs.run import build_trainer, config_type, sweep_hparams, sweep_runs

__all__ = ["LoadedRun", "load"]


@dataclasses.dataclass
class LoadedRun:
    """A run restored from its folder.

    Attributes:
      folder: the run folder.
      record: its settings (``run.json``).
      config: the trainer's config.
      iteration: the checkpoint's iteration count (``< trainer.num_iterations``
        for a stopped run).
      trainer: the trainer built from ``config`` (``env``, ``env_params``,
        ``agent``, ``init``, ``run``).
      state: the vmapped trainer state (leading ``[R]`` axis).
      history: every per-iteration metric, numpy ``[R, iteration]``.
      names, seeds, settings: ``[R]`` each run's name, seed and swept values.
    """

    folder: str
    record: dict[str, Any]
    config: Any
    iteration: int
    trainer: Any
    state: Any
    history: dict[str, np.ndarray]
    names: list[str]
    seeds: list[int]
    settings: list[dict[str, float]]

    @property
    def agent(self) -> Any:
        """The trained agent (its parameters: `params` / `params_of`)."""
        return self.trainer.agent

    @property
    def params(self) -> Any:
        """Every run's agent parameters, leading ``[R]`` axis."""
        return self.state.params

    @property
    def complete(self) -> bool:
        """The run trained all its iterations."""
        return self.iteration >= self.trainer.num_iterations

    def params_of(self, run: int) -> Any:
        """Run ``run``'s parameters (no ``[R]`` axis)."""
        if not 0 <= run < len(self.names):
            raise ValueError(f"run must be in 0..{len(self.names) - 1}, got {run}")
        return jax.tree.map(lambda x: x[run], self.params)

    def evaluator(self, episodes: int = 10) -> Any:
        """A greedy `jaxsample.Evaluator` of ``episodes`` episodes, one per env,
        with a step budget that lets every episode end."""
        from jaxsample.evaluation import make_evaluator

        if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
            raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
        try:
            limit = int(np.asarray(self.trainer.env_params.max_steps_in_episode))
        except (AttributeError, TypeError, ValueError, OverflowError):
            limit = 10_000
        return make_evaluator(
            self.trainer.env, self.trainer.env_params, self.agent, n_envs=episodes,
            max_steps=episodes * (limit + 1), discount=self.config.gamma,
        )  # fmt: skip

    def evaluate(self, episodes: int = 10, seed: int = 0) -> list[dict[str, Any]]:
        """Evaluate every run's greedy policy on ``episodes`` episodes: one row
        per run (``run``, ``seed``, the swept values, ``episodes`` finished,
        ``return_mean``, ``return_std``, ``length_mean``). Run ``r`` uses the
        key ``fold_in(key(seed), r)``."""
        from jaxsample.traj_info import summarize

        evaluator = self.evaluator(episodes)
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(
            np.arange(len(self.names))
        )
        infos = jax.jit(jax.vmap(evaluator.run))(keys, self.params)
        stats = jax.device_get(jax.vmap(summarize)(infos))
        rows = []
        for r, name in enumerate(self.names):
            done = np.asarray(infos.completed[r])
            returns = np.asarray(infos.episode_return[r])[done]
            rows.append({
                "run": name, "seed": self.seeds[r], **self.settings[r],
                "episodes": int(done.sum()),
                "return_mean": float(stats["episode_return_mean"][r]),
                "return_std": float(returns.std()) if returns.size else None,
                "length_mean": float(stats["length_mean"][r]),
            })  # fmt: skip
        return rows


def load(folder: str | os.PathLike[str], *, folder_flag: str | None = None) -> LoadedRun:
    """Restore the run saved in ``folder`` (by `jaxsample.runs.train` with
    ``folder=``, or ``jaxsample train --checkpoint-dir``) at its latest
    checkpoint.

    Raises:
      FolderMismatch: no run there, or a damaged one (the message says what).
    """
    folder = os.fspath(folder)
    what = f"{folder_flag} {folder!r}" if folder_flag else None
    run_folder = RunFolder(folder, what)
    record, step = run_folder.read()
    if record is None or step is None:
        raise FolderMismatch(f"{run_folder.what}: no checkpoint of a jaxsample run there")
    try:
        config = config_type(record["algo"])(**record["config"])
    except (TypeError, ValueError) as e:
        raise FolderMismatch(
            f"{run_folder.what}: run.json holds no valid config ({cause(e)})"
        ) from None
    from jaxsample.algos import runner

    trainer = build_trainer(config)
    seeds, settings = sweep_runs(range(record["seeds"]), record["sweep"])
    hparams = sweep_hparams(trainer, settings, record["seeds"])
    keys, run_hparams = runner.run_inputs(
        trainer, jax.random.key(record["seed"]), record["seeds"], hparams
    )
    like = jax.eval_shape(jax.vmap(trainer.init), keys, run_hparams)
    state, history = run_folder.restore(like, step)
    return LoadedRun(
        folder=folder, record=record, config=config, iteration=step, trainer=trainer,
        state=state, history=history, names=run_names(seeds, settings), seeds=seeds,
        settings=settings,
    )  # fmt: skip

"""`load`: a finished or stopped run, back from its folder, in Python.

```python
from jaxsample import runs

run = runs.load("runs/cartpole")         # the folder of runs.train(..., folder=)
run.config, run.iteration, run.names     # what it trained, and how far
params = run.params_of(0)                # run 0's parameters (no [R] axis)
stats = run.evaluate(episodes=10)        # the greedy policy of every run
run.video("cartpole.gif")                # watch run 0's first greedy episode
```

Loading takes no lock: a run still writing the folder is read at its latest
finalized checkpoint.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxsample.runs.errors import FolderMismatch, RunNotFound
from jaxsample.runs.files import cause
from jaxsample.runs.folder import RunFolder
from jaxsample.runs.logs import run_names
from jaxsample.runs.run import build_trainer, config_type, sweep_hparams, sweep_runs

__all__ = ["POLICIES", "LoadedRun", "load"]

#: What `LoadedRun.evaluate` can evaluate: the agent's evaluation behaviour,
#: or its actions sampled as in training.
POLICIES = ("greedy", "sampled")


@dataclasses.dataclass(frozen=True)
class _Sampled:
    """``agent`` acting as in training, also where an evaluator asks for its
    evaluation behaviour (``as_eval`` returns itself)."""

    agent: Any

    def initial_state(self, env_rank: jax.Array) -> Any:
        return self.agent.initial_state(env_rank)

    def step(self, params: Any, inputs: Any, state: Any, key: jax.Array) -> Any:
        return self.agent.step(params, inputs, state, key)

    def value(self, params: Any, inputs: Any, state: Any) -> jax.Array:
        return self.agent.value(params, inputs, state)

    def as_eval(self) -> _Sampled:
        return self


@dataclasses.dataclass
class LoadedRun:
    """A run restored from its folder.

    Attributes:
      folder: the run folder.
      record: its settings (``run.json``).
      config: the trainer's config.
      iteration: the checkpoint's iteration count (``< trainer.num_iterations``
        for a stopped run).
      trainer: the trainer built from ``config`` (a
        [`Trainer`][jaxsample.algos.trainer.Trainer]: ``env``,
        ``env_params``, ``agent``, ``init``, ``iteration``, ...).
      state: the vmapped trainer state (leading ``[R]`` axis).
      history: every per-iteration metric, numpy ``[R, iteration]``.
      names: ``[R]`` each run's name (``seed0``, ``seed1_lr0.001``, ...).
      seeds: ``[R]`` each run's seed.
      settings: ``[R]`` each run's swept values (``{field: value}``).
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

    @property
    def is_game(self) -> bool:
        """Whether the env is a two-player zero-sum game (a Pgx game)."""
        from jaxsample.algos import games

        return games.is_game(self.trainer.env)

    def evaluator(self, episodes: int = 10, policy: str = "greedy", **options: Any) -> Any:
        """A `jaxsample.Evaluator` of ``episodes`` episodes, one per env, with
        a step budget that lets every episode end. ``policy``: ``"greedy"``
        (the agent's evaluation behaviour: a Gaussian's mean, the argmax of a
        categorical) or ``"sampled"`` (actions drawn as in training)."""
        from jaxsample.evaluation import make_evaluator

        if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
            raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        agent = options.pop("agent", self.agent)
        agent = agent if policy == "greedy" else _Sampled(agent)
        return make_evaluator(
            self.trainer.env, self.trainer.env_params, agent, n_envs=episodes,
            max_steps=episodes * (self.episode_limit + 1), discount=self.config.gamma,
            **options,
        )  # fmt: skip

    @property
    def episode_limit(self) -> int:
        """The env's episode length limit (10,000 where it names none)."""
        try:
            return int(np.asarray(self.trainer.env_params.max_steps_in_episode))
        except (AttributeError, TypeError, ValueError, OverflowError):
            return 10_000

    def _keys(self, seed: int) -> jax.Array:
        """Run ``r``'s evaluation key: ``fold_in(key(seed), r)``."""
        return jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(
            np.arange(len(self.names))
        )

    def _row(self, r: int) -> dict[str, Any]:
        return {"run": self.names[r], "seed": self.seeds[r], **self.settings[r]}

    def evaluate(
        self, episodes: int = 10, seed: int = 0, policy: str = "greedy"
    ) -> list[dict[str, Any]]:
        """Evaluate every run's policy on ``episodes`` episodes: one row per run
        (``run``, ``seed``, the swept values, ``episodes`` finished,
        ``return_mean``, ``return_std``, ``length_mean``, ``policy``). Run
        ``r`` uses the key ``fold_in(key(seed), r)``; ``policy`` as in
        `evaluator`."""
        from jaxsample.traj_info import summarize

        evaluator = self.evaluator(episodes, policy)
        infos = jax.jit(jax.vmap(evaluator.run))(self._keys(seed), self.params)
        stats = jax.device_get(jax.vmap(summarize)(infos))
        rows = []
        for r in range(len(self.names)):
            done = np.asarray(infos.completed[r])
            returns = np.asarray(infos.episode_return[r])[done]
            rows.append({
                **self._row(r), "policy": policy, "episodes": int(done.sum()),
                "return_mean": float(stats["episode_return_mean"][r]),
                "return_std": float(returns.std()) if returns.size else None,
                "length_mean": float(stats["length_mean"][r]),
            })  # fmt: skip
        return rows

    def match(self, opponent: Any = "random") -> tuple[Any, Any]:
        """The agent against ``opponent`` in a two-player game, as `play`
        plays it: ``(TurnTaking((agent, other)), other_params)``, the
        evaluator's agent (its params: ``(params_of(r), other_params)``).
        ``opponent``: ``"random"`` (a uniformly random legal player) or
        another `LoadedRun` of the same game (its first run's policy).

        Raises:
          ValueError: the env is not a two-player game, or the opponent
            plays another one.
        """
        from jaxsample.agents import RandomAgent, TurnTaking

        if not self.is_game:
            raise ValueError(f"{self.config.env_name} is not a two-player game: no opponent")
        space = self.trainer.env.action_space(self.trainer.env_params)
        if isinstance(opponent, str) and opponent == "random":
            other, other_params = RandomAgent(space), ()
        elif isinstance(opponent, LoadedRun):
            if opponent.config.env_name != self.config.env_name:
                raise ValueError(
                    f"the opponent plays {opponent.config.env_name}, not {self.config.env_name}"
                )
            other, other_params = opponent.agent, opponent.params_of(0)
        else:
            raise ValueError(f"opponent must be 'random' or a LoadedRun, got {opponent!r}")
        return TurnTaking((self.agent, other)), other_params

    def video(
        self,
        path: str | os.PathLike[str],
        episodes: int | Sequence[int] = 1,
        *,
        run: int = 0,
        seed: int = 0,
        opponent: Any = "random",
        fps: float | None = None,
        max_steps: int = 1000,
    ) -> Any:
        """Render run ``run``'s greedy episodes to ``path`` with the suite's
        own renderer (`jaxsample.runs.video.write`: an animated GIF for
        gymnax's classic control and MinAtar, an animated SVG of a Pgx game
        against ``opponent``, Brax's HTML viewer): ``episodes`` (a count, or
        the episode numbers) of ``evaluate(seed=seed)``'s greedy evaluation,
        at most ``max_steps`` steps each, ``fps`` frames per second (None:
        the renderer's own). Returns a `jaxsample.runs.video.Video`.

        Raises:
          ValueError: the env has no renderer, the path's suffix is not its
            format's, or a bad argument (named); nothing is written.
        """
        from jaxsample.runs import video

        return video.write(
            self, path, episodes, run=run, seed=seed, opponent=opponent, fps=fps,
            max_steps=max_steps,
        )  # fmt: skip

    def play(self, opponent: Any = "random", games: int = 10, seed: int = 0) -> list[dict]:
        """Every run's greedy policy against ``opponent`` in a two-player game:
        ``"random"`` (a uniformly random legal player) or another
        `LoadedRun` of the same game (its first run's greedy policy). Each
        run plays ``games`` games, opening every other one (env ``b`` opens
        when ``b`` is even). One row per run: ``wins``, ``draws``, ``losses``
        overall and per seat (``first_*`` opening, ``second_*``), and
        ``win_or_draw`` (a fraction).

        Raises:
          ValueError: the env is not a two-player game, or the opponent
            plays another one.
        """
        from jaxsample.agents import seat_returns

        match, other_params = self.match(opponent)
        evaluator = self.evaluator(games, agent=match, traj_fields=seat_returns())
        run = jax.vmap(evaluator.run, in_axes=(0, (0, None)))
        infos = jax.jit(run)(self._keys(seed), (self.params, other_params))
        done = np.asarray(infos.completed)
        result = np.asarray(infos.extra["agent0_return"])
        first = np.arange(done.shape[1]) % 2 == 0  # env b: agent b % 2 opens
        rows = []
        for r in range(len(self.names)):
            row = self._row(r) | {"games": int(done[r].sum())}
            for seat, mask in (("", done[r]), ("first_", done[r] & first),
                               ("second_", done[r] & ~first)):  # fmt: skip
                for name, sign in (("wins", 1), ("draws", 0), ("losses", -1)):
                    row[seat + name] = int((np.sign(result[r]) == sign)[mask].sum())
            row["win_or_draw"] = (row["wins"] + row["draws"]) / max(row["games"], 1)
            rows.append(row)
        return rows


def load(folder: str | os.PathLike[str], *, folder_flag: str | None = None) -> LoadedRun:
    """Restore the run saved in ``folder`` (by `jaxsample.runs.train` with
    ``folder=``, or ``jaxsample train --checkpoint-dir``) at its latest
    checkpoint.

    Raises:
      RunNotFound: no run there: ``folder`` does not exist, is a file, holds
        no run, or a run without a checkpoint yet (the message says which).
      FolderMismatch: a damaged run (the message says what).
    """
    folder = os.fspath(folder)
    what = f"{folder_flag} {folder!r}" if folder_flag else None
    run_folder = RunFolder(folder, what)
    if not os.path.exists(folder):
        raise RunNotFound(f"{run_folder.what} does not exist: no run there")
    if not os.path.isdir(folder):
        raise RunNotFound(f"{run_folder.what} is a file, not a run folder")
    record, step = run_folder.read()
    if record is None and step is None:
        raise RunNotFound(
            f"{run_folder.what} holds no jaxsample run (no run.json, no checkpoint): give the "
            "folder that runs.train(folder=...) or jaxsample train --checkpoint-dir wrote"
        )
    if record is None:
        raise FolderMismatch(f"{run_folder.what}: checkpoints but no run.json (damaged)")
    if step is None:
        raise RunNotFound(
            f"{run_folder.what}: its run has no checkpoint yet (stopped, or still running, "
            "before the end of its first chunk)"
        )
    try:
        config = config_type(record["algo"])(**record["config"])
    except (TypeError, ValueError) as e:
        raise FolderMismatch(
            f"{run_folder.what}: run.json holds no valid config ({cause(e)})"
        ) from None
    from jaxsample.runs.loop import runs_of
    from jaxsample.runs.programs import init_function

    trainer = build_trainer(config)
    seeds, settings = sweep_runs(range(record["seeds"]), record["sweep"])
    hparams = sweep_hparams(trainer, settings, record["seeds"])
    runs = runs_of(trainer, jax.random.key(record["seed"]), record["seeds"], hparams)
    like = jax.eval_shape(init_function(trainer), *runs)
    state, history = run_folder.restore(like, step)
    return LoadedRun(
        folder=folder, record=record, config=config, iteration=step, trainer=trainer,
        state=state, history=history, names=run_names(seeds, settings), seeds=seeds,
        settings=settings,
    )  # fmt: skip

"""Episodes you can watch: a run's greedy episodes, drawn by its suite's own renderer.

```python
from jaxsample import runs

run = runs.load("runs/cartpole")
made = run.video("cartpole.gif", episodes=2)    # a Video: path, frames, lengths, returns
```

``jaxsample eval --checkpoint DIR --video cartpole.gif`` does the same for
run 0 of the folder. What is drawn depends on the env, and the path's suffix
must be its format's:

* gymnax's classic control (CartPole, Acrobot, Pendulum, MountainCar),
  MinAtar and the other envs gymnax's ``Visualizer`` draws (Catch, Pong,
  PointRobot, MetaMaze, FourRooms): an animated GIF, ``.gif``, of gymnax's
  own drawing, on matplotlib's Agg canvas (no display), written by Pillow
  (`jaxsample.runs.gif`); classic control is gymnasium's pygame renderer
  (the ``video`` extra installs pygame);
* Pgx's games (not its MinAtar ones): an animated SVG, ``.svg``,
  ``pgx.save_svg_animation``; a two-player game shows the agent against
  ``opponent`` (``"random"`` or another run), as `LoadedRun.play` plays it;
* Brax: Brax's HTML viewer, ``.html``, ``brax.io.html.render(sys, states)``
  (the page loads the viewer's script from a CDN when it is opened, and
  plays at the system's time step: ``fps`` is not used).

Any other env has no renderer: `check` says so in one line (a
``ValueError``) and nothing is written.

**The episodes.** Episode ``i`` is env rank ``i`` of
``LoadedRun.evaluate(seed=seed)``'s greedy evaluation of run ``run`` (key
``fold_in(key(seed), run)``), replayed step by step by
`jaxsample.evaluation.Evaluator.trace`: the same steps, so the same length
and return, and the same video every time. **A frame is an env state**:
frame 0 the reset state, frame ``t`` the state after step ``t``, so an
episode of ``L`` steps has ``L + 1`` frames (its final state is drawn, not
the reset after it); an episode cut at ``max_steps`` has ``max_steps + 1``.
The episodes follow each other in one file. The states are rolled out in one
compiled program and drawn on the host, frame by frame; the file is written
beside ``path`` and renamed into place (`jaxsample.runs.files`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsample._checks import check_int
from jaxsample.runs.files import replace_file, write_text

__all__ = [
    "CLASSIC_CONTROL",
    "DRAWN",
    "FORMATS",
    "Video",
    "check",
    "env_format",
    "rollout",
    "write",
    "write_frames",
]

#: Each format's file suffix and what it is.
FORMATS = {
    "gif": (".gif", "an animated GIF"),
    "svg": (".svg", "an animated SVG"),
    "html": (".html", "Brax's HTML viewer"),
}
#: gymnax's classic-control envs: gymnax draws them with gymnasium's
#: renderer (pygame), 20 frames per second.
CLASSIC_CONTROL = (
    "Acrobot-v1",
    "CartPole-v1",
    "Pendulum-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
)
#: The other gymnax envs its ``Visualizer`` draws (matplotlib), 10 frames
#: per second.
DRAWN = (
    "Asterix-MinAtar",
    "Breakout-MinAtar",
    "Freeway-MinAtar",
    "Seaquest-MinAtar",
    "SpaceInvaders-MinAtar",
    "Catch-bsuite",
    "Pong-misc",
    "PointRobot-misc",
    "MetaMaze-misc",
    "FourRooms-misc",
)
_RENDERERS = (
    "gymnax's classic control, MinAtar, Catch, Pong, PointRobot and mazes (GIF), "
    "Pgx's games (SVG) and Brax (HTML)"
)


@dataclasses.dataclass(frozen=True)
class Video:
    """What `write` wrote.

    Attributes:
      path: the file.
      format: ``"gif"``, ``"svg"`` or ``"html"`` (`FORMATS`).
      run: the run's name (``LoadedRun.names[run]``).
      episodes: the episode numbers (the evaluation's env ranks).
      lengths: each episode's steps (``max_steps`` where it was cut).
      ended: whether each episode ended within ``max_steps``.
      returns: each episode's return (the sum of the env's rewards; in a
        two-player game, of both players' moves' rewards).
      frames: the frames written, ``sum(length + 1)``.
    """

    path: str
    format: str
    run: str
    episodes: tuple[int, ...]
    lengths: tuple[int, ...]
    ended: tuple[bool, ...]
    returns: tuple[float, ...]
    frames: int


def _inner(env: Any) -> Any:
    """``env`` without jaxsample's observation wrappers (their states and
    params are the inner env's)."""
    from jaxsample.envs.wrappers import MaskObservation

    while isinstance(env, MaskObservation):
        env = env.env
    return env


def env_format(env: Any) -> str | None:
    """The format ``env``'s renderer writes (`FORMATS`), None without one."""
    from jaxsample.envs.suites.brax import BraxEnv
    from jaxsample.envs.suites.pgx import PgxEnv

    env = _inner(env)
    if isinstance(env, BraxEnv):
        return "html"
    if isinstance(env, PgxEnv):
        return None if str(env.env.id).startswith("minatar") else "svg"
    if type(env).__module__.startswith("gymnax.") and env.name in CLASSIC_CONTROL + DRAWN:
        return "gif"
    return None


def check(env: Any, path: str | os.PathLike[str]) -> str:
    """``env``'s format, once it is sure a video of it can be written to
    ``path``.

    Raises:
      ValueError: ``env`` has no renderer, or ``path`` does not end with its
        format's suffix (one line each).
      ImportError: the renderer's package is missing (classic control:
        pygame).
    """
    name = _inner(env).name
    fmt = env_format(env)
    if fmt is None:
        raise ValueError(f"{name} has no renderer (videos are of {_RENDERERS}): no video written")
    suffix, what = FORMATS[fmt]
    if os.path.splitext(os.fspath(path))[1].lower() != suffix:
        raise ValueError(f"{name} renders {what}: give a path ending in {suffix}")
    if name in CLASSIC_CONTROL and importlib.util.find_spec("pygame") is None:
        raise ImportError(
            f"{name} is drawn by gymnasium's renderer, which needs pygame: "
            "pip install 'jaxsample[video]'"
        )
    return fmt


def _episode_numbers(episodes: Any) -> tuple[int, ...]:
    """``episodes`` as episode numbers: a count ``n`` is ``0 .. n - 1``."""
    if not isinstance(episodes, Sequence) or isinstance(episodes, str):
        return tuple(range(check_int("episodes", episodes, 1)))
    numbers = tuple(check_int("episodes[i]", e, 0, 2**31 - 1) for e in episodes)
    if not numbers or len(set(numbers)) != len(numbers):
        raise ValueError(f"episodes must be distinct episode numbers, at least one, "
                         f"got {list(episodes)!r}")  # fmt: skip
    return numbers


def _check_fps(fps: Any) -> float | None:
    if fps is None:
        return None
    if isinstance(fps, bool) or not isinstance(fps, (int, float)):
        raise TypeError(f"fps must be a number of frames per second, got {fps!r}")
    if not math.isfinite(fps) or not 0 < fps <= 100:
        raise ValueError(f"fps must be in (0, 100] frames per second, got {fps!r}")
    return float(fps)


def rollout(
    loaded: Any, episodes: tuple[int, ...], run: int, seed: int, opponent: Any, max_steps: int
) -> Any:
    """The `Episode` traces (numpy, leading ``[len(episodes)]``) of run
    ``run``'s greedy episodes ``episodes`` of `LoadedRun` ``loaded`` (a
    game's against ``opponent``, `LoadedRun.match`): one compiled program."""
    agent, params = loaded.agent, loaded.params_of(run)
    if loaded.is_game:
        agent, other_params = loaded.match(opponent)
        params = (params, other_params)
    evaluator = loaded.evaluator(1, agent=agent)
    key = jax.random.fold_in(jax.random.key(seed), run)  # LoadedRun.evaluate's key of run

    def traces(key: jax.Array, params: Any, ranks: jax.Array) -> Any:
        return jax.vmap(lambda r: evaluator.trace(key, params, r, max_steps))(ranks)

    ranks = jnp.asarray(episodes, jnp.int32)
    return jax.device_get(jax.jit(traces)(key, params, ranks))


def write_frames(
    env: Any,
    env_params: Any,
    states: Sequence[Any],
    path: str | os.PathLike[str],
    *,
    titles: Sequence[str] | None = None,
    fps: float | None = None,
) -> str:
    """Draw ``states`` (env states of ``env``, one frame each, host arrays)
    with ``env``'s renderer to ``path``, written beside and renamed into
    place; ``titles`` (a GIF's per-frame titles; default ``step i``),
    ``fps`` (a GIF's or an SVG's; None: the renderer's own). Returns the
    format.

    Raises:
      ValueError: as `check`; nothing is written.
      ImportError: as `check`; nothing is written.
    """
    fmt = check(env, path)
    fps = _check_fps(fps)
    states = list(states)
    if not states:
        raise ValueError("states must hold at least one env state")
    inner = _inner(env)
    if fmt == "gif":
        from jaxsample.runs import gif

        titles = [f"step {i}" for i in range(len(states))] if titles is None else list(titles)
        own = 20.0 if inner.name in CLASSIC_CONTROL else 10.0  # gymnax's Visualizer's rates
        rate = own if fps is None else fps
        replace_file(path, lambda tmp: gif.write_gif(inner, env_params, states, titles, tmp, rate))
    elif fmt == "svg":
        import pgx

        boards = [s.inner for s in states]  # the adapter's state holds Pgx's
        seconds = None if fps is None else 1 / fps
        replace_file(path, lambda tmp: pgx.save_svg_animation(
            boards, tmp, frame_duration_seconds=seconds))  # fmt: skip
    else:
        from brax.io import html

        write_text(path, html.render(inner.env.sys, [s.inner.pipeline_state for s in states]))
    return fmt


def write(
    loaded: Any,
    path: str | os.PathLike[str],
    episodes: int | Sequence[int] = 1,
    *,
    run: int = 0,
    seed: int = 0,
    opponent: Any = "random",
    fps: float | None = None,
    max_steps: int = 1000,
) -> Video:
    """Render run ``run`` of the `LoadedRun` ``loaded``: its greedy
    ``episodes`` (a count ``n``: episodes ``0 .. n - 1``; or the episode
    numbers), each at most ``max_steps`` steps, to ``path`` (the module
    docstring: which episodes, what a frame is, the formats).

    Raises:
      ValueError: a bad argument value (named), or as `check`; nothing is
        written.
      TypeError: an argument of the wrong type (named); nothing is written.
      ImportError: as `check`; nothing is written.
    """
    env, env_params = loaded.trainer.env, loaded.trainer.env_params
    numbers = _episode_numbers(episodes)
    max_steps = check_int("max_steps", max_steps, 1, 1_000_000)
    fps = _check_fps(fps)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if isinstance(run, bool) or not isinstance(run, int) or not 0 <= run < len(loaded.names):
        raise ValueError(f"run must be in 0..{len(loaded.names) - 1}, got {run!r}")
    if not loaded.is_game and not (isinstance(opponent, str) and opponent == "random"):
        raise ValueError(f"opponent: {loaded.config.env_name} is not a two-player game")
    check(env, path)
    traces = rollout(loaded, numbers, run, seed, opponent, max_steps)
    lengths = [int(n) for n in np.asarray(traces.length)]
    name = _inner(env).name
    states, titles, returns = [], [], []
    for e, (number, length) in enumerate(zip(numbers, lengths, strict=True)):
        rewards = np.asarray(traces.reward[e], np.float64)
        totals = np.concatenate([[0.0], np.cumsum(rewards.reshape(len(rewards), -1).mean(-1))])
        returns.append(float(totals[length]))
        for t in range(length + 1):
            states.append(jax.tree.map(lambda x, e=e, t=t: x[e, t], traces.env_state))
            titles.append(f"{name}  episode {number}  step {t}  return {totals[t]:.1f}")
    fmt = write_frames(env, env_params, states, path, titles=titles, fps=fps)
    return Video(
        path=os.fspath(path), format=fmt, run=loaded.names[run], episodes=numbers,
        lengths=tuple(lengths), ended=tuple(bool(x) for x in np.asarray(traces.ended)),
        returns=tuple(returns), frames=len(states),
    )  # fmt: skip

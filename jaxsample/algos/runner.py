"""Runs a jitted trainer in compiled chunks, with progress, summary table, JSON and PNG.

A trainer (``jaxsample.algos.ppo.make_train``, ``jaxsample.algos.dqn.make_train``)
is a frozen object of pure functions ``init(key) -> state`` and
``run(state, num_iterations) -> (state, metrics)``. :func:`run_training` vmaps
them over seeds, compiles one chunk of iterations (and the remainder, if any)
once, and runs the chunks back to back: between two chunks it only reads the
small per-iteration metrics, so the display costs one host round trip per chunk.
This is what ``jaxsample train`` runs. (Not to be confused with the
actor/learner runtime of :mod:`jaxsample.driver`, which overlaps collection and
learning on separate devices.)
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any, TextIO

import jax
import numpy as np


@dataclasses.dataclass
class TrainingResult:
    """What :func:`run_training` measured.

    Attributes:
      env_steps: ``[I]`` environment steps (all envs of one seed) after each
        iteration.
      returns: ``[S, I]`` mean return of the episodes completed in each
        iteration, per seed (NaN where none completed).
      compile_seconds: time spent compiling (init and the chunk programs).
      wall_seconds: time spent running, compile excluded.
      final_state: the vmapped trainer state.
    """

    env_steps: np.ndarray
    returns: np.ndarray
    compile_seconds: float
    wall_seconds: float
    final_state: Any

    @property
    def total_steps(self) -> int:
        """Environment steps per seed."""
        return int(self.env_steps[-1]) if len(self.env_steps) else 0

    def final_returns(self, window: int = 10) -> np.ndarray:
        """``[S]`` per-seed mean of the last ``window`` finite iteration returns."""
        out = []
        for curve in self.returns:
            finite = curve[np.isfinite(curve)]
            out.append(float(np.mean(finite[-window:])) if len(finite) else math.nan)
        return np.asarray(out)

    def summary(self, window: int = 10) -> dict[str, Any]:
        """The JSON-ready figures (``final_return`` is the mean over seeds)."""
        finals = self.final_returns(window)
        seeds = self.returns.shape[0]
        return {
            "final_return": float(np.nanmean(finals)) if np.isfinite(finals).any() else None,
            "final_return_per_seed": [None if not math.isfinite(x) else x for x in finals],
            "total_steps": self.total_steps,
            "seeds": seeds,
            "wall_seconds": self.wall_seconds,
            "compile_seconds": self.compile_seconds,
            "steps_per_second": self.total_steps * seeds / max(self.wall_seconds, 1e-9),
        }


def _chunk_size(num_iterations: int, chunks: int) -> int:
    """Iterations per compiled chunk: a divisor of ``num_iterations`` giving
    about ``chunks`` chunks when there is one (one program to compile), else
    ``ceil(num_iterations / chunks)`` and a remainder chunk."""
    target = max(1, math.ceil(num_iterations / max(chunks, 1)))
    for size in range(target, min(num_iterations, 2 * target) + 1):
        if num_iterations % size == 0:
            return size
    return min(num_iterations, target)


def run_training(
    trainer: Any,
    key: jax.Array,
    *,
    seeds: int,
    num_iterations: int,
    steps_per_iteration: int,
    chunks: int = 20,
    returns_of: Callable[[Any], Any] = lambda m: m["episode_return"],
    progress: Callable[[dict[str, float]], None] | None = None,
) -> TrainingResult:
    """Train ``seeds`` seeds at once (``jax.vmap``), ``num_iterations`` each.

    Args:
      trainer: has ``init(key)`` and ``run(state, num_iterations)``.
      key: a ``jax.random.key``; seed ``i`` uses ``fold_in(key, i)``.
      seeds: number of seeds trained together.
      num_iterations: iterations per seed.
      steps_per_iteration: environment steps of one seed per iteration.
      chunks: about how many compiled chunks to split the run into (the
        progress display updates after each).
      returns_of: picks the ``[..]`` per-iteration episode-return metric.
      progress: called after each chunk with ``steps``, ``steps_per_second``,
        ``recent_return`` and ``fraction``.
    """
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if num_iterations < 1:
        raise ValueError(f"num_iterations must be >= 1, got {num_iterations}")
    chunk = _chunk_size(num_iterations, chunks)
    n_full, rest = divmod(num_iterations, chunk)
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(np.arange(seeds))

    t0 = time.perf_counter()
    init = jax.jit(jax.vmap(trainer.init))
    state = jax.block_until_ready(init(keys))

    def chunk_program(n: int):
        return jax.jit(jax.vmap(lambda s: trainer.run(s, n)), donate_argnums=0)

    run_chunk = chunk_program(chunk).lower(state).compile()
    run_rest = chunk_program(rest).lower(state).compile() if rest else None
    compile_seconds = time.perf_counter() - t0

    returns: list[np.ndarray] = []
    wall = 0.0
    done = 0
    for fn, n in [(run_chunk, chunk)] * n_full + ([(run_rest, rest)] if rest else []):
        t0 = time.perf_counter()
        state, metrics = fn(state)
        r = np.asarray(jax.device_get(returns_of(metrics)), np.float64)  # [S, n]
        wall += time.perf_counter() - t0
        returns.append(r.reshape(seeds, n))
        done += n
        if progress is not None:
            recent = np.concatenate(returns, axis=1)[:, -max(1, chunk) :]
            finite = recent[np.isfinite(recent)]
            progress(
                {
                    "steps": done * steps_per_iteration,
                    "steps_per_second": done * steps_per_iteration * seeds / max(wall, 1e-9),
                    "recent_return": float(finite.mean()) if finite.size else math.nan,
                    "fraction": done / num_iterations,
                }
            )
    return TrainingResult(
        env_steps=np.arange(1, num_iterations + 1) * steps_per_iteration,
        returns=np.concatenate(returns, axis=1),
        compile_seconds=compile_seconds,
        wall_seconds=wall,
        final_state=state,
    )


def print_progress(stream: TextIO | None = None) -> Callable[[dict[str, float]], None]:
    """A progress callback: one updating line on a terminal, one line per chunk
    otherwise; ``stream`` defaults to the current ``sys.stdout``."""
    stream = sys.stdout if stream is None else stream
    tty = stream.isatty()

    def show(p: dict[str, float]) -> None:
        width = 24
        filled = round(p["fraction"] * width)
        bar = "#" * filled + "-" * (width - filled)
        ret = "n/a" if not math.isfinite(p["recent_return"]) else f"{p['recent_return']:.1f}"
        line = (
            f"[{bar}] {p['fraction']:6.1%}  steps {int(p['steps']):>10,}  "
            f"{p['steps_per_second']:>12,.0f} steps/s  recent return {ret}"
        )
        if tty:
            stream.write("\r" + line + ("\n" if p["fraction"] >= 1 else ""))
        else:
            stream.write(line + "\n")
        stream.flush()

    return show


def summary_table(result: TrainingResult, window: int = 10) -> str:
    """A plain-text table: one row per seed, then the mean."""
    finals = result.final_returns(window)
    lines = [f"{'seed':>6} {'final return':>14}"]
    for i, x in enumerate(finals):
        lines.append(f"{i:>6} {x:>14.1f}")
    lines.append(
        f"{'mean':>6} {np.nanmean(finals) if np.isfinite(finals).any() else math.nan:>14.1f}"
    )
    s = result.summary(window)
    lines.append(
        f"{s['total_steps']:,} steps per seed, {s['steps_per_second']:,.0f} steps/s "
        f"(all seeds), run {s['wall_seconds']:.1f} s, compile {s['compile_seconds']:.1f} s"
    )
    return "\n".join(lines)


def write_json(result: TrainingResult, path: str, extra: dict[str, Any] | None = None) -> None:
    """The summary, the settings in ``extra`` and the curves, as JSON."""
    data = {**(extra or {}), **result.summary()}
    data["curve"] = {
        "env_steps": result.env_steps.tolist(),
        "returns": [[None if not math.isfinite(x) else x for x in row] for row in result.returns],
    }
    with open(path, "w") as f:
        json.dump(data, f, indent=2)


def plot(result: TrainingResult, path: str, title: str = "") -> None:
    """A PNG learning curve: one line per seed and their mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    x = result.env_steps
    for i, curve in enumerate(result.returns):
        ax.plot(x, _smooth(curve), lw=0.8, alpha=0.5, label=f"seed {i}")
    with warnings.catch_warnings():  # all-NaN columns before the first episode
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(np.stack([_smooth(c) for c in result.returns]), axis=0)
    ax.plot(x, mean, lw=2.2, color="black", label="mean")
    ax.set_xlabel("environment steps (per seed)")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(result.returns) <= 10:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _smooth(curve: np.ndarray, window: int = 10) -> np.ndarray:
    """Running mean over the last ``window`` finite points (NaN before the first)."""
    out = np.full(curve.shape, np.nan)
    seen: list[float] = []
    for i, v in enumerate(curve):
        if np.isfinite(v):
            seen.append(float(v))
        if seen:
            out[i] = np.mean(seen[-window:])
    return out

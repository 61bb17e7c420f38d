"""Reporting a training run: the summary table, the JSON file and the PNG
learning curve of a [`TrainingResult`][jaxsample.runs.loop.TrainingResult] (what
``jaxsample train`` prints and writes; running it is
[`jaxsample.runs.loop`][jaxsample.runs.loop]'s)."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxsample.runs.loop import TrainingResult


def _mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else math.nan


def group_stats(finals: np.ndarray, groups: dict[str, Sequence[int]]) -> dict[str, dict]:
    """Per group of runs (a swept setting's seeds): ``mean``, ``std``, ``min``,
    ``max`` of their finite final returns and ``n`` (NaN where none is finite)."""
    out = {}
    for label, runs in groups.items():
        values = np.asarray(finals, np.float64)[list(runs)]
        finite = values[np.isfinite(values)]
        if not finite.size:
            finite = np.asarray([math.nan])
        out[label] = {
            "n": int(np.isfinite(finite).sum()),
            "mean": float(finite.mean()),
            "std": float(finite.std()),
            "min": float(finite.min()),
            "max": float(finite.max()),
        }
    return out


def summary_table(
    result: TrainingResult,
    window: int | None = None,
    labels: Sequence[str] | None = None,
    groups: dict[str, Sequence[int]] | None = None,
) -> str:
    """A plain-text table: one row per run (``labels``, default its index),
    then with ``groups`` (``{setting: run indices}``, a sweep) one row per
    setting (mean +- std and range over its seeds), then the mean, and what
    the figure is. The figure is each run's final return
    (`TrainingResult.final_returns`: the mean return of the episodes that
    ended in its last ``window`` iterations, default the run's
    ``recent_window``; the JSON's ``final_return``), or for a trainer that
    reports an evaluation its headline metric's latest value instead (a
    self-play game's return is 1 or 0 whatever is learned)."""
    name, score = next(iter(result.evaluation().items()), (None, None))
    if score is None:
        name, score, spec = "final return", result.final_returns(window), ".1f"
    else:
        spec = ".3f"
    labels = [str(i) for i in range(len(score))] if labels is None else list(labels)
    width = max(6, *(len(x) for x in labels), *(len(g) for g in groups or {}))
    cell = max(14, len(name))
    lines = [f"{'seed':>{width}} {name:>{cell}}"]
    for label, x in zip(labels, score, strict=True):
        lines.append(f"{label:>{width}} {x:>{cell}{spec}}")
    if groups:
        lines.append(f"{'setting':>{width}} {'mean':>{cell}} {'std':>7} {'min..max':>15} seeds")
        for label, g in group_stats(score, groups).items():
            span = f"{g['min']:{spec}}..{g['max']:{spec}}"
            mean, std = f"{g['mean']:>{cell}{spec}}", f"{g['std']:>7{spec}}"
            lines.append(f"{label:>{width}} {mean} {std} {span:>15} {g['n']}")
    lines.append(f"{'mean':>{width}} {_mean(score):>{cell}{spec}}")
    s = result.summary(window)
    if name == "final return":
        steps = s["recent_window"] * result.total_steps // max(len(result.env_steps), 1)
        lines.append(
            f"final return: the mean return of the episodes that ended in each run's last "
            f"{s['recent_window']} iterations ({steps:,} steps)"
        )
    else:
        lines.append(f"{name}: each run's latest evaluation")
    if result.start_iteration >= len(result.env_steps):
        lines.append(f"{s['total_steps']:,} steps per seed, restored (no iteration left to run)")
    else:
        lines.append(
            f"{s['total_steps']:,} steps per seed, {s['steps_per_second']:,.0f} steps/s "
            f"(all seeds), run {s['wall_seconds']:.1f} s, compile {s['compile_seconds']:.1f} s"
        )
    return "\n".join(lines)


def write_json(result: TrainingResult, path: str, extra: dict[str, Any] | None = None) -> None:
    """Write ``result.summary()``, ``extra`` (its keys win) and the curves
    (``returns`` per iteration, ``recent_returns`` as the CSV's
    ``recent_return``), as JSON, with ``interrupted`` (stopped early) and
    ``completed_iterations``."""
    data = {**result.summary(), **(extra or {})}
    data["interrupted"] = bool(result.interrupted)
    data["completed_iterations"] = len(result.env_steps)
    data["curve"] = {
        "env_steps": result.env_steps.tolist(),
        "returns": _rows(result.returns),
        "recent_returns": _rows(result.recent_returns()),
    }
    with open(path, "w") as f:
        json.dump(data, f, indent=2)


def _rows(values: np.ndarray) -> list[list[float | None]]:
    """``[R, I]`` as JSON rows (NaN: null)."""
    return [[None if not math.isfinite(x) else float(x) for x in row] for row in values]


#: Iterations of the running mean the PNG applies (it says so on its y axis).
SMOOTHING = 10


def plot(
    result: TrainingResult,
    path: str,
    title: str = "",
    labels: Sequence[str] | None = None,
    groups: dict[str, Sequence[int]] | None = None,
) -> None:
    """A PNG learning curve: each run's per-iteration returns (faint) and their
    running mean over the last `SMOOTHING` iterations with episodes; with
    several runs, the mean of those in black. With ``groups`` (``{setting:
    run indices}``, a sweep) one line per setting instead: the mean over its
    seeds of their running means, shaded from their minimum to maximum."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    x = result.env_steps
    labels = [f"seed {i}" for i in range(len(result.returns))] if labels is None else labels
    several = len(result.returns) > 1
    if groups:
        smooth = np.stack([_smooth(c, SMOOTHING) for c in result.returns])
        for label, runs in groups.items():
            part = smooth[list(runs)]
            with warnings.catch_warnings():  # all-NaN columns before the first episode
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(part, axis=0)
                low, high = np.nanmin(part, axis=0), np.nanmax(part, axis=0)
            line = ax.plot(x, mean, lw=1.8, label=f"{label} (mean of {len(runs)})")[0]
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, lw=0)
        several = False
        labels, curves = [], []
    else:
        curves = result.returns
    for name, curve in zip(labels, curves, strict=True):
        line = ax.plot(x, _smooth(curve, SMOOTHING), lw=0.9 if several else 1.8, label=name)[0]
        ax.plot(x, curve, lw=0.5, alpha=0.25, color=line.get_color())
    if several:
        with warnings.catch_warnings():  # all-NaN columns before the first episode
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(np.stack([_smooth(c, SMOOTHING) for c in result.returns]), axis=0)
        ax.plot(x, mean, lw=2.2, color="black", label="mean")
    ax.set_xlabel("environment steps (per run)")
    if groups:
        ax.set_ylabel(
            f"episode return (mean of last {SMOOTHING})\n(line: mean over seeds; band: min..max)"
        )
    else:
        ax.set_ylabel(f"episode return\n(faint: per iteration; line: mean of last {SMOOTHING})")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(groups or result.returns) <= 10:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _smooth(curve: np.ndarray, window: int = SMOOTHING) -> np.ndarray:
    """Running mean over the last ``window`` finite points (NaN before the first)."""
    out = np.full(curve.shape, np.nan)
    seen: list[float] = []
    for i, v in enumerate(curve):
        if np.isfinite(v):
            seen.append(float(v))
        if seen:
            out[i] = np.mean(seen[-window:])
    return out

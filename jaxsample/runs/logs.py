"""A run's metric logs: a CSV file, TensorBoard (tensorboardX) and Weights &
Biases, each when asked.

Every per-iteration metric the trainer returns is logged for every run, with
the run's environment steps as the x axis: the CSV has one row per (run,
iteration) with columns ``run``, ``seed``, the swept settings (``hparams.<field>``), ``iteration``,
``env_steps``, one column per metric and ``recent_return`` (the run's recent
return after the iteration, `jaxsample.runs.loop.recent_returns`: the figure
the live display shows and the closing table ends with); TensorBoard gets one sub-folder per
run (``seed0``, ``seed1_lr0.001``, ...: one series per seed) with scalars
``train/<metric>``; W&B one run per seed/setting in one group. Undefined
values (a NaN mean: no episode ended in that iteration) are empty in TensorBoard
and W&B, ``nan`` in the CSV. The CSV is written whole after every chunk,
beside and renamed into place (`jaxsample.runs.files`): an earlier run's
file is never truncated, and a stopped run leaves a complete one.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxsample.runs.files import write_text

__all__ = ["MetricLogs", "run_names"]


def run_names(seeds: Sequence[int], settings: Sequence[dict[str, float]]) -> list[str]:
    """One name per run: ``seed<s>`` plus ``_<field><value>`` per swept setting."""
    return [
        f"seed{s}" + "".join(f"_{k}{v:g}" for k, v in c.items())
        for s, c in zip(seeds, settings, strict=True)
    ]


class MetricLogs:
    """Writes the metrics of iterations as they arrive (`write`).

    Args:
      csv_path: the CSV file, or None for none (rewritten whole after every
        chunk, from ``iteration 0``; a resumed run rewrites the restored
        history first).
      seeds: the seed of each run.
      settings: the swept settings of each run.
      tensorboard: a folder for tensorboardX event files, or None.
      wandb_project: a W&B project name, or None (``WANDB_MODE=offline``
        works without network).
      config: the resolved configuration (W&B's run config).
    """

    def __init__(
        self,
        csv_path: str | None,
        seeds: Sequence[int],
        settings: Sequence[dict[str, float]],
        *,
        tensorboard: str | None = None,
        wandb_project: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.csv_path = csv_path
        self.seeds = list(seeds)
        self.settings = list(settings)
        self.names = run_names(self.seeds, self.settings)
        self._written = 0
        self._columns: list[str] | None = None
        self._csv = io.StringIO(newline="")
        self._tb = []
        self._wandb = []
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = [SummaryWriter(os.path.join(tensorboard, n)) for n in self.names]
        if wandb_project:
            import wandb

            for name, seed, setting in zip(self.names, self.seeds, self.settings, strict=True):
                run = wandb.init(
                    project=wandb_project,
                    name=name,
                    group="jaxsample-train",
                    config={**(config or {}), "seed": seed, **setting},
                    reinit="create_new",
                )
                run.define_metric("train/*", step_metric="env_steps")
                self._wandb.append(run)

    def write(
        self, metrics: dict[str, np.ndarray], steps_per_iteration: int,
        derived: dict[str, np.ndarray] | None = None,
    ) -> None:  # fmt: skip
        """Log the iterations of ``metrics`` (``[R, I]`` each, the whole
        history so far) that are not logged yet, with the ``derived`` figures
        of the run (``[R, I]`` each: ``recent_return``) in columns after the
        metrics'."""
        names = sorted(k for k in metrics if k != "env_steps")
        metrics = {**metrics, **(derived or {})}
        names += [k for k in derived or {} if k not in names]
        total = next(iter(metrics.values())).shape[1]
        if self._columns is None:
            swept = [f"hparams.{k}" for k in (self.settings[0] if self.settings else {})]
            self._columns = ["run", "seed", *swept, "iteration", "env_steps", *names]
            csv.writer(self._csv).writerow(self._columns)
        rows = []
        for i in range(self._written, total):
            env_steps = (i + 1) * steps_per_iteration
            for r in range(len(self.names)):
                values = {k: float(metrics[k][r, i]) for k in names}
                rows.append(
                    [r, self.seeds[r], *self.settings[r].values(), i, env_steps, *values.values()]
                )
                for k, v in values.items() if self._tb else ():
                    if math.isfinite(v):  # NaN: no episode ended in this iteration
                        self._tb[r].add_scalar(f"train/{k}", v, env_steps)
                if self._wandb:
                    finite = {f"train/{k}": v for k, v in values.items() if math.isfinite(v)}
                    self._wandb[r].log({"env_steps": env_steps, **finite})
        csv.writer(self._csv).writerows(rows)
        if self.csv_path:
            write_text(self.csv_path, self._csv.getvalue())
        for w in self._tb:
            w.flush()
        self._written = total

    def close(self) -> None:
        """Flush and close the writers."""
        for w in self._tb:
            w.close()
        for run in self._wandb:
            run.finish()
        self._tb, self._wandb = [], []

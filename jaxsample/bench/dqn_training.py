"""DQN end to end: ``jaxsample train --algo dqn``'s programs and
``reference_run``'s program (`jaxsample.bench.reference`), side by side in one process.

The DQN counterpart of `jaxsample.bench.training` (which has no DQN
peer to compare against: these are DQN's own figures, kept so that a change
of its compile cost shows). The two programs train the same
[`DQNConfig`][jaxsample.algos.configs.DQNConfig], ``seeds`` runs under one
``jax.vmap``:

* ``train`` — what ``jaxsample train --algo dqn`` compiles and runs
  (``runs.loop.run_training(..., one_program=True)``): init (its own program,
  ``runs.programs.compiler_options("init")``), then every iteration in ONE program
  (``compiler_options("run")``) that hands a progress event to the host
  every ``num_iterations / chunks`` iterations; the init compiles on a
  worker thread while the loop is traced and lowered, as in a run, so
  its compile time is the wall time of both (its stages: the two programs'
  sums);
* ``reference_run`` — ``jit(over_runs(trainer.train))`` (``vmap``, but
  for one run), the program ``reference_run`` compiles (XLA's default
  options).

Compile time is measured from scratch ``compile_reps`` times per program,
interleaved, after an uncounted warm-up round, in its three stages (tracing,
lowering, XLA's compile), with each program's size (jaxpr equations, HLO
fusions); run time is ``reps`` interleaved runs of each compiled program
(`compare_programs`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxsample._checks import check_int
from jaxsample.algos import dqn
from jaxsample.bench.measure import compare_programs
from jaxsample.bench.report import end_to_end_result, format_end_to_end, training_settings
from jaxsample.bench.training import train_programs
from jaxsample.runs import loop

PROGRAMS = ("train", "reference_run")


def _programs(config: dqn.DQNConfig, seeds: int, every: int) -> dict[str, tuple[list, tuple]]:
    """`train_programs` of a fresh DQN trainer."""
    return train_programs(dqn.make_train(config), seeds, every)


def _returns(name: str, out: Any) -> np.ndarray:
    """``[R, I]`` per-iteration mean returns (``train``'s metrics are ``[I, R]``)."""
    metrics = np.asarray(out[1]["episode_return_mean"])
    return metrics.T if name == "train" else metrics


def dqn_training(
    config: dqn.DQNConfig | None = None, *, seeds: int = 1, reps: int = 3, compile_reps: int = 3,
    chunks: int = 20,
) -> dict[str, Any]:  # fmt: skip
    """Compile and run ``train`` and ``reference_run`` (module docstring) side by side.

    Args:
      config: the DQN settings (default: ``DQNConfig()``, CartPole-v1, 5e5 steps).
      seeds: runs under one ``vmap`` (one: none, ``over_runs``).
      reps: interleaved timed runs of each program.
      compile_reps: interleaved from-scratch compiles of each program.
      chunks: progress events per ``train`` run.

    Returns:
      ``{"settings", "compile_s": {program: {"trace", "lower", "compile",
      "total", "all"}}, "size": {program: {"jaxpr_eqns", "hlo_fusions"}},
      "run_s": {program: {"median", "all"}}, "ratios":
      {"train/reference_run": {"run", "compile"}}, "final_return": {program:
      [R]}}``; the final return is the benchmarks' (`runs.loop.final_returns`),
      the mean of the last 10 iterations' episode returns (iterations that
      ended an episode).
    """
    config = dqn.DQNConfig() if config is None else config
    if not isinstance(config, dqn.DQNConfig):
        raise TypeError(f"config must be a DQNConfig, got {type(config).__name__}")
    for name, value in (("seeds", seeds), ("chunks", chunks)):
        check_int(name, value, 1)
    every = max(1, config.num_iterations // chunks)
    out = compare_programs(
        lambda: _programs(config, seeds, every), reps=reps, compile_reps=compile_reps
    )
    returns = {k: loop.final_returns(_returns(k, v)).tolist() for k, v in out["outputs"].items()}
    settings = training_settings(config, seeds=seeds, reps=reps, compile_reps=compile_reps)
    return end_to_end_result(settings, out, [("train", "reference_run")], returns)


def format_dqn_training(result: dict[str, Any]) -> str:
    """`dqn_training`'s result as a small text table."""
    return format_end_to_end("DQN", result)

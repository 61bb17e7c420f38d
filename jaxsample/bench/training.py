"""PPO end to end: ``jaxsample train``'s one program, ``reference_run``'s program
and a PureJaxRL-equivalent program, side by side in one process.

The three programs train the same [`PPOConfig`][jaxsample.algos.configs.PPOConfig]
(CleanRL's and PureJaxRL's CartPole settings by default), ``seeds`` runs under
one ``jax.vmap`` ([`over_runs`][jaxsample.runs.programs.over_runs]: one run is not
vmapped, in all three programs):

* ``train`` — what ``jaxsample train`` compiles and runs
  (``runs.loop.run_training(..., one_program=True)``): init (its own program,
  compiled with ``runs.programs.compiler_options("init")``), then every iteration
  in ONE program (``compiler_options("run")``) that hands a progress event
  to the host (an ordered ``io_callback``) every ``num_iterations / chunks``
  iterations (20 events, as the command gives); XLA compiles the init on a
  worker thread while the loop is traced and lowered, as a run does, so
  its compile time is the wall time of both, and its stages (the two
  programs' sums) add up to more;
* ``reference_run`` — ``jit(vmap(trainer.train))``, the program
  ``bench.reference.reference_run`` times;
* ``purejaxrl`` — `jaxsample.bench.purejaxrl`, PureJaxRL's ``ppo.py``
  written inline.

Compile time is measured from scratch ``compile_reps`` times per program,
interleaved, after one untimed round that warms the process up (each
compile after ``jax.clear_caches()``, JAX's persistent cache off), in its
three stages: tracing to a jaxpr (``jit(...).trace``), lowering to StableHLO
(``.lower()``) and XLA's compile (``.compile()``). Run time: ``reps``
interleaved runs of each compiled program
(`interleave`).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from jaxsample._checks import check_int
from jaxsample.algos import ppo
from jaxsample.bench import purejaxrl
from jaxsample.bench.measure import Part, compare_programs
from jaxsample.bench.report import end_to_end_result, format_end_to_end, training_settings
from jaxsample.runs import loop, programs
from jaxsample.runs.programs import over_runs

PROGRAMS = ("train", "reference_run", "purejaxrl")


def train_programs(trainer: Any, seeds: int, every: int) -> dict[str, tuple[list[Part], tuple]]:
    """A PPO or DQN trainer's ``train`` (the train command's init and one
    program, [`jaxsample.runs.programs`][jaxsample.runs.programs]) and ``reference_run``
    (``jit(over_runs(trainer.train))``) programs, fresh (new closures: nothing
    cached), with their arguments ``(keys, hparams)`` of ``seeds`` runs. Each
    returns all it computes, as the real one does (the final state and every
    metric), so nothing is left out of the program."""
    keys, hparams = loop.run_inputs(trainer, jax.random.key(0), seeds)
    program = programs.one_program(trainer, trainer.num_iterations, every)
    # called outside a run (token 0): its callbacks report to no one
    run = functools.partial(program, token=np.int32(0))
    return {
        "train": (
            [
                Part(
                    jax.jit(over_runs(trainer.init)),
                    programs.compiler_options("init"),
                    overlap=True,
                ),
                Part(jax.jit(run, donate_argnums=0), programs.compiler_options("run")),
            ],
            (keys, hparams),
        ),
        "reference_run": ([Part(jax.jit(over_runs(trainer.train)), {})], (keys, hparams)),
    }


def _programs(config: ppo.PPOConfig, seeds: int, every: int) -> dict[str, tuple[list[Part], tuple]]:
    """`train_programs` of a fresh PPO trainer, and the PureJaxRL peer's."""
    trainer = ppo.make_train(config)
    ours = train_programs(trainer, seeds, every)
    keys = ours["train"][1][0]
    peer = purejaxrl.make_train(config, trainer.env, trainer.env_params)
    return {**ours, "purejaxrl": ([Part(jax.jit(over_runs(peer)), {})], (keys,))}


def _returns(name: str, out: Any) -> np.ndarray:
    """``[R, I]`` per-iteration mean returns from a program's outputs."""
    if name == "purejaxrl":
        return np.asarray(purejaxrl.mean_returns(out["metrics"]))
    metrics = out[1]["episode_return_mean"]
    return np.asarray(metrics).T if name == "train" else np.asarray(metrics)


def training_comparison(
    config: ppo.PPOConfig | None = None,
    *,
    seeds: int = 1,
    reps: int = 3,
    compile_reps: int = 3,
    chunks: int = 20,
) -> dict[str, Any]:
    """Compile and run ``train``, ``reference_run`` and ``purejaxrl`` (module
    docstring) side by side.

    Args:
      config: the PPO settings (default: ``PPOConfig()``, 5e5 steps).
      seeds: runs under one ``vmap`` (one: none, ``over_runs``).
      reps: interleaved timed runs of each program.
      compile_reps: interleaved from-scratch compiles of each program.
      chunks: progress events per ``train`` run.

    Returns:
      ``{"settings", "compile_s": {program: {stage: median, "total": median,
      "all": [totals]}}, "size": {program: {"jaxpr_eqns", "hlo_fusions"}}
      (`program_size`), "run_s": {program:
      {"median", "all"}}, "ratios",
      "final_return": {program: [R]}}``; ``ratios`` holds ``train`` over
      ``reference_run`` and over ``purejaxrl``, and ``reference_run`` over
      ``purejaxrl``, for run time and total compile time (lower is better).
    """
    config = ppo.PPOConfig() if config is None else config
    if not isinstance(config, ppo.PPOConfig):
        raise TypeError(f"config must be a PPOConfig, got {type(config).__name__}")
    for name, value in (("seeds", seeds), ("reps", reps), ("compile_reps", compile_reps)):
        check_int(name, value, 1)
    check_int("chunks", chunks, 1)
    if config.recurrent:
        raise ValueError("the PureJaxRL peer is feedforward: config.recurrent must be False")
    every = max(1, config.num_iterations // chunks)
    measured = compare_programs(
        lambda: _programs(config, seeds, every), reps=reps, compile_reps=compile_reps
    )
    pairs = [("train", "reference_run"), ("train", "purejaxrl"), ("reference_run", "purejaxrl")]
    returns = {
        k: loop.final_returns(_returns(k, v)).tolist() for k, v in measured["outputs"].items()
    }
    settings = training_settings(config, seeds=seeds, reps=reps, compile_reps=compile_reps)
    return end_to_end_result(settings, measured, pairs, returns)


def format_training(result: dict[str, Any]) -> str:
    """The comparison as a small text table."""
    return format_end_to_end("PPO", result)

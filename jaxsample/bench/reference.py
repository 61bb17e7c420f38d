"""Reference runs: seeds x learning rates of any trainer under one ``jax.vmap``.

The synchronous reference that the driver benchmark and the training guide
quote (``jaxsample train --seeds 8 --preset none`` trains the same runs from
the command line). It uses only the [`Trainer`][jaxsample.algos.trainer.Trainer]
protocol, plus a greedy evaluation where the trainer has one (DQN's
``evaluate(state, key)``). A runner: it jits.

    from jaxsample.algos import ppo
    from jaxsample.bench.reference import reference_run

    report = reference_run(ppo.make_train(ppo.PPOConfig()), seeds=range(8))
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsample.algos.trainer import Trainer, train
from jaxsample.runs.programs import over_runs

__all__ = ["reference_run"]


def reference_run(
    trainer: Trainer,
    seeds: Sequence[int] = tuple(range(8)),
    *,
    lrs: Sequence[float] | None = None,
    tail_iterations: int | None = None,
    compiler: Callable[[Any, tuple], Any] | None = None,
) -> dict[str, Any]:
    """Train ``len(seeds)`` x ``len(lrs)`` runs of ``trainer`` under one ``jax.vmap``.

    Run ``i`` is seed ``seeds[i // len(lrs)]`` (key ``jax.random.key(seed)``)
    with learning rate ``lrs[i % len(lrs)]`` (default: the trainer's).
    ``compiler(jitted, args)`` returns the compiled program (default:
    ``jitted.lower(*args).compile()``): a benchmark's, to time its stages.

    Returns a dict: ``compile_s``, ``run_s`` (wall times), ``final_return``
    (per run, the ``average_return`` metric after the last iteration),
    ``tail_return`` (mean return of the episodes completed in the last
    ``tail_iterations`` iterations; default a tenth of the run), ``metrics``
    (numpy ``[runs, iterations]``), the ``seeds`` and ``lrs`` of each run, the
    final vmapped ``state``; for a trainer with ``evaluate(state, key)``,
    ``eval_return``: its ``episode_return_mean`` per run (key ``fold_in(key, 1)``).
    """
    seed_list = [int(s) for s in seeds]
    default_lr = float(np.asarray(trainer.hparams().lr))
    lr_list = [default_lr] if lrs is None else [float(x) for x in lrs]
    run_seeds = [s for s in seed_list for _ in lr_list]
    run_lrs = [lr for _ in seed_list for lr in lr_list]
    keys = jax.vmap(jax.random.key)(jnp.asarray(run_seeds, jnp.uint32))
    hparams = trainer.hparams(lr=jnp.asarray(run_lrs, jnp.float32))
    program = jax.jit(over_runs(lambda k, h: train(trainer, k, h)))
    t0 = time.perf_counter()
    if compiler is None:
        compiled = program.lower(keys, hparams).compile()
    else:
        compiled = compiler(program, (keys, hparams))
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = jax.block_until_ready(compiled(keys, hparams))
    run_s = time.perf_counter() - t0
    metrics = jax.tree.map(np.asarray, metrics)
    tail = tail_iterations or max(1, trainer.num_iterations // 10)
    returns = metrics["episode_return_mean"][:, -tail:]
    counts = metrics["n_episodes"][:, -tail:]
    tail_return = np.nansum(np.nan_to_num(returns) * counts, axis=1) / np.maximum(
        counts.sum(axis=1), 1
    )
    report = {
        "compile_s": compile_s,
        "run_s": run_s,
        "final_return": metrics["average_return"][:, -1],
        "tail_return": tail_return,
        "metrics": metrics,
        "seeds": run_seeds,
        "lrs": run_lrs,
        "state": state,
    }
    evaluate = getattr(trainer, "evaluate", None)
    if evaluate is not None:
        eval_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
        evaluation = jax.jit(jax.vmap(evaluate))(state, eval_keys)
        report["eval_return"] = np.asarray(evaluation["episode_return_mean"])
    return report

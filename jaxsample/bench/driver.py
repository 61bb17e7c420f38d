"""Benchmark of the actor/learner driver ([`jaxsample.driver`][jaxsample.driver]).

Two parts, each in one process:

* ``speed``: wall time for a fixed number of environment steps and updates,
  the same PPO / DQN work run four ways, interleaved
  (`interleave`), medians of ``--reps``:
  ``fused`` (``jax.jit(trainer.run)``: the whole loop one program on one
  device, the project's normal synchronous path), ``sync`` (the driver's sync
  mode with one buffer: collect, then learn, alternating, through the host),
  ``sync-2buf`` (the sync mode with the double buffer's schedule) and
  ``async`` (actor and learner threads, double buffer). It also reports the
  per-batch collect and learn times and the best async can do,
  ``(collect + learn) / max(collect, learn)``; the fused program's compile
  by stage (trace, lower, XLA) and size (jaxpr equations, HLO fusions:
  `compile_parts`), and the drivers' first
  two batches (their collect and learn compiled).
* ``scores``: full-budget PPO and DQN CartPole runs through the async driver,
  one seed at a time (final average return, greedy evaluation for DQN,
  staleness, replay ratio), next to the synchronous reference of the same
  seeds (``bench.reference.reference_run`` of the trainer: its compile by
  stage, size and run time too).

``python -m jaxsample.bench.driver``: actor and learner default to devices 0
and 1 (the same device where there is one), or ``--actor-device gpu:0
--learner-device gpu:0``; a device that does not exist is one line and exit
status 2, before anything is built. On a CPU, ``--host-devices 4`` fabricates
4 host devices (the runner restarts itself with
``XLA_FLAGS=--xla_force_host_platform_device_count=4``) and says so; without
it only the devices that exist are used
(`jaxsample.bench.device_requests`). This module is a
runner: it jits.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

import jaxsample.algos.drivers as jd
from jaxsample.algos import registry
from jaxsample.algos.configs import DQNConfig, PPOConfig
from jaxsample.bench import device_requests
from jaxsample.bench.measure import Part, compile_parts, fresh_compiles, interleave, time_once
from jaxsample.bench.reference import reference_run
from jaxsample.errors import UsageError

#: name -> (algorithm, config, iterations per driver batch)
WORKLOADS: dict[str, tuple[str, Any, int]] = {
    # CleanRL's CartPole PPO: 4 envs x 128 steps, 4 epochs x 4 minibatches
    "ppo": ("ppo", PPOConfig(), 1),
    # more envs per batch, one epoch: collection is a larger share
    "ppo-64x128": (
        "ppo",
        PPOConfig(num_envs=64, num_steps=128, update_epochs=1, num_minibatches=4),
        1,
    ),
    # the reference DQN (10 envs x 1 step, 1 update per iteration), 100 iterations
    # (1000 steps, 100 updates) per driver batch, learning from the first step
    "dqn": ("dqn", DQNConfig(learning_starts=0), 100),
}


def _fused_seconds(run: Callable, state: Any) -> float:
    """Seconds of one fused run (the compiled ``trainer.run``), blocked until done."""
    return time_once(run, state)[1]


def _compile_into(into: dict[str, Any], jitted: Any, args: tuple) -> Any:
    """A ``compiler`` for ``reference_run``: compile ``jitted`` for ``args``
    from scratch, its seconds by stage in ``into["compile_s"]`` and its size
    in ``into["size"]``."""
    with fresh_compiles():
        (exe,), seconds, into["size"] = compile_parts([Part(jitted, {})], args)
    into["compile_s"] = seconds  # by stage, and their "total"
    return exe


def _compile_line(name: str, compile_s: dict[str, float], size: dict[str, int]) -> str:
    """``name compile X s (trace, lower, XLA), eqns, fusions``: one program's compile."""
    c = compile_s
    return (
        f"{name} compile {c['total']:.2f} s (trace {c['trace']:.2f}, lower {c['lower']:.2f}, "
        f"XLA {c['compile']:.2f}), {size['jaxpr_eqns']} eqns, {size['hlo_fusions']} fusions"
    )


def _driver_seconds(
    d: jd.Driver, key: jax.Array, batches: int, results: list[jd.DriverResult]
) -> Callable[[], float]:
    """A self-timed callable: one driver run kept in ``results``; returns its own
    wall time (the states' set-up excluded)."""

    def train() -> float:
        results.append(d.train(key, batches))
        return results[-1].wall_seconds

    return train


def speed(
    names: Sequence[str],
    *,
    batches: int,
    reps: int,
    actor: jax.Device,
    learner: jax.Device,
) -> list[dict[str, Any]]:
    """Interleaved wall times of ``fused`` / ``sync`` / ``sync-2buf`` / ``async``."""
    rows = []
    for name in names:
        algo, config, k = WORKLOADS[name]
        algorithm = registry.get(algo)
        trainer = algorithm.make_train(config)
        base = algorithm.make_driver(trainer, k, actor_devices=[actor], learner_device=learner)
        drivers = {
            "sync": base.replace(mode="sync", num_buffers=1),
            "sync-2buf": base.replace(mode="sync"),
            "async": base,
        }
        key = jax.random.key(0)
        iterations = batches * k
        run = jax.jit(functools.partial(trainer.run, num_iterations=iterations))
        state0 = jax.device_put(trainer.init(key), learner)
        with fresh_compiles():
            (fused,), seconds, size = compile_parts([Part(run, {})], (state0,))

        results: dict[str, list[jd.DriverResult]] = {mode: [] for mode in drivers}
        fns = {"fused": functools.partial(_fused_seconds, fused, state0)}
        fns.update({m: _driver_seconds(d, key, batches, results[m]) for m, d in drivers.items()})
        warmup = {}
        for m, d in drivers.items():  # compiles collect and learn on their devices
            t0 = time.perf_counter()
            d.train(key, 2)
            warmup[m] = time.perf_counter() - t0
        times = interleave(fns, reps=reps, self_timed=list(fns))
        collect_ms = [1e3 * r.collect_seconds[0] / batches for r in results["sync"]]
        learn_ms = [1e3 * r.learn_seconds / batches for r in results["sync"]]
        staleness = max(r.staleness_max for r in results["async"])
        med = {m: statistics.median(v) for m, v in times.items()}
        c, lrn = statistics.median(collect_ms), statistics.median(learn_ms)
        steps = batches * k * config.steps_per_iteration
        updates = batches * k * algorithm.updates_per_iteration(config)
        rows.append(
            {
                "workload": name,
                "env_steps": steps,
                "updates": updates,
                "batches": batches,
                "seconds": med,
                "sync_over_async": med["sync"] / med["async"],
                "fused_over_async": med["fused"] / med["async"],
                "collect_ms_per_batch": c,
                "learn_ms_per_batch": lrn,
                "async_bound": (c + lrn) / max(c, lrn),
                "async_max_staleness": staleness,
                "compile_s": {"fused": seconds},
                "size": {"fused": size},
                "driver_warmup_s": warmup,
                "reps": reps,
            }
        )
        print(_speed_line(rows[-1]), flush=True)
        print(
            "  " + _compile_line("fused", rows[-1]["compile_s"]["fused"], size) + "; drivers' "
            "first 2 batches (their collect and learn compiled): "
            + ", ".join(f"{m} {s:.2f} s" for m, s in warmup.items()),
            flush=True,
        )
    return rows


def _speed_line(r: dict[str, Any]) -> str:
    modes = "  ".join(f"{mode} {seconds:.3f} s" for mode, seconds in r["seconds"].items())
    return (
        f"{r['workload']:<11} {r['env_steps']:>8,} steps {r['updates']:>6,} updates | "
        f"{modes} | sync/async {r['sync_over_async']:.2f} "
        f"(bound {r['async_bound']:.2f})  fused/async {r['fused_over_async']:.2f} | "
        f"collect {r['collect_ms_per_batch']:.2f} ms learn {r['learn_ms_per_batch']:.2f} ms "
        f"per batch"
    )


def _reference(algorithm: registry.Algorithm, config: Any, seeds: Sequence[int]) -> tuple:
    """``(report, staged)``: ``reference_run`` of ``seeds`` (fused, under one
    ``vmap``) and its program's compile by stage, size and run time; printed."""
    staged: dict[str, Any] = {}
    compiler = functools.partial(_compile_into, staged)
    ref = reference_run(algorithm.make_train(config), seeds, compiler=compiler)
    staged["run_s"] = ref["run_s"]
    print(
        f"{algorithm.name} sync reference, seeds {ref['seeds']} under one vmap: "
        + _compile_line("program", staged["compile_s"], staged["size"])
        + f"; run {ref['run_s']:.2f} s",
        flush=True,
    )
    for i, seed in enumerate(ref["seeds"]):
        extra = f", greedy eval {ref['eval_return'][i]:.1f}" if algorithm.greedy_eval else ""
        print(
            f"{algorithm.name} seed {seed} sync reference: final average_return "
            f"{ref['final_return'][i]:.1f}{extra}",
            flush=True,
        )
    return ref, staged


def _score_row(
    algorithm: registry.Algorithm, trainer: Any, seed: int, r: jd.DriverResult,
    reference: tuple | None,
) -> dict[str, Any]:  # fmt: skip
    """One seed's driver run (``r``) as a row, beside its ``reference`` run."""
    state, config = r.learner_state, trainer.config
    row = {
        "algo": algorithm.name,
        "seed": int(seed),
        "final_return": float(np.asarray(r.metrics["average_return"]).reshape(-1)[-1]),
        "env_steps": r.env_steps,
        "wall_seconds": r.wall_seconds,
        "max_staleness": r.staleness_max,
        "mean_staleness": float(np.mean(r.records["staleness"])),
        "batches": len(r.records["index"]),
    }
    if reference is not None:
        ref, staged = reference
        i = ref["seeds"].index(int(seed))
        row["sync_final_return"] = float(ref["final_return"][i])
        # the reference program's (all seeds under one vmap)
        row["sync_compile_s"] = staged["compile_s"]
        row["sync_size"] = staged["size"]
        row["sync_run_s"] = staged["run_s"]
        if algorithm.greedy_eval:
            row["sync_eval_return"] = float(ref["eval_return"][i])
    if algorithm.greedy_eval:
        evaluation = jax.jit(trainer.evaluate)(state, jax.random.fold_in(jax.random.key(seed), 1))
        row["eval_return"] = float(evaluation["episode_return_mean"])
    if algorithm.replay:
        learning_steps = r.env_steps - config.learning_starts + config.steps_per_iteration
        row["updates"] = int(state.updates)
        row["replay_ratio"] = int(state.updates) / learning_steps
        row["replay_ratio_setting"] = config.gradient_steps / config.steps_per_iteration
    return row


def _score_line(row: dict[str, Any]) -> str:
    extra = f", greedy eval {row['eval_return']:.1f}" if "eval_return" in row else ""
    if "replay_ratio" in row:
        extra += (
            f", replay ratio {row['replay_ratio']:.4f} (setting {row['replay_ratio_setting']:.4f})"
        )
    return (
        f"{row['algo']} seed {row['seed']}: final average_return {row['final_return']:.1f}"
        f"{extra}, staleness max {row['max_staleness']} mean {row['mean_staleness']:.2f}, "
        f"{row['wall_seconds']:.1f} s"
    )


def scores(
    algos: Sequence[str],
    seeds: Sequence[int],
    *,
    actor: jax.Device,
    learner: jax.Device,
    dqn_iterations_per_batch: int = 100,
    reference: bool = True,
) -> list[dict[str, Any]]:
    """Full-budget runs (default configs) through the async driver, one seed at a
    time, next to the synchronous reference (``reference_run``: the same seeds
    under one ``vmap``, fused) when ``reference``. ``dqn_iterations_per_batch``:
    the trainer iterations of one driver batch, where the algorithm's driver
    takes several (DQN's)."""
    rows = []
    for algo in algos:
        algorithm = registry.get(algo)
        config = algorithm.config()
        trainer = algorithm.make_train(config)
        ref = _reference(algorithm, config, seeds) if reference else None
        d = algorithm.make_driver(
            trainer, dqn_iterations_per_batch, actor_devices=[actor], learner_device=learner
        )
        for seed in seeds:
            rows.append(_score_row(algorithm, trainer, seed, d.train(jax.random.key(seed)), ref))
            print(_score_line(rows[-1]), flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m jaxsample.bench.driver [--part speed|scores|all] ...``; bad
    input (a device that does not exist, an unknown workload) is a
    `jaxsample.errors.UsageError`, raised before anything is built."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        description="Benchmark of the actor/learner driver (jaxsample.driver)."
    )
    parser.add_argument("--part", choices=("speed", "scores", "all"), default="all")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--batches", type=int, default=40, help="driver batches per timing")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--algos", default="ppo,dqn")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--actor-device", default=None, help="e.g. cpu:0 or gpu:0")
    parser.add_argument("--learner-device", default=None, help="e.g. cpu:1 or gpu:0")
    device_requests.add_host_devices_flag(parser)
    parser.add_argument(
        "--no-reference", action="store_true", help="skip the synchronous reference runs"
    )
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    device_requests.request_host_devices(args.host_devices, "jaxsample.bench.driver", argv)
    # every request checked before anything is built
    names = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        raise UsageError(f"--workloads: unknown {unknown}; known: {list(WORKLOADS)}")
    algos = [a for a in args.algos.split(",") if a]
    if any(a not in registry.ALGORITHMS for a in algos):
        raise UsageError(f"--algos {args.algos!r}: some of {', '.join(registry.ALGORITHMS)}")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        raise UsageError(f"--seeds {args.seeds!r}: comma-separated ints") from None
    devices = jax.devices()
    actor = device_requests.parse_device(args.actor_device, devices[0], "--actor-device")
    learner = device_requests.parse_device(
        args.learner_device, devices[1] if len(devices) > 1 else devices[0], "--learner-device"
    )
    line = device_requests.host_devices_line(args.host_devices)
    if line:
        print(line, flush=True)
    print(
        f"jax {jax.__version__}, backend {jax.default_backend()}, {len(devices)} devices; "
        f"actor {actor}, learner {learner}; {os.cpu_count()} CPUs",
        flush=True,
    )
    out: dict[str, Any] = {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "actor": str(actor),
        "learner": str(learner),
    }
    t0 = time.perf_counter()
    if args.part in ("speed", "all"):
        out["speed"] = speed(
            names, batches=args.batches, reps=args.reps, actor=actor, learner=learner
        )
    if args.part in ("scores", "all"):
        out["scores"] = scores(
            algos, seeds, actor=actor, learner=learner, reference=not args.no_reference
        )
    out["total_seconds"] = time.perf_counter() - t0
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)


if __name__ == "__main__":
    sys.exit(device_requests.run_main(main, "python -m jaxsample.bench.driver"))

"""The grid behind ``jaxsample bench``, and the overhead measurement.

[`run_grid`][jaxsample.bench.run_grid] measures, for every cell ``(env, B, T)`` of a
[`GridSpec`][jaxsample.bench.GridSpec],
the same ``T`` steps of ``B`` environments done by each method of ``METHODS``:

* ``"bare"`` — the floor: a hand-written ``lax.scan(vmap(env.step))`` with
  random actions that stores observation, action, reward and done
  ([`bare_rollout`][jaxsample.bench.bare_rollout]);
* ``"random"`` — ``sampler.collect`` with a [`RandomAgent`][jaxsample.agents.RandomAgent]
  and the default options (what [`overhead`][jaxsample.bench.overhead] measures);
* ``"pool"`` — ``"random"`` with cheap resets (``reset_pool=8``, at most the
  default block, docs/guides/cheap-resets.md);
* ``"bare_mlp"`` — the hand-written floor of a learning agent: PureJaxRL's
  rollout, ``lax.scan`` over the MLP's forward pass and ``vmap(env.step)``
  (`bare_mlp_rollout`), the floor of ``"mlp"``;
* ``"mlp"`` — ``sampler.collect`` with PPO's actor-critic (a 64x64 tanh MLP,
  [`CategoricalActorCritic`][jaxsample.agents.CategoricalActorCritic], or the Gaussian one for a
  ``Box`` action space): sampling plus a forward pass per step;
* ``"gymnasium"`` — gymnasium's synchronous vector env of the numpy
  environment (``gymnasium.make_vec(..., vectorization_mode="sync")``);
* ``"envpool"`` — envpool's C++ pool (``envpool.make(..., env_type="gymnasium")``).

The last two are the peers a user would compare with. They run on the host CPU
whatever the JAX backend, are looked up when the grid runs (the ``bench`` extra
installs them), and a missing one becomes a note in the result, not an error.
They step with uniformly random actions drawn by numpy and write the same four
``[T, B]`` arrays as the floor into preallocated numpy buffers; they exist for
the classic-control envs of ``PEER_ENVS`` only, and are capped at
``B <= peer_max_B`` (a Python loop over host envs at ``B = 2**16`` takes minutes).

How a cell is measured (one process, one device):

1. Every method is built: JAX methods are ``jax.jit(..., donate_argnums=0)``
   lowered and compiled, timed alone (``compile_s``); a peer's ``compile_s`` is
   the time to construct and reset its envs.
2. Warm-up: each method runs ``warmup`` calls; the last one's time sets
   ``calls_per_rep`` so that one repetition lasts at least ``min_rep_seconds``
   (short calls are otherwise all timer and dispatch noise).
3. ``reps`` repetitions, interleaved method by method (the order reversed on
   every other repetition), so the machine's noise hits all methods alike. Each
   repetition's time is divided by ``calls_per_rep``; the median and quartiles
   are reported, and ``ratio_to_floor = median(floor) / median(method)``
   against the method's own floor (``floor``: ``bare_mlp`` for ``mlp``,
   ``bare`` for the others; `floor_of`)
   (throughput relative to the floor, higher is better) with the quartiles of
   the per-repetition (paired) ratios as its spread. ``ratio_to_floor_best =
   min(floor) / min(method)`` compares the fastest repetitions: other work on
   the machine only ever adds time, so on a busy machine it is the steadier
   estimate of what the programs themselves cost.
4. Peak memory of the JAX methods comes from the compiled executable's memory
   analysis (argument + output + temporaries - aliased bytes; ``None`` where the
   backend reports none); ``output_bytes`` is the size of what one call returns
   besides its carried state (the Batch, or the floor's four arrays).

B grows as far as memory and time allow: a cell whose JAX methods would need
more than ``memory_budget_bytes`` (estimated from shapes before anything is
allocated, then checked against the memory analysis), that runs out of device
memory, or one of whose calls takes longer than ``max_call_seconds``, stops the
larger ``B`` of that ``(env, T)``; each skip is listed in the result with its
reason.

The result is a JSON-ready dict described by
`RESULT_SCHEMA` (a JSON Schema);
`jaxsample.bench.report` presents it.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jaxsample._checks import check_int as _check_int
from jaxsample.bench.measure import (
    DEFAULT_MIN_REP_SECONDS,
    JaxPlan,
    Program,
    bare_mlp_plan,
    bare_plan,
    is_oom,
    measure,
    mlp_agent,
    mlp_params,
    pool_size,
    quartiles,
    random_plan,
    ratio,
    sampler_plan,
)
from jaxsample.bench.peers import PEER_ENVS, PEER_MAKERS, host_program
from jaxsample.bench.report import cell_line
from jaxsample.bench.schema import (
    FLOOR,
    JAX_METHODS,
    METHODS,
    PEER_METHODS,
    SCHEMA_VERSION,
    floor_of,
)
from jaxsample.bench.system import import_optional, system_info
from jaxsample.envs import suites
from jaxsample.sampler import make_sampler
from jaxsample.types import BatchSpec


def overhead(
    env_name: str,
    *,
    B: int = 1024,
    T: int = 128,
    reps: int = 9,
    final_observation: str = "sparse",
    seed: int = 0,
    min_rep_seconds: float = DEFAULT_MIN_REP_SECONDS,
) -> dict[str, Any]:
    """Measure ``collect`` (RandomAgent, default options) against the bare floor.

    The same programs and the same timing as the ``"random"`` and ``"bare"``
    methods of a [`run_grid`][jaxsample.bench.run_grid] cell (``ratio`` here is that cell's
    ``ratio_to_floor`` of ``"random"``).

    Returns a dict with ``env``, ``B``, ``T``, compile seconds of both,
    median/min/max run seconds of both, steps per second of both, ``ratio``
    (sampler throughput / bare throughput, higher is better), and the
    sampler's peak memory relative to the size of the Batch it returns.
    """
    env, env_params = suites.make(env_name)
    key = jax.random.key(seed)
    programs = {
        "sampler": random_plan(env, env_params, T, B, final_observation).build(key),
        "bare": bare_plan(env, env_params, T, B).build(key),
    }
    times, _ = measure(programs, reps=reps, min_rep_seconds=min_rep_seconds)
    med = {k: statistics.median(v) for k, v in times.items()}
    peak = programs["sampler"].peak_bytes
    batch_bytes = programs["sampler"].output_bytes
    return {
        "env": env_name,
        "B": B,
        "T": T,
        "final_observation": final_observation,
        "compile_s": {k: p.compile_s for k, p in programs.items()},
        "run_s": {k: {"median": med[k], "min": min(v), "max": max(v)} for k, v in times.items()},
        "steps_per_s": {k: T * B / med[k] for k in med},
        "ratio": ratio(times["bare"], times["sampler"]),
        "batch_bytes": batch_bytes,
        "peak_bytes": peak,
        "peak_over_batch": None if peak is None else peak / batch_bytes,
    }


def _check_sizes(name: str, values: Any) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a sequence of positive ints, got {values!r}")
    if not values:
        raise ValueError(f"{name} must not be empty")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must contain positive ints, got {values!r}")
    return tuple(sorted({int(v) for v in values}))


def _check_seconds(name: str, value: Any, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")


@dataclasses.dataclass(frozen=True)
class GridSpec:
    """What [`run_grid`][jaxsample.bench.run_grid] measures; validated when constructed.

    Attributes:
      envs: gymnax environment names.
      Bs: numbers of environments (sorted, deduplicated); the default is
        ``1, 4, 16, ..., 65536``, as far as memory and time allow.
      Ts: steps per call.
      methods: a subset of `METHODS`.
      reps: timed repetitions per method and cell (interleaved).
      warmup: untimed calls per method and cell before the repetitions.
      peer_max_B: the host peers run only at ``B <= peer_max_B``.
      min_rep_seconds: a repetition repeats the call until it lasts about
        this long (``calls_per_rep``); 0 for one call per repetition.
      max_call_seconds: once a JAX method's median call takes longer, the
        larger ``B`` of that ``(env, T)`` are skipped; ``None`` for no limit.
      memory_budget_bytes: cells whose JAX methods would need more are skipped;
        ``None`` for half the device's memory (the host's RAM on CPU).
      seed: the key of every method's state.
    """

    envs: Sequence[str] = ("CartPole-v1", "Breakout-MinAtar")
    Bs: Sequence[int] = tuple(4**i for i in range(9))
    Ts: Sequence[int] = (128,)
    methods: Sequence[str] = METHODS
    reps: int = 9
    warmup: int = 1
    peer_max_B: int = 1024
    min_rep_seconds: float = DEFAULT_MIN_REP_SECONDS
    max_call_seconds: float | None = 5.0
    memory_budget_bytes: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        envs = self.envs
        if isinstance(envs, str) or not isinstance(envs, Sequence) or not envs:
            raise ValueError(f"envs must be a non-empty sequence of env names, got {envs!r}")
        for e in envs:
            if not suites.is_env_name(e):
                raise ValueError(
                    f"envs: {e!r} is not a gymnax environment nor '<suite>/<env>' "
                    f"with a suite of {sorted(suites.SUITES)}"
                )
        object.__setattr__(self, "envs", tuple(dict.fromkeys(envs)))
        object.__setattr__(self, "Bs", _check_sizes("Bs", self.Bs))
        object.__setattr__(self, "Ts", _check_sizes("Ts", self.Ts))
        methods = self.methods
        if isinstance(methods, str) or not isinstance(methods, Sequence) or not methods:
            raise ValueError(f"methods must be a non-empty sequence, got {methods!r}")
        unknown = [m for m in methods if m not in METHODS]
        if unknown:
            raise ValueError(f"methods: unknown {unknown}; choose from {list(METHODS)}")
        object.__setattr__(self, "methods", tuple(m for m in METHODS if m in methods))
        _check_int("reps", self.reps, 1)
        _check_int("warmup", self.warmup, 1)
        _check_int("peer_max_B", self.peer_max_B, 1)
        _check_int("seed", self.seed, 0)
        _check_seconds("min_rep_seconds", self.min_rep_seconds, allow_none=False)
        _check_seconds("max_call_seconds", self.max_call_seconds, allow_none=True)
        if self.memory_budget_bytes is not None:
            _check_int("memory_budget_bytes", self.memory_budget_bytes, 1)

    @classmethod
    def quick(cls, **overrides: Any) -> GridSpec:
        """The ``--quick`` grid (about two minutes on a 2-core CPU): CartPole-v1 and
        Breakout-MinAtar at ``B`` = 1, 32, 1024 and ``T`` = 128, 7 repetitions,
        every method; ``overrides`` replace any field."""
        settings: dict[str, Any] = {
            "envs": ("CartPole-v1", "Breakout-MinAtar"),
            "Bs": (1, 32, 1024),
            "Ts": (128,),
            "reps": 7,
            "peer_max_B": 1024,
        }
        settings.update(overrides)
        return cls(**settings)

    def as_dict(self) -> dict[str, Any]:
        """The settings, JSON-ready."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _jsonable(x: Any) -> Any:
    return list(x) if isinstance(x, tuple) else x


def _method_row(
    program: Program,
    times: list[float],
    calls: int,
    floor_times: list[float] | None,
    steps: int,
) -> dict[str, Any]:
    q25, _, q75 = quartiles(times)
    row: dict[str, Any] = {
        "host": program.host,
        "compile_s": program.compile_s,
        "calls_per_rep": calls,
        "run_s": {
            "median": statistics.median(times),
            "q25": q25,
            "q75": q75,
            "min": min(times),
            "max": max(times),
        },
        "times_s": list(times),
        "steps_per_s": {
            "median": steps / statistics.median(times),
            "q25": steps / q75,
            "q75": steps / q25,
            "best": steps / min(times),
        },
        "ratio_to_floor": None,
        "ratio_to_floor_spread": None,
        "ratio_to_floor_best": None,
        "peak_bytes": program.peak_bytes,
        "output_bytes": program.output_bytes,
    }
    if floor_times is not None:
        row["ratio_to_floor"] = ratio(floor_times, times)
        row["ratio_to_floor_best"] = min(floor_times) / min(times)
        paired = [f / t for f, t in zip(floor_times, times, strict=True)]
        lo, _, hi = quartiles(paired)
        row["ratio_to_floor_spread"] = [lo, hi]
    return row


@dataclasses.dataclass(frozen=True)
class _Run:
    """One run of the grid: its spec, its key, the JAX methods' memory budget,
    and the lists the cells' skips go to."""

    spec: GridSpec
    key: jax.Array
    budget: int | None
    skipped: list[dict[str, Any]]

    def skip(self, where: tuple[str, int, int], methods: Sequence[str], reason: str) -> None:
        env_name, B, T = where
        for m in methods:
            self.skipped.append({"env": env_name, "B": B, "T": T, "method": m, "reason": reason})

    def gib(self, n: float) -> str:
        return f"{n / 2**30:.2f} GiB"


@dataclasses.dataclass(frozen=True)
class _Env:
    """One env of the grid and what its cells build from: the JAX methods it
    runs, the MLP agent and its parameters (None without ``mlp`` methods) and
    the host peers' modules."""

    name: str
    env: Any
    env_params: Any
    methods: tuple[str, ...]
    agent: Any
    params: Any
    peers: dict[str, Any]

    def plan(self, method: str, T: int, B: int) -> JaxPlan:
        """The JAX ``method``'s program at ``[T, B]``, before anything is allocated."""
        env, env_params = self.env, self.env_params
        if method == "bare":
            return bare_plan(env, env_params, T, B)
        if method == "random":
            return random_plan(env, env_params, T, B)
        if method == "pool":
            return random_plan(env, env_params, T, B, reset_pool=pool_size(B))
        if method == "bare_mlp":
            return bare_mlp_plan(env, env_params, self.agent, self.params, T, B)
        sampler = make_sampler(env, env_params, self.agent, BatchSpec(T, B))
        return sampler_plan(sampler, self.params)


def _peers(spec: GridSpec, cpu_count: int | None, notes: list[str]) -> dict[str, Any]:
    """The host peers of ``spec.methods`` that import, a note for each that
    does not and for what the others are."""
    peers: dict[str, Any] = {}
    for m in spec.methods:
        if m in PEER_METHODS:
            module = import_optional(m)
            if module is None:
                notes.append(
                    f"{m} is not installed: skipped (pip install 'jaxsample[bench]' "
                    "installs the peers)"
                )
            else:
                peers[m] = module
    if peers:
        notes.append(
            f"host peers ({', '.join(peers)}) run on the host CPU ({cpu_count} "
            f"cores) whatever the JAX backend, with numpy random actions, only at "
            f"B <= {spec.peer_max_B} (peer_max_B), and only for {sorted(PEER_ENVS)}"
        )
    if "envpool" in peers:
        notes.append(
            "envpool resets an env on the step after it ends (that step's action is "
            "ignored); gymnax and the gymnasium peer reset within the ending step"
        )
    return peers


def _budget(spec: GridSpec, system: dict[str, Any], notes: list[str]) -> int | None:
    """``spec.memory_budget_bytes``, or half the device's memory (the host's)."""
    budget = spec.memory_budget_bytes
    if budget is None:
        total = system["device_memory_bytes"] or system["host_memory_bytes"]
        budget = total // 2 if total else None
    if budget is not None:
        notes.append(f"memory budget for the JAX methods: {budget / 2**30:.2f} GiB")
    return budget


def _env(name: str, run: _Run, peers: dict[str, Any], notes: list[str]) -> _Env:
    """The env ``name`` made, with the methods and peers it runs."""
    env, env_params = suites.make(name)
    methods = [m for m in run.spec.methods if m in JAX_METHODS]
    uses_mlp = {"mlp", "bare_mlp"} & set(methods)
    agent = mlp_agent(env, env_params) if uses_mlp else None
    if uses_mlp and agent is None:
        methods = [m for m in methods if m not in uses_mlp]
        notes.append(f"mlp: no actor-critic for {name}'s action space; skipped")
    params = None if agent is None else mlp_params(agent, env, env_params, run.key)
    env_peers = peers if name in PEER_ENVS else {}
    if peers and not env_peers:
        notes.append(f"no host peer for {name}")
    return _Env(name, env, env_params, tuple(methods), agent, params, env_peers)


def _plans(run: _Run, env: _Env, T: int, B: int) -> tuple[dict[str, JaxPlan], str | None]:
    """The JAX methods' plans of a cell, or none (skips) and the reason to
    stop growing ``B`` when their shapes alone exceed the budget."""
    plans = {m: env.plan(m, T, B) for m in env.methods}
    if plans and run.budget is not None:
        sizes = [p.estimate_bytes(run.key) for p in plans.values()]
        need = sum(s for s, _ in sizes) + max(o for _, o in sizes)
        if need > run.budget:
            stop = f"needs about {run.gib(need)} > budget {run.gib(run.budget)} at B={B}"
            run.skip((env.name, B, T), list(plans), stop)
            return {}, stop
    return plans, None


def _build(
    run: _Run,
    env: _Env,
    T: int,
    B: int,
    plans: dict[str, JaxPlan],
    peers: dict[str, Any],
    programs: dict[str, Program],
) -> str | None:
    """Compile ``plans`` and make ``peers``' host programs into ``programs``.
    A compiled peak over the budget drops the JAX methods (skips) and returns
    the reason to stop growing ``B``; a peer that fails is a skip."""
    stop = None
    for m, plan in plans.items():
        programs[m] = p = plan.build(run.key)
        if run.budget is not None and p.peak_bytes is not None and p.peak_bytes > run.budget:
            stop = (
                f"{m}'s compiled peak {run.gib(p.peak_bytes)} > budget {run.gib(run.budget)} "
                f"at B={B}"
            )
            run.skip((env.name, B, T), list(plans), stop)
            for built in list(programs):
                programs.pop(built).close()
            break
    for m, module in peers.items():
        maker = PEER_MAKERS[m](module, PEER_ENVS[env.name], B, run.spec.seed)
        try:
            programs[m] = host_program(maker, T, B, run.spec.seed)
        except Exception as e:  # an installed peer that fails: a skip
            run.skip((env.name, B, T), [m], f"{m} failed: {type(e).__name__}: {str(e)[:200]}")
    return stop


def _cell(
    run: _Run, env: _Env, T: int, B: int, stop: str | None
) -> tuple[dict[str, Any] | None, str | None]:
    """Measure the cell ``(env, B, T)``: ``(the cell, or None where nothing
    ran; the reason to stop growing B, or None)``. ``stop`` from a smaller
    ``B`` skips the JAX methods."""
    spec, where = run.spec, (env.name, B, T)
    if stop is not None:
        run.skip(where, env.methods, stop)
    peers = env.peers
    if spec.peer_max_B < B:
        run.skip(where, list(peers), f"B > peer_max_B={spec.peer_max_B}")
        peers = {}
    plans, stop = ({}, stop) if stop is not None else _plans(run, env, T, B)
    if not plans and not peers:
        return None, stop
    programs: dict[str, Program] = {}
    try:
        stop = _build(run, env, T, B, plans, peers, programs) or stop
        if not programs:
            return None, stop
        times, calls = measure(
            programs, reps=spec.reps, warmup=spec.warmup, min_rep_seconds=spec.min_rep_seconds
        )
    except Exception as e:  # out of device memory: stop growing B
        if not is_oom(e):
            raise
        stop = f"out of memory at B={B}: {str(e).splitlines()[0][:200]}"
        run.skip(where, list(plans) + list(peers), stop)
        return None, stop
    finally:
        for p in programs.values():
            p.close()
    rows = {  # each method against its own floor (mlp: bare_mlp)
        m: _method_row(programs[m], times[m], calls[m], times.get(floor_of(m)), T * B)
        | {"floor": floor_of(m)}
        for m in programs
    }
    cell = {"env": env.name, "B": B, "T": T, "steps_per_call": T * B, "methods": rows}
    slowest = max((r["run_s"]["median"] for r in rows.values() if not r["host"]), default=0.0)
    if spec.max_call_seconds is not None and slowest > spec.max_call_seconds:
        stop = f"a call took {slowest:.2f} s > max_call_seconds={spec.max_call_seconds} at B={B}"
    return cell, stop


def run_grid(
    spec: GridSpec | None = None, *, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Measure every cell of ``spec`` (default [`GridSpec`][jaxsample.bench.GridSpec]); see the
    module doc.

    Args:
      spec: the grid.
      progress: called with one line of text per measured cell.

    Returns:
      A JSON-ready dict following `RESULT_SCHEMA`: ``schema_version``,
      ``system`` ([`system_info`][jaxsample.bench.system_info]), ``settings``, ``cells`` (one per
      measured ``(env, B, T)``, with a row per method), ``skipped`` (what was
      not measured and why), ``notes`` and ``wall_s``.
    """
    spec = GridSpec() if spec is None else spec
    if not isinstance(spec, GridSpec):
        raise TypeError(f"spec must be a GridSpec, got {type(spec).__name__}")
    say = progress or (lambda line: None)
    start = time.perf_counter()
    system = system_info()
    notes: list[str] = []
    peers = _peers(spec, system["cpu_count"], notes)
    run = _Run(spec, jax.random.key(spec.seed), _budget(spec, system, notes), [])
    cells: list[dict[str, Any]] = []
    for env_name in spec.envs:
        env = _env(env_name, run, peers, notes)
        for T in spec.Ts:
            stop: str | None = None  # once set, the larger B of (env, T) are skipped
            for B in spec.Bs:
                cell, stop = _cell(run, env, T, B, stop)
                if cell is not None:
                    cells.append(cell)
                    say(cell_line(cell))
    return {
        "schema_version": SCHEMA_VERSION,
        "system": system,
        "settings": {**spec.as_dict(), "floor": FLOOR, "memory_budget_bytes": run.budget},
        "cells": cells,
        "skipped": run.skipped,
        "notes": notes,
        "wall_s": time.perf_counter() - start,
    }

"""Benchmarks: the grid behind ``jaxsample bench``, and the overhead measurement.

:func:`run_grid` measures, for every cell ``(env, B, T)`` of a :class:`GridSpec`,
the same ``T`` steps of ``B`` environments done by each method of ``METHODS``:

* ``"bare"`` — the floor: a hand-written ``lax.scan(vmap(env.step))`` with
  random actions that stores observation, action, reward and done
  (:func:`bare_rollout`);
* ``"random"`` — ``sampler.collect`` with a :class:`~jaxsample.agents.RandomAgent`
  and the default options (what :func:`overhead` measures);
* ``"mlp"`` — ``sampler.collect`` with PPO's actor-critic (a 64x64 tanh MLP,
  :class:`~jaxsample.agents.CategoricalActorCritic`, or the Gaussian one for a
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

The result is a JSON-ready dict described by :data:`RESULT_SCHEMA` (a JSON
Schema); :func:`format_table`, :func:`markdown_table`, :func:`write_json` and
:func:`plot` present it.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import importlib.metadata
import json
import math
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from jaxsample._checks import check_int as _check_int
from jaxsample.agents.actor_critic import CategoricalActorCritic, GaussianActorCritic
from jaxsample.agents.base import RandomAgent
from jaxsample.sampler import make_sampler
from jaxsample.types import BatchSpec

#: Version of the result's layout (:data:`RESULT_SCHEMA`).
SCHEMA_VERSION = 1
#: The JAX methods, compiled on the default device.
JAX_METHODS = ("bare", "random", "mlp")
#: The host peers, imported at run time when installed.
PEER_METHODS = ("gymnasium", "envpool")
#: Every method, in display order.
METHODS = JAX_METHODS + PEER_METHODS
#: The method the ratios are relative to.
FLOOR = "bare"
#: gymnax env name -> the peers' id of the same environment.
PEER_ENVS = {"CartPole-v1": "CartPole-v1"}
#: Display names.
LABELS = {
    "bare": "bare scan(vmap(env.step))",
    "random": "jaxsample collect, random agent",
    "mlp": "jaxsample collect, MLP actor-critic",
    "gymnasium": "gymnasium SyncVectorEnv (numpy)",
    "envpool": "envpool (C++)",
}
#: A repetition lasts at least this long (``calls_per_rep`` calls).
DEFAULT_MIN_REP_SECONDS = 0.01
_MAX_CALLS_PER_REP = 10_000
_COLORS = {
    "bare": "black",
    "random": "tab:blue",
    "mlp": "tab:orange",
    "gymnasium": "tab:green",
    "envpool": "tab:red",
}
_clock = time.perf_counter


# ----------------------------------------------------------------------------
# The floor and the building blocks shared by overhead() and run_grid()
# ----------------------------------------------------------------------------


def bare_rollout(env: Any, env_params: Any, T: int, B: int) -> tuple[Callable, Callable]:
    """The hand-written floor: ``scan(vmap(env.step))`` with random actions.

    Stores observation, action, reward and done ``[T, B]``, as a hand-written
    rollout that a user would compare against.

    Returns:
      ``(init(key) -> carry, run(carry) -> (carry, (obs, action, reward, done)))``.
    """
    space = env.action_space(env_params)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def init(key: jax.Array):
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, B), env_params)
        return key, state, obs

    def run(carry):
        def body(c, _):
            key, state, obs = c
            key, k_action, k_step = jax.random.split(key, 3)
            action = jax.vmap(space.sample)(jax.random.split(k_action, B))
            next_obs, state, reward, terminated, truncated, _ = step(
                jax.random.split(k_step, B), state, action, env_params
            )
            done = jnp.logical_or(terminated, truncated)
            return (key, state, next_obs), (obs, action, reward, done)

        return jax.lax.scan(body, carry, None, T)

    return init, run


def _time_call(fn: Callable, arg: Any) -> tuple[Any, float]:
    start = _clock()
    out = jax.block_until_ready(fn(arg))
    return out, _clock() - start


def _leaf_bytes(x: Any) -> int:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # typed keys: their key data
        x = jax.eval_shape(jax.random.key_data, x)
    return math.prod(x.shape) * jnp.dtype(x.dtype).itemsize


def _nbytes(tree: Any) -> int:
    """Bytes of the leaves of ``tree`` (arrays or ``jax.ShapeDtypeStruct``)."""
    return sum(_leaf_bytes(x) for x in jax.tree.leaves(tree))


def _peak_bytes(compiled: Any) -> int | None:
    try:
        m = compiled.memory_analysis()
    except Exception:  # some backends do not report it
        return None
    if m is None:
        return None
    return int(
        m.temp_size_in_bytes
        + m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
    )


@dataclasses.dataclass
class _Program:
    """One method of one cell, built and ready to time.

    ``call()`` does one ``[T, B]`` call to completion (blocked until ready) and
    advances the method's own carried state.
    """

    call: Callable[[], None]
    compile_s: float
    peak_bytes: int | None = None
    output_bytes: int | None = None
    host: bool = False
    close: Callable[[], None] = lambda: None
    buffers: dict[str, np.ndarray] | None = None


@dataclasses.dataclass(frozen=True)
class _JaxPlan:
    """A JAX method before anything is allocated: ``init(key) -> state`` and
    ``fn(state, *args) -> (state, out)``."""

    init: Callable[[jax.Array], Any]
    fn: Callable[..., tuple[Any, Any]]
    args: tuple = ()

    def estimate_bytes(self, key: jax.Array) -> tuple[int, int]:
        """``(state bytes, output bytes)`` from shapes alone."""
        state = jax.eval_shape(self.init, key)
        out = jax.eval_shape(self.fn, state, *self.args)[1]
        return _nbytes(state), _nbytes(out)

    def build(self, key: jax.Array) -> _Program:
        """Initialise the state and compile ``fn`` (state donated)."""
        state = jax.block_until_ready(jax.jit(self.init)(key))
        output_bytes = _nbytes(jax.eval_shape(self.fn, state, *self.args)[1])
        t0 = _clock()
        compiled = jax.jit(self.fn, donate_argnums=0).lower(state, *self.args).compile()
        compile_s = _clock() - t0
        carry = [state]
        args = self.args

        def call() -> None:
            carry[0], out = jax.block_until_ready(compiled(carry[0], *args))
            del out

        return _Program(call, compile_s, _peak_bytes(compiled), output_bytes)


def _bare_plan(env: Any, env_params: Any, T: int, B: int) -> _JaxPlan:
    init, run = bare_rollout(env, env_params, T, B)
    return _JaxPlan(init, run)


def _sampler_plan(
    env: Any,
    env_params: Any,
    agent: Any,
    params: Any,
    T: int,
    B: int,
    final_observation: str = "sparse",
) -> _JaxPlan:
    sampler = make_sampler(
        env, env_params, agent, BatchSpec(T, B), final_observation=final_observation
    )
    return _JaxPlan(lambda key: sampler.init(key, params), sampler.collect, (params,))


def _random_plan(
    env: Any, env_params: Any, T: int, B: int, final_observation: str = "sparse"
) -> _JaxPlan:
    agent = RandomAgent(env.action_space(env_params))
    return _sampler_plan(env, env_params, agent, (), T, B, final_observation)


def _mlp_agent(env: Any, env_params: Any) -> Any | None:
    """PPO's default actor-critic for the env's action space (None if there is none)."""
    space = env.action_space(env_params)
    if isinstance(space, spaces.Discrete):
        return CategoricalActorCritic(space, hidden_sizes=(64, 64))
    if isinstance(space, spaces.Box):
        return GaussianActorCritic(space, hidden_sizes=(64, 64))
    return None


def _mlp_params(agent: Any, env: Any, env_params: Any, key: jax.Array) -> Any:
    obs_spec = jax.eval_shape(lambda k: env.reset(k, env_params)[0], key)
    example = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), obs_spec)
    return jax.jit(agent.init)(jax.random.fold_in(key, 1), example)


def _measure(
    programs: dict[str, _Program],
    *,
    reps: int,
    warmup: int = 1,
    min_rep_seconds: float = DEFAULT_MIN_REP_SECONDS,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Warm up, then time ``reps`` interleaved repetitions of every program.

    Returns ``(seconds per call, one per repetition; calls per repetition)``,
    both keyed like ``programs``.
    """
    calls: dict[str, int] = {}
    for name, p in programs.items():
        dt = 0.0
        for _ in range(max(1, warmup)):
            t0 = _clock()
            p.call()
            dt = _clock() - t0
        calls[name] = max(1, min(_MAX_CALLS_PER_REP, math.ceil(min_rep_seconds / max(dt, 1e-9))))
    times: dict[str, list[float]] = {name: [] for name in programs}
    names = list(programs)
    for r in range(reps):
        for name in names if r % 2 == 0 else names[::-1]:
            p, n = programs[name], calls[name]
            t0 = _clock()
            for _ in range(n):
                p.call()
            times[name].append((_clock() - t0) / n)
    return times, calls


def _ratio(floor_times: Sequence[float], times: Sequence[float]) -> float:
    """Throughput relative to the floor: ``median(floor) / median(times)``."""
    return statistics.median(floor_times) / statistics.median(times)


def _quartiles(xs: Sequence[float]) -> tuple[float, float, float]:
    q25, q50, q75 = np.percentile(np.asarray(xs, np.float64), [25, 50, 75])
    return float(q25), float(q50), float(q75)


# ----------------------------------------------------------------------------
# overhead (the core issue's benchmark), compile and evaluator scaling
# ----------------------------------------------------------------------------


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
    methods of a :func:`run_grid` cell (``ratio`` here is that cell's
    ``ratio_to_floor`` of ``"random"``).

    Returns a dict with ``env``, ``B``, ``T``, compile seconds of both,
    median/min/max run seconds of both, steps per second of both, ``ratio``
    (sampler throughput / bare throughput, higher is better), and the
    sampler's peak memory relative to the size of the Batch it returns.
    """
    env, env_params = gymnax.make(env_name)
    key = jax.random.key(seed)
    programs = {
        "sampler": _random_plan(env, env_params, T, B, final_observation).build(key),
        "bare": _bare_plan(env, env_params, T, B).build(key),
    }
    times, _ = _measure(programs, reps=reps, min_rep_seconds=min_rep_seconds)
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
        "ratio": _ratio(times["bare"], times["sampler"]),
        "batch_bytes": batch_bytes,
        "peak_bytes": peak,
        "peak_over_batch": None if peak is None else peak / batch_bytes,
    }


def compile_scaling(env_name: str = "CartPole-v1", B: int = 64, Ts: Sequence[int] = (16, 1024)):
    """Compile seconds of ``collect`` for each ``T`` (flat: it is a scan, not unrolled)."""
    env, env_params = gymnax.make(env_name)
    agent = RandomAgent(env.action_space(env_params))
    out = {}
    for T in Ts:
        sampler = make_sampler(env, env_params, agent, BatchSpec(T, B))
        state = sampler.init(jax.random.key(0), ())
        fn = jax.jit(lambda s, sampler=sampler: sampler.collect(s, ()))
        t0 = time.perf_counter()
        fn.lower(state).compile()
        out[T] = time.perf_counter() - t0
    return out


def evaluator_scaling(
    env_name: str = "CartPole-v1",
    *,
    n_envs: int = 16,
    max_trajectories: int | None = 16,
    mode: str = "rlpyt",
    max_T: int = 500,
    factors: Sequence[int] = (1, 10, 100),
    reps: int = 9,
    scan_baseline: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Run time of ``make_evaluator(...).run`` as ``max_steps`` grows, the wanted
    trajectories fixed: its ``lax.while_loop`` stops once they are in, so the
    time should stay flat while the budget grows ``factors``-fold.

    For each factor ``f`` the evaluator gets ``max_steps = n_envs * max_T * f``
    (RandomAgent, the same key, so the same trajectories and steps taken). As a
    contrast, ``scan_baseline`` also times :func:`bare_rollout` over the whole
    budget (``max_T * f`` steps of ``n_envs`` envs), what a fixed-length scan
    pays. Repetitions are interleaved over the factors; medians are reported.

    Returns:
      A dict with the settings and ``rows``: one dict per factor with
      ``max_steps``, ``max_T``, ``steps_taken`` (steps per env the loop ran),
      ``n_completed``, ``compile_s``, ``run_s`` (median), ``run_s_min``,
      ``run_s_max`` and, with ``scan_baseline``, ``scan_s`` (median).
    """
    from jaxsample.evaluation import make_evaluator

    env, env_params = gymnax.make(env_name)
    agent = RandomAgent(env.action_space(env_params))
    key = jax.random.key(seed)
    runs, scans, rows = {}, {}, {}
    for f in factors:
        ev = make_evaluator(
            env,
            env_params,
            agent,
            n_envs=n_envs,
            max_steps=n_envs * max_T * f,
            max_trajectories=max_trajectories,
            mode=mode,
        )
        fn = jax.jit(lambda k, ev=ev: ev.run_with_stats(k, ()))
        t0 = time.perf_counter()
        runs[f] = fn.lower(key).compile()
        compile_s = time.perf_counter() - t0
        _, stats = jax.block_until_ready(runs[f](key))  # warm-up
        rows[f] = {
            "factor": f,
            "max_steps": ev.max_steps,
            "max_T": ev.max_T,
            "steps_taken": int(stats.steps),
            "n_completed": int(stats.n_completed),
            "compile_s": compile_s,
        }
        if scan_baseline:
            init, run = bare_rollout(env, env_params, ev.max_T, n_envs)
            scans[f] = (jax.jit(init)(key), jax.jit(run))
            jax.block_until_ready(scans[f][1](scans[f][0]))  # compile + warm-up
    times: dict[int, list[float]] = {f: [] for f in factors}
    scan_times: dict[int, list[float]] = {f: [] for f in factors}
    for _ in range(reps):
        for f in factors:
            times[f].append(_time_call(runs[f], key)[1])
            if scan_baseline:
                carry, run = scans[f]
                scan_times[f].append(_time_call(run, carry)[1])
    for f in factors:
        rows[f]["run_s"] = statistics.median(times[f])
        rows[f]["run_s_min"] = min(times[f])
        rows[f]["run_s_max"] = max(times[f])
        if scan_baseline:
            rows[f]["scan_s"] = statistics.median(scan_times[f])
    return {
        "env": env_name,
        "n_envs": n_envs,
        "max_trajectories": max_trajectories,
        "mode": mode,
        "reps": reps,
        "rows": [rows[f] for f in factors],
    }


# ----------------------------------------------------------------------------
# The grid
# ----------------------------------------------------------------------------


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
    """What :func:`run_grid` measures; validated when constructed.

    Attributes:
      envs: gymnax environment names.
      Bs: numbers of environments (sorted, deduplicated); the default is
        ``1, 4, 16, ..., 65536``, as far as memory and time allow.
      Ts: steps per call.
      methods: a subset of :data:`METHODS`.
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
            if e not in gymnax.registered_envs:
                raise ValueError(f"envs: {e!r} is not a gymnax environment")
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


def _import_optional(name: str) -> Any | None:
    """The module ``name``, or None when it is not installed (or fails to import).

    The process environment is restored afterwards: envpool sets variables such
    as ``MPLBACKEND=Agg`` when imported, which would turn off a notebook's
    inline plots (and those of any kernel started from this process).
    """
    saved = dict(os.environ)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except ImportError:
        return None
    finally:
        if dict(os.environ) != saved:
            os.environ.clear()
            os.environ.update(saved)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _host_memory_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _device_memory_bytes() -> int | None:
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # not every backend has it
        return None
    if not stats or "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"])


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def system_info() -> dict[str, Any]:
    """Where the numbers come from: backend, devices, versions, CPUs, memory."""
    from jaxsample import __version__

    device = jax.devices()[0]
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {
        "backend": jax.default_backend(),
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "devices_used": 1,
        "device_memory_bytes": _device_memory_bytes(),
        "jax": jax.__version__,
        "jaxlib": _version("jaxlib"),
        "gymnax": _version("gymnax"),
        "jaxsample": __version__,
        "numpy": np.__version__,
        "gymnasium": _version("gymnasium"),
        "envpool": _version("envpool"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "cpu_model": _cpu_model(),
        "host_memory_bytes": _host_memory_bytes(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _gymnasium_maker(module: Any, env_id: str, B: int, seed: int) -> Callable:
    def make() -> tuple[Any, np.ndarray, int]:
        kwargs: dict[str, Any] = {}
        mode = getattr(getattr(module, "vector", None), "AutoresetMode", None)
        if mode is not None:  # gymnasium >= 1.1: reset in the same step, as gymnax
            kwargs["vector_kwargs"] = {"autoreset_mode": mode.SAME_STEP}
        env = module.make_vec(env_id, num_envs=B, vectorization_mode="sync", **kwargs)
        obs, _ = env.reset(seed=seed)
        return env, obs, int(env.single_action_space.n)

    return make


def _envpool_maker(module: Any, env_id: str, B: int, seed: int) -> Callable:
    def make() -> tuple[Any, np.ndarray, int]:
        env = module.make(env_id, env_type="gymnasium", num_envs=B, seed=seed)
        obs, _ = env.reset()
        return env, obs, int(env.action_space.n)

    return make


_PEER_MAKERS = {"gymnasium": _gymnasium_maker, "envpool": _envpool_maker}


def _host_program(make: Callable, T: int, B: int, seed: int) -> _Program:
    """A host vector env stepping ``T`` random actions per call into numpy buffers."""
    t0 = _clock()
    with warnings.catch_warnings():  # the peers warn about dtypes and spaces
        warnings.simplefilter("ignore")
        env, obs, n_actions = make()
    compile_s = _clock() - t0
    obs = np.asarray(obs)
    if obs.shape[0] != B:
        raise ValueError(f"the peer returned {obs.shape[0]} observations for B={B}")
    rng = np.random.default_rng(seed)
    buffers = {
        "observation": np.zeros((T, *obs.shape), obs.dtype),
        "action": np.zeros((T, B), np.int32),
        "reward": np.zeros((T, B), np.float32),
        "done": np.zeros((T, B), bool),
    }
    current = [obs]

    def call() -> None:
        o = current[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for t in range(T):
                a = rng.integers(0, n_actions, size=B, dtype=np.int32)
                buffers["observation"][t] = o
                buffers["action"][t] = a
                o, r, term, trunc, _ = env.step(a)
                buffers["reward"][t] = r
                np.logical_or(term, trunc, out=buffers["done"][t])
        current[0] = o

    def close() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            getattr(env, "close", lambda: None)()

    output_bytes = sum(b.nbytes for b in buffers.values())
    return _Program(call, compile_s, None, output_bytes, True, close, buffers)


def _is_oom(e: Exception) -> bool:
    msg = str(e).lower()
    return "resource_exhausted" in msg or "out of memory" in msg


def _method_row(
    program: _Program,
    times: list[float],
    calls: int,
    floor_times: list[float] | None,
    steps: int,
) -> dict[str, Any]:
    q25, _, q75 = _quartiles(times)
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
        row["ratio_to_floor"] = _ratio(floor_times, times)
        row["ratio_to_floor_best"] = min(floor_times) / min(times)
        paired = [f / t for f, t in zip(floor_times, times, strict=True)]
        lo, _, hi = _quartiles(paired)
        row["ratio_to_floor_spread"] = [lo, hi]
    return row


def run_grid(
    spec: GridSpec | None = None, *, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Measure every cell of ``spec`` (default :class:`GridSpec`); see the module doc.

    Args:
      spec: the grid.
      progress: called with one line of text per measured cell.

    Returns:
      A JSON-ready dict following :data:`RESULT_SCHEMA`: ``schema_version``,
      ``system`` (:func:`system_info`), ``settings``, ``cells`` (one per measured
      ``(env, B, T)``, with a row per method), ``skipped`` (what was not
      measured and why), ``notes`` and ``wall_s``.
    """
    spec = GridSpec() if spec is None else spec
    if not isinstance(spec, GridSpec):
        raise TypeError(f"spec must be a GridSpec, got {type(spec).__name__}")
    say = progress or (lambda line: None)
    start = _clock()
    system = system_info()
    notes: list[str] = []
    skipped: list[dict[str, Any]] = []
    peers: dict[str, Any] = {}
    for m in spec.methods:
        if m in PEER_METHODS:
            module = _import_optional(m)
            if module is None:
                notes.append(
                    f"{m} is not installed: skipped (pip install 'jaxsample[bench]' "
                    "installs the peers)"
                )
            else:
                peers[m] = module
    if peers:
        notes.append(
            f"host peers ({', '.join(peers)}) run on the host CPU ({system['cpu_count']} "
            f"cores) whatever the JAX backend, with numpy random actions, only at "
            f"B <= {spec.peer_max_B} (peer_max_B), and only for {sorted(PEER_ENVS)}"
        )
    if "envpool" in peers:
        notes.append(
            "envpool resets an env on the step after it ends (that step's action is "
            "ignored); gymnax and the gymnasium peer reset within the ending step"
        )
    budget = spec.memory_budget_bytes
    if budget is None:
        total = system["device_memory_bytes"] or system["host_memory_bytes"]
        budget = total // 2 if total else None
    if budget is not None:
        notes.append(f"memory budget for the JAX methods: {budget / 2**30:.2f} GiB")
    key = jax.random.key(spec.seed)
    jax_methods = [m for m in spec.methods if m in JAX_METHODS]
    cells: list[dict[str, Any]] = []

    def skip(env_name: str, B: int, T: int, methods: Sequence[str], reason: str) -> None:
        for m in methods:
            skipped.append({"env": env_name, "B": B, "T": T, "method": m, "reason": reason})

    for env_name in spec.envs:
        env, env_params = gymnax.make(env_name)
        methods = list(jax_methods)
        agent = _mlp_agent(env, env_params) if "mlp" in methods else None
        if "mlp" in methods and agent is None:
            methods.remove("mlp")
            notes.append(f"mlp: no actor-critic for {env_name}'s action space; skipped")
        params = None if agent is None else _mlp_params(agent, env, env_params, key)
        env_peers = {m: mod for m, mod in peers.items() if env_name in PEER_ENVS}
        if peers and not env_peers:
            notes.append(f"no host peer for {env_name}")
        for T in spec.Ts:
            stop_reason: str | None = None
            for B in spec.Bs:
                cell_jax = list(methods)
                if stop_reason is not None:
                    skip(env_name, B, T, cell_jax, stop_reason)
                    cell_jax = []
                cell_peers = dict(env_peers)
                if spec.peer_max_B < B:
                    skip(env_name, B, T, list(cell_peers), f"B > peer_max_B={spec.peer_max_B}")
                    cell_peers = {}
                plans = {}
                for m in cell_jax:
                    if m == "bare":
                        plans[m] = _bare_plan(env, env_params, T, B)
                    elif m == "random":
                        plans[m] = _random_plan(env, env_params, T, B)
                    else:
                        plans[m] = _sampler_plan(env, env_params, agent, params, T, B)
                if plans and budget is not None:
                    sizes = [p.estimate_bytes(key) for p in plans.values()]
                    need = sum(s for s, _ in sizes) + max(o for _, o in sizes)
                    if need > budget:
                        stop_reason = (
                            f"needs about {need / 2**30:.2f} GiB > budget "
                            f"{budget / 2**30:.2f} GiB at B={B}"
                        )
                        skip(env_name, B, T, list(plans), stop_reason)
                        plans = {}
                if not plans and not cell_peers:
                    continue
                programs: dict[str, _Program] = {}
                try:
                    for m, plan in plans.items():
                        p = plan.build(key)
                        peak = p.peak_bytes
                        if budget is not None and peak is not None and peak > budget:
                            stop_reason = (
                                f"{m}'s compiled peak {peak / 2**30:.2f} GiB > budget "
                                f"{budget / 2**30:.2f} GiB at B={B}"
                            )
                            skip(env_name, B, T, list(plans), stop_reason)
                            programs = {}
                            break
                        programs[m] = p
                    for m, module in cell_peers.items():
                        maker = _PEER_MAKERS[m](module, PEER_ENVS[env_name], B, spec.seed)
                        try:
                            programs[m] = _host_program(maker, T, B, spec.seed)
                        except Exception as e:  # an installed peer that fails: a skip
                            reason = f"{m} failed: {type(e).__name__}: {str(e)[:200]}"
                            skip(env_name, B, T, [m], reason)
                    if not programs:
                        continue
                    times, calls = _measure(
                        programs,
                        reps=spec.reps,
                        warmup=spec.warmup,
                        min_rep_seconds=spec.min_rep_seconds,
                    )
                except Exception as e:  # out of device memory: stop growing B
                    if not _is_oom(e):
                        raise
                    stop_reason = f"out of memory at B={B}: {str(e).splitlines()[0][:200]}"
                    skip(env_name, B, T, list(plans) + list(cell_peers), stop_reason)
                    continue
                finally:
                    for p in programs.values():
                        p.close()
                floor_times = times.get(FLOOR)
                rows = {
                    m: _method_row(programs[m], times[m], calls[m], floor_times, T * B)
                    for m in programs
                }
                del programs
                cells.append(
                    {
                        "env": env_name,
                        "B": B,
                        "T": T,
                        "steps_per_call": T * B,
                        "methods": rows,
                    }
                )
                say(_cell_line(cells[-1]))
                slowest = max(
                    (r["run_s"]["median"] for r in rows.values() if not r["host"]), default=0.0
                )
                if spec.max_call_seconds is not None and slowest > spec.max_call_seconds:
                    stop_reason = (
                        f"a call took {slowest:.2f} s > max_call_seconds="
                        f"{spec.max_call_seconds} at B={B}"
                    )
    return {
        "schema_version": SCHEMA_VERSION,
        "system": system,
        "settings": {**spec.as_dict(), "floor": FLOOR, "memory_budget_bytes": budget},
        "cells": cells,
        "skipped": skipped,
        "notes": notes,
        "wall_s": _clock() - start,
    }


# ----------------------------------------------------------------------------
# Presenting a result
# ----------------------------------------------------------------------------


def _si(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def _cell_line(cell: dict[str, Any]) -> str:
    parts = []
    for m, r in cell["methods"].items():
        ratio, best = r["ratio_to_floor"], r["ratio_to_floor_best"]
        parts.append(
            f"{m} {_si(r['steps_per_s']['median'])}"
            + ("" if ratio is None or m == FLOOR else f" ({ratio:.2f}x, best {best:.2f}x)")
        )
    return f"{cell['env']} B={cell['B']} T={cell['T']}: " + ", ".join(parts) + " steps/s"


def _header(result: dict[str, Any]) -> str:
    s = result["system"]
    return (
        f"backend {s['backend']} ({s['device_kind']}, {s['device_count']} device(s), 1 used), "
        f"jax {s['jax']}, jaxlib {s['jaxlib']}, gymnax {s['gymnax']}, {s['cpu_count']} CPU(s)"
    )


def format_table(result: dict[str, Any]) -> str:
    """The terminal table: one line per (cell, method), then skips and notes."""
    lines = [
        f"jaxsample bench: {_header(result)}",
        f"{'env':<18} {'B':>6} {'T':>5}  {'method':<10} {'compile s':>9} "
        f"{'steps/s':>9} {'[q25 .. q75]':>19} {'ratio':>6} {'best':>6} {'peak MB':>8}",
    ]
    for cell in result["cells"]:
        for m, r in cell["methods"].items():
            sps = r["steps_per_s"]
            ratio, best = r["ratio_to_floor"], r["ratio_to_floor_best"]
            peak = r["peak_bytes"]
            lines.append(
                f"{cell['env']:<18} {cell['B']:>6} {cell['T']:>5}  {m:<10} "
                f"{r['compile_s']:>9.2f} {_si(sps['median']):>9} "
                f"{'[' + _si(sps['q25']) + ' .. ' + _si(sps['q75']) + ']':>19} "
                f"{'n/a' if ratio is None else f'{ratio:.3f}':>6} "
                f"{'n/a' if best is None else f'{best:.3f}':>6} "
                f"{'n/a' if peak is None else f'{peak / 2**20:.1f}':>8}"
            )
    if result["skipped"]:
        grouped: dict[str, list[str]] = {}
        for s in result["skipped"]:
            grouped.setdefault(s["reason"], []).append(f"{s['env']} B={s['B']} {s['method']}")
        lines.append("skipped:")
        for reason, what in grouped.items():
            shown = ", ".join(what[:4]) + (f" and {len(what) - 4} more" if len(what) > 4 else "")
            lines.append(f"  {reason}: {shown}")
    for note in result["notes"]:
        lines.append(f"note: {note}")
    lines.append(
        "ratio = throughput / the bare floor's, from the medians of the interleaved "
        "repetitions; best = from the fastest repetition of each (steadier on a busy "
        "machine); compile s of a host peer = env construction + reset"
    )
    return "\n".join(lines)


def markdown_table(result: dict[str, Any], *, best: bool = False) -> str:
    """A README table: one row per cell, median steps/s per method and the
    ratio to the floor in parentheses (with ``best``, also the ratio of the
    fastest repetitions)."""
    methods = [m for m in METHODS if any(m in c["methods"] for c in result["cells"])]
    head = "| env | B | T | " + " | ".join(methods) + " |"
    lines = [head, "|" + "---|" * (3 + len(methods))]
    for cell in result["cells"]:
        vals = []
        for m in methods:
            r = cell["methods"].get(m)
            if r is None:
                vals.append("–")
                continue
            ratio = r["ratio_to_floor"]
            extra = "" if ratio is None or m == FLOOR else f" ({ratio:.2f})"
            if best and extra:
                extra = f" ({ratio:.2f}; best {r['ratio_to_floor_best']:.2f})"
            vals.append(_si(r["steps_per_s"]["median"]) + extra)
        lines.append(f"| {cell['env']} | {cell['B']} | {cell['T']} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def write_json(result: dict[str, Any], path: str | os.PathLike) -> None:
    """Write ``result`` as JSON (strict: no NaN or infinity)."""
    with open(path, "w") as f:
        json.dump(result, f, indent=1, allow_nan=False)
        f.write("\n")


def _minor_ratio_label(value: float, _: Any) -> str:
    """Label the minor log ticks 2x and 5x a power of ten (0.2, 0.5, 2, 5, ...)."""
    if value <= 0:
        return ""
    mantissa = value / 10 ** math.floor(math.log10(value))
    return f"{value:g}" if round(mantissa) in (2, 5) else ""


def plot(result: dict[str, Any], path: str | os.PathLike | None = None) -> Any:
    """Per env, steps/s vs B (log-log, one line per method, the band is the
    interquartile range) and throughput relative to the floor vs B.

    Writes a PNG to ``path`` when given; returns the matplotlib ``Figure``
    (built without pyplot, so it never changes the notebook's backend).
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    cells = result["cells"]
    envs = list(dict.fromkeys(c["env"] for c in cells))
    Ts = sorted({c["T"] for c in cells})
    styles = ["-", "--", ":", "-."]
    fig = Figure(figsize=(10, 3.4 * max(1, len(envs))), dpi=80)
    axes = fig.subplots(max(1, len(envs)), 2, squeeze=False)
    for i, env_name in enumerate(envs):
        ax_s, ax_r = axes[i]
        for m in METHODS:
            for j, T in enumerate(Ts):
                rows = [
                    (c["B"], c["methods"][m])
                    for c in cells
                    if c["env"] == env_name and c["T"] == T and m in c["methods"]
                ]
                if not rows:
                    continue
                Bs = [b for b, _ in rows]
                label = LABELS[m] + (f", T={T}" if len(Ts) > 1 else "")
                style = {"color": _COLORS[m], "ls": styles[j % len(styles)], "marker": "o"}
                ax_s.plot(Bs, [r["steps_per_s"]["median"] for _, r in rows], label=label, **style)
                ax_s.fill_between(
                    Bs,
                    [r["steps_per_s"]["q25"] for _, r in rows],
                    [r["steps_per_s"]["q75"] for _, r in rows],
                    color=_COLORS[m],
                    alpha=0.2,
                )
                with_ratio = [(b, r) for b, r in rows if r["ratio_to_floor"] is not None]
                if m != FLOOR and with_ratio:
                    xs = [b for b, _ in with_ratio]
                    ax_r.plot(
                        xs, [r["ratio_to_floor"] for _, r in with_ratio], label=label, **style
                    )
                    ax_r.fill_between(
                        xs,
                        [r["ratio_to_floor_spread"][0] for _, r in with_ratio],
                        [r["ratio_to_floor_spread"][1] for _, r in with_ratio],
                        color=_COLORS[m],
                        alpha=0.2,
                    )
        T_text = ", ".join(str(T) for T in Ts)
        ax_s.set(xscale="log", yscale="log", xlabel="B (environments)", ylabel="steps / s")
        ax_s.set_title(f"{env_name}, T={T_text}", fontsize=10)
        ax_r.axhline(1.0, color=_COLORS[FLOOR], lw=0.8)
        ax_r.set(xscale="log", yscale="log", xlabel="B (environments)")
        ax_r.set_ylabel("throughput / bare floor")
        ax_r.set_title(f"{env_name}: relative to the floor (1 = floor)", fontsize=10)
        ax_r.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax_r.yaxis.set_minor_formatter(FuncFormatter(_minor_ratio_label))
        for ax in (ax_s, ax_r):
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3, which="both")
        ax_s.legend(fontsize=7)
    fig.suptitle(f"jaxsample bench: {_header(result)}", fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path)
    return fig


# ----------------------------------------------------------------------------
# The result's JSON schema
# ----------------------------------------------------------------------------

_NUM = {"type": "number"}
_NUM_OR_NULL = {"type": ["number", "null"]}
_INT_OR_NULL = {"type": ["integer", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}
_QUARTILES = {
    "type": "object",
    "required": ["median", "q25", "q75"],
    "properties": {
        "median": _NUM,
        "q25": _NUM,
        "q75": _NUM,
        "min": _NUM,
        "max": _NUM,
        "best": _NUM,
    },
}

#: JSON Schema (draft 2020-12) of :func:`run_grid`'s result.
RESULT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "jaxsample bench result",
    "type": "object",
    "required": ["schema_version", "system", "settings", "cells", "skipped", "notes", "wall_s"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "system": {
            "type": "object",
            "required": [
                "backend",
                "device_kind",
                "device_count",
                "devices_used",
                "device_memory_bytes",
                "jax",
                "jaxlib",
                "gymnax",
                "jaxsample",
                "cpu_count",
                "host_memory_bytes",
            ],
            "properties": {
                "backend": {"type": "string"},
                "device_kind": {"type": "string"},
                "device_count": {"type": "integer", "minimum": 1},
                "devices_used": {"const": 1},
                "device_memory_bytes": _INT_OR_NULL,
                "jax": {"type": "string"},
                "jaxlib": _STR_OR_NULL,
                "gymnax": _STR_OR_NULL,
                "jaxsample": {"type": "string"},
                "gymnasium": _STR_OR_NULL,
                "envpool": _STR_OR_NULL,
                "cpu_count": _INT_OR_NULL,
                "cpu_affinity": _INT_OR_NULL,
                "cpu_model": _STR_OR_NULL,
                "host_memory_bytes": _INT_OR_NULL,
            },
        },
        "settings": {
            "type": "object",
            "required": ["envs", "Bs", "Ts", "methods", "reps", "warmup", "floor"],
            "properties": {
                "envs": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "Bs": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "Ts": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "methods": {"type": "array", "items": {"enum": list(METHODS)}},
                "reps": {"type": "integer", "minimum": 1},
                "warmup": {"type": "integer", "minimum": 1},
                "peer_max_B": {"type": "integer", "minimum": 1},
                "min_rep_seconds": _NUM,
                "max_call_seconds": _NUM_OR_NULL,
                "memory_budget_bytes": _INT_OR_NULL,
                "seed": {"type": "integer"},
                "floor": {"const": FLOOR},
            },
        },
        "cells": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["env", "B", "T", "steps_per_call", "methods"],
                "properties": {
                    "env": {"type": "string"},
                    "B": {"type": "integer", "minimum": 1},
                    "T": {"type": "integer", "minimum": 1},
                    "steps_per_call": {"type": "integer", "minimum": 1},
                    "methods": {
                        "type": "object",
                        "minProperties": 1,
                        "propertyNames": {"enum": list(METHODS)},
                        "additionalProperties": {
                            "type": "object",
                            "required": [
                                "host",
                                "compile_s",
                                "calls_per_rep",
                                "run_s",
                                "times_s",
                                "steps_per_s",
                                "ratio_to_floor",
                                "ratio_to_floor_spread",
                                "ratio_to_floor_best",
                                "peak_bytes",
                                "output_bytes",
                            ],
                            "properties": {
                                "host": {"type": "boolean"},
                                "compile_s": {"type": "number", "minimum": 0},
                                "calls_per_rep": {"type": "integer", "minimum": 1},
                                "run_s": {
                                    **_QUARTILES,
                                    "required": ["median", "q25", "q75", "min", "max"],
                                },
                                "times_s": {"type": "array", "items": _NUM, "minItems": 1},
                                "steps_per_s": {
                                    **_QUARTILES,
                                    "required": ["median", "q25", "q75", "best"],
                                },
                                "ratio_to_floor": _NUM_OR_NULL,
                                "ratio_to_floor_spread": {
                                    "oneOf": [
                                        {"type": "null"},
                                        {
                                            "type": "array",
                                            "items": _NUM,
                                            "minItems": 2,
                                            "maxItems": 2,
                                        },
                                    ]
                                },
                                "ratio_to_floor_best": _NUM_OR_NULL,
                                "peak_bytes": _INT_OR_NULL,
                                "output_bytes": _INT_OR_NULL,
                            },
                        },
                    },
                },
            },
        },
        "skipped": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["env", "B", "T", "method", "reason"],
                "properties": {
                    "env": {"type": "string"},
                    "B": {"type": "integer"},
                    "T": {"type": "integer"},
                    "method": {"enum": list(METHODS)},
                    "reason": {"type": "string"},
                },
            },
        },
        "notes": {"type": "array", "items": {"type": "string"}},
        "wall_s": {"type": "number", "minimum": 0},
        "compile_scaling": {
            "type": "object",
            "required": ["env", "B", "compile_s"],
            "properties": {
                "env": {"type": "string"},
                "B": {"type": "integer"},
                "compile_s": {"type": "object", "additionalProperties": _NUM},
            },
        },
    },
}

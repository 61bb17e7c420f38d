"""Measuring: the hand-written floor, program builders, timing and memory.

Every benchmark of [`jaxsample.bench`][jaxsample.bench] times its methods with
`interleave` (repetitions interleaved method by method, the order
reversed on every other repetition, so the machine's noise hits all methods
alike); the grid and [`overhead`][jaxsample.bench.overhead] add the warm-up
calibration of `measure`. JAX programs are built as a `JaxPlan`
(shapes first, so a cell can be skipped before anything is allocated) and run
as a `Program`. Whole training programs are compiled with
`compile_parts` (tracing, lowering and XLA's compile timed apart, and
the program's size, `program_size`) and summarized with
`compile_summary`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces
from jax.experimental.compilation_cache import compilation_cache
from jax.extend.core import ClosedJaxpr, Jaxpr

from jaxsample._checks import check_int
from jaxsample.agents.actor_critic import CategoricalActorCritic, GaussianActorCritic
from jaxsample.agents.base import RandomAgent
from jaxsample.bench.schema import POOL_SIZE
from jaxsample.core.resets import default_block
from jaxsample.runs.programs import in_background
from jaxsample.sampler import make_sampler
from jaxsample.types import AgentInputs, BatchSpec

#: A repetition lasts at least this long (``calls_per_rep`` calls).
DEFAULT_MIN_REP_SECONDS = 0.01
_MAX_CALLS_PER_REP = 10_000
_clock = time.perf_counter


# ----------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------


def interleave(
    fns: Mapping[str, Callable[[], Any]],
    *,
    reps: int,
    calls: int | Mapping[str, int] = 1,
    self_timed: Collection[str] = (),
) -> dict[str, list[float]]:
    """Time ``reps`` interleaved repetitions of every callable.

    Each repetition runs every callable ``calls`` times in a row (an int, or one
    per name), method by method, the order reversed on every other repetition.
    A callable must block until its work is done (``jax.block_until_ready``).
    The callables named in ``self_timed`` return their own seconds (a run that
    should not count its set-up), which replace the clock's.

    Returns:
      Seconds per call, one per repetition, keyed like ``fns``.
    """
    names = list(fns)
    per_name = {n: calls if isinstance(calls, int) else calls[n] for n in names}
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        for name in names if r % 2 == 0 else names[::-1]:
            fn, n = fns[name], per_name[name]
            own = 0.0
            t0 = _clock()
            for _ in range(n):
                out = fn()
                if name in self_timed:
                    own += out
            elapsed = own if name in self_timed else _clock() - t0
            times[name].append(elapsed / n)
    return times


def compile_timed(fn: Any, *args: Any) -> tuple[Any, float]:
    """``(compiled, seconds)``: lower and compile the jitted ``fn`` for ``args``."""
    t0 = _clock()
    compiled = fn.lower(*args).compile()
    return compiled, _clock() - t0


def time_once(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``(fn(*args), seconds)``: one call, blocked until its output is ready."""
    t0 = _clock()
    out = jax.block_until_ready(fn(*args))
    return out, _clock() - t0


def measure(
    programs: Mapping[str, Program],
    *,
    reps: int,
    warmup: int = 1,
    min_rep_seconds: float = DEFAULT_MIN_REP_SECONDS,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Warm up, then time ``reps`` interleaved repetitions of every program.

    The last warm-up call's time sets ``calls_per_rep`` so that a repetition
    lasts at least ``min_rep_seconds`` (short calls are otherwise all timer and
    dispatch noise).

    Returns ``(seconds per call, one per repetition; calls per repetition)``,
    both keyed like ``programs``.
    """
    calls: dict[str, int] = {}
    for name, p in programs.items():
        dt = 0.0
        for _ in range(max(1, warmup)):
            dt = time_once(p.call)[1]
        calls[name] = max(1, min(_MAX_CALLS_PER_REP, math.ceil(min_rep_seconds / max(dt, 1e-9))))
    times = interleave({name: p.call for name, p in programs.items()}, reps=reps, calls=calls)
    return times, calls


def ratio(floor_times: Sequence[float], times: Sequence[float]) -> float:
    """Throughput relative to the floor: ``median(floor) / median(times)``."""
    return statistics.median(floor_times) / statistics.median(times)


def quartiles(xs: Sequence[float]) -> tuple[float, float, float]:
    """``(q25, median, q75)`` of ``xs``."""
    q25, q50, q75 = np.percentile(np.asarray(xs, np.float64), [25, 50, 75])
    return float(q25), float(q50), float(q75)


# ----------------------------------------------------------------------------
# Compile by stage, program sizes
# ----------------------------------------------------------------------------

#: The stages of a compile that `compile_parts` times apart: tracing to
#: a jaxpr (``jit(...).trace``), lowering to StableHLO (``.lower()``) and
#: XLA's compile (``.compile()``).
STAGES = ("trace", "lower", "compile")


class Part(NamedTuple):
    """One compiled program of a run: a jitted function and the XLA options it
    is compiled with. A run's parts are called in turn, each on the previous
    one's output (the first on the run's arguments): `call_parts`.
    ``overlap``: XLA compiles this part on a worker thread while the next one
    is traced and lowered for its abstract output, as a run compiles its init
    ([`jaxsample.runs.programs.in_background`][jaxsample.runs.programs.in_background])."""

    fn: Any
    options: dict[str, Any]
    overlap: bool = False


def call_parts(exes: Sequence[Any], args: tuple) -> Any:
    """Run a program's compiled parts in turn (`Part`)."""
    out = exes[0](*args)
    for exe in exes[1:]:
        out = exe(out)
    return out


def _compile_timed(lowered: Any, options: dict[str, Any]) -> tuple[Any, float]:
    t0 = _clock()
    exe = lowered.compile(options)
    return exe, _clock() - t0


def compile_parts(
    parts: Sequence[Part], args: tuple
) -> tuple[list[Any], dict[str, float], dict[str, int]]:
    """``(executables, seconds, size)``: trace, lower and compile each part of
    a program, each stage timed (``seconds`` keyed by `STAGES`) and
    summed over the parts, ``seconds["total"]`` their sum, or where a part
    overlaps the next (`Part`) the wall time of it all (less); and
    the program's size (`program_size`, summed). A part after the first
    is compiled for the previous part's output: its abstract output after an
    overlapping part, else its output (run, untimed, to get it: milliseconds
    for a run's init)."""
    if not parts:
        raise ValueError("parts must name at least one jitted function")
    seconds = dict.fromkeys(STAGES, 0.0)
    compiled: list[Callable[[], tuple[Any, float]]] = []  # each: (executable, XLA seconds)
    traces: list[Any] = []
    untimed, begin = 0.0, _clock()
    overlapped = False
    for n, part in enumerate(parts):
        if n and not parts[n - 1].overlap:
            t0 = _clock()
            args = (compiled[-1]()[0](*args),)
            untimed += _clock() - t0
        t0 = _clock()
        traced = part.fn.trace(*args)
        t1 = _clock()
        lowered = traced.lower()
        seconds["trace"] += t1 - t0
        seconds["lower"] += _clock() - t1
        traces.append(traced)
        if part.overlap and n + 1 < len(parts):
            compiled.append(in_background(_compile_timed, lowered, part.options))
            args, overlapped = (traced.out_info,), True
        else:
            done = _compile_timed(lowered, part.options)
            compiled.append(lambda done=done: done)
    results = [wait() for wait in compiled]  # the overlapping compiles end here
    wall = _clock() - begin - untimed
    seconds["compile"] = sum(dt for _, dt in results)
    seconds["total"] = wall if overlapped else sum(seconds[s] for s in STAGES)
    size = {"jaxpr_eqns": 0, "hlo_fusions": 0}
    for traced, (exe, _) in zip(traces, results, strict=True):
        for k, v in program_size(traced.jaxpr, exe.as_text()).items():
            size[k] += v
    return [exe for exe, _ in results], seconds, size


def program_size(jaxpr: Any, hlo: str) -> dict[str, int]:
    """``{"jaxpr_eqns", "hlo_fusions"}``: the equations of a closed jaxpr,
    nested ones included (what tracing and lowering walk), and the fusions of
    the XLA-optimized HLO text (on CPU, about one compiled kernel each). Unlike
    the times, these are the same on every run, so they show a change of the
    program's compile cost on a machine too noisy to time it."""

    def count(j: Any) -> int:
        n = 0
        for eqn in j.eqns:
            n += 1
            for param in eqn.params.values():
                for sub in param if isinstance(param, (tuple, list)) else (param,):
                    if isinstance(sub, ClosedJaxpr):
                        n += count(sub.jaxpr)
                    elif isinstance(sub, Jaxpr):
                        n += count(sub)
        return n

    return {"jaxpr_eqns": count(jaxpr.jaxpr), "hlo_fusions": hlo.count(" fusion(")}


def compile_summary(rows: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """``{stage: median, "total": median, "all": [totals]}`` of the per-stage
    seconds of one program's compiles (rows of `compile_parts`)."""
    totals = [row["total"] for row in rows]
    return {
        **{s: statistics.median(row[s] for row in rows) for s in STAGES},
        "total": statistics.median(totals),
        "all": totals,
    }


def compare_programs(
    build: Callable[[], Mapping[str, tuple[Sequence[Part], tuple]]],
    *,
    reps: int,
    compile_reps: int,
) -> dict[str, dict[str, Any]]:
    """Compile programs from scratch and run them, side by side in one process.

    ``build()`` returns fresh jitted programs (new closures: nothing cached)
    as ``{name: (parts, args)}`` (`Part`). It is called
    ``compile_reps + 1`` times, with JAX's persistent cache off
    (`fresh_compiles`); each time every program is compiled
    (`compile_parts`) after ``jax.clear_caches()`` (no program reuses
    another's traces of shared functions), the order reversed every other
    time. The first round warms the process up (XLA's and LLVM's first-use
    costs) and is not counted. The last compiled executables are then run
    ``reps`` times, interleaved (`interleave`, `call_parts`),
    each run blocked until ready.

    Returns:
      ``{"compile_s": {name: compile_summary}, "size": {name: program_size},
      "run_s": {name: {"median", "all"}}, "outputs": {name: the last run's
      outputs}}``, each keyed in ``build()``'s order.
    """
    check_int("reps", reps, 1)
    check_int("compile_reps", compile_reps, 1)
    rows: dict[str, list[dict[str, float]]] = {}
    size: dict[str, dict[str, int]] = {}
    compiled: dict[str, tuple[list[Any], tuple]] = {}
    with fresh_compiles():
        for r in range(compile_reps + 1):
            programs = build()
            names = list(programs)
            for name in names if r % 2 == 0 else names[::-1]:
                jax.clear_caches()
                parts, args = programs[name]
                exes, seconds, size[name] = compile_parts(parts, args)
                if r:
                    rows.setdefault(name, []).append(seconds)
                compiled[name] = (exes, args)
    outputs: dict[str, Any] = {}

    def run(name: str) -> Callable[[], None]:
        exes, args = compiled[name]
        return lambda: outputs.__setitem__(name, jax.block_until_ready(call_parts(exes, args)))

    times = interleave({name: run(name) for name in names}, reps=reps)
    return {
        "compile_s": {name: compile_summary(rows[name]) for name in names},
        "size": {name: size[name] for name in names},
        "run_s": {k: {"median": statistics.median(v), "all": v} for k, v in times.items()},
        "outputs": {name: outputs[name] for name in names},
    }


@contextlib.contextmanager
def fresh_compiles() -> Iterator[None]:
    """Within the block JAX's persistent compilation cache is off (restored
    after), so that a compile is XLA's work, not a cache read. JAX decides
    once per process whether it uses the cache (at the first compile), so the
    setting alone would not take it out once a program was compiled: the
    cache is reset on the way in and out."""
    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        compilation_cache.reset_cache()


# ----------------------------------------------------------------------------
# Memory
# ----------------------------------------------------------------------------


def _leaf_bytes(x: Any) -> int:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # typed keys: their key data
        x = jax.eval_shape(jax.random.key_data, x)
    return math.prod(x.shape) * jnp.dtype(x.dtype).itemsize


def nbytes(tree: Any) -> int:
    """Bytes of the leaves of ``tree`` (arrays or ``jax.ShapeDtypeStruct``)."""
    return sum(_leaf_bytes(x) for x in jax.tree.leaves(tree))


def peak_bytes(compiled: Any) -> int | None:
    """Argument + output + temporaries - aliased bytes of a compiled executable
    (None where the backend reports no memory analysis)."""
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


def is_oom(e: Exception) -> bool:
    """Whether ``e`` says the device ran out of memory."""
    msg = str(e).lower()
    return "resource_exhausted" in msg or "out of memory" in msg


# ----------------------------------------------------------------------------
# Programs: the floor, the samplers
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class Program:
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
class JaxPlan:
    """A JAX method before anything is allocated: ``init(key) -> state`` and
    ``fn(state, *args) -> (state, out)``."""

    init: Callable[[jax.Array], Any]
    fn: Callable[..., tuple[Any, Any]]
    args: tuple = ()

    def estimate_bytes(self, key: jax.Array) -> tuple[int, int]:
        """``(state bytes, output bytes)`` from shapes alone."""
        state = jax.eval_shape(self.init, key)
        out = jax.eval_shape(self.fn, state, *self.args)[1]
        return nbytes(state), nbytes(out)

    def build(self, key: jax.Array) -> Program:
        """Initialise the state and compile ``fn`` (state donated)."""
        state = jax.block_until_ready(jax.jit(self.init)(key))
        output_bytes = nbytes(jax.eval_shape(self.fn, state, *self.args)[1])
        compiled, compile_s = compile_timed(jax.jit(self.fn, donate_argnums=0), state, *self.args)
        carry = [state]
        args = self.args

        def call() -> None:
            carry[0], out = jax.block_until_ready(compiled(carry[0], *args))
            del out

        return Program(call, compile_s, peak_bytes(compiled), output_bytes)


def bare_rollout(env: Any, env_params: Any, T: int, B: int) -> tuple[Callable, Callable]:
    """The hand-written floor: ``scan(vmap(env.step))`` with random actions.

    Stores observation, action, reward and done ``[T, B]``, as a hand-written
    rollout that a user would compare against.

    Returns:
      ``(init(key) -> carry, run(carry) -> (carry, (obs, action, reward, done)))``.
    """
    space = env.action_space(env_params)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

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

    return _floor_init(env, env_params, B), run


def _floor_init(env: Any, env_params: Any, B: int) -> Callable:
    """The floors' ``init(key) -> (key, env state, observation)`` of ``B`` envs."""

    def init(key: jax.Array):
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, B), env_params)
        return key, state, obs

    return init


def bare_plan(env: Any, env_params: Any, T: int, B: int) -> JaxPlan:
    """The floor ([`bare_rollout`][jaxsample.bench.bare_rollout]) as a plan."""
    init, run = bare_rollout(env, env_params, T, B)
    return JaxPlan(init, run)


def bare_mlp_rollout(
    env: Any, env_params: Any, agent: Any, params: Any, T: int, B: int
) -> tuple[Callable, Callable]:
    """The hand-written floor of a learning agent: PureJaxRL's rollout,
    ``scan`` over the agent's forward pass (``agent.step`` of a feedforward
    actor-critic, vmapped) and ``vmap(env.step)`` (gymnax's auto-reset).

    Stores what PureJaxRL's ``Transition`` holds: observation, action,
    reward, done, value and log-probability ``[T, B]``.

    Returns:
      ``(init(key) -> carry, run(carry) -> (carry, outputs))``.
    """
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    per_env = AgentInputs(0, None, None)  # feedforward: no previous action/reward
    act = jax.vmap(agent.step, in_axes=(None, per_env, None, 0))
    zero = jnp.zeros((), jnp.float32)

    def run(carry, params):
        def body(c, _):
            key, state, obs = c
            key, k_action, k_step = jax.random.split(key, 3)
            out, _ = act(params, AgentInputs(obs, zero, zero), (), jax.random.split(k_action, B))
            next_obs, state, reward, terminated, truncated, _ = step(
                jax.random.split(k_step, B), state, out.action, env_params
            )
            done = jnp.logical_or(terminated, truncated)
            info = out.agent_info
            return (key, state, next_obs), (
                obs,
                out.action,
                reward,
                done,
                info.value,
                info.log_prob,
            )

        return jax.lax.scan(body, carry, None, T)

    return _floor_init(env, env_params, B), run


def bare_mlp_plan(env: Any, env_params: Any, agent: Any, params: Any, T: int, B: int) -> JaxPlan:
    """The hand-written MLP rollout (`bare_mlp_rollout`) as a plan."""
    init, run = bare_mlp_rollout(env, env_params, agent, params, T, B)
    return JaxPlan(init, run, (params,))


def sampler_plan(sampler: Any, params: Any) -> JaxPlan:
    """``sampler.collect`` with the agent's ``params`` as a plan."""
    return JaxPlan(lambda key: sampler.init(key, params), sampler.collect, (params,))


def pool_size(B: int) -> int:
    """The ``reset_pool`` of the ``"pool"`` method at ``B`` envs: `POOL_SIZE`,
    at most the default block."""
    return min(POOL_SIZE, default_block(B))


def random_plan(
    env: Any,
    env_params: Any,
    T: int,
    B: int,
    final_observation: str = "sparse",
    reset_pool: int = 0,
) -> JaxPlan:
    """``sampler.collect`` with a [`RandomAgent`][jaxsample.agents.RandomAgent] as a plan
    (``reset_pool``: `pool_size`, 0 for gymnax's auto-reset)."""
    agent = RandomAgent(env.action_space(env_params))
    sampler = make_sampler(
        env,
        env_params,
        agent,
        BatchSpec(T, B),
        final_observation=final_observation,
        reset_pool=reset_pool,
    )
    return sampler_plan(sampler, ())


def mlp_agent(env: Any, env_params: Any) -> Any | None:
    """PPO's default actor-critic for the env's action space (None if there is none)."""
    space = env.action_space(env_params)
    if isinstance(space, spaces.Discrete):
        return CategoricalActorCritic(space, hidden_sizes=(64, 64))
    if isinstance(space, spaces.Box):
        return GaussianActorCritic(space, hidden_sizes=(64, 64))
    return None


def mlp_params(agent: Any, env: Any, env_params: Any, key: jax.Array) -> Any:
    """Fresh parameters of `mlp_agent`'s network for ``env``."""
    obs_spec = jax.eval_shape(lambda k: env.reset(k, env_params)[0], key)
    example = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), obs_spec)
    return jax.jit(agent.init)(jax.random.fold_in(key, 1), example)

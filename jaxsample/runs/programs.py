"""A run's two program strategies, each with its compile and its run.

* [`Chunks`][jaxsample.runs.programs.Chunks]: the iterations in compiled
  chunks (a ``lax.scan`` of ``trainer.iteration``, one program per chunk
  length), between which the host reads the metrics, reports, saves a
  checkpoint and asks whether to stop. A resumed run continues in chunks.
* [`OneProgram`][jaxsample.runs.programs.OneProgram]: every iteration in one
  program (a ``lax.while_loop`` of ``trainer.iteration``) that reports its
  progress and asks whether to stop through ordered host callbacks: no host
  round trip between iterations.

``Strategy.compile(...)`` returns the compiled strategy and the run's first
state; ``strategy.run(state, ..., hooks)`` runs it with the run's own
[`Hooks`][jaxsample.runs.programs.Hooks]. A compiled one program takes a
token argument, and its callbacks find the hooks of the run that called it by
that token: two runs of one program (two threads) never see each other's
events. Every program vmaps the trainer over the runs
(`over_runs`), so both strategies
compute the same, bit for bit.

How they compile, in one place:

* init is a program of its own, compiled with cheap XLA options on CPU
  (`compiler_options`): it runs once. XLA compiles it on a worker thread
  (`in_background`) while the iterations' programs are traced, lowered and
  compiled for init's abstract output;
* the iterations compile at LLVM's -O2 on CPU (`compiler_options`);
* a state spread over several devices (a trainer with a mesh), whose
  shardings only the compiled init knows, gets its iterations compiled again
  for the state itself;
* nothing is kept here: a second run compiles again, unless JAX's persistent
  compilation cache serves it (and, for the one program, the
  [`ProgramStore`][jaxsample.runs.program_store.ProgramStore] its traced init
  and iteration).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsample.algos.trainer import Trainer
from jaxsample.runs.program_store import ProgramStore

__all__ = [
    "CPU_COMPILER_OPTIONS",
    "STOP_CHECK_SECONDS",
    "Chunks",
    "Hooks",
    "OneProgram",
    "Runs",
    "compiler_options",
    "in_background",
    "init_function",
    "one_program",
    "over_runs",
]

History = dict[str, np.ndarray]  # every metric, numpy [R, iterations]


def over_runs(fn: Any) -> Any:
    """``jax.vmap(fn)`` over the runs' leading axis ``[R]`` of every argument
    leaf; for one run (``R = 1``, every leading axis 1) ``fn`` of the run's
    own arguments with the axis added back to its outputs, the same values
    and shapes without a batch trace (vmapping a trainer's scans re-traces
    their bodies; docs/benchmarks.md measures it). A single PureJaxRL run (its
    ``ppo.py``) is not vmapped either. Every program of a run uses it, so
    chunks, one program and resumed runs compute the same either way."""
    batched = jax.vmap(fn)

    def call(*args: Any) -> Any:
        leaves = jax.tree.leaves(args)
        if leaves and all(jnp.shape(x)[:1] == (1,) for x in leaves):
            out = fn(*jax.tree.map(lambda x: x[0], args))
            return jax.tree.map(lambda x: x[None], out)
        return batched(*args)

    return call


@dataclasses.dataclass(frozen=True)
class Hooks:
    """What one run does while its program runs (each run has its own).

    Attributes:
      progress: ``progress(done, history, seconds)`` after each chunk (one
        program: every ``every``-th iteration, the last one and where an
        evaluation metric is finite): ``done`` iterations, ``history`` every
        metric ``[R, done]``, ``seconds`` the running time so far.
      on_chunk: ``on_chunk(state, done, history)`` after each chunk (one
        program: once, at the end).
      stop: ``stop()``: whether to stop early (after a chunk; in one program
        asked about every `STOP_CHECK_SECONDS`).
    """

    progress: Callable[[int, History, float], None] | None = None
    on_chunk: Callable[[Any, int, History], None] | None = None
    stop: Callable[[], bool] | None = None


# ----------------------------------------------------------------------------
# Compiling
# ----------------------------------------------------------------------------

#: XLA options on CPU of the run's init program (``part="init"``): it runs
#: once, for milliseconds, so LLVM's optimization of its kernels (the
#: parameters' orthogonal initialization, the key splits, the first resets)
#: is not worth its compile time; and its kernels are compiled on one thread,
#: as it compiles beside the tracing of the iterations (`in_background`),
#: which needs a core of its own. And of the iterations (``part="run"``):
#: LLVM's -O2 instead of XLA's default -O3, a shorter compile at the same run
#: time (all measured in docs/benchmarks.md).
CPU_COMPILER_OPTIONS: dict[str, dict[str, Any]] = {
    "init": {"xla_backend_optimization_level": 0, "xla_cpu_parallel_codegen_split_count": 1},
    "run": {"xla_backend_optimization_level": 2},
}


def compiler_options(part: str) -> dict[str, Any]:
    """The XLA options a run compiles ``part`` (``"init"`` or ``"run"``)
    with: `CPU_COMPILER_OPTIONS` on the CPU backend, none elsewhere."""
    if part not in CPU_COMPILER_OPTIONS:
        raise ValueError(f"part must be one of {sorted(CPU_COMPILER_OPTIONS)}, got {part!r}")
    return dict(CPU_COMPILER_OPTIONS[part]) if jax.default_backend() == "cpu" else {}


def in_background(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """Start ``fn(*args)`` on a worker thread; returns a function that waits
    for it and returns its result (raising what it raised).

    For XLA's compile of a lowered program (``jax.stages.Lowered.compile``),
    which runs without Python's lock: the caller traces and lowers the next
    program meanwhile, so on a CPU of few cores the one-core Python work and
    XLA's compile share the wait (docs/benchmarks.md measures it).
    """
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxsample-compile")
    future = pool.submit(fn, *args)
    pool.shutdown(wait=False)
    return future.result


def _ignoring_errors(fn: Callable[[], Any]) -> None:
    """``fn()``; what it raises is dropped (it is raised again where needed)."""
    with contextlib.suppress(Exception):
        fn()


class Runs(NamedTuple):
    """The runs a program trains side by side (leading axis ``[R]``): run ``r``
    starts from the key ``fold_in(key, seed[r])`` with the settings
    ``hparams[r]`` (`jaxsample.runs.loop.runs_of` makes them). The keys are
    folded in inside the compiled init (`init_function`): made outside it,
    they would be a compiled program of their own."""

    key: jax.Array
    seed: Any  # int32 [R]
    hparams: Any  # the trainer's HParams, leaves [R]

    def keys(self) -> jax.Array:
        """The runs' keys ``[R]`` (what init folds in)."""
        return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(self.key, self.seed)


def init_function(trainer: Trainer) -> Callable[[jax.Array, Any, Any], Any]:
    """``init(key, seed, hparams)``: the first state of the `Runs` ``(key,
    seed, hparams)``: ``over_runs(trainer.init)`` of their keys and settings."""

    def init(key: jax.Array, seed: Any, hparams: Any) -> Any:
        return over_runs(lambda s, h: trainer.init(jax.random.fold_in(key, s), h))(seed, hparams)

    return init


def initial_state(
    trainer: Trainer, runs: Runs, store: ProgramStore | None = None
) -> tuple[Any, Callable[[], Any]]:
    """``(like, initial)``: init's abstract output (``jax.ShapeDtypeStruct`` s,
    weak types kept), for which a run's iterations are compiled while XLA
    compiles init on a worker thread, and a function that waits for that
    compile and returns the first state of ``runs`` (`init_function`, traced
    from ``store`` when given)."""
    init = init_function(trainer)
    if store is not None:
        init = store.function("init", init, *runs)
    traced = jax.jit(init).trace(*runs)
    wait = in_background(traced.lower().compile, compiler_options("init"))
    return traced.out_info, lambda: jax.block_until_ready(wait()(*runs))


def _compile_for_state(
    build: Callable[[Any], Any], like: Any, initial: Callable[[], Any]
) -> tuple[Any, Any]:
    """``(build(like), first state)``, or ``build(state)`` where the state
    spreads over several devices (shardings that ``like`` lacks)."""
    compiled = build(like)
    state = initial()
    leaves = [x for x in jax.tree.leaves(state) if isinstance(x, jax.Array)]
    if any(len(x.sharding.device_set) > 1 for x in leaves):
        compiled = build(state)
    return compiled, state


# ----------------------------------------------------------------------------
# Chunks
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Chunks:
    """A run in compiled chunks (build it with `compile`).

    Attributes:
      lengths: the chunks to run, in order (iterations each).
      programs: per chunk length, the compiled ``state -> (state, metrics
        [R, length])`` (state donated).
    """

    lengths: tuple[int, ...]
    programs: dict[int, Callable[[Any], Any]]

    @classmethod
    def compile(
        cls, trainer: Trainer, runs: Runs, lengths: tuple[int, ...], state: Any = None,
        store: ProgramStore | None = None, meanwhile: Callable[[], Any] | None = None,
    ) -> tuple[Chunks, Any]:  # fmt: skip
        """The chunks of ``lengths`` iterations compiled for ``runs``, and the
        first state: init's, or
        ``state`` (a resumed run: no init). With ``store``, init and the
        chunks are traced from it (kept between processes); ``meanwhile``
        runs on a worker thread once they are compiled, beside the first
        chunks (its errors ignored): a run's chunks leave a core free on the
        host, where XLA's compile takes every core (docs/benchmarks.md)."""
        options = compiler_options("run")

        def build(like: Any) -> dict[int, Callable[[Any], Any]]:
            out = {}
            for n in dict.fromkeys(lengths):

                def chunk(s: Any, n: int = n) -> Any:
                    return jax.lax.scan(lambda c, _: trainer.iteration(c), s, None, length=n)

                program = over_runs(chunk)
                if store is not None:
                    program = store.function(f"chunk-{n}", program, like)
                out[n] = jax.jit(program, donate_argnums=0).lower(like).compile(options)
            return out

        if state is not None:
            programs = build(state)
        else:
            programs, state = _compile_for_state(build, *initial_state(trainer, runs, store))
        if meanwhile is not None:
            in_background(_ignoring_errors, meanwhile)
        return cls(tuple(lengths), programs), state

    def run(self, state: Any, history: History, hooks: Hooks) -> tuple[Any, History, float]:
        """Run the chunks after ``history`` (``[R, start]``: a resumed run's);
        after each, ``hooks.on_chunk``, ``hooks.progress``, then
        ``hooks.stop``. Returns ``(state, history, seconds)``: every iteration
        run (the chunks' wall time, the hooks excluded)."""
        parts = {k: [v] for k, v in history.items()}
        done, seconds = (next(iter(history.values())).shape[1] if history else 0), 0.0
        total = done + sum(self.lengths)
        for n in self.lengths:
            t0 = time.perf_counter()
            state, metrics = self.programs[n](state)
            for k, v in jax.device_get(metrics).items():
                parts.setdefault(k, []).append(np.asarray(v))  # [R, n]
            seconds += time.perf_counter() - t0
            done += n
            history = {k: np.concatenate(v, axis=1) for k, v in parts.items()}
            if hooks.on_chunk is not None:
                hooks.on_chunk(state, done, history)
            if hooks.progress is not None:
                hooks.progress(done, history, seconds)
            if hooks.stop is not None and done < total and hooks.stop():
                break
        return state, history, seconds


# ----------------------------------------------------------------------------
# One program
# ----------------------------------------------------------------------------

STOP_CHECK_SECONDS = 0.2
"""Seconds between two checks of ``hooks.stop`` inside the one program (the
host callback's answer sets the iteration of the next check from the measured
time per iteration, so a stop is seen within about this long)."""


@dataclasses.dataclass(frozen=True)
class _Live:
    """A run in its one program: its hooks, start time and length."""

    hooks: Hooks
    started: float
    num_iterations: int


#: The runs whose one program is running, by token (the program's argument).
_LIVE: dict[int, _Live] = {}
_TOKENS = itertools.count(1)


def _report(token: Any, i: Any, buffers: dict[str, np.ndarray]) -> None:
    """The program's report after iteration ``i``: its run's ``progress``."""
    live = _LIVE.get(int(token))
    if live is None or live.hooks.progress is None:
        return  # a program called outside a run (a benchmark): no one listens
    done = int(i) + 1
    history = {k: np.asarray(v)[:done].reshape(done, -1).T for k, v in buffers.items()}
    live.hooks.progress(done, history, time.perf_counter() - live.started)


def _check(token: Any, i: Any) -> np.ndarray:
    """The program's stop check after iteration ``i``: the iteration of the
    next check, or -1 to stop now."""
    live = _LIVE.get(int(token))
    if live is None or live.hooks.stop is None:
        return np.int32(np.iinfo(np.int32).max)  # no more checks
    if live.hooks.stop():
        return np.int32(-1)
    per_iteration = (time.perf_counter() - live.started) / (int(i) + 1)
    ahead = int(min(STOP_CHECK_SECONDS / max(per_iteration, 1e-9), live.num_iterations))
    return np.int32(min(int(i) + 1 + max(1, ahead), np.iinfo(np.int32).max))


def one_program(
    trainer: Trainer, n: int, every: int, step: Callable[..., Any] | None = None
) -> Callable[[Any, Any], tuple[Any, dict[str, jax.Array], jax.Array]]:
    """The whole vmapped run after init (compiled apart) as one function
    ``program(state, token)``: a ``lax.while_loop`` over up to ``n``
    iterations of ``over_runs(trainer.iteration)`` that hands the metrics so
    far to its run's ``progress`` (the run that calls it with ``token``; an
    ordered ``io_callback``) after every ``every``-th iteration, the last one
    and any iteration where one of ``trainer.reports.evaluation`` is finite.

    After the first iteration, and then at the iteration it names, it asks
    the run's ``stop`` (where set; else the run goes on to ``n``): a stop
    ends the run there (what Ctrl-C does in ``jaxsample train``). The
    iterations run are the same computations as a ``lax.scan``'s, so an
    uninterrupted run is bit-identical to the chunks'.

    ``step`` replaces ``over_runs(trainer.iteration)`` with a function that
    computes the same (the exported one of a
    [`ProgramStore`][jaxsample.runs.program_store.ProgramStore]).

    Returns ``(state, metrics, done)``: metrics ``[n, R]`` (rows from ``done``
    on are zeros: not run), ``done`` the iterations run (``n`` unless stopped).
    """
    from jax.experimental import io_callback

    evaluation = tuple(trainer.reports.evaluation)
    int32 = jax.ShapeDtypeStruct((), jnp.int32)

    def program(state: Any, token: Any) -> tuple[Any, dict[str, jax.Array], jax.Array]:
        # jit: the shapes below and the loop's call share one trace
        iteration = step or jax.jit(over_runs(trainer.iteration))
        shapes = jax.eval_shape(iteration, state)[1]
        buffers = jax.tree.map(lambda s: jnp.zeros((n, *s.shape), s.dtype), shapes)

        def go_on(carry: tuple) -> jax.Array:
            i, _, _, next_check = carry
            return (i < n) & (next_check >= 0)

        def body(carry: tuple) -> tuple:
            i, state, buffers, next_check = carry
            state, metrics = iteration(state)
            buffers = jax.tree.map(
                lambda b, m: jax.lax.dynamic_update_index_in_dim(b, m, i, 0), buffers, metrics
            )
            due = ((i + 1) % every == 0) | (i == n - 1)
            for name in (m for m in evaluation if m in metrics):  # an evaluation's iteration
                due |= jnp.isfinite(metrics[name]).any()
            jax.lax.cond(
                due,
                lambda: io_callback(_report, None, token, i, buffers, ordered=True),
                lambda: None,
            )
            next_check = jax.lax.cond(
                i + 1 == next_check,
                lambda: io_callback(_check, int32, token, i, ordered=True),
                lambda: next_check,
            )
            return i + 1, state, buffers, next_check

        start = (jnp.zeros((), jnp.int32), state, buffers, jnp.ones((), jnp.int32))
        done, state, buffers, _ = jax.lax.while_loop(go_on, body, start)
        return state, buffers, done

    return program


@dataclasses.dataclass(frozen=True)
class OneProgram:
    """A run as one compiled program (build it with `compile`).

    Attributes:
      num_iterations: the iterations it runs (unless stopped).
      program: the compiled `one_program` ``(state, token) -> (state,
        metrics [n, R], done)`` (state donated).
    """

    num_iterations: int
    program: Callable[[Any, Any], Any]

    @classmethod
    def compile(
        cls, trainer: Trainer, runs: Runs, n: int, every: int,
        store: ProgramStore | None = None,
    ) -> tuple[OneProgram, Any]:  # fmt: skip
        """The `one_program` of ``n`` iterations reporting every ``every``,
        compiled for ``runs``, and the first state. With ``store``, init and
        the iteration are traced from it (kept between processes)."""
        like, initial = initial_state(trainer, runs, store)
        token = jax.ShapeDtypeStruct((), jnp.int32)

        def build(like: Any) -> Callable[[Any, Any], Any]:
            step = None
            if store is not None:
                step = store.function("iteration", over_runs(trainer.iteration), like)
            jitted = jax.jit(one_program(trainer, n, every, step), donate_argnums=0)
            return jitted.lower(like, token).compile(compiler_options("run"))

        program, state = _compile_for_state(build, like, initial)
        return cls(n, program), state

    def run(self, state: Any, hooks: Hooks) -> tuple[Any, History, float]:
        """Run the program with ``hooks`` (this run's; ``on_chunk`` once, at
        the end). Returns ``(state, history, seconds)``: the iterations run,
        all of them unless ``hooks.stop`` stopped it."""
        token = next(_TOKENS)
        started = time.perf_counter()
        _LIVE[token] = _Live(hooks, started, self.num_iterations)
        try:
            if hooks.stop is None:
                out = jax.block_until_ready(self.program(state, np.int32(token)))
            else:
                out = _call_interruptibly(self.program, state, np.int32(token))
        finally:
            del _LIVE[token]
        state, metrics, done = out
        seconds, done = time.perf_counter() - started, int(done)
        history = {k: np.asarray(v)[:done].reshape(done, -1).T for k, v in metrics.items()}
        if hooks.on_chunk is not None:
            hooks.on_chunk(state, done, history)
        return state, history, seconds


def _call_interruptibly(fn: Callable[..., Any], *args: Any) -> Any:
    """``block_until_ready(fn(*args))`` in a worker thread while the calling
    thread waits in short sleeps, so that its signal handlers (Ctrl-C) run
    while the program runs: a program with host callbacks runs synchronously
    on CPU, and a main thread blocked in it would run no Python signal
    handler."""
    out: list[Any] = []
    error: list[BaseException] = []

    def work() -> None:
        try:
            out.append(jax.block_until_ready(fn(*args)))
        except BaseException as e:  # re-raised in the caller's thread
            error.append(e)

    worker = threading.Thread(target=work, name="jaxsample-train", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.05)
    if error:
        raise error[0]
    return out[0]

"""A run's programs, and how the runner compiles them.

[`runner.run_training`][jaxsample.algos.runner.run_training] calls one function
here, [`compile_run`][jaxsample.algos.programs.compile_run], with its plan:
[`Chunks`][jaxsample.algos.programs.Chunks] (chunks of iterations, compiled
once per length, between which the host reads the metrics) or
[`OneProgram`][jaxsample.algos.programs.OneProgram] (every iteration in one
program, `one_program`, which reports to the host through its
[`Hooks`][jaxsample.algos.programs.Hooks]). Every program vmaps the trainer
over the runs ([`over_runs`][jaxsample.algos.programs.over_runs]). The
compile strategy, in one place:

* init is a program of its own, compiled with cheap XLA options on CPU
  (`compiler_options`): it runs once. XLA compiles it on a worker thread
  (`in_background`) while the iterations' program is traced and lowered for
  init's abstract output;
* the iterations compile at LLVM's -O2 on CPU (`compiler_options`);
* compiled programs are kept per trainer (weakly: they go with it), so that a
  second run of the same trainer in one process (a resumed run, a test)
  compiles nothing.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsample.algos import games
from jaxsample.algos.program_store import ProgramStore

__all__ = [
    "CPU_COMPILER_OPTIONS",
    "Chunks",
    "Compiled",
    "Hooks",
    "OneProgram",
    "compile_run",
    "compiler_options",
    "in_background",
    "one_program",
    "over_runs",
]


def over_runs(fn: Callable[..., Any]) -> Callable[..., Any]:
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


# ----------------------------------------------------------------------------
# The one program
# ----------------------------------------------------------------------------


def _no_report(iteration: int, metrics: dict[str, np.ndarray]) -> None:
    del iteration, metrics


@dataclasses.dataclass
class Hooks:
    """The host side of a `one_program`'s callbacks (set per run: a compiled
    program is reused by the next run of its trainer, and calls through this
    object).

    Attributes:
      report: ``report(iteration, metrics [R])``, after every ``every``-th
        iteration, the last one and a game's evaluations.
      check: None (no stop checks), or ``check(iteration)``: asked after the
        first iteration and then at the iteration it names, it returns the
        iteration of the next check, or a negative number to stop the run
        after this iteration.
    """

    report: Callable[[Any, dict[str, np.ndarray]], None] = _no_report
    check: Callable[[int], int] | None = None

    def clear(self) -> None:
        """Back to no report and no stop checks."""
        self.report, self.check = _no_report, None


def one_program(
    trainer: Any,
    n: int,
    every: int,
    hooks: Hooks,
    step: Callable[..., Any] | None = None,
) -> Callable[[Any], tuple[Any, dict[str, jax.Array], jax.Array]]:
    """The whole vmapped run after init (``vmap(trainer.init)``, compiled
    apart: `compiler_options`) as one function of the vmapped state: a
    ``lax.while_loop`` over up to ``n`` iterations of
    ``vmap(trainer.iteration)`` that hands ``(iteration, metrics [R])`` to
    ``hooks.report`` on the host (an ordered ``io_callback``) after every
    ``every``-th iteration, the last one and a game's evaluations.

    After the first iteration, and then at the iteration it names, it asks
    ``hooks.check(iteration)`` (where set; else the run goes on to ``n``) for
    the iteration of the next check: a negative answer stops the run there
    (what Ctrl-C does in ``jaxsample train``). The iterations run are the same
    computations as a ``lax.scan``'s, so an uninterrupted run is bit-identical.

    ``step`` replaces ``vmap(trainer.iteration)`` with a function that
    computes the same (the exported one of a
    [`ProgramStore`][jaxsample.algos.program_store.ProgramStore]).

    Returns ``(state, metrics, done)``: metrics ``[n, R]`` (rows from ``done``
    on are zeros: not run), ``done`` the iterations run (``n`` unless stopped).
    """
    from jax.experimental import io_callback

    def host(i: Any, metrics: Any) -> None:
        hooks.report(i, metrics)

    def check(i: Any) -> np.ndarray:
        return np.int32(n if hooks.check is None else hooks.check(int(i)))

    def program(state: Any) -> tuple[Any, dict[str, jax.Array], jax.Array]:
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
            if games.METRICS[0] in metrics:  # and at a game's evaluations
                due |= jnp.isfinite(metrics[games.METRICS[0]]).any()
            jax.lax.cond(
                due, lambda: io_callback(host, None, i, metrics, ordered=True), lambda: None
            )
            next_check = jax.lax.cond(
                i + 1 == next_check,
                lambda: io_callback(check, jax.ShapeDtypeStruct((), jnp.int32), i, ordered=True),
                lambda: next_check,
            )
            return i + 1, state, buffers, next_check

        start = (jnp.zeros((), jnp.int32), state, buffers, jnp.ones((), jnp.int32))
        done, state, buffers, _ = jax.lax.while_loop(go_on, body, start)
        return state, buffers, done

    return program


# ----------------------------------------------------------------------------
# The compile strategy
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
    """The XLA options the runner compiles ``part`` (``"init"`` or ``"run"``)
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


#: Compiled programs per trainer, so that a second run of the same trainer in
#: one process (a resumed run, a test) does not compile again.
_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cache_key(what: Any, args: tuple, store: ProgramStore | None) -> tuple:
    avals = jax.tree.map(lambda x: (x.shape, x.dtype), args)
    return (what, str(jax.tree.structure(args)), str(avals), store is None)


def _init_program(
    trainer: Any, keys: Any, hparams: Any, store: ProgramStore | None
) -> tuple[Callable[[], Any], Any]:
    """``(wait, like)``: ``wait()`` returns the compiled ``vmap(trainer.init)``
    for these arguments (traced from ``store`` when given; XLA compiles it on
    a worker thread, `in_background`) and ``like`` is its abstract output
    (``jax.ShapeDtypeStruct`` s, weak types kept), for which the iterations
    can be traced meanwhile."""
    args = (keys, hparams)
    key = _cache_key("init", args, store)
    cache = _PROGRAMS.setdefault(trainer, {})
    if key not in cache:
        init = over_runs(trainer.init)
        if store is not None:
            init = store.function("init", init, *args)
        traced = jax.jit(init).trace(*args)
        compiled = in_background(traced.lower().compile, compiler_options("init"))

        def wait() -> Any:
            try:
                return compiled()
            except BaseException:
                cache.pop(key, None)  # not kept: the next run compiles again
                raise

        cache[key] = (wait, traced.out_info)
    return cache[key]


def _initial_state(
    trainer: Any, keys: Any, hparams: Any, store: ProgramStore | None = None
) -> tuple[Any, Callable[[], Any]]:
    """``(like, initial)``: what to compile a run's iterations for, and a
    function that returns the run's initial state (running the compiled init).

    ``like`` is init's abstract output, so the iterations are traced and
    lowered while XLA compiles init (`_init_program`). A trainer with a
    mesh returns a sharded state, whose shardings only the compiled init
    knows: its iterations are compiled for the state itself.
    """
    wait, like = _init_program(trainer, keys, hparams, store)

    def initial() -> Any:
        return jax.block_until_ready(wait()(keys, hparams))

    if getattr(trainer, "mesh", None) is not None:
        state = initial()
        return state, lambda: state
    return like, initial


def _chunk_program(trainer: Any, length: int, like: Any) -> Callable[[Any], Any]:
    """The compiled ``vmap`` of ``trainer.run(state, length)`` (state donated)
    for states like ``like`` (arrays or ``jax.ShapeDtypeStruct`` s)."""
    key = _cache_key(length, (like,), None)
    cache = _PROGRAMS.setdefault(trainer, {})
    if key not in cache:
        fn = jax.jit(over_runs(lambda s: trainer.run(s, length)), donate_argnums=0)
        cache[key] = fn.lower(like).compile(compiler_options("run"))
    return cache[key]


def _one_program(
    trainer: Any, n: int, every: int, like: Any, store: ProgramStore | None
) -> tuple[Callable[[Any], Any], Hooks]:
    """The compiled `one_program` of ``n`` iterations (state donated) for
    states like ``like``, and the `Hooks` it calls (its iteration from
    ``store`` when given)."""
    key = _cache_key(("one", n, every), (like,), store)
    cache = _PROGRAMS.setdefault(trainer, {})
    if key not in cache:
        hooks = Hooks()
        step = None
        if store is not None:
            step = store.function("iteration", over_runs(trainer.iteration), like)
        fn = jax.jit(one_program(trainer, n, every, hooks, step), donate_argnums=0)
        cache[key] = (fn.lower(like).compile(compiler_options("run")), hooks)
    return cache[key]


@dataclasses.dataclass(frozen=True)
class Chunks:
    """A run in compiled chunks: ``lengths`` are the chunk lengths to compile
    (the full chunk's, then the remainder's, where there are such chunks)."""

    lengths: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class OneProgram:
    """A run as one program: ``num_iterations`` iterations, a progress report
    every ``every`` (`one_program`)."""

    num_iterations: int
    every: int


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What [`compile_run`][jaxsample.algos.programs.compile_run] returns.

    Attributes:
      state: the run's first vmapped state (init's output, or the state given).
      chunks: with [`Chunks`][jaxsample.algos.programs.Chunks], the compiled
        ``state -> (state, metrics [length, R])`` of each chunk length.
      program: with [`OneProgram`][jaxsample.algos.programs.OneProgram], the
        compiled `one_program`, and ``hooks`` the `Hooks` it calls.
    """

    state: Any
    chunks: dict[int, Callable[[Any], Any]] = dataclasses.field(default_factory=dict)
    program: Callable[[Any], Any] | None = None
    hooks: Hooks | None = None


def compile_run(
    trainer: Any,
    keys: Any,
    hparams: Any,
    plan: Chunks | OneProgram,
    *,
    state: Any = None,
    store: ProgramStore | None = None,
) -> Compiled:
    """Compile the programs of a run of ``trainer`` over the runs ``(keys,
    hparams)`` (leading ``[R]``, `jaxsample.algos.runner.run_inputs`) and run
    its init.

    Args:
      plan: `Chunks` or `OneProgram`.
      state: a vmapped state to continue from (a resumed run): no init is
        compiled, and the programs are compiled for it.
      store: where init's and the one program's iteration traces are kept
        between processes (a [`ProgramStore`][jaxsample.algos.program_store.ProgramStore]).

    Returns:
      The [`Compiled`][jaxsample.algos.programs.Compiled] programs and the
      first state. Init compiles on a worker thread while the iterations'
      programs are traced, lowered and compiled for its abstract output;
      everything compiled is kept for the next run of ``trainer``.
    """
    if state is None:
        like, initial = _initial_state(trainer, keys, hparams, store)
    else:
        like, initial = state, lambda: state
    if isinstance(plan, OneProgram):
        program, hooks = _one_program(trainer, plan.num_iterations, plan.every, like, store)
        return Compiled(initial(), program=program, hooks=hooks)
    chunks = {length: _chunk_program(trainer, length, like) for length in plan.lengths}
    return Compiled(initial(), chunks=chunks)

"""Runs a jitted trainer in compiled chunks or as one program, with progress.

A trainer (``jaxsample.algos.ppo.make_train``, ``jaxsample.algos.dqn.make_train``)
is a frozen object of pure functions ``init(key) -> state`` and
``run(state, num_iterations) -> (state, metrics)``. `run_training` vmaps
them over seeds, compiles one chunk of iterations (and the remainder, if any)
once, and runs the chunks back to back: between two chunks it only reads the
small per-iteration metrics, so the display costs one host round trip per chunk.
With ``one_program=True`` it compiles every iteration of the run as one
program (the loop ``reference_run`` times, plus the callbacks) and reports
progress from inside it through ordered host callbacks at a bounded rate. This
is what a run (`jaxsample.runs.train`) uses: one program, or chunks with a run
folder (a checkpoint after every chunk). Init is a program of its own in both, compiled
with cheap XLA options on CPU (`compiler_options`): it runs once. XLA
compiles it on a worker thread while the iterations' program is traced and
lowered for its abstract output (`in_background`). (Not to be confused with
the actor/learner runtime of [`jaxsample.driver`][jaxsample.driver], which
overlaps collection and learning on separate devices.)
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import time
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsample.algos import games
from jaxsample.algos.program_store import ProgramStore


@dataclasses.dataclass
class TrainingResult:
    """What [`run_training`][jaxsample.algos.runner.run_training] measured.

    Attributes:
      env_steps: ``[I]`` environment steps (all envs of one run) after each
        iteration.
      returns: ``[R, I]`` mean return of the episodes completed in each
        iteration, per run (NaN where none completed).
      compile_seconds: time spent compiling (init and the chunk programs).
      wall_seconds: time spent running, compile excluded.
      final_state: the vmapped trainer state.
      metrics: every per-iteration metric of the trainer, numpy ``[R, I]``.
      start_iteration: iterations restored from a checkpoint (not timed here).
      interrupted: the run was stopped early (``run_training``'s ``stop``):
        ``env_steps``, ``returns`` and ``metrics`` hold the iterations run.
    """

    env_steps: np.ndarray
    returns: np.ndarray
    compile_seconds: float
    wall_seconds: float
    final_state: Any
    metrics: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    start_iteration: int = 0
    interrupted: bool = False

    @property
    def total_steps(self) -> int:
        """Environment steps per seed."""
        return int(self.env_steps[-1]) if len(self.env_steps) else 0

    def final_returns(self, window: int = 10) -> np.ndarray:
        """``[R]`` per-run mean of the last ``window`` finite iteration returns."""
        return final_returns(self.returns, window)

    def summary(self, window: int = 10) -> dict[str, Any]:
        """The JSON-ready figures (``final_return`` is the mean over runs; ``num_runs``
        counts the runs, seeds x swept settings; ``steps_per_second`` the steps run
        here, all runs; a game's [`games.final`][jaxsample.algos.games.final])."""
        finals = self.final_returns(window)
        seeds = self.returns.shape[0]  # runs: seeds x swept settings
        per_iteration = self.total_steps / max(len(self.env_steps), 1)
        run_steps = (len(self.env_steps) - self.start_iteration) * per_iteration
        return {
            "final_return": float(np.nanmean(finals)) if np.isfinite(finals).any() else None,
            "final_return_per_seed": [None if not math.isfinite(x) else x for x in finals],
            "total_steps": self.total_steps,
            "num_runs": seeds,
            "wall_seconds": self.wall_seconds,
            "compile_seconds": self.compile_seconds,
            "steps_per_second": run_steps * seeds / max(self.wall_seconds, 1e-9),
            **games.final(self.metrics),
        }


def final_returns(returns: Any, window: int = 10) -> np.ndarray:
    """``[R]``: per run (row of ``returns`` ``[R, I]``), the mean of its last
    ``window`` finite iteration returns (NaN when none is finite)."""
    curves = np.asarray(returns, np.float64).reshape(np.shape(returns)[0], -1)
    tails = [curve[np.isfinite(curve)][-window:] for curve in curves]
    return np.asarray([float(np.mean(t)) if len(t) else math.nan for t in tails])


def chunk_size(num_iterations: int, chunks: int) -> int:
    """Iterations per compiled chunk: a divisor of ``num_iterations`` giving
    about ``chunks`` chunks when there is one (one program to compile), else
    ``ceil(num_iterations / chunks)`` and a remainder chunk."""
    target = max(1, math.ceil(num_iterations / max(chunks, 1)))
    for size in range(target, min(num_iterations, 2 * target) + 1):
        if num_iterations % size == 0:
            return size
    return min(num_iterations, target)


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


#: Compiled programs per trainer, so that a second run of the same trainer in
#: one process (a resumed run, a test) does not compile again.
_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

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


def _init_program(
    trainer: Any, keys: Any, hparams: Any, store: ProgramStore | None
) -> tuple[Callable[[], Any], Any]:
    """``(wait, like)``: ``wait()`` returns the compiled ``vmap(trainer.init)``
    for these arguments (traced from ``store`` when given; XLA compiles it on
    a worker thread, `in_background`) and ``like`` is its abstract output
    (``jax.ShapeDtypeStruct`` s, weak types kept), for which the iterations
    can be traced meanwhile."""
    args = (keys, hparams)
    avals = jax.tree.map(lambda x: (x.shape, x.dtype), args)
    key = ("init", str(jax.tree.structure(args)), str(avals), store is None)
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


def _program(trainer: Any, what: int | tuple, *args: Any, store: ProgramStore | None = None) -> Any:
    """The compiled ``vmap`` of ``trainer.run(state, what)`` (state donated), or
    the one-program run of a state (``what=("one", n, every)``:
    `one_program`, state donated, with the holder of its host callback
    and its iteration from ``store`` when given) for arguments like ``args``
    (arrays or ``jax.ShapeDtypeStruct`` s)."""
    avals = jax.tree.map(lambda x: (x.shape, x.dtype), args)
    key = (what, str(jax.tree.structure(args)), str(avals), store is None)
    cache = _PROGRAMS.setdefault(trainer, {})
    if key not in cache:
        if isinstance(what, tuple):
            holder: list[Callable[..., None]] = [lambda i, m: None]
            step = None
            if store is not None:
                step = store.function("iteration", over_runs(trainer.iteration), *args)
            fn = jax.jit(one_program(trainer, what[1], what[2], holder, step), donate_argnums=0)
            cache[key] = (fn.lower(*args).compile(compiler_options("run")), holder)
        else:
            fn = jax.jit(over_runs(lambda s: trainer.run(s, what)), donate_argnums=0)
            cache[key] = fn.lower(*args).compile(compiler_options("run"))
    return cache[key]


#: Seconds between two checks of ``stop`` inside the one program (the host
#: callback's answer sets the iteration of the next check from the measured
#: time per iteration, so a stop is seen within about this long).
STOP_CHECK_SECONDS = 0.2


def one_program(
    trainer: Any,
    n: int,
    every: int,
    holder: list[Callable[..., Any]],
    step: Callable[..., Any] | None = None,
) -> Callable[[Any], tuple[Any, dict[str, jax.Array], jax.Array]]:
    """The whole vmapped run after init (``vmap(trainer.init)``, compiled
    apart: `compiler_options`) as one function of the vmapped state: a
    ``lax.while_loop`` over up to ``n`` iterations of
    ``vmap(trainer.iteration)`` that hands ``(iteration, metrics [R])`` to
    ``holder[0]`` on the host (an ordered ``io_callback``) after every
    ``every``-th iteration, the last one and a game's evaluations.

    After the first iteration, and then at the iteration it names, it asks
    ``holder[1](iteration)`` (when ``holder`` has a second entry) for the
    iteration of the next check: a negative answer stops the run there (what
    Ctrl-C does in ``jaxsample train``). The iterations run are the same
    computations as a ``lax.scan``'s, so an uninterrupted run is bit-identical.

    ``step`` replaces ``vmap(trainer.iteration)`` with a function that
    computes the same (the exported one of a
    [`ProgramStore`][jaxsample.algos.program_store.ProgramStore]).

    Returns ``(state, metrics, done)``: metrics ``[n, R]`` (rows from ``done``
    on are zeros: not run), ``done`` the iterations run (``n`` unless stopped).
    """
    from jax.experimental import io_callback

    def host(i: Any, metrics: Any) -> None:
        holder[0](i, metrics)

    def check(i: Any) -> np.ndarray:
        return np.int32(holder[1](int(i)) if len(holder) > 1 else n)

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


def run_inputs(trainer: Any, key: jax.Array, seeds: int, hparams: Any = None) -> tuple[Any, Any]:
    """``(keys, hparams)`` of the ``R = seeds * C`` runs, leading axis ``[R]``.

    ``hparams`` is None (one setting, the config's: ``C = 1``) or the
    trainer's ``HParams`` with a leading ``[C]`` axis (a sweep). Run ``r`` is
    seed ``r // C`` (key ``fold_in(key, r // C)``: the settings of one seed
    share its key) with setting ``r % C``.
    """
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if hparams is None:
        hparams = jax.tree.map(lambda x: x[None], trainer.hparams())
    combos = int(jax.tree.leaves(hparams)[0].shape[0])
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(np.repeat(np.arange(seeds), combos))
    hparams = jax.tree.map(lambda x: np.tile(np.asarray(x), seeds), hparams)
    return keys, hparams


def _summary_of(
    metrics: dict[str, np.ndarray], returns_of: Callable[[Any], Any], last: int
) -> tuple[float, float]:
    """Mean recent return and loss (finite values of the last ``last`` iterations)."""
    out = []
    for values in (returns_of(metrics), metrics.get("loss", [[math.nan]])):
        recent = np.asarray(values, np.float64)[:, -max(1, last) :]
        finite = recent[np.isfinite(recent)]
        out.append(float(finite.mean()) if finite.size else math.nan)
    return out[0], out[1]


def _running_event(
    done: int, start: int, n: int, per_iteration: int, runs: int, seconds: float, begin: float,
    recent: tuple[float, float],
) -> dict[str, Any]:  # fmt: skip
    """The progress event after ``done`` of ``n`` iterations (``start`` of them
    restored, the others run in ``seconds``); ``recent``: (return, loss)."""
    rate = (done - start) * per_iteration / max(seconds, 1e-9)
    return {
        "phase": "running",
        "steps": done * per_iteration,
        "total_steps": n * per_iteration,
        "fraction": done / n,
        "steps_per_second": rate * runs,
        "elapsed": time.perf_counter() - begin,
        "eta": (n - done) * per_iteration / max(rate, 1e-9),
        "recent_return": recent[0],
        "recent_loss": recent[1],
    }


def _result(
    merged: dict[str, np.ndarray], returns_of: Callable[[Any], Any], per_iteration: int,
    seconds: tuple[float, float], final_state: Any, **fields: Any,
) -> TrainingResult:  # fmt: skip
    """The [`TrainingResult`][jaxsample.algos.runner.TrainingResult] of the metrics history
    ``merged`` (``[R, I]``),
    ``seconds`` = (compile, wall)."""
    runs, n = next(iter(merged.values())).shape
    return TrainingResult(
        env_steps=np.arange(1, n + 1) * per_iteration,
        returns=np.asarray(returns_of(merged), np.float64).reshape(runs, n),
        metrics=merged,
        compile_seconds=seconds[0],
        wall_seconds=seconds[1],
        final_state=final_state,
        **fields,
    )


def run_training(
    trainer: Any,
    key: jax.Array,
    *,
    seeds: int,
    num_iterations: int,
    steps_per_iteration: int,
    chunks: int = 20,
    returns_of: Callable[[Any], Any] = lambda m: m["episode_return"],
    progress: Callable[[dict[str, Any]], None] | None = None,
    hparams: Any = None,
    resume: tuple[Any, dict[str, np.ndarray]] | None = None,
    on_chunk: Callable[[Any, int, dict[str, np.ndarray]], None] | None = None,
    one_program: bool = False,
    stop: Callable[[], bool] | None = None,
    store: ProgramStore | None = None,
) -> TrainingResult:
    """Train ``seeds`` seeds (x the ``hparams`` settings) at once under ``jax.vmap``.

    Args:
      trainer: has ``init(key, hparams)``, ``hparams()`` and
        ``run(state, num_iterations)``.
      key: a ``jax.random.key``; seed ``i`` uses ``fold_in(key, i)``.
      seeds: number of seeds trained together.
      num_iterations: iterations per run.
      steps_per_iteration: environment steps of one run per iteration.
      chunks: about how many compiled chunks to split the run into (the
        progress display updates, and ``on_chunk`` runs, after each).
      returns_of: picks the ``[R, n]`` per-iteration episode-return metric.
      progress: called with ``{"phase": "compiling"}`` before compiling, then
        after each chunk with ``phase="running"``, ``steps``, ``total_steps``
        (of one run), ``fraction``, ``steps_per_second`` (all runs),
        ``elapsed`` (seconds since the start, compile included), ``eta``
        (seconds), ``recent_return`` and ``recent_loss`` (NaN when unknown), in
        a game ``recent_win_or_draw`` ([`games.progress`][jaxsample.algos.games.progress]).
      hparams: None, or a sweep: the trainer's ``HParams`` with a leading
        ``[C]`` axis ([`run_inputs`][jaxsample.algos.runner.run_inputs]).
      resume: ``(state, metrics)``: continue from this vmapped state (e.g.
        restored by [`jaxsample.checkpoint.restore`][jaxsample.checkpoint.restore]) after the
        iterations of ``metrics`` (numpy ``[R, k]`` each, the history).
      on_chunk: called after each chunk with ``(state, iterations_done,
        metrics [R, iterations_done])`` (the CLI checkpoints and logs here).
      one_program: compile every iteration of the run as ONE program (no
        host round trip between chunks; init is compiled apart, as in
        chunks); ``progress`` is then fed from inside
        it by an ordered host callback every ``num_iterations / chunks``
        iterations (``recent_return``: the mean over the runs of that
        iteration's ``average_return`` metric where the trainer has one, else
        of ``returns_of``; ``recent_loss``: of its ``loss``), and ``on_chunk``
        runs once, at the end.
      stop: a function the run asks whether to stop early (e.g. set by a
        Ctrl-C handler): in one program, from inside it about every
        `STOP_CHECK_SECONDS` (the program then ends after the current
        iteration); in chunks, after each chunk (and its ``on_chunk``). The
        result then holds the iterations run, with ``interrupted=True``.
      store: with ``one_program``, where the program's traced init and
        iteration are kept between processes (``jaxsample train`` passes one
        when JAX's compilation cache is on: a second run then neither traces
        nor compiles them).
    """
    if num_iterations < 1:
        raise ValueError(f"num_iterations must be >= 1, got {num_iterations}")
    chunk = chunk_size(num_iterations, chunks)
    keys, hparams = run_inputs(trainer, key, seeds, hparams)
    runs = int(keys.shape[0])
    if one_program:
        if resume is not None:
            raise ValueError("one_program=True starts a run; resume runs in chunks")
        args = (keys, hparams, num_iterations, steps_per_iteration, chunk)
        return _run_one_program(trainer, *args, returns_of, progress, on_chunk, stop, store)
    history: dict[str, list[np.ndarray]] = {}
    start, held = 0, []
    if resume is not None:
        state, past = resume
        history = {k: [np.asarray(v)] for k, v in past.items()}
        start = int(next(iter(past.values())).shape[1]) if past else 0
    begin = time.perf_counter()
    if progress is not None:
        progress({"phase": "compiling", "total_steps": num_iterations * steps_per_iteration})
    if resume is None:
        t0 = begin
        like, initial = _initial_state(trainer, keys, hparams)
    else:
        t0 = time.perf_counter()  # a resumed run compiles no init
        like, initial = state, lambda: state
    n_full, rest = divmod(num_iterations - start, chunk)
    run_chunk = _program(trainer, chunk, like) if n_full else None
    run_rest = _program(trainer, rest, like) if rest else None
    state = initial()
    compile_seconds = time.perf_counter() - t0

    wall = 0.0
    done = start
    for fn, n in [(run_chunk, chunk)] * n_full + ([(run_rest, rest)] if rest else []):
        t0 = time.perf_counter()
        state, metrics = fn(state)
        for k, v in jax.device_get(metrics).items():
            history.setdefault(k, []).append(np.asarray(v).reshape(runs, n))
        wall += time.perf_counter() - t0
        done += n
        merged = {k: np.concatenate(v, axis=1) for k, v in history.items()}
        if on_chunk is not None:
            on_chunk(state, done, merged)
        if progress is not None:
            recent = _summary_of(merged, returns_of, chunk)
            args = (done, start, num_iterations, steps_per_iteration, runs, wall, begin, recent)
            progress(games.progress(_running_event(*args), merged, held))
        if stop is not None and done < num_iterations and stop():
            break
    merged = {k: np.concatenate(v, axis=1) for k, v in history.items()}
    seconds = (compile_seconds, wall)
    return _result(
        merged, returns_of, steps_per_iteration, seconds, state, start_iteration=start,
        interrupted=done < num_iterations,
    )  # fmt: skip


def _run_one_program(
    trainer: Any,
    keys: Any,
    hparams: Any,
    num_iterations: int,
    steps_per_iteration: int,
    every: int,
    returns_of: Callable[[Any], Any],
    progress: Callable[[dict[str, Any]], None] | None,
    on_chunk: Callable[[Any, int, dict[str, np.ndarray]], None] | None,
    stop: Callable[[], bool] | None = None,
    store: ProgramStore | None = None,
) -> TrainingResult:
    """[`run_training`][jaxsample.algos.runner.run_training] with ``one_program=True``."""
    runs = int(keys.shape[0])
    begin = time.perf_counter()
    if progress is not None:
        progress({"phase": "compiling", "total_steps": num_iterations * steps_per_iteration})
    like, initial = _initial_state(trainer, keys, hparams, store)
    compiled, holder = _program(trainer, ("one", num_iterations, every), like, store=store)
    state = initial()  # milliseconds
    compile_seconds = time.perf_counter() - begin
    t0, held = time.perf_counter(), []

    def report(i: Any, metrics: dict[str, np.ndarray]) -> None:
        last = {k: np.reshape(v, (runs, 1)) for k, v in metrics.items()}
        # One iteration may end no episode: prefer the trainer's windowed average.
        pick = (lambda m: m["average_return"]) if "average_return" in last else returns_of
        recent = _summary_of(last, pick, 1)
        seconds = time.perf_counter() - t0
        args = (int(i) + 1, 0, num_iterations, steps_per_iteration, runs, seconds, begin, recent)
        progress(games.progress(_running_event(*args), last, held))

    def check(i: int) -> int:
        """The iteration count of the next stop check, or -1: stop now."""
        if stop():
            return -1
        per_iteration = (time.perf_counter() - t0) / (i + 1)
        ahead = int(min(STOP_CHECK_SECONDS / max(per_iteration, 1e-9), num_iterations))
        return min(i + 1 + max(1, ahead), np.iinfo(np.int32).max)

    holder[:] = [report if progress is not None else (lambda i, m: None)]
    if stop is not None:
        holder.append(check)
    try:
        if stop is None:
            out = jax.block_until_ready(compiled(state))
        else:
            out = _call_interruptibly(compiled, state)
    finally:
        holder[:] = [lambda i, m: None]
    state, metrics, done = out
    wall = time.perf_counter() - t0
    done = int(done)
    merged = {k: np.asarray(v)[:done].reshape(done, runs).T for k, v in metrics.items()}
    if on_chunk is not None:
        on_chunk(state, done, merged)
    seconds = (compile_seconds, wall)
    return _result(
        merged, returns_of, steps_per_iteration, seconds, state, interrupted=done < num_iterations
    )


def _call_interruptibly(fn: Callable[..., Any], *args: Any) -> Any:
    """``block_until_ready(fn(*args))`` in a worker thread while the main thread
    waits in short sleeps, so that its signal handlers (Ctrl-C) run while the
    program runs: a program with host callbacks runs synchronously on CPU,
    and a main thread blocked in it would run no Python signal handler."""
    import threading

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

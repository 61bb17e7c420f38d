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
folder (a checkpoint after every chunk). The programs, and how they are
compiled (init apart, with cheap XLA options on CPU, on a worker thread), are
[`jaxsample.algos.programs`][jaxsample.algos.programs]'s. (Not to be confused
with the actor/learner runtime of [`jaxsample.driver`][jaxsample.driver], which
overlaps collection and learning on separate devices.)
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxsample.algos import games, programs
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


#: Seconds between two checks of ``stop`` inside the one program (the host
#: callback's answer sets the iteration of the next check from the measured
#: time per iteration, so a stop is seen within about this long).
STOP_CHECK_SECONDS = 0.2


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


@dataclasses.dataclass(frozen=True)
class _Run:
    """`run_training`'s settings, as its two ways of running read them
    (``per_iteration``: environment steps of one run per iteration;
    ``chunk``: iterations per chunk, or between two progress reports)."""

    trainer: Any
    keys: Any
    hparams: Any
    num_iterations: int
    per_iteration: int
    chunk: int
    returns_of: Callable[[Any], Any]
    progress: Callable[[dict[str, Any]], None] | None
    on_chunk: Callable[[Any, int, dict[str, np.ndarray]], None] | None
    stop: Callable[[], bool] | None

    @property
    def runs(self) -> int:
        """``R``, the runs trained together (seeds x swept settings)."""
        return int(self.keys.shape[0])

    def compiling(self) -> float:
        """Send the ``compiling`` event; returns the time it started."""
        begin = time.perf_counter()
        if self.progress is not None:
            total = self.num_iterations * self.per_iteration
            self.progress({"phase": "compiling", "total_steps": total})
        return begin

    def running(
        self, done: int, start: int, seconds: float, begin: float, recent: tuple[float, float],
        metrics: dict[str, np.ndarray], held: list,
    ) -> None:  # fmt: skip
        """Send the progress event after ``done`` iterations (``start`` of them
        restored, the others run in ``seconds``); ``recent``: (return, loss)."""
        n, per_iteration = self.num_iterations, self.per_iteration
        rate = (done - start) * per_iteration / max(seconds, 1e-9)
        event = {
            "phase": "running",
            "steps": done * per_iteration,
            "total_steps": n * per_iteration,
            "fraction": done / n,
            "steps_per_second": rate * self.runs,
            "elapsed": time.perf_counter() - begin,
            "eta": (n - done) * per_iteration / max(rate, 1e-9),
            "recent_return": recent[0],
            "recent_loss": recent[1],
        }
        self.progress(games.progress(event, metrics, held))

    def result(
        self, merged: dict[str, np.ndarray], seconds: tuple[float, float], final_state: Any,
        **fields: Any,
    ) -> TrainingResult:  # fmt: skip
        """The [`TrainingResult`][jaxsample.algos.runner.TrainingResult] of the
        metrics history ``merged`` (``[R, I]``), ``seconds`` = (compile, wall)."""
        runs, n = next(iter(merged.values())).shape
        return TrainingResult(
            env_steps=np.arange(1, n + 1) * self.per_iteration,
            returns=np.asarray(self.returns_of(merged), np.float64).reshape(runs, n),
            metrics=merged,
            compile_seconds=seconds[0],
            wall_seconds=seconds[1],
            final_state=final_state,
            interrupted=n < self.num_iterations,
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
    returns_of: Callable[[Any], Any] = lambda m: m["episode_return_mean"],
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
    if one_program and resume is not None:
        raise ValueError("one_program=True starts a run; resume runs in chunks")
    keys, hparams = run_inputs(trainer, key, seeds, hparams)
    run = _Run(
        trainer, keys, hparams, num_iterations, steps_per_iteration,
        chunk_size(num_iterations, chunks), returns_of, progress, on_chunk, stop,
    )  # fmt: skip
    return _run_one_program(run, store) if one_program else _run_chunks(run, resume)


def _run_chunks(run: _Run, resume: tuple[Any, dict[str, np.ndarray]] | None) -> TrainingResult:
    """[`run_training`][jaxsample.algos.runner.run_training] in chunks."""
    history: dict[str, list[np.ndarray]] = {}
    start, held, state = 0, [], None
    if resume is not None:
        state, past = resume
        history = {k: [np.asarray(v)] for k, v in past.items()}
        start = int(next(iter(past.values())).shape[1]) if past else 0
    begin = run.compiling()
    t0 = begin if resume is None else time.perf_counter()  # a resumed run compiles no init
    n_full, rest = divmod(run.num_iterations - start, run.chunk)
    plan = programs.Chunks(((run.chunk,) if n_full else ()) + ((rest,) if rest else ()))
    compiled = programs.compile_run(run.trainer, run.keys, run.hparams, plan, state=state)
    state, compile_seconds = compiled.state, time.perf_counter() - t0
    wall, done = 0.0, start
    for n in [run.chunk] * n_full + ([rest] if rest else []):
        t0 = time.perf_counter()
        state, metrics = compiled.chunks[n](state)
        for k, v in jax.device_get(metrics).items():
            history.setdefault(k, []).append(np.asarray(v).reshape(run.runs, n))
        wall += time.perf_counter() - t0
        done += n
        merged = {k: np.concatenate(v, axis=1) for k, v in history.items()}
        if run.on_chunk is not None:
            run.on_chunk(state, done, merged)
        if run.progress is not None:
            recent = _summary_of(merged, run.returns_of, run.chunk)
            run.running(done, start, wall, begin, recent, merged, held)
        if run.stop is not None and done < run.num_iterations and run.stop():
            break
    merged = {k: np.concatenate(v, axis=1) for k, v in history.items()}
    return run.result(merged, (compile_seconds, wall), state, start_iteration=start)


def _run_one_program(run: _Run, store: ProgramStore | None) -> TrainingResult:
    """[`run_training`][jaxsample.algos.runner.run_training] with ``one_program=True``."""
    begin = run.compiling()
    plan = programs.OneProgram(run.num_iterations, run.chunk)
    compiled = programs.compile_run(run.trainer, run.keys, run.hparams, plan, store=store)
    compile_seconds = time.perf_counter() - begin
    t0, held = time.perf_counter(), []

    def report(i: Any, metrics: dict[str, np.ndarray]) -> None:
        last = {k: np.reshape(v, (run.runs, 1)) for k, v in metrics.items()}
        # One iteration may end no episode: prefer the trainer's windowed average.
        pick = (lambda m: m["average_return"]) if "average_return" in last else run.returns_of
        run.running(int(i) + 1, 0, time.perf_counter() - t0, begin, _summary_of(last, pick, 1),
                    last, held)  # fmt: skip

    def check(i: int) -> int:
        """The iteration count of the next stop check, or -1: stop now."""
        if run.stop():
            return -1
        per_iteration = (time.perf_counter() - t0) / (i + 1)
        ahead = int(min(STOP_CHECK_SECONDS / max(per_iteration, 1e-9), run.num_iterations))
        return min(i + 1 + max(1, ahead), np.iinfo(np.int32).max)

    hooks = compiled.hooks
    hooks.clear()
    if run.progress is not None:
        hooks.report = report
    if run.stop is not None:
        hooks.check = check
    try:
        if run.stop is None:
            out = jax.block_until_ready(compiled.program(compiled.state))
        else:
            out = _call_interruptibly(compiled.program, compiled.state)
    finally:
        hooks.clear()
    state, metrics, done = out
    wall, done = time.perf_counter() - t0, int(done)
    merged = {k: np.asarray(v)[:done].reshape(done, run.runs).T for k, v in metrics.items()}
    if run.on_chunk is not None:
        run.on_chunk(state, done, merged)
    return run.result(merged, (compile_seconds, wall), state)


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

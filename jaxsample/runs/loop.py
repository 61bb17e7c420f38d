"""The run loop: a trainer's runs, vmapped, as one program or in chunks, with progress.

[`run_training`][jaxsample.runs.loop.run_training] trains ``seeds`` seeds (x
swept settings) of a trainer at once under ``jax.vmap``, with one of the two
program strategies of [`jaxsample.runs.programs`][jaxsample.runs.programs]:
every iteration in ONE compiled program that reports progress from inside
(ordered host callbacks), or compiled chunks between which the host reads the
small per-iteration metrics (a checkpoint after each, resumable). It knows a
trainer only by the [`Trainer`][jaxsample.algos.trainer.Trainer] protocol, and
what its metrics mean by its [`Reports`][jaxsample.algos.trainer.Reports]:
the episode return, the loss, and the metrics of an evaluation the trainer
may run inside some iterations (shown and summarised under their own names).
This is what a run ([`jaxsample.runs.train`][jaxsample.runs.run.train]) uses:
one program, or chunks with a run folder. (Not to be confused with the
actor/learner runtime of [`jaxsample.driver`][jaxsample.driver], which
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

from jaxsample._checks import check_key
from jaxsample.algos.trainer import Reports, Trainer
from jaxsample.runs.program_store import ProgramStore
from jaxsample.runs.programs import Chunks, Hooks, OneProgram, Runs

__all__ = [
    "RECENT_FRACTION", "RECENT_MIN", "TrainingResult", "chunk_size", "final_returns", "latest",
    "recent_of", "recent_returns", "recent_window", "run_inputs", "run_training", "runs_of",
]  # fmt: skip

#: The recent return spans the last ``1 / RECENT_FRACTION`` of a run's
#: iterations (`recent_window`) ...
RECENT_FRACTION = 20
#: ... and at least this many (a shorter run: all of them).
RECENT_MIN = 10


def chunk_size(num_iterations: int, chunks: int) -> int:
    """Iterations between two reports of a run split into about ``chunks``
    (its compiled chunks, or the one program's progress reports): a divisor of
    ``num_iterations`` giving about ``chunks`` chunks when there is one (one
    program to compile), else ``ceil(num_iterations / chunks)`` and a
    remainder chunk."""
    target = max(1, math.ceil(num_iterations / max(chunks, 1)))
    for size in range(target, min(num_iterations, 2 * target) + 1):
        if num_iterations % size == 0:
            return size
    return min(num_iterations, target)


def recent_window(num_iterations: int) -> int:
    """The iterations a run's recent return spans (`recent_returns`): the last
    twentieth of its ``num_iterations`` (`RECENT_FRACTION`), at least
    `RECENT_MIN` (all of a shorter run). Fixed for the run: the chunks, a
    resume or the one program's reports do not change it."""
    n = max(int(num_iterations), 1)
    return min(n, max(RECENT_MIN, math.ceil(n / RECENT_FRACTION)))


def recent_returns(returns: Any, episodes: Any = None, window: int = RECENT_MIN) -> np.ndarray:
    """``[R, I]``: after each iteration, each run's recent return, the mean
    return of the episodes that ended in the last ``window`` iterations.

    Args:
      returns: ``[R, I]`` each iteration's mean episode return (NaN where no
        episode ended).
      episodes: ``[R, I]`` each iteration's number of ended episodes (the
        weight of its mean), or None (an iteration with episodes weighs 1).
      window: iterations (`recent_window`).

    Where no episode ended in the last ``window`` iterations the value is the
    previous iteration's (held), NaN before the first episode. A value
    depends only on the iterations up to its own, so a chunk's end, a stop,
    the one program's reports and the whole run read the same number for
    one iteration.
    """
    window = int(window)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    returns = np.asarray(returns, np.float64)
    returns = returns.reshape(returns.shape[0], -1)
    ended = np.isfinite(returns)
    if episodes is None:
        counts = ended.astype(np.float64)
    else:
        counts = np.where(ended, np.asarray(episodes, np.float64).reshape(returns.shape), 0.0)
    totals = np.where(ended, returns, 0.0) * counts

    def last_window(x: np.ndarray) -> np.ndarray:  # sums over (i - window, i]
        sums = np.cumsum(x, axis=1)
        sums[:, window:] -= sums[:, :-window].copy()
        return sums

    n, total = last_window(counts), last_window(totals)
    has = n > 0
    means = np.divide(total, n, out=np.full(n.shape, np.nan), where=has)
    latest_with = np.maximum.accumulate(np.where(has, np.arange(n.shape[1]), -1), axis=1)
    held = np.take_along_axis(means, np.maximum(latest_with, 0), axis=1)
    return np.where(latest_with >= 0, held, np.nan)


def recent_of(history: dict[str, np.ndarray], reports: Reports, window: int) -> np.ndarray:
    """``[R, I]`` `recent_returns` of a run's metric ``history`` (``[R, I]``
    each): ``reports.returns`` weighted by ``reports.episodes`` where the
    trainer reports it; all NaN without the return."""
    if reports.returns not in history:
        shape = np.shape(next(iter(history.values()))) if history else (1, 0)
        return np.full(shape, np.nan)
    counts = history.get(reports.episodes) if reports.episodes else None
    return recent_returns(history[reports.returns], counts, window)


@dataclasses.dataclass
class TrainingResult:
    """What [`run_training`][jaxsample.runs.loop.run_training] measured.

    Attributes:
      env_steps: ``[I]`` environment steps (all envs of one run) after each
        iteration run (``I`` iterations: all, or those before a stop).
      returns: ``[R, I]`` mean return of the episodes completed in each
        iteration, per run (NaN where none completed).
      compile_seconds: time spent compiling (init and the chunk programs).
      wall_seconds: time spent running, compile excluded.
      final_state: the vmapped trainer state.
      metrics: every per-iteration metric of the trainer, numpy ``[R, I]``.
      start_iteration: iterations restored from a checkpoint (not timed here).
      interrupted: the run was stopped early (``run_training``'s ``stop``):
        ``env_steps``, ``returns`` and ``metrics`` hold the iterations run.
      num_iterations: the iterations the run was to train (``I`` unless
        interrupted; 0: ``I``).
      reports: what the metrics are (the trainer's
        [`Reports`][jaxsample.algos.trainer.Reports]).
      recent_window: the iterations the recent return spans (0:
        `recent_window` of ``num_iterations``).
    """

    env_steps: np.ndarray
    returns: np.ndarray
    compile_seconds: float
    wall_seconds: float
    final_state: Any
    metrics: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    start_iteration: int = 0
    interrupted: bool = False
    num_iterations: int = 0
    reports: Reports = dataclasses.field(default_factory=Reports)
    recent_window: int = 0

    def __post_init__(self) -> None:
        self.num_iterations = int(self.num_iterations) or len(self.env_steps)
        self.recent_window = int(self.recent_window) or recent_window(self.num_iterations)

    @property
    def iterations(self) -> int:
        """Iterations done (restored ones included)."""
        return len(self.env_steps)

    @property
    def total_steps(self) -> int:
        """Environment steps per seed."""
        return int(self.env_steps[-1]) if len(self.env_steps) else 0

    def recent_returns(self, window: int | None = None) -> np.ndarray:
        """``[R, I]`` each run's recent return after each iteration
        (`recent_returns`: the mean return of the episodes that ended in the
        last ``window`` iterations, default `recent_window`; the CSV's
        ``recent_return``)."""
        history = {**self.metrics, self.reports.returns: self.returns}
        return recent_of(history, self.reports, window or self.recent_window)

    def final_returns(self, window: int | None = None) -> np.ndarray:
        """``[R]`` each run's recent return after its last iteration (NaN
        before any episode ended): the closing table's and the JSON's
        ``final_return``."""
        recent = self.recent_returns(window)
        return recent[:, -1] if recent.shape[1] else np.full(recent.shape[0], np.nan)

    def evaluation(self) -> dict[str, np.ndarray]:
        """``{metric: [R]}``: each run's latest finite value (`latest`) of each
        evaluation metric the trainer reports (``reports.evaluation``, the
        headline first; empty without one)."""
        names = [m for m in self.reports.evaluation if m in self.metrics]
        return {name: latest(self.metrics[name]) for name in names}

    def summary(self, window: int | None = None) -> dict[str, Any]:
        """The JSON-ready figures (``final_return`` the mean over runs of
        `final_returns`, ``recent_window`` the iterations it spans; ``num_runs``
        counts the runs, seeds x swept settings; ``steps_per_second`` the steps run
        here, all runs; per evaluation metric ``final_<name>``, the mean over
        runs of their latest values, and ``final_<name>_per_seed``)."""
        finals = self.final_returns(window)
        seeds = self.returns.shape[0]  # runs: seeds x swept settings
        per_iteration = self.total_steps / max(len(self.env_steps), 1)
        run_steps = (len(self.env_steps) - self.start_iteration) * per_iteration
        out = {
            "final_return": _json(_finite_mean(finals)),
            "final_return_per_seed": [None if not math.isfinite(x) else x for x in finals],
            "recent_window": int(window or self.recent_window),
            "total_steps": self.total_steps,
            "num_runs": seeds,
            "wall_seconds": self.wall_seconds,
            "compile_seconds": self.compile_seconds,
            "steps_per_second": run_steps * seeds / max(self.wall_seconds, 1e-9),
        }
        for name, last in self.evaluation().items():
            out[f"final_{name}"] = _json(_finite_mean(last))
            out[f"final_{name}_per_seed"] = [_json(x) for x in last]
        return out


def _finite_mean(values: Any) -> float:
    """The mean of the finite ``values``, NaN when none is."""
    values = np.asarray(values, np.float64)
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else math.nan


def _json(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def final_returns(returns: Any, window: int = 10) -> np.ndarray:
    """``[R]``: per run (row of ``returns`` ``[R, I]``), the mean of its last
    ``window`` finite iteration returns (NaN when none is finite): the
    benchmarks' final return (a run's own is `TrainingResult.final_returns`)."""
    curves = np.asarray(returns, np.float64).reshape(np.shape(returns)[0], -1)
    tails = [curve[np.isfinite(curve)][-window:] for curve in curves]
    return np.asarray([float(np.mean(t)) if len(t) else math.nan for t in tails])


def latest(values: Any) -> np.ndarray:
    """``[R]``: each run's (row of ``values`` ``[R, I]``) last finite value,
    NaN where none is (an evaluation metric: NaN between evaluations)."""
    values = np.asarray(values, np.float64).reshape(np.shape(values)[0], -1)
    out = [row[np.isfinite(row)][-1] if np.isfinite(row).any() else math.nan for row in values]
    return np.asarray(out, np.float64)


def runs_of(trainer: Trainer, key: jax.Array, seeds: int, hparams: Any = None) -> Runs:
    """The `Runs` ``(key, seed, hparams)`` of ``R = seeds * C`` runs, leading axis ``[R]``.

    ``hparams`` is None (one setting, the config's: ``C = 1``) or the
    trainer's ``HParams`` with a leading ``[C]`` axis (a sweep). Run ``r`` is
    seed ``r // C`` (key ``fold_in(key, r // C)``: the settings of one seed
    share its key) with setting ``r % C``. Numpy, and the key as given:
    nothing here is a compiled program.
    """
    check_key(key)
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if hparams is None:
        hparams = jax.tree.map(lambda x: np.asarray(x)[None], trainer.hparams())
    combos = int(jax.tree.leaves(hparams)[0].shape[0])
    seed = np.repeat(np.arange(seeds, dtype=np.int32), combos)
    hparams = jax.tree.map(lambda x: np.tile(np.asarray(x), seeds), hparams)
    return Runs(key, seed, hparams)


def run_inputs(
    trainer: Trainer, key: jax.Array, seeds: int, hparams: Any = None
) -> tuple[Any, Any]:
    """``(keys, hparams)`` of the runs `runs_of` makes: their keys ``[R]``
    (``fold_in(key, r // C)``) and settings, leading axis ``[R]``."""
    runs = runs_of(trainer, key, seeds, hparams)
    return runs.keys(), runs.hparams


@dataclasses.dataclass(frozen=True)
class _Progress:
    """A run's progress events, sent to ``send`` (module `run_training`)."""

    send: Callable[[dict[str, Any]], None]
    reports: Reports
    num_iterations: int
    per_iteration: int
    window: int
    start: int
    begin: float = dataclasses.field(default_factory=time.perf_counter)

    def compiling(self) -> None:
        total = self.num_iterations * self.per_iteration
        self.send({"phase": "compiling", "total_steps": total})

    def running(self, done: int, history: dict[str, np.ndarray], seconds: float) -> None:
        """The event after ``done`` iterations (``start`` of them restored, the
        others run in ``seconds``), of the metrics ``history`` ``[R, done]``."""
        n, per_iteration = self.num_iterations, self.per_iteration
        runs = next(iter(history.values())).shape[0] if history else 1
        rate = (done - self.start) * per_iteration / max(seconds, 1e-9)
        event = {
            "phase": "running",
            "steps": done * per_iteration,
            "total_steps": n * per_iteration,
            "fraction": done / n,
            "steps_per_second": rate * runs,
            "elapsed": time.perf_counter() - self.begin,
            "eta": (n - done) * per_iteration / max(rate, 1e-9),
            "recent_return": _finite_mean(recent_of(history, self.reports, self.window)[:, -1]),
            "recent_loss": self._recent(history, self.reports.loss),
        }
        if self.reports.evaluation:  # each one's latest value, mean over runs; headline first
            event["evaluation"] = {
                name: _finite_mean(latest(history[name])) if name in history else math.nan
                for name in self.reports.evaluation
            }
        self.send(event)

    def _recent(self, history: dict[str, np.ndarray], name: str | None) -> float:
        """The mean of metric ``name``'s finite values of the last `window`
        iterations (NaN without any, or without the metric)."""
        if name not in history:
            return math.nan
        return _finite_mean(np.asarray(history[name])[:, -self.window :])


def run_training(
    trainer: Trainer,
    key: jax.Array,
    *,
    seeds: int = 1,
    num_iterations: int | None = None,
    chunks: int = 20,
    hparams: Any = None,
    one_program: bool = False,
    resume: tuple[Any, dict[str, np.ndarray]] | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    on_chunk: Callable[[Any, int, dict[str, np.ndarray]], None] | None = None,
    stop: Callable[[], bool] | None = None,
    store: ProgramStore | None = None,
    meanwhile: Callable[[], Any] | None = None,
) -> TrainingResult:
    """Train ``seeds`` seeds (x the ``hparams`` settings) of ``trainer`` at once
    under ``jax.vmap``.

    Args:
      trainer: a [`Trainer`][jaxsample.algos.trainer.Trainer].
      key: a ``jax.random.key``; seed ``i`` uses ``fold_in(key, i)``.
      seeds: number of seeds trained together.
      num_iterations: iterations per run (default: ``trainer.num_iterations``).
      chunks: about how many chunks to split the run into
        (`chunk_size`): the compiled
        chunks (``on_chunk`` runs after each), or the one program's progress
        reports.
      hparams: None, or a sweep: the trainer's ``HParams`` with a leading
        ``[C]`` axis ([`run_inputs`][jaxsample.runs.loop.run_inputs]).
      one_program: compile every iteration of the run as ONE program (no host
        round trip between chunks; init is compiled apart, as in chunks),
        reporting progress from inside it; ``on_chunk`` runs once, at the end.
        Else the run is compiled chunks.
      resume: ``(state, metrics)``: continue in chunks from this vmapped state
        (e.g. restored by [`jaxsample.checkpoint.restore`][jaxsample.checkpoint.restore])
        after the iterations of ``metrics`` (numpy ``[R, k]`` each, the history).
      progress: called with ``{"phase": "compiling", "total_steps"}`` before
        compiling, then after each chunk (one program: every chunk's worth of
        iterations, the last one and each evaluation) with ``phase="running"``,
        ``steps``, ``total_steps`` (of one run), ``fraction``,
        ``steps_per_second`` (all runs), ``elapsed`` (seconds since the start,
        compile included), ``eta`` (seconds), ``recent_return`` (the mean over
        runs of each one's recent return, `recent_returns` over
        `recent_window` iterations, as the CSV's ``recent_return`` and the
        JSON's ``final_return``: the same whatever the chunks) and
        ``recent_loss`` (the mean of the loss's finite values of those
        iterations; NaN when none), and for a trainer that reports an
        evaluation ``evaluation``:
        ``{metric: the mean over runs of each run's latest finite value}``
        (NaN before the first; the headline first).
      on_chunk: called after each chunk with ``(state, iterations_done,
        metrics [R, iterations_done])`` (a run checkpoints and logs here).
      stop: a function the run asks whether to stop early (e.g. set by a
        Ctrl-C handler): in one program, from inside it about every
        [`STOP_CHECK_SECONDS`][jaxsample.runs.programs.STOP_CHECK_SECONDS]
        (the program then ends after the current iteration); in chunks, after
        each chunk (and its ``on_chunk``). The result then holds the
        iterations run, with ``interrupted=True``.
      meanwhile: in chunks, called on a worker thread once they are
        compiled, beside the first chunks (what Python can do meanwhile: the
        imports a run folder's checkpoints need); what it raises is ignored.
      store: where the programs' traced init and iteration are kept between
        processes (``jaxsample train`` passes one
        when JAX's compilation cache is on: a second run then neither traces
        nor compiles them).
    """
    n = int(trainer.num_iterations if num_iterations is None else num_iterations)
    if n < 1:
        raise ValueError(f"num_iterations must be >= 1, got {n}")
    if one_program and resume is not None:
        raise ValueError("one_program=True starts a run; resume runs in chunks")
    runs = runs_of(trainer, key, seeds, hparams)
    every = chunk_size(n, chunks)
    state, history = resume if resume is not None else (None, {})
    start = next(iter(history.values())).shape[1] if history else 0
    events = None
    window = recent_window(n)
    if progress is not None:
        per_iteration = trainer.steps_per_iteration
        events = _Progress(progress, trainer.reports, n, per_iteration, window, start)
        events.compiling()
    hooks = Hooks(None if events is None else events.running, on_chunk, stop)
    t0 = time.perf_counter()
    if one_program:
        program, state = OneProgram.compile(trainer, runs, n, every, store)
        compile_seconds = time.perf_counter() - t0
        state, history, seconds = program.run(state, hooks)
    else:
        full, rest = divmod(max(n - start, 0), every)
        lengths = (every,) * full + ((rest,) if rest else ())
        chunked, state = Chunks.compile(trainer, runs, lengths, state, store, meanwhile)
        compile_seconds = time.perf_counter() - t0
        state, history, seconds = chunked.run(state, history, hooks)
    done = next(iter(history.values())).shape[1]
    return TrainingResult(
        env_steps=np.arange(1, done + 1) * trainer.steps_per_iteration,
        returns=np.asarray(history[trainer.reports.returns], np.float64).reshape(-1, done),
        metrics=history,
        compile_seconds=compile_seconds,
        wall_seconds=seconds,
        final_state=state,
        start_iteration=start,
        interrupted=done < n,
        num_iterations=n,
        reports=trainer.reports,
        recent_window=window,
    )

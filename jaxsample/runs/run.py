"""`train`: one training run, from the command line or a notebook.

A run is a config (`jaxsample.algos.configs.PPOConfig` or `DQNConfig`)
trained for every seed (and every swept setting) under one ``jax.vmap``
(the run loop, `jaxsample.runs.loop.run_training`). Around it the run owns:

* its folder (optional): the lock (one writer), the settings (``run.json``,
  compared with the folder's before anything else happens), checkpoints
  (every `CHECKPOINT_SECONDS` at a chunk's end, at the end and at a stop), and
  resuming from the latest one, bit for bit;
* its outputs: a progress display, the summary, JSON, CSV and PNG, written
  beside and renamed into place, also when the run is stopped;
* its signals: ``SIGINT`` / ``SIGTERM`` / a notebook's interrupt stop it
  after the iterations it has completed, which it keeps
  (`jaxsample.runs.signals.StopSignals`).

`jaxsample train` parses its flags and calls `train` once.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import textwrap
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxsample.algos import presets, registry
from jaxsample.runs.files import replace_file
from jaxsample.runs.folder import RunFolder
from jaxsample.runs.logs import MetricLogs, run_names
from jaxsample.runs.signals import StopSignals

__all__ = [
    "CHECKPOINT_SECONDS", "RunResult", "algo_of", "build_trainer", "config_type", "environment",
    "final_line", "train",
]  # fmt: skip

#: `train`'s default time between two checkpoints of a run folder (seconds):
#: a checkpoint costs about 0.1 s on a 2-core CPU (orbax's manager, the files),
#: so a run of a few seconds saves once, at its end, instead of after each of
#: its 20 chunks; a signal saves at once.
CHECKPOINT_SECONDS = 60.0

_PACKAGES = ("jaxsample", "jax", "jaxlib", "flax", "optax", "gymnax")


def environment() -> dict[str, Any]:
    """Versions of the packages a run depends on, the backend and its devices."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "versions": versions,
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "device_count": jax.device_count(),
    }


def config_type(algo: str) -> type:
    """The config dataclass of an algorithm name (``ppo``, ``ppo-rnn``, ``dqn``:
    [`jaxsample.algos.registry`][jaxsample.algos.registry])."""
    return registry.get(algo).config_type


def algo_of(config: Any) -> str:
    """The algorithm name of a config: ``dqn``, ``ppo-rnn`` or ``ppo``."""
    return registry.of_config(config).name


def build_trainer(config: Any) -> Any:
    """The trainer of ``config`` (a new one each call: programs are not kept
    per trainer; JAX's compilation cache serves a second run's)."""
    return registry.of_config(config).make_train(config)


def sweep_runs(
    seeds: range | list[int], sweep: dict[str, list[float]]
) -> tuple[list[int], list[dict[str, float]]]:
    """``(seed of each run, swept values of each run)``: seeds outermost, then
    every combination of the swept values (the cartesian product, in order)."""
    import itertools

    names = list(sweep)
    combos = [dict(zip(names, c, strict=True)) for c in itertools.product(*sweep.values())]
    return [s for s in seeds for _ in combos], [c for _ in seeds for c in combos]


def sweep_hparams(trainer: Any, settings: list[dict[str, float]], seeds: int) -> Any:
    """The trainer's ``HParams`` with a leading ``[C]`` axis, one per swept
    setting (``settings`` is per run: ``seeds`` times the ``C`` settings)."""
    if not settings or not settings[0]:
        return None
    settings = settings[: len(settings) // seeds]
    names = list(settings[0])
    return trainer.hparams(**{n: np.asarray([s[n] for s in settings], np.float32) for n in names})


def record_of(
    config: Any, seed: int, seeds: int, sweep: dict[str, list], preset: str | None = None
) -> dict[str, Any]:
    """What fixes a run's results (``run.json``: a resumed run must match it),
    and the name of the preset its config started from (``preset``: where the
    settings came from, not compared: the config is)."""
    import json

    data = {
        "algo": algo_of(config),
        "config": dataclasses.asdict(config),
        "seed": seed,
        "seeds": seeds,
        "sweep": sweep,
        "preset": preset,
    }
    return json.loads(json.dumps(data))


def _groups(settings: list[dict[str, float]]) -> dict[str, list[int]] | None:
    """``{setting label: run indices}`` of a sweep (its seeds), else None."""
    if not settings or not settings[0]:
        return None
    out: dict[str, list[int]] = {}
    for r, setting in enumerate(settings):
        out.setdefault(" ".join(f"{k}={v:g}" for k, v in setting.items()), []).append(r)
    return out


@dataclasses.dataclass
class RunResult:
    """What `train` returns.

    Attributes:
      training: the [`TrainingResult`][jaxsample.runs.loop.TrainingResult]
        (curves ``[R, I]``, every metric, the final vmapped trainer state,
        times, the iterations done and planned).
      record: the run's settings (``run.json``).
      names: ``[R]`` run names (``seed0``, ``seed1_lr0.001``, ...).
      seeds: ``[R]`` each run's seed.
      settings: ``[R]`` each run's swept values (``{field: value}``).
      folder: the run folder, or None.
      written: the output files written.
      stopped_by: ``"SIGINT"`` / ``"SIGTERM"`` when a signal stopped the run
        early, else None.
    """

    training: Any
    record: dict[str, Any]
    names: list[str]
    seeds: list[int]
    settings: list[dict[str, float]]
    folder: str | None = None
    written: list[str] = dataclasses.field(default_factory=list)
    stopped_by: str | None = None

    @property
    def iterations(self) -> int:
        """Iterations done (restored from the folder ones included)."""
        return self.training.iterations

    @property
    def num_iterations(self) -> int:
        """Iterations the run was to train (its config's)."""
        return self.training.num_iterations

    @property
    def interrupted(self) -> bool:
        """The run stopped before its last iteration."""
        return bool(self.training.interrupted)

    @property
    def exit_status(self) -> int:
        """0, or ``128 + signal`` for a run a signal stopped (130, 143)."""
        if not self.interrupted:
            return 0
        return {"SIGTERM": 143}.get(self.stopped_by or "", 130)

    @property
    def state(self) -> Any:
        """The final vmapped trainer state (``params`` has a leading ``[R]``)."""
        return self.training.final_state

    def final_returns(self, window: int | None = None) -> np.ndarray:
        """``[R]`` each run's final return: the mean return of the episodes
        that ended in its last ``window`` iterations (default the run's
        ``recent_window``; the closing table's and the JSON's)."""
        return self.training.final_returns(window)


def _program_store(config: Any) -> Any:
    """Where the training program's traced parts are kept between runs: beside
    JAX's compilation cache, when that is on and the JAX is >= 0.11 (before,
    the one program's callbacks are not cached, so a second run compiles
    again anyway, and a run folder's stored chunk crashed jaxlib 0.9.2's cache
    loader, SIGSEGV)."""
    from jaxsample import compile_cache
    from jaxsample.runs.program_store import ProgramStore

    folder = compile_cache.active_dir()
    if folder is None or not compile_cache.CACHES_CALLBACKS:
        return None
    return ProgramStore(folder / "jaxsample-programs", repr(config))


def _describe(plan: _Plan) -> list[str]:
    """The run's first lines: what trains, from which preset, how long (env
    steps per seed), how, and the config."""
    config, record = plan.config, plan.record
    sweep = "".join(f" x {k} in {v}" for k, v in record["sweep"].items())
    masked = " (velocities masked)" if getattr(config, "mask_velocity", False) else ""
    fields = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(config).items())
    preset = f"preset {record['preset']}" if record.get("preset") else "no preset"
    per_iteration = plan.trainer.steps_per_iteration
    seeds, runs = record["seeds"], len(plan.run_seeds)
    return [
        f"jaxsample train: {record['algo']} on {config.env_name}{masked} ({preset}), "
        f"{plan.iterations * per_iteration:,} steps per seed "
        f"({plan.iterations:,} iterations x {per_iteration:,}), "
        f"{seeds} seed{'s' * (seeds > 1)}{sweep} ({runs} run{'s' * (runs > 1)} under one vmap), "
        f"backend={jax.default_backend()}",
        textwrap.fill(f"config: {type(config).__name__}({fields})", 100, subsequent_indent="  "),
    ]


def train(
    config: Any = None,
    *,
    preset: Any = None,
    overrides: dict[str, Any] | None = None,
    seeds: int = 1,
    seed: int = 0,
    sweep: dict[str, list[float]] | None = None,
    folder: str | os.PathLike[str] | None = None,
    chunks: int = 20,
    checkpoint_seconds: float = CHECKPOINT_SECONDS,
    json: str | None = None,
    csv: str | None = None,
    plot: str | None = None,
    tensorboard: str | None = None,
    wandb_project: str | None = None,
    progress: bool | Callable[[dict[str, Any]], None] = True,
    say: Callable[[str], None] | None = print,
    say_stopped: Callable[[str], None] | None = None,
    signals: StopSignals | None = None,
    folder_flag: str | None = None,
) -> RunResult:
    """Train ``config`` (or a preset's) for ``seeds`` seeds (x the ``sweep``)
    in one vmapped program.

    Args:
      config: a config (`jaxsample.algos.configs.PPOConfig`, `DQNConfig`,
        ...), trained exactly as given; or None with ``preset``.
      preset: instead of ``config``, the name of a tuned preset
        (``"CartPole-v1"``, ``"Pendulum-v1:sac"``: `jaxsample.algos.presets`)
        whose config trains, with ``overrides`` on top: the config
        ``jaxsample train --env CartPole-v1`` (``--env Pendulum-v1 --algo
        sac``) builds, by the same function
        (`jaxsample.algos.presets.resolve`). Both ``config`` and ``preset``
        is a ``ValueError``.
      overrides: with ``preset``, config fields over its values
        (``{"total_timesteps": 20_000}``).
      seeds: seeds trained together; run ``r``'s key is
        ``fold_in(key(seed), r // C)`` for ``C`` swept settings.
      seed: the base seed.
      sweep: ``{HParams field: [values]}``: every combination is trained for
        every seed in the same program (``config`` holds the first values).
      folder: the run folder: locked for the run (a second run on it raises
        `FolderBusy`), its ``run.json`` compared with these settings (another
        run's raises `FolderMismatch`), checkpoints (``checkpoint_seconds``),
        and started again with the same settings it resumes from the latest
        one and ends bit for bit where an uninterrupted run ends. Without it
        the run is one compiled program.
      chunks: about how many chunks the run reports in (progress, logs).
      checkpoint_seconds: with ``folder``, a checkpoint after the first chunk
        that ends at least this long after the previous checkpoint (or the
        start), and always at the end and when a signal stops the run; 0: after
        every chunk. What a lost machine (no signal) loses at most: this, and
        one chunk.
      json: the JSON file to write (config, versions, results and curves),
        or None.
      csv: the CSV file to write (every metric per run and iteration), or
        None.
      plot: the learning-curve image to write, or None.
      tensorboard: a TensorBoard log folder to log every metric to (the
        ``log`` extra), or None.
      wandb_project: a Weights & Biases project to log every metric to (the
        ``log`` extra), or None.
      progress: True for the live display (a progress bar on a terminal,
        lines elsewhere), False for none, or a callable of progress events
        (`jaxsample.runs.loop.run_training`'s; this run's only).
      say: where the run's lines go (the first, saying what trains, from
        which preset and for how many steps; the summary; what it wrote; a
        stopped run's `final_line`), or None.
      say_stopped: where a stopped run's `final_line` goes instead of
        ``say`` (the command line's: stderr).
      signals: the `StopSignals` to use (the command line's); by default
        ``SIGINT`` and ``SIGTERM`` stop the run while it trains (in a
        notebook: the interrupt button), which keeps what it completed.
      folder_flag: how messages name ``folder`` (``--checkpoint-dir``).

    Returns:
      A `RunResult` (``interrupted`` and ``stopped_by`` say whether a signal
      ended it early; ``iterations`` and ``num_iterations`` how far it got;
      its outputs hold the completed iterations).

    The name of the preset is recorded in ``run.json`` and the JSON
    (``preset``; None for a config given).

    Raises:
      FolderBusy: another run holds ``folder``; nothing in it changed.
      FolderMismatch: ``folder`` holds another run's settings; nothing in it
        changed.
      WriteFailed: an output or checkpoint could not be written (a full
        disk): earlier files are as they were.
      TypeError: a config or argument of the wrong type, named.
      ValueError: a bad config or argument value, named.
    """
    config, preset = presets.resolve(config, preset, overrides)
    plan = _Plan.of(config, seeds, seed, dict(sweep or {}), chunks, preset)
    if isinstance(checkpoint_seconds, bool) or not isinstance(checkpoint_seconds, (int, float)) \
            or not checkpoint_seconds >= 0:  # fmt: skip
        raise ValueError(f"checkpoint_seconds must be a number >= 0, got {checkpoint_seconds!r}")
    own_signals = signals is None
    signals = signals or StopSignals()
    run_folder = None
    if folder is not None:
        what = f"{folder_flag} {os.fspath(folder)!r}" if folder_flag else None
        run_folder = RunFolder(folder, what)
    if csv is None and json:
        csv = os.path.splitext(json)[0] + ".csv"
    say = say or (lambda line: None)
    try:
        if own_signals:
            signals.install()
        resume = _start(plan, run_folder, signals, say)
        logs = MetricLogs(
            csv, plan.run_seeds, plan.settings, tensorboard=tensorboard,
            wandb_project=wandb_project, config=plan.record["config"],
        )  # fmt: skip
        display = _display(progress)
        try:
            result, watch = _run(
                plan, resume, run_folder, signals, logs, display, float(checkpoint_seconds)
            )
        finally:
            logs.close()
            if hasattr(display, "close"):
                display.close()
        written = [logs.csv_path] if logs.csv_path else []
        _finish(plan, result, watch, run_folder is None, signals, say, {"json": json, "plot": plot},
                written)  # fmt: skip
        out = RunResult(
            training=result, record=plan.record, names=plan.names, seeds=plan.run_seeds,
            settings=plan.settings, folder=None if run_folder is None else run_folder.path,
            written=written, stopped_by=signals.name if result.interrupted else None,
        )  # fmt: skip
        if out.interrupted:
            (say_stopped or say)(final_line(out))
        return out
    finally:
        if own_signals:
            signals.uninstall()
        if run_folder is not None:
            run_folder.close()


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What a run trains: the config, its trainer, keys and the runs' settings."""

    config: Any
    trainer: Any
    key: jax.Array
    seeds: int
    hparams: Any
    chunks: int
    record: dict[str, Any]
    run_seeds: list[int]
    settings: list[dict[str, float]]
    names: list[str]

    @classmethod
    def of(
        cls, config: Any, seeds: int, seed: int, sweep: dict[str, list], chunks: int,
        preset: str | None,
    ) -> _Plan:  # fmt: skip
        """The plan of `train`'s arguments (checked: a ``ValueError`` names one)."""
        for name, value in (("seeds", seeds), ("chunks", chunks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        trainer = build_trainer(config)
        run_seeds, settings = sweep_runs(range(seeds), sweep)
        return cls(
            config=config, trainer=trainer, key=jax.random.key(seed), seeds=seeds,
            hparams=sweep_hparams(trainer, settings, seeds), chunks=chunks,
            record=record_of(config, seed, seeds, sweep, preset), run_seeds=run_seeds,
            settings=settings, names=run_names(run_seeds, settings),
        )  # fmt: skip

    @property
    def iterations(self) -> int:
        return int(self.trainer.num_iterations)

    @property
    def groups(self) -> dict[str, list[int]] | None:
        return _groups(self.settings)


def _display(progress: bool | Callable[[dict[str, Any]], None]) -> Any:
    """The progress callback: the live display, the caller's, or None."""
    if progress is True:
        from jaxsample.runs.display import LiveDisplay

        return LiveDisplay()
    return progress or None


def _start(
    plan: _Plan, run_folder: RunFolder | None, signals: StopSignals, say: Callable[[str], None]
) -> Any:
    """Take the folder (its lock, its settings) and say what trains: the
    ``(state, history)`` to resume from, or None."""
    resume = None
    if run_folder is not None:
        import json

        from jaxsample.runs.loop import runs_of
        from jaxsample.runs.programs import init_function

        run_folder.open()
        signals.on_exit(run_folder.close)
        if run_folder.lock.took_over:
            say(run_folder.lock.took_over)
        runs = runs_of(plan.trainer, plan.key, plan.seeds, plan.hparams)
        init = init_function(plan.trainer)
        defaults = json.loads(json.dumps(dataclasses.asdict(type(plan.config)())))
        resume = run_folder.start_or_resume(
            plan.record, lambda: jax.eval_shape(init, *runs), defaults
        )
    for line in _describe(plan):
        say(line)
    if resume is not None:
        signals.started()  # its work is on disk already
        done = next(iter(resume[1].values())).shape[1] if resume[1] else 0
        if done >= plan.iterations:
            say(f"{run_folder.path} holds this run complete ({done} of {plan.iterations} "
                "iterations): nothing left to train; writing its results")  # fmt: skip
        else:
            say(f"resuming from {run_folder.path} at iteration {done}")
    return resume


def _run(
    plan: _Plan, resume: Any, run_folder: RunFolder | None, signals: StopSignals, logs: Any,
    display: Any, checkpoint_seconds: float,
) -> tuple[Any, Any]:  # fmt: skip
    """Train (one program without a folder, checkpointed chunks with one):
    ``(TrainingResult, CompileWatch)``. A checkpoint is saved after a chunk
    once ``checkpoint_seconds`` have passed since the last one, and at the
    end (complete or stopped) where the last chunk was not saved."""
    from jaxsample.compile_cache import CompileWatch
    from jaxsample.runs.loop import run_training

    per_iteration = plan.trainer.steps_per_iteration

    def on_progress(event: dict[str, Any]) -> None:
        if event.get("phase") == "running":
            signals.started()
        if display is not None:
            display(event)

    start = next(iter(resume[1].values())).shape[1] if resume is not None and resume[1] else 0
    saved = {"done": start, "at": time.monotonic()}

    def save(state: Any, done: int, metrics: dict[str, np.ndarray]) -> None:
        run_folder.save(state, done, metrics)
        saved.update(done=done, at=time.monotonic())

    def on_chunk(state: Any, done: int, metrics: dict[str, np.ndarray]) -> None:
        signals.started()
        logs.write(metrics, per_iteration, _derived(plan, metrics))
        due = time.monotonic() - saved["at"] >= checkpoint_seconds
        if run_folder is not None and (due or signals.stop_requested()):
            save(state, done, metrics)

    if resume is not None and resume[1]:
        logs.write(resume[1], per_iteration, _derived(plan, resume[1]))
    one_program = run_folder is None
    with CompileWatch() as watch:
        result = run_training(
            plan.trainer, plan.key, seeds=plan.seeds, chunks=plan.chunks, hparams=plan.hparams,
            one_program=one_program, resume=resume, progress=on_progress, on_chunk=on_chunk,
            stop=signals.stop_requested,
            store=_program_store(plan.config),
            meanwhile=None if one_program else _import_checkpoints,
        )  # fmt: skip
    if run_folder is not None and result.iterations > saved["done"]:  # the end, or a stop
        save(result.final_state, result.iterations, result.metrics)
    return result, watch


def _derived(plan: _Plan, metrics: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The CSV's figures of a run beside its metrics: ``recent_return``
    (`jaxsample.runs.loop.recent_returns`, as the display and the JSON)."""
    from jaxsample.runs.loop import recent_of, recent_window

    window = recent_window(plan.iterations)
    return {"recent_return": recent_of(metrics, plan.trainer.reports, window)}


def _import_checkpoints() -> None:
    """Import what a run folder's checkpoints need (orbax), on a worker thread
    beside the first chunks."""
    import jaxsample.checkpoint  # noqa: F401


def _finish(
    plan: _Plan, result: Any, watch: Any, one_program: bool, signals: StopSignals,
    say: Callable[[str], None], paths: dict[str, str | None], written: list[str],
) -> None:  # fmt: skip
    """The summary lines and the outputs: the JSON and PNG (``paths``), added
    to ``written`` (the CSV, written already)."""
    from jaxsample import compile_cache
    from jaxsample.runs import report

    config, record, n = plan.config, plan.record, plan.iterations
    complete = result.start_iteration >= n
    if not result.interrupted and not complete:
        say(watch.summary(result.compile_seconds))
        cached = compile_cache.active_dir() is not None
        if one_program and watch.compiles and cached and not compile_cache.CACHES_CALLBACKS:
            say(f"note: jax {jax.__version__} does not cache programs with host "
                "callbacks (the progress display): this one compiles again in every "
                "run (jax >= 0.11, on Python >= 3.12, caches it)")  # fmt: skip
    if not result.interrupted:
        say(report.summary_table(result, labels=plan.names, groups=plan.groups))
    masked = " (velocities masked)" if getattr(config, "mask_velocity", False) else ""
    title = f"{record['algo']} on {config.env_name}{masked}"
    if result.interrupted:
        title += f" (interrupted at {result.iterations} of {n} iterations)"
    extra = {
        **record, "env": config.env_name,
        "mask_velocity": bool(getattr(config, "mask_velocity", False)),
        "runs": plan.names, "run_seeds": plan.run_seeds, "run_settings": plan.settings,
        "keys": "run r: jax.random.fold_in(jax.random.key(seed), run_seeds[r])",
        "resumed_at_iteration": result.start_iteration,
        "stopped_by": signals.name if result.interrupted else None, **environment(),
    }  # fmt: skip
    if paths["json"]:
        replace_file(paths["json"], lambda tmp: report.write_json(result, tmp, extra))
        written.append(paths["json"])
    if paths["plot"]:
        labels, groups = plan.names, plan.groups
        replace_file(
            paths["plot"],
            lambda tmp: report.plot(result, tmp, title, labels=labels, groups=groups),
        )
        written.append(paths["plot"])
    if not result.interrupted:
        for path in written:
            say(f"wrote {path}")


def final_line(result: RunResult) -> str:
    """The one line of a stopped run, from the command line as from a
    notebook: what stopped it and what it kept (the files it wrote, the
    folder's checkpoint)."""
    done, total = result.iterations, result.num_iterations
    cause = {"SIGTERM": "SIGTERM", "SIGINT": "Ctrl-C"}.get(result.stopped_by or "", "a stop")
    kept = [f"wrote {', '.join(result.written)}"] if result.written else []
    if result.folder is not None:
        kept.append(f"checkpoint {result.folder} at iteration {done}")
    what = ", ".join(kept) or "no file (the result returned holds them)"
    return f"interrupted ({cause}) after {done} of {total} iterations: {what}"

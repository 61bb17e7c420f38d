"""``jaxsample train`` and ``jaxsample eval``.

``train`` builds the config (`jaxsample.cli.config`) and trains every
seed (x every swept setting) under one ``jax.vmap`` with
[`jaxsample.algos.runner.run_training`][jaxsample.algos.runner.run_training]: one compiled program
for the
whole run, or compiled chunks with ``--checkpoint-dir``. It shows
`LiveDisplay` and logs every metric
(`jaxsample.cli.log`). With ``--checkpoint-dir`` it saves the vmapped
trainer state after every chunk (and so at the end) and, started again with
the same settings, resumes from the latest one (``run.json`` in the folder
records the settings, ``metrics.npz`` the history). ``eval`` restores such a
folder and runs the greedy evaluator per run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib.metadata
import json
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from jaxsample.cli.base import UsageError, check_output
from jaxsample.cli.config import file_algo, file_env, resolve_config, sweep_runs

__all__ = ["evaluate", "make_trainer", "train"]

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


@functools.lru_cache(maxsize=8)
def _build(config: Any) -> Any:
    """The trainer of ``config`` (one per config in a process: its compiled
    programs are reused, [`jaxsample.algos.runner`][jaxsample.algos.runner])."""
    if type(config).__name__ == "DQNConfig":
        from jaxsample.algos import dqn

        return dqn.make_train(config)
    from jaxsample.algos import ppo

    return ppo.make_train(config)


def make_trainer(args: argparse.Namespace) -> tuple[Any, int]:
    """The trainer of ``args.algo``/``env``/``mask_velocity`` (and
    ``total_steps`` when set) and its environment steps per iteration."""
    flags = {}
    if getattr(args, "total_steps", None) is not None:
        flags["total_timesteps"] = args.total_steps
    config, _ = resolve_config(args.algo, args.env, bool(args.mask_velocity), {}, flags)
    return _build(config), config.steps_per_iteration


def _settings(args: argparse.Namespace, file_values: dict[str, Any]) -> dict[str, Any]:
    """The train command's own settings: the flag, else the config file, else the default."""
    defaults = {"algo": "ppo", "env": "CartPole-v1", "seed": 0, "seeds": 1, "chunks": 20}
    defaults["mask_velocity"] = False
    from_file = {**file_values, "algo": file_algo(file_values), "env": file_env(file_values)}
    out = {}
    for name, default in defaults.items():
        value = getattr(args, name, None)
        if value is None:
            value = from_file.get(name)
        out[name] = default if value is None else value
    for name in ("seeds", "chunks"):
        if isinstance(out[name], bool) or not isinstance(out[name], int) or out[name] < 1:
            raise UsageError(f"--{name} must be >= 1, got {out[name]}")
    if isinstance(out["seed"], bool) or not isinstance(out["seed"], int):
        raise UsageError(f"--seed must be an int, got {out['seed']!r}")
    return out


def _sweep_hparams(trainer: Any, settings: list[dict[str, float]], seeds: int) -> Any:
    """The trainer's ``HParams`` with a leading ``[C]`` axis, one per swept
    setting (``settings`` is per run: ``seeds`` times the ``C`` settings)."""
    if not settings or not settings[0]:
        return None
    settings = settings[: len(settings) // seeds]
    names = list(settings[0])
    return trainer.hparams(**{n: np.asarray([s[n] for s in settings], np.float32) for n in names})


def _record(algo: str, config: Any, s: dict[str, Any], sweep: dict[str, list]) -> dict[str, Any]:
    """What fixes a run's results (a resumed run must match it)."""
    return json.loads(
        json.dumps(
            {
                "algo": algo,
                "config": dataclasses.asdict(config),
                "seed": s["seed"],
                "seeds": s["seeds"],
                "sweep": sweep,
            }
        )
    )


def _differences(saved: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """Every setting that differs: ``name: saved X, now Y`` (config fields one by one)."""
    out = []
    for key, value in record.items():
        have = saved.get(key)
        if key == "config" and isinstance(have, dict) and isinstance(value, dict):
            for name in value.keys() | have.keys():
                if have.get(name) != value.get(name):
                    out.append(f"{name}: saved {have.get(name)!r}, now {value.get(name)!r}")
        elif have != value:
            out.append(f"{key}: saved {have!r}, now {value!r}")
    return sorted(out)


def _short(error: BaseException) -> str:
    """One line of an exception: its type and the first line of its message."""
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(error).__name__}: {first[:160]}" if first else type(error).__name__


@contextlib.contextmanager
def _quiet_orbax() -> Iterator[None]:
    """No orbax log lines (``ERROR:absl:Failed to json parse ...`` on a
    damaged folder): the CLI says what is wrong in one line of its own."""
    import logging

    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def read_run(directory: str, flag: str) -> tuple[dict[str, Any] | None, int | None]:
    """``(run.json's record or None, latest checkpoint step or None)`` of a
    train checkpoint folder; a damaged folder is a ``UsageError`` naming it
    and what is wrong (nothing in it is changed)."""
    from jaxsample import checkpoint

    where = f"{flag} {directory!r}"
    try:
        with _quiet_orbax():
            step = checkpoint.latest_step(directory) if os.path.isdir(directory) else None
    except Exception as e:  # an unreadable folder
        raise UsageError(f"{where}: its checkpoints cannot be listed ({_short(e)})") from None
    path = os.path.join(directory, "run.json")
    if not os.path.isfile(path):
        return None, step
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(
            f"{where}: run.json is damaged ({_short(e)}); repair it or give another folder"
        ) from None
    keys = ("algo", "config", "seed", "seeds", "sweep")
    if not isinstance(record, dict) or not all(k in record for k in keys):
        raise UsageError(
            f"{where}: run.json is not the record of `jaxsample train` (needs "
            f"{', '.join(keys)}); repair it or give another folder"
        )
    return record, step


def restore_run(directory: str, flag: str, like: Any, step: int) -> tuple[Any, dict[str, Any]]:
    """``(state, metrics history)`` of step ``step``; a damaged checkpoint is
    a ``UsageError`` naming the folder, the step and what is wrong."""
    from jaxsample import checkpoint

    where = f"{flag} {directory!r}"
    try:
        with _quiet_orbax():
            state = checkpoint.restore(directory, like, step=step)
    except Exception as e:  # orbax's errors are long tracebacks
        raise UsageError(
            f"{where}: the checkpoint of iteration {step} cannot be read ({_short(e)}); "
            "repair or remove that step folder, or give another folder"
        ) from None
    path = os.path.join(directory, "metrics.npz")
    try:
        with np.load(path) as saved_metrics:
            history = {k: saved_metrics[k][:, :step] for k in saved_metrics.files}
        if any(v.shape[1] != step for v in history.values()):
            raise ValueError(f"it holds fewer than {step} iterations")
    except Exception as e:
        raise UsageError(
            f"{where}: metrics.npz is damaged or missing ({_short(e)}); give another folder"
        ) from None
    return state, history


def _restore_or_start(
    directory: str, record: dict[str, Any], trainer: Any, keys: Any, hparams: Any
) -> tuple[Any, dict[str, np.ndarray]] | None:
    """``(state, history)`` of the latest checkpoint in ``directory``, or None
    (then ``run.json`` is written). Different settings, or a damaged folder:
    a ``UsageError`` (nothing in the folder is changed)."""
    flag = "--checkpoint-dir"
    saved, step = read_run(directory, flag)
    if step is not None and saved is None:
        raise UsageError(
            f"{flag} {directory!r} holds checkpoints without the run.json of "
            "`jaxsample train`: give another folder"
        )
    if step is not None:
        diff = _differences(saved, record)
        if diff:
            raise UsageError(
                f"{flag} {directory!r} holds a run with other settings: {'; '.join(diff)} "
                "(give the same arguments to resume, or another folder)"
            )
    else:  # nothing saved yet: (re)start with these settings
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "run.json"), "w") as f:
            json.dump(record, f, indent=2)
        return None
    like = jax.eval_shape(jax.vmap(trainer.init), keys, hparams)
    return restore_run(directory, flag, like, step)


def _saver(directory: str) -> Any:
    """``on_chunk``: the metrics history, then the state as step ``iterations``."""
    from jaxsample import checkpoint

    def save(state: Any, done: int, metrics: dict[str, np.ndarray]) -> None:
        tmp = os.path.join(directory, "metrics.tmp.npz")
        np.savez(tmp, **metrics)  # written first: it may run ahead of the state
        os.replace(tmp, os.path.join(directory, "metrics.npz"))
        checkpoint.save(directory, state, step=done, keep=2)

    return save


def _program_store(config: Any) -> Any:
    """Where the training program's traced parts are kept between runs: beside
    JAX's compilation cache, when that is on and caches the program's
    progress callbacks (else a second run compiles again anyway)."""
    from jaxsample import compile_cache
    from jaxsample.algos.program_store import ProgramStore

    folder = compile_cache.active_dir()
    if folder is None or not compile_cache.CACHES_CALLBACKS:
        return None
    return ProgramStore(folder / "jaxsample-programs", repr(config))


def train(args: argparse.Namespace) -> int:
    """Run ``jaxsample train`` (see the module docstring)."""
    from jaxsample.algos import report, runner
    from jaxsample.cli.config import load_config_file
    from jaxsample.cli.display import LiveDisplay
    from jaxsample.cli.log import MetricLogs
    from jaxsample.compile_cache import CompileWatch

    file_values = load_config_file(args.config) if args.config else {}
    s = _settings(args, file_values)
    csv_given = bool(args.csv)
    if not args.csv:
        args.csv = os.path.splitext(args.json)[0] + ".csv" if args.json else "train.csv"
    for path, flag in ((args.json, "--json"), (args.plot, "--plot"), (args.csv, "--csv")):
        check_output(path, flag)
    if args.checkpoint_dir and os.path.isfile(args.checkpoint_dir):
        raise UsageError(f"--checkpoint-dir {args.checkpoint_dir!r} is a file")
    config, sweep = resolve_config(
        s["algo"], s["env"], s["mask_velocity"], file_values, args.config_flags, args.config
    )
    try:
        trainer = _build(config)
    except (TypeError, ValueError) as e:
        message = str(e)
        if message.startswith("env_name: "):  # the env's name: the flag or file key
            message = f"--env {s['env']!r}: " + message[len("env_name: ") :]
        raise UsageError(message) from None
    seeds, settings = sweep_runs(range(s["seeds"]), sweep)
    hparams = _sweep_hparams(trainer, settings, s["seeds"])
    key = jax.random.key(s["seed"])
    keys, run_hparams = runner.run_inputs(trainer, key, s["seeds"], hparams)
    record = _record(s["algo"], config, s, sweep)
    resume = None
    if args.checkpoint_dir:
        resume = _restore_or_start(args.checkpoint_dir, record, trainer, keys, run_hparams)
    n, per_iteration = trainer.num_iterations, config.steps_per_iteration
    sweep_text = "".join(f", {k} in {v}" for k, v in sweep.items())
    print(
        f"jaxsample train: {s['algo']} on {s['env']}"
        f"{' (velocities masked)' if s['mask_velocity'] else ''}, {len(seeds)} run(s) "
        f"({s['seeds']} seed(s){sweep_text}) under one vmap, {n} iterations x "
        f"{per_iteration} steps, backend={jax.default_backend()}",
        flush=True,
    )
    fields = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(config).items())
    print(textwrap.fill(f"config: {type(config).__name__}({fields})", 100, subsequent_indent="  "))
    if not csv_given:
        print(f"every metric goes to {os.path.abspath(args.csv)} (--csv to choose)")
    complete = False
    if resume is not None:
        done = next(iter(resume[1].values())).shape[1] if resume[1] else 0
        complete = done >= n
        if complete:
            print(
                f"{args.checkpoint_dir} holds this run complete ({done} of {n} iterations): "
                "nothing left to train; writing its results"
            )
        else:
            print(f"resuming from {args.checkpoint_dir} at iteration {done}")
    logs = MetricLogs(
        args.csv,
        seeds,
        settings,
        tensorboard=args.tensorboard,
        wandb_project=args.wandb_project if args.wandb else None,
        config=record["config"],
    )
    saver = _saver(args.checkpoint_dir) if args.checkpoint_dir else None

    def on_chunk(state: Any, done: int, metrics: dict[str, np.ndarray]) -> None:
        logs.write(metrics, per_iteration)
        if saver is not None:
            saver(state, done, metrics)

    if resume is not None and resume[1]:
        logs.write(resume[1], per_iteration)
    display = LiveDisplay()
    one_program = resume is None and saver is None  # chunked runs save and resume
    with _ctrl_c() as stop, contextlib.ExitStack() as cleanup, CompileWatch() as watch:
        cleanup.callback(logs.close)
        cleanup.callback(display.close)
        result = runner.run_training(
            trainer,
            key,
            seeds=s["seeds"],
            num_iterations=n,
            steps_per_iteration=per_iteration,
            chunks=s["chunks"],
            returns_of=lambda m: m["episode_return_mean"],
            progress=display,
            hparams=hparams,
            resume=resume,
            on_chunk=on_chunk,
            one_program=one_program,
            stop=stop.is_set,
            store=_program_store(config) if one_program else None,
        )
    groups = _groups(settings)
    if not result.interrupted:
        if not complete:
            print(watch.summary(result.compile_seconds))
        print(report.summary_table(result, labels=logs.names, groups=groups))
        print(f"wrote {args.csv} (every metric, per run and iteration)")
    written = [args.csv]
    if args.json:
        extra = {
            **record,
            "env": s["env"],
            "mask_velocity": s["mask_velocity"],
            "runs": logs.names,
            "run_seeds": seeds,
            "run_settings": settings,
            "keys": "run r: jax.random.fold_in(jax.random.key(seed), run_seeds[r])",
            "resumed_at_iteration": result.start_iteration,
            **environment(),
        }
        report.write_json(result, args.json, extra)
        written.append(args.json)
        if not result.interrupted:
            print(f"wrote {args.json}")
    if args.plot:
        masked = " (velocities masked)" if s["mask_velocity"] else ""
        title = f"{s['algo']} on {s['env']}{masked}"
        if result.interrupted:
            title += f" (interrupted at {len(result.env_steps)} of {n} iterations)"
        report.plot(result, args.plot, title, labels=logs.names, groups=groups)
        written.append(args.plot)
        if not result.interrupted:
            print(f"wrote {args.plot}")
    if result.interrupted:
        done = len(result.env_steps)
        saved = f", checkpoint {args.checkpoint_dir} at iteration {done}" if saver else ""
        print(
            f"interrupted (Ctrl-C) after {done} of {n} iterations: wrote "
            f"{', '.join(written)}{saved}",
            file=sys.stderr,
            flush=True,
        )
        return 130
    return 0


@contextlib.contextmanager
def _ctrl_c() -> Iterator[threading.Event]:
    """An event set by the first Ctrl-C (SIGINT) while the block runs: the
    training stops early and keeps what it trained. A second Ctrl-C kills
    the process at once (the default action). Outside the main thread no
    handler can be installed: the event is then never set."""
    stop = threading.Event()

    def first(signum: int, frame: Any) -> None:
        stop.set()
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    try:
        previous = signal.signal(signal.SIGINT, first)
    except ValueError:  # not the main thread
        yield stop
        return
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _groups(settings: list[dict[str, float]]) -> dict[str, list[int]] | None:
    """``{setting label: run indices}`` of a sweep (its seeds), else None."""
    if not settings or not settings[0]:
        return None
    out: dict[str, list[int]] = {}
    for r, setting in enumerate(settings):
        label = " ".join(f"{k}={v:g}" for k, v in setting.items())
        out.setdefault(label, []).append(r)
    return out


def evaluate(args: argparse.Namespace) -> int:
    """Run ``jaxsample eval``: the greedy policy of every run of a checkpoint."""
    from jaxsample.algos import runner
    from jaxsample.cli.config import config_type
    from jaxsample.cli.log import run_names
    from jaxsample.evaluation import make_evaluator
    from jaxsample.traj_info import summarize

    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    check_output(args.json, "--json")
    record, step = read_run(args.checkpoint, "--checkpoint")
    if record is None or step is None:
        raise UsageError(
            f"--checkpoint {args.checkpoint!r}: no checkpoint of `jaxsample train "
            "--checkpoint-dir` there"
        )
    try:
        config = config_type(record["algo"])(**record["config"])
    except (TypeError, ValueError) as e:
        raise UsageError(
            f"--checkpoint {args.checkpoint!r}: run.json holds no valid config ({_short(e)})"
        ) from None
    trainer = _build(config)
    seeds, settings = sweep_runs(range(record["seeds"]), record["sweep"])
    hparams = _sweep_hparams(trainer, settings, record["seeds"])
    keys, run_hparams = runner.run_inputs(
        trainer, jax.random.key(record["seed"]), record["seeds"], hparams
    )
    like = jax.eval_shape(jax.vmap(trainer.init), keys, run_hparams)
    state = restore_run(args.checkpoint, "--checkpoint", like, step)[0]
    try:
        limit = int(np.asarray(trainer.env_params.max_steps_in_episode))
    except (AttributeError, TypeError, ValueError, OverflowError):
        limit = 10_000
    evaluator = make_evaluator(
        trainer.env,
        trainer.env_params,
        trainer.agent,
        n_envs=args.episodes,
        max_steps=args.episodes * (limit + 1),
        discount=config.gamma,
    )
    eval_keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(args.seed), i))(
        np.arange(len(seeds))
    )
    infos = jax.jit(jax.vmap(evaluator.run))(eval_keys, state.params)
    stats = jax.device_get(jax.vmap(summarize)(infos))
    names = run_names(seeds, settings)
    print(
        f"jaxsample eval: {record['algo']} on {config.env_name}, checkpoint {args.checkpoint} "
        f"(iteration {step}), {args.episodes} greedy episode(s) per run"
    )
    print(f"{'run':>24} {'episodes':>9} {'mean return':>12} {'std':>8} {'mean length':>12}")
    rows = []
    for r, name in enumerate(names):
        done = np.asarray(infos.completed[r])
        returns = np.asarray(infos.episode_return[r])[done]
        row = {
            "run": name,
            "seed": seeds[r],
            **settings[r],
            "episodes": int(done.sum()),
            "return_mean": float(stats["episode_return_mean"][r]),
            "return_std": float(returns.std()) if returns.size else None,
            "length_mean": float(stats["length_mean"][r]),
        }
        rows.append(row)
        print(
            f"{name:>24} {row['episodes']:>9} {row['return_mean']:>12.1f} "
            f"{row['return_std'] or 0.0:>8.1f} {row['length_mean']:>12.1f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**record, "iteration": step, "runs": rows, **environment()}, f, indent=2)
        print(f"wrote {args.json}")
    return 0

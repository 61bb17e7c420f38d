"""``jaxsample train`` and ``jaxsample eval``.

``train`` builds the config (:mod:`jaxsample.cli_config`) and trains every
seed (x every swept setting) under one ``jax.vmap`` with
:func:`jaxsample.algos.runner.run_training`: one compiled program for the
whole run, or compiled chunks with ``--checkpoint-dir``. It shows
:class:`~jaxsample.cli_display.LiveDisplay` and logs every metric
(:mod:`jaxsample.cli_log`). With ``--checkpoint-dir`` it saves the vmapped
trainer state after every chunk (and so at the end) and, started again with
the same settings, resumes from the latest one (``run.json`` in the folder
records the settings, ``metrics.npz`` the history). ``eval`` restores such a
folder and runs the greedy evaluator per run.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.metadata
import json
import os
import textwrap
from typing import Any

import jax
import numpy as np

from jaxsample.cli_base import UsageError, check_output
from jaxsample.cli_config import resolve_config, sweep_runs

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
    programs are reused, :mod:`jaxsample.algos.runner`)."""
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
    out = {}
    for name, default in defaults.items():
        value = getattr(args, name, None)
        out[name] = value if value is not None else file_values.get(name, default)
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


def _restore_or_start(
    directory: str, record: dict[str, Any], trainer: Any, keys: Any, hparams: Any
) -> tuple[Any, dict[str, np.ndarray]] | None:
    """``(state, history)`` of the latest checkpoint in ``directory``, or None
    (then ``run.json`` is written). Different settings: a ``UsageError``."""
    from jaxsample import checkpoint

    path = os.path.join(directory, "run.json")
    step = checkpoint.latest_step(directory) if os.path.isdir(directory) else None
    if step is not None and not os.path.isfile(path):
        raise UsageError(
            f"--checkpoint-dir {directory!r} holds checkpoints without the run.json of "
            "`jaxsample train`: give another folder"
        )
    if step is not None:
        with open(path) as f:
            saved = json.load(f)
        for key in record:
            if saved.get(key) != record[key]:
                if key == "config":
                    diff = [k for k in record[key] if saved[key].get(k) != record[key][k]]
                    key = f"config ({', '.join(diff)})"
                raise UsageError(
                    f"--checkpoint-dir {directory!r} holds a run with other settings: {key} "
                    "differs (give the same arguments to resume, or another folder)"
                )
    else:  # nothing saved yet: (re)start with these settings
        os.makedirs(directory, exist_ok=True)
        with open(path, "w") as f:
            json.dump(record, f, indent=2)
        return None
    like = jax.eval_shape(jax.vmap(trainer.init), keys, hparams)
    state = checkpoint.restore(directory, like, step=step)
    with np.load(os.path.join(directory, "metrics.npz")) as saved_metrics:
        history = {k: saved_metrics[k][:, :step] for k in saved_metrics.files}
    return state, history


def _saver(directory: str) -> Any:
    """``on_chunk``: the metrics history, then the state as step ``iterations``."""
    from jaxsample import checkpoint

    def save(state: Any, done: int, metrics: dict[str, np.ndarray]) -> None:
        tmp = os.path.join(directory, "metrics.tmp.npz")
        np.savez(tmp, **metrics)  # written first: it may run ahead of the state
        os.replace(tmp, os.path.join(directory, "metrics.npz"))
        checkpoint.save(directory, state, step=done, keep=2)

    return save


def train(args: argparse.Namespace) -> int:
    """Run ``jaxsample train`` (see the module docstring)."""
    from jaxsample.algos import runner
    from jaxsample.cli_config import load_config_file
    from jaxsample.cli_display import LiveDisplay
    from jaxsample.cli_log import MetricLogs

    file_values = load_config_file(args.config) if args.config else {}
    s = _settings(args, file_values)
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
        raise UsageError(str(e)) from None
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
    if resume is not None:
        done = next(iter(resume[1].values())).shape[1]
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
    try:
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
            one_program=resume is None and saver is None,
        )
    finally:
        display.close()
        logs.close()
    print(f"compiled in {result.compile_seconds:.1f} s")
    print(runner.summary_table(result, labels=logs.names))
    print(f"wrote {args.csv} (every metric, per run and iteration)")
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
        runner.write_json(result, args.json, extra)
        print(f"wrote {args.json}")
    if args.plot:
        masked = " (velocities masked)" if s["mask_velocity"] else ""
        title = f"{s['algo']} on {s['env']}{masked}"
        runner.plot(result, args.plot, title, labels=logs.names)
        print(f"wrote {args.plot}")
    return 0


def evaluate(args: argparse.Namespace) -> int:
    """Run ``jaxsample eval``: the greedy policy of every run of a checkpoint."""
    from jaxsample import checkpoint
    from jaxsample.algos import runner
    from jaxsample.cli_config import config_type
    from jaxsample.cli_log import run_names
    from jaxsample.evaluation import make_evaluator
    from jaxsample.traj_info import summarize

    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    check_output(args.json, "--json")
    path = os.path.join(args.checkpoint, "run.json")
    if not os.path.isfile(path) or checkpoint.latest_step(args.checkpoint) is None:
        raise UsageError(
            f"--checkpoint {args.checkpoint!r}: no checkpoint of `jaxsample train "
            "--checkpoint-dir` there"
        )
    with open(path) as f:
        record = json.load(f)
    config = config_type(record["algo"])(**record["config"])
    trainer = _build(config)
    seeds, settings = sweep_runs(range(record["seeds"]), record["sweep"])
    hparams = _sweep_hparams(trainer, settings, record["seeds"])
    keys, run_hparams = runner.run_inputs(
        trainer, jax.random.key(record["seed"]), record["seeds"], hparams
    )
    step = checkpoint.latest_step(args.checkpoint)
    like = jax.eval_shape(jax.vmap(trainer.init), keys, run_hparams)
    state = checkpoint.restore(args.checkpoint, like, step=step)
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

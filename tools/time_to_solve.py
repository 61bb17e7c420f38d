"""Time to solve: whole processes of the documented train command, from launch to exit.

The measure of issue 53 item 1. Each timed process is what a user runs,
``python -m jaxsample train --env ENV --seeds 1 --checkpoint-dir RUN``
(the ``jaxsample`` command's own entry point), from a checkout (``--checkout
NAME=PATH``: ``PYTHONPATH=PATH``; default: this repository as ``ours``),
**cold** (an empty compile cache: the command's default cache folder under a
fresh ``XDG_CACHE_HOME``, so its own cache settings apply) or **warm** (the
same folder after one untimed run of the same command). Beside it, PureJaxRL's
``ppo.py`` run as its README runs it, ``python ppo.py`` in its folder, with its
own venv's python (``--purejaxrl PYTHON``; the peers' ``setup.sh`` makes it;
absent: a note, not an error), cold or warm the same way through JAX's
``JAX_COMPILATION_CACHE_DIR`` (JAX's default settings: it has none of its
own). Its ``__main__`` trains CartPole-v1; for another env the same script
runs with its ``ENV_NAME`` replaced.

Repetitions alternate: every repetition runs every (env, mode) cell's
processes one after another, the order reversed on every other repetition, so
the machine's load falls on all of them alike; the table gives medians,
quartiles and the per-repetition ratios to the first checkout. Each process's
lines are time-stamped as they arrive (``PYTHONUNBUFFERED=1``), which with the
command's own printed figures gives a breakdown: ``startup`` (launch to its
first line: Python, the imports, the config and trainer), ``compile`` and
``run`` (the command's own ``run X s, compile Y s``), ``other`` (the rest up
to the summary: checkpoints, logs, the display) and ``outputs`` (the summary
to exit: the files and the interpreter's exit). PureJaxRL's: launch to its
first printed episode (imports, compile, the first iteration) and the rest.
User and system CPU seconds of each process come from ``wait4``. Before any
timed process, each interpreter's packages and each checkout are byte-compiled
(`byte_compile`: what ``pip install`` does unless ``--no-compile``), so no
process compiles Python source, whatever ``PYTHONDONTWRITEBYTECODE`` says
(``--no-byte-compile``: as they are).

After the timed processes, outside them, every saved run is evaluated
greedily (``jaxsample.runs.load(folder).evaluate``, one process per checkout
and env; ``--episodes`` 164, gymnax-blines' ``num_test_rollouts``): solved
when every seed's mean return reaches the env's threshold (CartPole-v1 475,
Acrobot-v1 -80). ``--no-save`` times the command without ``--checkpoint-dir``
(the one-program run: nothing to evaluate).

    python tools/time_to_solve.py --purejaxrl /work/peers/purejaxrl/bin/python \\
        --checkout main=. --checkout before=/work/wt-before --json tts.json
    # issue 50's figure: PPO's plain defaults (5e5 steps), cold, no run folder
    python tools/time_to_solve.py --envs CartPole-v1 --modes cold --no-save \\
        --train-args="--preset none" --purejaxrl /work/peers/purejaxrl/bin/python

It imports nothing but the standard library: the measuring process takes no
memory or CPU from the measured ones. Exit status 0 (a failed process is in
the table and the JSON as failed), 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from timed_processes import (
    PEER,
    Timed,
    alternate,
    breakdown,
    import_profile,
    paired_ratios,
    run_process,
    spread,
)

ROOT = Path(__file__).resolve().parents[1]

#: env -> the greedy mean return every seed must reach (gymnax's published
#: figures' bar: issue 53).
THRESHOLDS = {"CartPole-v1": 475.0, "Acrobot-v1": -80.0}
#: gymnax-blines' ``num_test_rollouts``.
EPISODES = 164

_COMPILE_LINE = re.compile(r"^(compiled in|loaded from the compile cache in) ")

# PureJaxRL's ppo.py with its __main__'s env replaced (argv: env name).
_PEER_OTHER_ENV = """
import sys
env = sys.argv[1]
source = open("ppo.py").read()
old = '"ENV_NAME": "CartPole-v1"'
if source.count(old) != 1:
    raise SystemExit("ppo.py's __main__ does not name CartPole-v1 once: cannot change its env")
sys.argv = ["ppo.py"]
sys.path.insert(0, ".")
exec(compile(source.replace(old, f'"ENV_NAME": "{env}"'), "ppo.py", "exec"),
     {"__name__": "__main__", "__file__": "ppo.py"})
"""

# One process per checkout and env: the greedy evaluation of saved runs
# (argv: JSON [folders], episodes). Identical final parameters are evaluated once.
_EVALUATE = """
import hashlib, json, sys
import jax, numpy as np
from jaxsample import runs
folders, episodes = json.loads(sys.argv[1]), int(sys.argv[2])
done, out = {}, {}
for folder in folders:
    try:
        run = runs.load(folder)
    except Exception as e:
        out[folder] = {"error": f"{type(e).__name__}: {e}"}
        continue
    h = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(run.params):
        h.update(np.asarray(leaf).tobytes())
    key = h.hexdigest()[:16]
    if key not in done:
        rows = run.evaluate(episodes, 0, "greedy")
        done[key] = [float(r["return_mean"]) for r in rows]
    out[folder] = {"params": key, "returns": done[key], "iteration": int(run.iteration)}
print("RESULT " + json.dumps(out))
"""


# --- what runs -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Target:
    """A command timed in every cell: a jaxsample checkout, or the peer."""

    name: str
    kind: str  # "jaxsample" or PEER
    python: str
    path: Path  # the checkout, or the peer's folder holding ppo.py

    def argv(
        self, env: str, run_folder: Path | None, extra: Sequence[str], seeds: int,
        python_flags: Sequence[str] = (),
    ) -> list:  # fmt: skip
        if python_flags:
            argv = self.argv(env, run_folder, extra, seeds)
            return [argv[0], *python_flags, *argv[1:]]
        if self.kind == PEER:
            if env == "CartPole-v1":
                return [self.python, "ppo.py"]
            return [self.python, "-c", _PEER_OTHER_ENV, env]
        argv = [self.python, "-m", "jaxsample", "train", "--env", env, "--seeds", str(seeds)]
        if run_folder is not None:
            argv += ["--checkpoint-dir", str(run_folder)]
        return argv + list(extra)

    def environ(self, base: dict[str, str], cache: Path) -> dict[str, str]:
        """The process's environment: the caller's, with this target's cache folder."""
        env = {k: v for k, v in base.items() if not k.startswith("JAX_COMPILATION_CACHE")}
        env["PYTHONUNBUFFERED"] = "1"  # lines are stamped as they are printed
        if self.kind == PEER:
            env["JAX_COMPILATION_CACHE_DIR"] = str(cache)
        else:
            # the command's default folder (<XDG_CACHE_HOME>/jaxsample/jax) and
            # settings; matplotlib keeps the user's font cache
            env["XDG_CACHE_HOME"] = str(cache)
            env["PYTHONPATH"] = os.pathsep.join(
                [str(self.path), *filter(None, [base.get("PYTHONPATH")])]
            )
        return env

    def cwd(self, scratch: Path) -> Path:
        return self.path if self.kind == PEER else scratch


def byte_compile(target: Target) -> float:
    """Compile the bytecode of ``target``'s interpreter's packages and of its
    checkout (or the peer's folder), as ``pip install`` does by default
    (``--no-compile`` skips it; ``PYTHONDONTWRITEBYTECODE`` keeps Python
    from writing it on first import): no timed process pays for compiling
    Python source, whoever made the venv. Seconds taken."""
    code = "import site, sys; print('\\n'.join(site.getsitepackages()))"
    found = subprocess.run([target.python, "-c", code], capture_output=True, text=True,
                           check=True).stdout.split()  # fmt: skip
    source = target.path if target.kind == PEER else target.path / "jaxsample"
    return compile_folders(target.python, [*found, str(source)])


def compile_folders(python: str, folders: Sequence[str]) -> float:
    """``python -m compileall`` of ``folders`` (every core); seconds taken."""
    t0 = time.perf_counter()
    subprocess.run([python, "-m", "compileall", "-q", "-j", "0", *folders],
                   capture_output=True, check=False)  # fmt: skip
    return time.perf_counter() - t0


def parse_checkout(text: str) -> tuple[str, Path]:
    """``NAME=PATH`` (or a bare PATH, named after its folder)."""
    name, sep, path = text.partition("=")
    if not sep:
        name, path = Path(text).resolve().name, text
    if not name or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"--checkout {text!r}: the name must be letters, digits, _ . -")
    folder = Path(path).expanduser().resolve()
    if not (folder / "jaxsample" / "__init__.py").is_file():
        raise ValueError(f"--checkout {text!r}: {folder} holds no jaxsample package")
    return name, folder


# --- the measurement -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    envs: tuple[str, ...]
    modes: tuple[str, ...]
    reps: int
    seeds: int
    save: bool
    train_args: tuple[str, ...]
    episodes: int
    timeout: float
    importtime: int = 0
    byte_compile: bool = True


def _say(line: str) -> None:
    print(line, flush=True)


def measure(
    targets: Sequence[Target],
    settings: Settings,
    work: Path,
    say: Callable[[str], None] = _say,
    partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Time every target in every (env, mode) cell, alternated; evaluate the saved
    runs. ``partial(result so far)`` after every repetition (no evaluation yet)."""
    base = dict(os.environ)
    base.setdefault("MPLCONFIGDIR", _user_matplotlib_dir(base))
    for target in targets if settings.byte_compile else ():
        seconds = byte_compile(target)
        say(f"byte-compiled {target.name}'s Python and its packages: {seconds:.1f} s")
    cells = [(env, mode) for env in settings.envs for mode in settings.modes]
    counter = iter(range(10**9))

    def launch(target: Target, env: str, cache: Path, tag: str) -> tuple[Timed, Path | None]:
        scratch = work / f"{tag}-{next(counter)}"
        scratch.mkdir(parents=True)
        folder = scratch / "run" if settings.save and target.kind != PEER else None
        argv = target.argv(env, folder, settings.train_args, settings.seeds)
        return (
            run_process(argv, target.environ(base, cache), target.cwd(scratch), settings.timeout),
            folder,
        )

    warm_caches: dict[tuple[str, str], Path] = {}
    prewarm: dict[str, dict[str, Any]] = {}
    for env, mode in cells:
        if mode != "warm":
            continue
        for target in targets:
            cache = work / f"cache-warm-{target.name}-{env}"
            cache.mkdir(parents=True)
            timed, _ = launch(target, env, cache, f"prewarm-{target.name}-{env}")
            warm_caches[target.name, env] = cache
            prewarm.setdefault(env, {})[target.name] = _record(timed, target, None)
            say(f"prewarmed {target.name} {env}: {timed.wall_s:.1f} s"
                + ("" if timed.ok else f" (exit {timed.returncode}: {timed.tail(3)})"))  # fmt: skip

    results: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {
        cell: {t.name: [] for t in targets} for cell in cells
    }
    by_name = {t.name: t for t in targets}
    names = [t.name for t in targets]

    def one(rep: int, name: str, env: str, mode: str) -> dict[str, Any]:
        target = by_name[name]
        if mode == "cold":
            cache = work / f"cache-cold-{name}-{env}-{rep}"
            cache.mkdir(parents=True)
        else:
            cache = warm_caches[name, env]
        timed, folder = launch(target, env, cache, f"{mode}-{name}-{env}-{rep}")
        if mode == "cold":
            shutil.rmtree(cache, ignore_errors=True)  # the disk stays small
        record = _record(timed, target, folder)
        say(
            f"rep {rep + 1}/{settings.reps} {env:<12} {mode:<4} {name:<10} "
            f"{timed.wall_s:6.2f} s  (load {timed.load_before:.1f})"
            + ("" if timed.ok else f"  exit {timed.returncode}: {' | '.join(timed.tail(3))}")
        )
        return record

    items = [(env, mode, name) for env, mode in cells for name in names]

    def so_far(done: dict) -> None:
        if partial is not None:
            now = {cell: {t.name: [] for t in targets} for cell in cells}
            for (env, mode, name), records in done.items():
                now[env, mode][name] = list(records)
            partial(_summary(targets, settings, now, {}, prewarm))

    timed = alternate(items, settings.reps, lambda rep, item: one(rep, item[2], *item[:2]), so_far)
    for (env, mode, name), records in timed.items():
        results[env, mode][name] = records

    profiles: dict[str, dict[str, list[dict[str, Any]]]] = {}
    if settings.importtime:
        jax_targets = [t.name for t in targets if t.kind != PEER]

        def profile(rep: int, item: tuple[str, str]) -> dict[str, Any]:
            env, name = item
            target = by_name[name]
            cache = warm_caches.get((name, env)) or work / f"cache-imports-{name}-{env}-{rep}"
            cache.mkdir(parents=True, exist_ok=True)
            scratch = work / f"imports-{name}-{env}-{rep}"
            scratch.mkdir(parents=True)
            folder = scratch / "run" if settings.save else None
            argv = target.argv(
                env, folder, settings.train_args, settings.seeds, ("-X", "importtime")
            )
            timed = run_process(argv, target.environ(base, cache), scratch, settings.timeout)
            got = {**import_profile(timed), "wall_s": timed.wall_s, "ok": timed.ok}
            got["startup"] = breakdown(timed, target.kind)["startup"]
            say(f"imports {rep + 1}/{settings.importtime} {env:<12} {name:<10} "
                f"{got['total_s']:.2f} s importing (wall {timed.wall_s:.1f} s)")  # fmt: skip
            return got

        items = [(env, name) for env in settings.envs for name in jax_targets]
        for (env, name), got in alternate(items, settings.importtime, profile).items():
            profiles.setdefault(env, {})[name] = got

    evaluations = {}
    if settings.save:
        evaluations = _evaluate_all(targets, results, settings, base, work, say)
    result = _summary(targets, settings, results, evaluations, prewarm)
    result["imports"] = _imports_summary(profiles)
    return result


def _imports_summary(profiles: dict) -> dict[str, Any]:
    """Per env and checkout: the import seconds' spread, and each package's
    median own seconds (its largest ones)."""
    out: dict[str, Any] = {}
    for env, per in profiles.items():
        for name, runs in per.items():
            roots = {k for r in runs for k in r["own_s"]}
            own = {k: statistics.median(r["own_s"].get(k, 0.0) for r in runs) for k in roots}
            out.setdefault(env, {})[name] = {
                "total_s": spread([r["total_s"] for r in runs if r["ok"]]),
                "startup_s": spread([r["startup"] for r in runs if r["ok"]]),
                "own_s": dict(sorted(own.items(), key=lambda kv: -kv[1])[:12]),
                "runs": runs,
            }
    return out


def _record(timed: Timed, target: Target, folder: Path | None) -> dict[str, Any]:
    return {
        "wall_s": timed.wall_s, "user_s": timed.user_s, "sys_s": timed.sys_s,
        "returncode": timed.returncode, "breakdown": breakdown(timed, target.kind),
        "load_before": timed.load_before, "load_after": timed.load_after,
        "folder": None if folder is None else str(folder),
        "tail": [] if timed.ok else timed.tail(),
        "argv": [a if len(a) < 200 else a[:40] + "..." for a in timed.argv],
    }  # fmt: skip


def _evaluate_all(
    targets: Sequence[Target], results: dict, settings: Settings, base: dict[str, str],
    work: Path, say: Callable[[str], None],
) -> dict[tuple[str, str], dict[str, Any]]:  # fmt: skip
    """The greedy evaluation of every saved run, one process per checkout and env."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for target in targets:
        if target.kind == PEER:
            continue
        for env in settings.envs:
            folders = [
                r["folder"]
                for (e, _), per in results.items() if e == env
                for r in per[target.name] if r["folder"] and r["returncode"] == 0
            ]  # fmt: skip
            if not folders:
                continue
            scratch = work / f"eval-{target.name}-{env}"
            scratch.mkdir(parents=True)
            environ = target.environ(base, work / f"cache-eval-{target.name}")
            argv = [target.python, "-c", _EVALUATE, json.dumps(folders), str(settings.episodes)]
            timed = run_process(argv, environ, scratch, settings.timeout)
            found = [s for _, s in timed.lines if s.startswith("RESULT ")]
            if not timed.ok or not found:
                say(f"evaluation of {target.name} {env} failed: {' | '.join(timed.tail(5))}")
                continue
            per_folder = json.loads(found[-1][len("RESULT ") :])
            out[target.name, env] = per_folder
            distinct = {v.get("params") for v in per_folder.values()}
            say(f"evaluated {len(folders)} saved runs of {target.name} {env} "
                f"({len(distinct)} distinct) in {timed.wall_s:.1f} s")  # fmt: skip
    return out


def _summary(
    targets: Sequence[Target], settings: Settings, results: dict, evaluations: dict,
    prewarm: dict,
) -> dict[str, Any]:  # fmt: skip
    first = next((t.name for t in targets if t.kind != PEER), None)
    cells = []
    for (env, mode), per in results.items():
        threshold = THRESHOLDS.get(env)
        row: dict[str, Any] = {"env": env, "mode": mode, "targets": {}}
        for target in targets:
            runs = per[target.name]
            walls = [r["wall_s"] if r["returncode"] == 0 else None for r in runs]
            entry: dict[str, Any] = {
                "kind": target.kind,
                "wall_s": spread(walls),
                "cpu_s": spread([r["user_s"] + r["sys_s"] for r in runs]),
                "failed": sum(r["returncode"] != 0 for r in runs),
                "breakdown": {
                    k: spread([r["breakdown"].get(k) for r in runs])
                    for k in runs[0]["breakdown"] if k != "cached"
                } if runs else {},
                "runs": runs,
            }  # fmt: skip
            if first is not None and target.name != first:
                ref = [r["wall_s"] if r["returncode"] == 0 else None for r in per[first]]
                entry[f"ratio_to_{first}"] = spread(paired_ratios(walls, ref))
                entry[f"{first}_over_this"] = spread(paired_ratios(ref, walls))
            evaluated = evaluations.get((target.name, env))
            if evaluated is not None:
                got = [evaluated.get(r["folder"]) for r in runs if r["folder"]]
                returns = [x for g in got if g and "returns" in g for x in g["returns"]]
                entry["greedy_returns"] = [g.get("returns") if g else None for g in got]
                entry["greedy_min"] = min(returns) if returns else None
                entry["solved"] = (
                    threshold is not None and bool(got) and all(g and "returns" in g for g in got)
                    and all(x >= threshold for x in returns)
                )  # fmt: skip
            row["targets"][target.name] = entry
        row["threshold"] = threshold
        cells.append(row)
    return {
        "schema": "time_to_solve/1",
        "settings": dataclasses.asdict(settings),
        "targets": [_describe(t) for t in targets],
        "system": _system(),
        "prewarm": prewarm,
        "cells": cells,
    }


def _describe(target: Target) -> dict[str, Any]:
    """A target's name, kind, Python, folder and (a git tree) commit."""
    commit = subprocess.run(
        ["git", "-C", str(target.path), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "name": target.name, "kind": target.kind, "python": target.python,
        "path": str(target.path), "commit": commit or None,
    }  # fmt: skip


# --- the table -------------------------------------------------------------------


def _s(x: dict[str, float] | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x['median']:.{digits}f}"


def _range(x: dict[str, float] | None) -> str:
    return "-" if x is None else f"{x['q25']:.2f}-{x['q75']:.2f}"


def format_table(result: dict[str, Any]) -> str:
    """The figures as a Markdown table, then the breakdown table."""
    first = next((t["name"] for t in result["targets"] if t["kind"] != PEER), None)
    head = ["env", "mode", "command", "wall s (median)", "q25-q75", "min-max", "CPU s"]
    head += [f"/ {first} (paired)", "greedy (min over seeds)", "solved"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cell in result["cells"]:
        for name, e in cell["targets"].items():
            w = e["wall_s"]
            ratio = e.get(f"ratio_to_{first}")
            ratio_s = "" if ratio is None else f"{ratio['median']:.2f}x ({_range(ratio)})"
            greedy = "" if e.get("greedy_min") is None else f"{e['greedy_min']:.1f}"
            solved = {True: "yes", False: "no"}.get(e.get("solved"), "")
            failed = f" ({e['failed']} failed)" if e["failed"] else ""
            minmax = "-" if w is None else f"{w['min']:.2f}-{w['max']:.2f}"
            lines.append(
                f"| {cell['env']} | {cell['mode']} | {name}{failed} | {_s(w)} | {_range(w)} | "
                f"{minmax} | {_s(e['cpu_s'], 1)} | {ratio_s} | {greedy} | {solved} |"
            )
    lines += ["", "Breakdown (medians, s): jaxsample startup / compile / run / other / outputs; "
              "PureJaxRL launch to first episode / after", ""]  # fmt: skip
    lines += ["| env | mode | command | breakdown |", "|---|---|---|---|"]
    for cell in result["cells"]:
        for name, e in cell["targets"].items():
            parts = " / ".join(f"{k} {_s(v)}" for k, v in e["breakdown"].items())
            lines.append(f"| {cell['env']} | {cell['mode']} | {name} | {parts} |")
    if result.get("imports"):
        lines += [
            "",
            "Imports (python -X importtime, processes of their own): seconds importing (median, "
            "q25-q75), launch to the first line, the packages' own seconds",
            "",
        ]
        lines += ["| env | command | importing s | q25-q75 | startup s | largest own |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for env, per in result["imports"].items():
            for name, e in per.items():
                own = ", ".join(f"{k} {v:.2f}" for k, v in list(e["own_s"].items())[:8])
                lines.append(f"| {env} | {name} | {_s(e['total_s'])} | {_range(e['total_s'])} | "
                             f"{_s(e['startup_s'])} | {own} |")  # fmt: skip
    return "\n".join(lines)


# --- the machine -----------------------------------------------------------------


def _system() -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") if os.path.exists("/proc/cpuinfo") else open(os.devnull) as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "python": sys.version.split()[0], "platform": platform.platform(), "cpu_model": model,
        "cpu_count": os.cpu_count(), "cpu_affinity": affinity, "load_avg": os.getloadavg(),
        "xla_flags": os.environ.get("XLA_FLAGS"),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }  # fmt: skip


def _user_matplotlib_dir(env: dict[str, str]) -> str:
    base = env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "matplotlib")


def _checked_checkout(python: str, name: str, path: Path) -> None:
    """The checkout's package is the one its processes import (a light import)."""
    probe = "import jaxsample, sys; sys.stdout.write(jaxsample.__file__)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(path), *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run([python, "-c", probe], env=env, cwd=cwd, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    got = Path(out.stdout.strip()).resolve() if out.returncode == 0 else None
    if got is None or path not in got.parents:
        raise ValueError(f"--checkout {name}={path}: {python} imports jaxsample from {got}")


# --- the command -----------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Time whole train processes, cold and warm, beside PureJaxRL's ppo.py.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--envs", nargs="+", default=["CartPole-v1", "Acrobot-v1"])
    p.add_argument("--modes", nargs="+", default=["cold", "warm"], choices=("cold", "warm"))
    p.add_argument("--reps", type=int, default=5, help="alternated repetitions")
    p.add_argument(
        "--checkout", action="append", default=[], metavar="NAME=PATH",
        help="a jaxsample tree to time (repeatable; the first is the one the ratios are to; "
        "default: this repository as 'ours')",
    )  # fmt: skip
    p.add_argument("--python", default=sys.executable, help="the checkouts' Python")
    p.add_argument(
        "--purejaxrl", default=None, metavar="PYTHON",
        help="PureJaxRL's venv python (its ppo.py: --purejaxrl-src, default <venv>/src)",
    )  # fmt: skip
    p.add_argument("--purejaxrl-src", default=None, metavar="DIR")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--train-args", default="", help="more flags for jaxsample train (one string)")
    p.add_argument(
        "--no-save", dest="save", action="store_false",
        help="no --checkpoint-dir (the one-program run), so no evaluation",
    )  # fmt: skip
    p.add_argument(
        "--no-byte-compile", dest="byte_compile", action="store_false",
        help="time the interpreters as they are (default: byte-compile their packages first)",
    )  # fmt: skip
    p.add_argument("--episodes", type=int, default=EPISODES, help="greedy episodes per seed")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per process")
    p.add_argument(
        "--importtime", type=int, default=0, metavar="N",
        help="also N alternated processes of each checkout under python -X importtime "
        "(untimed; warm cache where there is one)",
    )  # fmt: skip
    p.add_argument("--json", default=None, help="write every figure here")
    p.add_argument("--markdown", default=None, help="write the tables here")
    p.add_argument("--keep", default=None, metavar="DIR", help="keep the runs and caches here")
    return p


def targets_of(args: argparse.Namespace) -> tuple[list[Target], list[str]]:
    """The targets the arguments name, and notes on the ones skipped."""
    notes: list[str] = []
    checkouts = [parse_checkout(c) for c in args.checkout] or [("ours", ROOT)]
    if len({n for n, _ in checkouts}) != len(checkouts) or any(n == PEER for n, _ in checkouts):
        raise ValueError("--checkout: each name once, and not 'purejaxrl'")
    targets = [Target(n, "jaxsample", args.python, p) for n, p in checkouts]
    if args.purejaxrl is None:
        notes.append("PureJaxRL skipped: no --purejaxrl PYTHON")
    else:
        python = Path(args.purejaxrl).expanduser()
        src = Path(args.purejaxrl_src or python.parent.parent / "src").expanduser().resolve()
        if not python.exists() or not (src / "ppo.py").is_file():
            notes.append(f"PureJaxRL skipped: {python} or {src / 'ppo.py'} is missing")
        else:
            targets.append(Target(PEER, PEER, str(python), src))
    return targets, notes


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.reps < 1 or args.seeds < 1 or args.episodes < 1 or args.importtime < 0:
            raise ValueError("--reps, --seeds and --episodes must be >= 1, --importtime >= 0")
        targets, notes = targets_of(args)
        for t in targets:
            if t.kind != PEER:
                _checked_checkout(t.python, t.name, t.path)
    except ValueError as e:
        print(f"time_to_solve: error: {e}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}")
    settings = Settings(
        envs=tuple(args.envs), modes=tuple(args.modes), reps=args.reps, seeds=args.seeds,
        save=args.save, train_args=tuple(shlex.split(args.train_args)),
        episodes=args.episodes, timeout=args.timeout, importtime=args.importtime,
        byte_compile=args.byte_compile,
    )  # fmt: skip
    t0 = time.perf_counter()

    def write(result: dict[str, Any], final: bool = True) -> None:
        result["notes"] = notes + ([] if final else ["partial: the repetitions so far"])
        result["wall_s"] = time.perf_counter() - t0
        if args.json:
            tmp_path = Path(args.json + ".tmp")
            tmp_path.write_text(json.dumps(result, indent=1) + "\n")
            tmp_path.replace(args.json)

    def partial(result: dict[str, Any]) -> None:
        write(result, final=False)

    if args.keep:
        work = Path(args.keep).resolve()
        work.mkdir(parents=True, exist_ok=False)
        result = measure(targets, settings, work, partial=partial)
    else:
        with tempfile.TemporaryDirectory(prefix="time-to-solve-") as tmp:
            result = measure(targets, settings, Path(tmp), partial=partial)
    write(result)
    text = format_table(result)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

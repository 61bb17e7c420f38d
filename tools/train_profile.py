"""Where one ``jaxsample train`` process spends its start: a timeline of its
compile stages, its garbage collector's passes and the programs it compiles.

Runs the command in this process (``jaxsample.cli.command``, as ``python -m
jaxsample`` does) with probes, and prints on standard error, as they happen,
one line per stage (seconds since this script started, the process's CPU
seconds, the thread): the run's phases (``Plan.of``: the config and trainer;
``_start``, ``_run``), init's and the iterations' trace and lowering
(``lower``), each XLA compile (``xla``, on whichever thread), the program
store's exports and the chunks' run; then a summary line: each garbage
collector generation's passes and seconds, and every program XLA compiled
(its name and where the command asked for it: an eager operation outside the
training program shows here).

    python tools/train_profile.py train --env CartPole-v1 --seeds 1 --checkpoint-dir RUN

Give it an empty compile cache (``XDG_CACHE_HOME=$(mktemp -d)``) for a cold
start. Its numbers are one process's: compare checkouts with
``PYTHONPATH=CHECKOUT`` and several runs each, or with ``time_to_solve.py``.
"""

from __future__ import annotations

import gc
import resource
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

START = time.perf_counter()
PASSES = {g: [0, 0.0] for g in range(3)}  # generation: [passes, seconds]
PASS_STARTED = [0.0]
COMPILED: list[str] = []


def log(message: str) -> None:
    """``message`` on standard error with the time, CPU time and thread."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    name = threading.current_thread().name[:18]
    sys.stderr.write(
        f"[{time.perf_counter() - START:6.3f} s  cpu {r.ru_utime + r.ru_stime:6.2f}  {name:18s}] "
        f"{message}\n"
    )


def timed(owner: Any, name: str, label: str, method: str = "plain") -> None:
    """Replace ``owner.name`` with a version that logs its start and end."""
    original = getattr(owner, name)
    if method == "classmethod":
        original = original.__func__

    def probe(*args: Any, **kwargs: Any) -> Any:
        log(f"> {label}")
        try:
            return original(*args, **kwargs)
        finally:
            log(f"< {label}")

    setattr(owner, name, classmethod(probe) if method == "classmethod" else probe)


def collector_passes(phase: str, info: dict[str, int]) -> None:
    """``gc.callbacks``: each generation's passes and their seconds."""
    if phase == "start":
        PASS_STARTED[0] = time.perf_counter()
    else:
        count = PASSES[info["generation"]]
        count[0] += 1
        count[1] += time.perf_counter() - PASS_STARTED[0]


def programs(compile_or_get_cached: Callable[..., Any]) -> Callable[..., Any]:
    """JAX's compile entry, recording each program's name and caller."""

    def probe(backend: Any, computation: Any, *args: Any, **kwargs: Any) -> Any:
        ours = [
            f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}"
            for f in traceback.extract_stack()
            if "/jaxsample/" in f.filename or "/gymnax/" in f.filename
        ]
        try:
            name = computation.operation.attributes["sym_name"].value
        except Exception:
            name = "?"
        COMPILED.append(f"{name} ({ours[-1] if ours else 'a worker thread'})")
        return compile_or_get_cached(backend, computation, *args, **kwargs)

    return probe


def main() -> None:
    gc.callbacks.append(collector_passes)
    import jax.stages
    from jax._src import compiler

    timed(jax.stages.Traced, "lower", "lower")
    timed(jax.stages.Lowered, "compile", "xla")
    compiler.compile_or_get_cached = programs(compiler.compile_or_get_cached)
    log("jax imported")
    from jaxsample.runs import program_store, run
    from jaxsample.runs import programs as run_programs

    timed(program_store.ProgramStore, "function", "program store")
    timed(run_programs.Chunks, "run", "chunks run")
    timed(run_programs.OneProgram, "run", "one program run")
    timed(run._Plan, "of", "Plan.of (config, trainer)", "classmethod")
    for name in ("_start", "_run", "_finish"):
        timed(run, name, name)
    log("jaxsample.runs imported")

    import atexit

    def summary() -> None:
        passes = ", ".join(f"gen{g} {n} in {s:.3f} s" for g, (n, s) in PASSES.items())
        log(f"collector passes: {passes}")
        log(f"programs compiled ({len(COMPILED)}): " + "; ".join(COMPILED))

    atexit.register(summary)
    sys.argv = ["jaxsample", *sys.argv[1:]]
    from jaxsample.cli import command

    command()


if __name__ == "__main__":
    main()

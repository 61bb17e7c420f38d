"""Whole processes, timed: the alternation, the statistics and one timed
process of `time_to_solve.py` (its process-level half, in a module of its own).
"""

from __future__ import annotations

import dataclasses
import os
import re
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PEER = "purejaxrl"
_SUMMARY = re.compile(r"run ([0-9.]+) s, compile ([0-9.]+) s")


# --- alternation and statistics --------------------------------------------------


def alternate(
    names: Sequence[Any],
    reps: int,
    run_one: Callable[[int, Any], Any],
    after_rep: Callable[[dict[Any, list[Any]]], None] | None = None,
) -> dict[Any, list[Any]]:
    """``run_one(rep, name)`` for every name in every repetition, the order
    reversed on every other one (rep 0 forwards, rep 1 backwards, ...);
    ``after_rep(results so far)`` after each repetition.

    Returns:
      Each name's results, one per repetition, keyed like ``names``.
    """
    out: dict[Any, list[Any]] = {n: [] for n in names}
    for rep in range(reps):
        for name in names if rep % 2 == 0 else list(names)[::-1]:
            out[name].append(run_one(rep, name))
        if after_rep is not None:
            after_rep(out)
    return out


def spread(values: Sequence[float]) -> dict[str, float] | None:
    """Median, quartiles, min and max of ``values`` (None when empty)."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0]] * 3
    return {"median": statistics.median(v), "q25": q[0], "q75": q[2], "min": v[0], "max": v[-1]}


def paired_ratios(a: Sequence[float | None], b: Sequence[float | None]) -> list[float]:
    """``a[i] / b[i]`` for the repetitions where both ran."""
    return [x / y for x, y in zip(a, b, strict=True) if x is not None and y]


# --- one timed process -----------------------------------------------------------


@dataclasses.dataclass
class Timed:
    """One process: wall seconds launch to exit, CPU seconds, its stamped lines."""

    argv: list[str]
    wall_s: float
    user_s: float
    sys_s: float
    returncode: int
    lines: list[tuple[float, str]]
    load_before: float
    load_after: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, n: int = 8) -> list[str]:
        return [text for _, text in self.lines[-n:]]


def run_process(argv: Sequence[str], env: dict[str, str], cwd: Path, timeout: float) -> Timed:
    """Run ``argv`` to its exit, stamping each output line (stdout and stderr
    together) with the seconds since launch."""
    lines: list[tuple[float, str]] = []
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip

    def read() -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            lines.append((time.perf_counter() - t0, raw.decode(errors="replace").rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    wall = time.perf_counter() - t0
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    reader.join(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()
    return Timed(
        list(argv), wall, usage.ru_utime, usage.ru_stime, code, lines, load_before,
        os.getloadavg()[0],
    )  # fmt: skip


def breakdown(timed: Timed, kind: str) -> dict[str, float | None]:
    """Where a process's seconds went, from its stamped lines (see the module's doc)."""
    wall = timed.wall_s
    if kind == PEER:
        first = next((t for t, s in timed.lines if s.startswith("global step=")), None)
        return {"to_first_episode": first, "after": None if first is None else wall - first}
    start = next((t for t, s in timed.lines if s.startswith("jaxsample train:")), None)
    summary = next(((t, m) for t, s in timed.lines if (m := _SUMMARY.search(s))), None)
    out: dict[str, float | None] = dict.fromkeys(("startup", "compile", "run", "other", "outputs"))
    out["startup"] = start
    if summary is not None:
        t, m = summary
        out["run"], out["compile"] = float(m.group(1)), float(m.group(2))
        out["outputs"] = wall - t
        if start is not None:
            out["other"] = t - start - out["run"] - out["compile"]
    out["cached"] = any(  # type: ignore[assignment]
        s.startswith("loaded from the compile cache") for _, s in timed.lines
    )
    return out


def import_profile(timed: Timed, top: int = 15) -> dict[str, Any]:
    """``python -X importtime``'s lines of a process: the seconds of its
    top-level imports (each one's cumulative time, nested imports included),
    and the packages with the most time of their own."""
    total, own = 0, {}
    for _, line in timed.lines:
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        fields = line[len("import time:") :].split("|")
        if len(fields) != 3:
            continue
        name = fields[2].rstrip()
        self_us, cum_us = int(fields[0]), int(fields[1])
        if not name.startswith("  "):  # a top-level import (not nested in another)
            total += cum_us
        root = name.strip().split(".")[0]
        own[root] = own.get(root, 0) + self_us
    ranked = sorted(own.items(), key=lambda kv: -kv[1])[:top]
    return {"total_s": total / 1e6, "own_s": {k: v / 1e6 for k, v in ranked}}

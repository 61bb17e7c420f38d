"""``jaxsample train``'s live display: compiling, then steps, steps/s, elapsed,
ETA, recent return and loss.

A `LiveDisplay` is a progress callback (``display(event)``) of the events
[`jaxsample.runs.loop.run_training`][jaxsample.runs.loop.run_training] sends:
``{"phase": "compiling", "total_steps"}`` once, then ``{"phase": "running",
"steps", "total_steps", "fraction", "steps_per_second", "elapsed", "eta",
"recent_return", "recent_loss"}``, and for a trainer that runs an evaluation
``"evaluation"`` (``{metric: latest value}``, the headline first): the
headline is shown under its own name instead of the return (a self-play
game's return is 1 or 0 whatever is learned; its evaluation against an
opponent tells). Whoever produces such events (a compiled chunk returning, or
a host callback from inside one compiled program) can feed it. On a terminal
it draws a rich progress bar (below `WIDE` columns, e.g. 80, with short
figures: ``1.23M/4.00M 74.8k/s 0:01:15 ETA 0:37 R 440 L 0.0041``, so that
nothing is cut); otherwise it prints one plain line per event.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO

__all__ = ["LiveDisplay", "format_seconds"]


def format_seconds(seconds: float) -> str:
    """``h:mm:ss`` (``m:ss`` under an hour); ``?`` when not finite."""
    if not math.isfinite(seconds):
        return "?"
    seconds = round(max(seconds, 0.0))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


#: Terminal columns from which the live bar shows every figure in full.
WIDE = 120


def _short(x: float) -> str:
    """``1234944`` -> ``1.23M``, ``74816`` -> ``74.8k`` (3 significant digits)."""
    if not math.isfinite(x):
        return "?"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:#.3g}{unit}"
    return f"{x:.0f}"


def _num(x: float, spec: str) -> str:
    return "n/a" if not math.isfinite(x) else format(x, spec)


class LiveDisplay:
    """The train command's progress display (a callback of progress events).

    Args:
      stream: where to draw (default: the current ``sys.stdout``).
      live: draw a rich progress bar (default: when ``stream`` is a terminal).
    """

    def __init__(self, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.stream = sys.stdout if stream is None else stream
        self.live = self.stream.isatty() if live is None else live
        self._progress: Any = None
        self._task: Any = None
        self._started = time.perf_counter()

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("phase") == "compiling":
            self._compiling(event)
        elif event.get("phase", "running") == "running":
            self._running(event)

    def close(self) -> None:
        """Stop drawing (the bar stays on screen)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    # -- events ----------------------------------------------------------------

    def _compiling(self, event: dict[str, Any]) -> None:
        self._started = time.perf_counter()
        if not self.live:
            self.stream.write("compiling the training program ...\n")
            self.stream.flush()
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(file=self.stream)
        # Under WIDE columns every figure in full; narrower (an 80-column
        # terminal) short figures and no description, so that nothing is cut.
        self._compact = console.width < WIDE
        columns = [SpinnerColumn()]
        if not self._compact:
            columns.append(TextColumn("[bold]{task.description}"))
        columns += [
            BarColumn(bar_width=16 if self._compact else 40),
            TextColumn("{task.fields[steps]}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA {task.fields[eta]}"),
            TextColumn("{task.fields[stats]}"),
        ]
        self._progress = Progress(*columns, console=console, refresh_per_second=4)
        self._task = self._progress.add_task(
            "compiling",
            total=None,
            steps="",
            rate="",
            eta="?",
            stats="compiling" if self._compact else "",
        )
        self._progress.start()

    def _running(self, p: dict[str, Any]) -> None:
        steps, total = int(p["steps"]), int(p.get("total_steps", 0)) or None
        ret = _num(p.get("recent_return", math.nan), ".1f")
        loss = _num(p.get("recent_loss", math.nan), ".4g")
        # the headline evaluation metric, where the trainer reports one
        name, value = next(iter((p.get("evaluation") or {}).items()), (None, math.nan))
        elapsed = p.get("elapsed", time.perf_counter() - self._started)
        if self._progress is not None:
            if self._compact:
                ret = _num(p.get("recent_return", math.nan), ".4g")
                loss = _num(p.get("recent_loss", math.nan), ".2g")
                head = f"R {ret}" if name is None else f"{_short_name(name)} {_num(value, '.2f')}"
                figures = {
                    "steps": f"{_short(steps)}/{_short(total or steps)}",
                    "rate": f"{_short(p['steps_per_second'])}/s",
                    "stats": f"{head} L {loss}",
                }
            else:
                head = f"return {ret}" if name is None else f"{name} {_num(value, '.3f')}"
                figures = {
                    "steps": f"{steps:,}/{total or steps:,} steps",
                    "rate": f"{p['steps_per_second']:,.0f} steps/s",
                    "stats": f"{head}  loss {loss}",
                }
            self._progress.update(
                self._task,
                description="training",
                total=total or steps,
                completed=steps,
                eta=format_seconds(p.get("eta", math.nan)),
                **figures,
            )
            if p.get("fraction", 0.0) >= 1:
                self.close()
            return
        head = f"recent return {ret}" if name is None else f"{name} {_num(value, '.3f')}"
        self.stream.write(
            f"{p['fraction']:6.1%}  steps {steps:>10,}  {p['steps_per_second']:>10,.0f} steps/s  "
            f"elapsed {format_seconds(elapsed)}  ETA {format_seconds(p.get('eta', math.nan))}  "
            f"{head}  loss {loss}\n"
        )
        self.stream.flush()


def _short_name(name: str, limit: int = 11) -> str:
    """A metric's name for the narrow bar: its leading ``_``-separated words
    that fit in ``limit`` characters (at least the first word)."""
    words = name.split("_")
    out = words[0]
    for word in words[1:]:
        if len(out) + 1 + len(word) > limit:
            break
        out += "_" + word
    return out

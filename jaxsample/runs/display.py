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
a host callback from inside one compiled program) can feed it.

On a terminal it draws one live line with rich (a spinner, a bar, the
figures), laid out anew for the terminal's width at every refresh: the
fullest layout that fits (``1,234,944/4,000,000 steps 74,816 steps/s`` and
``return 440.3  loss 0.004066`` where there is room; short figures,
``1.23M/4.00M 74.8k/s ... R 440.3 L 0.0041``, on an 80-column terminal;
fewer figures and then no bar on a narrower one), so that no line is ever
cut or wrapped. Otherwise it prints one plain line per event.
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


def _clock(seconds: float) -> str:
    """``h:mm:ss`` always (the live line's elapsed time)."""
    seconds = round(max(seconds, 0.0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _short(x: float) -> str:
    """Three significant digits and a unit: ``1234944`` -> ``1.23M``,
    ``74816`` -> ``74.8k``, ``136000`` -> ``136k``, ``999600`` -> ``1.00M``;
    under 1000 the integer (``500``)."""
    if not math.isfinite(x):
        return "?"
    if abs(x) < 999.5:
        return f"{x:.0f}"
    for unit, scale in (("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12)):
        rounded = float(f"{x / scale:.3g}")
        if abs(rounded) < 1000 or unit == "T":
            decimals = max(0, 2 - math.floor(math.log10(abs(rounded))))
            return f"{rounded:.{decimals}f}{unit}"
    raise AssertionError("unreachable")


def _num(x: float, spec: str) -> str:
    return "n/a" if not math.isfinite(x) else format(x, spec)


def _short_name(name: str, limit: int = 11) -> str:
    """A metric's name for the narrow line: its leading ``_``-separated words
    that fit in ``limit`` characters (at least the first word)."""
    words = name.split("_")
    out = words[0]
    for word in words[1:]:
        if len(out) + 1 + len(word) > limit:
            break
        out += "_" + word
    return out


class _Line:
    """The live line, a rich renderable: the latest figures, laid out for
    the width rich gives it at each refresh (`layouts`)."""

    #: The bar's widths: (most, fewest) columns, in the full and short layouts.
    BARS = ((40, 10), (40, 6))

    def __init__(self, total_steps: int = 0) -> None:
        from rich.spinner import Spinner

        self.spinner = Spinner("dots")
        self.started = time.perf_counter()
        self.total_steps = total_steps
        self.event: dict[str, Any] | None = None

    def layouts(self, elapsed: float) -> list[tuple[str, list[str], int, int]]:
        """``(description, figures, most bar columns, fewest)`` from the
        fullest layout to the most compact (bar columns 0: no bar)."""
        clock = _clock(elapsed)
        p = self.event
        (full, least), (short, shortest) = self.BARS
        if p is None:
            steps = [f"for {self.total_steps:,} steps"] if self.total_steps else []
            return [
                ("compiling", ["the training program", *steps, clock], 0, 0),
                ("compiling", [clock], 0, 0),
            ]
        steps, total = int(p["steps"]), int(p.get("total_steps", 0)) or int(p["steps"])
        rate = p.get("steps_per_second", math.nan)
        eta = f"ETA {format_seconds(p.get('eta', math.nan))}"
        ret, loss = p.get("recent_return", math.nan), p.get("recent_loss", math.nan)
        # the headline evaluation metric, where the trainer reports one
        name, value = next(iter((p.get("evaluation") or {}).items()), (None, math.nan))
        if name is None:
            head, tight = f"return {_num(ret, '.1f')}", f"R {_num(ret, '.4g')}"
        else:
            head = f"{name} {_num(value, '.3f')}"
            tight = f"{_short_name(name)} {_num(value, '.2f')}"
        wide = [f"{steps:,}/{total:,} steps", f"{_num(rate, ',.0f')} steps/s", clock, eta]
        narrow = [f"{_short(steps)}/{_short(total)}", f"{_short(rate)}/s", clock, eta]
        return [
            ("training", [*wide, f"{head}  loss {_num(loss, '.4g')}"], full, least),
            ("", [*narrow, f"{tight} L {_num(loss, '.2g')}"], short, shortest),
            ("", [*narrow[:2], eta, tight], short, shortest),
            ("", [narrow[0], eta, tight], 0, 0),
            ("", [narrow[0], tight], 0, 0),
        ]

    def text(self, width: int, now: float) -> Any:
        """The line for ``width`` columns (a rich ``Text``): the fullest
        layout whose figures and fewest bar columns fit, its bar as wide as
        the room allows up to its most (the last layout cropped where
        nothing fits)."""
        from rich.text import Text

        spinner = self.spinner.render(now)
        line = Text.assemble(spinner, " ") if isinstance(spinner, Text) else Text()
        room = width - len(line)
        for description, figures, most, fewest in self.layouts(now - self.started):
            used = len(" ".join([description, *figures]).strip())
            free = room - used - (1 if most else 0)
            if free >= fewest:
                break
        if description:
            line.append(description + " ", style="bold")
        bar = min(most, free)
        if bar > 0:
            line.append_text(self._bar(bar))
            line.append(" ")
        line.append(" ".join(figures))
        line.truncate(width, overflow="crop")
        return line

    def _bar(self, columns: int) -> Any:
        """The bar, ``columns`` wide, in half-column steps (rich's glyphs)."""
        from rich.text import Text

        fraction = min(max(float((self.event or {}).get("fraction", 0.0)), 0.0), 1.0)
        halves = round(fraction * columns * 2)
        done, half = divmod(halves, 2)
        style = "bar.finished" if fraction >= 1 else "bar.complete"
        bar = Text("━" * done + "╸" * half, style=style)
        bar.append("━" * (columns - done - half), style="bar.back")
        return bar

    def __rich_console__(self, console: Any, options: Any) -> Any:
        yield self.text(options.max_width, console.get_time())


class LiveDisplay:
    """The train command's progress display (a callback of progress events).

    Args:
      stream: where to draw (default: the current ``sys.stdout``).
      live: draw a live line with rich (default: when ``stream`` is a
        terminal), else plain lines.
    """

    def __init__(self, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.stream = sys.stdout if stream is None else stream
        self.live = self.stream.isatty() if live is None else live
        self._live: Any = None
        self._line: _Line | None = None
        self._started = time.perf_counter()

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("phase") == "compiling":
            self._compiling(event)
        elif event.get("phase", "running") == "running":
            self._running(event)

    def close(self) -> None:
        """Stop drawing (the last line stays on screen)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- events ----------------------------------------------------------------

    def _compiling(self, event: dict[str, Any]) -> None:
        self._started = time.perf_counter()
        if not self.live:
            self.stream.write("compiling the training program ...\n")
            self.stream.flush()
            return
        from rich.console import Console
        from rich.live import Live

        self._line = _Line(int(event.get("total_steps", 0)))
        console = Console(file=self.stream)
        self._live = Live(self._line, console=console, refresh_per_second=4)
        self._live.start()

    def _running(self, p: dict[str, Any]) -> None:
        if self._live is not None and self._line is not None:
            self._line.event = p
            self._live.refresh()
            if p.get("fraction", 0.0) >= 1:
                self.close()
            return
        ret = _num(p.get("recent_return", math.nan), ".1f")
        loss = _num(p.get("recent_loss", math.nan), ".4g")
        name, value = next(iter((p.get("evaluation") or {}).items()), (None, math.nan))
        elapsed = p.get("elapsed", time.perf_counter() - self._started)
        head = f"recent return {ret}" if name is None else f"{name} {_num(value, '.3f')}"
        self.stream.write(
            f"{p['fraction']:6.1%}  steps {p['steps']:>10,}  {p['steps_per_second']:>10,.0f} "
            f"steps/s  elapsed {format_seconds(elapsed)}  ETA "
            f"{format_seconds(p.get('eta', math.nan))}  {head}  loss {loss}\n"
        )
        self.stream.flush()

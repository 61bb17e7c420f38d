"""JAX's persistent compilation cache: where jaxsample keeps it, how to turn it
on, and how to tell a compile from a cache load.

The library itself sets no global JAX configuration. The command line turns the
cache on by default (``--no-compile-cache`` turns it off) with
[`enable_compile_cache`][jaxsample.compile_cache.enable_compile_cache]; a script or notebook may
call it too::

    import jaxsample as js
    js.enable_compile_cache()          # before the first compile
    with js.compile_cache.CompileWatch() as watch:
        compiled = jax.jit(f).lower(x).compile()
    watch.summary()                    # "compiled in 9.1 s" / "loaded from ..."

JAX >= 0.11 also caches programs that contain host callbacks (the progress
display of ``jaxsample train``'s one-program run); older JAX compiles those
again in every process (`CACHES_CALLBACKS`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import jax
import platformdirs
from jax import monitoring

#: Whether this JAX writes programs with host callbacks to the persistent cache
#: (jax >= 0.11; before, they were compiled again in every process).
CACHES_CALLBACKS: bool = tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (0, 11)

#: The default size bound of the cache folder. A bound also makes JAX take a
#: file lock around every read and write, so that parallel processes (a sweep,
#: test workers) never read an entry another one is still writing.
DEFAULT_MAX_BYTES = 2 * 1024**3

_HIT = "/jax/compilation_cache/cache_hits"
#: JAX's stage events: tracing to a jaxpr, lowering to StableHLO, and getting
#: an executable (XLA's compile, or a load from the persistent cache).
_STAGES = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "backend",
}


def default_dir() -> Path:
    """The per-user cache folder: the platform's (``~/.cache/jaxsample/jax`` on
    Linux, ``$XDG_CACHE_HOME`` honoured)."""
    return Path(platformdirs.user_cache_dir("jaxsample")) / "jax"


def active_dir() -> Path | None:
    """The folder of JAX's persistent compilation cache when it is on, else None."""
    folder = jax.config.jax_compilation_cache_dir
    return Path(folder) if folder and jax.config.jax_enable_compilation_cache else None


def configured_dir() -> str | None:
    """The cache folder JAX is already set to use (``JAX_COMPILATION_CACHE_DIR``
    or ``jax.config``), else None."""
    return jax.config.jax_compilation_cache_dir


def enable_compile_cache(
    path: str | os.PathLike[str] | None = None,
    *,
    min_compile_seconds: float = 0.0,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Path:
    """Turn on JAX's persistent compilation cache in ``path`` (default:
    [`default_dir`][jaxsample.compile_cache.default_dir]) for this process. Call it before the first
    compile.

    Args:
      path: the cache folder (created if missing).
      min_compile_seconds: programs that compile faster are not written.
      max_bytes: the folder's size bound (least recently used entries go
        first); ``-1`` for no bound (and no file lock: then parallel processes
        may see a half-written entry, which JAX reports and compiles again).

    Returns:
      The folder.
    """
    if min_compile_seconds < 0:
        raise ValueError(f"min_compile_seconds must be >= 0, got {min_compile_seconds}")
    if max_bytes == 0 or max_bytes < -1:
        raise ValueError(f"max_bytes must be positive or -1 (no bound), got {max_bytes}")
    folder = Path(path) if path is not None else default_dir()
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", int(max_bytes))
    return folder


class _Events:
    """Process-wide counters fed by JAX's monitoring events (registered once:
    JAX has no public way to remove a listener)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        names = ("hits", "backend_calls", "trace", "lower", "backend")
        self.counts = dict.fromkeys(names, 0.0)
        self.registered = False

    def register(self) -> None:
        with self.lock:
            if not self.registered:
                monitoring.register_event_listener(self._event)
                monitoring.register_event_duration_secs_listener(self._duration)
                self.registered = True

    def _event(self, event: str, **kwargs: Any) -> None:
        if event == _HIT:
            with self.lock:
                self.counts["hits"] += 1

    def _duration(self, event: str, duration: float, **kwargs: Any) -> None:
        stage = _STAGES.get(event)
        if stage is not None:
            with self.lock:
                self.counts[stage] += duration
                if stage == "backend":
                    self.counts["backend_calls"] += 1

    def snapshot(self) -> dict[str, float]:
        with self.lock:
            return dict(self.counts)


_EVENTS = _Events()


class CompileWatch:
    """What a ``with`` block spent getting its programs, from JAX's own
    monitoring events: how many XLA compiled and how many it loaded from the
    persistent cache, and the seconds of each stage (tracing and lowering run
    in every process; the cache saves the XLA compile).

    Attributes (after the block; live inside it):
      hits: programs loaded from the persistent cache.
      compiles: programs compiled by XLA.
      trace_seconds: tracing to jaxprs.
      lower_seconds: lowering to StableHLO.
      backend_seconds: XLA's compiles and the cache's loads.
    """

    def __init__(self) -> None:
        _EVENTS.register()
        self._start = _EVENTS.snapshot()
        self._end: dict[str, float] | None = None

    def __enter__(self) -> CompileWatch:
        self._start = _EVENTS.snapshot()
        self._end = None
        return self

    def __exit__(self, *exc: object) -> None:
        self._end = _EVENTS.snapshot()

    def _delta(self, name: str) -> float:
        end = self._end if self._end is not None else _EVENTS.snapshot()
        return end[name] - self._start[name]

    @property
    def hits(self) -> int:
        return int(self._delta("hits"))

    @property
    def compiles(self) -> int:
        return int(self._delta("backend_calls") - self._delta("hits"))

    @property
    def trace_seconds(self) -> float:
        return self._delta("trace")

    @property
    def lower_seconds(self) -> float:
        return self._delta("lower")

    @property
    def backend_seconds(self) -> float:
        return self._delta("backend")

    def summary(self, seconds: float) -> str:
        """One line for ``seconds`` of wall time spent getting the programs:
        ``compiled in X s``, or ``loaded from the compile cache in X s`` with
        the part that was tracing and lowering (what JAX still does in every
        process), or both counts when some of each."""
        hits, compiles = self.hits, self.compiles
        if not hits:
            return f"compiled in {seconds:.1f} s"
        if compiles:
            return (
                f"compiled in {seconds:.1f} s ({compiles} program(s) compiled, {hits} loaded "
                "from the compile cache)"
            )
        # (a jit traced inside another's trace counts in both: an upper bound)
        return (
            f"loaded from the compile cache in {seconds:.1f} s (tracing and lowering "
            f"{self.trace_seconds + self.lower_seconds:.1f} s, XLA {self.backend_seconds:.1f} s)"
        )

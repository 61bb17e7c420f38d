"""JAX's persistent compilation cache: where jaxsample keeps it, how to turn it
on, and how to tell a compile from a cache load.

The library itself sets no global JAX configuration. The command line turns the
cache on by default (``--no-compile-cache`` turns it off) with
:func:`enable_compile_cache`; a script or notebook may call it too::

    import jaxsample as js
    js.enable_compile_cache()          # before the first compile
    with js.compile_cache.CompileWatch() as watch:
        compiled = jax.jit(f).lower(x).compile()
    watch.summary()                    # "compiled in 9.1 s" / "loaded from ..."

JAX >= 0.11 also caches programs that contain host callbacks (the progress
display of ``jaxsample train``'s one-program run); older JAX compiles those
again in every process (:data:`CACHES_CALLBACKS`).
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
_COMPILE = "/jax/core/compile/backend_compile_duration"
_RETRIEVE = "/jax/compilation_cache/cache_retrieval_time_sec"


def default_dir() -> Path:
    """The per-user cache folder (the platform's: ``~/.cache/jaxsample/jax`` on
    Linux), unless ``JAX_COMPILATION_CACHE_DIR`` names another."""
    env = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    return Path(env) if env else Path(platformdirs.user_cache_dir("jaxsample")) / "jax"


def enable_compile_cache(
    path: str | os.PathLike[str] | None = None,
    *,
    min_compile_seconds: float = 0.0,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Path:
    """Turn on JAX's persistent compilation cache in ``path`` (default:
    :func:`default_dir`) for this process. Call it before the first compile.

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
        self.hits = 0
        self.compiles = 0
        self.compile_seconds = 0.0
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
                self.hits += 1

    def _duration(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == _COMPILE:
            with self.lock:
                self.compiles += 1
                self.compile_seconds += duration

    def snapshot(self) -> tuple[int, int, float]:
        with self.lock:
            return self.hits, self.compiles, self.compile_seconds


_EVENTS = _Events()


class CompileWatch:
    """Counts, over a ``with`` block, the programs XLA really compiled (and
    their seconds) and those loaded from the persistent cache, from JAX's own
    monitoring events.

    Attributes (after the block; live inside it):
      hits: programs loaded from the persistent cache.
      compiles: programs compiled by XLA.
      compile_seconds: XLA's compile time of those.
    """

    def __init__(self) -> None:
        _EVENTS.register()
        self._start = _EVENTS.snapshot()
        self._end: tuple[int, int, float] | None = None

    def __enter__(self) -> CompileWatch:
        self._start = _EVENTS.snapshot()
        self._end = None
        return self

    def __exit__(self, *exc: object) -> None:
        self._end = _EVENTS.snapshot()

    def _delta(self) -> tuple[int, int, float]:
        end = self._end if self._end is not None else _EVENTS.snapshot()
        return tuple(e - s for e, s in zip(end, self._start, strict=True))  # type: ignore[return-value]

    @property
    def hits(self) -> int:
        return self._delta()[0]

    @property
    def compiles(self) -> int:
        return self._delta()[1]

    @property
    def compile_seconds(self) -> float:
        return self._delta()[2]

    def summary(self, seconds: float) -> str:
        """One line for ``seconds`` of wall time spent getting the programs:
        ``compiled in X s``, ``loaded from the compile cache in X s``, or both
        counts when some of each."""
        hits, compiles, _ = self._delta()
        if hits and not compiles:
            return f"loaded from the compile cache in {seconds:.1f} s"
        if hits:
            return (
                f"compiled in {seconds:.1f} s ({compiles} program(s) compiled, "
                f"{hits} loaded from the compile cache)"
            )
        return f"compiled in {seconds:.1f} s"

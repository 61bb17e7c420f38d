"""Traced and lowered programs kept on disk, so that a second run of the same
training program skips tracing and lowering as JAX's persistent compilation
cache skips XLA's compile.

JAX's cache is keyed by the lowered program, so every process still traces and
lowers a program before it can look it up: for a training program, most of what
a cached run spends. A
[`ProgramStore`][jaxsample.runs.program_store.ProgramStore] exports the
callback-free parts of the program (``jax.export``: the trainer's ``init`` and
one ``iteration`` of the one program, or a run folder's whole chunk) to a file
named by a hash of everything that determines them: the caller's ``identity``
(the algorithm and its config), the example arguments' structure, shapes and
dtypes, jaxsample's own source, every installed distribution's name and version
(their ``.dist-info`` folders), JAX's configuration, the backend and its
devices, ``XLA_FLAGS`` and the Python version. A later process with the same
hash deserializes them instead of tracing; the program around them (the loop
with its progress callbacks) is small to trace, and XLA's compile of the whole
is found in JAX's cache.

A damaged or unreadable file is a miss (the parts are exported again and the
file rewritten); files are written whole, then renamed into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
from jax import export

_PACKAGE = Path(__file__).resolve().parent.parent  # jaxsample/


def _source_digest() -> str:
    """A hash of jaxsample's own ``.py`` files."""
    h = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        h.update(str(path.relative_to(_PACKAGE)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _environment() -> str:
    """Everything outside the caller's arguments that can change a trace."""
    dists = sorted(  # the installed distributions' names and versions, fast
        name
        for folder in sys.path
        if os.path.isdir(folder)
        for name in os.listdir(folder)
        if name.endswith((".dist-info", ".egg-info"))
    )
    devices = [(d.platform, d.device_kind) for d in jax.devices()]
    config = sorted((k, repr(v)) for k, v in jax.config.values.items())
    return repr(
        (
            _source_digest(),
            dists,
            devices,
            config,
            os.environ.get("XLA_FLAGS", ""),
            sys.version,
        )
    )


def _signature(args: tuple) -> str:
    leaves, tree = jax.tree.flatten(args)
    return repr((str(tree), [(tuple(x.shape), str(x.dtype)) for x in leaves]))


class Stored:
    """An exported function of flat leaves, called with the original's pytrees."""

    def __init__(self, exported: export.Exported, in_tree: Any, out_tree: Any) -> None:
        self.exported, self.in_tree, self.out_tree = exported, in_tree, out_tree

    def __call__(self, *args: Any) -> Any:
        leaves, tree = jax.tree.flatten(args)
        if tree != self.in_tree:
            raise TypeError(f"arguments {tree} differ from the stored function's {self.in_tree}")
        return jax.tree.unflatten(self.out_tree, self.exported.call(*leaves))


class ProgramStore:
    """Exported functions on disk under ``folder``, for one ``identity``.

    Args:
      folder: where the files go (created on first write).
      identity: what the functions compute beyond their arguments (e.g. the
        algorithm and ``repr`` of its config): two stores with the same
        identity must build the same functions.
    """

    def __init__(self, folder: str | os.PathLike[str], identity: str) -> None:
        self.folder = Path(folder)
        self._base = hashlib.sha256((identity + _environment()).encode()).hexdigest()
        #: names of the functions this store loaded instead of tracing
        self.loaded: list[str] = []

    def function(self, name: str, fn: Callable[..., Any], *args: Any) -> Stored:
        """``fn`` exported for arguments like ``args`` (arrays or
        ``jax.ShapeDtypeStruct`` s, any pytree): loaded when stored, else
        traced, lowered, stored (when its pytrees can be) and returned."""
        in_leaves, in_tree = jax.tree.flatten(args)
        digest = hashlib.sha256((self._base + name + _signature(args)).encode()).hexdigest()
        path = self.folder / f"{name}-{digest[:32]}.jaxexport"
        try:
            serialized, out_tree = pickle.loads(path.read_bytes())
            stored = Stored(export.deserialize(bytearray(serialized)), in_tree, out_tree)
        except FileNotFoundError:
            stored = None
        except Exception:  # damaged, or written by an incompatible JAX: export again
            stored = None
        if stored is not None:
            self.loaded.append(name)
            return stored
        trees: list[Any] = []

        def flat(*leaves: Any) -> list[Any]:
            out = fn(*jax.tree.unflatten(in_tree, leaves))
            trees.append(jax.tree.structure(out))
            return jax.tree.leaves(out)

        exported = export.export(jax.jit(flat))(*in_leaves)
        stored = Stored(exported, in_tree, trees[-1])
        try:
            data = pickle.dumps((exported.serialize(), stored.out_tree))
        except Exception:  # a pytree node type that does not pickle: not stored
            return stored
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError:  # a read-only or full cache folder: the run goes on unstored
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        return stored

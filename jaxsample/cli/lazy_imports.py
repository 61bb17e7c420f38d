"""What the training path imports and never uses, deferred to its first use, in
the ``jaxsample`` command's own process.

``import gymnax`` imports every env module, and some import plotting libraries
at their top for their ``render`` functions: ``gymnax.environments.misc.pong``
imports seaborn (and through it pandas and ``scipy.stats``) and
``matplotlib.colors``, ``bsuite.catch`` and three others ``matplotlib.pyplot``.
Training never renders, and those imports were about 40% of what ``jaxsample
train`` imported (issue 53). And jaxlib's CPU LAPACK kernels import
``scipy.linalg.cython_blas`` and ``cython_lapack`` (at the first linear algebra,
e.g. an orthogonal initializer) for their function pointers: the extension
modules need no more of ``scipy.linalg`` than its folder, but importing them
ran the package's ``__init__`` (all of ``scipy.linalg``, ``numpy.f2py``,
``charset_normalizer``).

`defer_imports` puts a finder first on ``sys.meta_path`` that answers
for `DEFERRED` only: such a module is created as usual (its spec, its
attributes, bound to its parent package) but its code runs at the first use of
one of its attributes, in place, so every name bound to it stays valid
(``importlib.util.LazyLoader``'s idea). Unlike ``LazyLoader``'s modules, the
attributes the import system itself reads (``__spec__``, ``__name__``, ...)
and a package's submodules do not run it: else the next ``import seaborn``
statement, or ``import matplotlib.pyplot``, would. A deferred package gets its
deferred submodules bound to it when it is created (``from matplotlib import
colors`` then runs neither). A module the process has imported already is
left as it is.

Only the command line calls it (`jaxsample.cli.main`), and removes the finder
when the command returns: ``import jaxsample`` and the library in a user's
process install nothing.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["DEFERRED", "DeferredModule", "defer_imports"]

#: The modules deferred: what gymnax's env modules import only to render, the
#: ``scipy.linalg`` package around the two extension modules jaxlib loads, and
#: the Python bindings of the Mosaic TPU and GPU dialects that ``import jax``
#: loads for Pallas kernels (about 60 ms; a run on CPU never uses them), what
#: ``flax.linen.summary`` imports for ``Module.tabulate`` only (``rich.table``
#: and ``yaml``).
DEFERRED = (
    "seaborn", "matplotlib", "matplotlib.colors", "matplotlib.pyplot", "scipy.linalg",
    "jaxlib.mosaic.python.tpu", "jaxlib.mosaic.python.mosaic_gpu", "rich.table", "yaml",
)  # fmt: skip

#: What the import system reads of a module in ``sys.modules`` (and
#: ``inspect.getmodule`` of every module): answered without running its code.
_METADATA = frozenset(
    {"__spec__", "__name__", "__loader__", "__package__", "__path__", "__file__", "__cached__"}
)


class DeferredModule(types.ModuleType):
    """A module whose code has not run yet: the first read of an attribute
    (other than the import system's metadata) runs it in place, and the
    object becomes a plain module. Another thread that reads it meanwhile
    waits for the run; the running code's own reads (a circular import) see
    the module as it is so far, as with any import."""

    def __getattribute__(self, name: str) -> Any:
        if name not in _METADATA and not _is_submodule(self, name):
            _run(self)
        return types.ModuleType.__getattribute__(self, name)  # (self's class may be changed)

    def __delattr__(self, name: str) -> None:
        _run(self)
        types.ModuleType.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        _run(self)
        return types.ModuleType.__dir__(self)


def _is_submodule(module: types.ModuleType, name: str) -> bool:
    """Whether ``name`` is bound to the package's submodule of that name (as
    the import system binds them): read without running the package."""
    value = object.__getattribute__(module, "__dict__").get(name)
    parent = object.__getattribute__(module, "__name__")
    return isinstance(value, types.ModuleType) and value.__name__ == f"{parent}.{name}"


def _run(module: types.ModuleType) -> None:
    """Run a deferred module's code in it, once (``importlib.util.LazyLoader``'s
    order: under the module's own lock, the module's class restored after)."""
    spec = object.__getattribute__(module, "__spec__")
    state = spec.loader_state
    with state["lock"]:
        if type(module) is not DeferredModule or state["running"]:
            return  # it ran already, or it is running in this thread
        state["running"] = True
        loader = state["loader"]
        spec.loader = loader
        module.__loader__ = loader
        try:
            loader.exec_module(module)
        except BaseException:
            sys.modules.pop(spec.name, None)  # as a failed import leaves it
            raise
        finally:
            module.__class__ = types.ModuleType
            state["running"] = False


class _DeferringLoader:
    """Creates the module as its own loader would, and defers running it (an
    ``importlib.abc.Loader``; not subclassed: importing ``importlib.abc``
    costs more than this module)."""

    def __init__(self, loader: Any, finder: _DeferringFinder) -> None:
        self.loader = loader
        self.finder = finder

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__.loader_state = {
            "loader": self.loader,
            "lock": threading.RLock(),
            "running": False,
        }
        module.__class__ = DeferredModule
        if module.__spec__.submodule_search_locations is not None:
            self._bind_deferred_submodules(module)

    def _bind_deferred_submodules(self, package: types.ModuleType) -> None:
        """Create the package's deferred submodules and bind them to it, as
        the package's own imports would (``from matplotlib import colors``
        then runs neither)."""
        name = package.__name__
        for child in sorted(self.finder.names):
            if child.rpartition(".")[0] != name or child in sys.modules:
                continue
            spec = self.finder.find_spec(child, package.__path__)
            if spec is None:
                continue
            module = importlib.util.module_from_spec(spec)
            sys.modules[child] = module
            spec.loader.exec_module(module)
            setattr(package, child.rpartition(".")[2], module)


class _DeferringFinder:
    """Finds `DEFERRED`'s modules as the other finders would, with a deferring
    loader (an ``importlib.abc.MetaPathFinder``)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # a namespace package or an old-style loader: as it is
        spec.loader = _DeferringLoader(spec.loader, self)
        return spec


def defer_imports(names: Sequence[str] = DEFERRED) -> Callable[[], None]:
    """Defer ``names`` (default `DEFERRED`) to their first use in this process.

    Returns:
      A function that removes the finder again (modules already created stay
      deferred until used; later imports are ordinary).
    """
    finder = _DeferringFinder([n for n in names if n not in sys.modules])
    sys.meta_path.insert(0, finder)

    def undo() -> None:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)

    return undo

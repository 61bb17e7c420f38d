"""Checkpoints: save and restore any jaxsample state on orbax, bit for bit.

Everything that carries over between calls is a pytree of arrays — a
[`SamplerState`][jaxsample.sampler.SamplerState] (envs, per-env key chains, trajectory
accumulators), a trainer's ``TrainState`` (parameters, optimizer, sampler and
replay state, metrics), a [`ReplayState`][jaxsample.replay.ReplayState], a
[`StepMetrics`][jaxsample.metrics.StepMetrics] — so one pair of functions saves and restores
them all::

    from jaxsample import checkpoint

    checkpoint.save("ckpt", state, step=10)            # ckpt/10/...
    like = jax.eval_shape(trainer.init, key)            # or a concrete state
    state = checkpoint.restore("ckpt", like)            # the latest step

A restored state continues the exact same stream: the next ``collect`` /
iteration returns bit-identical batches to an uninterrupted run (the key
chains and step counters are part of the state).

How (orbax, the JAX ecosystem's checkpoint library): the arrays are written by
``orbax.checkpoint.StandardCheckpointer`` handlers under an
``orbax.checkpoint.CheckpointManager`` (one sub-folder per step, atomic
finalization, ``keep`` newest kept). Typed PRNG keys (``jax.random.key``),
which orbax and ``flax.serialization`` cannot store, are saved as their
``key_data`` and wrapped again on restore with the key implementation of the
target. Beside the arrays a small JSON manifest records every leaf's path,
shape and dtype, so restoring onto a state of another configuration (another
``B``, network size, buffer capacity, ...) raises a ``ValueError`` naming the
first leaf that differs instead of failing deep inside orbax or, worse,
restoring silently.

``restore`` places every array like the corresponding leaf of ``like``: a
concrete ``jax.Array`` or a ``jax.ShapeDtypeStruct`` with a ``sharding``
(e.g. the state of a sharded sampler) is restored onto that sharding; a
``ShapeDtypeStruct`` without one (what ``jax.eval_shape`` returns) onto JAX's
default device, whatever devices the checkpoint was saved from (a state saved
sharded over 2 devices restores in a 1-device process); numpy leaves come
back as numpy arrays. To restore onto a mesh from an abstract target, give
its leaves that sharding (for a sharded sampler's state, every leaf:
``sampler.state_sharding``).

Host-env states ([`jaxsample.host.HostSamplerState`][jaxsample.host.HostSamplerState]) refer to a
live
host environment that cannot be rewound, so they cannot be checkpointed.

A save or restore that fails (a full disk, a damaged checkpoint) raises its
error and leaves nothing running behind it: no ``RuntimeError: Event loop is
closed`` tracebacks from orbax's abandoned operations afterwards, and the
process's exception hooks are never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxsample._checks import check_int
from jaxsample.host.sampler import HostSamplerState
from jaxsample.types import PyTree

__all__ = ["all_steps", "latest_step", "restore", "save"]

_FORMAT = 1  # manifest format version


def _is_key(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _key_impl(x: Any) -> Any:
    """The PRNG implementation of a typed key array or its ``ShapeDtypeStruct``."""
    return jax.random.key_impl(x) if isinstance(x, jax.Array) else x.dtype._impl


def _describe(x: Any) -> dict[str, Any]:
    """Shape, dtype (key implementation for typed keys) of one leaf."""
    if _is_key(x):
        return {"shape": list(x.shape), "dtype": str(x.dtype)}  # e.g. key<fry>
    return {"shape": list(np.shape(x)), "dtype": str(np.dtype(x.dtype))}


def _manifest(tree: PyTree) -> dict[str, Any]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {
        "format": _FORMAT,
        "leaves": [{"path": jax.tree_util.keystr(p), **_describe(x)} for p, x in leaves],
    }


def _check_state(state: PyTree, what: str) -> None:
    for leaf in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, HostSamplerState)):
        if isinstance(leaf, HostSamplerState):
            raise TypeError(
                f"{what} holds a HostSamplerState: a host env cannot be rewound, so its "
                "state cannot be checkpointed"
            )
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            raise TypeError(
                f"{what} must be a pytree of arrays (or jax.ShapeDtypeStruct), got a leaf "
                f"of type {type(leaf).__name__}"
            )


def _to_storable(tree: PyTree) -> PyTree:
    """Typed keys as their ``key_data`` (uint32), other leaves unchanged."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _default_sharding() -> jax.sharding.Sharding:
    """Where an array lands without a placement: JAX's default device."""
    device = jax.config.jax_default_device
    if device is None or isinstance(device, str):
        device = jax.devices(device)[0] if isinstance(device, str) else jax.devices()[0]
    return jax.sharding.SingleDeviceSharding(device)


def _abstract(x: Any) -> Any:
    """The orbax restore target of one leaf of ``like``: its sharding, or JAX's
    default device for a leaf without one (a ``jax.eval_shape`` result), never
    the devices the checkpoint was saved from (they may not exist here)."""
    if _is_key(x):
        spec = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct(x.shape, x.dtype))
        sharding = getattr(x, "sharding", None)
        if isinstance(x, jax.Array):
            sharding = jax.random.key_data(x).sharding
        return jax.ShapeDtypeStruct(
            spec.shape, spec.dtype, sharding=sharding or _default_sharding()
        )
    if isinstance(x, np.ndarray):
        return np.zeros(x.shape, x.dtype)
    sharding = getattr(x, "sharding", None) or _default_sharding()
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)


# -- orbax's event loops ----------------------------------------------------------
#
# orbax runs each asynchronous step of a save or restore with
# ``asyncio_utils.run_sync``, on an event loop of its own that it closes when
# the step returns or raises. When one of a step's concurrent tensorstore reads
# or writes fails (a damaged checkpoint, a full disk), the step raises at once
# and orbax closes the loop with the others still in flight: its run_sync,
# unlike ``asyncio.run``, does not cancel them first. Each of those, finishing
# a few milliseconds later, calls ``loop.call_soon_threadsafe`` from a
# tensorstore thread; on the closed loop that raises ``RuntimeError: Event loop
# is closed``, which tensorstore hands to ``sys.unraisablehook`` (a traceback
# on stderr per operation, mostly after the call has returned, even at exit),
# and their tasks, still pending, are logged when collected. The same on the
# uvloop loop orbax uses when the caller's thread runs an event loop (a
# notebook cell). None of this reaches ``threading.excepthook``: orbax's own
# threads catch and log their errors.
#
# So, while a call of this module is in orbax, a step that fails ends as
# ``asyncio.run`` ends: the other tasks of its loop are cancelled (a cancelled
# tensorstore operation drops its callback) and awaited before the step's error
# is raised. An operation that completed at that very moment may still have its
# callback on the way; on that step's closed loop a ``call_soon_threadsafe``
# from native code (no Python caller: tensorstore's) does nothing instead of
# raising. No exception hook is replaced, a Python caller still gets the
# RuntimeError, and a step that succeeds runs as orbax runs it. The entry point
# is orbax's private ``run_sync``, wrapped only while a call of this module is
# in orbax (other threads' orbax steps meanwhile get the same ending).

try:  # orbax's private module: an orbax without it runs as it does (noise included)
    from orbax.checkpoint._src import asyncio_utils as _orbax_asyncio
except ImportError:  # pragma: no cover
    _orbax_asyncio = None
if not callable(getattr(_orbax_asyncio, "run_sync", None)):  # pragma: no cover
    _orbax_asyncio = None

#: How long a failed step waits for its cancelled tasks (a hang guard: they end
#: in milliseconds).
_CANCEL_SECONDS = 30.0

_wrap_lock = threading.Lock()
_wrap_users = 0
_orbax_run_sync: Any = None


def _late_callbacks_ignored(loop: asyncio.AbstractEventLoop) -> None:
    """``loop.call_soon_threadsafe`` does nothing once ``loop`` is closed when
    native code calls it (a tensorstore thread); otherwise it is the loop's."""
    schedule = loop.call_soon_threadsafe

    def call_soon_threadsafe(callback: Any, *args: Any, context: Any = None) -> Any:
        try:
            return schedule(callback, *args, context=context)
        except RuntimeError:
            if loop.is_closed() and sys._getframe(0).f_back is None:
                return None
            raise

    with contextlib.suppress(AttributeError, TypeError):  # a loop type without a __dict__
        loop.call_soon_threadsafe = call_soon_threadsafe  # type: ignore[method-assign]


async def _ending_as_asyncio_run(step: Coroutine[Any, Any, Any]) -> Any:
    """Run ``step``; if it fails, cancel the other tasks of its loop and wait
    for them before raising its error (see above)."""
    try:
        return await step
    except GeneratorExit:  # closed unfinished (its loop is gone): nothing to wait on
        raise
    except BaseException:
        _late_callbacks_ignored(asyncio.get_running_loop())
        me = asyncio.current_task()
        try:
            rest = [task for task in asyncio.all_tasks() if task is not me]
        except RuntimeError:  # pragma: no cover - all_tasks lost its race 1000 times
            rest = []
        for task in rest:
            task.cancel()
        if rest:
            done, _ = await asyncio.wait(rest, timeout=_CANCEL_SECONDS)
            for task in done:  # their errors are the step's: retrieved, not logged
                if not task.cancelled():
                    task.exception()
        raise


def _run_sync(step: Coroutine[Any, Any, Any]) -> Any:
    return _orbax_run_sync(_ending_as_asyncio_run(step))


@contextlib.contextmanager
def _failed_steps_end_cleanly() -> Iterator[None]:
    """While in this block (blocks in several threads may overlap), orbax's
    steps end as `_ending_as_asyncio_run` says."""
    global _wrap_users, _orbax_run_sync
    if _orbax_asyncio is None:  # pragma: no cover
        yield
        return
    with _wrap_lock:
        if _wrap_users == 0 and _orbax_asyncio.run_sync is not _run_sync:
            _orbax_run_sync = _orbax_asyncio.run_sync
            _orbax_asyncio.run_sync = _run_sync
        _wrap_users += 1
    try:
        yield
    finally:
        with _wrap_lock:
            _wrap_users -= 1
            if _wrap_users == 0 and _orbax_asyncio.run_sync is _run_sync:
                _orbax_asyncio.run_sync = _orbax_run_sync


@contextlib.contextmanager
def _manager(
    directory: str | os.PathLike, keep: int | None = None
) -> Iterator[ocp.CheckpointManager]:
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
    with (
        _failed_steps_end_cleanly(),
        ocp.CheckpointManager(
            os.path.abspath(os.fspath(directory)),
            item_names=("state", "manifest"),
            options=options,
        ) as manager,
    ):
        yield manager


def save(
    directory: str | os.PathLike,
    state: PyTree,
    *,
    step: int = 0,
    keep: int | None = None,
) -> None:
    """Save ``state`` as step ``step`` of the checkpoint folder ``directory``.

    Args:
      directory: the checkpoint folder (created if missing); each step is a
        sub-folder ``directory/<step>``.
      state: any pytree of arrays (``jax.Array``, numpy, typed PRNG keys): a
        ``SamplerState``, a trainer's ``TrainState``, a ``ReplayState``,
        ``StepMetrics``, or a tuple/dict of them.
      step: a non-negative int naming this checkpoint (e.g. the iteration);
        saving a step that exists already raises.
      keep: keep only the newest ``keep`` steps (default: all).

    Returns when the checkpoint is complete on disk.
    """
    step = check_int("step", step, 0)
    if keep is not None:
        keep = check_int("keep", keep, 1)
    _check_state(state, "state")
    with _manager(directory, keep) as manager:
        if step in manager.all_steps():
            raise ValueError(f"step {step} exists already in checkpoint folder {directory}")
        manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(_to_storable(state)),
                manifest=ocp.args.JsonSave(_manifest(state)),
            ),
        )
        manager.wait_until_finished()


def all_steps(directory: str | os.PathLike) -> Sequence[int]:
    """The steps saved in ``directory``, ascending (empty if none)."""
    if not os.path.isdir(directory) or not any(n.isdigit() for n in os.listdir(directory)):
        return []  # no step's folder (named by its number): no manager to open
    with _manager(directory) as manager:
        return sorted(manager.all_steps())


def latest_step(directory: str | os.PathLike) -> int | None:
    """The newest step saved in ``directory``, or None if there is none."""
    steps = all_steps(directory)
    return steps[-1] if steps else None


def _check_matches(saved: dict[str, Any], like: PyTree, where: str) -> None:
    want = _manifest(like)["leaves"]
    have = saved.get("leaves", [])
    have_paths = [leaf["path"] for leaf in have]
    want_paths = [leaf["path"] for leaf in want]
    if have_paths != want_paths:
        missing = [p for p in want_paths if p not in have_paths]
        extra = [p for p in have_paths if p not in want_paths]
        raise ValueError(
            f"checkpoint {where} has another structure than the target state "
            f"(a different configuration?): missing in the checkpoint {missing[:5]}, "
            f"not in the target {extra[:5]}"
        )
    for h, w in zip(have, want, strict=True):
        if h["shape"] != w["shape"] or h["dtype"] != w["dtype"]:
            raise ValueError(
                f"checkpoint {where} does not match the target state at {w['path']}: saved "
                f"{h['dtype']}{h['shape']}, target {w['dtype']}{w['shape']} "
                "(a different configuration?)"
            )


def restore(directory: str | os.PathLike, like: PyTree, *, step: int | None = None) -> PyTree:
    """Restore the state saved in ``directory`` onto the structure of ``like``.

    Args:
      directory: a checkpoint folder written by [`save`][jaxsample.checkpoint.save].
      like: a state of the same configuration — concrete (e.g. a fresh
        ``sampler.init(...)``) or abstract (``jax.eval_shape(trainer.init,
        key)``); only its structure, shapes, dtypes and shardings are used
        (a leaf without a sharding lands on JAX's default device).
      step: the step to restore (default: the latest).

    Returns:
      The saved state, with ``like``'s structure, dtypes (typed keys included)
      and shardings.

    Raises:
      FileNotFoundError: no checkpoint (or not that step) in ``directory``.
      ValueError: the checkpoint's leaves differ from ``like``'s (another
        configuration); the message names the first differing leaf.
    """
    _check_state(like, "like")
    if step is not None:
        step = check_int("step", step, 0)
    steps = all_steps(directory)
    if not steps:
        raise FileNotFoundError(f"no checkpoint in {directory}")
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise FileNotFoundError(f"no step {step} in checkpoint folder {directory} (has {steps})")
    where = f"{directory} step {step}"
    with _manager(directory) as manager:
        manifest = manager.restore(step, args=ocp.args.Composite(manifest=ocp.args.JsonRestore()))[
            "manifest"
        ]
        _check_matches(manifest, like, where)
        target = jax.tree.map(_abstract, like)
        arrays = manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target))
        )["state"]

    def back(saved: Any, ref: Any) -> Any:
        if _is_key(ref):
            return jax.random.wrap_key_data(saved, impl=_key_impl(ref))
        return saved

    return jax.tree.map(back, arrays, like)

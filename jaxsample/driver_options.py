"""The arguments of [`make_driver`][jaxsample.driver.make_driver], stated and checked once.

[`DriverOptions`][jaxsample.driver.DriverOptions] (frozen) holds the three
functions and the schedule options of an actor/learner driver, validates them in
``__post_init__`` (a ``TypeError``/``ValueError`` naming the bad one) and fills
in the device defaults; [`jaxsample.driver.Driver`][jaxsample.driver.Driver]
holds one as ``driver.options`` and a run (`jaxsample._driver_run`) reads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal

import jax

from jaxsample._checks import check_int
from jaxsample.metrics import StepMetrics, StepObserver
from jaxsample.types import Batch, PyTree

Mode = Literal["async", "sync"]
StalePolicy = Literal["wait", "drop"]
MODES = ("async", "sync")
STALE_POLICIES = ("wait", "drop")


@dataclasses.dataclass(frozen=True, eq=False)
class DriverOptions:
    """The arguments of a driver, checked once (see [`jaxsample.driver`][jaxsample.driver]).

    Build it with [`make_driver`][jaxsample.driver.make_driver] (``DriverOptions(collect,
    learn, publish, mode="sync")`` also works); ``__post_init__`` checks every
    field and normalizes it (``actor_devices`` a tuple, ``learner_device``
    filled in, ``join_timeout`` a float, ``observers`` a tuple).

    Attributes:
      collect: ``collect(actor_state, params, index) -> (actor_state, batch)``;
        ``index`` is the batch's global position (int32 ``[]``).
      learn: ``learn(learner_state, batch) -> (learner_state, metrics)``, once
        per batch; ``metrics`` is any pytree (fetched to the host per batch).
      publish: ``publish(learner_state) -> params`` for the actors.
      mode: ``"async"`` (actor threads) or ``"sync"`` (one thread, same
        schedule, deterministic).
      actor_devices: one actor per entry (a device may repeat); default
        ``[jax.devices()[0]]``.
      learner_device: a ``jax.Device`` or a ``jax.sharding.Sharding`` the batches
        and the learner state are put on; default the first device that is not
        an actor's, else ``actor_devices[0]``.
      num_buffers: batches an actor may hold at once, the one it is collecting
        included (2: the double buffer; 1: collect and learn alternate).
      sync_every: the learner publishes parameters every ``sync_every`` learned
        batches (``k``).
      max_staleness: None (bounded by the buffers alone: at most
        ``num_actors * num_buffers - 1 + sync_every - 1`` versions) or the most
        versions a learned batch may be behind; it must be ``>= sync_every -
        1`` (else an actor waits for, or the learner drops every batch
        before, a version that is never published).
      stale: ``"wait"`` (an actor waits until its batch cannot be too stale) or
        ``"drop"`` (the learner drops batches staler than ``max_staleness``).
      steps_per_batch: environment steps in one batch, for
        `DriverResult.env_steps`.
      jit: jit ``collect`` and ``learn`` (donating the states); False calls
        them as given.
      join_timeout: seconds to wait for the actor threads to stop at the end
        or after an error.
      init: what [`Driver.train`][jaxsample.driver.Driver.train] starts from,
        ``init(key, num_actors) -> (learner_state, actor_states)`` (an adapter
        sets it from its trainer).
      default_num_batches: ``Driver.train``'s default number of batches.
      learn_queue_cap: batches per learner update (``N``, ALF's
        ``learn_queue_cap``): ``learn(state, combine(batches))`` on ``N``
        consecutive batches; ``N <= num_actors * num_buffers`` and
        ``stale="wait"`` (a dropped part would change the update's shape).
      combine: ``combine(batches) -> batch`` for ``N > 1`` (a tuple in index
        order; compiled into ``learn``); default
        [`stack_batches`][jaxsample.driver.stack_batches].
      step_metrics: an initial [`StepMetrics`][jaxsample.metrics.StepMetrics], updated
        with every collected batch (`DriverResult.step_metrics`).
      observers: step observers ([`StepObserver`][jaxsample.metrics.StepObserver])
        called with every collected batch, in batch order.
      batch_view: ``batch -> Batch`` for the hook when the driver's batches are
        not jaxsample Batches (pure, compiled).
    """

    collect: Callable[[PyTree, PyTree, jax.Array], tuple[PyTree, PyTree]]
    learn: Callable[[PyTree, PyTree], tuple[PyTree, PyTree]]
    publish: Callable[[PyTree], PyTree]
    _: dataclasses.KW_ONLY
    mode: Mode = "async"
    actor_devices: tuple[jax.Device, ...] = None  # type: ignore[assignment]  # default: device 0
    learner_device: Any = None
    num_buffers: int = 2
    sync_every: int = 1
    max_staleness: int | None = None
    stale: StalePolicy = "wait"
    steps_per_batch: int | None = None
    jit: bool = True
    join_timeout: float = 30.0
    init: Callable[[jax.Array, int], tuple[PyTree, list[PyTree]]] | None = None
    default_num_batches: int | None = None
    learn_queue_cap: int = 1
    combine: Callable[[tuple[PyTree, ...]], PyTree] | None = None
    step_metrics: StepMetrics | None = None
    observers: tuple[StepObserver, ...] = ()
    batch_view: Callable[[PyTree], Batch] | None = None

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        for name in ("collect", "learn", "publish"):
            _check_callable(name, getattr(self, name), optional=False)
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        put("actor_devices", _actor_devices(self.actor_devices))
        put("learner_device", _learner_device(self.learner_device, self.actor_devices))
        put("num_buffers", check_int("num_buffers", self.num_buffers, 1))
        put("sync_every", check_int("sync_every", self.sync_every, 1))
        put("max_staleness", _max_staleness(self.max_staleness, self.stale, self.sync_every))
        put("steps_per_batch", _positive_or_none("steps_per_batch", self.steps_per_batch))
        if not isinstance(self.jit, bool):
            raise TypeError(f"jit must be a bool, got {self.jit!r}")
        put("join_timeout", _join_timeout(self.join_timeout))
        _check_callable("init", self.init)
        default_num_batches = _positive_or_none("default_num_batches", self.default_num_batches)
        put("default_num_batches", default_num_batches)
        put("learn_queue_cap", self._queue_cap())
        put("observers", _hook(self.step_metrics, self.observers, self.batch_view))

    @property
    def num_actors(self) -> int:
        """The number of actors (one per entry of ``actor_devices``)."""
        return len(self.actor_devices)

    def _queue_cap(self) -> int:
        """``learn_queue_cap`` (and ``combine``) checked against the other options."""
        cap = check_int("learn_queue_cap", self.learn_queue_cap, 1)
        _check_callable("combine", self.combine)
        buffers = self.num_actors * self.num_buffers
        if cap > buffers:
            raise ValueError(
                f"learn_queue_cap ({cap}) must be <= num_actors * num_buffers ({buffers}): "
                "the actors could not hold the batches of one update at once"
            )
        if cap > 1 and self.stale == "drop":
            raise ValueError(
                "learn_queue_cap > 1 needs stale='wait' (a dropped part would "
                "change the shape of the update)"
            )
        k, s = self.sync_every, self.max_staleness
        if cap > 1 and s is not None and s < cap * k - 1:
            raise ValueError(
                f"max_staleness ({s}) must be >= learn_queue_cap * sync_every - 1 "
                f"({cap * k - 1}): a version is published every {cap * k} "
                "batches, so the run would stall"
            )
        return cap


def driver_options(
    factory: str, collect: Any, learn: Any, publish: Any, options: Mapping[str, Any]
) -> DriverOptions:
    """The [`DriverOptions`][jaxsample.driver.DriverOptions] of a factory's three
    functions and keyword ``options`` (a ``TypeError`` naming ``factory`` for an
    unknown keyword)."""
    known = {f.name for f in dataclasses.fields(DriverOptions)}
    for name in options:
        if name not in known - {"collect", "learn", "publish"}:
            raise TypeError(f"{factory}() got an unexpected keyword argument {name!r}")
    return DriverOptions(collect, learn, publish, **options)


def _check_callable(name: str, value: Any, optional: bool = True) -> None:
    if not (optional and value is None) and not callable(value):
        raise TypeError(f"{name} must be callable, got {value!r}")


def _positive_or_none(name: str, value: Any) -> int | None:
    return None if value is None else check_int(name, value, 1)


def _actor_devices(devices: Any) -> tuple[jax.Device, ...]:
    """``actor_devices`` as a tuple of devices (default ``(jax.devices()[0],)``)."""
    if devices is None:
        devices = (jax.devices()[0],)
    if isinstance(devices, jax.Device) or not isinstance(devices, (list, tuple)):
        raise TypeError(f"actor_devices must be a list of jax.Device, got {devices!r}")
    if not devices:
        raise ValueError("actor_devices must not be empty")
    for a, dev in enumerate(devices):
        if not isinstance(dev, jax.Device):
            raise TypeError(
                f"actor_devices[{a}] must be a jax.Device (e.g. jax.devices()[0]), got {dev!r}"
            )
    return tuple(devices)


def _learner_device(device: Any, actor_devices: tuple[jax.Device, ...]) -> Any:
    """``learner_device``, default the first device no actor uses, else the first actor's."""
    if device is None:
        others = [dev for dev in jax.devices() if dev not in actor_devices]
        return others[0] if others else actor_devices[0]
    if not isinstance(device, (jax.Device, jax.sharding.Sharding)):
        raise TypeError(
            f"learner_device must be a jax.Device or a jax.sharding.Sharding, got {device!r}"
        )
    return device


def _max_staleness(max_staleness: Any, stale: Any, sync_every: int) -> int | None:
    """``max_staleness`` checked with ``stale`` and ``sync_every`` (a run that
    would stall fails here)."""
    if stale not in STALE_POLICIES:
        raise ValueError(f"stale must be one of {STALE_POLICIES}, got {stale!r}")
    if max_staleness is None:
        if stale == "drop":
            raise ValueError("stale='drop' needs a max_staleness")
        return None
    max_staleness = check_int("max_staleness", max_staleness, 0)
    if max_staleness < sync_every - 1:
        # "wait": an actor would wait for a version never published; "drop":
        # after max_staleness + 1 batches every batch is too stale, none is
        # learned, so no version is ever published again (a silent stall).
        raise ValueError(
            f"max_staleness ({max_staleness}) must be >= sync_every - 1 ({sync_every - 1}): "
            f"parameters are published only every {sync_every} learned batches, so with "
            f"stale={stale!r} the run would stall"
        )
    return max_staleness


def _join_timeout(join_timeout: Any) -> float:
    if isinstance(join_timeout, bool) or not isinstance(join_timeout, (int, float)):
        raise TypeError(f"join_timeout must be a number of seconds, got {join_timeout!r}")
    if not join_timeout > 0:
        raise ValueError(f"join_timeout must be > 0, got {join_timeout}")
    return float(join_timeout)


def _hook(step_metrics: Any, observers: Any, batch_view: Any) -> tuple[StepObserver, ...]:
    """The step-metrics hook's options checked; returns ``observers`` as a tuple."""
    if step_metrics is not None and not isinstance(step_metrics, StepMetrics):
        raise TypeError(f"step_metrics must be a StepMetrics (or None), got {step_metrics!r}")
    if isinstance(observers, StepObserver) or not isinstance(observers, (list, tuple)):
        raise TypeError(f"observers must be a list of StepObserver, got {observers!r}")
    for n, o in enumerate(observers):
        if not isinstance(o, StepObserver):
            raise TypeError(
                f"observers[{n}] must be a StepObserver (jaxsample.metrics.make_step_observer), "
                f"got {o!r}"
            )
    _check_callable("batch_view", batch_view)
    return tuple(observers)

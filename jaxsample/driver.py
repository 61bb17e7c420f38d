"""Actor/learner drivers: collection and learning on separate devices, overlapped.

rlpyt's asynchronous samplers and ALF's ``AsyncOffPolicyDriver`` collect while
the learner trains. This is the JAX form: :func:`make_driver` takes three pure
functions,

* ``collect(actor_state, params, index) -> (actor_state, batch)``, run by an
  actor on its device with the newest parameters it has been given (``index``
  is the batch's global position, an int32 scalar: e.g. what DQN's epsilon
  schedule follows);
* ``learn(learner_state, batch) -> (learner_state, metrics)``, run on the
  learner device once per consumed batch;
* ``publish(learner_state) -> params``, what the actors act with,

and runs them. ``mode="async"``: one host thread per actor device runs the
jitted ``collect`` back to back, moves each finished batch to the learner
device (``jax.device_put``) and hands it over; the caller's thread runs the
jitted ``learn`` and publishes parameters every ``sync_every`` learned batches.
``mode="sync"``: the same functions, devices and version schedule, in one
thread, bit for bit deterministic (for debugging).

**Versions and staleness.** The parameters' version is the number of batches
the learner had learned when it published them (the initial parameters are
version 0, then ``sync_every``, ``2 * sync_every``, ...). Every batch records
the version it was collected with; its staleness is the number of batches the
learner had learned when it took the batch, minus that version (0: collected
with the parameters being trained; PPO's plain loop). With
``max_staleness=s`` an actor does not start batch ``i`` before version
``i - s`` is published (``stale="wait"``: nothing is thrown away), or the
learner drops batches staler than ``s`` (``stale="drop"``).

**Bounded memory.** Batches are numbered ``0, 1, ...`` and dealt round-robin to
the actors (batch ``i`` is actor ``i % num_actors``'s); the learner takes them
in that order, each exactly once. An actor holds at most ``num_buffers``
batches at a time (default 2: rlpyt's double buffer), counting the one it is
collecting: it starts batch ``i`` only once the learner has finished with
batch ``i - num_actors * num_buffers``. A slow learner back-pressures the
actors; nothing queues without limit. With one actor and two buffers an actor
collects batch ``i`` while the learner learns batch ``i - 1``, so batches are
at most ``sync_every`` versions stale (one-step stale by default, as IMPALA).

**The sync schedule.** ``mode="sync"`` runs what the async mode runs when the
actors are as far ahead as the buffers and ``max_staleness`` allow: before
collecting batch ``i`` the learner learns exactly the batches it must (to free
a buffer and to publish the version ``max_staleness`` asks for), no more. So it
has the async mode's worst-case staleness, and with ``num_buffers=1`` it is the
plain loop ``collect(version i); learn`` (PPO's and DQN's ``Trainer.iteration``).

**Reproducibility.** Collection depends only on the actor's state, the
parameters of the version it was given and the batch index. An async run
records every batch's version (:attr:`DriverResult.records`), so its batches
can be recollected exactly from the initial actor states and the published
parameters; which version a batch gets depends on timing.

Adapters: :func:`ppo_driver` (on-policy PPO on one-step-stale batches whose
log-probabilities and values the learner re-evaluates; no V-trace) and
:func:`dqn_driver` (off-policy DQN: batches go into the replay buffer on the
learner, the replay ratio is the trainer's and is held exactly, epsilon follows
the batch index).

Jitting: the driver runs compiled programs from host threads, so it jits the
functions it is given (``jax.jit``, donating the actor and learner states;
it copies the states you pass first, so yours stay valid). Pass ``jit=False``
to call them as they are (already jitted, or eagerly).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsample._checks import check_int as _check_int

__all__ = [
    "BatchInfo",
    "Driver",
    "DriverResult",
    "dqn_driver",
    "make_driver",
    "ppo_driver",
    "refresh_behaviour",
]

PyTree = Any
Mode = Literal["async", "sync"]
StalePolicy = Literal["wait", "drop"]
MODES = ("async", "sync")
STALE_POLICIES = ("wait", "drop")
THREAD_PREFIX = "jaxsample-actor"
_POLL_S = 0.05  # how often waiting threads re-check for errors and stops


class BatchInfo(NamedTuple):
    """What the driver knows about one batch (host values).

    Attributes:
      index: the batch's global position (``0 .. num_batches - 1``).
      actor: the actor that collected it (``index % num_actors``).
      version: the parameter version it was collected with.
      staleness: batches the learner had learned when it took the batch, minus
        ``version``.
      learned: False if the learner dropped it (``stale="drop"``).
      learner_updates: batches learned after this one was taken.
    """

    index: int
    actor: int
    version: int
    staleness: int
    learned: bool
    learner_updates: int


@dataclasses.dataclass
class DriverResult:
    """What :meth:`Driver.run` returns.

    Attributes:
      learner_state: the final learner state (on the learner device).
      actor_states: the final state of each actor (on its device).
      metrics: ``learn``'s metrics of every learned batch, on the host, stacked
        along a new leading axis (``[num_learned, ...]``); None if none was
        learned.
      records: ``[num_batches]`` numpy arrays ``index``, ``actor``,
        ``version``, ``staleness``, ``learned`` (bool), ``learner_updates``, in
        the order the learner took the batches (= index order).
      published: the versions published, in order (``0`` first).
      max_in_flight: per actor, the most batches it held at once (collecting,
        queued or being learned); at most ``num_buffers``.
      env_steps: ``steps_per_batch`` times the learned batches (None without
        ``steps_per_batch``).
      wall_seconds: the run's wall time (compilation on first use included).
      collect_seconds: per actor, time in ``collect`` and the transfer.
      actor_wait_seconds: per actor, time waiting for a free buffer or a fresh
        enough version (back-pressure).
      learn_seconds: time in ``learn`` and publishing.
      learner_wait_seconds: time the learner waited for a batch (starved).
    """

    learner_state: PyTree
    actor_states: list[PyTree]
    metrics: PyTree | None
    records: dict[str, np.ndarray]
    published: list[int]
    max_in_flight: list[int]
    env_steps: int | None
    wall_seconds: float
    collect_seconds: list[float]
    actor_wait_seconds: list[float]
    learn_seconds: float
    learner_wait_seconds: float

    @property
    def num_learned(self) -> int:
        """Batches learned."""
        return int(np.sum(self.records["learned"]))

    @property
    def num_dropped(self) -> int:
        """Batches dropped for staleness (``stale="drop"``)."""
        return int(np.sum(~self.records["learned"]))

    @property
    def staleness_max(self) -> int:
        """The largest staleness of a learned batch (0 if none)."""
        s = self.records["staleness"][self.records["learned"]]
        return int(s.max()) if s.size else 0


class _Item(NamedTuple):
    batch: PyTree
    version: int
    actor: int


class _Shared:
    """State shared by the actor threads and the learner, under one condition."""

    def __init__(self, num_actors: int) -> None:
        self.cond = threading.Condition()
        self.ready: dict[int, _Item] = {}
        self.released = 0  # batches 0 .. released-1 are done with (learned or dropped)
        self.version = 0
        self.params: list[PyTree] = [None] * num_actors
        self.error: BaseException | None = None
        self.stop = False
        self.in_flight = [0] * num_actors
        self.max_in_flight = [0] * num_actors
        self.actor_states: list[PyTree] = [None] * num_actors
        self.collect_s = [0.0] * num_actors
        self.wait_s = [0.0] * num_actors

    def fail(self, error: BaseException) -> None:
        with self.cond:
            if self.error is None:
                self.error = error
            self.stop = True
            self.cond.notify_all()


@dataclasses.dataclass(frozen=True, eq=False)
class Driver:
    """An actor/learner driver; build it with :func:`make_driver` (or an adapter).

    Attributes are the validated arguments of :func:`make_driver`; ``init``
    (set by the adapters) is ``init(key, num_actors) -> (learner_state,
    actor_states)``.
    """

    collect: Callable[..., tuple[PyTree, PyTree]]
    learn: Callable[..., tuple[PyTree, PyTree]]
    publish: Callable[[PyTree], PyTree]
    mode: Mode
    actor_devices: tuple[jax.Device, ...]
    learner_device: Any
    num_buffers: int
    sync_every: int
    max_staleness: int | None
    stale: StalePolicy
    steps_per_batch: int | None
    jit: bool
    join_timeout: float
    init: Callable[[jax.Array, int], tuple[PyTree, list[PyTree]]] | None = None
    default_num_batches: int | None = None
    _collect: Callable[..., Any] = dataclasses.field(default=None, repr=False)
    _learn: Callable[..., Any] = dataclasses.field(default=None, repr=False)

    @property
    def num_actors(self) -> int:
        """The number of actors (one per entry of ``actor_devices``)."""
        return len(self.actor_devices)

    def replace(self, **changes: Any) -> Driver:
        """A driver with some :func:`make_driver` arguments changed (e.g. ``mode``)."""
        args = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if not f.name.startswith("_")
        }
        unknown = set(changes) - set(args)
        if unknown:
            raise ValueError(f"unknown driver arguments {sorted(unknown)}")
        args.update(changes)
        return make_driver(**args)

    def train(
        self,
        key: jax.Array,
        num_batches: int | None = None,
        *,
        callback: Callable[[BatchInfo, PyTree], None] | None = None,
    ) -> DriverResult:
        """``run(*init(key, num_actors), num_batches)``; ``num_batches``
        defaults to the adapter's (the trainer's full run)."""
        if self.init is None:
            raise ValueError("this driver has no init: call run(learner_state, actor_states, n)")
        if num_batches is None:
            if self.default_num_batches is None:
                raise ValueError("num_batches is required for this driver")
            num_batches = self.default_num_batches
        learner_state, actor_states = self.init(key, self.num_actors)
        return self.run(learner_state, actor_states, num_batches, callback=callback)

    # ------------------------------------------------------------------ run
    def run(
        self,
        learner_state: PyTree,
        actor_states: Sequence[PyTree],
        num_batches: int,
        *,
        callback: Callable[[BatchInfo, PyTree], None] | None = None,
    ) -> DriverResult:
        """Collect ``num_batches`` batches and learn each once (or drop it).

        Args:
          learner_state: the learner's state; copied to the learner device.
          actor_states: one state per actor device (a list, even for one),
            copied to its device.
          num_batches: batches to collect (each learned once, or dropped if
            ``stale="drop"``).
          callback: called on the host, in the caller's thread, after each batch
            the learner takes, with its :class:`BatchInfo` and its metrics on
            the host (None for a dropped batch).

        Returns:
          A :class:`DriverResult`. An exception in an actor, in ``learn`` or in
          ``callback`` stops every thread and is re-raised here (the original
          exception object, with its traceback).
        """
        _check_int("num_batches", num_batches, 1)
        if not isinstance(actor_states, (list, tuple)):
            raise TypeError(
                f"actor_states must be a list with one state per actor device "
                f"({self.num_actors}), got {type(actor_states).__name__}"
            )
        if len(actor_states) != self.num_actors:
            raise ValueError(
                f"actor_states must have one state per actor device ({self.num_actors}), "
                f"got {len(actor_states)}"
            )
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable, got {callback!r}")
        run = _Run(self, int(num_batches), callback)
        return run.execute(learner_state, list(actor_states))


class _Run:
    """One :meth:`Driver.run`: the learner (caller's thread) and the actors."""

    def __init__(self, driver: Driver, num_batches: int, callback: Any) -> None:
        self.d = driver
        self.n = num_batches
        self.callback = callback
        self.shared = _Shared(driver.num_actors)
        self.learned = 0
        self.records: list[BatchInfo] = []
        self.metrics: list[PyTree] = []
        self.published: list[int] = []
        self.learn_s = 0.0
        self.learner_wait_s = 0.0

    # -- schedule ----------------------------------------------------------
    def _may_start(self, i: int) -> bool:
        """Whether batch ``i`` may be collected now (call under the lock)."""
        d, sh = self.d, self.shared
        if sh.released < i - d.num_actors * d.num_buffers + 1:
            return False
        return not (
            d.stale == "wait" and d.max_staleness is not None and sh.version < i - d.max_staleness
        )

    def _needed_before(self, i: int) -> int:
        """Sync mode: batches the learner must have taken before batch ``i`` is
        collected (to free a buffer and, with ``stale="wait"``, to publish a
        fresh enough version)."""
        d = self.d
        need = max(0, i - d.num_actors * d.num_buffers + 1)
        if d.stale == "wait" and d.max_staleness is not None and i - d.max_staleness > 0:
            k = d.sync_every
            need = max(need, k * math.ceil((i - d.max_staleness) / k))
        return need

    # -- pieces --------------------------------------------------------------
    def _publish(self, state: PyTree) -> None:
        params = self.d.publish(state)
        copies = [jax.device_put(params, dev, may_alias=False) for dev in self.d.actor_devices]
        jax.block_until_ready(copies)  # before the next learn donates the state
        with self.shared.cond:
            self.shared.version = self.learned
            self.shared.params = copies
            self.shared.cond.notify_all()
        self.published.append(self.learned)

    def _collect_one(self, a: int, i: int, state: PyTree) -> PyTree:
        """Collect batch ``i`` on actor ``a`` and hand it to the learner; returns
        the actor's new state. Waits are done by the caller."""
        sh = self.shared
        with sh.cond:
            params, version = sh.params[a], sh.version
            sh.in_flight[a] += 1
            sh.max_in_flight[a] = max(sh.max_in_flight[a], sh.in_flight[a])
        t0 = time.perf_counter()
        state, batch = self.d._collect(state, params, np.int32(i))
        batch = jax.device_put(batch, self.d.learner_device)
        jax.block_until_ready(batch)
        sh.collect_s[a] += time.perf_counter() - t0
        with sh.cond:
            sh.ready[i] = _Item(batch, version, a)
            sh.cond.notify_all()
        return state

    def _learn_one(self, state: PyTree, i: int) -> PyTree:
        """Take batch ``i`` (it must be ready) and learn it or drop it."""
        d, sh = self.d, self.shared
        with sh.cond:
            item = sh.ready.pop(i)
        staleness = self.learned - item.version
        learn = not (d.stale == "drop" and staleness > d.max_staleness)
        if d.stale == "wait" and d.max_staleness is not None and staleness > d.max_staleness:
            raise RuntimeError(  # the schedule makes this impossible
                f"internal error: batch {i} is {staleness} versions stale "
                f"(max_staleness={d.max_staleness})"
            )
        metrics = None
        t0 = time.perf_counter()
        batch, item = item.batch, item._replace(batch=None)
        if learn:
            state, metrics = d._learn(state, batch)
            jax.block_until_ready((state, metrics))
            metrics = jax.device_get(metrics)
            self.learned += 1
            if self.learned % d.sync_every == 0:
                self._publish(state)
            self.metrics.append(metrics)
        del batch
        with sh.cond:
            sh.released = i + 1
            sh.in_flight[i % d.num_actors] -= 1
            sh.cond.notify_all()
        self.learn_s += time.perf_counter() - t0
        info = BatchInfo(i, item.actor, item.version, staleness, learn, self.learned)
        self.records.append(info)
        if self.callback is not None:
            self.callback(info, metrics)
        return state

    # -- modes ---------------------------------------------------------------
    def execute(self, learner_state: PyTree, actor_states: list[PyTree]) -> DriverResult:
        d = self.d
        t_start = time.perf_counter()
        learner_state = jax.device_put(learner_state, d.learner_device, may_alias=False)
        actor_states = [
            jax.device_put(s, dev, may_alias=False)
            for s, dev in zip(actor_states, d.actor_devices, strict=True)
        ]
        self._publish(learner_state)
        if d.mode == "sync":
            learner_state = self._run_sync(learner_state, actor_states)
        else:
            learner_state = self._run_async(learner_state, actor_states)
        wall = time.perf_counter() - t_start
        sh = self.shared
        metrics = None
        if self.metrics:
            metrics = jax.tree.map(lambda *xs: np.stack(xs), *self.metrics)
        fields = BatchInfo._fields
        records = {
            f: np.asarray(
                [getattr(r, f) for r in self.records], bool if f == "learned" else np.int64
            )
            for f in fields
        }
        return DriverResult(
            learner_state=learner_state,
            actor_states=list(sh.actor_states),
            metrics=metrics,
            records=records,
            published=list(self.published),
            max_in_flight=list(sh.max_in_flight),
            env_steps=None if d.steps_per_batch is None else d.steps_per_batch * self.learned,
            wall_seconds=wall,
            collect_seconds=list(sh.collect_s),
            actor_wait_seconds=list(sh.wait_s),
            learn_seconds=self.learn_s,
            learner_wait_seconds=self.learner_wait_s,
        )

    def _run_sync(self, learner_state: PyTree, actor_states: list[PyTree]) -> PyTree:
        d, sh = self.d, self.shared
        taken = 0
        for i in range(self.n):
            while taken < self._needed_before(i):
                learner_state = self._learn_one(learner_state, taken)
                taken += 1
            a = i % d.num_actors
            actor_states[a] = self._collect_one(a, i, actor_states[a])
        while taken < self.n:
            learner_state = self._learn_one(learner_state, taken)
            taken += 1
        sh.actor_states = actor_states
        return learner_state

    def _run_async(self, learner_state: PyTree, actor_states: list[PyTree]) -> PyTree:
        d, sh = self.d, self.shared
        threads = [
            threading.Thread(
                target=self._actor_loop,
                args=(a, actor_states[a]),
                name=f"{THREAD_PREFIX}-{a}",
                daemon=True,
            )
            for a in range(d.num_actors)
        ]
        actor_states.clear()  # the threads own them now
        try:
            for t in threads:
                t.start()
            for i in range(self.n):
                t0 = time.perf_counter()
                with sh.cond:
                    while i not in sh.ready and sh.error is None:
                        sh.cond.wait(_POLL_S)
                    if sh.error is not None:
                        raise sh.error
                self.learner_wait_s += time.perf_counter() - t0
                learner_state = self._learn_one(learner_state, i)
        except BaseException as e:
            sh.fail(e)
            stuck = self._join(threads, raising=False)
            if stuck and hasattr(e, "add_note"):
                e.add_note(stuck)
            raise
        self._join(threads, raising=True)
        return learner_state

    def _actor_loop(self, a: int, state: PyTree) -> None:
        d, sh = self.d, self.shared
        try:
            for i in range(a, self.n, d.num_actors):
                t0 = time.perf_counter()
                with sh.cond:
                    while not sh.stop and not self._may_start(i):
                        sh.cond.wait(_POLL_S)
                    if sh.stop:
                        return
                sh.wait_s[a] += time.perf_counter() - t0
                state = self._collect_one(a, i, state)
            sh.actor_states[a] = state
        except BaseException as e:
            sh.fail(e)

    def _join(self, threads: list[threading.Thread], raising: bool) -> str:
        """Stop and join the actors; returns a message naming any still alive."""
        sh = self.shared
        with sh.cond:
            sh.stop = True
            sh.cond.notify_all()
        deadline = time.monotonic() + self.d.join_timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in threads if t.is_alive()]
        with sh.cond:
            sh.ready.clear()
        if raising and sh.error is not None:
            raise sh.error
        message = ""
        if alive:
            message = (
                f"actor threads {alive} did not stop within join_timeout="
                f"{self.d.join_timeout} s (stuck in a device call?)"
            )
            if raising:
                raise RuntimeError(message)
        return message


# ----------------------------------------------------------------------------
# Factory
# ----------------------------------------------------------------------------


def _check_device(name: str, value: Any) -> None:
    if not isinstance(value, jax.Device):
        raise TypeError(f"{name} must be a jax.Device (e.g. jax.devices()[0]), got {value!r}")


def make_driver(
    collect: Callable[[PyTree, PyTree, jax.Array], tuple[PyTree, PyTree]],
    learn: Callable[[PyTree, PyTree], tuple[PyTree, PyTree]],
    publish: Callable[[PyTree], PyTree],
    *,
    mode: Mode = "async",
    actor_devices: Sequence[jax.Device] | None = None,
    learner_device: Any = None,
    num_buffers: int = 2,
    sync_every: int = 1,
    max_staleness: int | None = None,
    stale: StalePolicy = "wait",
    steps_per_batch: int | None = None,
    jit: bool = True,
    join_timeout: float = 30.0,
    init: Callable[[jax.Array, int], tuple[PyTree, list[PyTree]]] | None = None,
    default_num_batches: int | None = None,
) -> Driver:
    """Build an actor/learner :class:`Driver` (see the module docstring).

    Args:
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
        versions a learned batch may be behind; with ``stale="wait"`` it must
        be ``>= sync_every - 1`` (else an actor could wait for a version that
        is never published).
      stale: ``"wait"`` (an actor waits until its batch cannot be too stale) or
        ``"drop"`` (the learner drops batches staler than ``max_staleness``).
      steps_per_batch: environment steps in one batch, for
        :attr:`DriverResult.env_steps`.
      jit: jit ``collect`` and ``learn`` (donating the states); False calls
        them as given.
      join_timeout: seconds to wait for the actor threads to stop at the end
        or after an error.
      init, default_num_batches: set by the adapters (:meth:`Driver.train`).
    """
    for name, fn in (("collect", collect), ("learn", learn), ("publish", publish)):
        if not callable(fn):
            raise TypeError(f"{name} must be callable, got {fn!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if actor_devices is None:
        actor_devices = (jax.devices()[0],)
    if isinstance(actor_devices, jax.Device) or not isinstance(actor_devices, (list, tuple)):
        raise TypeError(f"actor_devices must be a list of jax.Device, got {actor_devices!r}")
    if not actor_devices:
        raise ValueError("actor_devices must not be empty")
    for a, dev in enumerate(actor_devices):
        _check_device(f"actor_devices[{a}]", dev)
    actor_devices = tuple(actor_devices)
    if learner_device is None:
        others = [dev for dev in jax.devices() if dev not in actor_devices]
        learner_device = others[0] if others else actor_devices[0]
    elif not isinstance(learner_device, (jax.Device, jax.sharding.Sharding)):
        raise TypeError(
            "learner_device must be a jax.Device or a jax.sharding.Sharding, "
            f"got {learner_device!r}"
        )
    num_buffers = _check_int("num_buffers", num_buffers, 1)
    sync_every = _check_int("sync_every", sync_every, 1)
    if stale not in STALE_POLICIES:
        raise ValueError(f"stale must be one of {STALE_POLICIES}, got {stale!r}")
    if max_staleness is not None:
        max_staleness = _check_int("max_staleness", max_staleness, 0)
        if stale == "wait" and max_staleness < sync_every - 1:
            raise ValueError(
                f"max_staleness ({max_staleness}) must be >= sync_every - 1 ({sync_every - 1}) "
                f"with stale='wait': parameters are published only every {sync_every} batches"
            )
    elif stale == "drop":
        raise ValueError("stale='drop' needs a max_staleness")
    if steps_per_batch is not None:
        steps_per_batch = _check_int("steps_per_batch", steps_per_batch, 1)
    if not isinstance(jit, bool):
        raise TypeError(f"jit must be a bool, got {jit!r}")
    if isinstance(join_timeout, bool) or not isinstance(join_timeout, (int, float)):
        raise TypeError(f"join_timeout must be a number of seconds, got {join_timeout!r}")
    if not join_timeout > 0:
        raise ValueError(f"join_timeout must be > 0, got {join_timeout}")
    if init is not None and not callable(init):
        raise TypeError(f"init must be callable, got {init!r}")
    if default_num_batches is not None:
        default_num_batches = _check_int("default_num_batches", default_num_batches, 1)
    return Driver(
        collect=collect,
        learn=learn,
        publish=publish,
        mode=mode,
        actor_devices=actor_devices,
        learner_device=learner_device,
        num_buffers=num_buffers,
        sync_every=sync_every,
        max_staleness=max_staleness,
        stale=stale,
        steps_per_batch=steps_per_batch,
        jit=jit,
        join_timeout=float(join_timeout),
        init=init,
        default_num_batches=default_num_batches,
        _collect=jax.jit(collect, donate_argnums=0) if jit else collect,
        _learn=jax.jit(learn, donate_argnums=0) if jit else learn,
    )


# ----------------------------------------------------------------------------
# Adapters for the reference trainers
# ----------------------------------------------------------------------------


# Extra actors' sampler keys are fold_in(fold_in(key, ACTOR_KEY_TAG), a): not
# fold_in(key, a), which equals split(key, n)[a] under JAX's partitionable
# threefry, i.e. the very key trainer.init gives its own sampler.
ACTOR_KEY_TAG = 0x61637472  # "actr"


def _actor_states(trainer: Any, key: jax.Array, first: PyTree, params: PyTree, n: int) -> list:
    """Actor 0 continues the trainer's own sampler state; actor ``a > 0`` starts
    the same envs (same ranks) from ``fold_in(fold_in(key, ACTOR_KEY_TAG), a)``."""
    base = jax.random.fold_in(key, ACTOR_KEY_TAG)
    states = [first]
    for a in range(1, n):
        states.append(trainer.sampler.init(jax.random.fold_in(base, a), params))
    return states


def refresh_behaviour(trainer: Any, params: PyTree, batch: Any) -> Any:
    """``batch`` with its log-probabilities, values and bootstrap values
    re-evaluated under ``params`` (a PPO ``Trainer``'s agent; leaves ``[T, B]``).

    ``agent_info.log_prob`` and ``agent_info.value`` become those of the
    batch's actions and inputs under ``params`` (``agent.evaluate``, or
    ``agent.evaluate_sequence`` from ``samples.agent.initial_state`` with the
    sampler's resets for a recurrent agent), and ``samples.bootstrap_value``
    becomes ``ppo.final_values(...)[T - 1]``, the value under ``params`` of the
    inputs after the last step (what GAE reads there when that step is not
    done). ``dist_params`` is left as collected (PPO does not read it).
    """
    from jaxsample.algos.ppo import final_values
    from jaxsample.types import AgentInputs

    samples = batch.samples
    env, ag = samples.env, samples.agent
    inputs = AgentInputs(env.observation, ag.prev_action, env.prev_reward)
    if trainer.config.recurrent:
        reset = jnp.concatenate([jnp.zeros_like(env.done[:1]), env.done[:-1]], axis=0)
        evaluate = jax.vmap(trainer.agent.evaluate_sequence, in_axes=(None, 1, 0, 1, 1), out_axes=1)
        log_prob, _, value = evaluate(params, inputs, ag.initial_state, reset, ag.action)
    else:
        step = jax.vmap(trainer.agent.evaluate, in_axes=(None, 0, 0))
        log_prob, _, value = jax.vmap(step, in_axes=(None, 0, 0))(params, inputs, ag.action)
    info = ag.agent_info._replace(
        log_prob=log_prob.astype(ag.agent_info.log_prob.dtype),
        value=value.astype(ag.agent_info.value.dtype),
    )
    bootstrap = final_values(trainer.agent, params, samples)[-1]
    samples = samples.replace(
        agent=ag.replace(agent_info=info),
        bootstrap_value=bootstrap.astype(samples.bootstrap_value.dtype),
    )
    return batch.replace(samples=samples)


def ppo_driver(trainer: Any, *, refresh: bool = True, **driver_kwargs: Any) -> Driver:
    """A :class:`Driver` for a PPO ``Trainer`` (:func:`jaxsample.algos.ppo.make_train`).

    On-policy with bounded staleness (IMPALA's setting, with PPO's clip in
    place of V-trace): the learner runs ``trainer.learn`` (GAE,
    ``update_epochs`` x ``num_minibatches`` clipped-PPO steps) on each batch.
    With ``refresh`` (default) it first re-evaluates the batch's
    log-probabilities, values and bootstrap values under its current
    parameters (:func:`refresh_behaviour`): PPO's ratio and value clip are
    then taken around the policy being trained (decoupled PPO's proximal
    policy, without its behaviour importance weight) and GAE uses one critic.
    Without ``refresh`` the ratio is against the behaviour policy the batch
    was collected with and GAE mixes the behaviour critic's values with the
    learner's; on one-step-stale CartPole batches that ended at a mean return
    of 440 over 8 seeds against 500 with ``refresh`` (and 500 synchronously).
    With staleness 0 the refreshed values equal the collected ones up to float
    rounding; ``refresh=False, mode="sync", num_buffers=1`` reproduces
    ``trainer.run`` bit for bit.

    Defaults: two buffers, publish every batch, ``max_staleness=sync_every``
    (one publication stale). The learning-rate annealing follows the
    learner's batch count.

    ``init(key, num_actors)``: the learner state is ``trainer.init(key)``; actor 0 starts
    from its ``sampler_state`` (so ``mode="sync", num_buffers=1`` reproduces
    ``trainer.run``), actor ``a > 0`` from its own ``sampler.init`` key (see
    ``ACTOR_KEY_TAG``).
    The learner state's own ``sampler_state`` is carried along unused.
    ``train(key)`` runs ``trainer.num_iterations`` batches.
    """
    if not (hasattr(trainer, "learn") and hasattr(trainer, "sampler")):
        raise TypeError(f"trainer must be a ppo.Trainer, got {type(trainer).__name__}")
    if not isinstance(refresh, bool):
        raise TypeError(f"refresh must be a bool, got {refresh!r}")
    kwargs = {"max_staleness": driver_kwargs.get("sync_every", 1), **driver_kwargs}

    def collect(sampler_state: PyTree, params: PyTree, index: jax.Array):
        del index
        return trainer.sampler.collect(sampler_state, params)

    def learn(state: PyTree, batch: PyTree):
        return trainer.learn(state, refresh_behaviour(trainer, state.params, batch))

    def init(key: jax.Array, num_actors: int) -> tuple[PyTree, list[PyTree]]:
        state = trainer.init(key)
        actors = _actor_states(trainer, key, state.sampler_state, state.params, num_actors)
        return state, actors

    return make_driver(
        collect,
        learn if refresh else trainer.learn,
        lambda state: state.params,
        steps_per_batch=trainer.config.batch_size,
        init=init,
        default_num_batches=trainer.num_iterations,
        **kwargs,
    )


def dqn_driver(trainer: Any, *, iterations_per_batch: int = 1, **driver_kwargs: Any) -> Driver:
    """A :class:`Driver` for a DQN ``Trainer`` (:func:`jaxsample.algos.dqn.make_train`).

    One driver batch is ``iterations_per_batch`` (``K``) DQN iterations: the
    actor collects ``K`` ``[num_steps, num_envs]`` batches in one program
    (leaves ``[K, T, B, ...]``), and the learner runs ``trainer.learn`` on
    each in turn: add to the replay buffer (on the learner device), the
    ``gradient_steps`` gradient steps once ``learning_starts`` steps are in,
    the target update. Larger ``K`` amortizes the per-batch host work (DQN's
    iterations are 10 env steps by default) at the cost of acting with
    parameters up to ``K`` iterations older.

    Replay ratio: ``gradient_steps / (num_envs * num_steps)`` updates per
    collected step once learning has started (0.1 by default), held exactly:
    every batch is learned exactly once and a slow learner stops the actor, so
    the learner's ``updates`` metric equals what the synchronous loop does
    after the same number of steps, whatever the timing.

    Epsilon follows the batch index, not the learner: iteration ``index * K + j``
    acts with ``trainer.decay(index * K + j)``, exactly the synchronous
    schedule, so an actor's stream is a function of its network versions alone.

    ``init(key, num_actors)``: as :func:`ppo_driver`'s (``trainer.init(key)``; actor 0
    continues its sampler state). ``train(key)`` runs ``num_iterations // K``
    batches. Defaults: two buffers, publish every batch,
    ``max_staleness=sync_every``.
    """
    if not (hasattr(trainer, "learn") and hasattr(trainer, "decay")):
        raise TypeError(f"trainer must be a dqn.Trainer, got {type(trainer).__name__}")
    K = _check_int("iterations_per_batch", iterations_per_batch, 1)
    if trainer.num_iterations < K:
        raise ValueError(
            f"iterations_per_batch ({K}) must be <= the trainer's num_iterations "
            f"({trainer.num_iterations})"
        )
    kwargs = {"max_staleness": driver_kwargs.get("sync_every", 1), **driver_kwargs}

    def collect(sampler_state: PyTree, params: PyTree, index: jax.Array):
        def one(s: PyTree, j: jax.Array):
            acting = params.replace(decay=trainer.decay(index * K + j))
            return trainer.sampler.collect(s, acting)

        return jax.lax.scan(one, sampler_state, jnp.arange(K, dtype=jnp.int32))

    def learn(state: PyTree, batches: PyTree):
        return jax.lax.scan(trainer.learn, state, batches)

    def init(key: jax.Array, num_actors: int) -> tuple[PyTree, list[PyTree]]:
        state = trainer.init(key)
        actors = _actor_states(trainer, key, state.sampler_state, state.params, num_actors)
        return state, actors

    return make_driver(
        collect,
        learn,
        lambda state: state.params,
        steps_per_batch=K * trainer.config.steps_per_iteration,
        init=init,
        default_num_batches=trainer.num_iterations // K,
        **kwargs,
    )

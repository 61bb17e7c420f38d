"""One [`jaxsample.driver.Driver.run`][jaxsample.driver.Driver.run]: the learner loop, the actor
threads
and the schedule they share (see [`jaxsample.driver`][jaxsample.driver] for the semantics).

Private: [`jaxsample.driver`][jaxsample.driver] re-exports
    [`BatchInfo`][jaxsample.driver.BatchInfo],
[`DriverResult`][jaxsample.driver.DriverResult] and ``THREAD_PREFIX``.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxsample.driver_options import DriverOptions
from jaxsample.types import PyTree

THREAD_PREFIX = "jaxsample-actor"
_POLL_S = 0.05  # how often waiting threads re-check for errors and stops


@dataclasses.dataclass(frozen=True)
class Programs:
    """The (compiled) functions a run calls.

    Attributes:
      collect: ``collect(actor_state, params, index) -> (actor_state, batch)``.
      learn: ``learn(learner_state, batch_or_group) -> (learner_state, metrics)``.
      publish: ``publish(learner_state) -> params``.
      observe: ``observe(step_metrics, batch) -> (step_metrics, observed)``, or
        None without step metrics and observers.
    """

    collect: Callable[[PyTree, PyTree, np.int32], tuple[PyTree, PyTree]]
    learn: Callable[[PyTree, PyTree], tuple[PyTree, PyTree]]
    publish: Callable[[PyTree], PyTree]
    observe: Callable[[PyTree, PyTree], tuple[PyTree, PyTree]] | None = None


class BatchInfo(NamedTuple):
    """What the driver knows about one batch (host values).

    Attributes:
      index: the batch's global position (``0 .. num_batches - 1``).
      actor: the actor that collected it (``index % num_actors``).
      version: the parameter version it was collected with.
      staleness: batches the learner had learned when it took the batch, minus
        ``version``.
      learned: False if the learner dropped it (``stale="drop"``).
      learner_updates: batches learned after this one was taken (after the
        update that learned it, its whole group included).
      update: the learner update it was learned in (``index //
        learn_queue_cap``; counts dropped batches' slots too).
    """

    index: int
    actor: int
    version: int
    staleness: int
    learned: bool
    learner_updates: int
    update: int


@dataclasses.dataclass
class DriverResult:
    """What `Driver.run` returns.

    Attributes:
      learner_state: the final learner state (on the learner device).
      actor_states: the final state of each actor (on its device).
      metrics: ``learn``'s metrics of every learner update, on the host, stacked
        along a new leading axis (``[num_updates, ...]``: one per learned batch
        when ``learn_queue_cap=1``); None if none was learned.
      records: ``[num_batches]`` numpy arrays ``index``, ``actor``,
        ``version``, ``staleness``, ``learned`` (bool), ``learner_updates``,
        ``update``, in the order the learner took the batches (= index order).
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
      step_metrics: the [`StepMetrics`][jaxsample.metrics.StepMetrics] after every
        collected batch (None without ``step_metrics=``).
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
    step_metrics: Any = None

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


class Run:
    """One `Driver.run`: the learner (caller's thread) and the actors."""

    def __init__(
        self, options: DriverOptions, programs: Programs, num_batches: int, callback: Any
    ) -> None:
        self.opts = options
        self.programs = programs
        self.n = num_batches
        self.callback = callback
        self.shared = _Shared(options.num_actors)
        self.learned = 0
        self.records: list[BatchInfo] = []
        self.metrics: list[PyTree] = []
        self.published: list[int] = []
        self.learn_s = 0.0
        self.learner_wait_s = 0.0
        self.updates = 0
        self.step_metrics = options.step_metrics

    # -- schedule ----------------------------------------------------------
    def _may_start(self, i: int) -> bool:
        """Whether batch ``i`` may be collected now (call under the lock)."""
        o, sh = self.opts, self.shared
        if sh.released < i - o.num_actors * o.num_buffers + 1:
            return False
        return not (
            o.stale == "wait" and o.max_staleness is not None and sh.version < i - o.max_staleness
        )

    def _needed_before(self, i: int) -> int:
        """Sync mode: batches the learner must have taken before batch ``i`` is
        collected (to free a buffer and, with ``stale="wait"``, to publish a
        fresh enough version)."""
        o = self.opts
        cap = o.learn_queue_cap
        need = max(0, i - o.num_actors * o.num_buffers + 1)
        if o.stale == "wait" and o.max_staleness is not None and i - o.max_staleness > 0:
            k = o.sync_every * cap  # batches between two published versions
            need = max(need, k * math.ceil((i - o.max_staleness) / k))
        return cap * math.ceil(need / cap)  # the learner takes whole groups

    # -- pieces --------------------------------------------------------------
    def _publish(self, state: PyTree) -> None:
        params = self.programs.publish(state)
        copies = [jax.device_put(params, dev, may_alias=False) for dev in self.opts.actor_devices]
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
        state, batch = self.programs.collect(state, params, np.int32(i))
        batch = jax.device_put(batch, self.opts.learner_device)
        jax.block_until_ready(batch)
        sh.collect_s[a] += time.perf_counter() - t0
        with sh.cond:
            sh.ready[i] = _Item(batch, version, a)
            sh.cond.notify_all()
        return state

    def _observe(self, batch: PyTree) -> None:
        """The driver's hook: step metrics and observers on one collected batch."""
        observe = self.programs.observe
        if observe is None:
            return
        self.step_metrics, data = observe(self.step_metrics, batch)
        for observer, x in zip(self.opts.observers, jax.device_get(data), strict=True):
            observer.host(x)

    def _learn_group(self, state: PyTree, first: int) -> PyTree:
        """Take batches ``first .. first + learn_queue_cap - 1`` (they must be
        ready) and learn them as one update, or drop the one batch
        (``learn_queue_cap=1`` only)."""
        o, sh = self.opts, self.shared
        ids = range(first, first + o.learn_queue_cap)
        with sh.cond:
            items = [sh.ready.pop(i) for i in ids]
        stalenesses = [self.learned - item.version for item in items]
        learn = not (o.stale == "drop" and stalenesses[0] > o.max_staleness)
        if o.stale == "wait" and o.max_staleness is not None and max(stalenesses) > o.max_staleness:
            raise RuntimeError(  # the schedule makes this impossible
                f"internal error: batches {list(ids)} are {stalenesses} versions stale "
                f"(max_staleness={o.max_staleness})"
            )
        metrics = None
        t0 = time.perf_counter()
        batches = [item.batch for item in items]
        items = [item._replace(batch=None) for item in items]
        for batch in batches:
            self._observe(batch)
        if learn:
            group = batches[0] if o.learn_queue_cap == 1 else tuple(batches)
            state, metrics = self.programs.learn(state, group)
            del group
            jax.block_until_ready((state, metrics))
            metrics = jax.device_get(metrics)
            self.learned += len(items)
            self.updates += 1
            if self.updates % o.sync_every == 0:
                self._publish(state)
            self.metrics.append(metrics)
        del batches
        with sh.cond:
            sh.released = ids[-1] + 1
            for i in ids:
                sh.in_flight[i % o.num_actors] -= 1
            sh.cond.notify_all()
        self.learn_s += time.perf_counter() - t0
        for i, item, staleness in zip(ids, items, stalenesses, strict=True):
            info = BatchInfo(
                i, item.actor, item.version, staleness, learn, self.learned, first // len(ids)
            )
            self.records.append(info)
            if self.callback is not None:
                self.callback(info, metrics)
        return state

    # -- modes ---------------------------------------------------------------
    def execute(self, learner_state: PyTree, actor_states: list[PyTree]) -> DriverResult:
        o = self.opts
        t_start = time.perf_counter()
        learner_state = jax.device_put(learner_state, o.learner_device, may_alias=False)
        actor_states = [
            jax.device_put(s, dev, may_alias=False)
            for s, dev in zip(actor_states, o.actor_devices, strict=True)
        ]
        self._publish(learner_state)
        if o.mode == "sync":
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
            env_steps=None if o.steps_per_batch is None else o.steps_per_batch * self.learned,
            wall_seconds=wall,
            collect_seconds=list(sh.collect_s),
            actor_wait_seconds=list(sh.wait_s),
            learn_seconds=self.learn_s,
            learner_wait_seconds=self.learner_wait_s,
            step_metrics=self.step_metrics,
        )

    def _run_sync(self, learner_state: PyTree, actor_states: list[PyTree]) -> PyTree:
        o, sh = self.opts, self.shared
        taken, cap = 0, o.learn_queue_cap
        for i in range(self.n):
            while taken < self._needed_before(i):
                learner_state = self._learn_group(learner_state, taken)
                taken += cap
            a = i % o.num_actors
            actor_states[a] = self._collect_one(a, i, actor_states[a])
        while taken < self.n:
            learner_state = self._learn_group(learner_state, taken)
            taken += cap
        sh.actor_states = actor_states
        return learner_state

    def _run_async(self, learner_state: PyTree, actor_states: list[PyTree]) -> PyTree:
        o, sh = self.opts, self.shared
        threads = [
            threading.Thread(
                target=self._actor_loop,
                args=(a, actor_states[a]),
                name=f"{THREAD_PREFIX}-{a}",
                daemon=True,
            )
            for a in range(o.num_actors)
        ]
        actor_states.clear()  # the threads own them now
        try:
            for t in threads:
                t.start()
            cap = o.learn_queue_cap
            for first in range(0, self.n, cap):
                t0 = time.perf_counter()
                with sh.cond:
                    while sh.error is None and any(
                        i not in sh.ready for i in range(first, first + cap)
                    ):
                        sh.cond.wait(_POLL_S)
                    if sh.error is not None:
                        raise sh.error
                self.learner_wait_s += time.perf_counter() - t0
                learner_state = self._learn_group(learner_state, first)
        except BaseException as e:
            sh.fail(e)
            stuck = self._join(threads, raising=False)
            if stuck and hasattr(e, "add_note"):
                e.add_note(stuck)
            raise
        self._join(threads, raising=True)
        return learner_state

    def _actor_loop(self, a: int, state: PyTree) -> None:
        o, sh = self.opts, self.shared
        try:
            for i in range(a, self.n, o.num_actors):
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
        deadline = time.monotonic() + self.opts.join_timeout
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
                f"{self.opts.join_timeout} s (stuck in a device call?)"
            )
            if raising:
                raise RuntimeError(message)
        return message

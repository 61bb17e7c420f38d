"""Actor/learner drivers: collection and learning on separate devices, overlapped.

rlpyt's asynchronous samplers and ALF's ``AsyncOffPolicyDriver`` collect while
the learner trains. This is the JAX form: [`make_driver`][jaxsample.driver.make_driver] takes three
    pure
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
records every batch's version (`DriverResult.records`), so its batches
can be recollected exactly from the initial actor states and the published
parameters; which version a batch gets depends on timing.

The runtime knows nothing of any algorithm. The adapters for the reference
trainers live next to them, in [`jaxsample.algos.drivers`][jaxsample.algos.drivers]:
``ppo_driver`` (on-policy PPO on one-step-stale batches whose
log-probabilities and values the learner re-evaluates; no V-trace) and
``dqn_driver`` (off-policy DQN: batches go into the replay buffer on the
learner, the replay ratio is the trainer's and is held exactly, epsilon follows
the batch index).

**Learner queue** (ALF's ``learn_queue_cap``). With ``learn_queue_cap=N``
the learner takes ``N`` consecutive batches at a time, ``g N, ..., g N + N -
1`` (with ``N`` actors: one batch of each actor, actor ``0`` first), and
learns them as one training batch, ``learn(state, combine(batches))``.
``combine`` gets them in index order; the default [`stack_batches`][jaxsample.driver.stack_batches]
stacks
them along a new leading axis (part ``n`` is batch ``g N + n``);
[`concat_envs`][jaxsample.driver.concat_envs] concatenates jaxsample Batches
along the env axis (``[T, N B]``, batch ``g N``'s envs first). Every batch is
still learned exactly once and keeps its own record (its version and its
staleness: batches learned when the learner took the group, minus its
version); versions count batches (``N`` per update) and ``sync_every`` counts
learner updates, so a new version is published every ``N * sync_every``
batches.

**Step metrics and observers.** ``step_metrics=StepMetrics.init(window)``
and ``observers=[make_step_observer(...)]`` are applied to every collected
batch (a [`Batch`][jaxsample.types.Batch], or ``batch_view(batch)``), on the
learner thread in batch order, before it is learned (dropped batches too:
their steps were taken); the final [`StepMetrics`][jaxsample.metrics.StepMetrics] is
`DriverResult.step_metrics`. No user wiring: the metrics update and the
observers' selections are compiled once.

Jitting: the driver runs compiled programs from host threads, so it jits the
functions it is given (``jax.jit``, donating the actor and learner states;
it copies the states you pass first, so yours stay valid). Pass ``jit=False``
to call them as they are (already jitted, or eagerly).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp

from jaxsample._checks import check_int as _check_int
from jaxsample._driver_run import THREAD_PREFIX, BatchInfo, DriverResult, Programs, Run
from jaxsample.metrics import StepMetrics, StepObserver
from jaxsample.types import Batch, PyTree, SparseFinalObservation

__all__ = [
    "THREAD_PREFIX",
    "BatchInfo",
    "Driver",
    "DriverResult",
    "concat_envs",
    "make_driver",
    "stack_batches",
]

Mode = Literal["async", "sync"]
StalePolicy = Literal["wait", "drop"]
MODES = ("async", "sync")
STALE_POLICIES = ("wait", "drop")


@dataclasses.dataclass(frozen=True, eq=False)
class Driver:
    """An actor/learner driver; build it with [`make_driver`][jaxsample.driver.make_driver] (or an
    adapter
    of [`jaxsample.algos.drivers`][jaxsample.algos.drivers]).

    Attributes are the validated arguments of [`make_driver`][jaxsample.driver.make_driver];
    ``init``
    (optional, what [`train`][jaxsample.driver.Driver.train] starts from) is ``init(key, num_actors)
    ->
    (learner_state, actor_states)``; ``programs`` are the compiled functions
    a run calls (`Programs`, derived from the
    others): a driver is the run's `RunConfig`.
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
    learn_queue_cap: int = 1
    combine: Callable[[tuple[PyTree, ...]], PyTree] | None = None
    step_metrics: StepMetrics | None = None
    observers: tuple[StepObserver, ...] = ()
    batch_view: Callable[[PyTree], Batch] | None = None
    programs: Programs = dataclasses.field(default=None, repr=False)  # type: ignore[assignment]

    @property
    def num_actors(self) -> int:
        """The number of actors (one per entry of ``actor_devices``)."""
        return len(self.actor_devices)

    def replace(self, **changes: Any) -> Driver:
        """A driver with some [`make_driver`][jaxsample.driver.make_driver] arguments changed (e.g.
        ``mode``)."""
        args = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name != "programs"  # derived from the others
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
            ``stale="drop"``); a multiple of ``learn_queue_cap``.
          callback: called on the host, in the caller's thread, after each batch
            the learner takes, with its [`BatchInfo`][jaxsample.driver.BatchInfo] and its metrics on
            the host (None for a dropped batch; with ``learn_queue_cap > 1``
            each batch of an update gets that update's metrics).

        Returns:
          A [`DriverResult`][jaxsample.driver.DriverResult]. An exception in an actor, in
          ``learn`` or in ``callback`` stops every thread and is re-raised here (the
          original exception object, with its traceback).
        """
        _check_int("num_batches", num_batches, 1)
        if num_batches % self.learn_queue_cap:
            raise ValueError(
                f"num_batches ({num_batches}) must be a multiple of learn_queue_cap "
                f"({self.learn_queue_cap}): the learner takes that many batches at a time"
            )
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
        run = Run(self, int(num_batches), callback)
        return run.execute(learner_state, list(actor_states))


# ----------------------------------------------------------------------------
# Combining the batches of one learner update
# ----------------------------------------------------------------------------


def stack_batches(batches: Sequence[PyTree]) -> PyTree:
    """The default ``combine``: the batches (any pytrees of one structure)
    stacked along a new leading axis, ``[N, ...]``, in the order given."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *batches)


def concat_envs(batches: Sequence[Batch]) -> Batch:
    """jaxsample Batches of ``[T, B_n]`` envs as one
    ``[T, sum B_n]`` batch, along the env axis, in the order given (the envs of
    ``batches[0]`` first): axis 1 of the ``[T, B, ...]`` fields, axis 0 of the
    ``[B, ...]`` ones (``bootstrap_value``, ``agent.initial_state``, the sparse
    final-observation store)."""
    for n, b in enumerate(batches):
        if not isinstance(b, Batch):
            raise TypeError(f"batches[{n}] must be a jaxsample Batch, got {type(b).__name__}")

    def along(axis: int, parts: list[PyTree]) -> PyTree:
        return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis), *parts)

    stores = ("final_store", "final_mask_store")  # the final observations', their masks'

    def sparse(env: Any) -> dict[str, PyTree]:
        out = {k: getattr(env, k) for k in stores}
        return {k: v for k, v in out.items() if isinstance(v, SparseFinalObservation)}

    def env_first(b: Batch) -> tuple[PyTree, PyTree, PyTree]:
        return b.samples.bootstrap_value, b.samples.agent.initial_state, sparse(b.samples.env)

    def time_first(b: Batch) -> Batch:
        s = b.samples
        return b.replace(
            samples=s.replace(
                bootstrap_value=None,
                agent=s.agent.replace(initial_state=None),
                env=s.env.replace(**{k: None for k in sparse(s.env)}),
            )
        )

    out = along(1, [time_first(b) for b in batches])
    bootstrap, initial, sparse_stores = along(0, [env_first(b) for b in batches])
    s = out.samples
    env = s.env.replace(**sparse_stores)
    agent = s.agent.replace(initial_state=initial)
    return out.replace(samples=s.replace(env=env, agent=agent, bootstrap_value=bootstrap))


def _observe_fn(
    step_metrics: StepMetrics | None,
    observers: tuple[StepObserver, ...],
    batch_view: Callable[[PyTree], Batch] | None,
) -> Callable[..., Any] | None:
    """``(metrics, batch) -> (metrics, [observer data])``, or None without a hook."""
    if step_metrics is None and not observers:
        return None

    def observe(metrics: StepMetrics | None, batch: PyTree) -> tuple[Any, list[PyTree]]:
        view = batch if batch_view is None else batch_view(batch)
        if not isinstance(view, Batch):
            raise TypeError(
                "step_metrics and observers need jaxsample Batches: the driver's batches "
                f"are {type(view).__name__}; pass batch_view=(batch -> Batch)"
            )
        if metrics is not None:
            metrics = metrics.update(view)
        return metrics, [o.data(view) for o in observers]

    return observe


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
    learn_queue_cap: int = 1,
    combine: Callable[[tuple[PyTree, ...]], PyTree] | None = None,
    step_metrics: StepMetrics | None = None,
    observers: Sequence[StepObserver] = (),
    batch_view: Callable[[PyTree], Batch] | None = None,
) -> Driver:
    """Build an actor/learner [`Driver`][jaxsample.driver.Driver] (see the module docstring).

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
      init, default_num_batches: what [`Driver.train`][jaxsample.driver.Driver.train] starts from
        (``init(key, num_actors) -> (learner_state, actor_states)``) and its
        default number of batches (an adapter sets them from its trainer).
      learn_queue_cap: batches per learner update (``N``, ALF's
        ``learn_queue_cap``): ``learn(state, combine(batches))`` on ``N``
        consecutive batches; ``N <= num_actors * num_buffers`` and
        ``stale="wait"`` (a dropped part would change the update's shape).
      combine: ``combine(batches) -> batch`` for ``N > 1`` (a tuple in index
        order; compiled into ``learn``); default [`stack_batches`][jaxsample.driver.stack_batches].
      step_metrics: an initial [`StepMetrics`][jaxsample.metrics.StepMetrics], updated
        with every collected batch (`DriverResult.step_metrics`).
      observers: step observers ([`StepObserver`][jaxsample.metrics.StepObserver]) called with every
        collected batch, in batch order.
      batch_view: ``batch -> Batch`` for the hook when the driver's batches are
        not jaxsample Batches (pure, compiled).
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
        if max_staleness < sync_every - 1:
            # "wait": an actor would wait for a version never published; "drop":
            # after max_staleness + 1 batches every batch is too stale, none is
            # learned, so no version is ever published again (a silent stall).
            raise ValueError(
                f"max_staleness ({max_staleness}) must be >= sync_every - 1 ({sync_every - 1}): "
                f"parameters are published only every {sync_every} learned batches, so with "
                f"stale={stale!r} the run would stall"
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
    learn_queue_cap = _check_queue(
        learn_queue_cap, combine, len(actor_devices) * num_buffers, stale, max_staleness, sync_every
    )
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
    if batch_view is not None and not callable(batch_view):
        raise TypeError(f"batch_view must be callable, got {batch_view!r}")
    observers = tuple(observers)
    observe = _observe_fn(step_metrics, observers, batch_view)
    learner = learn
    if learn_queue_cap > 1:
        merge = stack_batches if combine is None else combine

        def learner(state: PyTree, batches: tuple[PyTree, ...]) -> tuple[PyTree, PyTree]:
            return learn(state, merge(batches))

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
        learn_queue_cap=learn_queue_cap,
        combine=combine,
        step_metrics=step_metrics,
        observers=observers,
        batch_view=batch_view,
        programs=Programs(
            collect=jax.jit(collect, donate_argnums=0) if jit else collect,
            learn=jax.jit(learner, donate_argnums=0) if jit else learner,
            observe=None if observe is None else jax.jit(observe),
        ),
    )


def _check_queue(
    cap: Any,
    combine: Any,
    buffers: int,
    stale: str,
    max_staleness: int | None,
    sync_every: int,
) -> int:
    """``learn_queue_cap`` checked against the other arguments."""
    cap = _check_int("learn_queue_cap", cap, 1)
    if combine is not None and not callable(combine):
        raise TypeError(f"combine must be callable, got {combine!r}")
    if cap > buffers:
        raise ValueError(
            f"learn_queue_cap ({cap}) must be <= num_actors * num_buffers ({buffers}): "
            "the actors could not hold the batches of one update at once"
        )
    if cap > 1 and stale == "drop":
        raise ValueError(
            "learn_queue_cap > 1 needs stale='wait' (a dropped part would "
            "change the shape of the update)"
        )
    if cap > 1 and max_staleness is not None and max_staleness < cap * sync_every - 1:
        raise ValueError(
            f"max_staleness ({max_staleness}) must be >= learn_queue_cap * sync_every - 1 "
            f"({cap * sync_every - 1}): a version is published every {cap * sync_every} "
            "batches, so the run would stall"
        )
    return cap

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
from typing import Any

import jax
import jax.numpy as jnp

from jaxsample._checks import check_int as _check_int
from jaxsample._driver_run import THREAD_PREFIX, BatchInfo, DriverResult, Programs, Run
from jaxsample.driver_options import DriverOptions, driver_options
from jaxsample.metrics import StepMetrics
from jaxsample.types import Batch, PyTree, SparseFinalObservation

__all__ = [
    "THREAD_PREFIX",
    "BatchInfo",
    "Driver",
    "DriverOptions",
    "DriverResult",
    "concat_envs",
    "make_driver",
    "stack_batches",
]


@dataclasses.dataclass(frozen=True, eq=False)
class Driver:
    """An actor/learner driver; build it with [`make_driver`][jaxsample.driver.make_driver] (or an
    adapter of [`jaxsample.algos.drivers`][jaxsample.algos.drivers]).

    Attributes:
      options: the validated arguments of ``make_driver``
        ([`DriverOptions`][jaxsample.driver.DriverOptions]).
      programs: the (compiled) functions a run calls (`Programs`, derived
        from ``options``).
    """

    options: DriverOptions
    programs: Programs = dataclasses.field(repr=False)

    @property
    def num_actors(self) -> int:
        """The number of actors (one per entry of ``options.actor_devices``)."""
        return self.options.num_actors

    def replace(self, **changes: Any) -> Driver:
        """A driver with some [`make_driver`][jaxsample.driver.make_driver] arguments changed (e.g.
        ``mode``)."""
        args = {f.name: getattr(self.options, f.name) for f in dataclasses.fields(self.options)}
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
        opts = self.options
        if opts.init is None:
            raise ValueError("this driver has no init: call run(learner_state, actor_states, n)")
        if num_batches is None:
            if opts.default_num_batches is None:
                raise ValueError("num_batches is required for this driver")
            num_batches = opts.default_num_batches
        learner_state, actor_states = opts.init(key, self.num_actors)
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
        cap = self.options.learn_queue_cap
        if num_batches % cap:
            raise ValueError(
                f"num_batches ({num_batches}) must be a multiple of learn_queue_cap "
                f"({cap}): the learner takes that many batches at a time"
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
        run = Run(self.options, self.programs, int(num_batches), callback)
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


def _observe_fn(opts: DriverOptions) -> Callable[..., Any] | None:
    """``(metrics, batch) -> (metrics, [observer data])``, or None without a hook."""
    observers, batch_view = opts.observers, opts.batch_view
    if opts.step_metrics is None and not observers:
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


def _programs(opts: DriverOptions) -> Programs:
    """What a run of a driver of ``opts`` calls: ``collect``, ``learn`` (of the
    combined group when ``learn_queue_cap > 1``) and the hook, jitted (donating
    the states) unless ``jit=False``; ``publish`` as given."""
    learner = opts.learn
    if opts.learn_queue_cap > 1:
        merge = stack_batches if opts.combine is None else opts.combine

        def learner(state: PyTree, batches: tuple[PyTree, ...]) -> tuple[PyTree, PyTree]:
            return opts.learn(state, merge(batches))

    observe = _observe_fn(opts)
    return Programs(
        collect=jax.jit(opts.collect, donate_argnums=0) if opts.jit else opts.collect,
        learn=jax.jit(learner, donate_argnums=0) if opts.jit else learner,
        publish=opts.publish,
        observe=None if observe is None else jax.jit(observe),
    )


# ----------------------------------------------------------------------------
# Factory
# ----------------------------------------------------------------------------


def make_driver(
    collect: Callable[[PyTree, PyTree, jax.Array], tuple[PyTree, PyTree]],
    learn: Callable[[PyTree, PyTree], tuple[PyTree, PyTree]],
    publish: Callable[[PyTree], PyTree],
    **options: Any,
) -> Driver:
    """Build an actor/learner [`Driver`][jaxsample.driver.Driver] (see the module docstring).

    Args:
      collect: ``collect(actor_state, params, index) -> (actor_state, batch)``.
      learn: ``learn(learner_state, batch) -> (learner_state, metrics)``.
      publish: ``publish(learner_state) -> params``.
      options: the keyword options, checked and held as ``driver.options``
        (their meaning and defaults:
        [`DriverOptions`][jaxsample.driver.DriverOptions]): ``mode``,
        ``actor_devices``, ``learner_device``, ``num_buffers``, ``sync_every``,
        ``max_staleness``, ``stale``, ``steps_per_batch``, ``jit``,
        ``join_timeout``, ``init``, ``default_num_batches``,
        ``learn_queue_cap``, ``combine``, ``step_metrics``, ``observers``,
        ``batch_view``.

    Raises:
      TypeError: for an argument of the wrong type, naming it.
      ValueError: for a bad value, naming it.
    """
    opts = driver_options("make_driver", collect, learn, publish, options)
    return Driver(opts, _programs(opts))

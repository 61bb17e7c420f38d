"""Step metrics (ALF's NumberOfEpisodes, EnvironmentSteps, AverageReturn,
AverageEpisodeLength) as a pure state, and host observers.

[`StepMetrics`][jaxsample.metrics.StepMetrics] is a ``flax.struct`` state updated from each
collected
[`Batch`][jaxsample.types.Batch] inside ``jax.jit``::

    metrics = js.StepMetrics.init(window=10)
    ...
    state, batch = collect(state, params)
    metrics = metrics.update(batch)          # pure, jittable, O(T * B)
    js.metrics.as_dict(metrics)              # on the host: exact Python numbers

Counters never overflow in JAX's default 32-bit mode: a run of more than
``2**31`` environment steps is normal on an accelerator, so each count is kept
as two ``uint32`` words ([`Counter`][jaxsample.metrics.Counter], exact up to ``2**64 - 1``) and read
out exactly on the host.

Observers ([`make_observer`][jaxsample.metrics.make_observer],
[`observe`][jaxsample.metrics.observe]) run Python callbacks on the
host from inside jitted code, once per call, in program order. Step observers
([`make_step_observer`][jaxsample.metrics.make_step_observer], ALF's observers) see every step of
every env of a
batch: a compiled selection of ``[T, B]`` fields, one transfer per batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsample.types import Batch, PyTree

__all__ = [
    "Counter",
    "Observer",
    "StepMetrics",
    "StepObserver",
    "as_dict",
    "make_observer",
    "make_step_observer",
    "observe",
    "step_fields",
]

_WORD = 2**32


@struct.dataclass
class Counter:
    """An exact non-negative count below ``2**64`` in two ``uint32`` words.

    The value is ``hi * 2**32 + lo``. [`add`][jaxsample.metrics.Counter.add] carries from ``lo``
    into
    ``hi`` with 32-bit arithmetic only, so it works (and cannot overflow for
    ``2**32`` times longer than an int32 could) with ``jax_enable_x64`` off.

    Attributes:
      hi: uint32 ``[]``, the high word.
      lo: uint32 ``[]``, the low word.
    """

    hi: jax.Array
    lo: jax.Array

    @classmethod
    def zeros(cls) -> Counter:
        """The count 0."""
        return cls(hi=jnp.zeros((), jnp.uint32), lo=jnp.zeros((), jnp.uint32))

    @classmethod
    def of(cls, value: int) -> Counter:
        """The count ``value`` (a Python int in ``[0, 2**64)``), e.g. to restore a run."""
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"value must be an int, got {value!r}")
        value = int(value)
        if not 0 <= value < _WORD * _WORD:
            raise ValueError(f"value must be in [0, 2**64), got {value}")
        return cls(
            hi=jnp.asarray(value // _WORD, jnp.uint32), lo=jnp.asarray(value % _WORD, jnp.uint32)
        )

    def add(self, n: jax.Array) -> Counter:
        """The count plus ``n``, a non-negative integer scalar below ``2**32``."""
        n = jnp.asarray(n).astype(jnp.uint32)
        lo = self.lo + n  # wraps modulo 2**32
        carry = (lo < n).astype(jnp.uint32)
        return Counter(hi=self.hi + carry, lo=lo)

    def to_float(self) -> jax.Array:
        """float32 ``[]`` approximation of the count (relative error ~6e-8); jittable."""
        return self.hi.astype(jnp.float32) * jnp.float32(_WORD) + self.lo.astype(jnp.float32)

    def to_int(self) -> int:
        """The exact count as a Python int (on the host; not jittable)."""
        return int(np.asarray(self.hi)) * _WORD + int(np.asarray(self.lo))


@struct.dataclass
class StepMetrics:
    """ALF's step metrics as a pure state; build it with
    [`init`][jaxsample.metrics.StepMetrics.init].

    Attributes:
      number_of_episodes: [`Counter`][jaxsample.metrics.Counter] of completed episodes
        (``traj_infos.completed``).
      environment_steps: [`Counter`][jaxsample.metrics.Counter] of valid environment steps
        (``samples.valid``; idle steps of the ``"wait"``/``"episodic"`` modes do
        not count).
      returns: float32 ``[window]``, ring of the returns of the last ``window``
        completed episodes.
      lengths: int32 ``[window]``, ring of their lengths.
      position: int32 ``[]``, the ring slot the next episode goes to, kept
        modulo ``window`` (cannot overflow).
      filled: int32 ``[]``, episodes in the ring, saturating at ``window``.

    Episodes enter the ring in time order, then env order within a step
    (row-major over the batch's ``[T, B]``), batch after batch; the averages are
    over the most recent ``min(window, episodes so far)`` of them.
    """

    number_of_episodes: Counter
    environment_steps: Counter
    returns: jax.Array
    lengths: jax.Array
    position: jax.Array
    filled: jax.Array

    @classmethod
    def init(cls, window: int = 10) -> StepMetrics:
        """Zero counters and an empty ring of ``window`` episodes (ALF's default 10)."""
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)):
            raise TypeError(f"window must be an int, got {window!r}")
        if not 1 <= window < 2**30:
            raise ValueError(f"window must be in [1, 2**30), got {window}")
        window = int(window)
        return cls(
            number_of_episodes=Counter.zeros(),
            environment_steps=Counter.zeros(),
            returns=jnp.zeros((window,), jnp.float32),
            lengths=jnp.zeros((window,), jnp.int32),
            position=jnp.zeros((), jnp.int32),
            filled=jnp.zeros((), jnp.int32),
        )

    @property
    def window(self) -> int:
        """The number of episodes the averages are over (static)."""
        return self.returns.shape[0]

    def update(self, batch: Batch) -> StepMetrics:
        """Account for one collected batch; pure, jittable, ``O(T * B)``.

        Args:
          batch: a [`Batch`][jaxsample.types.Batch]; its ``traj_infos`` fields and
            ``samples.valid`` are ``[T, B]``.

        Returns:
          The updated state. Usable as ``StepMetrics.update(state, batch)``.
        """
        if not isinstance(batch, Batch):
            raise TypeError(f"batch must be a jaxsample Batch, got {type(batch).__name__}")
        info = batch.traj_infos
        completed = jnp.asarray(info.completed)
        valid = jnp.asarray(batch.samples.valid)
        if completed.ndim != 2 or completed.dtype != jnp.bool_:
            raise ValueError(
                "batch.traj_infos.completed must be bool [T, B], got "
                f"{completed.dtype}{list(completed.shape)}"
            )
        for name, x in (
            ("traj_infos.episode_return", info.episode_return),
            ("traj_infos.length", info.length),
            ("samples.valid", valid),
        ):
            if jnp.shape(x) != completed.shape:
                raise ValueError(
                    f"batch.{name} must have the shape of traj_infos.completed "
                    f"{list(completed.shape)}, got {list(jnp.shape(x))}"
                )
        if completed.size >= 2**31:
            raise ValueError(f"a batch of {completed.size} steps is too large (>= 2**31)")
        N = self.window
        done = completed.reshape(-1)  # time-major order: t, then b
        k = jnp.sum(done, dtype=jnp.int32)
        rank = jnp.cumsum(done, dtype=jnp.int32) - 1  # order of each episode in the batch
        keep = done & (rank >= k - N)  # only the last N can survive in the ring
        slot = jnp.where(keep, (self.position + rank % N) % N, N)  # N: dropped
        returns = self.returns.at[slot].set(
            jnp.asarray(info.episode_return, jnp.float32).reshape(-1), mode="drop"
        )
        lengths = self.lengths.at[slot].set(
            jnp.asarray(info.length, jnp.int32).reshape(-1), mode="drop"
        )
        return StepMetrics(
            number_of_episodes=self.number_of_episodes.add(k),
            environment_steps=self.environment_steps.add(jnp.sum(valid, dtype=jnp.int32)),
            returns=returns,
            lengths=lengths,
            position=(self.position + k % N) % N,
            filled=jnp.minimum(self.filled + jnp.minimum(k, N), N),
        )

    def summary(self) -> dict[str, jax.Array]:
        """float32 scalars for logging inside jit (counts approximate above ``2**24``).

        Keys: ``number_of_episodes``, ``environment_steps``, ``average_return``,
        ``average_episode_length`` (NaN before the first completed episode).
        """
        mask = jnp.arange(self.window) < self.filled
        n = self.filled.astype(jnp.float32)
        some = self.filled > 0
        nan = jnp.float32(jnp.nan)

        def mean(x: jax.Array) -> jax.Array:
            total = jnp.sum(jnp.where(mask, x.astype(jnp.float32), 0.0))
            return jnp.where(some, total / jnp.maximum(n, 1.0), nan)

        return {
            "number_of_episodes": self.number_of_episodes.to_float(),
            "environment_steps": self.environment_steps.to_float(),
            "average_return": mean(self.returns),
            "average_episode_length": mean(self.lengths),
        }

    def as_dict(self) -> dict[str, int | float]:
        """Exact values as Python numbers, on the host (not jittable).

        ``number_of_episodes`` and ``environment_steps`` are exact ints;
        ``average_return`` and ``average_episode_length`` are float64 means over
        the ring (``nan`` before the first completed episode).
        """
        filled = int(np.asarray(self.filled))
        returns = np.asarray(self.returns, np.float64)[:filled]
        lengths = np.asarray(self.lengths, np.float64)[:filled]
        return {
            "number_of_episodes": self.number_of_episodes.to_int(),
            "environment_steps": self.environment_steps.to_int(),
            "average_return": float(returns.mean()) if filled else float("nan"),
            "average_episode_length": float(lengths.mean()) if filled else float("nan"),
        }


def as_dict(state: StepMetrics) -> dict[str, int | float]:
    """``state.as_dict()``: exact Python numbers on the host (see
    [`StepMetrics.as_dict`][jaxsample.metrics.StepMetrics.as_dict])."""
    if not isinstance(state, StepMetrics):
        raise TypeError(f"state must be a StepMetrics, got {type(state).__name__}")
    return state.as_dict()


def _to_host(data: PyTree) -> PyTree:
    return jax.tree.map(np.asarray, data)


@dataclasses.dataclass(frozen=True, eq=False)
class Observer:
    """Host callbacks run from inside jitted code; build it with
    [`make_observer`][jaxsample.metrics.make_observer].

    Calling ``observer(data)`` (inside or outside ``jax.jit``, e.g. once per
    collected batch in a ``lax.scan`` training loop) sends ``data`` to the host
    and calls each function of ``fns`` on it, in order, with numpy leaves. It
    uses ``jax.debug.callback(..., ordered=True)``: the calls happen once per
    execution of the call site, in program order (across ``lax.scan``
    iterations and across jitted calls). Call ``jax.effects_barrier()`` to wait
    for pending calls before reading what they recorded.

    Cost: each call is a device-to-host transfer of ``data`` and a host round
    trip that ordered effects serialize, so pass small summaries (a
    [`StepMetrics`][jaxsample.metrics.StepMetrics], ``js.summarize(batch.traj_infos)``) rather than
    whole
    batches. Ordered callbacks cannot be used under ``jax.vmap`` (JAX raises);
    observe outside the vmapped function. An exception raised by a function
    surfaces as a runtime error from JAX.

    Attributes:
      fns: the host functions, called in this order with the same ``data``.
    """

    fns: tuple[Callable[[Any], None], ...]

    def __call__(self, data: PyTree) -> None:
        """Run the functions on the host with ``data`` (a pytree of arrays)."""
        jax.debug.callback(self._run, data, ordered=True)

    def _run(self, data: PyTree) -> None:
        data = _to_host(data)
        for fn in self.fns:
            fn(data)


def make_observer(*fns: Callable[[Any], None]) -> Observer:
    """An [`Observer`][jaxsample.metrics.Observer] that calls ``fns`` (at least one) in order on the
    host."""
    if not fns:
        raise ValueError("make_observer needs at least one function")
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(f"fns[{i}] must be callable, got {fn!r}")
    return Observer(tuple(fns))


def observe(data: PyTree, *fns: Callable[[Any], None]) -> None:
    """Call ``fns`` on the host with ``data``, from inside jit: ``make_observer(*fns)(data)``.

    Costs a device-to-host transfer and a host round trip per call (see
    [`Observer`][jaxsample.metrics.Observer]).
    """
    make_observer(*fns)(data)


# ----------------------------------------------------------------------------
# Step observers: every step of every env
# ----------------------------------------------------------------------------


def step_fields(batch: Batch) -> dict[str, Any]:
    """The default selection of a [`StepObserver`][jaxsample.metrics.StepObserver]: per step and env
    (leaves ``[T, B]``) ``reward``, ``terminated``, ``truncated``, ``done``,
    ``valid`` and ``traj_info`` (the batch's [`TrajInfo`][jaxsample.types.TrajInfo],
    user fields of ``traj_fields`` included). No observations: a few scalars a
    step, so the host transfer is ``O(T * B)`` numbers."""
    env = batch.samples.env
    return {
        "reward": env.reward,
        "terminated": env.terminated,
        "truncated": env.truncated,
        "done": env.done,
        "valid": batch.samples.valid,
        "traj_info": batch.traj_infos,
    }


@dataclasses.dataclass(frozen=True, eq=False)
class StepObserver:
    """ALF's observers: host functions that see every step of every env of a
    batch; build it with [`make_step_observer`][jaxsample.metrics.make_step_observer].

    ``select(batch)`` (pure, compiled with the collection) picks what the host
    gets; its leaves must be ``[T, B, ...]`` when ``per_step``. Then, on the
    host, with numpy leaves: ``per_step=True`` calls each function once per
    step ``t`` in time order with the leaves ``[B, ...]`` of that step (ALF's
    per-time-step observers); ``per_step=False`` calls each once per batch with
    the whole selection (e.g. a per-step reduction computed in ``select``).

    Cost per batch: one device-to-host transfer of the selection (bounded by
    what ``select`` returns, not by the batch) and ``T`` (or 1) Python calls
    per function; no host round trip per step.

    * ``observer(batch)`` inside ``jax.jit`` (e.g. a ``lax.scan`` training
      loop): an ordered ``jax.debug.callback`` per batch, in program order
      (``jax.effects_barrier()`` waits for pending calls).
    * The driver's hook (``make_driver(observers=...)``) calls
      [`data`][jaxsample.metrics.StepObserver.data]
      compiled and [`host`][jaxsample.metrics.StepObserver.host] on every collected batch, in batch
      order.

    Attributes:
      fns: the host functions, called in this order.
      select: ``Batch -> pytree`` of arrays.
      per_step: one call per step (True) or per batch (False).
    """

    fns: tuple[Callable[[Any], None], ...]
    select: Callable[[Batch], PyTree]
    per_step: bool

    def data(self, batch: Batch) -> PyTree:
        """``select(batch)``, checked (pure, jittable): with ``per_step`` every
        leaf's leading axes are the batch's ``[T, B]``."""
        if not isinstance(batch, Batch):
            raise TypeError(f"batch must be a jaxsample Batch, got {type(batch).__name__}")
        data = self.select(batch)
        if self.per_step:
            tb = tuple(jnp.shape(batch.samples.valid))
            for path, leaf in jax.tree_util.tree_leaves_with_path(data):
                if tuple(jnp.shape(leaf))[:2] != tb:
                    raise ValueError(
                        f"a per-step observer's selection must have [T, B] = {list(tb)} "
                        f"leading axes, got {list(jnp.shape(leaf))} at "
                        f"{jax.tree_util.keystr(path)}"
                    )
        return data

    def host(self, data: PyTree) -> None:
        """Call the functions on the host with ``data`` (what
        [`data`][jaxsample.metrics.StepObserver.data] returned)."""
        data = _to_host(data)
        if not self.per_step:
            for fn in self.fns:
                fn(data)
            return
        leaves = jax.tree.leaves(data)
        for t in range(leaves[0].shape[0] if leaves else 0):
            step = jax.tree.map(lambda x, t=t: x[t], data)
            for fn in self.fns:
                fn(step)

    def __call__(self, batch: Batch) -> None:
        """Observe ``batch`` (inside or outside ``jax.jit``; not under ``vmap``)."""
        jax.debug.callback(self.host, self.data(batch), ordered=True)


def make_step_observer(
    *fns: Callable[[Any], None],
    select: Callable[[Batch], PyTree] = step_fields,
    per_step: bool = True,
) -> StepObserver:
    """A [`StepObserver`][jaxsample.metrics.StepObserver] calling ``fns`` (at least one) on
    ``select(batch)``.

    Example (count every step's reward on the host)::

        total = []
        obs = js.metrics.make_step_observer(lambda s: total.append(s["reward"].sum()))
        obs(batch)   # T calls, each with [B] leaves
    """
    if not fns:
        raise ValueError("make_step_observer needs at least one function")
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(f"fns[{i}] must be callable, got {fn!r}")
    if not callable(select):
        raise TypeError(f"select must be callable, got {select!r}")
    if not isinstance(per_step, bool):
        raise TypeError(f"per_step must be a bool, got {per_step!r}")
    return StepObserver(tuple(fns), select, per_step)

"""The replayers' state, the info of replayed sequences, and the replayer object."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
from flax import struct

from jaxsample._checks import MAX_REPLAY_CAPACITY
from jaxsample.types import PyTree, Samples

#: The largest ring, steps per env (2**30): defined with the light checks,
#: which ``DQNConfig`` runs on its ``buffer_capacity`` without importing JAX.
MAX_CAPACITY = MAX_REPLAY_CAPACITY


@struct.dataclass
class ReplayState:
    """The replay buffer: ``B`` rings of ``capacity`` steps.

    Attributes:
      data: a [`Samples`][jaxsample.types.Samples] whose leaves are
        ``[B, capacity, ...]`` (one ring per env): the per-step fields of
        ``examples``, with ``env.final_store`` the dense true next observation
        ``[B, capacity, *obs]`` and ``agent.initial_state`` the agent's recurrent
        state before each step ``[B, capacity, *state]`` when the replayer was
        built with ``store_agent_state=True`` (else ``()``);
        ``bootstrap_value`` is None. Slots never written hold zeros with
        ``valid`` False and ``done`` True, like the sampler's idle steps.
      position: int32 ``[B]``, per ring the slot its next step is written to,
        in ``[0, capacity)``. It is kept modulo ``capacity``, so it cannot
        overflow however many steps are added. The rings advance together
        when ``add`` writes all envs, separately with ``env_ids``/``env_mask``.
      filled: int32 ``[B]``, the number of written slots of each ring; it
        saturates at ``capacity`` (so it cannot overflow either). The stored
        steps of env ``b`` are, oldest first, the slots
        ``(position[b] - filled[b]) % capacity, ..., (position[b] - 1) % capacity``.
      batch_initial_state: `one_time` only (else
        ``()``): the last batch's ``samples.agent.initial_state`` ``[B, ...]``.
      batch_bootstrap_value: `one_time` only, when
        ``examples`` has one (else None): the last batch's
        ``samples.bootstrap_value`` ``[B]``.
      priority: `prioritized` only (else None): float32
        ``[B, capacity]``, each stored step's priority raised to ``alpha``
        (0 for unwritten slots).
      max_priority: `prioritized` only (else None):
        float32 ``[]``, the largest priority given so far (starts at 1); new
        steps get it, so each is likely to be replayed at least once.
    """

    data: Samples
    position: jax.Array
    filled: jax.Array
    batch_initial_state: PyTree = ()
    batch_bootstrap_value: jax.Array | None = None
    priority: jax.Array | None = None
    max_priority: jax.Array | None = None


@struct.dataclass
class ReplayInfo:
    """Where replayed sequences come from, and which of their steps to use.

    For ``N`` sequences of ``L`` steps:

    Attributes:
      env_index: int32 ``[N]``, the env (ring) each sequence comes from.
      start: int32 ``[N]``, the position of each sequence's first step counted
        from the oldest step stored for its env (``0 .. filled - L`` for
        ``Replayer.sample``). From ``Replayer.replay_all`` it is
        ``filled - capacity``: negative while the ring is not yet full, meaning
        that many leading rows are padding (``valid`` False, ``done`` True).
      same_episode: bool ``[L, N]``, the step is valid and belongs to the same
        episode as the sequence's first valid step (no valid ``done`` step
        before it in the sequence). Sequences may cross episode boundaries:
        mask per-step losses with this, or use ``done``/``valid`` directly.
      crosses_episode: bool ``[N]``, the sequence holds valid steps of more than
        one episode (``same_episode`` is not ``valid`` everywhere).
      ok: bool ``[N]``, the sequence is stored data. ``Replayer.sample`` outside
        ``jit`` raises when no ring holds ``L`` steps; under ``jit`` it cannot,
        so it returns rows of zeros with ``ok`` False (and ``same_episode``
        False): mask with it, or check ``can_sample`` first. From
        ``replay_all``: ``[B]``, the env's ring is not empty.
    """

    env_index: jax.Array
    start: jax.Array
    same_episode: jax.Array
    crosses_episode: jax.Array
    ok: jax.Array


@struct.dataclass
class PrioritizedInfo(ReplayInfo):
    """[`ReplayInfo`][jaxsample.replay.ReplayInfo] of `prioritized`'s ``sample``,
    with what ``update_priorities`` and an importance-weighted loss need.

    Attributes:
      slot: int32 ``[N]``, the ring slot of each sequence's first step (the
        step whose priority drew it); ``update_priorities`` writes there.
      probability: float32 ``[N]``, the probability ``P(i) = p_i^alpha /
        sum_k p_k^alpha`` with which the sequence was drawn (0 where ``ok`` is
        False).
      weight: float32 ``[N]``, the importance weight ``(N_valid * P(i))^-beta``
        normalized by its largest value over every start in the buffer, i.e.
        ``(P_min / P(i))^beta`` (Schaul et al. 2016), in ``(0, 1]`` (0 where
        ``ok`` is False).
    """

    slot: jax.Array
    probability: jax.Array
    weight: jax.Array


@dataclasses.dataclass(frozen=True, eq=False)
class Replayer:
    """A replay buffer as pure functions; build it with
    `one_time`, `uniform` or
    [`cycle_one_time`][jaxsample.replay.cycle_one_time].

    The functions are pure and jittable (callers jit; donate the state to
    ``add`` so the write happens in place)::

        init() -> ReplayState
        add(state, batch, agent_state=None, *, env_ids=None, env_mask=None) -> ReplayState
        sample(state, key, batch_size, sequence_length) -> (Samples, ReplayInfo)
        replay_all(state) -> (Samples, ReplayInfo)
        can_sample(state, sequence_length=1) -> bool []

    * ``init()``: an empty buffer, leaves ``[B, capacity, ...]`` (see
      [`ReplayState`][jaxsample.replay.ReplayState]); unwritten slots hold
      zeros with ``valid`` False and ``done`` True.
    * ``add(state, batch, agent_state=None)``: write the ``T`` steps of each of
      the ``B`` envs of ``batch`` (a [`Batch`][jaxsample.types.Batch] from
      ``sampler.collect`` or its [`Samples`][jaxsample.types.Samples], leaves
      ``[T, B, ...]``) into its ring. ``O(T * B)``: a scatter of the new steps
      at modular indices, in place when the caller donates ``state``
      (``jax.jit(rep.add, donate_argnums=0)``). When ``T > capacity`` only the
      last ``capacity`` steps are kept. The per-step structure must match
      ``examples`` (checked at trace time, with an error naming the field); the
      final observation is read through ``samples.env.final_observation``
      (sparse or dense store). ``agent_state``: with ``store_agent_state=True``,
      the agent's recurrent state before each step, leaves ``[T, B, *state]``
      matching ``examples.agent.initial_state`` (the state ``agent.step`` was
      given at step ``t``); it defaults to ``samples.agent.state``, which a
      sampler built with ``store_agent_state=True`` fills. It must be None when
      the replayer does not store agent states. Some envs only (ALF's
      ``env_ids``): ``env_ids`` (int ``[M]``, distinct, in ``0..B-1``) writes
      the ``M`` envs of a batch with leaves ``[T, M, ...]`` to those rings;
      ``env_mask`` (bool ``[B]``, may be traced, e.g. the valid envs) writes
      only the masked envs of a ``[T, B]`` batch. The other rings, their
      positions and fill levels are untouched. ``env_ids`` is checked outside
      ``jit``; under ``jit`` out-of-range ids are dropped.
      `one_time` refuses both (it keeps whole batches).
    * ``sample(state, key, batch_size, sequence_length)``: draw ``batch_size``
      contiguous sequences of ``sequence_length`` steps, uniformly (with
      replacement) over the stored (env, start) pairs at which a whole sequence
      fits: every pair has probability ``1 / sum_b (filled[b] -
      sequence_length + 1)`` (rings holding fewer steps than a sequence are
      skipped). While every ring holds as many steps (``add`` of all envs) the
      env is drawn uniformly from ``0 .. B-1`` and the start independently.
      Steps are in time order and contiguous; sequences may cross episode
      boundaries (see [`ReplayInfo`][jaxsample.replay.ReplayInfo]). Call only when ``can_sample`` is
      True: before that, sequences start at the oldest step and run into
      padding (``valid`` False). ``batch_size`` and ``sequence_length`` are static Python ints
      (mark them ``static_argnums`` under ``jax.jit``). Returns a time-major
      ``Samples`` with leaves ``[sequence_length, batch_size, ...]``
      (``env.final_store`` the dense final observation; ``agent.initial_state``
      the stored recurrent state before each sequence's first step
      ``[batch_size, ...]`` with ``store_agent_state=True``, else ``()``;
      ``bootstrap_value`` None) and a [`ReplayInfo`][jaxsample.replay.ReplayInfo].
    * ``replay_all(state)``: every stored step, each ring in time order, oldest
      first: a time-major ``Samples`` with leaves ``[capacity, B, ...]``. While a
      ring is not full its first ``capacity - filled`` rows are padding (zeros,
      ``valid`` False, ``done`` True); ``info.start`` is ``filled - capacity``.
      ``agent.initial_state`` is the stored state before row 0 with
      ``store_agent_state=True``, else ``()``; `one_time`
      returns the last batch's own ``agent.initial_state`` and
      ``bootstrap_value`` instead. Pure: the state is not consumed; calling it
      once after each ``add`` uses every step once
      ([`cycle_one_time`][jaxsample.replay.cycle_one_time]: twice for each batch's last
      step).
    * ``can_sample(state, sequence_length=1)``: some ring holds at least
      ``sequence_length`` steps, so ``sample`` returns stored data (with ``add``
      of all envs at once: every ring does).

    Attributes:
      kind: ``"one_time"``, ``"uniform"``, ``"cycle_one_time"`` or
        ``"prioritized"``: the factory that built it (a label for messages;
        nothing branches on it).
      num_envs: ``B``, the number of envs (rings).
      capacity: steps per ring.
      unroll_length: the number of steps ``add`` requires per call (``T``), or
        None when any ``T`` is accepted (`uniform`).
      store_agent_state: whether the agent's recurrent state is stored per step.
      examples: the ``sampler.examples`` the buffer was allocated from.
      init: ``init()``, above.
      add: ``add(state, batch, agent_state=None, *, env_ids=None,
        env_mask=None)``, above.
      sample: ``sample(state, key, batch_size, sequence_length)``, above.
      replay_all: ``replay_all(state)``, above.
      can_sample: ``can_sample(state, sequence_length=1)``, above.
    """

    kind: str
    num_envs: int
    capacity: int
    unroll_length: int | None
    store_agent_state: bool
    examples: Samples
    init: Callable[[], ReplayState]
    add: Callable[..., ReplayState]  # (state, batch, agent_state=None, *, env_ids, env_mask)
    sample: Callable[[ReplayState, jax.Array, int, int], tuple[Samples, ReplayInfo]]
    replay_all: Callable[[ReplayState], tuple[Samples, ReplayInfo]]
    can_sample: Callable[..., jax.Array]  # (state, sequence_length=1)


@dataclasses.dataclass(frozen=True, eq=False)
class PrioritizedReplayer(Replayer):
    """A [`Replayer`][jaxsample.replay.Replayer] that samples by priority; build it with
    `prioritized`.

    Its ``sample(state, key, batch_size, sequence_length, beta=None)`` returns
    a [`PrioritizedInfo`][jaxsample.replay.PrioritizedInfo]; ``beta``
    (float, may be traced, e.g. annealed) defaults to `beta`. One function
    more::

        update_priorities(state, info, priority) -> ReplayState

    writes ``priority`` (float ``[N]``, >= 0, e.g. ``|td| + eps``) for the
    sampled sequences of ``info`` (their first steps' slots); rows with
    ``info.ok`` False are skipped, and for a start drawn twice one of its
    values is kept.

    Attributes:
      alpha: the priority exponent (0: uniform over stored starts).
      beta: the default importance-weight exponent.
      update_priorities: the function above.
    """

    alpha: float
    beta: float
    update_priorities: Callable[..., ReplayState]  # (state, info, priority)

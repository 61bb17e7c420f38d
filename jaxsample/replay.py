"""Experience replayers (ALF's ``exp_replayer``) as pure functions.

Three factories, all built from ``sampler.examples`` (one step of
:class:`~jaxsample.types.Samples`, leaves ``jax.ShapeDtypeStruct``):

* :func:`one_time` keeps the latest unroll only; :meth:`Replayer.replay_all`
  returns it, so every step is used once (on-policy learners).
* :func:`uniform` keeps a ring of ``capacity`` steps per env and samples
  contiguous sequences uniformly over (env, start position) pairs.
* :func:`cycle_one_time` keeps a ring of ``unroll_length + 1`` steps per env:
  :meth:`Replayer.replay_all` returns the latest unroll preceded by the last
  step of the previous one, so consecutive windows overlap by exactly one step
  and the last step of every unroll, whose value target needs the next step,
  is trained as the first step of the next window (ALF's reason for it).

Each factory validates its arguments eagerly and returns a frozen
:class:`Replayer` whose functions are pure and jittable (callers jit; donate the
state to :meth:`Replayer.add` so the write happens in place)::

    rep = js.replay.uniform(sampler.examples, B, capacity=10_000)
    add = jax.jit(rep.add, donate_argnums=0)
    sample = jax.jit(rep.sample, static_argnums=(2, 3))
    buf = rep.init()
    buf = add(buf, batch)                       # O(T * B), in place
    seq, info = sample(buf, key, 256, 8)        # Samples [8, 256, ...]

Storage layout: every stored leaf is ``[B, capacity, ...]``, one ring per env.
All ``B`` rings advance together (``add`` takes the ``T`` steps of all ``B``
envs), so one write position serves them all. Outputs are time-major
``Samples`` whose leaves are ``[L, N, ...]`` (sequence length, number of
sequences), with ``env.final_store`` the dense true next observation (read it
as ``samples.env.final_observation``, as for a collected batch). What is stored
is the batch's ``final_observation``: with the sampler's default sparse store it
is zeros on terminated steps (never bootstrapped from); build the sampler with
``final_observation="dense"`` to keep those too.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsample._checks import check_int as _check_int
from jaxsample._checks import check_key as _check_key
from jaxsample.types import (
    AgentSamples,
    Batch,
    EnvSamples,
    PyTree,
    Samples,
    SparseFinalObservation,
)

__all__ = [
    "MAX_CAPACITY",
    "ReplayInfo",
    "ReplayState",
    "Replayer",
    "cycle_one_time",
    "one_time",
    "uniform",
]

ReplayKind = Literal["one_time", "uniform", "cycle_one_time"]

# Largest ring: positions are int32 and ``position + offset`` (both < capacity)
# must not overflow, so capacity <= 2**30 keeps every intermediate < 2**31.
MAX_CAPACITY = 2**30


@struct.dataclass
class ReplayState:
    """The replay buffer: ``B`` rings of ``capacity`` steps.

    Attributes:
      data: a :class:`~jaxsample.types.Samples` whose leaves are
        ``[B, capacity, ...]`` (one ring per env): the per-step fields of
        ``examples``, with ``env.final_store`` the dense true next observation
        ``[B, capacity, *obs]`` and ``agent.initial_state`` the agent's recurrent
        state before each step ``[B, capacity, *state]`` when the replayer was
        built with ``store_agent_state=True`` (else ``()``);
        ``bootstrap_value`` is None. Slots never written hold zeros with
        ``valid`` False and ``done`` True, like the sampler's idle steps.
      position: int32 ``[]``, the slot the next step is written to, in
        ``[0, capacity)``. It is kept modulo ``capacity``, so it cannot
        overflow however many steps are added.
      filled: int32 ``[]``, the number of written slots of each ring; it
        saturates at ``capacity`` (so it cannot overflow either). The stored
        steps of each env are, oldest first, the slots
        ``(position - filled) % capacity, ..., (position - 1) % capacity``.
      batch_initial_state: :func:`one_time` only (else ``()``): the last batch's
        ``samples.agent.initial_state`` ``[B, ...]``.
      batch_bootstrap_value: :func:`one_time` only, when ``examples`` has one
        (else None): the last batch's ``samples.bootstrap_value`` ``[B]``.
    """

    data: Samples
    position: jax.Array
    filled: jax.Array
    batch_initial_state: PyTree = ()
    batch_bootstrap_value: jax.Array | None = None


@struct.dataclass
class ReplayInfo:
    """Where replayed sequences come from, and which of their steps to use.

    For ``N`` sequences of ``L`` steps:

    Attributes:
      env_index: int32 ``[N]``, the env (ring) each sequence comes from.
      start: int32 ``[N]``, the position of each sequence's first step counted
        from the oldest step stored for its env (``0 .. filled - L`` for
        :meth:`Replayer.sample`). From :meth:`Replayer.replay_all` it is
        ``filled - capacity``: negative while the ring is not yet full, meaning
        that many leading rows are padding (``valid`` False, ``done`` True).
      same_episode: bool ``[L, N]``, the step is valid and belongs to the same
        episode as the sequence's first valid step (no valid ``done`` step
        before it in the sequence). Sequences may cross episode boundaries:
        mask per-step losses with this, or use ``done``/``valid`` directly.
      crosses_episode: bool ``[N]``, the sequence holds valid steps of more than
        one episode (``same_episode`` is not ``valid`` everywhere).
    """

    env_index: jax.Array
    start: jax.Array
    same_episode: jax.Array
    crosses_episode: jax.Array


def _spec_str(shape: tuple[int, ...], dtype: Any) -> str:
    return f"{np.dtype(dtype).name}{list(shape)}"


def _per_step(samples: Samples, agent_state: PyTree, final_observation: PyTree) -> Samples:
    """The stored fields of ``samples`` (leaves ``[T, B, ...]``), in storage layout."""
    env = samples.env
    return Samples(
        env=EnvSamples(
            observation=env.observation,
            reward=env.reward,
            prev_reward=env.prev_reward,
            terminated=env.terminated,
            truncated=env.truncated,
            done=env.done,
            env_info=env.env_info,
            final_store=final_observation,
        ),
        agent=AgentSamples(
            action=samples.agent.action,
            prev_action=samples.agent.prev_action,
            agent_info=samples.agent.agent_info,
            initial_state=agent_state,
        ),
        valid=samples.valid,
        bootstrap_value=None,
    )


# Names of the stored fields, for error messages.
_FIELDS: tuple[tuple[str, Any], ...] = (
    ("env.observation", lambda s: s.env.observation),
    ("env.reward", lambda s: s.env.reward),
    ("env.prev_reward", lambda s: s.env.prev_reward),
    ("env.terminated", lambda s: s.env.terminated),
    ("env.truncated", lambda s: s.env.truncated),
    ("env.done", lambda s: s.env.done),
    ("env.env_info", lambda s: s.env.env_info),
    ("env.final_observation", lambda s: s.env.final_store),
    ("agent.action", lambda s: s.agent.action),
    ("agent.prev_action", lambda s: s.agent.prev_action),
    ("agent.agent_info", lambda s: s.agent.agent_info),
    ("agent_state", lambda s: s.agent.initial_state),
    ("valid", lambda s: s.valid),
)


def _check_tree(
    name: str, expected: PyTree, got: PyTree, lead: tuple[int, ...], lead_str: str
) -> None:
    """Raise a ValueError naming ``name`` unless ``got`` is ``expected`` with ``lead`` axes."""
    e_leaves, e_def = jax.tree_util.tree_flatten_with_path(expected)
    g_leaves, g_def = jax.tree_util.tree_flatten_with_path(got)
    if e_def != g_def:
        raise ValueError(
            f"replay add: field {name} has structure {g_def}, but the replayer was "
            f"built for {e_def} (from examples)"
        )
    for (path, e), (_, g) in zip(e_leaves, g_leaves, strict=True):
        shape, dtype = tuple(jnp.shape(g)), jnp.result_type(g)
        want = lead + tuple(e.shape)
        if shape != want or dtype != e.dtype:
            where = f"{name}{jax.tree_util.keystr(path)}"
            raise ValueError(
                f"replay add: field {where} must be {lead_str} + one step "
                f"{_spec_str(e.shape, e.dtype)} = {_spec_str(want, e.dtype)}, got "
                f"{_spec_str(shape, dtype)}"
            )


def _episode_mask(done: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(same_episode [L, N], crosses_episode [N])`` from ``done``/``valid`` ``[L, N]``."""
    ends = done & valid
    ends_before = jnp.cumsum(ends, axis=0, dtype=jnp.int32) - ends.astype(jnp.int32)
    same = valid & (ends_before == 0)
    crosses = jnp.any(valid & ~same, axis=0)
    return same, crosses


@dataclasses.dataclass(frozen=True, eq=False)
class Replayer:
    """A replay buffer as pure functions; build it with :func:`one_time`,
    :func:`uniform` or :func:`cycle_one_time`.

    Attributes:
      kind: ``"one_time"``, ``"uniform"`` or ``"cycle_one_time"``.
      num_envs: ``B``, the number of envs (rings).
      capacity: steps per ring.
      unroll_length: the number of steps ``add`` requires per call (``T``), or
        None when any ``T`` is accepted (:func:`uniform`).
      store_agent_state: whether the agent's recurrent state is stored per step.
      examples: the ``sampler.examples`` the buffer was allocated from.
    """

    kind: ReplayKind
    num_envs: int
    capacity: int
    unroll_length: int | None
    store_agent_state: bool
    examples: Samples

    # ----------------------------------------------------------------- init
    def init(self) -> ReplayState:
        """An empty buffer; leaves ``[B, capacity, ...]`` (see :class:`ReplayState`).

        Unwritten slots hold zeros with ``valid`` False and ``done`` True.
        """
        lead = (self.num_envs, self.capacity)
        spec = self._stored_spec()

        def zeros(s: jax.ShapeDtypeStruct) -> jax.Array:
            return jnp.zeros(lead + tuple(s.shape), s.dtype)

        data = jax.tree.map(zeros, spec)
        data = data.replace(
            env=data.env.replace(done=jnp.ones(lead, bool)), valid=jnp.zeros(lead, bool)
        )
        initial_state: PyTree = ()
        bootstrap = None
        if self.kind == "one_time":
            initial_state = jax.tree.map(
                lambda s: jnp.zeros((self.num_envs, *s.shape), s.dtype),
                self.examples.agent.initial_state,
            )
            if self.examples.bootstrap_value is not None:
                bootstrap = jnp.zeros((self.num_envs,), jnp.float32)
        return ReplayState(
            data=data,
            position=jnp.zeros((), jnp.int32),
            filled=jnp.zeros((), jnp.int32),
            batch_initial_state=initial_state,
            batch_bootstrap_value=bootstrap,
        )

    # ------------------------------------------------------------------ add
    def add(
        self, state: ReplayState, batch: Batch | Samples, agent_state: PyTree = None
    ) -> ReplayState:
        """Write the ``T`` steps of each of the ``B`` envs of ``batch`` into its ring.

        ``O(T * B)``: a scatter of the new steps at modular indices, in place
        when the caller donates ``state`` (``jax.jit(rep.add, donate_argnums=0)``).
        When ``T > capacity`` only the last ``capacity`` steps are kept.

        Args:
          state: the :class:`ReplayState` from :meth:`init` or a previous ``add``.
          batch: a :class:`~jaxsample.types.Batch` from ``sampler.collect`` or its
            :class:`~jaxsample.types.Samples` (leaves ``[T, B, ...]``); the
            per-step structure must match ``examples`` (checked at trace time,
            with an error naming the field). The final observation is read
            through ``samples.env.final_observation`` (sparse or dense store).
          agent_state: with ``store_agent_state=True``, the agent's recurrent
            state before each step, leaves ``[T, B, *state]`` matching
            ``examples.agent.initial_state`` (the state ``agent.step`` was given
            at step ``t``). Defaults to ``samples.agent.state``, which a sampler
            built with ``store_agent_state=True`` fills. Must be None when the
            replayer does not store agent states.

        Returns:
          The new state.
        """
        if not isinstance(state, ReplayState):
            raise TypeError(f"state must be the ReplayState from init(), got {type(state)}")
        samples = batch.samples if isinstance(batch, Batch) else batch
        if not isinstance(samples, Samples):
            raise TypeError(
                f"batch must be a jaxsample Batch or Samples, got {type(batch).__name__}"
            )
        reward_shape = tuple(jnp.shape(samples.env.reward))
        if len(reward_shape) != 2:
            raise ValueError(
                f"replay add: field env.reward must be [T, B], got shape {list(reward_shape)}"
            )
        T, B = reward_shape
        if self.num_envs != B:
            raise ValueError(f"replay add: the batch has B={B} envs, this replayer {self.num_envs}")
        if self.unroll_length is not None and self.unroll_length != T:
            raise ValueError(
                f"replay add: {self.kind} needs batches of T={self.unroll_length} steps, got T={T}"
            )
        state_spec = self._agent_state_spec()
        if self.store_agent_state:
            if agent_state is None:
                agent_state = samples.agent.state  # sampler's store_agent_state=True
            if agent_state is None:
                if jax.tree.leaves(state_spec):
                    raise TypeError(
                        "replay add: store_agent_state=True needs agent_state, the agent's "
                        "recurrent state before each step with leaves [T, B, *state]: build "
                        "the sampler with store_agent_state=True or pass agent_state"
                    )
                agent_state = state_spec
        elif agent_state is not None:
            raise ValueError("replay add: agent_state given, but store_agent_state=False")
        else:
            agent_state = ()
        expected = self._stored_spec()
        # Check the raw fields first: the final observation is computed from them.
        new = _per_step(samples, agent_state, expected.env.final_store)
        for name, get in _FIELDS:
            if name != "env.final_observation":
                _check_tree(name, get(expected), get(new), (T, B), "[T, B]")
        new = _per_step(samples, agent_state, samples.env.final_observation)
        _check_tree(
            "env.final_observation", expected.env.final_store, new.env.final_store, (T, B), "[T, B]"
        )

        C = self.capacity
        keep = min(T, C)
        if keep < T:  # only the last `capacity` steps survive
            new = jax.tree.map(lambda x: x[T - keep :], new)
        swapped = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), new)  # [B, keep, ...]
        if self.kind == "one_time":  # the unroll replaces the whole ring
            data = swapped
        else:
            first = (state.position + (T - keep) % C) % C
            slots = (first + jnp.arange(keep, dtype=jnp.int32)) % C
            data = jax.tree.map(
                lambda buf, x: buf.at[:, slots].set(
                    x, unique_indices=True, mode="promise_in_bounds"
                ),
                state.data,
                swapped,
            )
        state = state.replace(
            data=data,
            position=(state.position + T % C) % C,
            filled=jnp.minimum(state.filled + keep, C),
        )
        if self.kind == "one_time":
            _check_tree(
                "agent.initial_state",
                self.examples.agent.initial_state,
                samples.agent.initial_state,
                (B,),
                "[B]",
            )
            state = state.replace(batch_initial_state=samples.agent.initial_state)
            if self.examples.bootstrap_value is not None:
                if samples.bootstrap_value is None:
                    raise ValueError(
                        "replay add: field bootstrap_value is None, but examples has one"
                    )
                _check_tree(
                    "bootstrap_value",
                    self.examples.bootstrap_value,
                    samples.bootstrap_value,
                    (B,),
                    "[B]",
                )
                state = state.replace(batch_bootstrap_value=samples.bootstrap_value)
        return state

    # --------------------------------------------------------------- sample
    def sample(
        self, state: ReplayState, key: jax.Array, batch_size: int, sequence_length: int
    ) -> tuple[Samples, ReplayInfo]:
        """Draw ``batch_size`` contiguous sequences of ``sequence_length`` steps.

        Each sequence picks its env uniformly from ``0 .. B-1`` and, independently,
        its start uniformly from the ``filled - sequence_length + 1`` positions at
        which a whole sequence fits in that env's stored steps (with
        replacement), so every (env, start) pair has probability
        ``1 / (B * (filled - sequence_length + 1))``. Steps are in time order and
        contiguous; sequences may cross episode boundaries (see
        :class:`ReplayInfo`). Call only when :meth:`can_sample` is True: before
        that, sequences start at the oldest step and run into padding
        (``valid`` False).

        ``batch_size`` and ``sequence_length`` are static Python ints (mark them
        ``static_argnums`` under ``jax.jit``).

        Returns:
          ``(samples, info)``: a time-major :class:`~jaxsample.types.Samples`
          with leaves ``[sequence_length, batch_size, ...]``
          (``env.final_store`` the dense final observation;
          ``agent.initial_state`` the stored recurrent state before each
          sequence's first step ``[batch_size, ...]`` with
          ``store_agent_state=True``, else ``()``; ``bootstrap_value`` None) and a
          :class:`ReplayInfo`.
        """
        N = _check_int("batch_size", batch_size, 1)
        L = _check_int("sequence_length", sequence_length, 1, self.capacity)
        _check_key(key)
        C = self.capacity
        k_env, k_start = jax.random.split(key)
        env = jax.random.randint(k_env, (N,), 0, self.num_envs, jnp.int32)
        n_starts = jnp.maximum(state.filled - L + 1, 1)
        start = jax.random.randint(k_start, (N,), 0, n_starts, jnp.int32)
        oldest = (state.position - state.filled) % C
        slots = (oldest + start[None, :] + jnp.arange(L, dtype=jnp.int32)[:, None]) % C
        out = jax.tree.map(lambda buf: buf[env[None, :], slots], state.data)  # [L, N, ...]
        initial_state = out.agent.initial_state
        if self.store_agent_state:
            initial_state = jax.tree.map(lambda x: x[0], initial_state)
        out = out.replace(agent=out.agent.replace(initial_state=initial_state))
        same, crosses = _episode_mask(out.env.done, out.valid)
        return out, ReplayInfo(
            env_index=env, start=start, same_episode=same, crosses_episode=crosses
        )

    # ----------------------------------------------------------- replay_all
    def replay_all(self, state: ReplayState) -> tuple[Samples, ReplayInfo]:
        """Every stored step: each ring in time order, oldest first.

        Returns:
          ``(samples, info)``: a time-major :class:`~jaxsample.types.Samples`
          with leaves ``[capacity, B, ...]``. While a ring is not full its first
          ``capacity - filled`` rows are padding (zeros, ``valid`` False, ``done``
          True); ``info.start`` is ``filled - capacity`` (see
          :class:`ReplayInfo`).

          * :func:`one_time`: the last batch (``[T, B, ...]``) with its
            ``agent.initial_state`` and ``bootstrap_value``: the batch's own
            samples with a dense final observation.
          * :func:`cycle_one_time`: ``[unroll_length + 1, B, ...]``, the last
            step of the previous batch then the ``unroll_length`` steps of the
            last one (after the first batch, row 0 is padding).
            ``agent.initial_state`` is the stored state before row 0 with
            ``store_agent_state=True``, else ``()``.
          * :func:`uniform`: the whole ring; ``agent.initial_state`` as for
            ``cycle_one_time``.

        Pure: the state is not consumed; calling it once after each ``add`` uses
        every step once (``cycle_one_time``: twice for each batch's last step).
        """
        C, B = self.capacity, self.num_envs
        if self.kind == "one_time":  # the position is always 0
            out = jax.tree.map(lambda buf: jnp.swapaxes(buf, 0, 1), state.data)
        else:
            slots = (state.position + jnp.arange(C, dtype=jnp.int32)) % C
            out = jax.tree.map(
                lambda buf: jnp.swapaxes(jnp.take(buf, slots, axis=1), 0, 1), state.data
            )
        if self.kind == "one_time":
            agent = out.agent.replace(initial_state=state.batch_initial_state)
            out = out.replace(agent=agent, bootstrap_value=state.batch_bootstrap_value)
        elif self.store_agent_state:
            initial_state = jax.tree.map(lambda x: x[0], out.agent.initial_state)
            out = out.replace(agent=out.agent.replace(initial_state=initial_state))
        same, crosses = _episode_mask(out.env.done, out.valid)
        info = ReplayInfo(
            env_index=jnp.arange(B, dtype=jnp.int32),
            start=jnp.full((B,), state.filled - C, jnp.int32),
            same_episode=same,
            crosses_episode=crosses,
        )
        return out, info

    # ----------------------------------------------------------- can_sample
    def can_sample(self, state: ReplayState, sequence_length: int = 1) -> jax.Array:
        """bool ``[]``: every ring holds at least ``sequence_length`` steps."""
        L = _check_int("sequence_length", sequence_length, 1, self.capacity)
        return state.filled >= L

    # -------------------------------------------------------------- helpers
    def _agent_state_spec(self) -> PyTree:
        return self.examples.agent.initial_state if self.store_agent_state else ()

    def _stored_spec(self) -> Samples:
        """One step of the stored fields, leaves ``jax.ShapeDtypeStruct``."""
        ex = self.examples
        return _specs(
            Samples(
                env=ex.env,
                agent=ex.agent.replace(initial_state=self._agent_state_spec(), state=None),
                valid=ex.valid,
                bootstrap_value=None,
            )
        )


def _specs(tree: PyTree) -> PyTree:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), tree)


def _check_examples(examples: Any) -> Samples:
    if not isinstance(examples, Samples):
        raise TypeError(
            "examples must be sampler.examples (a jaxsample Samples of one step), got "
            f"{type(examples).__name__}"
        )
    if isinstance(examples.env.final_store, SparseFinalObservation):
        raise ValueError(
            "examples.env.final_store must be one dense observation, as in sampler.examples"
        )
    for leaf in jax.tree.leaves(examples):
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise TypeError(
                "examples leaves must be jax.ShapeDtypeStruct or arrays (one step, no T/B "
                f"axes), got {leaf!r}"
            )
    for name, spec in (
        ("examples.env.reward", examples.env.reward),
        ("examples.env.done", examples.env.done),
        ("examples.valid", examples.valid),
    ):
        if tuple(spec.shape) != ():
            raise ValueError(
                f"{name} must be a scalar spec (one step, no T/B axes), got shape "
                f"{list(spec.shape)}"
            )
    return _specs(examples)


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value


def one_time(examples: Samples, B: int, T: int, *, store_agent_state: bool = False) -> Replayer:
    """ALF's OneTimeExperienceReplayer: keeps only the latest unroll.

    Each ``add`` (of exactly ``T`` steps) replaces the buffer;
    :meth:`Replayer.replay_all` returns that batch, so each step is used once.
    :meth:`Replayer.sample` draws sequences from it as :func:`uniform` would.

    Args:
      examples: ``sampler.examples``.
      B: number of envs.
      T: the batch length (``batch_spec.T``); also the capacity.
      store_agent_state: keep the agent's recurrent state per step (ALF's
        ``use_rollout_state``); ``add`` then needs ``agent_state``. The batch's
        ``agent.initial_state`` is kept regardless, for ``replay_all``.
    """
    examples = _check_examples(examples)
    B = _check_int("B", B, 1)
    T = _check_int("T", T, 1, MAX_CAPACITY)
    store_agent_state = _check_bool("store_agent_state", store_agent_state)
    return Replayer("one_time", B, T, T, store_agent_state, examples)


def uniform(
    examples: Samples, B: int, capacity: int, *, store_agent_state: bool = False
) -> Replayer:
    """ALF's uniform replay: a ring of ``capacity`` steps per env.

    ``add`` accepts batches of any length ``T`` (the oldest steps are
    overwritten); :meth:`Replayer.sample` draws contiguous sequences uniformly
    over (env, start) pairs.

    Args:
      examples: ``sampler.examples``.
      B: number of envs.
      capacity: steps kept per env (``1 .. 2**30``); the buffer holds
        ``B * capacity`` steps.
      store_agent_state: keep the agent's recurrent state per step (ALF's
        ``use_rollout_state``); ``add`` then needs ``agent_state`` and sampled
        sequences carry the state before their first step.
    """
    examples = _check_examples(examples)
    B = _check_int("B", B, 1)
    capacity = _check_int("capacity", capacity, 1, MAX_CAPACITY)
    store_agent_state = _check_bool("store_agent_state", store_agent_state)
    return Replayer("uniform", B, capacity, None, store_agent_state, examples)


def cycle_one_time(
    examples: Samples, B: int, unroll_length: int, *, store_agent_state: bool = False
) -> Replayer:
    """ALF's CycleOneTimeExperienceReplayer: a ring of ``unroll_length + 1`` steps.

    Each ``add`` takes exactly ``unroll_length`` steps; :meth:`Replayer.replay_all`
    returns ``[unroll_length + 1, B, ...]``: the last step of the previous
    unroll followed by the latest unroll. Consecutive windows overlap by exactly
    one step, so the last step of each unroll (which a TD/GAE learner can only
    use as a bootstrap target) is trained as the first step of the next window.
    After the first ``add`` row 0 is padding (``valid`` False, ``done`` True).

    Args:
      examples: ``sampler.examples``.
      B: number of envs.
      unroll_length: the batch length ``T`` (``batch_spec.T``).
      store_agent_state: keep the agent's recurrent state per step (ALF's
        ``use_rollout_state``); ``add`` then needs ``agent_state`` and
        ``replay_all`` returns the state before row 0.
    """
    examples = _check_examples(examples)
    B = _check_int("B", B, 1)
    unroll_length = _check_int("unroll_length", unroll_length, 1, MAX_CAPACITY - 1)
    store_agent_state = _check_bool("store_agent_state", store_agent_state)
    return Replayer(
        "cycle_one_time", B, unroll_length + 1, unroll_length, store_agent_state, examples
    )

"""Per-env rings of steps: the read and write helpers every replayer is built from.

Storage layout: every stored leaf is ``[B, capacity, ...]``, one ring per env.
Each ring has its own write position and fill level (``[B]``): ``add`` writes
the ``T`` steps of all ``B`` envs, or of some of them (ALF's ``env_ids``),
leaving the other rings untouched. Reads are time-major: leaves ``[L, N, ...]``
(sequence length, number of sequences).

`replayer` composes the helpers into a [`Replayer`][jaxsample.replay.Replayer]
over one ring (what `uniform` is);
[`cycle_one_time`][jaxsample.replay.cycle_one_time] and `one_time`
build on it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsample._checks import check_bool, check_int, check_key
from jaxsample.replay.steps import (
    as_samples,
    check_env_subset,
    check_examples,
    stored_spec,
    stored_steps,
)
from jaxsample.replay.types import Replayer, ReplayInfo, ReplayState
from jaxsample.types import Batch, PyTree, Samples

__all__ = [
    "allocate",
    "check_fill",
    "episode_mask",
    "has_steps",
    "oldest_slots",
    "read",
    "read_all",
    "replayer",
    "sample_sequences",
    "sequence_slots",
    "target_rows",
    "with_info",
    "write",
    "written_slots",
    "zeros",
]


def zeros(spec: PyTree, lead: tuple[int, ...]) -> PyTree:
    """Zeros of ``spec`` (leaves ``jax.ShapeDtypeStruct``) with ``lead`` axes in front."""
    return jax.tree.map(lambda s: jnp.zeros(lead + tuple(s.shape), s.dtype), spec)


def allocate(spec: Samples, num_envs: int, capacity: int) -> ReplayState:
    """Empty rings of ``spec`` (one stored step): leaves ``[num_envs, capacity, ...]``,
    zeros with ``valid`` False and ``done`` True, like the sampler's idle steps."""
    lead = (num_envs, capacity)
    data = zeros(spec, lead)
    data = data.replace(
        env=data.env.replace(done=jnp.ones(lead, bool)), valid=jnp.zeros(lead, bool)
    )
    return ReplayState(
        data=data,
        position=jnp.zeros((num_envs,), jnp.int32),
        filled=jnp.zeros((num_envs,), jnp.int32),  # a buffer of its own (donation)
    )


def target_rows(
    num_envs: int, env_ids: jax.Array | None, env_mask: jax.Array | None
) -> tuple[jax.Array, bool]:
    """``(rows [M], drop)``: the ring each env of a batch is written to, and whether
    some rows are ``num_envs`` (masked out: scatters must drop them)."""
    if env_ids is not None:  # out of range only when traced (else checked): dropped
        return env_ids, isinstance(env_ids, jax.core.Tracer)
    rows = jnp.arange(num_envs, dtype=jnp.int32)
    if env_mask is None:
        return rows, False
    return jnp.where(env_mask, rows, num_envs), True


def written_slots(
    position: jax.Array, rows: jax.Array, n_steps: int, capacity: int
) -> tuple[int, jax.Array]:
    """``(keep, slots [M, keep])``: the ring slots the last ``keep = min(n_steps,
    capacity)`` of ``n_steps`` new steps of rings ``rows`` go to."""
    C = capacity
    keep = min(n_steps, C)
    first = (position[rows] + (n_steps - keep) % C) % C  # out-of-range rows: clamped
    return keep, (first[:, None] + jnp.arange(keep, dtype=jnp.int32)[None, :]) % C


def write(
    state: ReplayState, steps: Samples, capacity: int, rows: jax.Array, drop: bool = False
) -> ReplayState:
    """Write ``steps`` (leaves ``[T, M, ...]``) to rings ``rows`` (int32 ``[M]``,
    distinct) at each ring's own position; the other rings are untouched.

    A scatter at modular indices (in place when the caller donates ``state``);
    when ``T > capacity`` only the last ``capacity`` steps are kept. With
    ``drop``, rows equal to the number of rings are skipped (a masked write).
    """
    C = capacity
    T = steps.valid.shape[0]
    keep, slots = written_slots(state.position, rows, T, C)
    if keep < T:  # only the last `capacity` steps survive
        steps = jax.tree.map(lambda x: x[T - keep :], steps)
    mode = "drop" if drop else "promise_in_bounds"
    data = jax.tree.map(  # time-major indices: no transpose of the steps
        lambda buf, x: buf.at[rows[None, :], slots.T].set(x, unique_indices=not drop, mode=mode),
        state.data,
        steps,
    )
    position = state.position.at[rows].set((state.position[rows] + T % C) % C, mode=mode)
    filled = state.filled.at[rows].set(jnp.minimum(state.filled[rows] + keep, C), mode=mode)
    return state.replace(data=data, position=position, filled=filled)


def read(data: Samples, slots: jax.Array, env_index: jax.Array | None = None) -> Samples:
    """Stored steps, time-major: leaves ``[L, N, ...]``.

    With ``env_index`` (int32 ``[N]``), step ``l`` of sequence ``n`` is
    ``data[env_index[n], slots[l, n]]`` (``slots`` int32 ``[L, N]``); without,
    slots ``[L]`` of every ring (``N = B``; a plain ``take`` along the ring
    axis, cheaper than the general gather on CPU). ``agent.initial_state``
    is the stored state before row 0, ``[N, ...]`` (``()`` when no state is
    stored).
    """
    if env_index is None:
        out = jax.tree.map(lambda buf: jnp.swapaxes(jnp.take(buf, slots, axis=1), 0, 1), data)
    else:
        out = jax.tree.map(lambda buf: buf[env_index[None, :], slots], data)
    initial_state = jax.tree.map(lambda x: x[0], out.agent.initial_state)
    return out.replace(agent=out.agent.replace(initial_state=initial_state))


def episode_mask(done: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(same_episode [L, N], crosses_episode [N])`` from ``done``/``valid`` ``[L, N]``
    (see [`ReplayInfo`][jaxsample.replay.ReplayInfo])."""
    ends = done & valid
    ends_before = jnp.cumsum(ends, axis=0, dtype=jnp.int32) - ends.astype(jnp.int32)
    same = valid & (ends_before == 0)
    crosses = jnp.any(valid & ~same, axis=0)
    return same, crosses


def with_info(
    out: Samples, env_index: jax.Array, start: jax.Array, ok: jax.Array
) -> tuple[Samples, ReplayInfo]:
    same, crosses = episode_mask(out.env.done, out.valid & ok[None, :])
    info = ReplayInfo(
        env_index=env_index, start=start, same_episode=same, crosses_episode=crosses, ok=ok
    )
    return out, info


def oldest_slots(state: ReplayState, capacity: int) -> jax.Array:
    """int32 ``[B]``: the slot of each ring's oldest stored step."""
    return (state.position - state.filled) % capacity


def check_fill(state: ReplayState, sequence_length: int) -> None:
    """Outside ``jit``: raise unless some ring holds ``sequence_length`` steps."""
    if isinstance(state.filled, jax.core.Tracer):
        return
    filled = np.asarray(state.filled)  # concrete: no op (it may run inside a trace)
    most = int(filled.max())
    if most < sequence_length:
        per = "steps per env" if int(filled.min()) == most else "steps in its fullest ring"
        raise ValueError(
            f"cannot sample sequences of {sequence_length} steps: the buffer holds {most} {per} "
            "(check can_sample(state, sequence_length) first)"
        )


def sequence_slots(first: jax.Array, sequence_length: int, capacity: int) -> jax.Array:
    """int32 ``[L, N]``: the ring slots of sequences starting at slots ``first`` ``[N]``."""
    return (first[None, :] + jnp.arange(sequence_length, dtype=jnp.int32)[:, None]) % capacity


def sample_sequences(
    state: ReplayState,
    key: jax.Array,
    batch_size: int,
    sequence_length: int,
    *,
    num_envs: int,
    capacity: int,
) -> tuple[Samples, ReplayInfo]:
    """``batch_size`` contiguous sequences, uniform over the stored (env, start)
    pairs: ``Replayer.sample``.

    The env of a sequence is drawn with probability proportional to its number
    of starts ``max(filled - L + 1, 0)`` (uniform while all rings hold as many
    steps: writes of all envs at once), then the start uniformly from them.
    """
    N = check_int("batch_size", batch_size, 1)
    L = check_int("sequence_length", sequence_length, 1, capacity)
    check_key(key)
    check_fill(state, L)
    C = capacity
    k_env, k_start = jax.random.split(key)
    n_starts = jnp.maximum(state.filled - L + 1, 0)  # [B]
    lockstep = jnp.all(state.filled == state.filled[0])
    even = jax.random.randint(k_env, (N,), 0, num_envs, jnp.int32)
    cum = jnp.cumsum(n_starts)
    u = jax.random.randint(k_env, (N,), 0, jnp.maximum(cum[-1], 1), jnp.int32)
    weighted = jnp.minimum(jnp.searchsorted(cum, u, side="right"), num_envs - 1)
    env = jnp.where(lockstep, even, weighted.astype(jnp.int32))
    env_starts = n_starts[env]
    start = jax.random.randint(k_start, (N,), 0, jnp.maximum(env_starts, 1), jnp.int32)
    slots = sequence_slots(oldest_slots(state, C)[env] + start, L, C)
    ok = env_starts > 0  # under jit: too few steps stored
    return with_info(read(state.data, slots, env), env, start, ok)


def read_all(state: ReplayState, *, num_envs: int, capacity: int) -> tuple[Samples, ReplayInfo]:
    """Every ring in time order, oldest slot first, ``[capacity, B, ...]``
    (``Replayer.replay_all``)."""
    C = capacity
    env = jnp.arange(num_envs, dtype=jnp.int32)
    slots = (state.position[None, :] + jnp.arange(C, dtype=jnp.int32)[:, None]) % C
    start = state.filled - C
    ok = state.filled > 0
    return with_info(read(state.data, slots, env), env, start, ok)


def has_steps(state: ReplayState, sequence_length: int, capacity: int) -> jax.Array:
    """bool ``[]``: some ring holds at least ``sequence_length`` steps (with writes
    of all envs at once, every ring does)."""
    L = check_int("sequence_length", sequence_length, 1, capacity)
    return jnp.any(state.filled >= L)


def replayer(
    kind: str,
    examples: Samples,
    num_envs: int,
    capacity: int,
    *,
    unroll_length: int | None,
    store_agent_state: bool,
    subsets: bool = True,
) -> Replayer:
    """A [`Replayer`][jaxsample.replay.Replayer] over one ring of ``capacity`` steps per env.

    Validates ``examples``, ``num_envs`` (named ``B`` in errors) and
    ``store_agent_state``; ``capacity`` and ``unroll_length`` (the ``T`` that
    ``add`` requires, or None for any) are the caller's, already checked.
    ``subsets``: ``add`` accepts ``env_ids`` / ``env_mask``.
    """
    examples = check_examples(examples)
    num_envs = check_int("B", num_envs, 1)
    store_agent_state = check_bool("store_agent_state", store_agent_state)
    spec = stored_spec(examples, store_agent_state)

    def init() -> ReplayState:
        return allocate(spec, num_envs, capacity)

    def add(
        state: ReplayState,
        batch: Batch | Samples,
        agent_state: PyTree = None,
        *,
        env_ids: Any = None,
        env_mask: Any = None,
    ) -> ReplayState:
        if not isinstance(state, ReplayState):
            raise TypeError(f"state must be the ReplayState from init(), got {type(state)}")
        env_ids, env_mask = check_env_subset(env_ids, env_mask, num_envs, subsets, kind)
        steps = stored_steps(
            spec,
            as_samples(batch),
            agent_state,
            num_envs=num_envs if env_ids is None else env_ids.shape[0],
            unroll_length=unroll_length,
            store_agent_state=store_agent_state,
            kind=kind,
            envs_from="env_ids" if env_ids is not None else "this replayer",
        )
        return write(state, steps, capacity, *target_rows(num_envs, env_ids, env_mask))

    def sample(
        state: ReplayState, key: jax.Array, batch_size: int, sequence_length: int
    ) -> tuple[Samples, ReplayInfo]:
        return sample_sequences(
            state, key, batch_size, sequence_length, num_envs=num_envs, capacity=capacity
        )

    def replay_all(state: ReplayState) -> tuple[Samples, ReplayInfo]:
        return read_all(state, num_envs=num_envs, capacity=capacity)

    def can_sample(state: ReplayState, sequence_length: int = 1) -> jax.Array:
        return has_steps(state, sequence_length, capacity)

    return Replayer(
        kind=kind,
        num_envs=num_envs,
        capacity=capacity,
        unroll_length=unroll_length,
        store_agent_state=store_agent_state,
        examples=examples,
        init=init,
        add=add,
        sample=sample,
        replay_all=replay_all,
        can_sample=can_sample,
    )

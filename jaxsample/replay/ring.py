"""Per-env rings of steps: the read and write helpers every replayer is built from.

Storage layout: every stored leaf is ``[B, capacity, ...]``, one ring per env.
All ``B`` rings advance together (``add`` takes the ``T`` steps of all ``B``
envs), so one write position serves them all. Reads are time-major: leaves
``[L, N, ...]`` (sequence length, number of sequences).

:func:`replayer` composes the helpers into a :class:`~jaxsample.replay.Replayer`
over one ring (what :func:`~jaxsample.replay.uniform` is);
:func:`~jaxsample.replay.cycle_one_time` and :func:`~jaxsample.replay.one_time`
build on it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxsample._checks import check_int, check_key
from jaxsample.replay.steps import (
    as_samples,
    check_bool,
    check_examples,
    stored_spec,
    stored_steps,
)
from jaxsample.replay.types import Replayer, ReplayInfo, ReplayState
from jaxsample.types import Batch, PyTree, Samples

__all__ = [
    "allocate",
    "episode_mask",
    "has_steps",
    "read",
    "read_all",
    "replayer",
    "sample_sequences",
    "write",
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
        data=data, position=jnp.zeros((), jnp.int32), filled=jnp.zeros((), jnp.int32)
    )


def write(state: ReplayState, steps: Samples, capacity: int) -> ReplayState:
    """Write ``steps`` (leaves ``[T, B, ...]``) at the ring position.

    A scatter at modular indices (in place when the caller donates ``state``);
    when ``T > capacity`` only the last ``capacity`` steps are kept.
    """
    C = capacity
    T = steps.valid.shape[0]
    keep = min(T, C)
    if keep < T:  # only the last `capacity` steps survive
        steps = jax.tree.map(lambda x: x[T - keep :], steps)
    first = (state.position + (T - keep) % C) % C
    slots = (first + jnp.arange(keep, dtype=jnp.int32)) % C
    data = jax.tree.map(
        lambda buf, x: buf.at[:, slots].set(
            jnp.swapaxes(x, 0, 1), unique_indices=True, mode="promise_in_bounds"
        ),
        state.data,
        steps,
    )
    return state.replace(
        data=data,
        position=(state.position + T % C) % C,
        filled=jnp.minimum(state.filled + keep, C),
    )


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
    (see :class:`~jaxsample.replay.ReplayInfo`)."""
    ends = done & valid
    ends_before = jnp.cumsum(ends, axis=0, dtype=jnp.int32) - ends.astype(jnp.int32)
    same = valid & (ends_before == 0)
    crosses = jnp.any(valid & ~same, axis=0)
    return same, crosses


def _with_info(
    out: Samples, env_index: jax.Array, start: jax.Array, ok: jax.Array
) -> tuple[Samples, ReplayInfo]:
    same, crosses = episode_mask(out.env.done, out.valid & ok[None, :])
    info = ReplayInfo(
        env_index=env_index, start=start, same_episode=same, crosses_episode=crosses, ok=ok
    )
    return out, info


def sample_sequences(
    state: ReplayState,
    key: jax.Array,
    batch_size: int,
    sequence_length: int,
    *,
    num_envs: int,
    capacity: int,
) -> tuple[Samples, ReplayInfo]:
    """``batch_size`` contiguous sequences, uniform over (env, start): ``Replayer.sample``."""
    N = check_int("batch_size", batch_size, 1)
    L = check_int("sequence_length", sequence_length, 1, capacity)
    check_key(key)
    if not isinstance(state.filled, jax.core.Tracer) and int(state.filled) < L:
        raise ValueError(
            f"cannot sample sequences of {L} steps: the buffer holds {int(state.filled)} "
            "steps per env (check can_sample(state, sequence_length) first)"
        )
    C = capacity
    k_env, k_start = jax.random.split(key)
    env = jax.random.randint(k_env, (N,), 0, num_envs, jnp.int32)
    n_starts = jnp.maximum(state.filled - L + 1, 1)
    start = jax.random.randint(k_start, (N,), 0, n_starts, jnp.int32)
    oldest = (state.position - state.filled) % C
    slots = (oldest + start[None, :] + jnp.arange(L, dtype=jnp.int32)[:, None]) % C
    ok = jnp.broadcast_to(state.filled >= L, (N,))  # under jit: too few steps stored
    return _with_info(read(state.data, slots, env), env, start, ok)


def read_all(state: ReplayState, *, num_envs: int, capacity: int) -> tuple[Samples, ReplayInfo]:
    """Every ring in time order, oldest slot first, ``[capacity, B, ...]``
    (``Replayer.replay_all``)."""
    C = capacity
    slots = (state.position + jnp.arange(C, dtype=jnp.int32)) % C
    env = jnp.arange(num_envs, dtype=jnp.int32)
    start = jnp.full((num_envs,), state.filled - C, jnp.int32)
    ok = jnp.broadcast_to(state.filled > 0, (num_envs,))
    return _with_info(read(state.data, slots), env, start, ok)


def has_steps(state: ReplayState, sequence_length: int, capacity: int) -> jax.Array:
    """bool ``[]``: every ring holds at least ``sequence_length`` steps."""
    L = check_int("sequence_length", sequence_length, 1, capacity)
    return state.filled >= L


def replayer(
    kind: str,
    examples: Samples,
    num_envs: int,
    capacity: int,
    *,
    unroll_length: int | None,
    store_agent_state: bool,
) -> Replayer:
    """A :class:`~jaxsample.replay.Replayer` over one ring of ``capacity`` steps per env.

    Validates ``examples``, ``num_envs`` (named ``B`` in errors) and
    ``store_agent_state``; ``capacity`` and ``unroll_length`` (the ``T`` that
    ``add`` requires, or None for any) are the caller's, already checked.
    """
    examples = check_examples(examples)
    num_envs = check_int("B", num_envs, 1)
    store_agent_state = check_bool("store_agent_state", store_agent_state)
    spec = stored_spec(examples, store_agent_state)

    def init() -> ReplayState:
        return allocate(spec, num_envs, capacity)

    def add(state: ReplayState, batch: Batch | Samples, agent_state: PyTree = None) -> ReplayState:
        if not isinstance(state, ReplayState):
            raise TypeError(f"state must be the ReplayState from init(), got {type(state)}")
        steps = stored_steps(
            spec,
            as_samples(batch),
            agent_state,
            num_envs=num_envs,
            unroll_length=unroll_length,
            store_agent_state=store_agent_state,
            kind=kind,
        )
        return write(state, steps, capacity)

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

"""The host sampler's device side: the compiled functions its host loop calls.

:class:`DeviceSide` holds the agent's part of a host batch, written for ``B``
envs at once (the per-env agent step vmapped): ``start`` (per-env keys and
seeds), ``fresh`` (new episodes' agent inputs), ``begin`` (a batch's record
buffer and agent keys), ``act`` (one step of the agent, written into the
packed record), ``decorrelation_traj`` and ``finish`` (the batch from the host
buffers, with the JAX sampler's own assembly,
:func:`jaxsample.core.assemble.assemble`). :func:`compile_device` jits each of
them once, when the sampler is built (a host loop must call compiled code).

What the agent computes at a step is stored bit-packed into one donated
``[T, B, K]`` uint32 buffer (:func:`pack`, :func:`unpack`): one buffer, not one
per leaf, because every donated buffer adds to the dispatch of each step.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsample.agents.base import null_action
from jaxsample.core import keys as K
from jaxsample.core.assemble import assemble, batch_trajectories, bootstrap_values, final_store
from jaxsample.core.options import SamplerOptions
from jaxsample.core.resets import where_envs
from jaxsample.core.specs import act_checked, initial_agent_state
from jaxsample.host.envs import seed_of
from jaxsample.traj_info import TrajAccumulator
from jaxsample.types import AgentInputs, PyTree


class Record(struct.PyTreeNode):
    """What the agent computes at a step, as the batch stores it."""

    action: PyTree
    agent_info: PyTree
    agent_state: PyTree  # () unless store_agent_state


def _width(spec: Any) -> int:
    """uint32 words one value of ``spec`` takes in the packed record."""
    size = math.prod(spec.shape)
    return 2 * size if jnp.dtype(spec.dtype).itemsize == 8 else size


def _check_packable(spec: Any, what: str) -> None:
    dtype = jnp.dtype(spec.dtype)
    if dtype.kind not in "biuf" or dtype.itemsize not in (1, 2, 4, 8):
        raise TypeError(f"the host sampler cannot store {what} of dtype {dtype}")


def pack(record: Record) -> jax.Array:
    """``[B, K]`` uint32: every leaf of a step's record, bit-cast (32-bit and
    64-bit leaves) or widened (8- and 16-bit ones), side by side. One buffer
    instead of one per leaf: each donated buffer costs the step's dispatch."""

    def word(x: jax.Array) -> jax.Array:
        B = x.shape[0]
        itemsize = x.dtype.itemsize
        if itemsize < 4:
            x = x.astype(jnp.float32 if jnp.issubdtype(x.dtype, jnp.floating) else jnp.int32)
        return jax.lax.bitcast_convert_type(x, jnp.uint32).reshape(B, -1)

    return jnp.concatenate([word(x) for x in jax.tree.leaves(record)], axis=-1)


def unpack(packed: jax.Array, spec: Record) -> Record:
    """The ``[T, B, ...]`` record from the packed ``[T, B, K]`` buffer."""
    lead = packed.shape[:-1]
    out, start = [], 0
    for s in jax.tree.leaves(spec):
        dtype, n = jnp.dtype(s.dtype), _width(s)
        words = packed[..., start : start + n]
        start += n
        if dtype.itemsize == 8:
            x = jax.lax.bitcast_convert_type(words.reshape(*lead, -1, 2), dtype)
        elif dtype.itemsize == 4:
            x = jax.lax.bitcast_convert_type(words, dtype)
        else:
            wide = jnp.float32 if jnp.issubdtype(dtype, jnp.floating) else jnp.int32
            x = jax.lax.bitcast_convert_type(words, wide).astype(dtype)
        out.append(x.reshape(*lead, *s.shape))
    return jax.tree.unflatten(jax.tree.structure(spec), out)


class HostBatch(struct.PyTreeNode):
    """The host-side buffers of one batch, transferred once by ``_finish``."""

    observation: np.ndarray  # [T, B, *obs]
    reward: np.ndarray  # [T, B] float32
    terminated: np.ndarray  # [T, B] bool
    truncated: np.ndarray  # [T, B] bool
    valid: np.ndarray  # [T, B] bool
    env_info: dict[str, np.ndarray]  # [T, B, ...]
    final: np.ndarray  # dense: [T, B, *obs]; sparse: slots [B, K, *obs]
    next_observation: np.ndarray  # [B, *obs]
    last_reward: np.ndarray  # [B] float32, the last step's
    last_done: np.ndarray  # [B] bool, the last step's
    last_active: np.ndarray  # [B] bool: not idle at the last step


@dataclasses.dataclass(frozen=True, eq=False)
class DeviceSide:
    """The device functions of a host sampler (pure; jit them with
    :func:`compile_device`). Build with :func:`make_device`."""

    agent: Any
    options: SamplerOptions
    action_space: Any  # gymnax space of one env's action
    _act_spec: PyTree
    _agent_state_spec: PyTree
    _record_spec: Record
    _record_width: int

    def _initial_states(self) -> PyTree:
        """``agent.initial_state`` of each env's rank, ``[B, ...]``, dtypes fixed."""
        ranks = jnp.asarray(self.options.env_ranks, jnp.int32)
        initial = functools.partial(initial_agent_state, self.agent, self._agent_state_spec)
        return jax.vmap(initial)(ranks)

    def act(
        self,
        carry: dict[str, PyTree],
        packed: jax.Array,
        agent_keys: jax.Array,
        agent_params: PyTree,
        obs: jax.Array,
        reward_prev: jax.Array,
        flags_prev: jax.Array,
        last_action: jax.Array,
    ) -> tuple[dict[str, PyTree], jax.Array, jax.Array]:
        """Step ``t`` of the batch on the device, for the ``B`` envs.

        From the previous step's reward and flags (``[B]``, from the host: bit 0
        done, bit 1 active): the agent's inputs (``prev_action``/``prev_reward``
        zeros after an episode end) and its state (initial after an episode
        end); then the agent acts and the buffers are written at ``t``.
        ``carry`` holds the agent state, the previous action and ``t``.
        """
        t = carry["t"]
        done_prev = (flags_prev & 1).astype(bool)
        if self.options.reset_mode == "auto":  # every env is active
            go, reset, active = ~done_prev, done_prev, jnp.ones_like(done_prev)
        else:
            active_prev = (flags_prev & 2).astype(bool)
            go = active_prev & ~done_prev  # the episode goes on
            reset = active_prev & done_prev
            active = go
        agent_state = where_envs(reset, self._initial_states(), carry["agent_state"])
        prev_action = where_envs(go, last_action, jnp.zeros_like(last_action))
        prev_reward = jnp.where(go, reward_prev, jnp.zeros_like(reward_prev))
        k_agent = jax.lax.dynamic_index_in_dim(agent_keys, t, 0, keepdims=False)
        act = functools.partial(
            act_checked,
            self.agent,
            null_action=null_action(self.action_space),
            state_spec=self._agent_state_spec,
            space=self.action_space,
        )
        inputs = AgentInputs(obs, prev_action, prev_reward)
        step, new_state = jax.vmap(act, in_axes=(None, 0, 0, 0))(
            agent_params, inputs, agent_state, k_agent
        )
        new_state = where_envs(active, new_state, agent_state)

        record = Record(
            action=step.action,
            agent_info=step.agent_info,
            agent_state=agent_state if self.options.store_agent_state else (),
        )
        packed = jax.lax.dynamic_update_index_in_dim(packed, pack(record), t, 0)
        return {"agent_state": new_state, "t": t + 1}, packed, step.action

    def begin(self, key: jax.Array, step: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The zeroed packed record buffer ``[T, B, K]`` of a batch, and the
        agent's keys ``[T, B]`` of its steps (the JAX sampler's schedule)."""
        T, B = self.options.batch_spec
        packed = jnp.zeros((T, B, self._record_width), jnp.uint32)
        keys = jax.vmap(K.EpochKeys.of)(key, step)
        per_step = jax.vmap(K.step_key, in_axes=(0, None, None))
        steps = jnp.arange(T, dtype=jnp.uint32)
        return packed, jax.vmap(per_step, in_axes=(None, 0, None))(keys, steps, K.AGENT)

    def start(self, key: jax.Array) -> dict[str, Any]:
        """Per env, from ``fold_in(key, rank)``: the env's seed, the seed of its
        decorrelation, the run key and the initial agent state."""

        def one(rank: jax.Array) -> dict[str, Any]:
            _, k_decorrelate, k_run = K.env_keys(key, rank)
            return {
                "key": k_run,
                "env_rank": rank,
                "seed": seed_of(key, rank),
                "decorrelation_seed": jax.random.bits(k_decorrelate, dtype=jnp.uint32),
            }

        out = jax.vmap(one)(jnp.asarray(self.options.env_ranks, jnp.int32))
        out.update(self.fresh())
        out["step"] = jnp.zeros((self.options.batch_spec.B,), jnp.uint32)
        return out

    def fresh(self) -> dict[str, Any]:
        """The agent states, trajectory accumulators and previous action and
        reward of new episodes, ``[B, ...]``."""
        B = self.options.batch_spec.B
        traj = jax.vmap(lambda _: TrajAccumulator.zeros(self.options.traj_fields))(jnp.arange(B))
        return {
            "agent_state": self._initial_states(),
            "traj": traj,
            "prev_action": jnp.zeros((B, *self._act_spec.shape), self._act_spec.dtype),
            "prev_reward": jnp.zeros((B,), jnp.float32),
        }

    def decorrelation_traj(
        self,
        traj: TrajAccumulator,
        reward: jax.Array,
        ended: jax.Array,
        valid: jax.Array,
        last_action: jax.Array,
    ) -> tuple[TrajAccumulator, jax.Array, jax.Array]:
        """The accumulators after the decorrelation steps (inputs ``[n, B]``),
        and ``prev_action``/``prev_reward`` after the last of them."""
        go = ~ended[-1]
        prev_action = where_envs(go, last_action, jnp.zeros_like(last_action))
        prev_reward = jnp.where(go, reward[-1], jnp.zeros_like(reward[-1]))
        traj = batch_trajectories(self.options.discount, traj, reward, ended, valid)[0]
        return traj, prev_action, prev_reward

    def finish(
        self,
        packed: jax.Array,
        last_action: jax.Array,
        host: HostBatch,
        key: jax.Array,
        step: jax.Array,
        traj: TrajAccumulator,
        carry: dict[str, PyTree],
        initial_state: PyTree,
        start_prev_action: jax.Array,
        start_prev_reward: jax.Array,
        agent_params: PyTree,
    ) -> dict[str, Any]:
        """The batch from the buffers: ``done``, ``prev_*``, ``TrajInfo``, the
        final-observation store and ``bootstrap_value``; the state's device part."""
        T, _ = self.options.batch_spec
        valid = host.valid

        def on_valid(x: jax.Array) -> jax.Array:
            mask = valid.reshape(valid.shape + (1,) * (x.ndim - 2))
            return jnp.where(mask, x, jnp.zeros_like(x))

        record = unpack(packed, self._record_spec)
        # The inputs after the last step, as the next step would see them.
        go = host.last_active & ~host.last_done
        reset = host.last_active & host.last_done
        agent_state = where_envs(reset, self._initial_states(), carry["agent_state"])
        end_prev_action = where_envs(go, last_action, jnp.zeros_like(last_action))
        end_prev_reward = jnp.where(go, host.last_reward, jnp.zeros_like(host.last_reward))
        bootstrap = None
        if self.options.bootstrap_value:
            inputs = AgentInputs(host.next_observation, end_prev_action, end_prev_reward)
            bootstrap = bootstrap_values(self.agent, agent_params, inputs, agent_state)
        traj, batch = assemble(
            discount=self.options.discount,
            traj=traj,
            observation=host.observation,
            reward=host.reward,
            terminated=host.terminated,
            truncated=host.truncated,
            valid=valid,
            env_info=host.env_info,
            action=jax.tree.map(on_valid, record.action),
            agent_info=jax.tree.map(on_valid, record.agent_info),
            initial_state=initial_state,
            stored_state=jax.tree.map(on_valid, record.agent_state)
            if self.options.store_agent_state
            else None,
            start_prev_action=start_prev_action,
            start_prev_reward=start_prev_reward,
            final=final_store(self.options.final_observation, host.next_observation, host.final),
            bootstrap_value=bootstrap,
            traj_done=self.options.traj_done,
        )
        epoch_keys = jax.vmap(K.EpochKeys.of)(key, step)
        key, step = jax.vmap(K.advance_epoch, in_axes=(0, None))(epoch_keys, T)
        return {
            "batch": batch,
            "agent_state": agent_state,
            "prev_action": end_prev_action,
            "prev_reward": end_prev_reward,
            "traj": traj,
            "key": key,
            "step": step,
        }


def make_device(
    options: SamplerOptions,
    agent: Any,
    action_space: Any,
    act_spec: PyTree,
    agent_state_spec: PyTree,
    agent_info_spec: PyTree,
) -> DeviceSide:
    """The :class:`DeviceSide` of a host sampler with ``options`` and
    ``agent``; a clear
    ``TypeError`` for a record leaf whose dtype cannot be packed."""
    record_spec = Record(
        action=act_spec,
        agent_info=agent_info_spec,
        agent_state=agent_state_spec if options.store_agent_state else (),
    )
    for path, spec in jax.tree_util.tree_flatten_with_path(record_spec)[0]:
        _check_packable(spec, jax.tree_util.keystr(path))
    return DeviceSide(
        agent=agent,
        options=options,
        action_space=action_space,
        _act_spec=act_spec,
        _agent_state_spec=agent_state_spec,
        _record_spec=record_spec,
        _record_width=sum(_width(x) for x in jax.tree.leaves(record_spec)),
    )


class CompiledDevice(NamedTuple):
    """Each device function of a :class:`DeviceSide` jitted once (compiled on
    first use, never retraced for new params)."""

    act: Any
    begin: Any
    finish: Any
    start: Any
    decorrelation_traj: Any
    fresh: Any


def compile_device(device: DeviceSide) -> CompiledDevice:
    """``device``'s functions, each wrapped in ``jax.jit`` once."""
    return CompiledDevice(
        act=jax.jit(device.act, donate_argnums=1),
        begin=jax.jit(device.begin),
        finish=jax.jit(device.finish),
        start=jax.jit(device.start),
        decorrelation_traj=jax.jit(device.decorrelation_traj),
        fresh=jax.jit(device.fresh),
    )


def check_host_traj(options: SamplerOptions, specs: Mapping[str, Any]) -> None:
    """``traj_fields``/``traj_done`` on the host: the env info holds only
    ``info_spec``'s entries, and the host's decorrelation records neither
    observations nor infos (a clear error instead of silently wrong TrajInfo)."""
    extended = bool(options.traj_fields) or options.traj_done is not None
    if extended and options.max_decorrelation_steps:
        raise ValueError(
            "traj_fields / traj_done need max_decorrelation_steps=0 in the host sampler "
            "(its decorrelation does not record the steps they read); the JAX sampler "
            "supports both"
        )
    done = options.traj_done
    if done is not None and done not in specs:
        raise ValueError(
            f"traj_done={done!r} must be an entry of info_spec (the recorded env info), "
            f"got {sorted(specs)}"
        )

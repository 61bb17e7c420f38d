"""The host sampler's device side: the compiled functions its host loop calls.

`DeviceSide` holds the agent's part of a host batch: the JAX samplers'
per-env agent step (`AgentStepper`) vmapped over
the ``B`` envs: ``start`` (per-env keys and seeds), ``fresh`` (new episodes'
agent carry), ``begin`` (a batch's record
buffer and agent keys), ``act`` (one step of the agent, written into the
packed record), ``decorrelation_traj`` and ``finish`` (the batch from the host
buffers, with the JAX sampler's own assembly,
`jaxsample.core.assemble.assemble`). `compile_device` jits each of
them once, when the sampler is built (a host loop must call compiled code).

What the agent computes at a step is stored bit-packed into one donated
``[T, B, K]`` uint32 buffer (`pack`, `unpack`): one buffer, not one
per leaf, because every donated buffer adds to the dispatch of each step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsample.core import keys as K
from jaxsample.core.acting import AgentCarry, AgentStepper, where_leading
from jaxsample.core.assemble import Steps, assemble, batch_trajectories, bootstrap_values
from jaxsample.core.finals import as_batch
from jaxsample.core.options import SamplerOptions
from jaxsample.core.specs import specs
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
    `compile_device`). Build with `make_device`. The agent's half
    of each step is the JAX samplers' own
    (`AgentStepper`, vmapped over the ``B``
    envs): the host holds the observations, the device the agents' carry."""

    options: SamplerOptions
    stepper: AgentStepper
    _record_spec: Record
    _record_width: int

    @property
    def agent(self) -> Any:
        """The agent."""
        return self.stepper.agent

    def act(
        self,
        carry: tuple[AgentCarry, jax.Array],
        packed: jax.Array,
        agent_keys: jax.Array,
        agent_params: PyTree,
        obs: jax.Array,
        reward_prev: jax.Array,
        flags_prev: jax.Array,
        last_action: jax.Array,
    ) -> tuple[tuple[AgentCarry, jax.Array], jax.Array, jax.Array]:
        """Step ``t`` of the batch on the device, for the ``B`` envs.

        From the previous step's action, reward and flags (``[B]``, from the
        host: bit 0 done, bit 1 active) the agents' carry restarts where the
        episode ended or the env idles
        (`after`); then the agent
        acts (an idle env keeps its state) and the buffers are written at
        ``t``. ``carry`` is the agents' carry ``[B]`` and ``t``.
        """
        agent, t = carry
        ended = (flags_prev & 1).astype(bool)
        if self.options.reset_mode != "auto":  # an idle env restarts too
            ended = ended | ~(flags_prev & 2).astype(bool)
        k_agent = jax.lax.dynamic_index_in_dim(agent_keys, t, 0, keepdims=False)
        act = self.stepper.agent_act(agent_params)

        def one(agent: AgentCarry, ended, action, reward, obs, key):
            agent = self.stepper.after(agent, ended, action, reward, agent.agent_state)
            step, new_state = self.stepper.act(agent, obs, act, key)
            if self.options.reset_mode != "auto":  # an idle env's state is kept
                new_state = where_leading(ended, agent.agent_state, new_state)
            return agent.replace(agent_state=new_state), step, agent.agent_state

        agent, step, before = jax.vmap(one)(agent, ended, last_action, reward_prev, obs, k_agent)
        record = Record(
            action=step.action,
            agent_info=step.agent_info,
            agent_state=before if self.options.store_agent_state else (),
        )
        packed = jax.lax.dynamic_update_index_in_dim(packed, pack(record), t, 0)
        return (agent, t + 1), packed, step.action

    def begin(self, keys: K.EpochKeys) -> tuple[jax.Array, jax.Array]:
        """The zeroed packed record buffer ``[T, B, K]`` of a batch, and the
        agent's keys ``[T, B]`` of its steps (the JAX sampler's schedule;
        ``keys``: the envs' ``[B]`` run keys and step counts)."""
        T, B = self.options.batch_spec
        packed = jnp.zeros((T, B, self._record_width), jnp.uint32)
        drawn = jax.vmap(K.batch_step_keys, in_axes=(0, None, None), out_axes=1)(keys, T, False)
        return packed, drawn[0]

    def start(self, key: jax.Array) -> dict[str, Any]:
        """Per env, from ``fold_in(key, rank)``: the env's seed, the seed of its
        decorrelation, the run key, and the agents' carry and trajectory
        accumulators of new episodes."""

        def one(rank: jax.Array) -> dict[str, Any]:
            _, k_decorrelate, k_run = K.env_keys(key, rank)
            return {
                "key": k_run,
                "seed": seed_of(key, rank),
                "decorrelation_seed": jax.random.bits(k_decorrelate, dtype=jnp.uint32),
            }

        out = jax.vmap(one)(jnp.asarray(self.options.env_ranks, jnp.int32))
        out["agent"], out["traj"] = self.fresh()
        out["epoch"] = out["step"] = jnp.zeros((self.options.batch_spec.B,), jnp.uint32)
        return out

    def fresh(self) -> tuple[AgentCarry, TrajAccumulator]:
        """The agents' carry and the trajectory accumulators of new episodes,
        ``[B, ...]``."""
        ranks = jnp.asarray(self.options.env_ranks, jnp.int32)
        traj = jax.vmap(lambda _: TrajAccumulator.zeros(self.options.traj_fields))(ranks)
        return jax.vmap(self.stepper.start)(ranks), traj

    def decorrelation_traj(
        self,
        traj: TrajAccumulator,
        agent: AgentCarry,
        reward: jax.Array,
        ended: jax.Array,
        valid: jax.Array,
        last_action: jax.Array,
    ) -> tuple[TrajAccumulator, AgentCarry]:
        """The accumulators after the decorrelation steps (inputs ``[n, B]``),
        and the agents' carry after the last of them."""
        agent = jax.vmap(self.stepper.after)(
            agent, ended[-1], last_action, reward[-1], agent.agent_state
        )
        traj = batch_trajectories(self.options.discount, traj, reward, ended, valid)[0]
        return traj, agent

    def finish(
        self,
        packed: jax.Array,
        last_action: jax.Array,
        host: HostBatch,
        keys: K.EpochKeys,
        traj: TrajAccumulator,
        carry: tuple[AgentCarry, jax.Array],
        start: AgentCarry,
        agent_params: PyTree,
    ) -> dict[str, Any]:
        """The batch from the buffers: ``done``, ``prev_*``, ``TrajInfo``, the
        final-observation store and ``bootstrap_value``; the state's device
        part (``start``: the agents' carry at the batch start; ``keys``: the
        envs' ``[B]`` run keys and step counts at the batch start)."""
        T, _ = self.options.batch_spec
        valid = host.valid

        def on_valid(x: jax.Array) -> jax.Array:
            mask = valid.reshape(valid.shape + (1,) * (x.ndim - 2))
            return jnp.where(mask, x, jnp.zeros_like(x))

        record = unpack(packed, self._record_spec)
        # The carry after the last step, as the next step would see it.
        ended = ~host.last_active | host.last_done
        agent = carry[0]
        agent = jax.vmap(self.stepper.after)(
            agent, ended, last_action, host.last_reward, agent.agent_state
        )
        bootstrap = None
        if self.options.bootstrap_value:
            inputs = AgentInputs(host.next_observation, agent.prev_action, agent.prev_reward)
            bootstrap = bootstrap_values(self.agent, agent_params, inputs, agent.agent_state)
        stored = record.agent_state if self.options.store_agent_state else None
        steps = Steps.of(
            host,
            action=jax.tree.map(on_valid, record.action),
            agent_info=jax.tree.map(on_valid, record.agent_info),
            agent_state=jax.tree.map(on_valid, stored),
        )
        dense = self.options.final_observation == "dense"
        final = as_batch(dense, host.final, host.next_observation)
        traj, batch = assemble(
            self.options.discount, traj, steps, start, final, bootstrap, self.options.traj_done
        )
        epoch, step = jax.vmap(K.advance_epoch, in_axes=(0, None))(keys, T)
        return {"batch": batch, "agent": agent, "traj": traj, "epoch": epoch, "step": step}


def make_device(
    options: SamplerOptions,
    stepper: AgentStepper,
    agent_info_spec: PyTree,
) -> DeviceSide:
    """The `DeviceSide` of a host sampler with ``options`` and the
    agent's ``stepper``; a clear ``TypeError`` for a record leaf whose dtype
    cannot be packed."""
    record_spec = Record(
        action=specs(stepper.null_action),
        agent_info=agent_info_spec,
        agent_state=stepper.agent_state_spec if options.store_agent_state else (),
    )
    for path, spec in jax.tree_util.tree_flatten_with_path(record_spec)[0]:
        _check_packable(spec, jax.tree_util.keystr(path))
    return DeviceSide(
        options=options,
        stepper=stepper,
        _record_spec=record_spec,
        _record_width=sum(_width(x) for x in jax.tree.leaves(record_spec)),
    )


class CompiledDevice(NamedTuple):
    """Each device function of a `DeviceSide` jitted once (compiled on
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

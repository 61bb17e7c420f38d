"""Scale out: the envs of a sampler spread over a device mesh and over processes.

jaxsample runs on JAX's own SPMD and multi-controller runtime. A sampler built
with ``make_sampler(..., mesh=mesh)`` (or [`shard_sampler`][jaxsample.distributed.shard_sampler]) is
a
[`ShardedSampler`][jaxsample.distributed.ShardedSampler], a wrapper of the one-device sampler: its
``init`` and
``collect`` are ``jax.shard_map``\\ s of the one-device sampler's over the mesh
axis ``mesh_axis``. Each device steps its
own contiguous block of ``B / n_devices`` envs with no communication at all;
the agent's parameters are replicated; the returned state and ``Batch`` are
global arrays sharded along ``B``. It is one compiled program, under the
caller's ``jax.jit``.

Every random draw of an env comes from its *global* rank (see
the key schedule in
`jaxsample.core.keys`), so the samples do not depend on how the envs are
spread: the same key gives the same ``Batch`` on 1, 2 or 8 devices, and on one
process or several (``jax.distributed``), bit for bit.

Several processes: after ``jax.distributed.initialize(...)``, build the mesh
over ``jax.devices()`` (all processes' devices, ordered by process), give every
process the same ``BatchSpec`` (``B`` = the global number of envs) and the same
key. Process ``p`` then steps the envs of global ranks
``range(p * B / P, (p + 1) * B / P)`` (rlpyt's ``env_ranks`` with
``global_B = B``); [`process_local`][jaxsample.distributed.process_local] reads its part of a global
array.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxsample._checks import check_key
from jaxsample.core.masking import has_action_mask
from jaxsample.core.options import SamplerOptions
from jaxsample.core.rollout import Sampler, SamplerState, check_state
from jaxsample.types import (
    AgentSamples,
    Batch,
    BatchSpec,
    EnvSamples,
    PyTree,
    Samples,
    SparseFinalObservation,
)

DEFAULT_AXIS = "envs"


@dataclasses.dataclass(frozen=True, eq=False)
class ShardedSampler:
    """A [`Sampler`][jaxsample.sampler.Sampler] whose ``B`` envs are split over a mesh axis:
    it wraps the one-device sampler ``local`` (``B / n`` envs), whose ``init``
    and ``collect`` each device runs in a ``jax.shard_map``.

    Same contract as [`Sampler`][jaxsample.sampler.Sampler] (``init``, ``collect``,
    ``collect_random``, ``examples``, ``options``; ``batch_spec.B`` is the
    number of envs over the whole mesh). ``init`` returns a
    [`SamplerState`][jaxsample.sampler.SamplerState] whose leaves ``[B, ...]`` are sharded
    along ``B`` over ``mesh_axis``; ``collect`` takes the agent parameters
    replicated and returns a ``Batch`` sharded along ``B`` (axis 1 of the
    ``[T, B, ...]`` leaves, axis 0 of ``initial_state``, ``bootstrap_value``
    and the sparse final-observation store).

    Attributes:
      local: the one-device sampler each shard runs (``B / n`` envs).
      options: the options of the whole mesh (``B`` envs, every env rank).
      mesh: the ``jax.sharding.Mesh``.
      mesh_axis: the name of the mesh axis the envs are split over (the envs
        are replicated over any other axes).
    """

    local: Sampler
    options: SamplerOptions
    mesh: Mesh
    mesh_axis: str = DEFAULT_AXIS

    # What does not depend on the sharding is the local sampler's.
    agent = property(lambda self: self.local.agent, doc="The agent.")
    env = property(lambda self: self.local.env, doc="The env.")
    env_params = property(lambda self: self.local.env_params, doc="The env's parameters.")
    examples = property(lambda self: self.local.examples, doc="One step of ``Samples``.")

    @property
    def batch_spec(self) -> BatchSpec:
        """``BatchSpec(T, B)`` of every batch, ``B`` over the whole mesh."""
        return self.options.batch_spec

    def check_params(self, agent_params: PyTree) -> None:
        """``local.check_params``."""
        self.local.check_params(agent_params)

    @property
    def num_shards(self) -> int:
        """The number of blocks the envs are split into (the mesh axis size)."""
        return int(self.mesh.shape[self.mesh_axis])

    @property
    def state_sharding(self) -> NamedSharding:
        """The sharding of every ``[B, ...]`` leaf of the sampler state."""
        return NamedSharding(self.mesh, P(self.mesh_axis))

    def init(self, key: jax.Array, agent_params: PyTree) -> SamplerState:
        """Start (and decorrelate) the ``B`` envs, each device its own block.

        Args:
          key: a ``jax.random.key``, the same on every process.
          agent_params: the agent's parameters (only their structure is used).

        Returns:
          A [`SamplerState`][jaxsample.sampler.SamplerState] sharded along ``B``.
        """
        check_key(key)
        self.check_params(agent_params)
        # Row d: the global ranks of the d-th block along the mesh axis; each
        # shard takes its own row (eager and under jit alike, no placement).
        ranks = np.asarray(self.options.env_ranks, np.int32)
        blocks = ranks.reshape(self.num_shards, -1)

        def init_block(key: jax.Array) -> SamplerState:
            ranks = jnp.asarray(blocks)[jax.lax.axis_index(self.mesh_axis)]
            return self.local.init_envs(key, ranks)

        init = jax.shard_map(
            init_block,
            mesh=self.mesh,
            in_specs=P(),
            out_specs=P(self.mesh_axis),
            check_vma=False,  # no collectives inside: each shard is independent
        )
        return init(key)

    def collect(self, state: SamplerState, agent_params: PyTree) -> tuple[SamplerState, Batch]:
        """Collect one ``[T, B]`` batch, each device stepping its block of envs
        with ``local.collect``.

        Args:
          state: from [`init`][jaxsample.distributed.ShardedSampler.init] or the previous
              ``collect`` (sharded along ``B``).
          agent_params: the agent's parameters, replicated over the mesh.

        Returns:
          ``(state, batch)`` as [`jaxsample.Sampler.collect`][jaxsample.sampler.Sampler.collect],
          sharded along ``B``.
        """
        return self._sharded(self.local.collect)(state, agent_params)

    def collect_random(
        self, state: SamplerState, agent_params: PyTree
    ) -> tuple[SamplerState, Batch]:
        """[`jaxsample.Sampler.collect_random`][jaxsample.sampler.Sampler.collect_random] on every
        shard."""
        return self._sharded(self.local.collect_random)(state, agent_params)

    def _sharded(self, collect: Any) -> Any:
        """A local ``collect``-like function run on every shard of the mesh."""

        def run(state: SamplerState, agent_params: PyTree) -> tuple[SamplerState, Batch]:
            check_state(state, self.options.batch_spec.B)
            sharded = jax.shard_map(
                collect,
                mesh=self.mesh,
                in_specs=(P(self.mesh_axis), P()),
                out_specs=(P(self.mesh_axis), self.batch_partition()),
                check_vma=False,
            )
            return sharded(state, agent_params)

        return run

    def batch_partition(self) -> Batch:
        """The ``PartitionSpec`` of every part of a collected ``Batch`` (a tree
        prefix of it): ``P(None, axis)`` for ``[T, B, ...]`` leaves, ``P(axis)``
        for ``[B, ...]`` ones."""
        steps, envs = P(None, self.mesh_axis), P(self.mesh_axis)
        if self.options.final_observation == "sparse":
            final_store: Any = SparseFinalObservation(next_observation=envs, slots=envs)
        else:
            final_store = steps
        masked = has_action_mask(self.local.env)  # legal-action masks
        return Batch(
            samples=Samples(
                env=_every_field(
                    EnvSamples,
                    steps,
                    final_store=final_store,
                    action_mask=steps if masked else None,
                    final_mask_store=final_store if masked else None,
                ),
                agent=_every_field(
                    AgentSamples,
                    steps,
                    initial_state=envs,
                    state=steps if self.options.store_agent_state else None,
                ),
                valid=steps,
                bootstrap_value=envs if self.options.bootstrap_value else None,
            ),
            traj_infos=steps,
        )


def _every_field(cls: type, spec: Any, **others: Any) -> Any:
    """A ``cls`` (a dataclass of the batch) with ``spec`` in every field but
    the ``others`` given."""
    return cls(**({f.name: spec for f in dataclasses.fields(cls)} | others))


def check_mesh(mesh: Any, mesh_axis: str, B: int) -> int:
    """Check that ``B`` envs can be split over ``mesh``'s axis ``mesh_axis``.

    Returns the number of shards; raises a ``TypeError``/``ValueError`` naming
    the problem otherwise.
    """
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if not isinstance(mesh_axis, str):
        raise TypeError(f"mesh_axis must be a str, got {mesh_axis!r}")
    if mesh_axis not in mesh.axis_names:
        raise ValueError(
            f"mesh has no axis named {mesh_axis!r} (its axes are {tuple(mesh.axis_names)}); "
            f"pass mesh_axis= one of them"
        )
    n = int(mesh.shape[mesh_axis])
    if B % n:
        raise ValueError(
            f"batch_spec.B={B} is not divisible by the {n} devices of mesh axis "
            f"{mesh_axis!r}; use a multiple of {n}"
        )
    return n


def check_processes_agree(what: str, value: Any) -> None:
    """Raise a ``ValueError`` unless every process passes the same ``value``.

    A collective over all processes (a no-op with one process): call it at
    the same point on every process, e.g. while building a sampler.
    """
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    mine = np.asarray(value, np.int64)
    everyone = np.asarray(multihost_utils.process_allgather(mine))
    if not (everyone == everyone[0]).all():
        raise ValueError(
            f"the processes disagree on {what}: process {jax.process_index()} has "
            f"{mine.tolist()}, the processes have {everyone.tolist()}"
        )


def shard_sampler(sampler: Sampler, mesh: Mesh, mesh_axis: str = DEFAULT_AXIS) -> ShardedSampler:
    """Split ``sampler``'s ``B`` envs over the mesh axis ``mesh_axis``.

    Each of the ``n`` devices along the axis runs ``B / n`` envs, in order of
    global rank (device ``i`` has ``sampler.options.env_ranks[i * B / n : (i + 1) * B / n]``).

    Raises:
      TypeError: ``mesh`` is not a ``Mesh``, ``mesh_axis`` not a str, or
        ``sampler`` is already sharded.
      ValueError: ``mesh`` has no axis ``mesh_axis``, or ``B`` is not
        divisible by the axis size; with several processes, when they
        disagree on ``BatchSpec`` or ``global_B``.
    """
    if isinstance(sampler, ShardedSampler):
        raise TypeError("sampler is already sharded; shard the one-device sampler")
    T, B = sampler.batch_spec
    n = check_mesh(mesh, mesh_axis, B)
    check_processes_agree("BatchSpec(T, B) and global_B", [T, B, sampler.options.global_B])
    local = sampler.split(n)
    return ShardedSampler(local=local, options=sampler.options, mesh=mesh, mesh_axis=mesh_axis)


def process_env_ranks(B: int, rank: int | None = None, world_size: int | None = None) -> range:
    """rlpyt's ``env_ranks`` of process ``rank`` running ``B`` envs each:
    ``range(rank * B, (rank + 1) * B)`` (defaults: this process, all processes);
    pass it to ``make_sampler(env_ranks=..., global_B=B * world_size)`` to run
    processes independently, without a shared mesh."""
    rank = jax.process_index() if rank is None else int(rank)
    world_size = jax.process_count() if world_size is None else int(world_size)
    if B < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need B >= 1 and 0 <= rank < world_size, got {B}, {rank}, {world_size}")
    return range(rank * B, (rank + 1) * B)


def process_local(tree: PyTree) -> PyTree:
    """This process's part of global arrays, as numpy arrays.

    For each leaf, the blocks held by this process's devices, joined in order
    along the one sharded axis (a leaf sharded along ``B`` gives this process's
    envs, in order of global rank). Replicated leaves come back whole.
    """

    def local(x: Any) -> np.ndarray:
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return np.asarray(x)
        blocks: dict[tuple[tuple[int, int], ...], jax.Array] = {}
        for shard in x.addressable_shards:
            index = tuple(
                (s.start or 0, x.shape[d] if s.stop is None else s.stop)
                for d, s in enumerate(shard.index)
            )
            blocks.setdefault(index, shard.data)
        split = [d for d in range(x.ndim) if any(i[d] != (0, x.shape[d]) for i in blocks)]
        if len(split) > 1:
            raise ValueError(f"process_local supports arrays sharded along one axis, got {split}")
        if not split:
            return np.asarray(next(iter(blocks.values())))
        axis = split[0]
        ordered = sorted(blocks.items(), key=lambda kv: kv[0][axis][0])
        return np.concatenate([np.asarray(data) for _, data in ordered], axis=axis)

    return jax.tree.map(local, tree)

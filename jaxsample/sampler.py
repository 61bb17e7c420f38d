"""``make_sampler(...) -> Sampler(init, collect, examples)``: the JAX sampler's factory,
and [`SamplerProtocol`][jaxsample.sampler.SamplerProtocol], what every sampler offers.

It checks the options ([`SamplerOptions`][jaxsample.core.options.SamplerOptions]), derives and
checks the
env's and agent's specs (`jaxsample.core.specs`) and returns a
[`Sampler`][jaxsample.sampler.Sampler] (one device) or, given a ``mesh``, a
[`ShardedSampler`][jaxsample.distributed.ShardedSampler]. The rollout itself lives in
`jaxsample.core.rollout`, the per-env step in `jaxsample.core.step`,
the batch assembly in `jaxsample.core.assemble`, and the key schedule
(what a reference implementation must reproduce to get the same samples) in
`jaxsample.core.keys`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax

from jaxsample._checks import check_bool, check_int
from jaxsample.agents.base import Agent
from jaxsample.core import finals, modes
from jaxsample.core.finals import truncation_bound
from jaxsample.core.keys import EPOCH
from jaxsample.core.options import (
    FINAL_OBSERVATION_STORES,
    RESET_MODES,
    ResetMode,
    SamplerOptions,
    check_agent,
    check_env,
    sampler_options,
)
from jaxsample.core.resets import check_reset_pool, default_block
from jaxsample.core.rollout import Sampler, SamplerState
from jaxsample.core.specs import (
    FromParams,
    agent_spec,
    default_params,
    known_time_limit,
    step_examples,
)
from jaxsample.core.step import EnvStepper
from jaxsample.distributed import ShardedSampler, check_mesh, shard_sampler
from jaxsample.traj_info import check_traj_done
from jaxsample.types import Batch, BatchSpec, PyTree, Samples

__all__ = [
    "EPOCH",
    "FINAL_OBSERVATION_STORES",
    "RESET_MODES",
    "ResetMode",
    "Sampler",
    "SamplerProtocol",
    "SamplerState",
    "make_sampler",
    "truncation_bound",
]


@runtime_checkable
class SamplerProtocol(Protocol):
    """What every sampler offers: the JAX [`Sampler`][jaxsample.sampler.Sampler],
    the [`ShardedSampler`][jaxsample.distributed.ShardedSampler] and the host
    sampler ([`HostSampler`][jaxsample.host.HostSampler]); code that takes any
    of them (a trainer, a driver, a benchmark) reads only these.

    The state is the sampler's own (``SamplerState``, ``HostSamplerState``).
    The JAX samplers' ``init`` and ``collect`` are pure and jittable, the host
    sampler's are not (they step a host env).
    """

    @property
    def agent(self) -> Any:
        """The agent."""
        ...

    @property
    def options(self) -> SamplerOptions:
        """The checked keyword options."""
        ...

    @property
    def batch_spec(self) -> BatchSpec:
        """``BatchSpec(T, B)`` of every batch (``options.batch_spec``)."""
        ...

    @property
    def examples(self) -> Samples:
        """One step of [`Samples`][jaxsample.types.Samples] (``jax.ShapeDtypeStruct``
        leaves, no ``T``/``B`` axes)."""
        ...

    def init(self, key: jax.Array, agent_params: PyTree) -> Any:
        """Start (and decorrelate) the ``B`` envs: the state to collect from."""
        ...

    def collect(self, state: Any, agent_params: PyTree) -> tuple[Any, Batch]:
        """``(state, batch)``: one ``[T, B]`` [`Batch`][jaxsample.types.Batch]
        from ``state``, and the state to continue from."""
        ...


def make_sampler(
    env: Any,
    env_params: Any,
    agent: Agent,
    batch_spec: BatchSpec,
    *,
    agent_params: PyTree = None,
    mesh: jax.sharding.Mesh | None = None,
    mesh_axis: str = "envs",
    check_actions: bool = False,
    reset_pool: int = 0,
    reset_pool_block: int | None = None,
    **options: Any,
) -> Sampler | ShardedSampler:
    """Build a sampler of ``batch_spec.T`` steps of ``batch_spec.B`` envs.

    Args:
      env: a gymnax (>= 1.0) environment.
      env_params: its parameters.
      agent: an [`Agent`][jaxsample.agents.Agent] (unbatched functions).
      batch_spec: ``BatchSpec(T, B)``, both positive.
      options: the keyword options every sampler takes, checked and held as
        ``sampler.options``: ``max_decorrelation_steps`` (0), ``reset_mode``
        (``"auto"``), ``discount`` (0.99), ``bootstrap_value`` (False),
        ``final_observation`` (``"sparse"``), ``store_agent_state`` (False),
        ``env_ranks`` (``range(B)``), ``global_B`` (``max(env_ranks) + 1``),
        ``traj_fields`` (``()``) and ``traj_done`` (None); their meaning:
        [`SamplerOptions`][jaxsample.core.options.SamplerOptions].
      agent_params: an example of the agent's parameters (arrays or
        ``jax.ShapeDtypeStruct``), used only to check the agent and build
        ``examples``. Defaults to ``jax.eval_shape(agent.init, key, observation)``
        when the agent has an ``init`` method; for an agent without one, the
        check and ``examples`` wait for the parameters first given to
        ``init`` (``examples`` raises until then).
      check_actions: the checked mode, for developing an agent: ``collect``
        raises (at run time, under ``jax.jit`` too) when an agent's action is
        outside the action space (e.g. 5 for ``Discrete(2)``, NaN for a Box),
        naming the env rank, the step, the action and the space. Off by
        default, and then the program has nothing of it (no check, no
        callback); on, it adds a check per step and a host callback at a step
        where it fails.
      reset_pool: ``R >= 1`` for cheap resets (README "Cheap resets",
        `jaxsample.core.resets`): step with ``env.step_env`` and give the
        envs that ended at a step resets from a pool of ``R`` per block of
        ``reset_pool_block`` envs, instead of gymnax's auto-reset (a full
        ``reset`` of every env at every step). Only which reset an ended env
        gets changes (never one reset for two envs); the samples stay the
        same on any number of devices. 0 (default): gymnax's auto-reset.
      reset_pool_block: ``G``, envs per pool block: consecutive global ranks
        ``[j G, (j + 1) G)``, ``R <= G``, dividing ``B`` (per device, with a
        ``mesh``). Default: the largest divisor of ``B`` up to 64.

    Raises:
      TypeError: for an argument of the wrong type, naming it.
      ValueError: for a bad value, naming it, or an agent whose action does not
        fit the action space, or whose state or agent_info changes structure.
    """
    if mesh is not None:
        reset_pool_block = _mesh_block(mesh, mesh_axis, batch_spec, reset_pool, reset_pool_block)
    opts = sampler_options("make_sampler", batch_spec, options)
    check_agent(agent)
    check_bool("check_actions", check_actions)
    check_env(env, env_params)
    B = opts.batch_spec.B
    resets = check_reset_pool(reset_pool, reset_pool_block, env, B, opts.env_ranks)
    stepper = EnvStepper.of(env, env_params, agent, check_actions)
    check_traj_done(opts.traj_done, stepper.env_spec.env_info)
    time_limit = known_time_limit(env, env_params)
    sampler = Sampler(
        agent=agent,
        options=opts,
        env=env,
        env_params=env_params,
        _examples=_examples(agent, agent_params, stepper, opts),
        _stepper=stepper,
        _finals=finals.choose(opts, stepper, resets is not None, time_limit),
        _mode=modes.choose(opts.reset_mode),
        _resets=resets,
    )
    return sampler if mesh is None else shard_sampler(sampler, mesh, mesh_axis)


def _mesh_block(
    mesh: Any, mesh_axis: str, batch_spec: Any, reset_pool: Any, reset_pool_block: Any
) -> Any:
    """Check the mesh for ``batch_spec.B`` envs; ``reset_pool_block`` with its
    default, per device, where pooled resets leave it out."""
    B = check_int("batch_spec.B", getattr(batch_spec, "B", None), 1)
    shards = check_mesh(mesh, mesh_axis, B)
    if reset_pool and reset_pool_block is None:
        return default_block(B // shards)
    return reset_pool_block


def _examples(
    agent: Agent, agent_params: PyTree, stepper: EnvStepper, opts: SamplerOptions
) -> FromParams:
    """The sampler's ``examples``, derived (and the agent checked) from the
    agent's parameters once they are known (`FromParams`)."""
    env_s = stepper.env_spec

    def derive(params: PyTree) -> Samples:
        agent_s = agent_spec(
            agent,
            params,
            env_s.observation,
            env_s.action_space,
            value=opts.bootstrap_value,
            reward=env_s.reward,
        )
        return step_examples(
            env_s.observation,
            env_s.action,
            env_s.env_info,
            agent_s.info,
            stepper.agent.agent_state_spec,
            store_agent_state=opts.store_agent_state,
            bootstrap_value=opts.bootstrap_value,
            reward=env_s.reward,
        )

    params = default_params(agent, agent_params, env_s.observation)
    return FromParams(derive, params, what="sampler.examples", factory="make_sampler")

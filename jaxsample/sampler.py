"""``make_sampler(...) -> Sampler(init, collect, examples)``: the JAX sampler's factory.

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

from typing import Any

import jax

from jaxsample._checks import check_bool, check_int
from jaxsample.agents.base import Agent
from jaxsample.core import finals
from jaxsample.core.finals import truncation_bound
from jaxsample.core.keys import EPOCH
from jaxsample.core.options import (
    FINAL_OBSERVATION_STORES,
    RESET_MODES,
    ResetMode,
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
from jaxsample.traj_info import trajectory_end
from jaxsample.types import BatchSpec, PyTree, Samples

__all__ = [
    "EPOCH",
    "FINAL_OBSERVATION_STORES",
    "RESET_MODES",
    "ResetMode",
    "Sampler",
    "SamplerState",
    "make_sampler",
    "truncation_bound",
]


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
      env, env_params: a gymnax (>= 1.0) environment and its parameters.
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
      TypeError, ValueError: for bad arguments, or an agent whose action does not
      fit the action space, or whose state or agent_info changes structure.
    """
    if mesh is not None:
        B = check_int("batch_spec.B", getattr(batch_spec, "B", None), 1)
        shards = check_mesh(mesh, mesh_axis, B)
        if reset_pool and reset_pool_block is None:  # the default is per device
            reset_pool_block = default_block(B // shards)
    opts = sampler_options("make_sampler", batch_spec, options)
    check_agent(agent)
    check_bool("check_actions", check_actions)
    check_env(env, env_params)
    resets = check_reset_pool(
        reset_pool,
        reset_pool_block,
        env,
        opts.batch_spec.B,
        opts.env_ranks,
    )
    stepper = EnvStepper.of(env, env_params, agent, check_actions)
    env_s, state_spec = stepper.env_spec, stepper.agent.agent_state_spec
    bootstrap_value, traj_done = opts.bootstrap_value, opts.traj_done
    if traj_done is not None:  # a missing or non-scalar entry: a clear error now
        flag = jax.ShapeDtypeStruct((), bool)
        jax.eval_shape(lambda *a: trajectory_end(*a, traj_done), flag, flag, env_s.env_info)

    def derive_examples(params: PyTree) -> Samples:
        agent_s = agent_spec(
            agent,
            params,
            env_s.observation,
            env_s.action_space,
            value=bootstrap_value,
            reward=env_s.reward,
        )
        return step_examples(
            env_s.observation,
            env_s.action,
            env_s.env_info,
            agent_s.info,
            state_spec,
            store_agent_state=opts.store_agent_state,
            bootstrap_value=bootstrap_value,
            reward=env_s.reward,
        )

    examples = FromParams(
        derive_examples,
        default_params(agent, agent_params, env_s.observation),
        what="sampler.examples",
        factory="make_sampler",
    )
    time_limit = known_time_limit(env, env_params)
    sampler = Sampler(
        agent=agent,
        options=opts,
        env=env,
        env_params=env_params,
        _examples=examples,
        _stepper=stepper,
        _finals=finals.choose(opts, stepper, resets is not None, time_limit),
        _resets=resets,
    )
    if mesh is None:
        return sampler
    return shard_sampler(sampler, mesh, mesh_axis)

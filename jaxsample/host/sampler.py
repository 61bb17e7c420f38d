"""The host sampler: ``make_host_sampler(...) -> HostSampler(init, collect, examples)``.

It drives a host (non-JAX) vector env — a ``gymnasium.vector.VectorEnv`` in any
autoreset mode, or an envpool pool — with the same contract as
[`jaxsample.make_sampler`][jaxsample.sampler.make_sampler] and returns the same
[`Batch`][jaxsample.types.Batch]
layout (docs/design.md's conventions: terminated/truncated, the true final
observation, prev_action/prev_reward, TrajInfo, reset modes ``"auto"``,
``"wait"`` and ``"episodic"``, decorrelation, ``bootstrap_value``).

Where the work happens, per step of a batch (the device functions are in
`jaxsample.host.device`):

1. one call of a compiled function (jitted once, when the sampler is built,
   because a host loop must call a compiled agent step): the observation goes
   to the device (its one transfer per step), with the previous step's reward
   and done/active flags; the agent acts for the ``B`` envs (the per-env
   ``agent.step`` vmapped), and what it computed (action, ``agent_info``, the
   agent state if stored) is written in place, bit-packed into one donated
   ``[T, B, K]`` uint32 buffer (one buffer, not one per leaf: every donated
   buffer adds to the dispatch of each step);
2. the action comes back to the host (``B`` actions) and the vector env steps;
   while the host records that step, the device already computes the next
   action (dispatch is asynchronous);
3. the env's outputs land in preallocated ``[T + 1, B, ...]`` / ``[T, B]``
   numpy buffers (no per-step lists, no stacking; the next observation is
   written by the env adapter straight into its row).

After the ``T`` steps one more compiled call receives the host buffers (one
transfer per batch) and computes ``done``, ``prev_action``/``prev_reward``,
``TrajInfo``, the final-observation store and ``bootstrap_value`` with the
JAX sampler's own assembly (`jaxsample.core.assemble.assemble`).
(Writing each observation into a device buffer inside the step instead costs
XLA:CPU ~25 us per step, more than sending the whole ``[T, B, *obs]`` buffer
once.)

``collect`` is not jittable: it steps a stateful host env. ``init`` and
``collect`` return a [`HostSamplerState`][jaxsample.host.HostSamplerState] that refers to the env;
only the
latest state of an env may be collected from (an older one raises), because the
env has moved on. A ``collect`` that fails before its envs move (e.g. in the
agent's first step: bad ``agent_params``) leaves its state valid, and a retry
continues the same stream; one that fails after they moved (a reset at the
start of a ``"wait"``/``"episodic"`` batch, or the first ``env.step``)
invalidates it, and the next ``collect`` says so: start again with ``init``.

Randomness (the JAX sampler's schedule, docs/design.md): for the env of global rank
``r``, ``k_reset, k_decorrelate, k_run = split(fold_in(key, r), 3)``. The env's
seed is 31 bits of ``k_reset`` ([`jaxsample.host.env_seeds`][jaxsample.host.env_seeds]); the agent
acts
at the env's ``n``-th step with ``fold_in(k_epoch, 4 i)`` exactly as in the JAX
sampler (epochs of ``2**30`` steps), so the same agent gets the same keys from
both; decorrelation is drawn on the host from 32 bits of ``k_decorrelate``
(`jaxsample.host.envs.decorrelation_plan`). The env's own randomness after its seeded reset
is its own (it continues its seeded generator; resets take no seed), so the
same key gives the same samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsample._checks import check_key as _check_key
from jaxsample.agents.base import Agent, action_spec, null_action
from jaxsample.core import keys as K
from jaxsample.core.acting import AgentCarry, AgentStepper
from jaxsample.core.finals import final_slots
from jaxsample.core.options import SamplerOptions, check_agent, sampler_options
from jaxsample.core.specs import (
    FromParams,
    agent_spec,
    agent_state_spec,
    default_params,
    step_examples,
)
from jaxsample.host import device as host_device
from jaxsample.host.buffers import HostBuffers, np_zeros, write_host_finals
from jaxsample.host.device import CompiledDevice, HostBatch, compile_device, make_device
from jaxsample.host.envs import (
    EnvHandle,
    decorrelation_plan,
    gymnax_space,
    observation_spec,
    require_gymnasium,
)
from jaxsample.host.envs import write_info as _write_info
from jaxsample.host.modes import AutoReset, choose
from jaxsample.traj_info import TrajAccumulator
from jaxsample.types import Batch, BatchSpec, PyTree, Samples


@struct.dataclass
class HostSamplerState:
    """What carries over between ``collect`` calls; leaves ``[B, ...]``.

    Host (numpy) leaves: ``observation`` (``[B, *obs]``, what the agent sees
    next) and ``stale`` (bool: in ``"wait"`` mode the env was stepped while it
    idled, so it is reset when the next batch starts). Device leaves:
    ``agent``, the agents' `AgentCarry` (the
    JAX samplers' agent half of their carry: ``prev_action``, ``prev_reward``
    float32, ``agent_state``, ``env_rank``; each has one name, e.g.
    ``state.agent.agent_state``), ``key`` (``[B]`` run keys), ``epoch``
    and ``step`` (``[B]`` uint32: the key epoch and the steps taken in it,
    `jaxsample.core.keys`) and ``traj``
    ([`TrajAccumulator`][jaxsample.traj_info.TrajAccumulator]). There is no env state:
    the host env holds it.

    ``handle`` (the host env, [`env`][jaxsample.host.HostSamplerState.env]) and ``generation`` are
    static: a
    state may be collected from only while it is its env's latest.
    """

    observation: np.ndarray
    agent: AgentCarry
    key: jax.Array
    epoch: jax.Array
    step: jax.Array
    traj: TrajAccumulator
    stale: np.ndarray
    handle: EnvHandle = struct.field(pytree_node=False)
    generation: int = struct.field(pytree_node=False)

    @property
    def epoch_keys(self) -> K.EpochKeys:
        """The envs' ``[B]`` run keys and step counts."""
        return K.EpochKeys(key=self.key, epoch=self.epoch, step=self.step)

    @property
    def env(self) -> Any:
        """The host vector env (e.g. to ``close()`` it)."""
        return self.handle.env


@dataclasses.dataclass(frozen=True, eq=False)
class HostSampler:
    """A sampler of a host vector env; build it with
    [`make_host_sampler`][jaxsample.host.make_host_sampler].

    ``init`` and ``collect`` have the JAX sampler's signatures and return the
    same [`Batch`][jaxsample.types.Batch] layout, but they are plain Python (they
    step a stateful host env) and must not be wrapped in ``jax.jit``; their
    device work is already compiled. ``examples`` describes one step of
    [`Samples`][jaxsample.types.Samples] exactly as ``Sampler.examples`` does.
    """

    agent: Any
    options: SamplerOptions  # the keyword options, checked
    action_space: Any  # gymnax space of one env's action
    autoreset_mode: str  # the host env's: "NextStep", "SameStep" or "Disabled"
    _handle: EnvHandle
    _info_spec: dict[str, jax.ShapeDtypeStruct]
    _obs_spec: jax.ShapeDtypeStruct
    _act_spec: PyTree
    _slots: int  # K of the sparse final-observation store
    _mode: AutoReset  # the reset mode's strategy (jaxsample.host.modes.choose)
    _zero_t: Any
    # (examples, the device functions of jaxsample.host.device, each jitted
    # once), derived once the agent's parameters are known.
    _derived: FromParams

    @property
    def batch_spec(self) -> BatchSpec:
        """``BatchSpec(T, B)`` of every batch (``options.batch_spec``)."""
        return self.options.batch_spec

    @property
    def examples(self) -> Samples:
        """One step of [`Samples`][jaxsample.types.Samples], as ``Sampler.examples``
        (a ``ValueError`` naming ``agent_params=`` until the agent's parameters
        are known)."""
        return self._derived.get()[0]

    def check_params(self, agent_params: PyTree) -> None:
        """Check the agent with ``agent_params`` if it has not been checked yet
        (an agent without ``init``, built without ``agent_params=``), as
        [`Sampler.check_params`][jaxsample.sampler.Sampler.check_params]."""
        self._derived.of(agent_params)

    @property
    def _device(self) -> CompiledDevice:
        return self._derived.get()[1]

    # ------------------------------------------------------------------ init
    def init(self, key: jax.Array, agent_params: PyTree) -> HostSamplerState:
        """Seed and reset the ``B`` envs (creating them, for a factory) and
        decorrelate them.

        Args:
          key: a ``jax.random.key``.
          agent_params: the agent's parameters (decorrelation takes random
            actions; they check an agent first seen here).

        Returns:
          The [`HostSamplerState`][jaxsample.host.HostSamplerState] to pass to
          [`collect`][jaxsample.host.HostSampler.collect]. Any older
          state of the same env becomes invalid.
        """
        _check_key(key)
        self.check_params(agent_params)  # checks an agent first seen here
        B = self.options.batch_spec.B
        dev = self._device.start(key)
        seeds = [int(s) for s in np.asarray(dev["seed"])]
        obs = np_zeros(self._obs_spec, (B,))
        adapter = self._handle.start(seeds, obs)
        agent, traj = dev["agent"], dev["traj"]
        n = self.options.max_decorrelation_steps
        if n:
            n_steps, actions = decorrelation_plan(
                np.asarray(dev["decorrelation_seed"]), n, self._handle.action_space
            )
            first = n - n_steps
            actions = actions.astype(self._act_spec.dtype)
            rewards = np.zeros((n, B), np.float32)
            ended = np.zeros((n, B), bool)
            for i in range(n):
                restart = first == i
                if i > 0 and restart.any():
                    adapter.reset_where(restart, obs)
                res = adapter.step(actions[i], obs)
                counted = first <= i
                rewards[i] = res.reward
                ended[i] = res.done & counted
            valid = np.arange(n)[:, None] >= first[None, :]
            traj, agent = self._device.decorrelation_traj(
                traj, agent, rewards, ended, valid, actions[-1]
            )
        return HostSamplerState(
            observation=obs,
            agent=agent,
            key=dev["key"],
            epoch=dev["epoch"],
            step=dev["step"],
            traj=traj,
            stale=np.zeros((B,), bool),
            handle=self._handle,
            generation=self._handle.generation,
        )

    # --------------------------------------------------------------- collect
    def collect(
        self, state: HostSamplerState, agent_params: PyTree
    ) -> tuple[HostSamplerState, Batch]:
        """Collect one ``[T, B]`` batch from the host env (not jittable).

        Args:
          state: from [`init`][jaxsample.host.HostSampler.init] or the previous ``collect`` (the
              latest one).
          agent_params: the agent's parameters for this batch.

        Returns:
          ``(state, batch)``; ``batch`` is a [`Batch`][jaxsample.types.Batch] of
          device arrays ``[T, B, ...]``, laid out as the JAX sampler's.

        Raises:
          ValueError: ``state`` is not the env's latest, or an earlier
            ``collect`` failed after its envs had moved (the error says which).
            An error raised before the envs move leaves ``state`` valid.
        """
        self._check_state(state)
        handle = self._handle
        try:
            return self._collect(state, agent_params)
        except BaseException as error:
            if handle.generation != state.generation:  # the envs had moved: state lost
                handle.failure = f"{type(error).__name__}: {error}"
            raise

    def _collect(
        self, state: HostSamplerState, agent_params: PyTree
    ) -> tuple[HostSamplerState, Batch]:
        """[`collect`][jaxsample.host.HostSampler.collect] after its checks. ``handle.generation``
        is bumped just before the envs first move (a reset at the start of the
        batch, else the first ``env.step``): an error before that (e.g. in the
        agent's first step) leaves ``state`` valid, and a retry continues its
        stream. What ``reset_mode`` decides is the strategy ``_mode``
        (`jaxsample.host.modes`), chosen when the sampler was built."""
        handle, mode, device = self._handle, self._mode, self._device
        buf = HostBuffers.zeros(
            self.options, self._obs_spec, self._info_spec, self._slots, mode.idles
        )
        buf.observation[0] = state.observation
        moved, agent, traj = mode.start(handle, state, buf.observation[0], device.fresh)
        packed, agent_keys = device.begin(state.epoch_keys)
        carry, packed, last_action, host = self._steps(
            buf, agent, moved, packed, agent_keys, agent_params
        )
        keys = state.epoch_keys
        out = device.finish(packed, last_action, host, keys, traj, carry, agent, agent_params)
        new_state = state.replace(
            observation=host.next_observation,
            agent=out["agent"],
            epoch=out["epoch"],
            step=out["step"],
            traj=out["traj"],
            stale=mode.stale(buf),
            generation=handle.generation,
        )
        return new_state, out["batch"]

    def _steps(
        self,
        buf: HostBuffers,
        agent: AgentCarry,
        moved: bool,
        packed: jax.Array,
        agent_keys: jax.Array,
        agent_params: PyTree,
    ) -> tuple[Any, jax.Array, jax.Array, HostBatch]:
        """The ``T`` steps of a batch, written into ``buf`` (its row 0 holds
        the first observations): the agent acts on the device from the
        agents' carry ``agent`` (with ``agent_keys`` ``[T, B]``, written into
        the packed record ``packed``), the env steps on the host. ``moved``:
        the envs were reset at the batch start. Returns the device's carry,
        packed record and last action, and the host's `HostBatch`."""
        T, B = self.options.batch_spec
        handle, mode = self._handle, self._mode
        adapter = handle.adapter
        assert adapter is not None
        dense = self.options.final_observation == "dense"
        obs = buf.observation
        act, step, autoreset = self._device.act, adapter.step, adapter.mode

        # Step 0's inputs: the state's prev_reward, nothing done, all active.
        active = np.ones((B,), bool)  # not idle at this step ("wait"/"episodic")
        flags = mode.flags(np.zeros((B,), bool), active)
        prev_reward = np.asarray(agent.prev_reward)
        carry = (agent, self._zero_t)
        carry, packed, action_dev = act(
            carry, packed, agent_keys, agent_params, obs[0], prev_reward, flags, agent.prev_action
        )
        if not moved:  # the envs move at the first step: older states are stale
            handle.generation += 1
        for t in range(T):
            action = mode.action(np.asarray(action_dev), active)  # waits for the device step t
            res = step(action, obs[t + 1], dense)
            truncated, done, any_truncated = mode.ends(t, res)
            goes_on = mode.observe(buf, t, res, done, active)
            if t + 1 < T:  # dispatch step t + 1; the bookkeeping below overlaps it
                flags = mode.flags(done, active)
                carry, packed, action_dev = act(
                    carry, packed, agent_keys, agent_params, obs[t + 1], buf.reward[t], flags,
                    action_dev,
                )  # fmt: skip
            if dense or any_truncated:
                final, n = buf.final, buf.n_truncated
                write_host_finals(final, n, dense, t, res, truncated, active, obs[t + 1])
            for name, info in buf.env_info.items():
                _write_info(res.info, name, res.done, autoreset, info[t])
            mode.record(buf, t, res, truncated, active)
            last_done, last_active = done, active
            active = goes_on
        next_observation = mode.next_observation(buf, active)
        return carry, packed, action_dev, buf.batch(next_observation, last_done, last_active)

    # --------------------------------------------------------------- helpers
    def _check_state(self, state: Any) -> None:
        if not isinstance(state, HostSamplerState):
            raise TypeError(
                f"state must be the HostSamplerState from sampler.init, got {type(state).__name__}"
            )
        if state.handle is not self._handle:
            raise ValueError("state comes from another host sampler (another env)")
        B = self.options.batch_spec.B
        if state.stale.shape != (B,):
            raise ValueError(f"state holds {state.stale.shape} envs, but B={B}")
        if state.generation != self._handle.generation:
            failure = self._handle.failure
            why = (
                f"an error interrupted the envs after they had moved ({failure}), so "
                "no state describes them any more; call sampler.init(key, agent_params) "
                "to start again"
                if failure is not None
                else "the host env has moved on since it was returned. Only the latest "
                "state from init/collect can be collected from (a host env, unlike a "
                "JAX one, cannot be rewound)"
            )
            raise ValueError(f"state is stale: {why}")


def make_host_sampler(
    env: Any,
    agent: Agent,
    batch_spec: BatchSpec,
    *,
    agent_params: PyTree = None,
    autoreset_mode: Any = None,
    info_spec: Mapping[str, Any] | None = None,
    **options: Any,
) -> HostSampler:
    """Build a sampler of ``batch_spec.T`` steps of the ``batch_spec.B`` envs of a
    host vector env, with [`jaxsample.make_sampler`][jaxsample.sampler.make_sampler]'s contract.

    Args:
      env: a ``gymnasium.vector.VectorEnv`` with ``num_envs == B`` (reseeded by
        ``init`` through ``reset(seed=[...])``), or a factory
        ``make_env(seeds: list[int]) -> VectorEnv`` that creates the envs with
        one seed per env (required for envpool, whose seeds are fixed at
        creation: [`jaxsample.host.envpool_factory`][jaxsample.host.envpool_factory]).
        A factory is called once here (to read the spaces; that env is
        closed) and once per ``init``. Any autoreset mode; masked resets
        (``reset(options={"reset_mask": mask})``) must be supported, as
        gymnasium's vector envs and envpool do.
      agent: an [`Agent`][jaxsample.agents.Agent] for the gymnax form of the
        env's action space ([`jaxsample.host.gymnax_space`][jaxsample.host.gymnax_space]).
      batch_spec: ``BatchSpec(T, B)``.
      agent_params: as in ``make_sampler``.
      options: the keyword options of ``make_sampler``
        ([`SamplerOptions`][jaxsample.core.options.SamplerOptions], same defaults), with
        these host specifics:

        * ``max_decorrelation_steps``: env ``b`` takes its own number ``n_b``
          in ``1..max`` of uniformly random actions from a fresh reset before
          the first batch. A vector env steps all its envs together, so env
          ``b`` first runs ``max - n_b`` steps of the null action that are
          thrown away, then is reset (masked) and takes its ``n_b`` random
          steps.
        * ``reset_mode``: ``"auto"``, ``"wait"`` or ``"episodic"``. In
          ``"wait"`` mode an idle env is still stepped (with the null action;
          outputs dropped), so it is reset again when the next batch starts;
          in ``"episodic"`` mode every batch starts with ``reset()`` of all
          envs.
        * ``final_observation``: with the sparse store the number of
          truncations per env per batch is bounded from the env's time limit
          when it can be read (else ``T``); an env that truncates more often
          raises a clear error (use ``"dense"``).
      autoreset_mode: overrides ``env.metadata["autoreset_mode"]`` (default
        there: gymnasium's NextStep).
      info_spec: entries of the vector env's ``info`` to record in
        ``samples.env.env_info``: ``{name: jax.ShapeDtypeStruct(shape, dtype)}``
        of one env's value; zeros where an env has no value. Default: none.

    Raises:
      ImportError: gymnasium (>= 1.1) is not installed (``pip install
        'jaxsample[host]'``).
      TypeError: for an argument of the wrong type, naming it.
      ValueError: for a bad value, naming it, or an agent whose action does
        not fit the action space, or whose state changes structure.
    """
    require_gymnasium()
    opts = sampler_options("make_host_sampler", batch_spec, options)
    check_agent(agent)
    specs = _info_specs(info_spec)
    host_device.check_host_traj(opts, specs)
    handle = EnvHandle(env, opts.batch_spec.B, autoreset_mode)
    return _sampler(handle, agent, opts, specs, agent_params)


def _info_specs(info_spec: Mapping[str, Any] | None) -> dict[str, jax.ShapeDtypeStruct]:
    """``make_host_sampler``'s ``info_spec``, checked, with canonical dtypes."""
    specs: dict[str, jax.ShapeDtypeStruct] = {}
    if info_spec is None:
        return specs
    if not isinstance(info_spec, Mapping):
        raise TypeError(f"info_spec must be a mapping name -> ShapeDtypeStruct, got {info_spec!r}")
    for name, spec in info_spec.items():
        if not (isinstance(name, str) and hasattr(spec, "shape") and hasattr(spec, "dtype")):
            raise TypeError(
                f"info_spec[{name!r}] must be a jax.ShapeDtypeStruct(shape, dtype), got {spec!r}"
            )
        specs[name] = jax.ShapeDtypeStruct(
            tuple(spec.shape), jax.dtypes.canonicalize_dtype(spec.dtype)
        )
    return specs


def _sampler(
    handle: EnvHandle,
    agent: Agent,
    opts: SamplerOptions,
    specs: dict[str, jax.ShapeDtypeStruct],
    agent_params: PyTree,
) -> HostSampler:
    """The `HostSampler` of ``handle``'s env (the rest of ``make_host_sampler``)."""
    T = opts.batch_spec.T
    space = gymnax_space(handle.action_space)
    obs_spec = observation_spec(handle.observation_space)
    act_spec = action_spec(space)
    state_spec = agent_state_spec(agent)
    bootstrap_value = opts.bootstrap_value

    def derive(params: PyTree) -> tuple[Samples, CompiledDevice]:
        info_spec = agent_spec(agent, params, obs_spec, space, value=bootstrap_value).info
        examples = step_examples(
            obs_spec,
            act_spec,
            dict(specs),
            info_spec,
            state_spec,
            store_agent_state=opts.store_agent_state,
            bootstrap_value=bootstrap_value,
        )
        stepper = AgentStepper(agent, space, null_action(space), obs_spec, state_spec)
        device = make_device(opts, stepper, info_spec)
        return examples, compile_device(device)

    return HostSampler(
        agent=agent,
        options=opts,
        action_space=space,
        autoreset_mode=handle.mode,
        _handle=handle,
        _info_spec=specs,
        _obs_spec=obs_spec,
        _act_spec=act_spec,
        _slots=final_slots(opts.reset_mode, T, handle.time_limit),
        _mode=choose(opts.reset_mode, T),
        _zero_t=jnp.zeros((), jnp.int32),
        _derived=FromParams(
            derive,
            default_params(agent, agent_params, obs_spec),
            what="host sampler examples",
            factory="make_host_sampler",
        ),
    )

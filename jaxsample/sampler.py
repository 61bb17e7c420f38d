"""The vectorized sampler: ``make_sampler(...) -> Sampler(init, collect, examples)``.

One ``collect`` call is one XLA program: the agent step, the environment step and
the buffer writes of one environment are written unbatched (:meth:`Sampler._env_step`),
vmapped over ``B`` environments and scanned over ``T`` steps (:meth:`Sampler.collect`).

Key schedule (what a reference implementation must reproduce to get the same
samples). For the env of global rank ``r``:

* ``init``: ``k_reset, k_decorrelate, k_run = split(fold_in(key, r), 3)``; the env
  starts from ``env.reset(k_reset)``. Decorrelation draws the number of random
  steps ``n ~ U{1..max}`` from ``split(k_decorrelate)[0]`` and takes random step
  ``i`` with ``k_action, k_env = split(fold_in(split(k_decorrelate)[1], i))``.
* each env counts its steps ``n`` (over all batches) in epochs of
  ``EPOCH = 2**30`` steps: ``k_run`` is the key of epoch 0 and
  ``split(k_epoch)[0]`` the key of the next epoch; ``i = n mod EPOCH``.
* step ``n``: the agent acts with ``fold_in(k_epoch, 3 i)`` and the env steps
  with ``env.step(fold_in(k_epoch, 3 i + 1), ...)`` (which auto-resets with its
  own split of that key, as gymnax does).
* ``"episodic"`` mode, at the start of a batch whose first step is ``n``: the
  env restarts from ``env.reset(fold_in(k_epoch, 3 i + 2))``.

Two ``fold_in`` per step are much cheaper than a per-env ``split``; the keys
depend only on ``n``, so collecting ``2 x T`` steps gives the same samples as
``T`` steps twice (in ``"auto"`` mode), and the epochs keep the uint32 counter
from ever wrapping onto keys already used, however long the run.

Because every key comes from the global rank, never from a split whose shape
depends on ``B``, the same key gives the same samples whatever the number of
devices or processes the envs are spread over.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments.environment import Environment

from jaxsample._checks import check_int as _check_int
from jaxsample._checks import check_key as _check_key
from jaxsample.agents.base import Agent, action_spec, null_action
from jaxsample.traj_info import TrajAccumulator
from jaxsample.types import (
    AgentInputs,
    AgentSamples,
    AgentStep,
    Batch,
    BatchSpec,
    EnvSamples,
    PyTree,
    Samples,
    SparseFinalObservation,
    TrajInfo,
)

ResetMode = Literal["auto", "wait", "episodic"]
RESET_MODES = ("auto", "wait", "episodic")
EPOCH = 2**30  # steps per key epoch: 3 * EPOCH fits in uint32
FINAL_OBSERVATION_STORES = ("sparse", "dense")
# Keys of gymnax's info dict that have fields of their own in EnvSamples.
_INFO_KEYS_WITH_FIELDS = ("final_observation", "terminated", "truncated")


@struct.dataclass
class SamplerState:
    """Everything that carries over between ``collect`` calls; leaves ``[B, ...]``.

    Attributes:
      env_state: the gymnax env states.
      observation: ``[B, *obs]`` what the agent sees next.
      prev_action: ``[B, *act]`` the agent's previous action (null after a reset).
      prev_reward: ``[B]`` float32.
      agent_state: the agent's recurrent state.
      key: ``[B]`` per-env key of the current epoch of steps.
      step: ``[B]`` uint32, steps taken in the current epoch (``< EPOCH``).
      traj: per-env :class:`~jaxsample.traj_info.TrajAccumulator`.
      idle: ``[B]`` bool, the env finished its episode in this batch and waits
        (``"wait"``/``"episodic"`` modes only).
      env_rank: ``[B]`` int32 global rank of each env.
    """

    env_state: PyTree
    observation: PyTree
    prev_action: PyTree
    prev_reward: jax.Array
    agent_state: PyTree
    key: jax.Array
    step: jax.Array
    traj: TrajAccumulator
    idle: jax.Array
    env_rank: jax.Array


class _StepOut(struct.PyTreeNode):
    """What one step of one env writes inside the scan (before stacking).

    Only what the env and the agent produce; fields that follow from these
    (``done``, ``prev_action``, ``prev_reward``, TrajInfo) are computed after the
    scan over whole ``[T, B]`` arrays, which keeps the scanned body small.
    """

    observation: PyTree
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    env_info: PyTree
    final_observation: PyTree  # () unless final_observation="dense"
    action: PyTree
    agent_info: PyTree
    agent_state: PyTree  # () unless store_agent_state
    valid: jax.Array  # () in "auto" mode, where every step is valid


def _tree_where(cond: jax.Array, x: PyTree, y: PyTree) -> PyTree:
    """``where(cond, x, y)`` leaf by leaf, for a scalar bool ``cond``."""
    return jax.tree.map(lambda a, b: jnp.where(cond, a, b), x, y)


def _specs(tree: PyTree) -> PyTree:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), tree)


def _describe(tree: PyTree) -> str:
    return str(jax.tree.map(lambda s: f"{s.dtype}{list(s.shape)}", _specs(tree)))


def _check_same(what: str, expected: PyTree, got: PyTree, hint: str) -> None:
    e, g = _specs(expected), _specs(got)
    if jax.tree.structure(e) != jax.tree.structure(g) or any(
        a.shape != b.shape or a.dtype != b.dtype
        for a, b in zip(jax.tree.leaves(e), jax.tree.leaves(g), strict=True)
    ):
        raise ValueError(f"{what} mismatch: expected {_describe(e)}, got {_describe(g)}. {hint}")


def act_checked(
    agent: Agent,
    agent_params: PyTree,
    inputs: AgentInputs,
    state: PyTree,
    key: jax.Array,
    *,
    null_action: PyTree,
    state_spec: PyTree,
    space: Any,
) -> tuple[AgentStep, PyTree]:
    """``agent.step`` for one env, with a clear error (at trace time) when the
    action does not fit the action space or the state changes structure."""
    agent_step, new_state = agent.step(agent_params, inputs, state, key)
    _check_same(
        "agent action",
        null_action,
        agent_step.action,
        f"The action must fit env.action_space: {space}.",
    )
    _check_same(
        "agent state",
        state_spec,
        new_state,
        "agent.step must return a state with the structure of agent.initial_state.",
    )
    return agent_step, new_state


def truncation_bound(env: Any, env_params: Any, T: int) -> int:
    """Upper bound on the truncations of one env in ``T`` auto-reset steps.

    gymnax truncates when ``state.time >= params.max_steps_in_episode``, so two
    truncations of one env are at least that many steps apart. For an env that
    overrides ``is_truncated`` or ``step``, or whose time limit is not a
    concrete number, the bound is ``T``.
    """
    if not isinstance(env, Environment):
        return T
    cls = type(env)
    if cls.is_truncated is not Environment.is_truncated or cls.step is not Environment.step:
        return T
    limit = getattr(env_params, "max_steps_in_episode", None)
    try:
        limit = float(np.asarray(limit))
    except (TypeError, ValueError, jax.errors.ConcretizationTypeError):
        return T
    if not math.isfinite(limit) or limit < 1:
        return T
    return max(1, min(T, math.ceil(T / math.ceil(limit))))


@dataclasses.dataclass(frozen=True, eq=False)
class Sampler:
    """A compiled-collection sampler; build it with :func:`make_sampler`.

    ``init`` and ``collect`` are pure and jittable; ``examples`` describes one
    step of :class:`~jaxsample.types.Samples` (leaves ``jax.ShapeDtypeStruct``, no
    ``T``/``B`` axes, ``final_store`` holding one dense final observation) to
    allocate replay buffers from.
    """

    env: Any
    env_params: Any
    agent: Agent
    batch_spec: BatchSpec
    reset_mode: ResetMode
    max_decorrelation_steps: int
    discount: float
    bootstrap_value: bool
    final_observation: str
    store_agent_state: bool
    env_ranks: tuple[int, ...]
    global_B: int
    examples: Samples
    _action_space: Any
    _null_action: PyTree
    _slots: int  # K of the sparse final-observation store
    _agent_state_spec: PyTree
    _obs_state_spec: PyTree  # (obs, env_state) dtypes as env.step returns them

    # ----------------------------------------------------------------- init
    def init(self, key: jax.Array, agent_params: PyTree) -> SamplerState:
        """Start ``B`` envs (and decorrelate them); pure and jittable.

        Args:
          key: a ``jax.random.key``.
          agent_params: the agent's parameters (only their structure is used
            here; the agent does not act during decorrelation).

        Returns:
          The :class:`SamplerState` to pass to :meth:`collect`.
        """
        del agent_params  # decorrelation takes random actions, not the agent's
        _check_key(key)
        return self.init_envs(key, jnp.asarray(self.env_ranks, jnp.int32))

    def init_envs(self, key: jax.Array, env_ranks: jax.Array) -> SamplerState:
        """:meth:`init` for the envs of global ranks ``env_ranks`` (int32 ``[n]``,
        a traced array is fine): how a shard of a mesh starts its own envs."""
        return jax.vmap(self._init_env, in_axes=(None, 0))(key, env_ranks)

    def _init_env(self, key: jax.Array, rank: jax.Array) -> SamplerState:
        k_reset, k_decorrelate, k_run = jax.random.split(jax.random.fold_in(key, rank), 3)
        obs, env_state = self._reset(k_reset)
        state = SamplerState(
            env_state=env_state,
            observation=obs,
            prev_action=self._null_action,
            prev_reward=jnp.zeros((), jnp.float32),
            agent_state=self._initial_agent_state(rank),
            key=k_run,
            step=jnp.zeros((), jnp.uint32),
            traj=TrajAccumulator.zeros(),
            idle=jnp.zeros((), bool),
            env_rank=rank,
        )
        if self.max_decorrelation_steps == 0:
            return state
        k_count, k_steps = jax.random.split(k_decorrelate)
        n_steps = jax.random.randint(k_count, (), 1, self.max_decorrelation_steps + 1)

        def random_step(i: jax.Array, s: SamplerState) -> SamplerState:
            k_action, k_env = jax.random.split(jax.random.fold_in(k_steps, i))
            action = self._action_space.sample(k_action)
            obs, env_state, reward, terminated, truncated, _ = self.env.step(
                k_env, s.env_state, action, self.env_params
            )
            obs, env_state = self._strong((obs, env_state))
            reward = jnp.asarray(reward, jnp.float32)
            done = jnp.logical_or(terminated, truncated)
            moved = s.replace(
                env_state=env_state,
                observation=obs,
                prev_action=_tree_where(done, self._null_action, action),
                prev_reward=jnp.where(done, 0.0, reward),
                traj=_tree_where(done, TrajAccumulator.zeros(), s.traj.add(reward, self.discount)),
            )
            return _tree_where(i < n_steps, moved, s)

        return jax.lax.fori_loop(0, self.max_decorrelation_steps, random_step, state)

    # -------------------------------------------------------------- collect
    def collect(self, state: SamplerState, agent_params: PyTree) -> tuple[SamplerState, Batch]:
        """Collect one ``[T, B]`` batch; pure and jittable (donate ``state``).

        Args:
          state: from :meth:`init` or the previous ``collect``.
          agent_params: the agent's parameters for this batch.

        Returns:
          ``(state, batch)``: the state to continue from, and a
          :class:`~jaxsample.types.Batch` whose arrays are ``[T, B, ...]``.
        """
        T, B = self.batch_spec
        _check_state(state, B)
        state, keys = jax.vmap(self._start_batch)(state)
        slots = jax.tree.map(
            lambda o: jnp.zeros((B, self._slots, *o.shape[1:]), o.dtype), state.observation
        )
        n_truncated = jnp.zeros((B,), jnp.int32)
        step = jax.vmap(self._env_step, in_axes=(0, 0, None, None))

        def body(carry, t):
            state, slots, n_truncated = carry
            new_state, out = step(state, keys, agent_params, t)
            if self.final_observation == "sparse":
                slots, n_truncated = jax.lax.cond(
                    jnp.any(out.truncated),
                    self._store_truncated,
                    lambda *a: a[:2],
                    slots,
                    n_truncated,
                    out.truncated,
                    keys,
                    t,
                    state.env_state,
                    out.action,
                )
            return (new_state, slots, n_truncated), out

        start = state
        (state, slots, _), out = jax.lax.scan(
            body, (state, slots, n_truncated), jnp.arange(T, dtype=jnp.int32)
        )
        valid = jnp.ones((T, B), bool) if self.reset_mode == "auto" else out.valid
        ended = out.terminated | out.truncated
        done = ended | ~valid
        traj, traj_infos = jax.vmap(self._trajectories, in_axes=(0, 1, 1, 1), out_axes=(0, 1))(
            start.traj, out.reward, ended, valid
        )
        state = state.replace(traj=traj, **jax.vmap(_advance_epoch, in_axes=(0, None))(keys, T))

        def previous(first: jax.Array, x: jax.Array) -> jax.Array:
            """``x[t - 1]``, zeros (the null action / reward) after an episode
            end, ``first`` at ``t = 0``."""
            cond = done[:-1].reshape(done[:-1].shape + (1,) * (x.ndim - 2))
            shifted = jnp.where(cond, jnp.zeros_like(x[:-1]), x[:-1])
            return jnp.concatenate([first[None], shifted], axis=0)

        prev_action = jax.tree.map(previous, start.prev_action, out.action)
        prev_reward = previous(start.prev_reward, out.reward)
        if self.final_observation == "sparse":
            final_store = SparseFinalObservation(next_observation=state.observation, slots=slots)
        else:
            final_store = out.final_observation
        bootstrap = None
        if self.bootstrap_value:
            inputs = AgentInputs(state.observation, state.prev_action, state.prev_reward)
            bootstrap = jax.vmap(self.agent.value, in_axes=(None, 0, 0))(
                agent_params, inputs, state.agent_state
            )
            bootstrap = jnp.asarray(bootstrap, jnp.float32)
        samples = Samples(
            env=EnvSamples(
                observation=out.observation,
                reward=out.reward,
                prev_reward=prev_reward,
                terminated=out.terminated,
                truncated=out.truncated,
                done=done,
                env_info=out.env_info,
                final_store=final_store,
            ),
            agent=AgentSamples(
                action=out.action,
                prev_action=prev_action,
                agent_info=out.agent_info,
                initial_state=start.agent_state,
                state=out.agent_state if self.store_agent_state else None,
            ),
            valid=valid,
            bootstrap_value=bootstrap,
        )
        return state, Batch(samples=samples, traj_infos=traj_infos)

    def _trajectories(
        self, acc: TrajAccumulator, reward: jax.Array, ended: jax.Array, valid: jax.Array
    ) -> tuple[TrajAccumulator, TrajInfo]:
        """TrajInfo of one env over a batch (inputs ``[T]``), from its accumulator."""

        def step(acc: TrajAccumulator, x: tuple[jax.Array, ...]):
            reward, ended, valid = x
            moved = acc.add(reward, self.discount)
            info = jax.tree.map(
                lambda v: jnp.where(valid, v, jnp.zeros_like(v)), moved.info(completed=ended)
            )
            acc = _tree_where(ended, TrajAccumulator.zeros(), _tree_where(valid, moved, acc))
            return acc, info

        return jax.lax.scan(step, acc, (reward, ended, valid))

    def _initial_agent_state(self, rank: jax.Array) -> PyTree:
        """``agent.initial_state(rank)`` with the dtypes fixed (no weak types in the carry)."""
        return jax.tree.map(
            lambda x, spec: jnp.asarray(x, spec.dtype),
            self.agent.initial_state(rank),
            self._agent_state_spec,
        )

    def _strong(self, obs_and_state: PyTree) -> PyTree:
        """``(obs, env_state)`` with fixed, strong dtypes: gymnax returns some
        weak-typed leaves, which would make the next ``collect`` retrace."""
        return jax.tree.map(
            lambda x, spec: jnp.asarray(x, spec.dtype), obs_and_state, self._obs_state_spec
        )

    def _reset(self, key: jax.Array) -> tuple[PyTree, PyTree]:
        """``env.reset`` with the carry's dtypes."""
        return self._strong(self.env.reset(key, self.env_params))

    def _start_batch(self, s: SamplerState) -> tuple[SamplerState, _EpochKeys]:
        """Per env, at the start of ``collect``: the step keys, and resets.

        ``"episodic"``: every env starts a new episode with the batch. ``"wait"``:
        an env that finished in the last batch already holds its reset state
        and stops idling.
        """
        keys = _EpochKeys(key=s.key, next_key=jax.random.split(s.key)[0], step=s.step)
        if self.reset_mode != "episodic":
            return s.replace(idle=jnp.zeros((), bool)), keys
        obs, env_state = self._reset(_step_key(keys, jnp.zeros((), jnp.uint32), 2))
        s = s.replace(
            env_state=env_state,
            observation=obs,
            prev_action=self._null_action,
            prev_reward=jnp.zeros((), jnp.float32),
            agent_state=self._initial_agent_state(s.env_rank),
            traj=TrajAccumulator.zeros(),
            idle=jnp.zeros((), bool),
        )
        return s, keys

    def _env_step(
        self, s: SamplerState, keys: _EpochKeys, agent_params: PyTree, t: jax.Array
    ) -> tuple[SamplerState, _StepOut]:
        """One step of one env (unbatched): agent acts, env steps, resets on done."""
        k_agent = _step_key(keys, t, 0)
        k_env = _step_key(keys, t, 1)
        inputs = AgentInputs(s.observation, s.prev_action, s.prev_reward)
        agent_step, agent_state = act_checked(
            self.agent,
            agent_params,
            inputs,
            s.agent_state,
            k_agent,
            null_action=self._null_action,
            state_spec=self._agent_state_spec,
            space=self._action_space,
        )
        action = agent_step.action
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            k_env, s.env_state, action, self.env_params
        )
        obs, env_state = self._strong((obs, env_state))
        reward = jnp.asarray(reward, jnp.float32)
        terminated = jnp.asarray(terminated, bool)
        truncated = jnp.asarray(truncated, bool)
        if self.reset_mode == "episodic":  # every batch is one T-step episode
            truncated = truncated | ((t == self.batch_spec.T - 1) & ~terminated)
        done = terminated | truncated
        env_info = {k: v for k, v in info.items() if k not in _INFO_KEYS_WITH_FIELDS}
        out = _StepOut(
            observation=s.observation,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            env_info=env_info,
            final_observation=info["final_observation"]
            if self.final_observation == "dense"
            else (),
            action=action,
            agent_info=agent_step.agent_info,
            agent_state=s.agent_state if self.store_agent_state else (),
            valid=jnp.ones((), bool) if self.reset_mode != "auto" else (),
        )
        new = s.replace(
            env_state=env_state,
            observation=obs,
            prev_action=_tree_where(done, self._null_action, action),
            prev_reward=jnp.where(done, 0.0, reward),
            agent_state=_tree_where(done, self._initial_agent_state(s.env_rank), agent_state),
        )
        if self.reset_mode != "auto":
            # An idle env (finished earlier in this batch) keeps its state and
            # writes zeros with valid=False (done is held True after the scan).
            idle = s.idle
            new = _tree_where(idle, s, new.replace(idle=done))
            out = _tree_where(idle, jax.tree.map(jnp.zeros_like, out), out)
        return new, out

    def _store_truncated(
        self,
        slots: PyTree,
        n_truncated: jax.Array,
        truncated: jax.Array,
        keys: _EpochKeys,
        t: jax.Array,
        env_state: PyTree,
        action: PyTree,
    ) -> tuple[PyTree, jax.Array]:
        """Keep the true final observations of the envs truncated at this step.

        Run only at steps where some env truncated: the step is recomputed from
        the same keys (gymnax envs are pure functions), so the common path never
        materializes the final observation next to the observation.
        """
        k_env = jax.vmap(_step_key, in_axes=(0, None, None))(keys, t, 1)
        final = jax.vmap(self.env.step, in_axes=(0, 0, 0, None))(
            k_env, env_state, action, self.env_params
        )[5]["final_observation"]
        B = truncated.shape[0]
        index = jnp.where(truncated, n_truncated, self._slots)  # out of range: dropped
        slots = jax.tree.map(
            lambda buf, x: buf.at[jnp.arange(B), index].set(x, mode="drop"), slots, final
        )
        return slots, n_truncated + truncated.astype(jnp.int32)


class _EpochKeys(struct.PyTreeNode):
    """One env's key material for a batch: the epoch key, the next epoch's key
    and the step count in the epoch at the start of the batch."""

    key: jax.Array
    next_key: jax.Array
    step: jax.Array  # uint32 scalar, < EPOCH


def _epoch_position(keys: _EpochKeys, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Epoch key and index in it of the step ``t`` steps after the batch start."""
    n = keys.step + jnp.asarray(t, jnp.uint32)  # < 2 * EPOCH: no uint32 wrap
    crossed = n >= EPOCH
    data = jnp.where(crossed, jax.random.key_data(keys.next_key), jax.random.key_data(keys.key))
    key = jax.random.wrap_key_data(data, impl=jax.random.key_impl(keys.key))
    return key, jnp.where(crossed, n - EPOCH, n)


def _step_key(keys: _EpochKeys, t: jax.Array, stream: int) -> jax.Array:
    """Key of stream ``stream`` (0 agent, 1 env, 2 episodic reset) for step ``t``
    of the batch (module docstring)."""
    key, i = _epoch_position(keys, t)
    return jax.random.fold_in(key, 3 * i + stream)


def _advance_epoch(keys: _EpochKeys, T: int) -> dict[str, jax.Array]:
    """The state's ``key`` and ``step`` after the ``T`` steps of a batch."""
    key, step = _epoch_position(keys, jnp.uint32(T))
    return {"key": key, "step": step}


def _check_state(state: Any, B: int) -> None:
    if not isinstance(state, SamplerState):
        raise TypeError(f"state must be the SamplerState from sampler.init, got {type(state)}")
    if state.idle.shape != (B,):
        raise ValueError(
            f"state holds {state.idle.shape[0] if state.idle.ndim else 0} envs, "
            f"but this sampler's BatchSpec has B={B}"
        )


def step_examples(
    observation: PyTree,
    action: PyTree,
    env_info: PyTree,
    agent_info: PyTree,
    agent_state: PyTree,
    *,
    store_agent_state: bool,
    bootstrap_value: bool,
) -> Samples:
    """A sampler's ``examples``: :class:`Samples` of one step (no ``T``/``B``
    axes) with ``jax.ShapeDtypeStruct`` leaves, from the specs of one env's
    observation, action, info, and the agent's info and state."""
    f32, boolean = jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct((), bool)
    return Samples(
        env=EnvSamples(
            observation=_specs(observation),
            reward=f32,
            prev_reward=f32,
            terminated=boolean,
            truncated=boolean,
            done=boolean,
            env_info=_specs(env_info),
            final_store=_specs(observation),
        ),
        agent=AgentSamples(
            action=_specs(action),
            prev_action=_specs(action),
            agent_info=_specs(agent_info),
            initial_state=_specs(agent_state),
            state=_specs(agent_state) if store_agent_state else None,
        ),
        valid=boolean,
        bootstrap_value=f32 if bootstrap_value else None,
    )


def check_options(
    agent: Any,
    batch_spec: Any,
    *,
    max_decorrelation_steps: Any,
    reset_mode: Any,
    discount: Any,
    bootstrap_value: Any,
    store_agent_state: Any,
    final_observation: Any,
    env_ranks: Sequence[int] | None,
    global_B: int | None,
) -> tuple[BatchSpec, int, tuple[int, ...], int]:
    """Check the options every sampler (JAX or host) takes; raise a clear
    ``TypeError``/``ValueError`` naming the bad one.

    Returns ``(BatchSpec(T, B), max_decorrelation_steps, env_ranks, global_B)``
    with the defaults filled in (``env_ranks = range(B)``, ``global_B =
    max(env_ranks) + 1``).
    """
    T = _check_int("batch_spec.T", getattr(batch_spec, "T", None), 1)
    if T > EPOCH:
        raise ValueError(f"batch_spec.T must be <= 2**30, got {T}")
    B = _check_int("batch_spec.B", getattr(batch_spec, "B", None), 1)
    batch_spec = BatchSpec(T, B)
    if reset_mode not in RESET_MODES:
        raise ValueError(f"reset_mode must be one of {RESET_MODES}, got {reset_mode!r}")
    max_decorrelation_steps = _check_int("max_decorrelation_steps", max_decorrelation_steps, 0)
    if reset_mode == "episodic" and max_decorrelation_steps:
        raise ValueError(
            "max_decorrelation_steps must be 0 with reset_mode='episodic' "
            "(every batch resets all envs, so there is nothing to decorrelate)"
        )
    if isinstance(discount, bool) or not isinstance(discount, (int, float)):
        raise TypeError(f"discount must be a float, got {discount!r}")
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {discount}")
    if not isinstance(bootstrap_value, bool):
        raise TypeError(f"bootstrap_value must be a bool, got {bootstrap_value!r}")
    if not isinstance(store_agent_state, bool):
        raise TypeError(f"store_agent_state must be a bool, got {store_agent_state!r}")
    if final_observation not in FINAL_OBSERVATION_STORES:
        raise ValueError(
            f"final_observation must be one of {FINAL_OBSERVATION_STORES}, "
            f"got {final_observation!r}"
        )
    if env_ranks is None:
        env_ranks = tuple(range(B))
    else:
        env_ranks = tuple(_check_int("env_ranks[i]", r, 0) for r in env_ranks)
        if len(env_ranks) != B:
            raise ValueError(f"env_ranks has {len(env_ranks)} entries, but B={B}")
        if len(set(env_ranks)) != B:
            raise ValueError("env_ranks must be distinct")
    if global_B is None:
        global_B = max(env_ranks) + 1
    global_B = _check_int("global_B", global_B, 1)
    if max(env_ranks) >= global_B:
        raise ValueError(f"env_ranks must be < global_B={global_B}, got {max(env_ranks)}")
    for name in ("initial_state", "step", "value"):
        if not callable(getattr(agent, name, None)):
            raise TypeError(f"agent must have a method {name}(...), see jaxsample.agents.Agent")
    return batch_spec, max_decorrelation_steps, env_ranks, global_B


def make_sampler(
    env: Any,
    env_params: Any,
    agent: Agent,
    batch_spec: BatchSpec,
    *,
    max_decorrelation_steps: int = 0,
    reset_mode: ResetMode = "auto",
    discount: float = 0.99,
    bootstrap_value: bool = False,
    final_observation: Literal["sparse", "dense"] = "sparse",
    store_agent_state: bool = False,
    env_ranks: Sequence[int] | None = None,
    global_B: int | None = None,
    agent_params: PyTree = None,
    mesh: jax.sharding.Mesh | None = None,
    mesh_axis: str = "envs",
) -> Sampler:
    """Build a sampler of ``batch_spec.T`` steps of ``batch_spec.B`` envs.

    Args:
      env, env_params: a gymnax (>= 1.0) environment and its parameters.
      agent: an :class:`~jaxsample.agents.Agent` (unbatched functions).
      batch_spec: ``BatchSpec(T, B)``, both positive.
      max_decorrelation_steps: before the first batch each env takes a random
        number ``1..max`` of uniformly random actions, so that the ``B`` envs are
        at different points of their episodes (rlpyt's decorrelation). Episodes
        that end during decorrelation are not reported; the one in progress
        when it ends keeps counting, so its reported length and return cover all
        its steps since its real start, random ones included. 0 disables it;
        it must be 0 with ``reset_mode="episodic"``.
      reset_mode: ``"auto"``, ``"wait"`` or ``"episodic"`` (see README).
      discount: in ``[0, 1]``, for ``TrajInfo.discounted_return``.
      bootstrap_value: also return ``samples.bootstrap_value`` ``[B]``.
      final_observation: ``"sparse"`` (default) keeps the true next observation
        of every step that can be bootstrapped from (not done, or truncated) at
        almost no cost; ``"dense"`` also keeps it on terminated steps, for
        learners that need it (e.g. models of the dynamics), at the cost of a
        second ``[T, B, *obs]`` array.
      store_agent_state: also return the agent's state before every step,
        ``samples.agent.state`` ``[T, B, ...]`` (ALF's ``use_rollout_state``).
      env_ranks: the global rank of each of the ``B`` envs (default
        ``range(B)``); keys and ``agent.initial_state`` depend on it.
      global_B: the number of envs over all devices and processes (default
        ``max(env_ranks) + 1``).
      agent_params: an example of the agent's parameters (arrays or
        ``jax.ShapeDtypeStruct``), used only to check the agent and build
        ``examples``. Defaults to ``jax.eval_shape(agent.init, key, observation)``
        when the agent has an ``init`` method.

    Raises:
      TypeError, ValueError: for bad arguments, or an agent whose action does not
      fit the action space, or whose state or agent_info changes structure.
    """
    if mesh is not None:
        from jaxsample.distributed import check_mesh

        check_mesh(mesh, mesh_axis, _check_int("batch_spec.B", getattr(batch_spec, "B", None), 1))
    batch_spec, max_decorrelation_steps, env_ranks, global_B = check_options(
        agent,
        batch_spec,
        max_decorrelation_steps=max_decorrelation_steps,
        reset_mode=reset_mode,
        discount=discount,
        bootstrap_value=bootstrap_value,
        store_agent_state=store_agent_state,
        final_observation=final_observation,
        env_ranks=env_ranks,
        global_B=global_B,
    )
    T = batch_spec.T
    for name in ("step", "reset", "action_space"):
        if not callable(getattr(env, name, None)):
            raise TypeError(f"env must be a gymnax environment with {name}(...)")

    space = env.action_space(env_params)
    key = jax.random.key(0)
    obs_spec, env_state_spec = jax.eval_shape(env.reset, key, env_params)
    act_spec = action_spec(space)
    step_spec = jax.eval_shape(env.step, key, env_state_spec, act_spec, env_params)
    if not (isinstance(step_spec, tuple) and len(step_spec) == 6):
        raise TypeError(
            "env.step must return (obs, state, reward, terminated, truncated, info) "
            "as gymnax >= 1.0 does"
        )
    info_spec = step_spec[5]
    if not isinstance(info_spec, dict) or "final_observation" not in info_spec:
        raise TypeError("env.step's info must be a dict with 'final_observation' (gymnax >= 1.0)")
    for i, name in ((2, "reward"), (3, "terminated"), (4, "truncated")):
        if step_spec[i].shape != ():
            raise ValueError(f"env.step's {name} must be a scalar, got shape {step_spec[i].shape}")

    if agent_params is None and callable(getattr(agent, "init", None)):
        agent_params = jax.eval_shape(agent.init, key, obs_spec)
    null = null_action(space)
    agent_state_spec = jax.eval_shape(agent.initial_state, jnp.zeros((), jnp.int32))
    inputs = AgentInputs(obs_spec, act_spec, jax.ShapeDtypeStruct((), jnp.float32))
    (agent_step, next_state) = jax.eval_shape(
        agent.step, agent_params, inputs, agent_state_spec, key
    )
    _check_same(
        "agent action", act_spec, agent_step.action, f"The action must fit the env's {space}."
    )
    _check_same(
        "agent state",
        agent_state_spec,
        next_state,
        "agent.step must return a state with the structure of agent.initial_state.",
    )
    if bootstrap_value:
        value_spec = jax.eval_shape(agent.value, agent_params, inputs, agent_state_spec)
        if value_spec.shape != ():
            raise ValueError(f"agent.value must return a scalar, got shape {value_spec.shape}")

    examples = step_examples(
        obs_spec,
        act_spec,
        {k: v for k, v in info_spec.items() if k not in _INFO_KEYS_WITH_FIELDS},
        agent_step.agent_info,
        agent_state_spec,
        store_agent_state=store_agent_state,
        bootstrap_value=bootstrap_value,
    )
    slots = 1 if reset_mode != "auto" else truncation_bound(env, env_params, T)
    sampler = Sampler(
        env=env,
        env_params=env_params,
        agent=agent,
        batch_spec=batch_spec,
        reset_mode=reset_mode,
        max_decorrelation_steps=max_decorrelation_steps,
        discount=float(discount),
        bootstrap_value=bootstrap_value,
        final_observation=final_observation,
        store_agent_state=store_agent_state,
        env_ranks=env_ranks,
        global_B=global_B,
        examples=examples,
        _action_space=space,
        _null_action=null,
        _slots=slots,
        _agent_state_spec=agent_state_spec,
        _obs_state_spec=(step_spec[0], step_spec[1]),
    )
    if mesh is None:
        return sampler
    from jaxsample.distributed import shard_sampler

    return shard_sampler(sampler, mesh, mesh_axis)

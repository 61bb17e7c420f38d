"""The JAX sampler: [`Sampler`][jaxsample.sampler.Sampler] (``init``, ``collect``, ``examples``) and
[`SamplerState`][jaxsample.sampler.SamplerState]; build one with
[`jaxsample.make_sampler`][jaxsample.sampler.make_sampler].

One ``collect`` call is one XLA program: the per-env step
(`EnvStepper`, unbatched) is vmapped over ``B``
environments and scanned over ``T`` steps. What makes it fast:

* the scanned body holds what the env and the agent output and the step's
  TrajInfo (`_StepOut`); ``done`` and the ``prev_action``/
  ``prev_reward`` fields are computed after the scan over whole ``[T, B]``
  arrays (`jaxsample.core.assemble.assemble`). On a CPU a step of a
  cheap env costs what its kernels cost to launch, not their arithmetic, so
  TrajInfo's few element-wise updates go into the step's own kernels rather
  than into a second ``T``-step loop after the scan;
* an agent that does not read ``prev_action``/``prev_reward`` (a reading of
  its jaxpr, `reads_previous`: a
  feed-forward policy, the random agent) gets neither carried through the
  scan; the state's are set from the batch's last step after it;
* the final-observation store is one strategy chosen when the sampler is
  built (`jaxsample.core.finals`): the sparse ones write the true final
  observations inside a ``lax.cond`` only at steps where some env truncates,
  so the scan body reads *step -> store -> reset*; the reset mode is one too
  (`jaxsample.core.modes`);
* no key hashed inside the scan: the batch's agent, step and reset keys are
  drawn before it, one hash per stream (`jaxsample.core.keys.batch_step_keys`; the
  module documents the key schedule), and gymnax's auto-reset step is written
  out with them (`env_step`);
* strong dtypes in the carry, so a second ``collect`` does not retrace.

What each of these gains is measured in docs/benchmarks.md ("The core
overhead benchmark").
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxsample._checks import check_key
from jaxsample.core import keys as K
from jaxsample.core.acting import ActFn
from jaxsample.core.assemble import Steps, assemble, bootstrap_values
from jaxsample.core.finals import FinalStore
from jaxsample.core.masking import agent_inputs, legal_actions
from jaxsample.core.modes import Mode
from jaxsample.core.options import SamplerOptions
from jaxsample.core.resets import Resets, check_split, where_envs
from jaxsample.core.specs import FromParams, recorded_info
from jaxsample.core.step import EnvCarry, EnvStepper, track, traj_step
from jaxsample.traj_info import TrajAccumulator, trajectory_end
from jaxsample.types import Batch, BatchSpec, PyTree, Samples, TrajInfo


@struct.dataclass
class SamplerState:
    """Everything that carries over between ``collect`` calls; leaves ``[B, ...]``.

    Attributes:
      env: the envs' `EnvCarry`: ``env_state``
        (the gymnax env states), ``observation`` (``[B, *obs]``, what the
        agent sees next) and ``agent`` (the previous action, null after a
        reset; the previous reward, float32; the agent's recurrent state;
        ``env_rank``, int32 global rank of each env), e.g.
        ``state.env.observation``, ``state.env.agent.agent_state``.
      key: ``[B]`` per-env run key (``k_run``: every step's key hashes its
        step count with it, `jaxsample.core.keys`).
      epoch: ``[B]`` uint32, the key epoch of the envs' next step.
      step: ``[B]`` uint32, steps taken in the current epoch (``< EPOCH``).
      traj: per-env [`TrajAccumulator`][jaxsample.traj_info.TrajAccumulator].
      idle: ``[B]`` bool, the env finished its episode in this batch and waits
        (``"wait"``/``"episodic"`` modes only).
    """

    env: EnvCarry
    key: jax.Array
    epoch: jax.Array
    step: jax.Array
    traj: TrajAccumulator
    idle: jax.Array


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
    final_observation: PyTree  # stacked only when final_observation="dense"
    action: PyTree
    agent_info: PyTree
    agent_state: PyTree  # () unless store_agent_state
    valid: jax.Array | tuple  # () in "auto" mode, where every step is valid
    traj_info: TrajInfo  # the step's TrajInfo
    # Where the env's own episode ended (not an "episodic" batch's cut): the
    # envs the sampler restarts (_resets); () without. Not stacked.
    ended: jax.Array | tuple = ()


def check_state(state: Any, B: int) -> None:
    """Raise unless ``state`` is a [`SamplerState`][jaxsample.sampler.SamplerState] of ``B``
    envs."""
    if not isinstance(state, SamplerState):
        raise TypeError(f"state must be the SamplerState from sampler.init, got {type(state)}")
    if state.idle.shape != (B,):
        raise ValueError(
            f"state holds {state.idle.shape[0] if state.idle.ndim else 0} envs, "
            f"but this sampler's BatchSpec has B={B}"
        )
    # Outside jit the counts are concrete: a hand-made state past the epoch
    # would reuse keys (under jit they are data; init/collect never make one).
    if not isinstance(state.step, jax.core.Tracer) and int(jnp.max(state.step)) >= K.EPOCH:
        raise ValueError(
            f"state.step must be < 2**30 (steps in the current key epoch), got "
            f"{int(jnp.max(state.step))}: a SamplerState comes from sampler.init/collect"
        )


@dataclasses.dataclass(frozen=True, eq=False)
class Sampler:
    """A compiled-collection sampler; build it with
    [`jaxsample.make_sampler`][jaxsample.sampler.make_sampler].

    ``init`` and ``collect`` are pure and jittable; ``examples`` describes one
    step of [`Samples`][jaxsample.types.Samples] (leaves ``jax.ShapeDtypeStruct``, no
    ``T``/``B`` axes, ``final_store`` holding one dense final observation) to
    allocate replay buffers from. The options (``batch_spec``,
    ``reset_mode``, ...) are ``options``, a
    [`SamplerOptions`][jaxsample.core.options.SamplerOptions]. It is a composition: the
    per-env step (``_stepper``), the final-observation store (``_finals``,
    `jaxsample.core.finals`), the reset mode (``_mode``,
    `jaxsample.core.modes`) and the resets of the envs that ended
    (``_resets``, `jaxsample.core.resets`: gymnax's own where some env
    ended, or pooled; None: the env's own auto-resetting ``step``).
    """

    agent: Any
    options: SamplerOptions
    env: Any
    env_params: Any
    _examples: FromParams  # -> Samples, once the agent's parameters are known
    _stepper: EnvStepper
    _finals: FinalStore
    _mode: Mode
    _resets: Resets | None = None

    @property
    def batch_spec(self) -> BatchSpec:
        """``BatchSpec(T, B)`` of every batch (``options.batch_spec``)."""
        return self.options.batch_spec

    @property
    def examples(self) -> Samples:
        """One step of [`Samples`][jaxsample.types.Samples] (``jax.ShapeDtypeStruct``
        leaves, no ``T``/``B`` axes); a ``ValueError`` naming ``agent_params=``
        while the agent's parameters are unknown (an agent without ``init``,
        built without ``agent_params=``, before the first
        [`init`][jaxsample.sampler.Sampler.init])."""
        return self._examples.get()

    def check_params(self, agent_params: PyTree) -> None:
        """Check the agent with ``agent_params`` if it has not been checked yet
        (an agent without ``init``, built without ``agent_params=``)."""
        self._examples.of(agent_params)

    def split(self, n: int) -> Sampler:
        """The sampler of each of ``n`` equal blocks of this one's envs: the
        first ``B / n`` ranks (a shard of a mesh runs it with its own ranks,
        `init_envs`; `jaxsample.distributed.shard_sampler`). A ``ValueError``
        where pooled resets' blocks do not divide ``B / n``."""
        T, B = self.options.batch_spec
        check_split(self._resets, B, n)
        options = dataclasses.replace(
            self.options,
            batch_spec=BatchSpec(T, B // n),
            env_ranks=self.options.env_ranks[: B // n],
        )
        return dataclasses.replace(self, options=options)

    # ----------------------------------------------------------------- init
    def init(self, key: jax.Array, agent_params: PyTree) -> SamplerState:
        """Start ``B`` envs (and decorrelate them); pure and jittable.

        Args:
          key: a ``jax.random.key``.
          agent_params: the agent's parameters (only their structure is used
            here; the agent does not act during decorrelation).

        Returns:
          The [`SamplerState`][jaxsample.sampler.SamplerState] to pass to
          [`collect`][jaxsample.sampler.Sampler.collect].
        """
        check_key(key)
        self.check_params(agent_params)  # decorrelation takes random actions
        return self.init_envs(key, jnp.asarray(self.options.env_ranks, jnp.int32))

    def init_envs(self, key: jax.Array, env_ranks: jax.Array) -> SamplerState:
        """[`init`][jaxsample.sampler.Sampler.init] for the envs of global ranks ``env_ranks``
        (int32 ``[n]``,
        a traced array is fine): how a shard of a mesh starts its own envs."""
        state, k_steps, n_steps = jax.vmap(self._start_env, in_axes=(None, 0))(key, env_ranks)
        if self.options.max_decorrelation_steps == 0:
            return state
        stepper, resets = self._stepper, self._resets

        def random_step(s: SamplerState, k_steps: jax.Array, i: jax.Array):
            k_action, k_env = K.decorrelation_step_keys(k_steps, i)
            moved, tr = stepper.step(
                s.env,
                stepper.agent.random_act,
                k_action,
                stepper.keys_of(k_env),
                auto_reset=resets is None,
            )
            return s.replace(env=moved, traj=self._track(s, tr)[0]), tr.done

        def body(i: jax.Array, s: SamplerState) -> SamplerState:
            moved, done = jax.vmap(random_step, in_axes=(0, 0, None))(s, k_steps, i)
            stepping = i < n_steps
            if resets is not None:

                def reset_keys(positions):
                    def one(k: jax.Array) -> jax.Array:
                        return K.gymnax_step_keys(K.decorrelation_step_keys(k, i)[1])[1]

                    return jax.vmap(one)(k_steps[positions])

                moved = self._reset_ended(moved, done & stepping, reset_keys)
            return where_envs(stepping, moved, s)

        return jax.lax.fori_loop(0, self.options.max_decorrelation_steps, body, state)

    def _start_env(
        self, key: jax.Array, rank: jax.Array
    ) -> tuple[SamplerState, jax.Array, jax.Array]:
        """One env's start: its state, its decorrelation key and number of steps."""
        k_reset, k_decorrelate, k_run = K.env_keys(key, rank)
        state = SamplerState(
            env=self._stepper.start(k_reset, rank),
            key=k_run,
            epoch=jnp.zeros((), jnp.uint32),
            step=jnp.zeros((), jnp.uint32),
            traj=TrajAccumulator.zeros(
                self.options.traj_fields, self._stepper.env_spec.reward.shape
            ),
            idle=jnp.zeros((), bool),
        )
        k_count, k_steps = K.decorrelation_keys(k_decorrelate)
        n_steps = jnp.zeros((), jnp.int32)
        if self.options.max_decorrelation_steps:
            n_steps = jax.random.randint(k_count, (), 1, self.options.max_decorrelation_steps + 1)
        return state, k_steps, n_steps

    # -------------------------------------------------------------- collect
    def collect(self, state: SamplerState, agent_params: PyTree) -> tuple[SamplerState, Batch]:
        """Collect one ``[T, B]`` batch; pure and jittable (donate ``state``).

        Args:
          state: from [`init`][jaxsample.sampler.Sampler.init] or the previous ``collect``.
          agent_params: the agent's parameters for this batch.

        Returns:
          ``(state, batch)``: the state to continue from, and a
          [`Batch`][jaxsample.types.Batch] whose arrays are ``[T, B, ...]``.
        """
        check_state(state, self.options.batch_spec.B)
        self.check_params(agent_params)  # e.g. () for a learning agent: named here
        return self._collect(state, agent_params, self._stepper.agent.agent_act(agent_params))

    def collect_random(
        self, state: SamplerState, agent_params: PyTree
    ) -> tuple[SamplerState, Batch]:
        """[`collect`][jaxsample.sampler.Sampler.collect] with uniformly random actions: ALF's
        initial collect
        steps (TorchRL's ``init_random_frames``), kept as data.

        The same stream as [`collect`][jaxsample.sampler.Sampler.collect] (same keys, the step
        counter
        advances, TrajInfo accumulates), so batches before and after continue
        each other exactly; only the actions differ: ``action_space.sample``
        with the agent's key of the step, ``agent_info`` zeros of the agent's
        spec, and the agent's state is left as it is. The batch fits
        ``examples``, so it can go into any replayer
        (`jaxsample.replay.prefill` fills one).

        Args:
          state: from [`init`][jaxsample.sampler.Sampler.init] or a previous collect.
          agent_params: the agent's parameters (used only for
            ``bootstrap_value``).

        Returns:
          ``(state, batch)`` as [`collect`][jaxsample.sampler.Sampler.collect].
        """
        check_state(state, self.options.batch_spec.B)
        self.check_params(agent_params)
        agent = self.examples.agent
        act = self._stepper.agent.random_policy(agent.action, agent.agent_info)
        return self._collect(state, agent_params, act)

    def _collect(
        self, state: SamplerState, agent_params: PyTree, act: ActFn
    ) -> tuple[SamplerState, Batch]:
        """[`collect`][jaxsample.sampler.Sampler.collect] with the agent's step ``act``: the scan of
        *step -> store -> reset* over the batch's keys, then the assembly."""
        T = self.options.batch_spec.T
        state, keys = jax.vmap(self._start_batch)(state)
        # Every key of the batch at once, [T, B]: the reset keys too, where
        # the sampler resets or writes gymnax's step out.
        reset_keys = self._resets is not None or self._stepper.gymnax_step
        step_keys = jax.vmap(K.batch_step_keys, in_axes=(0, None, None), out_axes=1)(
            keys, T, reset_keys
        )
        # An agent that does not read prev_action/prev_reward gets none carried
        # through the scan: they are set from the batch's last step after it.
        track_previous = self._stepper.agent.reads_previous(act)
        step = functools.partial(self._step, act, track_previous)

        def body(carry, xs):
            state, store = carry
            t, k_agent, (k_step, k_reset) = xs
            k_env = (k_step, k_reset)
            new_state, out = step(state, t, k_agent, k_env)
            store, out = self._finals.store(store, out, state.env, new_state.env, k_env)
            if self._resets is not None:  # idle envs write ended=False: not reset again
                new_state = self._reset_ended(new_state, out.ended, lambda pos: k_reset[pos])
            return (new_state, store), out.replace(ended=())

        carry = (state, self._finals.init(state.env.observation))
        ts = jnp.arange(T, dtype=jnp.int32)
        (end, store), out = jax.lax.scan(body, carry, (ts, *step_keys))
        if not track_previous:
            end = self._previous_after(end, out)
        epoch, epoch_step = jax.vmap(K.advance_epoch, in_axes=(0, None))(keys, T)
        final = self._finals.batch(store, out, end.env.observation)
        traj, batch = self._assemble(state, end, out, final, agent_params)
        return end.replace(traj=traj, epoch=epoch, step=epoch_step), batch

    def _step(
        self,
        act: ActFn,
        track_previous: bool,
        state: SamplerState,
        t: jax.Array,
        k_agent: jax.Array,
        k_env: K.EnvKeys,
    ) -> tuple[SamplerState, _StepOut]:
        """Step ``t`` of the ``B`` envs (`_env_step` vmapped), their
        actions checked in the checked mode."""
        step = functools.partial(self._env_step, act=act, t=t, track_previous=track_previous)
        new_state, out = jax.vmap(step)(state, k_agent, k_env)
        active = self._mode.valid(out, state.idle.shape)
        legal = legal_actions(state.env.observation)
        self._stepper.agent.check_actions_fit(
            out.action, active, state.env.agent.env_rank, t, "batch step", legal
        )
        return new_state, out

    def _reset_ended(self, state: SamplerState, done: jax.Array, reset_keys: Any) -> SamplerState:
        """The envs that ended (``done`` ``[B]``) restart (``_resets.restart``,
        `jaxsample.core.resets`)."""
        assert self._resets is not None
        env = state.env
        obs, env_state = self._resets.restart(
            self._stepper.reset, reset_keys, done, (env.observation, env.env_state)
        )
        return state.replace(env=env.replace(observation=obs, env_state=env_state))

    def _assemble(
        self,
        start: SamplerState,
        end: SamplerState,
        out: _StepOut,
        final: Any,
        agent_params: PyTree,
    ) -> tuple[TrajAccumulator, Batch]:
        """The batch of the scan's outputs ``out`` (from ``start`` to ``end``)."""
        T, B = self.options.batch_spec
        bootstrap = None
        if self.options.bootstrap_value:
            agent = end.env.agent
            inputs = agent_inputs(end.env.observation, agent.prev_action, agent.prev_reward)
            bootstrap = bootstrap_values(self.agent, agent_params, inputs, agent.agent_state)
        steps = Steps.of(
            out,
            valid=self._mode.valid(out, (T, B)),
            agent_state=out.agent_state if self.options.store_agent_state else None,
        )
        return assemble(
            self.options.discount,
            end.traj,
            steps,
            start.env.agent,
            final,
            bootstrap,
            self.options.traj_done,
            traj_infos=out.traj_info,
        )

    def _track(self, s: SamplerState, tr: Any) -> tuple[TrajAccumulator, TrajInfo]:
        """The accumulator after the step ``tr`` of one env from ``s``, and the
        step's TrajInfo."""
        step = traj_step(s.env.observation, tr) if self.options.traj_fields else None
        ended = trajectory_end(tr.done, tr.truncated, tr.info, self.options.traj_done)
        return track(s.traj, tr.reward, ended, self.options.discount, step)

    def _start_batch(self, s: SamplerState) -> tuple[SamplerState, K.EpochKeys]:
        """Per env, at the start of ``collect``: the step keys, and the mode's
        start (`Mode.begin`: ``"episodic"`` starts a new episode). An
        env that idled (``"wait"``) already holds its reset state and stops
        idling."""
        keys = K.EpochKeys(key=s.key, epoch=s.epoch, step=s.step)
        s = s.replace(idle=jnp.zeros((), bool))
        return self._mode.begin(self._stepper, s, keys), keys

    def _env_step(
        self,
        s: SamplerState,
        k_agent: jax.Array,
        k_env: K.EnvKeys,
        act: ActFn,
        t: jax.Array,
        track_previous: bool = True,
    ) -> tuple[SamplerState, _StepOut]:
        """One step of one env (unbatched) with the step's keys
        (`batch_step_keys`): the core step, and
        what it writes (``track_previous``: `EnvStepper.step`'s)."""
        truncate = self._mode.truncate(t, self.options.batch_spec.T)
        env, tr = self._stepper.step(
            s.env,
            act,
            k_agent,
            k_env,
            truncate,
            auto_reset=self._resets is None,
            track_previous=track_previous,
        )
        traj, traj_info = self._track(s, tr)  # TrajInfo per step, in the scan
        new = s.replace(env=env, traj=traj)
        out = _StepOut(
            observation=s.env.observation,
            reward=tr.reward,
            terminated=tr.terminated,
            truncated=tr.truncated,
            env_info=recorded_info(tr.info),
            final_observation=tr.info["final_observation"] if self._finals.emits else (),
            action=tr.action,
            agent_info=tr.agent_info,
            agent_state=s.env.agent.agent_state if self.options.store_agent_state else (),
            valid=(),  # the mode's hold sets it where some step can be invalid
            traj_info=traj_info,
            ended=(
                jnp.asarray(tr.info["terminated"], bool) | jnp.asarray(tr.info["truncated"], bool)
                if self._resets is not None
                else ()
            ),
        )
        # "wait"/"episodic": an idle env (finished earlier in this batch) keeps
        # its state and writes zeros with valid=False (done is held True after
        # the scan).
        return self._mode.hold(s, new, tr.done, out)

    def _previous_after(self, state: SamplerState, out: _StepOut) -> SamplerState:
        """``state`` with the ``prev_action``/``prev_reward`` after a batch whose
        steps did not carry them: the last step's action and reward, restarted
        where it ended the episode (or the env was idle: it ended earlier in
        the batch, and its state was kept since) — the batch's ``prev_*``
        shift (`assemble`) one step on."""
        done = self._mode.last_done(out)
        last = jax.tree.map(lambda x: x[-1], (out.action, out.reward))
        agent = state.env.agent
        agent = jax.vmap(self._stepper.agent.after)(agent, done, *last, agent.agent_state)
        return state.replace(env=state.env.replace(agent=agent))

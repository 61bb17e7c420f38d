"""Data types shared by the sampler, the agents and the learners.

Every batch array is time-major, ``[T, B, ...]`` (rlpyt's convention): ``T`` time
steps of ``B`` environments. Per-step pytrees such as ``sampler.examples`` have no
``T`` or ``B`` axis.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

PyTree = Any


@functools.cache
def key_spec() -> jax.ShapeDtypeStruct:
    """The ``jax.ShapeDtypeStruct`` of one ``jax.random.key``: what a shape
    evaluation (``jax.eval_shape``) of a function of a key takes. A concrete
    key made outside a traced program costs a compiled program of its own (and
    its XLA compile, tens of milliseconds on a CPU) where only its type is read."""
    return jax.eval_shape(jax.random.key, 0)


class BatchSpec(NamedTuple):
    """Shape of one collected batch: ``T`` time steps of ``B`` environments."""

    T: int
    B: int

    @property
    def size(self) -> int:
        """Number of environment steps in one batch, ``T * B``."""
        return self.T * self.B


class AgentInputs(NamedTuple):
    """What the agent sees at one step of one environment.

    ``observation`` (``*obs``), ``prev_action`` (``*act``: the null action, zeros,
    right after a reset), ``prev_reward`` (scalar float32, 0 after a reset) and
    ``action_mask``: the legal actions of ``observation``, bool ``[n]`` for an
    env with an ``action_mask`` method (Pgx, Jumanji envs with a mask), None
    for any other env (then nothing of it is in the program). Agents act only
    on legal actions (`jaxsample.agents.masks`).
    """

    observation: PyTree
    prev_action: PyTree
    prev_reward: jax.Array
    action_mask: jax.Array | None = None


class AgentStep(NamedTuple):
    """What the agent returns for one step of one environment."""

    action: PyTree
    agent_info: PyTree


@struct.dataclass
class SparseFinalObservation:
    """Compact store of the true next observations of one batch.

    The true next observation of step ``t`` equals ``observation[t + 1]`` unless
    the episode ended at ``t``, so only the episode ends need storing. Of those,
    only truncated ends can be bootstrapped from, so only those are kept:

    * ``next_observation``: ``[B, *obs]``, the observation after the last step
      (``observation[T]`` if the batch were one step longer);
    * ``slots``: ``[B, K, *obs]``, the final observations of env ``b``'s
      truncated steps in the batch, in time order (K bounds the truncations of
      one env in one batch: ``ceil(T / time limit)`` where the time limit is
      known for sure, else ``T``; see
      [`jaxsample.core.finals.truncation_bound`][jaxsample.sampler.truncation_bound]).
    """

    next_observation: PyTree
    slots: PyTree


@struct.dataclass
class EnvSamples:
    """Environment side of a batch; leaves are ``[T, B, ...]``.

    Attributes:
      observation: ``[T, B, *obs]`` what the agent saw at step ``t``.
      reward: ``[T, B]`` float32, the reward for ``action[t]``.
      prev_reward: ``[T, B]`` float32, ``reward[t - 1]`` or 0 after a reset.
      terminated: ``[T, B]`` bool, the episode reached a terminal state.
      truncated: ``[T, B]`` bool, the episode was cut by a time limit (or the end
        of an ``"episodic"`` batch); bootstrap from ``final_observation``.
      done: ``[T, B]`` bool, ``terminated | truncated``; held True on the idle
        steps of the ``"wait"`` and ``"episodic"`` modes.
      env_info: pytree ``[T, B, ...]``, the env's ``info`` without the keys that
        have fields of their own (``terminated``, ``truncated``,
        ``final_observation``).
      final_store: where the true next observations are kept; read them
        through [`final_observation`][jaxsample.types.EnvSamples.final_observation].
      action_mask: ``[T, B, n]`` bool, the legal actions of ``observation[t]``
        (what ``action[t]`` was chosen under), for an env with an
        ``action_mask`` method; None for any other env.
      final_mask_store: the legal actions of the true next observations, kept
        as ``final_store`` keeps those (read them through
        [`final_action_mask`][jaxsample.types.EnvSamples.final_action_mask]); None without masks.
    """

    observation: PyTree
    reward: jax.Array
    prev_reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    done: jax.Array
    env_info: PyTree
    final_store: PyTree
    action_mask: jax.Array | None = None
    final_mask_store: PyTree = None

    @property
    def final_action_mask(self) -> jax.Array | None:
        """``[T, B, n]`` bool, the legal actions of
        [`final_observation`][jaxsample.types.EnvSamples.final_observation]
        (exact where it is; False where it is zeros); None without masks. What
        DQN's target maximises over at a truncated step."""
        if self.action_mask is None:
            return None
        return self._final(self.action_mask, self.final_mask_store)

    @property
    def final_observation(self) -> PyTree:
        """``[T, B, *obs]`` the true next observation of every step.

        With the default ``final_observation="sparse"`` store it is exact on every
        step that can be bootstrapped from (not done, or truncated); on
        terminated steps (whose value is zero by definition) and on idle steps it
        is zeros. With ``final_observation="dense"`` it is exact on every valid
        step, terminated ones included. Inside ``jax.jit`` XLA fuses this lookup
        into whatever consumes it.
        """
        return self._final(self.observation, self.final_store)

    def truncation_slot(self, K: int) -> jax.Array:
        """int32 ``[T, B]``: the slot of a sparse store with ``K`` slots per env
        that holds each truncated step's final observation (the truncations
        before it in the batch; ``K - 1`` at most)."""
        truncated = self.truncated
        return jnp.minimum(jnp.cumsum(truncated, axis=0, dtype=jnp.int32) - truncated, K - 1)

    def _final(self, observation: PyTree, store: PyTree) -> PyTree:
        """The true next values of ``observation`` (leaves ``[T, B, ...]``)
        from their ``store`` (sparse or dense)."""
        if not isinstance(store, SparseFinalObservation):
            return store
        truncated, done = self.truncated, self.done

        def one(obs: jax.Array, nxt: jax.Array, slots: jax.Array) -> jax.Array:
            shifted = jnp.concatenate([obs[1:], nxt[None]], axis=0)
            # slots: [B, K, *obs] -> per step [T, B, *obs]
            b = jnp.arange(slots.shape[0])[None, :]
            from_slot = slots[b, self.truncation_slot(slots.shape[1])]
            expand = (...,) + (None,) * (obs.ndim - 2)
            out = jnp.where(truncated[expand], from_slot, shifted)
            return jnp.where((done & ~truncated)[expand], jnp.zeros_like(out), out)

        return jax.tree.map(one, observation, store.next_observation, store.slots)


@struct.dataclass
class AgentSamples:
    """Agent side of a batch.

    Attributes:
      action: pytree ``[T, B, *act]``.
      prev_action: pytree ``[T, B, *act]``, ``action[t - 1]``, or the null action
        (zeros) right after a reset.
      agent_info: pytree ``[T, B, ...]`` returned by ``agent.step`` (e.g. logits,
        value); zeros on idle steps.
      initial_state: pytree ``[B, ...]``, the agent's recurrent state at the
        start of the batch (what a recurrent learner unrolls from).
      state: pytree ``[T, B, ...]``, the agent's state before each step (ALF's
        ``use_rollout_state``), or None unless the sampler was built with
        ``store_agent_state=True``.
    """

    action: PyTree
    prev_action: PyTree
    agent_info: PyTree
    initial_state: PyTree
    state: PyTree = None


@struct.dataclass
class Samples:
    """One batch of experience.

    In a batch, per-step leaves are ``[T, B, ...]``; ``agent.initial_state`` and
    ``bootstrap_value`` are per batch, ``[B, ...]``. In ``sampler.examples`` every
    leaf describes one env (no ``T``/``B`` axis), so a replay buffer allocates
    ``[B, capacity, ...]`` for the per-step fields and treats those two apart.

    Attributes:
      env: [`EnvSamples`][jaxsample.types.EnvSamples].
      agent: [`AgentSamples`][jaxsample.types.AgentSamples].
      valid: ``[T, B]`` bool; False on the idle steps of the ``"wait"`` and
        ``"episodic"`` modes (always True in ``"auto"`` mode).
      bootstrap_value: ``[B]`` float32, the agent's value of the inputs after
        the last step, or None when the sampler was built with
        ``bootstrap_value=False``.
    """

    env: EnvSamples
    agent: AgentSamples
    valid: jax.Array
    bootstrap_value: jax.Array | None = None

    @property
    def agent_inputs(self) -> AgentInputs:
        """What the agent saw at every step, leaves ``[T, B, ...]``:
        ``AgentInputs(observation, prev_action, prev_reward, action_mask)``."""
        env, prev_action = self.env, self.agent.prev_action
        return AgentInputs(env.observation, prev_action, env.prev_reward, env.action_mask)

    @property
    def next_agent_inputs(self) -> AgentInputs:
        """The inputs after every step had the episode gone on, leaves
        ``[T, B, ...]``: ``AgentInputs(final_observation, action, reward,
        final_action_mask)`` (what a value target bootstraps from)."""
        env = self.env
        return AgentInputs(
            env.final_observation, self.agent.action, env.reward, env.final_action_mask
        )


@struct.dataclass
class TrajInfo:
    """Per-trajectory statistics; in a batch each field is ``[T, B]``.

    A field holds the running value of the current trajectory at that step; where
    ``completed`` is True a trajectory ended at that step and the fields are its
    totals.

    With a multi-agent env (a reward ``[N]`` per step, one per agent) the
    returns are the team's: at each step the mean of the agents' rewards (so a
    reward the agents share counts once, and the team return does not grow
    with ``N``; JaxMARL's baselines report this mean), and ``agent_returns``
    holds each agent's own.

    Attributes:
      completed: bool, a trajectory ended at this step.
      length: int32, number of steps in the trajectory so far.
      episode_return: float32, undiscounted sum of rewards.
      discounted_return: float32, ``sum_k discount**k * reward_k``.
      nonzero_rewards: int32, number of steps with a nonzero reward (any
        agent's).
      extra: the user's fields (``traj_fields=`` of the sampler, rlpyt's
        ``TrajInfoCls``), by name; empty by default.
      agent_returns: float32 ``[..., N]``, each agent's undiscounted return,
        for a multi-agent env; None otherwise.
    """

    completed: jax.Array
    length: jax.Array
    episode_return: jax.Array
    discounted_return: jax.Array
    nonzero_rewards: jax.Array
    extra: dict[str, jax.Array] = struct.field(default_factory=dict)
    agent_returns: jax.Array | None = None


@struct.dataclass
class Batch:
    """What one ``collect`` call returns: the samples and the trajectory infos."""

    samples: Samples
    traj_infos: TrajInfo

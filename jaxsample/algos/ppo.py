"""PPO compiled whole, built only on jaxsample's public API.

``make_train(config)`` returns a :class:`Trainer`, a frozen object of pure
functions. ``trainer.train(key, hparams)`` is the whole run (collection with
:func:`jaxsample.make_sampler`, GAE, epochs and minibatches, all inside one
``lax.scan``): jit it, and ``jax.vmap`` it over seeds and over hyperparameters
(:class:`HParams`: learning rate, clip, entropy and value coefficients) at once::

    import jax, jax.numpy as jnp
    from jaxsample.algos import ppo

    trainer = ppo.make_train(ppo.PPOConfig())            # CleanRL's CartPole setup
    keys = jax.random.split(jax.random.key(0), 4)          # 2 seeds x 2 lrs
    hp = trainer.hparams(lr=jnp.array([2.5e-4, 2.5e-4, 1e-3, 1e-3]))
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys, hp)
    metrics["average_return"][:, -1]                       # [4] final returns

Value targets (:func:`gae`) bootstrap through truncation, not through
termination: at a step cut by the time limit the TD target is
``r + gamma * V(final_observation)``, the value of the true next observation the
sampler kept (:func:`final_values`), at a terminated step it is just ``r``, and the
lambda-recursion stops at every episode end. Treating truncations as terminations
(what most JAX PPO code does: after an auto-reset the next observation it has is
the reset one) teaches the critic that the 500th step of CartPole is worth ``r``.

Two variants (``config.recurrent``):

* feedforward: :class:`~jaxsample.agents.CategoricalActorCritic` (or
  :class:`~jaxsample.agents.GaussianActorCritic` for a ``Box`` action space);
  minibatches are random subsets of the ``T * B`` steps.
* recurrent: :class:`~jaxsample.agents.RecurrentActorCritic`; minibatches are
  random subsets of the ``B`` envs, each a whole ``T``-step sequence re-unrolled
  by ``evaluate_sequence`` from ``samples.agent.initial_state`` with the state
  reset exactly where the sampler reset it (``reset[t] = done[t - 1]``).

Nothing here calls ``jax.jit`` except :func:`reference_run`, a runner: callers jit.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from gymnax.environments import spaces
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxsample as js
from jaxsample._checks import check_int as _check_int
from jaxsample.envs import mask_velocity

__all__ = [
    "MASKED_CARTPOLE_RECURRENT",
    "HParams",
    "PPOConfig",
    "TrainState",
    "Trainer",
    "final_values",
    "gae",
    "make_train",
    "ppo_loss",
    "reference_run",
]

PyTree = Any
_CELLS = ("gru", "lstm")


# ----------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Static configuration of a PPO run (validated when constructed).

    The defaults are CleanRL's ``ppo.py`` on CartPole-v1 (4 envs x 128 steps,
    5e5 steps, Adam 2.5e-4 linearly annealed to 0, 4 epochs x 4 minibatches,
    gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01, value 0.5, max grad norm
    0.5, clipped value loss, per-minibatch advantage normalization).

    Attributes:
      env_name: a gymnax environment id (``gymnax.registered_envs``); ignored
        when :func:`make_train` is given an ``env``.
      num_envs: ``B``, environments collected in parallel.
      num_steps: ``T``, steps per env per iteration (``B * T`` steps per batch).
      total_timesteps: the run is ``total_timesteps // (B * T)`` iterations.
      lr: Adam's learning rate (the default of :attr:`HParams.lr`).
      anneal_lr: scale the learning rate by ``1 - i / num_iterations`` at
        iteration ``i`` (0-based; 0 past the end of the run).
      update_epochs: passes over each batch.
      num_minibatches: minibatches per epoch. Feedforward: ``B * T`` must be
        divisible by it; recurrent (minibatches of whole env sequences): ``B``
        must.
      gamma, gae_lambda: discount and GAE's lambda, in ``[0, 1]``.
      clip_eps: PPO's ratio clip (default of :attr:`HParams.clip_eps`).
      clip_vloss: clip the value loss around the old values as CleanRL does.
      ent_coef, vf_coef: loss coefficients (defaults of :class:`HParams`).
      max_grad_norm: global gradient-norm clip.
      adam_eps: Adam's epsilon (CleanRL: 1e-5).
      normalize_advantages: normalize the advantages per minibatch.
      recurrent: use :class:`~jaxsample.agents.RecurrentActorCritic`.
      hidden_sizes: the feedforward actor's and critic's MLP widths.
      rnn_hidden_size, rnn_cell, rnn_encoder_sizes: the recurrent agent's cell
        width, cell (``"gru"`` / ``"lstm"``) and the MLP before the cell.
      mask_velocity: wrap the env with :func:`jaxsample.envs.mask_velocity`
        (e.g. CartPole with only position and angle observed: a POMDP).
      max_decorrelation_steps: the sampler's start-state decorrelation.
      metrics_window: episodes averaged by ``StepMetrics`` (``average_return``).
    """

    env_name: str = "CartPole-v1"
    num_envs: int = 4
    num_steps: int = 128
    total_timesteps: int = 500_000
    lr: float = 2.5e-4
    anneal_lr: bool = True
    update_epochs: int = 4
    num_minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5
    normalize_advantages: bool = True
    recurrent: bool = False
    hidden_sizes: tuple[int, ...] = (64, 64)
    rnn_hidden_size: int = 128
    rnn_cell: str = "gru"
    rnn_encoder_sizes: tuple[int, ...] = ()
    mask_velocity: bool = False
    max_decorrelation_steps: int = 0
    metrics_window: int = 20

    def __post_init__(self) -> None:
        if not isinstance(self.env_name, str):
            raise TypeError(f"env_name must be a str, got {self.env_name!r}")
        for name in (
            "num_envs",
            "num_steps",
            "total_timesteps",
            "update_epochs",
            "num_minibatches",
            "rnn_hidden_size",
            "metrics_window",
        ):
            _check_int(name, getattr(self, name), 1)
        _check_int("max_decorrelation_steps", self.max_decorrelation_steps, 0)
        for name in ("anneal_lr", "clip_vloss", "normalize_advantages", "recurrent"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.mask_velocity, bool):
            raise TypeError(f"mask_velocity must be a bool, got {self.mask_velocity!r}")
        for name, low, high in (
            ("lr", 0.0, math.inf),
            ("gamma", 0.0, 1.0),
            ("gae_lambda", 0.0, 1.0),
            ("clip_eps", 0.0, math.inf),
            ("ent_coef", 0.0, math.inf),
            ("vf_coef", 0.0, math.inf),
            ("max_grad_norm", 0.0, math.inf),
            ("adam_eps", 0.0, math.inf),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a float, got {value!r}")
            if not (low <= value <= high) or math.isnan(value):
                raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
        if self.max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be > 0, got {self.max_grad_norm}")
        for name in ("hidden_sizes", "rnn_encoder_sizes"):
            sizes = getattr(self, name)
            if not isinstance(sizes, (tuple, list)) or any(
                isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes
            ):
                raise ValueError(f"{name} must be a tuple of positive ints, got {sizes!r}")
            object.__setattr__(self, name, tuple(sizes))
        if self.rnn_cell not in _CELLS:
            raise ValueError(f"rnn_cell must be one of {_CELLS}, got {self.rnn_cell!r}")
        if self.total_timesteps < self.batch_size:
            raise ValueError(
                f"total_timesteps ({self.total_timesteps}) must be >= num_envs * num_steps "
                f"({self.batch_size}): the run would have no iteration"
            )
        if self.recurrent:
            if self.num_envs % self.num_minibatches:
                raise ValueError(
                    f"num_envs ({self.num_envs}) must be divisible by num_minibatches "
                    f"({self.num_minibatches}): recurrent PPO minibatches whole env sequences"
                )
        elif self.batch_size % self.num_minibatches:
            raise ValueError(
                f"num_envs * num_steps ({self.batch_size}) must be divisible by "
                f"num_minibatches ({self.num_minibatches})"
            )

    @property
    def batch_size(self) -> int:
        """Environment steps per iteration, ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        """Steps per minibatch, ``batch_size // num_minibatches``."""
        return self.batch_size // self.num_minibatches

    @property
    def num_iterations(self) -> int:
        """Iterations of a full run, ``total_timesteps // batch_size``."""
        return self.total_timesteps // self.batch_size


#: Recurrent PPO for CartPole with the velocities hidden (a POMDP). After RL Zoo's
#: tuned RecurrentPPO for CartPoleNoVel-v1: short sequences, many epochs, lr 1e-3,
#: a shorter horizon (gamma 0.98, lambda 0.8); here with an entropy bonus of 0.01,
#: a GRU of 64 after a 64-unit encoder, 32 envs x 32 steps in minibatches of 8
#: whole env sequences. With ``recurrent=False`` it is the feedforward baseline.
MASKED_CARTPOLE_RECURRENT = PPOConfig(
    env_name="CartPole-v1",
    mask_velocity=True,
    recurrent=True,
    num_envs=32,
    num_steps=32,
    total_timesteps=300_000,
    lr=1e-3,
    update_epochs=20,
    num_minibatches=4,
    gamma=0.98,
    gae_lambda=0.8,
    ent_coef=0.01,
    rnn_hidden_size=64,
    rnn_encoder_sizes=(64,),
)


@struct.dataclass
class HParams:
    """Hyperparameters that are data, not static config: vmap over them.

    Each field is a float32 scalar for one run (``[N]`` to vmap ``N`` runs).
    Build with :meth:`Trainer.hparams` (defaults from the config).
    """

    lr: jax.Array
    clip_eps: jax.Array
    ent_coef: jax.Array
    vf_coef: jax.Array


@struct.dataclass
class TrainState:
    """Everything a PPO run carries from one iteration to the next (a pytree).

    Attributes:
      params: the agent's parameters (flax variables dict).
      opt_state: optax state of ``clip_by_global_norm`` + ``scale_by_adam``.
      sampler_state: :class:`jaxsample.SamplerState` (envs, recurrent states,
        per-env key chains).
      key: the key of the minibatch permutations (split every iteration).
      iteration: int32 ``[]``, iterations done (drives the lr annealing).
      metrics: :class:`jaxsample.StepMetrics` (exact env-step and episode counts,
        the returns of the last ``metrics_window`` episodes).
      hparams: this run's :class:`HParams`.
    """

    params: PyTree
    opt_state: PyTree
    sampler_state: js.SamplerState
    key: jax.Array
    iteration: jax.Array
    metrics: js.StepMetrics
    hparams: HParams


class _Rollout(struct.PyTreeNode):
    """What the loss needs from a batch; leaves ``[T, B, ...]`` except
    ``initial_state`` (``[B, ...]``)."""

    inputs: js.AgentInputs
    action: PyTree
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array
    reset: jax.Array
    initial_state: PyTree


# ----------------------------------------------------------------------------
# GAE and value targets
# ----------------------------------------------------------------------------


def gae(
    reward: jax.Array,
    value: jax.Array,
    final_value: jax.Array,
    bootstrap_value: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    *,
    gamma: float | jax.Array,
    lam: float | jax.Array,
    valid: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Generalized advantage estimation that bootstraps through truncation only.

    Time-major: every per-step array is ``[T, ...]`` (``[T]`` for one env, ``[T, B]``
    for a batch), ``bootstrap_value`` is ``[...]`` (``[]`` or ``[B]``).

    Args:
      reward: ``r[t]``, the reward for the action at step ``t``.
      value: ``V(s[t])``, the critic's value of the inputs at step ``t`` (e.g.
        ``samples.agent.agent_info.value``).
      final_value: ``V(final_observation[t])``, the value of the true next
        observation of step ``t`` (:func:`final_values`); only read where
        ``truncated`` (it may be anything elsewhere).
      bootstrap_value: the value of the inputs after the last step
        (``samples.bootstrap_value``); read only if step ``T - 1`` is not done.
      terminated: bool, the episode reached a terminal state at step ``t``.
      truncated: bool, the episode was cut (time limit) at step ``t``. A step
        that is both counts as terminated.
      gamma, lam: discount and GAE lambda.
      valid: optional bool mask (the sampler's ``samples.valid``); an invalid
        (idle) step ends the recursion and gets advantage 0.

    With ``next_value[t] = final_value[t]`` if ``truncated[t]``, else
    ``value[t + 1]`` (``bootstrap_value`` for ``t = T - 1``), and
    ``done[t] = terminated[t] | truncated[t] | ~valid[t]``::

        delta[t] = r[t] + gamma * (1 - terminated[t]) * next_value[t] - value[t]
        A[t]     = delta[t] + gamma * lam * (1 - done[t]) * A[t + 1],   A[T] = 0

    so a truncated step's TD target is ``r + gamma * V(final observation)``, a
    terminated step's is ``r``, and no advantage flows across an episode end.

    Returns:
      ``(advantages, returns)``, both ``[T, ...]`` float32, ``returns = A + value``
      (the value targets; on invalid steps ``A = 0``).
    """
    reward = jnp.asarray(reward, jnp.float32)
    value = jnp.asarray(value, jnp.float32)
    final_value = jnp.asarray(final_value, jnp.float32)
    bootstrap_value = jnp.asarray(bootstrap_value, jnp.float32)
    terminated = jnp.asarray(terminated, bool)
    truncated = jnp.asarray(truncated, bool)
    valid = jnp.ones_like(terminated) if valid is None else jnp.asarray(valid, bool)
    shape = reward.shape
    if len(shape) < 1:
        raise ValueError(f"reward must be time-major [T, ...], got shape {shape}")
    for name, x in (
        ("value", value),
        ("final_value", final_value),
        ("terminated", terminated),
        ("truncated", truncated),
        ("valid", valid),
    ):
        if x.shape != shape:
            raise ValueError(f"{name} must have reward's shape {shape}, got {x.shape}")
    if bootstrap_value.shape != shape[1:]:
        raise ValueError(
            f"bootstrap_value must have shape {shape[1:]}, got {bootstrap_value.shape}"
        )

    following = jnp.concatenate([value[1:], bootstrap_value[None]], axis=0)
    next_value = jnp.where(truncated, final_value, following)
    not_terminated = 1.0 - terminated.astype(jnp.float32)
    not_done = 1.0 - (terminated | truncated | ~valid).astype(jnp.float32)
    delta = reward + gamma * not_terminated * next_value - value

    def step(next_advantage: jax.Array, x: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        delta_t, not_done_t, valid_t = x
        advantage = jnp.where(valid_t, delta_t + gamma * lam * not_done_t * next_advantage, 0.0)
        return advantage, advantage

    _, advantages = jax.lax.scan(
        step, jnp.zeros_like(bootstrap_value), (delta, not_done, valid), reverse=True
    )
    return advantages, advantages + value


def final_values(agent: Any, params: PyTree, samples: js.Samples) -> jax.Array:
    """``V(final_observation[t])`` for every step: ``[T, B]`` float32.

    The value of the true next observation of step ``t`` is what the agent would
    have reported at step ``t + 1`` had the episode not ended:
    ``agent.value(params, AgentInputs(final_observation[t], action[t], reward[t]),
    state_after[t])``, where ``state_after[t]`` is the agent's recurrent state
    after its step ``t``, before the sampler reset it. That state is not in the
    batch when the episode ended at ``t`` (the next stored state is the reset
    one), so it is recomputed from the state BEFORE step ``t``
    (``samples.agent.state``, kept by a sampler built with
    ``store_agent_state=True``) by re-running ``agent.step`` on step ``t``'s
    inputs: one parallel cell application per step, no sequential scan. (This
    assumes the state transition does not depend on the step's key, which holds
    for jaxsample's agents: the key only samples the action.) A stateless agent
    (``initial_state`` is ``()``) needs no stored state.

    On non-done steps this equals ``agent_info.value[t + 1]`` (and
    ``bootstrap_value`` at ``t = T - 1``); :func:`gae` reads it only at truncated
    steps. On terminated steps the sparse store's final observation is zeros and
    the value meaningless (GAE never reads it).
    """
    env, ag = samples.env, samples.agent
    next_inputs = js.AgentInputs(env.final_observation, ag.action, env.reward)
    value = jax.vmap(jax.vmap(agent.value, in_axes=(None, 0, 0)), in_axes=(None, 0, 0))
    if ag.state is None:
        if jax.tree.leaves(ag.initial_state):
            raise ValueError(
                "final_values needs the agent's state before every step for a recurrent "
                "agent: build the sampler with store_agent_state=True"
            )
        T, B = env.reward.shape
        stateless = jax.tree.map(
            lambda x: jnp.broadcast_to(x, (T, B, *x.shape[1:])), ag.initial_state
        )
        return value(params, next_inputs, stateless).astype(jnp.float32)
    inputs = js.AgentInputs(env.observation, ag.prev_action, env.prev_reward)
    key = jax.random.key(0)  # unused by the state transition (see docstring)

    def state_after(step_inputs: js.AgentInputs, state: PyTree) -> PyTree:
        return agent.step(params, step_inputs, state, key)[1]

    after = jax.vmap(jax.vmap(state_after))(inputs, ag.state)
    return value(params, next_inputs, after).astype(jnp.float32)


# ----------------------------------------------------------------------------
# Loss
# ----------------------------------------------------------------------------


def ppo_loss(
    log_prob: jax.Array,
    entropy: jax.Array,
    value: jax.Array,
    old_log_prob: jax.Array,
    old_value: jax.Array,
    advantage: jax.Array,
    target: jax.Array,
    hparams: HParams,
    *,
    clip_vloss: bool = True,
    normalize_advantages: bool = True,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PPO's clipped surrogate loss over one minibatch (any common shape).

    ``log_prob``, ``entropy``, ``value``: under the current parameters;
    ``old_*``: at collection; ``advantage``, ``target``: from :func:`gae`.
    Returns ``(loss, stats)``: ``pg - ent_coef * entropy + vf_coef * value_loss``
    (means over the minibatch) and float32 scalars ``pg_loss``, ``value_loss``,
    ``entropy``, ``approx_kl`` (``E[ratio - 1 - log ratio]``), ``clip_frac``.
    """
    if normalize_advantages:
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
    log_ratio = log_prob - old_log_prob
    ratio = jnp.exp(log_ratio)
    clipped = jnp.clip(ratio, 1.0 - hparams.clip_eps, 1.0 + hparams.clip_eps)
    pg_loss = jnp.maximum(-advantage * ratio, -advantage * clipped).mean()
    value_error = jnp.square(value - target)
    if clip_vloss:
        value_clipped = old_value + jnp.clip(value - old_value, -hparams.clip_eps, hparams.clip_eps)
        value_error = jnp.maximum(value_error, jnp.square(value_clipped - target))
    value_loss = 0.5 * value_error.mean()
    entropy = entropy.mean()
    loss = pg_loss - hparams.ent_coef * entropy + hparams.vf_coef * value_loss
    stats = {
        "pg_loss": pg_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
        "clip_frac": (jnp.abs(ratio - 1.0) > hparams.clip_eps).mean(dtype=jnp.float32),
    }
    return loss, stats


# ----------------------------------------------------------------------------
# Trainer
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Trainer:
    """PPO as pure functions; build it with :func:`make_train`.

    * ``init(key, hparams=None) -> TrainState``
    * ``iteration(state) -> (state, metrics)``: one collect, then ``learn``.
    * ``learn(state, batch) -> (state, metrics)``: GAE and ``update_epochs`` x
      ``num_minibatches`` gradient steps on a collected ``batch``.
    * ``run(state, num_iterations) -> (state, metrics)``: ``lax.scan`` of
      ``iteration``; ``num_iterations`` is static (``static_argnums=1``).
    * ``train(key, hparams=None) -> (state, metrics)``: ``init`` then ``run``
      for ``config.num_iterations``.

    All are jittable and vmappable (over keys and :class:`HParams`). ``metrics``
    is a dict of float32 scalars per iteration (stacked ``[num_iterations]`` by
    ``run``): ``env_steps`` (after the iteration), ``episode_return_mean``,
    ``episode_length_mean``, ``n_episodes`` (episodes completed in this batch;
    the means are NaN when none did), ``average_return``,
    ``average_episode_length`` (over the last ``metrics_window`` episodes, NaN
    before the first), ``lr``, ``loss``, ``pg_loss``, ``value_loss``,
    ``entropy``, ``approx_kl``, ``clip_frac`` (means over the iteration's
    minibatches), ``explained_variance``.
    """

    config: PPOConfig
    env: Any
    env_params: Any
    agent: Any
    sampler: js.Sampler
    optimizer: optax.GradientTransformation
    mesh: Mesh | None = None
    mesh_axis: str = "envs"

    @property
    def num_iterations(self) -> int:
        """Iterations of a full run (``config.num_iterations``)."""
        return self.config.num_iterations

    def hparams(self, **overrides: Any) -> HParams:
        """:class:`HParams` from the config, with ``overrides`` (e.g. ``lr=[...]``).

        Fields are float32 and broadcast to one common shape, so giving one
        field an ``[N]`` array makes ``N`` runs to vmap over.
        """
        unknown = set(overrides) - {f.name for f in dataclasses.fields(HParams)}
        if unknown:
            raise ValueError(
                f"unknown hparams {sorted(unknown)}; the fields are "
                f"{[f.name for f in dataclasses.fields(HParams)]}"
            )
        values = {
            f.name: jnp.asarray(overrides.get(f.name, getattr(self.config, f.name)), jnp.float32)
            for f in dataclasses.fields(HParams)
        }
        shape = jnp.broadcast_shapes(*(v.shape for v in values.values()))
        return HParams(**{k: jnp.broadcast_to(v, shape) for k, v in values.items()})

    # -- pure functions ------------------------------------------------------

    def init(self, key: jax.Array, hparams: HParams | None = None) -> TrainState:
        """A fresh run from ``key`` (a ``jax.random.key``); ``hparams`` default to
        the config's (:meth:`hparams`)."""
        hparams = self.hparams() if hparams is None else hparams
        if not isinstance(hparams, HParams):
            raise TypeError(f"hparams must be an HParams, got {type(hparams).__name__}")
        for f in dataclasses.fields(HParams):
            x = getattr(hparams, f.name)
            if jnp.shape(x) != ():
                raise ValueError(
                    f"hparams.{f.name} must be a scalar for one run (vmap to run several), "
                    f"got shape {jnp.shape(x)}"
                )
        hparams = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), hparams)
        k_params, k_sampler, k_train = jax.random.split(key, 3)
        example = jax.tree.map(
            lambda s: jnp.zeros(s.shape, s.dtype), self.sampler.examples.env.observation
        )
        params = self.agent.init(k_params, example)
        return TrainState(
            params=params,
            opt_state=self.optimizer.init(params),
            sampler_state=self.sampler.init(k_sampler, params),
            key=k_train,
            iteration=jnp.zeros((), jnp.int32),
            metrics=js.StepMetrics.init(self.config.metrics_window),
            hparams=hparams,
        )

    def iteration(self, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        """One PPO iteration: collect ``[T, B]`` with ``state.params``, then :meth:`learn`."""
        sampler_state, batch = self.sampler.collect(state.sampler_state, state.params)
        return self.learn(state.replace(sampler_state=sampler_state), batch)

    def learn(
        self, state: TrainState, batch: js.Batch
    ) -> tuple[TrainState, dict[str, jax.Array]]:
        """GAE and the ``update_epochs`` x ``num_minibatches`` gradient steps on ``batch``.

        Everything of an iteration but the collection: ``state.sampler_state`` is
        left as it is, so an actor/learner driver can collect elsewhere and feed
        the batches here. The batch's ``agent_info`` (log-probabilities, values)
        is the behaviour policy's, so a batch collected with older parameters is
        learned from with PPO's clipped importance ratio against those.
        """
        c = self.config
        rollout = self._rollout(state.params, batch.samples)
        frac = 1.0 - state.iteration.astype(jnp.float32) / self.num_iterations
        lr = state.hparams.lr * (jnp.maximum(frac, 0.0) if c.anneal_lr else 1.0)
        key, k_epochs = jax.random.split(state.key)

        def epoch(carry, k_epoch):
            minibatches = self._minibatches(rollout, k_epoch)
            return jax.lax.scan(self._update, carry, minibatches)

        (params, opt_state, _, _), stats = jax.lax.scan(
            epoch,
            (state.params, state.opt_state, state.hparams, lr),
            jax.random.split(k_epochs, c.update_epochs),
        )
        metrics = state.metrics.update(batch)
        new_state = state.replace(
            params=params,
            opt_state=opt_state,
            key=key,
            iteration=state.iteration + 1,
            metrics=metrics,
        )
        episodes = js.summarize(batch.traj_infos)
        summary = metrics.summary()
        out = {k: jnp.mean(v) for k, v in stats.items()}
        residual = jnp.var(rollout.target - rollout.value)
        out.update(
            env_steps=summary["environment_steps"],
            episode_return_mean=episodes["episode_return_mean"],
            episode_length_mean=episodes["length_mean"],
            n_episodes=episodes["n_trajectories"],
            average_return=summary["average_return"],
            average_episode_length=summary["average_episode_length"],
            lr=lr,
            explained_variance=1.0 - residual / jnp.maximum(jnp.var(rollout.target), 1e-8),
        )
        return new_state, out

    def run(
        self, state: TrainState, num_iterations: int
    ) -> tuple[TrainState, dict[str, jax.Array]]:
        """``num_iterations`` (static) iterations; metrics stacked ``[num_iterations]``."""
        _check_int("num_iterations", num_iterations, 1)
        return jax.lax.scan(lambda s, _: self.iteration(s), state, None, length=num_iterations)

    def train(
        self, key: jax.Array, hparams: HParams | None = None
    ) -> tuple[TrainState, dict[str, jax.Array]]:
        """The whole run: ``run(init(key, hparams), config.num_iterations)``."""
        return self.run(self.init(key, hparams), self.num_iterations)

    # -- internals -------------------------------------------------------------

    def _rollout(self, params: PyTree, samples: js.Samples) -> _Rollout:
        c = self.config
        env, ag = samples.env, samples.agent
        advantage, target = gae(
            env.reward,
            ag.agent_info.value,
            final_values(self.agent, params, samples),
            samples.bootstrap_value,
            env.terminated,
            env.truncated,
            gamma=c.gamma,
            lam=c.gae_lambda,
            valid=samples.valid,
        )
        # The sampler reset the state before step t iff done[t - 1]; the state
        # before step 0 (initial_state) already accounts for the previous batch.
        reset = jnp.concatenate([jnp.zeros_like(env.done[:1]), env.done[:-1]], axis=0)
        return _Rollout(
            inputs=js.AgentInputs(env.observation, ag.prev_action, env.prev_reward),
            action=ag.action,
            log_prob=ag.agent_info.log_prob,
            value=ag.agent_info.value,
            advantage=advantage,
            target=target,
            reset=reset,
            initial_state=ag.initial_state,
        )

    def _minibatches(self, rollout: _Rollout, key: jax.Array) -> _Rollout:
        """Shuffle and split: leaves get a leading ``[num_minibatches]`` axis.

        Feedforward: ``[T, B, ...] -> [M, T * B / M, ...]`` over random steps.
        Recurrent: ``[T, B, ...] -> [M, T, B / M, ...]`` over random envs (whole
        sequences; ``initial_state`` ``[B, ...] -> [M, B / M, ...]``).
        """
        c = self.config
        M = c.num_minibatches
        T, B = rollout.advantage.shape
        if c.recurrent:
            perm = jax.random.permutation(key, B)
            steps = rollout.replace(initial_state=())
            steps = jax.tree.map(
                lambda x: jnp.swapaxes(
                    jnp.take(x, perm, axis=1).reshape(T, M, B // M, *x.shape[2:]), 0, 1
                ),
                steps,
            )
            initial = jax.tree.map(
                lambda x: jnp.take(x, perm, axis=0).reshape(M, B // M, *x.shape[1:]),
                rollout.initial_state,
            )
            steps = self._shard(steps, P(None, None, self.mesh_axis))
            return steps.replace(initial_state=self._shard(initial, P(None, self.mesh_axis)))
        perm = jax.random.permutation(key, T * B)
        steps = rollout.replace(initial_state=(), reset=jnp.zeros((T, B), bool))
        steps = jax.tree.map(
            lambda x: jnp.take(x.reshape(T * B, *x.shape[2:]), perm, axis=0).reshape(
                M, T * B // M, *x.shape[2:]
            ),
            steps,
        )
        return self._shard(steps, P(None, self.mesh_axis))

    def _shard(self, tree: PyTree, spec: P) -> PyTree:
        """With a mesh, split the minibatches' sample axis over its devices: the
        gradient of the minibatch mean is then each device's part, all-reduced
        (data parallel, in the same program). Without one, ``tree`` as is."""
        if self.mesh is None:
            return tree
        sharding = NamedSharding(self.mesh, spec)
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), tree)

    def _evaluate(self, params: PyTree, mb: _Rollout) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(log_prob, entropy, value)`` of a minibatch under ``params``."""
        if self.config.recurrent:
            # One env sequence per vmap lane: leaves [T, b, ...], initial [b, ...].
            return jax.vmap(self.agent.evaluate_sequence, in_axes=(None, 1, 0, 1, 1), out_axes=1)(
                params, mb.inputs, mb.initial_state, mb.reset, mb.action
            )
        return jax.vmap(self.agent.evaluate, in_axes=(None, 0, 0))(params, mb.inputs, mb.action)

    def _update(self, carry: tuple, mb: _Rollout) -> tuple[tuple, dict[str, jax.Array]]:
        """One gradient step on one minibatch."""
        params, opt_state, hparams, lr = carry
        c = self.config

        def loss_fn(p: PyTree) -> tuple[jax.Array, dict[str, jax.Array]]:
            log_prob, entropy, value = self._evaluate(p, mb)
            return ppo_loss(
                log_prob,
                entropy,
                value,
                mb.log_prob,
                mb.value,
                mb.advantage,
                mb.target,
                hparams,
                clip_vloss=c.clip_vloss,
                normalize_advantages=c.normalize_advantages,
            )

        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: -lr * u, updates)
        params = optax.apply_updates(params, updates)
        return (params, opt_state, hparams, lr), {"loss": loss, **stats}


def make_train(
    config: PPOConfig,
    *,
    env: Any = None,
    env_params: Any = None,
    mesh: Mesh | None = None,
    mesh_axis: str = "envs",
) -> Trainer:
    """Build PPO for ``config``: a :class:`Trainer` of pure functions.

    Args:
      config: a :class:`PPOConfig`.
      env, env_params: a gymnax environment to use instead of
        ``gymnax.make(config.env_name)`` (``env_params`` defaults to its
        ``default_params``). ``config.mask_velocity`` wraps either.
      mesh, mesh_axis: run data parallel over this mesh axis (Anakin style, one
        program): the sampler splits the ``num_envs`` envs over its devices
        (:mod:`jaxsample.distributed`), every minibatch is split over them too,
        and the gradient of the minibatch loss is all-reduced; the parameters
        and optimizer state are replicated. Same seed, same global batch: the
        same run as on one device, up to float rounding. ``num_envs``, and
        each minibatch, must be divisible by the axis size.

    The sampler is ``make_sampler(env, env_params, agent, BatchSpec(num_steps,
    num_envs), reset_mode="auto", bootstrap_value=True)`` with the default sparse
    final-observation store, and ``store_agent_state=True`` for the recurrent
    agent (see :func:`final_values`). The optimizer is
    ``chain(clip_by_global_norm(max_grad_norm), scale_by_adam(eps=adam_eps))``;
    the step is scaled by ``-hparams.lr`` times the annealing factor.
    """
    if not isinstance(config, PPOConfig):
        raise TypeError(f"config must be a PPOConfig, got {type(config).__name__}")
    if env is None:
        if env_params is not None:
            raise ValueError("env_params given without env")
        if config.env_name not in gymnax.registered_envs:
            raise ValueError(f"env_name {config.env_name!r} is not a gymnax environment")
        env, env_params = gymnax.make(config.env_name)
    elif env_params is None:
        env_params = env.default_params
    if config.mask_velocity:
        env = mask_velocity(env)
    space = env.action_space(env_params)
    if config.recurrent:
        agent = js.agents.RecurrentActorCritic(
            space,
            hidden_size=config.rnn_hidden_size,
            cell=config.rnn_cell,
            encoder_sizes=config.rnn_encoder_sizes,
        )
    elif isinstance(space, spaces.Discrete):
        agent = js.agents.CategoricalActorCritic(space, hidden_sizes=config.hidden_sizes)
    elif isinstance(space, spaces.Box):
        agent = js.agents.GaussianActorCritic(space, hidden_sizes=config.hidden_sizes)
    else:
        raise TypeError(f"PPO needs a Discrete or Box action space, got {type(space).__name__}")
    sampler = js.make_sampler(
        env,
        env_params,
        agent,
        js.BatchSpec(T=config.num_steps, B=config.num_envs),
        max_decorrelation_steps=config.max_decorrelation_steps,
        reset_mode="auto",
        discount=config.gamma,
        bootstrap_value=True,
        store_agent_state=config.recurrent,
        mesh=mesh,
        mesh_axis=mesh_axis,
    )
    if mesh is not None:
        n = int(mesh.shape[mesh_axis])
        per_minibatch = config.num_envs // config.num_minibatches if config.recurrent else (
            config.minibatch_size
        )
        if per_minibatch % n:
            raise ValueError(
                f"a minibatch of {per_minibatch} "
                f"{'env sequences' if config.recurrent else 'steps'} cannot be split over "
                f"the {n} devices of mesh axis {mesh_axis!r}: change num_minibatches"
            )
    optimizer = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.scale_by_adam(eps=config.adam_eps),
    )
    return Trainer(
        config=config,
        env=env,
        env_params=env_params,
        agent=agent,
        sampler=sampler,
        optimizer=optimizer,
        mesh=mesh,
        mesh_axis=mesh_axis,
    )


# ----------------------------------------------------------------------------
# Reference runs (a runner: this one jits)
# ----------------------------------------------------------------------------


def reference_run(
    config: PPOConfig | None = None,
    seeds: Sequence[int] = tuple(range(8)),
    *,
    lrs: Sequence[float] | None = None,
    tail_iterations: int = 10,
) -> dict[str, Any]:
    """Train ``len(seeds)`` runs (x ``len(lrs)``) under one ``jax.vmap`` and report.

    The default is the reference benchmark: CleanRL's CartPole-v1 PPO, 8 seeds.
    Returns a dict with ``compile_s``, ``run_s`` (wall times), ``final_return``
    (per run, ``StepMetrics``' mean over the last ``metrics_window`` episodes),
    ``tail_return`` (mean return of the episodes completed in the last
    ``tail_iterations`` iterations), ``metrics`` (numpy, ``[runs, iterations]``)
    and the ``seeds`` and ``lrs`` of each run.
    """
    config = PPOConfig() if config is None else config
    trainer = make_train(config)
    seed_list = [int(s) for s in seeds]
    lr_list = [config.lr] if lrs is None else [float(x) for x in lrs]
    run_seeds = [s for s in seed_list for _ in lr_list]
    run_lrs = [lr for _ in seed_list for lr in lr_list]
    keys = jax.vmap(jax.random.key)(jnp.asarray(run_seeds, jnp.uint32))
    hparams = trainer.hparams(lr=jnp.asarray(run_lrs, jnp.float32))
    train = jax.jit(jax.vmap(trainer.train))
    t0 = time.perf_counter()
    compiled = train.lower(keys, hparams).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, metrics = compiled(keys, hparams)
    metrics = jax.tree.map(np.asarray, jax.block_until_ready(metrics))
    run_s = time.perf_counter() - t0
    tail = slice(-tail_iterations, None)
    returns = metrics["episode_return_mean"][:, tail]
    counts = metrics["n_episodes"][:, tail]
    tail_return = np.nansum(np.nan_to_num(returns) * counts, axis=1) / np.maximum(
        counts.sum(axis=1), 1
    )
    return {
        "compile_s": compile_s,
        "run_s": run_s,
        "final_return": metrics["average_return"][:, -1],
        "tail_return": tail_return,
        "metrics": metrics,
        "seeds": run_seeds,
        "lrs": run_lrs,
    }

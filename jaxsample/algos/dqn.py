"""DQN compiled whole, built only on jaxsample's public API.

``make_train(config)`` returns a :class:`Trainer`, a frozen object of pure
functions. ``trainer.train(key, hparams)`` is the whole run inside one
``lax.scan``: jit it, and ``jax.vmap`` it over seeds and over hyperparameters
(:class:`HParams`: learning rate and discount) at once::

    import jax, jax.numpy as jnp
    from jaxsample.algos import dqn

    trainer = dqn.make_train(dqn.DQNConfig())             # CartPole-v1, 5e5 steps
    keys = jax.random.split(jax.random.key(0), 4)          # 2 seeds x 2 lrs
    hp = trainer.hparams(lr=jnp.array([2.5e-4, 2.5e-4, 5e-4, 5e-4]))
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys, hp)
    metrics["average_return"][:, -1]                       # [4] final returns

The pieces, all public jaxsample API:

* :func:`jaxsample.make_sampler` collects ``[num_steps, num_envs]`` batches with
  an :class:`~jaxsample.agents.EpsilonGreedyAgent`. Its epsilons are rlpyt's
  vector epsilon: env rank ``b`` anneals from ``epsilon_init`` to its own final
  epsilon, log-spaced over ranks from ``epsilon_final_min`` to
  ``epsilon_final`` (``agent.initial_state(env_rank)``). The annealing is by
  iteration: each collect sets ``params.decay`` (no retrace).
* :func:`jaxsample.replay.uniform` keeps a ring of ``buffer_capacity`` steps per
  env; minibatches are ``batch_size`` single steps (sequences of length 1)
  sampled uniformly over (env, position).
* :class:`jaxsample.StepMetrics` counts env steps and episodes exactly and
  averages the returns of the last ``metrics_window`` episodes;
  :func:`jaxsample.make_evaluator` runs the greedy policy
  (:meth:`Trainer.evaluate`).

One :meth:`Trainer.iteration`: set the epsilon decay, collect, add to the replay
buffer, then (once ``learning_starts`` env steps are in) ``gradient_steps``
Adam steps, then the target update every ``target_update_interval`` env steps.

The TD target bootstraps through truncation and not through termination
(:func:`td_target`)::

    y = r + gamma * (1 - terminated) * max_a Q_target(s', a)
    y = r + gamma * (1 - terminated) * Q_target(s', argmax_a Q(s', a))   # double DQN

where ``s'`` is the step's true next observation,
``samples.env.final_observation``: at a time-limit truncation it is the state
the env really reached, not the reset observation gymnax's auto-reset returns
(bootstrapping from that, or not at all, is what most JAX DQN code does).

Nothing here calls ``jax.jit`` except :func:`reference_run`, a runner: callers jit.
``python -m jaxsample.algos.dqn`` runs the reference benchmark.
"""

from __future__ import annotations

import argparse
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

import jaxsample as js
from jaxsample._checks import check_int as _check_int

__all__ = [
    "DQNConfig",
    "HParams",
    "TrainState",
    "Trainer",
    "make_train",
    "reference_run",
    "td_target",
]

PyTree = Any
_LOSSES = ("mse", "huber")
_MAX_TIMESTEPS = 2**31 - 1  # env steps are counted in int32


# ----------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """Static configuration of a DQN run (validated when constructed).

    The defaults train CartPole-v1 to a return of ~500 within 5e5 env steps
    (the reference benchmark, :func:`reference_run`). They follow purejaxrl's
    and CleanRL's CartPole DQN: 10 envs x 1 step per iteration and one gradient
    step per iteration (one per 10 env steps), minibatches of 128, a 10k-step
    buffer, Adam 2.5e-4, MSE loss, target copied every 500 env steps, learning
    from 10k steps on, epsilon from 1 down to 0.05 over half the run; here the
    final epsilon is rlpyt's vector epsilon, log-spaced over envs from 0.01.

    Step counts (``total_timesteps``, ``learning_starts``,
    ``target_update_interval``) are environment steps summed over all envs; one
    iteration takes ``steps_per_iteration = num_envs * num_steps`` of them.

    Attributes:
      env_name: a gymnax environment id (``gymnax.registered_envs``) with a
        ``Discrete`` action space; ignored when :func:`make_train` is given an
        ``env``.
      num_envs: ``B``, environments collected in parallel (also the agent's
        ``global_B``: env ``b`` has rank ``b``).
      num_steps: ``T``, steps per env per iteration.
      total_timesteps: the run is ``total_timesteps // steps_per_iteration``
        iterations.
      buffer_capacity: replay steps kept per env (the buffer holds
        ``num_envs * buffer_capacity`` transitions).
      batch_size: transitions per gradient step (the replay minibatch; not
        ``steps_per_iteration``).
      lr: Adam's learning rate (the default of :attr:`HParams.lr`).
      anneal_lr: scale the learning rate by ``1 - i / num_iterations`` at
        iteration ``i`` (0-based), as PPO does.
      gamma: discount of the TD target (the default of :attr:`HParams.gamma`);
        also the sampler's discount for ``discounted_return``.
      learning_starts: env steps collected before the first gradient step.
      gradient_steps: gradient steps per iteration once learning has started.
      target_update_interval: env steps between target-network updates.
      tau: the target update is ``target <- tau * online + (1 - tau) *
        target``, in ``(0, 1]`` (1: a copy).
      epsilon_init: exploration probability at the start of the run.
      epsilon_final: final exploration probability (that of the most exploring
        env, rank ``num_envs - 1``, when ``epsilon_final_min`` is set).
      epsilon_final_min: None (every env ends at ``epsilon_final``) or rlpyt's
        ``eps_final_min``, in ``(0, epsilon_final]``: env ``b`` ends at
        ``logspace(log10(epsilon_final_min), log10(epsilon_final),
        num_envs)[b]``.
      exploration_fraction: fraction of ``total_timesteps`` over which every
        env's epsilon anneals linearly to its final value; 0 starts there.
      double_dqn: pick the bootstrap action with the online network.
      loss: ``"mse"`` (``0.5 * td**2``) or ``"huber"`` (delta 1). With Adam on
        CartPole the Huber loss let the Q-values diverge in our runs (the
        large errors of terminal steps get no more weight than any other).
      max_grad_norm: global gradient-norm clip, or None for none.
      adam_eps: Adam's epsilon.
      hidden_sizes: the Q-network's MLP widths.
      max_decorrelation_steps: the sampler's start-state decorrelation.
      metrics_window: episodes averaged by ``StepMetrics`` (``average_return``).
      eval_episodes: episodes of :meth:`Trainer.evaluate` (one per env).
    """

    env_name: str = "CartPole-v1"
    num_envs: int = 10
    num_steps: int = 1
    total_timesteps: int = 500_000
    buffer_capacity: int = 1_000
    batch_size: int = 128
    lr: float = 2.5e-4
    anneal_lr: bool = False
    gamma: float = 0.99
    learning_starts: int = 10_000
    gradient_steps: int = 1
    target_update_interval: int = 500
    tau: float = 1.0
    epsilon_init: float = 1.0
    epsilon_final: float = 0.05
    epsilon_final_min: float | None = 0.01
    exploration_fraction: float = 0.5
    double_dqn: bool = False
    loss: str = "mse"
    max_grad_norm: float | None = None
    adam_eps: float = 1e-8
    hidden_sizes: tuple[int, ...] = (120, 84)
    max_decorrelation_steps: int = 0
    metrics_window: int = 100
    eval_episodes: int = 16

    def __post_init__(self) -> None:
        if not isinstance(self.env_name, str):
            raise TypeError(f"env_name must be a str, got {self.env_name!r}")
        for name, minimum in (
            ("num_envs", 1),
            ("num_steps", 1),
            ("total_timesteps", 1),
            ("buffer_capacity", 1),
            ("batch_size", 1),
            ("learning_starts", 0),
            ("gradient_steps", 1),
            ("target_update_interval", 1),
            ("max_decorrelation_steps", 0),
            ("metrics_window", 1),
            ("eval_episodes", 1),
        ):
            _check_int(name, getattr(self, name), minimum)
        for name, maximum in (
            ("total_timesteps", _MAX_TIMESTEPS),
            ("learning_starts", _MAX_TIMESTEPS),
            ("target_update_interval", _MAX_TIMESTEPS),
            ("buffer_capacity", js.replay.MAX_CAPACITY),
            ("metrics_window", 2**30 - 1),
        ):
            if getattr(self, name) > maximum:
                raise ValueError(f"{name} must be <= {maximum}, got {getattr(self, name)}")
        for name in ("anneal_lr", "double_dqn"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        for name, low, high, open_low in (
            ("lr", 0.0, math.inf, True),
            ("gamma", 0.0, 1.0, False),
            ("tau", 0.0, 1.0, True),
            ("epsilon_init", 0.0, 1.0, False),
            ("epsilon_final", 0.0, 1.0, False),
            ("exploration_fraction", 0.0, 1.0, False),
            ("adam_eps", 0.0, math.inf, False),
        ):
            _check_float(name, getattr(self, name), low, high, open_low)
        if self.epsilon_final_min is not None:
            _check_float("epsilon_final_min", self.epsilon_final_min, 0.0, 1.0, True)
            if self.epsilon_final_min > self.epsilon_final:
                raise ValueError(
                    f"epsilon_final_min must be <= epsilon_final ({self.epsilon_final}), "
                    f"got {self.epsilon_final_min}"
                )
        if self.max_grad_norm is not None:
            _check_float("max_grad_norm", self.max_grad_norm, 0.0, math.inf, True)
        if self.loss not in _LOSSES:
            raise ValueError(f"loss must be one of {_LOSSES}, got {self.loss!r}")
        sizes = self.hidden_sizes
        if not isinstance(sizes, (tuple, list)) or any(
            isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in sizes
        ):
            raise ValueError(f"hidden_sizes must be a tuple of positive ints, got {sizes!r}")
        object.__setattr__(self, "hidden_sizes", tuple(int(s) for s in sizes))
        if self.total_timesteps < self.steps_per_iteration:
            raise ValueError(
                f"total_timesteps ({self.total_timesteps}) must be >= num_envs * num_steps "
                f"({self.steps_per_iteration}): the run would have no iteration"
            )

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps per iteration, ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        """Iterations of a full run, ``total_timesteps // steps_per_iteration``."""
        return self.total_timesteps // self.steps_per_iteration


def _check_float(name: str, value: Any, low: float, high: float, open_low: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise TypeError(f"{name} must be a float, got {value!r}")
    above = value > low if open_low else value >= low
    if math.isnan(value) or not above or value > high:
        raise ValueError(f"{name} must be in {'(' if open_low else '['}{low}, {high}], got {value}")


@struct.dataclass
class HParams:
    """Hyperparameters that are data, not static config: vmap over them.

    Each field is a float32 scalar for one run (``[N]`` to vmap ``N`` runs).
    Build with :meth:`Trainer.hparams` (defaults from the config).

    Attributes:
      lr: Adam's learning rate.
      gamma: the TD target's discount.
    """

    lr: jax.Array
    gamma: jax.Array


@struct.dataclass
class TrainState:
    """Everything a DQN run carries from one iteration to the next (a pytree).

    Attributes:
      params: the acting agent's
        :class:`~jaxsample.agents.EpsilonGreedyParams`: ``network`` (the online
        Q-network's flax variables) and ``decay`` (float32 ``[]``, the epsilon
        schedule of the last collect).
      target_params: the target Q-network's flax variables (the tree of
        ``params.network``).
      opt_state: optax state of the optimizer (:attr:`Trainer.optimizer`).
      sampler_state: :class:`jaxsample.SamplerState` (envs and per-env key
        chains; its ``agent_state`` ``[B]`` is each env's final epsilon).
      replay_state: :class:`jaxsample.replay.ReplayState`, leaves
        ``[num_envs, buffer_capacity, ...]``.
      key: the key of the minibatch sampling (split every iteration).
      iteration: int32 ``[]``, iterations done.
      updates: int32 ``[]``, gradient steps done.
      metrics: :class:`jaxsample.StepMetrics` of the training episodes.
      hparams: this run's :class:`HParams`.
    """

    params: js.agents.EpsilonGreedyParams
    target_params: PyTree
    opt_state: PyTree
    sampler_state: js.SamplerState
    replay_state: js.replay.ReplayState
    key: jax.Array
    iteration: jax.Array
    updates: jax.Array
    metrics: js.StepMetrics
    hparams: HParams


# ----------------------------------------------------------------------------
# TD target
# ----------------------------------------------------------------------------


def td_target(
    reward: jax.Array,
    terminated: jax.Array,
    next_q_target: jax.Array,
    gamma: jax.Array | float,
    next_q_online: jax.Array | None = None,
) -> jax.Array:
    """The one-step TD target ``r + gamma * (1 - terminated) * V(s')``.

    ``V(s') = max_a next_q_target[..., a]``, or with ``next_q_online`` (double
    DQN) ``next_q_target[..., argmax_a next_q_online[..., a]]``. ``s'`` must be
    the true next observation (``samples.env.final_observation``), so that a
    truncated step bootstraps from the state the env reached. A terminated step
    does not bootstrap: its ``V`` is ignored, even where it is not finite (the
    sparse final-observation store gives zeros there).

    Args:
      reward: float ``[...]``.
      terminated: bool ``[...]``; ``truncated`` is deliberately not an input.
      next_q_target: ``[..., A]``, the target network's Q-values of ``s'``.
      gamma: scalar discount.
      next_q_online: optional ``[..., A]``, the online network's Q-values of ``s'``.

    Returns:
      float32 ``[...]``.
    """
    shape = tuple(jnp.shape(reward))
    if tuple(jnp.shape(terminated)) != shape:
        raise ValueError(
            f"terminated must have reward's shape {list(shape)}, got {list(jnp.shape(terminated))}"
        )
    if tuple(jnp.shape(next_q_target))[:-1] != shape or jnp.ndim(next_q_target) != len(shape) + 1:
        raise ValueError(
            f"next_q_target must be reward's shape {list(shape)} + [A], got "
            f"{list(jnp.shape(next_q_target))}"
        )
    if jnp.shape(gamma) != ():
        raise ValueError(f"gamma must be a scalar, got shape {list(jnp.shape(gamma))}")
    next_q_target = jnp.asarray(next_q_target, jnp.float32)
    if next_q_online is None:
        next_v = jnp.max(next_q_target, axis=-1)
    else:
        if jnp.shape(next_q_online) != jnp.shape(next_q_target):
            raise ValueError(
                f"next_q_online must have next_q_target's shape "
                f"{list(jnp.shape(next_q_target))}, got {list(jnp.shape(next_q_online))}"
            )
        best = jnp.argmax(next_q_online, axis=-1)
        next_v = jnp.take_along_axis(next_q_target, best[..., None], axis=-1)[..., 0]
    next_v = jnp.where(jnp.asarray(terminated, bool), 0.0, next_v)
    return jnp.asarray(reward, jnp.float32) + jnp.asarray(gamma, jnp.float32) * next_v


# ----------------------------------------------------------------------------
# Trainer
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Trainer:
    """DQN as pure functions; build it with :func:`make_train`.

    * ``init(key, hparams=None) -> TrainState``
    * ``iteration(state) -> (state, metrics)``: set the epsilon decay
      (``acting_params``), collect ``[num_steps, num_envs]``, then ``learn``.
    * ``learn(state, batch) -> (state, metrics)``: add the batch to the replay
      buffer, ``gradient_steps`` gradient steps (once ``learning_starts`` env
      steps are in), target update.
    * ``run(state, num_iterations) -> (state, metrics)``: ``lax.scan`` of
      ``iteration``; ``num_iterations`` is static (``static_argnums=1``).
    * ``train(key, hparams=None) -> (state, metrics)``: ``init`` then ``run``
      for ``config.num_iterations``.
    * ``evaluate(state, key) -> dict``: the greedy policy's episode statistics.

    All are jittable and vmappable (over keys and :class:`HParams`). ``metrics``
    is a dict of scalars per iteration (stacked ``[num_iterations]`` by
    ``run``), float32 unless noted: ``env_steps`` (after the iteration, from
    ``StepMetrics``), ``episode_return_mean``, ``episode_length_mean``,
    ``n_episodes`` (episodes completed in this batch; the means are NaN when
    none did), ``average_return``, ``average_episode_length`` (over the last
    ``metrics_window`` episodes, NaN before the first), ``epsilon_mean`` (the
    mean epsilon the envs acted with), ``lr``, ``loss`` and ``q_mean`` (the mean
    Q-value of the replayed actions; both means over the iteration's gradient
    steps, NaN before learning starts), ``updates`` (int32, gradient steps so
    far).

    Attributes:
      config: the :class:`DQNConfig`.
      env, env_params: the gymnax environment.
      agent: the :class:`~jaxsample.agents.EpsilonGreedyAgent`.
      sampler: the :class:`~jaxsample.Sampler` (``"auto"`` resets, sparse final
        observations).
      replayer: the :func:`~jaxsample.replay.uniform` replayer.
      evaluator: the :class:`~jaxsample.Evaluator` of ``agent.as_eval()``
        (``eval_episodes`` envs, one episode each).
      optimizer: ``clip_by_global_norm(max_grad_norm)`` (if set) then
        ``scale_by_adam(eps=adam_eps)``; the step is ``-lr`` times its output,
        so the learning rate can be traced (vmapped).
    """

    config: DQNConfig
    env: Any
    env_params: Any
    agent: js.agents.EpsilonGreedyAgent
    sampler: js.Sampler
    replayer: js.replay.Replayer
    evaluator: js.Evaluator
    optimizer: optax.GradientTransformation

    @property
    def num_iterations(self) -> int:
        """Iterations of a full run (``config.num_iterations``)."""
        return self.config.num_iterations

    def hparams(self, **overrides: Any) -> HParams:
        """:class:`HParams` from the config, with ``overrides`` (e.g. ``lr=[...]``).

        Fields are float32 and broadcast to one common shape, so giving one
        field an ``[N]`` array makes ``N`` runs to vmap over.
        """
        fields = [f.name for f in dataclasses.fields(HParams)]
        unknown = set(overrides) - set(fields)
        if unknown:
            raise ValueError(f"unknown hparams {sorted(unknown)}; fields are {fields}")
        values = {
            name: jnp.asarray(overrides.get(name, getattr(self.config, name)), jnp.float32)
            for name in fields
        }
        shape = jnp.broadcast_shapes(*(v.shape for v in values.values()))
        return HParams(**{k: jnp.broadcast_to(v, shape) for k, v in values.items()})

    # -- pure functions ------------------------------------------------------

    def init(self, key: jax.Array, hparams: HParams | None = None) -> TrainState:
        """A fresh run from ``key`` (a ``jax.random.key``): network, target copy,
        optimizer, envs and an empty buffer; ``hparams`` default to the config's
        (:meth:`hparams`)."""
        hparams = self.hparams() if hparams is None else hparams
        if not isinstance(hparams, HParams):
            raise TypeError(f"hparams must be an HParams, got {type(hparams).__name__}")
        for f in dataclasses.fields(HParams):
            if jnp.shape(getattr(hparams, f.name)) != ():
                raise ValueError(
                    f"hparams.{f.name} must be a scalar for one run (vmap to run several), "
                    f"got shape {jnp.shape(getattr(hparams, f.name))}"
                )
        hparams = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), hparams)
        k_params, k_sampler, k_train = jax.random.split(key, 3)
        example = jax.tree.map(
            lambda s: jnp.zeros(s.shape, s.dtype), self.sampler.examples.env.observation
        )
        params = self.agent.init(k_params, example)
        return TrainState(
            params=params,
            target_params=params.network,
            opt_state=self.optimizer.init(params.network),
            sampler_state=self.sampler.init(k_sampler, params),
            replay_state=self.replayer.init(),
            key=k_train,
            iteration=jnp.zeros((), jnp.int32),
            updates=jnp.zeros((), jnp.int32),
            metrics=js.StepMetrics.init(self.config.metrics_window),
            hparams=hparams,
        )

    def decay(self, iteration: jax.Array) -> jax.Array:
        """float32 ``[]``, the agent's ``params.decay`` for the collect of iteration
        ``iteration`` (0-based): ``iteration * steps_per_iteration /
        (exploration_fraction * total_timesteps)`` clipped to ``[0, 1]`` (1 when
        ``exploration_fraction`` is 0)."""
        c = self.config
        duration = c.exploration_fraction * c.total_timesteps
        if duration <= 0:
            return jnp.ones((), jnp.float32)
        steps = jnp.asarray(iteration).astype(jnp.float32) * c.steps_per_iteration
        return jnp.clip(steps / jnp.float32(duration), 0.0, 1.0)

    def q_values(self, network: PyTree, observation: PyTree) -> jax.Array:
        """``[N, A]`` Q-values of observations with leaves ``[N, *obs]``."""
        return jax.vmap(self.agent.q_values, in_axes=(None, 0))(network, observation)

    def targets(
        self, network: PyTree, target_params: PyTree, samples: js.Samples, gamma: jax.Array
    ) -> jax.Array:
        """float32 ``[L, N]`` TD targets of ``samples`` (leaves ``[L, N, ...]``).

        :func:`td_target` of ``samples.env.final_observation``: bootstraps from
        the true next observation unless the step terminated; double DQN picks
        the next action with ``network``.
        """
        L, N = jnp.shape(samples.env.reward)
        final = jax.tree.map(
            lambda x: x.reshape((L * N, *x.shape[2:])), samples.env.final_observation
        )
        next_q_target = self.q_values(target_params, final).reshape(L, N, -1)
        next_q_online = None
        if self.config.double_dqn:
            next_q_online = self.q_values(network, final).reshape(L, N, -1)
        return td_target(
            samples.env.reward, samples.env.terminated, next_q_target, gamma, next_q_online
        )

    def loss(
        self, network: PyTree, target_params: PyTree, samples: js.Samples, gamma: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """``(loss, q_mean)`` over the valid steps of ``samples`` (leaves ``[L, N, ...]``).

        ``loss`` is the mean over valid steps of ``0.5 * td**2`` (or the Huber
        loss) with ``td = Q(s, a) - stop_gradient(target)``; ``q_mean`` the mean
        ``Q(s, a)`` of the replayed actions.
        """
        L, N = jnp.shape(samples.env.reward)
        target = jax.lax.stop_gradient(self.targets(network, target_params, samples, gamma))
        obs = jax.tree.map(lambda x: x.reshape((L * N, *x.shape[2:])), samples.env.observation)
        q = self.q_values(network, obs).reshape(L, N, -1)
        action = jnp.asarray(samples.agent.action).astype(jnp.int32)
        q_taken = jnp.take_along_axis(q, action[..., None], axis=-1)[..., 0]
        td = q_taken - target
        if self.config.loss == "huber":
            per_step = optax.losses.huber_loss(td, delta=1.0)
        else:
            per_step = 0.5 * jnp.square(td)
        mask = samples.valid.astype(jnp.float32)
        count = jnp.maximum(jnp.sum(mask), 1.0)
        return jnp.sum(per_step * mask) / count, jnp.sum(q_taken * mask) / count

    def iteration(self, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        """One DQN iteration (see the class docstring for the metrics)."""
        params = self.acting_params(state)
        sampler_state, batch = self.sampler.collect(state.sampler_state, params)
        return self.learn(state.replace(params=params, sampler_state=sampler_state), batch)

    def acting_params(self, state: TrainState) -> js.agents.EpsilonGreedyParams:
        """The agent parameters to collect iteration ``state.iteration`` with: the
        online network and the epsilon decay of that iteration."""
        return state.params.replace(decay=self.decay(state.iteration))

    def learn(
        self, state: TrainState, batch: js.Batch
    ) -> tuple[TrainState, dict[str, jax.Array]]:
        """Everything of an iteration but the collection: add ``batch`` (of
        ``[num_steps, num_envs]``) to the replay buffer, the gradient steps once
        ``learning_starts`` env steps are in, the target update.

        ``state.sampler_state`` is left as it is, so an actor/learner driver can
        collect elsewhere and feed the batches here.
        """
        c = self.config
        params = state.params
        replay_state = self.replayer.add(state.replay_state, batch)
        metrics = state.metrics.update(batch)
        env_steps = (state.iteration + 1) * c.steps_per_iteration  # int32, < 2**31
        learn = env_steps >= c.learning_starts
        frac = 1.0 - state.iteration.astype(jnp.float32) / self.num_iterations
        lr = state.hparams.lr * (jnp.maximum(frac, 0.0) if c.anneal_lr else 1.0)
        key, k_learn = jax.random.split(state.key)

        def gradient_step(carry: tuple, k: jax.Array) -> tuple[tuple, tuple]:
            network, opt_state = carry
            samples, _ = self.replayer.sample(replay_state, k, c.batch_size, 1)
            (loss, q_mean), grads = jax.value_and_grad(self.loss, has_aux=True)(
                network, state.target_params, samples, state.hparams.gamma
            )
            updates, opt_state = self.optimizer.update(grads, opt_state, network)
            updates = jax.tree.map(lambda u: -lr * u, updates)
            return (optax.apply_updates(network, updates), opt_state), (loss, q_mean)

        def learn_fn(carry: tuple) -> tuple:
            carry, (loss, q_mean) = jax.lax.scan(
                gradient_step, carry, jax.random.split(k_learn, c.gradient_steps)
            )
            return carry, jnp.mean(loss), jnp.mean(q_mean)

        def skip_fn(carry: tuple) -> tuple:
            nan = jnp.full((), jnp.nan, jnp.float32)
            return carry, nan, nan

        (network, opt_state), loss, q_mean = jax.lax.cond(
            learn, learn_fn, skip_fn, (params.network, state.opt_state)
        )
        interval = c.target_update_interval
        due = learn & (env_steps // interval > (env_steps - c.steps_per_iteration) // interval)
        updated = optax.incremental_update(network, state.target_params, c.tau)
        target_params = jax.tree.map(
            lambda new, old: jnp.where(due, new, old), updated, state.target_params
        )
        updates = state.updates + jnp.where(learn, c.gradient_steps, 0).astype(jnp.int32)
        new_state = state.replace(
            params=params.replace(network=network),
            target_params=target_params,
            opt_state=opt_state,
            replay_state=replay_state,
            key=key,
            iteration=state.iteration + 1,
            updates=updates,
            metrics=metrics,
        )
        episodes = js.summarize(batch.traj_infos)
        summary = metrics.summary()
        out = {
            "env_steps": summary["environment_steps"],
            "episode_return_mean": episodes["episode_return_mean"],
            "episode_length_mean": episodes["length_mean"],
            "n_episodes": episodes["n_trajectories"],
            "average_return": summary["average_return"],
            "average_episode_length": summary["average_episode_length"],
            "epsilon_mean": jnp.mean(batch.samples.agent.agent_info.epsilon),
            "lr": lr,
            "loss": loss,
            "q_mean": q_mean,
            "updates": updates,
        }
        return new_state, out

    def run(
        self, state: TrainState, num_iterations: int
    ) -> tuple[TrainState, dict[str, jax.Array]]:
        """``num_iterations`` (static) iterations; metrics stacked ``[num_iterations]``."""
        _check_int("num_iterations", num_iterations, 1)
        return jax.lax.scan(lambda s, _: self.iteration(s), state, None, length=int(num_iterations))

    def train(
        self, key: jax.Array, hparams: HParams | None = None
    ) -> tuple[TrainState, dict[str, jax.Array]]:
        """The whole run: ``run(init(key, hparams), config.num_iterations)``."""
        return self.run(self.init(key, hparams), self.num_iterations)

    def evaluate(self, state: TrainState, key: jax.Array) -> dict[str, jax.Array]:
        """``js.summarize`` of ``eval_episodes`` greedy episodes of ``state``'s
        Q-network (one per env, all from fresh resets); jittable, vmappable."""
        return js.summarize(self.evaluator.run(key, state.params))


def make_train(config: DQNConfig, *, env: Any = None, env_params: Any = None) -> Trainer:
    """Build DQN for ``config``: a :class:`Trainer` of pure functions.

    Args:
      config: a :class:`DQNConfig`.
      env, env_params: a gymnax environment with a ``Discrete`` action space to
        use instead of ``gymnax.make(config.env_name)`` (``env_params`` defaults
        to its ``default_params``), e.g. with another time limit.

    The agent is ``EpsilonGreedyAgent(space, global_B=num_envs, ...)`` (env
    ``b`` has rank ``b``); the sampler ``make_sampler(env, env_params, agent,
    BatchSpec(num_steps, num_envs), reset_mode="auto")`` with the default sparse
    final-observation store (exact wherever a target bootstraps); the replayer
    ``replay.uniform(sampler.examples, num_envs, buffer_capacity)``.
    """
    if not isinstance(config, DQNConfig):
        raise TypeError(f"config must be a DQNConfig, got {type(config).__name__}")
    if env is None:
        if env_params is not None:
            raise ValueError("env_params given without env")
        if config.env_name not in gymnax.registered_envs:
            raise ValueError(f"env_name {config.env_name!r} is not a gymnax environment")
        env, env_params = gymnax.make(config.env_name)
    elif env_params is None:
        env_params = env.default_params
    space = env.action_space(env_params)
    if not isinstance(space, spaces.Discrete):
        raise TypeError(f"DQN needs a Discrete action space, got {type(space).__name__}")
    agent = js.agents.EpsilonGreedyAgent(
        space,
        global_B=config.num_envs,
        hidden_sizes=config.hidden_sizes,
        epsilon_init=config.epsilon_init,
        epsilon_final=config.epsilon_final,
        epsilon_final_min=config.epsilon_final_min,
    )
    sampler = js.make_sampler(
        env,
        env_params,
        agent,
        js.BatchSpec(T=config.num_steps, B=config.num_envs),
        max_decorrelation_steps=config.max_decorrelation_steps,
        reset_mode="auto",
        discount=config.gamma,
    )
    replayer = js.replay.uniform(sampler.examples, config.num_envs, config.buffer_capacity)
    try:
        episode_limit = int(np.asarray(env_params.max_steps_in_episode))
    except (AttributeError, TypeError, ValueError, OverflowError):
        episode_limit = 10_000
    evaluator = js.make_evaluator(
        env,
        env_params,
        agent,
        n_envs=config.eval_episodes,
        max_steps=config.eval_episodes * (episode_limit + 1),
        discount=config.gamma,
    )
    transforms = []
    if config.max_grad_norm is not None:
        transforms.append(optax.clip_by_global_norm(config.max_grad_norm))
    transforms.append(optax.scale_by_adam(eps=config.adam_eps))
    return Trainer(
        config=config,
        env=env,
        env_params=env_params,
        agent=agent,
        sampler=sampler,
        replayer=replayer,
        evaluator=evaluator,
        optimizer=optax.chain(*transforms),
    )


# ----------------------------------------------------------------------------
# Reference runs (a runner: this one jits)
# ----------------------------------------------------------------------------


def reference_run(
    config: DQNConfig | None = None,
    seeds: Sequence[int] = tuple(range(4)),
    *,
    lrs: Sequence[float] | None = None,
    tail_iterations: int = 5_000,
) -> dict[str, Any]:
    """Train ``len(seeds)`` runs (x ``len(lrs)``) under one ``jax.vmap`` and report.

    The default is the reference benchmark: CartPole-v1, 5e5 env steps, 4 seeds.
    Returns a dict with ``compile_s``, ``run_s`` (wall times), ``final_return``
    (per run, ``StepMetrics``' mean over the last ``metrics_window`` training
    episodes, epsilon-greedy), ``tail_return`` (mean return of the training
    episodes completed in the last ``tail_iterations`` iterations),
    ``eval_return`` (greedy, :meth:`Trainer.evaluate`), ``metrics`` (numpy,
    ``[runs, iterations]``) and the ``seeds`` and ``lrs`` of each run.
    """
    config = DQNConfig() if config is None else config
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
    state, metrics = jax.block_until_ready(compiled(keys, hparams))
    run_s = time.perf_counter() - t0
    eval_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
    evaluation = jax.jit(jax.vmap(trainer.evaluate))(state, eval_keys)
    metrics = jax.tree.map(np.asarray, metrics)
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
        "eval_return": np.asarray(evaluation["episode_return_mean"]),
        "metrics": metrics,
        "seeds": run_seeds,
        "lrs": run_lrs,
    }


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m jaxsample.algos.dqn [--seeds N] [--total-timesteps S]``."""
    parser = argparse.ArgumentParser(description="DQN reference benchmark (CartPole-v1)")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--total-timesteps", type=int, default=DQNConfig.total_timesteps)
    args = parser.parse_args(argv)
    config = DQNConfig(total_timesteps=args.total_timesteps)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    out = reference_run(config, seeds)
    steps = config.num_iterations * config.steps_per_iteration
    print(f"{config}")
    print(
        f"{len(out['seeds'])} runs x {steps} env steps (vmapped): compile {out['compile_s']:.1f} s,"
        f" run {out['run_s']:.1f} s ({len(out['seeds']) * steps / out['run_s']:,.0f} env steps/s)"
    )
    for i, seed in enumerate(out["seeds"]):
        print(
            f"seed {seed}: final average_return {out['final_return'][i]:.1f} (last "
            f"{config.metrics_window} episodes), tail {out['tail_return'][i]:.1f}, greedy eval "
            f"{out['eval_return'][i]:.1f}"
        )


if __name__ == "__main__":
    main()

"""DQN compiled whole, built only on jaxsample's public API.

``make_train(config)`` returns a [`Trainer`][jaxsample.algos.dqn.Trainer], a frozen object of pure
functions. ``trainer.train(key, hparams)`` is the whole run inside one
``lax.scan``: jit it, and ``jax.vmap`` it over seeds and over hyperparameters
([`HParams`][jaxsample.algos.dqn.HParams]: learning rate and discount) at once::

    import jax, jax.numpy as jnp
    from jaxsample.algos import dqn

    trainer = dqn.make_train(dqn.DQNConfig())             # CartPole-v1, 5e5 steps
    keys = jax.random.split(jax.random.key(0), 4)          # 2 seeds x 2 lrs
    hp = trainer.hparams(lr=jnp.array([2.5e-4, 2.5e-4, 5e-4, 5e-4]))
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys, hp)
    metrics["average_return"][:, -1]                       # [4] final returns

The pieces, all public jaxsample API:

* [`jaxsample.make_sampler`][jaxsample.sampler.make_sampler] collects ``[num_steps, num_envs]``
  batches with
  an [`EpsilonGreedyAgent`][jaxsample.agents.EpsilonGreedyAgent]. Its epsilons are rlpyt's
  vector epsilon: env rank ``b`` anneals from ``epsilon_init`` to its own final
  epsilon, log-spaced over ranks from ``epsilon_final_min`` to
  ``epsilon_final`` (``agent.initial_state(env_rank)``). The annealing is by
  iteration: each collect sets ``params.decay`` (no retrace).
* `jaxsample.replay.uniform` keeps a ring of ``buffer_capacity`` steps per
  env; minibatches are ``batch_size`` single steps (sequences of length 1)
  sampled uniformly over (env, position). With ``prioritized_replay=True``,
  `jaxsample.replay.prioritized` instead (Schaul et al.'s PER): steps
  drawn by priority, the loss weighted by the importance weights, and after
  each gradient step the sampled steps' priorities set to ``|td| + priority_eps``.
* [`jaxsample.StepMetrics`][jaxsample.metrics.StepMetrics] counts env steps and episodes exactly and
  averages the returns of the last ``metrics_window`` episodes;
  [`jaxsample.make_evaluator`][jaxsample.evaluation.make_evaluator] runs the greedy policy
  ([`Trainer.evaluate`][jaxsample.algos.dqn.Trainer.evaluate]).

One [`Trainer.iteration`][jaxsample.algos.dqn.Trainer.iteration]: set the epsilon decay, collect,
add to the replay
buffer, then (once ``learning_starts`` env steps are in) ``gradient_steps``
Adam steps, then the target update every ``target_update_interval`` env steps.

The TD target bootstraps through truncation and not through termination
([`td_target`][jaxsample.algos.dqn.td_target])::

    y = r + gamma * (1 - terminated) * max_a Q_target(s', a)
    y = r + gamma * (1 - terminated) * Q_target(s', argmax_a Q(s', a))   # double DQN

where ``s'`` is the step's true next observation,
``samples.env.final_observation``: at a time-limit truncation it is the state
the env really reached, not the reset observation gymnax's auto-reset returns
(bootstrapping from that, or not at all, is what most JAX DQN code does).

The trainer is pure (callers jit); [`reference_run`][jaxsample.algos.dqn.reference_run], the
reference benchmark, is a runner and jits. From the command line, ``jaxsample
train --algo dqn --seeds 4`` trains the same settings.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from gymnax.environments import spaces

from jaxsample.agents import EpsilonGreedyAgent, EpsilonGreedyParams
from jaxsample.algos import common
from jaxsample.algos.common import TrainerBase, episode_metrics, make_env, make_trainer_sampler
from jaxsample.algos.configs import DQNConfig
from jaxsample.algos.returns import td_target
from jaxsample.core.batched import cond_any
from jaxsample.evaluation import Evaluator, make_evaluator
from jaxsample.metrics import StepMetrics
from jaxsample.replay import Replayer, ReplayState, prioritized, uniform
from jaxsample.sampler import SamplerState
from jaxsample.traj_info import summarize
from jaxsample.types import Batch, PyTree, Samples

__all__ = [
    "DQNConfig",
    "HParams",
    "TrainState",
    "Trainer",
    "make_train",
    "reference_run",
    "td_target",
]


@struct.dataclass
class HParams:
    """DQN's hyperparameters as data (`Trainer.hparams`, defaults from the
    config): float32 ``[]`` for one run, ``[N]`` to vmap ``N`` runs.

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
        [`EpsilonGreedyParams`][jaxsample.agents.EpsilonGreedyParams]: ``network`` (the online
        Q-network's flax variables) and ``decay`` (float32 ``[]``, the epsilon
        schedule of the last collect).
      target_params: the target Q-network's flax variables (the tree of
        ``params.network``).
      opt_state: optax state of the optimizer (`Trainer.optimizer`).
      sampler_state: [`jaxsample.SamplerState`][jaxsample.sampler.SamplerState] (envs and per-env
        key
        chains; its ``agent_state`` ``[B]`` is each env's final epsilon).
      replay_state: [`jaxsample.replay.ReplayState`][jaxsample.replay.ReplayState], leaves
        ``[num_envs, buffer_capacity, ...]``.
      key: the key of the minibatch sampling (split every iteration).
      iteration: int32 ``[]``, iterations done.
      updates: int32 ``[]``, gradient steps done.
      metrics: [`jaxsample.StepMetrics`][jaxsample.metrics.StepMetrics] of the training episodes.
      hparams: this run's [`HParams`][jaxsample.algos.dqn.HParams].
    """

    params: EpsilonGreedyParams
    target_params: PyTree
    opt_state: PyTree
    sampler_state: SamplerState
    replay_state: ReplayState
    key: jax.Array
    iteration: jax.Array
    updates: jax.Array
    metrics: StepMetrics
    hparams: HParams


# ----------------------------------------------------------------------------
# Trainer
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Trainer(TrainerBase):
    """DQN as pure functions; build it with [`make_train`][jaxsample.algos.dqn.make_train].

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

    All are jittable and vmappable (over keys and [`HParams`][jaxsample.algos.dqn.HParams]).
    ``metrics``
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
      config: the [`DQNConfig`][jaxsample.algos.dqn.DQNConfig].
      env, env_params: the gymnax environment.
      agent: the [`EpsilonGreedyAgent`][jaxsample.agents.EpsilonGreedyAgent].
      sampler: the [`Sampler`][jaxsample.sampler.Sampler] (``"auto"`` resets, sparse final
        observations).
      replayer: the `uniform` replayer, or the
        `prioritized` one with ``prioritized_replay``.
      evaluator: the [`Evaluator`][jaxsample.evaluation.Evaluator] of ``agent.as_eval()``
        (``eval_episodes`` envs, one episode each).
      optimizer: ``clip_by_global_norm(max_grad_norm)`` (if set) then
        ``scale_by_adam(eps=adam_eps)``; the step is ``-lr`` times its output,
        so the learning rate can be traced (vmapped).
    """

    replayer: Replayer
    evaluator: Evaluator
    optimizer: optax.GradientTransformation
    hparams_type = HParams

    # -- pure functions ------------------------------------------------------

    def init(self, key: jax.Array, hparams: HParams | None = None) -> TrainState:
        """A fresh run from ``key`` (a ``jax.random.key``): network, target copy,
        optimizer, envs and an empty buffer; ``hparams`` default to the config's
        (`hparams`)."""
        hparams, params, k_sampler, k_train = self._start(key, hparams)
        return TrainState(
            params=params,
            target_params=params.network,
            opt_state=self.optimizer.init(params.network),
            sampler_state=self.sampler.init(k_sampler, params),
            replay_state=self.replayer.init(),
            key=k_train,
            iteration=jnp.zeros((), jnp.int32),
            updates=jnp.zeros((), jnp.int32),
            metrics=StepMetrics.init(self.config.metrics_window),
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
        self, network: PyTree, target_params: PyTree, samples: Samples, gamma: jax.Array
    ) -> jax.Array:
        """float32 ``[L, N]`` TD targets of ``samples`` (leaves ``[L, N, ...]``).

        [`td_target`][jaxsample.algos.dqn.td_target] of ``samples.env.final_observation``:
        bootstraps from
        the true next observation unless the step terminated; double DQN picks
        the next action with ``network``. With legal-action masks both
        maximise over the legal actions of the next observation
        (``samples.env.final_action_mask``).
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
            samples.env.reward,
            samples.env.terminated,
            next_q_target,
            gamma,
            next_q_online,
            samples.env.final_action_mask,
        )

    def loss(
        self,
        network: PyTree,
        target_params: PyTree,
        samples: Samples,
        gamma: jax.Array,
        weight: jax.Array | None = None,
        *,
        with_td: bool = False,
    ) -> tuple[jax.Array, Any]:
        """``(loss, q_mean)`` over the valid steps of ``samples`` (leaves ``[L, N, ...]``);
        ``(loss, (q_mean, td))`` with the TD errors ``[L, N]`` when ``with_td``
        (prioritized replay's new priorities are ``|td| + priority_eps``).

        ``loss`` is the mean over valid steps of ``0.5 * td**2`` (or the Huber
        loss) with ``td = Q(s, a) - stop_gradient(target)``, each step's term
        multiplied by ``weight`` (float32 ``[L, N]``, prioritized replay's
        importance weights) when given; ``q_mean`` the mean ``Q(s, a)`` of the
        replayed actions.
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
        weighted = per_step if weight is None else per_step * weight
        loss, q_mean = jnp.sum(weighted * mask) / count, jnp.sum(q_taken * mask) / count
        return (loss, (q_mean, td)) if with_td else (loss, q_mean)

    #: ``loss(..., with_td=True)``: ``(loss, (q_mean, td))``.
    loss_and_td = functools.partialmethod(loss, with_td=True)

    def iteration(self, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        """One DQN iteration (see the class docstring for the metrics)."""
        params = self.acting_params(state)
        sampler_state, batch = self.sampler.collect(state.sampler_state, params)
        return self.learn(state.replace(params=params, sampler_state=sampler_state), batch)

    def acting_params(self, state: TrainState) -> EpsilonGreedyParams:
        """The agent parameters to collect iteration ``state.iteration`` with: the
        online network and the epsilon decay of that iteration."""
        return state.params.replace(decay=self.decay(state.iteration))

    def learn(self, state: TrainState, batch: Batch) -> tuple[TrainState, dict[str, jax.Array]]:
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
        lr = self._lr(state.iteration, state.hparams.lr)
        # One hash for the next key and every gradient step's (not a split of a split).
        keys = jax.random.split(state.key, c.gradient_steps + 1)
        key, k_steps = keys[0], keys[1:]

        per = c.prioritized_replay

        def gradient_step(carry: tuple, k: jax.Array) -> tuple[tuple, tuple]:
            network, opt_state, r_state = carry
            samples, info = self.replayer.sample(
                r_state if per else replay_state, k, c.batch_size, 1
            )
            weight = info.weight[None, :] if per else None
            (loss, (q_mean, td)), grads = jax.value_and_grad(self.loss_and_td, has_aux=True)(
                network, state.target_params, samples, state.hparams.gamma, weight
            )
            if per:  # the sampled steps' new priorities: |td| + eps
                r_state = self.replayer.update_priorities(
                    r_state, info, jnp.abs(td[0]) + c.priority_eps
                )
            updates, opt_state = self.optimizer.update(grads, opt_state, network)
            updates = jax.tree.map(lambda u: -lr * u, updates)
            return (optax.apply_updates(network, updates), opt_state, r_state), (loss, q_mean)

        def learn_fn(carry: tuple) -> tuple:
            carry, (loss, q_mean) = jax.lax.scan(gradient_step, carry, k_steps)
            return carry, jnp.mean(loss), jnp.mean(q_mean)

        def skip_fn(carry: tuple) -> tuple:
            nan = jnp.full((), jnp.nan, jnp.float32)
            return carry, nan, nan

        # A conditional even when vmapped over seeds (no gradient steps while no
        # run learns yet).
        (network, opt_state, r_state), loss, q_mean = cond_any(
            learn, learn_fn, skip_fn, (params.network, state.opt_state, replay_state if per else ())
        )
        replay_state = r_state if per else replay_state
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
        out = {
            **episode_metrics(batch, metrics),
            "epsilon_mean": jnp.mean(batch.samples.agent.agent_info.epsilon),
            "lr": lr,
            "loss": loss,
            "q_mean": q_mean,
            "updates": updates,
        }
        return new_state, out

    def evaluate(self, state: TrainState, key: jax.Array) -> dict[str, jax.Array]:
        """``summarize`` of ``eval_episodes`` greedy episodes of ``state``'s
        Q-network (one per env, all from fresh resets); jittable, vmappable."""
        return summarize(self.evaluator.run(key, state.params))


def make_train(config: DQNConfig, *, env: Any = None, env_params: Any = None) -> Trainer:
    """Build DQN for ``config``: a [`Trainer`][jaxsample.algos.dqn.Trainer] of pure functions.

    Args:
      config: a [`DQNConfig`][jaxsample.algos.dqn.DQNConfig].
      env, env_params: a gymnax environment with a ``Discrete`` action space to
        use instead of ``gymnax.make(config.env_name)`` (``env_params`` defaults
        to its ``default_params``), e.g. with another time limit.

    The agent is ``EpsilonGreedyAgent(space, global_B=num_envs, ...)`` (env
    ``b`` has rank ``b``); the sampler ``make_sampler(env, env_params, agent,
    BatchSpec(num_steps, num_envs), reset_mode="auto")`` with the default sparse
    final-observation store (exact wherever a target bootstraps); the replayer
    ``replay.uniform(sampler.examples, num_envs, buffer_capacity)`` (or
    ``replay.prioritized(..., alpha=priority_alpha, beta=priority_beta)`` with
    ``prioritized_replay``).
    """
    if not isinstance(config, DQNConfig):
        raise TypeError(f"config must be a DQNConfig, got {type(config).__name__}")
    env, env_params = make_env(config, env, env_params)
    space = env.action_space(env_params)
    if not isinstance(space, spaces.Discrete):
        raise TypeError(f"DQN needs a Discrete action space, got {type(space).__name__}")
    agent = EpsilonGreedyAgent(
        space,
        global_B=config.num_envs,
        hidden_sizes=config.hidden_sizes,
        epsilon_init=config.epsilon_init,
        epsilon_final=config.epsilon_final,
        epsilon_final_min=config.epsilon_final_min,
    )
    sampler = make_trainer_sampler(env, env_params, agent, config)
    if config.prioritized_replay:
        replayer: Replayer = prioritized(
            sampler.examples,
            config.num_envs,
            config.buffer_capacity,
            alpha=config.priority_alpha,
            beta=config.priority_beta,
        )
    else:
        replayer = uniform(sampler.examples, config.num_envs, config.buffer_capacity)
    try:
        episode_limit = int(np.asarray(env_params.max_steps_in_episode))
    except (AttributeError, TypeError, ValueError, OverflowError):
        episode_limit = 10_000
    evaluator = make_evaluator(
        env,
        env_params,
        agent,
        n_envs=config.eval_episodes,
        max_steps=config.eval_episodes * (episode_limit + 1),
        discount=config.gamma,
    )
    optimizer = common.make_optimizer(config)
    return Trainer(config, env, env_params, agent, sampler, replayer, evaluator, optimizer)


def reference_run(
    config: DQNConfig | None = None,
    seeds: Sequence[int] = tuple(range(4)),
    *,
    tail_iterations: int = 5_000,
    lrs: Sequence[float] | None = None,
    compiler: Callable[[Any, tuple], Any] | None = None,
) -> dict[str, Any]:
    """The reference benchmark (a runner: it jits): CartPole-v1, 5e5 env steps,
    4 seeds by default; ``len(seeds)`` x ``len(lrs)`` runs under one ``jax.vmap``.

    Returns the report of `jaxsample.algos.common.reference_run` (which
    ``compiler`` is passed to): the returns are those of the epsilon-greedy
    training episodes, and ``eval_return`` is the greedy policy's
    ([`Trainer.evaluate`][jaxsample.algos.dqn.Trainer.evaluate]).
    """
    trainer = make_train(DQNConfig() if config is None else config)
    return common.reference_run(
        trainer, seeds, lrs=lrs, tail_iterations=tail_iterations, compiler=compiler
    )[1]

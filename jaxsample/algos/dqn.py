"""DQN, top-down in one module: purejaxrl's and CleanRL's DQN on the sampler.

``make_train(config)`` returns a [`DQN`][jaxsample.algos.dqn.DQN] trainer, a
frozen object of pure functions (the
[`Trainer`][jaxsample.algos.trainer.Trainer] protocol). Jit it, and vmap it
over seeds and hyperparameters ([`HParams`][jaxsample.algos.dqn.HParams]:
learning rate and discount) at once::

    import jax, jax.numpy as jnp
    from jaxsample.algos import dqn

    trainer = dqn.make_train(dqn.DQNConfig())             # CartPole-v1, 5e5 steps
    keys = jax.random.split(jax.random.key(0), 4)          # 2 seeds x 2 lrs
    hp = trainer.hparams(lr=jnp.array([2.5e-4, 2.5e-4, 5e-4, 5e-4]))
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys, hp)
    metrics["average_return"][:, -1]                       # [4] final returns

One iteration ([`DQN.iteration`][jaxsample.algos.dqn.DQN.iteration]): set the
epsilon decay, collect ``[num_steps, num_envs]`` with an
[`EpsilonGreedyAgent`][jaxsample.agents.EpsilonGreedyAgent] (rlpyt's vector
epsilon: env rank ``b`` anneals to its own final epsilon, log-spaced from
``epsilon_final_min`` to ``epsilon_final``; the decay is data, no retrace), add
the batch to the replay buffer (`jaxsample.replay.uniform`, or Schaul et al.'s
`jaxsample.replay.prioritized` with ``prioritized_replay``: steps drawn by
priority, the loss weighted by the importance weights, the priorities set to
``|td| + priority_eps``), then (once ``learning_starts`` env steps are in)
``gradient_steps`` Adam steps, then the target update every
``target_update_interval`` env steps.

The TD target bootstraps through truncation and not through termination
([`td_target`][jaxsample.algos.returns.td_target])::

    y = r + gamma * (1 - terminated) * max_a Q_target(s', a)
    y = r + gamma * (1 - terminated) * Q_target(s', argmax_a Q(s', a))   # double DQN

where ``s'`` is the step's true next observation,
``samples.env.final_observation``: at a time-limit truncation the state the env
really reached, not the reset observation an auto-reset returns (bootstrapping
from that, or not at all, is what most JAX DQN code does).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from gymnax.environments import spaces

from jaxsample.agents import EpsilonGreedyAgent, EpsilonGreedyParams
from jaxsample.algos import common
from jaxsample.algos.configs import DQNConfig
from jaxsample.algos.returns import td_target
from jaxsample.algos.trainer import Reports, run, train
from jaxsample.core.batched import cond_any
from jaxsample.evaluation import Evaluator, make_evaluator
from jaxsample.metrics import StepMetrics
from jaxsample.replay import Replayer, ReplayState, prioritized, uniform
from jaxsample.sampler import SamplerProtocol, SamplerState
from jaxsample.traj_info import summarize
from jaxsample.types import Batch, PyTree, Samples

__all__ = ["DQN", "DQNConfig", "HParams", "TrainState", "make_train", "td_target"]


HParams = common.hparams_type(DQNConfig, __name__)
"""DQN's settings that are data (``DQNConfig.HPARAMS``: lr, the TD target's
gamma): float32 ``[]`` for one run, ``[N]`` to vmap ``N`` runs."""


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
      opt_state: optax state of the optimizer (`DQN.optimizer`).
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
# The trainer
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class DQN(common.RunLength):
    """DQN as pure functions; build it with [`make_train`][jaxsample.algos.dqn.make_train].

    All methods are jittable and vmappable (over keys and `HParams`);
    ``evaluate(state, key)`` is the greedy policy's episode statistics.
    ``metrics`` of an iteration, float32 scalars unless noted: ``env_steps``
    (after the iteration, from ``StepMetrics``), ``episode_return_mean``, ``episode_length_mean``,
    ``n_episodes`` (episodes completed in this batch; the means are NaN when
    none did), ``average_return``, ``average_episode_length`` (over the last
    ``metrics_window`` episodes, NaN before the first), ``epsilon_mean`` (the
    mean epsilon the envs acted with), ``lr``, ``loss`` and ``q_mean`` (the mean
    Q-value of the replayed actions; both means over the iteration's gradient
    steps, NaN before learning starts), ``updates`` (int32, gradient steps so
    far).

    Attributes:
      config: the run's config.
      env: the environment it trains in.
      env_params: its parameters.
      agent: the [`EpsilonGreedyAgent`][jaxsample.agents.EpsilonGreedyAgent]
        it acts with (env ``b`` has rank ``b``).
      sampler: the sampler of its batches (`make_train`).
      replayer: the `uniform` replayer, or the `prioritized` one with
        ``prioritized_replay``.
      evaluator: the [`Evaluator`][jaxsample.evaluation.Evaluator] of ``agent.as_eval()``
        (``eval_episodes`` envs, one episode each).
      optimizer: `common.make_optimizer`, stepped by ``-lr`` times its output.
    """

    config: DQNConfig
    env: Any
    env_params: Any
    agent: EpsilonGreedyAgent
    sampler: SamplerProtocol
    replayer: Replayer
    evaluator: Evaluator
    optimizer: optax.GradientTransformation
    reports = Reports()

    def hparams(self, **overrides: Any) -> HParams:
        """`HParams` from the config, with ``overrides`` (e.g. ``lr=[...]``)."""
        return common.hparams_of(HParams, self.config, **overrides)

    def init(self, key: jax.Array, hparams: HParams | None = None) -> TrainState:
        """A fresh run from ``key`` (a ``jax.random.key``): network, target copy,
        optimizer, envs and an empty buffer; ``hparams`` default to the config's."""
        hparams, params, k_sampler, k_train = common.start(self, HParams, key, hparams)
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
        lr = common.annealed_lr(c, state.iteration, state.hparams.lr)
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
            **common.episode_metrics(batch, metrics),
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

    def run(self, state: TrainState, num_iterations: int) -> tuple[TrainState, dict]:
        """`jaxsample.algos.trainer.run`: ``num_iterations`` (static) iterations."""
        return run(self, state, num_iterations)

    def train(self, key: jax.Array, hparams: HParams | None = None) -> tuple[TrainState, dict]:
        """`jaxsample.algos.trainer.train`: ``init`` and the whole run."""
        return train(self, key, hparams)


def make_train(config: DQNConfig, *, env: Any = None, env_params: Any = None) -> DQN:
    """Build DQN for ``config``: a [`DQN`][jaxsample.algos.dqn.DQN] of pure functions.

    Args:
      config: a [`DQNConfig`][jaxsample.algos.dqn.DQNConfig].
      env: a gymnax environment with a ``Discrete`` action space to use
        instead of ``gymnax.make(config.env_name)``, e.g. with another time
        limit.
      env_params: its parameters (default: its ``default_params``).

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
    env, env_params = common.make_env(config, env, env_params)
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
    sampler = common.make_trainer_sampler(env, env_params, agent, config)
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
    return DQN(config, env, env_params, agent, sampler, replayer, evaluator, optimizer)

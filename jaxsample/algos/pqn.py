"""PQN, top-down in one module: Gallici et al.'s parallel Q-learning on the sampler.

"Simplifying Deep Temporal Difference Learning" (2024; purejaxql's
``pqn_gymnax.py``): many envs, no replay buffer and no target network, a
Q-network layer-normalised after each hidden layer, trained like PPO on each
fresh batch. ``make_train(config)`` returns a [`PQN`][jaxsample.algos.pqn.PQN]
trainer of pure functions (the [`Trainer`][jaxsample.algos.trainer.Trainer]
protocol); jit it, and vmap it over seeds and [`HParams`][jaxsample.algos.pqn.HParams]::

    trainer = pqn.make_train(pqn.PQNConfig())              # purejaxql's CartPole
    keys = jax.random.split(jax.random.key(0), 4)          # 2 seeds x 2 lambdas
    hp = trainer.hparams(q_lambda=jnp.array([0.95, 0.95, 0.65, 0.65]))
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys, hp)

One iteration: set the epsilon decay (data: no retrace), collect ``[T, B]``
with an [`EpsilonGreedyAgent`][jaxsample.agents.EpsilonGreedyAgent]
(``layer_norm=True``), compute the Q(lambda) targets of the batch once
(`PQN.targets`), then ``update_epochs`` passes of ``num_minibatches`` steps of
``0.5 * (Q(s, a) - target)**2``.

The targets are Peng's Q(lambda) with the max over the legal actions,
``G[t] = r[t] + gamma * ((1 - lambda) * max Q(s[t+1]) + lambda * G[t+1])``,
cut at every episode end: a terminated step's target is ``r``; a truncated
step's is ``r + gamma * max Q(final_observation)``, the true state the time
limit cut (where most JAX code bootstraps from the reset observation or from
nothing); the batch's last step's ``r + gamma * max Q(next observation)``
(the sampler's ``bootstrap_value``). It is [`gae`][jaxsample.algos.returns.gae]'s
lambda-return with ``V(s) = max_a Q(s, a)``: ``G = A + V``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from gymnax.environments import spaces

from jaxsample.agents import EpsilonGreedyAgent, EpsilonGreedyParams
from jaxsample.agents.masks import masked_max
from jaxsample.algos import common
from jaxsample.algos.off_policy_configs import PQNConfig
from jaxsample.algos.returns import gae
from jaxsample.algos.trainer import Reports, run, train
from jaxsample.errors import ConfigTypeError
from jaxsample.evaluation import Evaluator, make_evaluator
from jaxsample.metrics import StepMetrics
from jaxsample.sampler import SamplerProtocol, SamplerState
from jaxsample.traj_info import summarize
from jaxsample.types import Batch, PyTree, Samples

__all__ = ["PQN", "HParams", "PQNConfig", "TrainState", "make_train"]


HParams = common.hparams_type(PQNConfig, __name__)
"""PQN's settings that are data (``PQNConfig.HPARAMS``: lr, and the Q(lambda)
targets' gamma and q_lambda): float32 ``[]`` for one run, ``[N]`` to vmap."""


@struct.dataclass
class TrainState:
    """Everything a PQN run carries from one iteration to the next.

    Attributes:
      params: the agent's [`EpsilonGreedyParams`][jaxsample.agents.EpsilonGreedyParams]
        (``network`` and ``decay``, the epsilon schedule of the last collect).
      opt_state: the optimizer's state (of ``params.network``).
      sampler_state: the envs and their key chains.
      key: draws the minibatch permutations.
      iteration: int32 ``[]``, iterations done.
      metrics: [`StepMetrics`][jaxsample.metrics.StepMetrics] of the training episodes.
      hparams: this run's `HParams`.
    """

    params: EpsilonGreedyParams
    opt_state: PyTree
    sampler_state: SamplerState
    key: jax.Array
    iteration: jax.Array
    metrics: StepMetrics
    hparams: HParams


class Steps(struct.PyTreeNode):
    """What the loss reads of each step: leaves ``[N, ...]`` (``[T * B]`` for
    the batch, ``[M, T * B / M]`` for its minibatches)."""

    observation: PyTree
    action: jax.Array
    target: jax.Array


def make_train(config: PQNConfig, *, env: Any = None, env_params: Any = None) -> PQN:
    """Build PQN for ``config``: a [`PQN`][jaxsample.algos.pqn.PQN] of pure functions.

    Args:
      config: a [`PQNConfig`][jaxsample.algos.off_policy_configs.PQNConfig].
      env: an environment with a ``Discrete`` action space instead of the one
        ``config.env_name`` names.
      env_params: its parameters (default: its ``default_params``).

    The sampler resets in ``"auto"`` mode and returns ``bootstrap_value``; an
    env with legal-action masks (a Pgx or Jumanji game) is acted in, and its
    targets maximised, over the legal actions only.
    """
    if not isinstance(config, PQNConfig):
        raise TypeError(f"config must be a PQNConfig, got {type(config).__name__}")
    env, env_params = common.make_env(config, env, env_params)
    space = env.action_space(env_params)
    if not isinstance(space, spaces.Discrete):
        fits = "for continuous actions use ppo, sac or td3"
        raise ConfigTypeError(
            "env_name",
            f"{config.env_name!r}: PQN needs a Discrete action space, got "
            f"{type(space).__name__}: " + (fits if isinstance(space, spaces.Box) else "use ppo"),
        )
    if getattr(env, "zero_sum", False):
        raise ValueError(
            f"PQN has no self-play targets for the two-player game {config.env_name}: use ppo"
        )
    agent = EpsilonGreedyAgent(
        space, global_B=config.num_envs, hidden_sizes=config.hidden_sizes,
        epsilon_init=config.epsilon_init, epsilon_final=config.epsilon_final,
        epsilon_final_min=config.epsilon_final_min, layer_norm=config.layer_norm,
    )  # fmt: skip
    sampler = common.make_trainer_sampler(env, env_params, agent, config, bootstrap_value=True)
    try:
        episode_limit = int(np.asarray(env_params.max_steps_in_episode))
    except (AttributeError, TypeError, ValueError, OverflowError):
        episode_limit = 10_000
    evaluator = make_evaluator(
        env, env_params, agent, n_envs=config.eval_episodes,
        max_steps=config.eval_episodes * (episode_limit + 1), discount=config.gamma,
    )  # fmt: skip
    return PQN(config, env, env_params, agent, sampler, evaluator, make_optimizer(config))


def make_optimizer(config: PQNConfig) -> optax.GradientTransformation:
    """``clip_by_global_norm(max_grad_norm)`` then RAdam's (or Adam's) scaling,
    on the raveled parameters; the trainer steps by ``-lr`` times its output
    (so the learning rate can be vmapped)."""
    scale = {"radam": optax.scale_by_radam, "adam": optax.scale_by_adam}[config.optimizer]
    clip = optax.clip_by_global_norm(config.max_grad_norm)
    return optax.flatten(optax.chain(clip, scale(eps=config.adam_eps)))


@dataclasses.dataclass(frozen=True, eq=False)
class PQN(common.RunLength):
    """PQN as pure functions; build it with `make_train`. ``metrics`` of an
    iteration (float32 scalars): ``env_steps``, ``episode_return_mean``,
    ``episode_length_mean``, ``n_episodes`` (this batch's; NaN means when
    none), ``average_return``, ``average_episode_length`` (last
    ``metrics_window`` episodes), ``epsilon_mean``, ``lr``, ``loss`` and
    ``q_mean`` (means over the minibatches), ``target_mean``.
    ``evaluate(state, key)`` is the greedy policy's episodes."""

    config: PQNConfig
    env: Any
    env_params: Any
    agent: EpsilonGreedyAgent
    sampler: SamplerProtocol
    evaluator: Evaluator
    optimizer: optax.GradientTransformation
    reports = Reports()

    def hparams(self, **overrides: Any) -> HParams:
        """`HParams` from the config, with ``overrides`` (e.g. ``lr=[...]``)."""
        return common.hparams_of(HParams, self.config, **overrides)

    def init(self, key: jax.Array, hparams: HParams | None = None) -> TrainState:
        """A fresh run from ``key``; ``hparams`` default to the config's."""
        hparams, params, k_sampler, k_train = common.start(self, HParams, key, hparams)
        return TrainState(
            params, self.optimizer.init(params.network), self.sampler.init(k_sampler, params),
            k_train, iteration=jnp.zeros((), jnp.int32),
            metrics=StepMetrics.init(self.config.metrics_window), hparams=hparams,
        )  # fmt: skip

    def decay(self, iteration: jax.Array) -> jax.Array:
        """float32 ``[]``, the agent's ``params.decay`` at iteration ``iteration``:
        ``iteration * steps_per_iteration / (exploration_fraction *
        total_timesteps)`` clipped to ``[0, 1]`` (1 when the fraction is 0)."""
        c = self.config
        duration = c.exploration_fraction * c.total_timesteps
        if duration <= 0:
            return jnp.ones((), jnp.float32)
        steps = jnp.asarray(iteration).astype(jnp.float32) * c.steps_per_iteration
        return jnp.clip(steps / jnp.float32(duration), 0.0, 1.0)

    def iteration(self, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        """Collect ``[T, B]`` at this iteration's epsilon, then `learn`."""
        params = state.params.replace(decay=self.decay(state.iteration))
        sampler_state, batch = self.sampler.collect(state.sampler_state, params)
        return self.learn(state.replace(params=params, sampler_state=sampler_state), batch)

    def learn(self, state: TrainState, batch: Batch) -> tuple[TrainState, dict[str, jax.Array]]:
        """The targets of ``batch`` once, then ``update_epochs`` x
        ``num_minibatches`` gradient steps. ``state.sampler_state`` is left
        as is (an actor/learner driver collects elsewhere)."""
        c, hp = self.config, state.hparams
        samples = batch.samples
        target = self.targets(state.params, samples, hp.gamma, hp.q_lambda)
        T, B = target.shape
        steps = jax.tree.map(
            lambda x: x.reshape(T * B, *x.shape[2:]),
            Steps(samples.env.observation, samples.agent.action, target),
        )
        lr = common.annealed_lr(c, state.iteration, hp.lr)
        keys = jax.random.split(state.key, c.update_epochs + 1)  # the next key, one per epoch

        def epoch(carry: tuple, k: jax.Array) -> tuple[tuple, dict[str, jax.Array]]:
            perm = jax.random.permutation(k, T * B)
            shuffled = jax.tree.map(
                lambda x: x[perm].reshape(c.num_minibatches, -1, *x.shape[1:]), steps
            )
            return jax.lax.scan(self.update, carry, shuffled)

        (network, opt_state, _), stats = jax.lax.scan(
            epoch, (state.params.network, state.opt_state, lr), keys[1:]
        )
        metrics = state.metrics.update(batch)
        new_state = state.replace(
            params=state.params.replace(network=network), opt_state=opt_state, key=keys[0],
            iteration=state.iteration + 1, metrics=metrics,
        )  # fmt: skip
        out = {k: jnp.mean(v) for k, v in stats.items()}
        out.update(
            common.episode_metrics(batch, metrics), lr=lr, target_mean=jnp.mean(target),
            epsilon_mean=jnp.mean(samples.agent.agent_info.epsilon),
        )  # fmt: skip
        return new_state, out

    def targets(
        self, params: EpsilonGreedyParams, samples: Samples, gamma: jax.Array, q_lambda: jax.Array
    ) -> jax.Array:
        """float32 ``[T, B]`` Q(lambda) targets of a batch (module docstring).

        ``max Q(s[t])`` is over the Q-values the agent acted on
        (``agent_info.q_values``) and the legal actions of ``s[t]``
        (``samples.env.action_mask``); a truncated step's ``max Q`` is
        ``params``' of its ``final_observation`` over that observation's
        legal actions (``final_action_mask``); the last step's the sampler's
        ``bootstrap_value``. The rewards are scaled by ``reward_scale``.
        """
        env = samples.env
        value = masked_max(samples.agent.agent_info.q_values, env.action_mask)
        q = jax.vmap(jax.vmap(self.agent.q_values, in_axes=(None, 0)), in_axes=(None, 0))
        final_q = q(params.network, env.final_observation)  # zeros where terminated
        final_value = jnp.where(env.truncated, masked_max(final_q, env.final_action_mask), 0.0)
        reward = env.reward * jnp.float32(self.config.reward_scale)
        _, target = gae(
            reward, value, final_value, samples.bootstrap_value, env.terminated, env.truncated,
            gamma=gamma, lam=q_lambda, valid=samples.valid,
        )  # fmt: skip
        return target

    def update(self, carry: tuple, mb: Steps) -> tuple[tuple, dict[str, jax.Array]]:
        """One optimizer step on one minibatch."""
        network, opt_state, lr = carry
        (loss, q_mean), grads = jax.value_and_grad(self.loss, has_aux=True)(network, mb)
        updates, opt_state = self.optimizer.update(grads, opt_state, network)
        network = optax.apply_updates(network, jax.tree.map(lambda u: -lr * u, updates))
        return (network, opt_state, lr), {"loss": loss, "q_mean": q_mean}

    def loss(self, network: PyTree, mb: Steps) -> tuple[jax.Array, jax.Array]:
        """``(mean of 0.5 * (Q(s, a) - target)**2, mean Q(s, a))`` over ``mb``."""
        q = jax.vmap(self.agent.q_values, in_axes=(None, 0))(network, mb.observation)
        action = jnp.asarray(mb.action).astype(jnp.int32)
        q_taken = jnp.take_along_axis(q, action[:, None], axis=-1)[:, 0]
        return 0.5 * jnp.mean(jnp.square(q_taken - mb.target)), jnp.mean(q_taken)

    def evaluate(self, state: TrainState, key: jax.Array) -> dict[str, jax.Array]:
        """``summarize`` of ``eval_episodes`` greedy episodes of ``state``'s
        Q-network (one per env, from fresh resets); jittable, vmappable."""
        return summarize(self.evaluator.run(key, state.params))

    def run(self, state: TrainState, num_iterations: int) -> tuple[TrainState, dict]:
        """`jaxsample.algos.trainer.run`: ``num_iterations`` (static) iterations."""
        return run(self, state, num_iterations)

    def train(self, key: jax.Array, hparams: HParams | None = None) -> tuple[TrainState, dict]:
        """`jaxsample.algos.trainer.train`: ``init`` and the whole run."""
        return train(self, key, hparams)

"""TD3, top-down in one module: Fujimoto et al.'s twin delayed DDPG on the sampler.

``make_train(config)`` returns a [`TD3`][jaxsample.algos.td3.TD3] trainer, a
frozen object of pure functions (the
[`Trainer`][jaxsample.algos.trainer.Trainer] protocol). Jit it, and vmap it
over seeds and hyperparameters ([`HParams`][jaxsample.algos.td3.HParams]:
learning rate, discount, Polyak step, target-policy noise) at once::

    import jax
    from jaxsample.algos import td3

    trainer = td3.make_train(td3.TD3Config())             # Pendulum-v1, 20k steps
    keys = jax.random.split(jax.random.key(0), 4)          # 4 seeds
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys)
    jax.vmap(trainer.evaluate)(state, keys)                # the greedy policies

One iteration ([`TD3.iteration`][jaxsample.algos.td3.TD3.iteration]): collect
``[num_steps, num_envs]`` (uniformly random actions until ``learning_starts``
env steps are in; then ``clip(mu(s) + noise, low, high)``,
[`DeterministicActor`][jaxsample.agents.DeterministicActor]), add them to the
replay buffer, then ``gradient_steps`` gradient steps
([`TD3.update`][jaxsample.algos.td3.TD3.update]): the critics every step, the
actor and both targets' Polyak step after every ``policy_delay``-th (the loop:
[`jaxsample.algos.off_policy`][jaxsample.algos.off_policy], shared with SAC).
The critics' target ([`TD3.targets`][jaxsample.algos.td3.TD3.targets])::

    a' = clip(mu_target(s') + clip(target_noise * eps, -c, c) * scale, low, high)
    y  = r + gamma * (1 - terminated) * min_k Qtarget_k(s', a')

with ``s'`` the step's TRUE next observation (``samples.env.final_observation``:
at a time-limit truncation the state the env reached, bootstrapped from; at a
termination nothing is). The greedy action is ``mu(s) = loc + scale *
tanh(f(s))``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxsample.agents import ContinuousParams, DeterministicActor
from jaxsample.algos import common, off_policy
from jaxsample.algos.off_policy import TrainState
from jaxsample.algos.off_policy_configs import TD3Config
from jaxsample.algos.trainer import Reports, run, train
from jaxsample.core.batched import cond_any
from jaxsample.evaluation import Evaluator
from jaxsample.replay import Replayer
from jaxsample.sampler import SamplerProtocol
from jaxsample.traj_info import summarize
from jaxsample.types import PyTree, Samples

__all__ = ["TD3", "HParams", "Learner", "TD3Config", "TrainState", "make_train"]


HParams = common.hparams_type(TD3Config, __name__)
"""TD3's settings that are data (``TD3Config.HPARAMS``: lr, the target's gamma,
the Polyak step tau, the target-policy noise before its clip): float32 ``[]``
for one run, ``[N]`` to vmap ``N``."""


@struct.dataclass
class Learner:
    """TD3's part of the [`TrainState`][jaxsample.algos.off_policy.TrainState]
    (``state.learner``): the target actor and critics (the trees of
    ``params.actor`` and ``params.critic``) and the optimizer states."""

    target_actor: PyTree
    target_critic: PyTree
    actor_opt: PyTree
    critic_opt: PyTree


@dataclasses.dataclass(frozen=True, eq=False)
class TD3(common.RunLength):
    """TD3 as pure functions; build it with [`make_train`][jaxsample.algos.td3.make_train].

    All methods are jittable and vmappable (over keys and `HParams`).
    ``metrics`` of an iteration, float32 scalars unless noted: those of
    [`common.episode_metrics`][jaxsample.algos.common.episode_metrics],
    ``updates`` (int32, gradient steps so far) and the means over the
    iteration's gradient steps (NaN before learning starts) of ``loss`` (the
    critics'), ``q_mean``, ``actor_loss`` (over its delayed steps: NaN in an
    iteration without one) and ``lr``.

    Attributes:
      config: the run's config.
      env: the environment it trains in.
      env_params: its parameters.
      agent: the [`DeterministicActor`][jaxsample.agents.DeterministicActor]
        (its critics' parameters are in ``state.params`` too).
      sampler: the sampler of its batches (`make_train`).
      replayer: the `uniform` replayer, or the `prioritized` one.
      evaluator: the greedy policy's [`Evaluator`][jaxsample.evaluation.Evaluator].
      optimizer: `common.make_optimizer` (each network its own state),
        stepped by ``-lr`` times its output.
    """

    config: TD3Config
    env: Any
    env_params: Any
    agent: DeterministicActor
    sampler: SamplerProtocol
    replayer: Replayer
    evaluator: Evaluator
    optimizer: optax.GradientTransformation
    reports = Reports()

    def hparams(self, **overrides: Any) -> HParams:
        """`HParams` from the config, with ``overrides`` (e.g. ``lr=[...]``)."""
        return common.hparams_of(HParams, self.config, **overrides)

    def init(self, key: jax.Array, hparams: HParams | None = None) -> TrainState:
        """A fresh run from ``key``: networks, their target copies, optimizers,
        envs and an empty buffer."""

        def learner(params: ContinuousParams, hparams: HParams) -> Learner:
            opt = self.optimizer.init
            return Learner(params.actor, params.critic, opt(params.actor), opt(params.critic))

        return off_policy.init(self, HParams, key, hparams, learner)

    def iteration(self, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        """One TD3 iteration (see the module docstring; metrics: the class's)."""
        state, batch = off_policy.collect(self, state)
        return off_policy.learn(self, state, batch, self.update)

    def targets(
        self, params: ContinuousParams, learner: Learner, samples: Samples,
        hparams: HParams, noise: jax.Array,
    ) -> jax.Array:  # fmt: skip
        """float32 ``[L, N]``: the targets of ``samples`` (leaves ``[L, N, ...]``).

        ``y = r + gamma * (1 - end) * min_k Qtarget_k(s', a')`` with ``s'`` the
        true next observation (``samples.env.final_observation``), ``a' =
        clip(mu_target(s') + clip(target_noise * noise, -c, c) * scale, low,
        high)`` (``noise`` ``[L, N, *act]`` standard normal, given so that a
        test can fix it; ``c = target_noise_clip``) and ``end`` the step's
        termination (its ``done`` with ``truncation_as_termination``).
        """
        t = off_policy.transitions(self, params, samples)
        c, agent = self.config.target_noise_clip, self.agent
        shape = (len(t.x), *agent.action_shape)
        scale = agent.loc_scale()[1].reshape((1, *agent.action_shape))
        eps = jnp.clip(hparams.target_noise * noise, -c, c).reshape(shape) * scale
        mu = jax.vmap(agent.action, in_axes=(None, 0))(learner.target_actor, t.next_x)
        q = jax.vmap(agent.q_values, in_axes=(None, 0, 0))
        next_q = jnp.min(q(learner.target_critic, t.next_x, jax.vmap(agent.clip)(mu + eps)), -1)
        y = t.reward + hparams.gamma * jnp.where(t.ends, 0.0, next_q)
        return y.reshape(jnp.shape(samples.env.reward))

    def update(
        self, params: ContinuousParams, learner: Learner, samples: Samples, weight: jax.Array,
        hparams: HParams, key: jax.Array, updates: jax.Array,
    ) -> tuple[ContinuousParams, Learner, jax.Array, dict[str, jax.Array]]:  # fmt: skip
        """One gradient step on ``samples`` (``[1, N]``): ``(params, learner,
        td [N], metrics)`` (`off_policy.Update`).

        The critics' loss is the mean over valid steps of ``weight * 0.5 *
        sum_k (Q_k(s, a) - y)**2`` (``td``: the mean ``|Q_k - y|``). When this
        is the ``policy_delay``-th step (``(updates + 1) % policy_delay == 0``;
        a conditional even when vmapped), the actor's loss ``-mean(Q_1(s,
        mu(s)))`` with the updated critics, then both targets' Polyak step.
        """
        agent = self.agent
        noise = jax.random.normal(key, (*samples.env.reward.shape, *agent.action_shape))
        y = jax.lax.stop_gradient(self.targets(params, learner, samples, hparams, noise))
        t = off_policy.transitions(self, params, samples)
        y, w = y.reshape(-1), weight * t.valid
        count = jnp.maximum(jnp.sum(t.valid), 1.0)
        q = jax.vmap(agent.q_values, in_axes=(None, 0, 0))

        def critic_loss(critic: PyTree) -> tuple[jax.Array, tuple]:
            td = q(critic, t.x, t.action) - y[:, None]  # [N, K]
            loss = jnp.sum(w * 0.5 * jnp.sum(jnp.square(td), axis=-1)) / count
            q_mean = jnp.sum(t.valid * jnp.mean(td + y[:, None], axis=-1)) / count
            return loss, (q_mean, jnp.mean(jnp.abs(td), axis=-1))

        (loss, (q_mean, td)), grads = jax.value_and_grad(critic_loss, has_aux=True)(params.critic)
        critic, critic_opt = self._step(grads, learner.critic_opt, params.critic, hparams.lr)

        def actor_loss(actor: PyTree) -> jax.Array:
            action = jax.vmap(agent.action, in_axes=(None, 0))(actor, t.x)
            return -jnp.sum(t.valid * q(critic, t.x, action)[:, 0]) / count

        def delayed(carry: tuple) -> tuple:
            actor, actor_opt, target_actor, target_critic, _ = carry
            a_loss, grads = jax.value_and_grad(actor_loss)(actor)
            actor, actor_opt = self._step(grads, actor_opt, actor, hparams.lr)
            return (actor, actor_opt, off_policy.polyak(actor, target_actor, hparams.tau),
                    off_policy.polyak(critic, target_critic, hparams.tau), a_loss)  # fmt: skip

        carry = (params.actor, learner.actor_opt, learner.target_actor, learner.target_critic,
                 jnp.full((), jnp.nan, jnp.float32))  # fmt: skip
        due = (updates + 1) % self.config.policy_delay == 0
        actor, actor_opt, target_actor, target_critic, a_loss = cond_any(
            due, delayed, lambda carry: carry, carry
        )
        metrics = {"loss": loss, "q_mean": q_mean, "actor_loss": a_loss, "lr": hparams.lr}
        learner = Learner(target_actor, target_critic, actor_opt, critic_opt)
        return params.replace(actor=actor, critic=critic), learner, td, metrics

    def _step(self, grads: PyTree, opt_state: PyTree, tree: PyTree, lr: jax.Array) -> tuple:
        """One optimizer step of ``tree``: ``(tree, opt_state)``."""
        updates, opt_state = self.optimizer.update(grads, opt_state, tree)
        return jax.tree.map(lambda p, u: p - lr * u, tree, updates), opt_state

    def evaluate(self, state: TrainState, key: jax.Array) -> dict[str, jax.Array]:
        """``summarize`` of ``eval_episodes`` greedy episodes (``mu(s)``), one
        per env from fresh resets; jittable, vmappable."""
        return summarize(self.evaluator.run(key, state.params))

    def run(self, state: TrainState, num_iterations: int) -> tuple[TrainState, dict]:
        """`jaxsample.algos.trainer.run`: ``num_iterations`` (static) iterations."""
        return run(self, state, num_iterations)

    def train(self, key: jax.Array, hparams: HParams | None = None) -> tuple[TrainState, dict]:
        """`jaxsample.algos.trainer.train`: ``init`` and the whole run."""
        return train(self, key, hparams)


def make_train(config: TD3Config, *, env: Any = None, env_params: Any = None) -> TD3:
    """Build TD3 for ``config``: a [`TD3`][jaxsample.algos.td3.TD3] of pure functions.

    Args:
      config: a [`TD3Config`][jaxsample.algos.off_policy_configs.TD3Config].
      env: a gymnax environment with a bounded ``Box`` action space to use
        instead of ``config.env_name``.
      env_params: its parameters (default: its ``default_params``).

    A ``Discrete`` action space is a one-line ``TypeError`` that names the
    algorithms for it (PPO, DQN, PQN). Sampler and replayer as
    [`sac.make_train`][jaxsample.algos.sac.make_train]'s.
    """
    if not isinstance(config, TD3Config):
        raise TypeError(f"config must be a TD3Config, got {type(config).__name__}")

    def agent(space: Any, activation: Any) -> DeterministicActor:
        return DeterministicActor(
            space, config.hidden_sizes, activation, config.num_critics,
            config.normalize_observations, exploration_noise=config.exploration_noise,
        )  # fmt: skip

    parts = off_policy.make_parts(config, env, env_params, "TD3", agent)
    return TD3(config, *parts, optimizer=common.make_optimizer(config))

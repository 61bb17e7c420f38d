"""SAC, top-down in one module: Haarnoja et al.'s soft actor-critic on the sampler.

``make_train(config)`` returns a [`SAC`][jaxsample.algos.sac.SAC] trainer, a
frozen object of pure functions (the
[`Trainer`][jaxsample.algos.trainer.Trainer] protocol). Jit it, and vmap it
over seeds and hyperparameters ([`HParams`][jaxsample.algos.sac.HParams]:
learning rate, discount, Polyak step) at once::

    import jax, jax.numpy as jnp
    from jaxsample.algos import sac

    trainer = sac.make_train(sac.SACConfig())             # Pendulum-v1, 20k steps
    keys = jax.random.split(jax.random.key(0), 4)          # 2 seeds x 2 lrs
    hp = trainer.hparams(lr=jnp.array([3e-4, 3e-4, 1e-3, 1e-3]))
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys, hp)
    jax.vmap(trainer.evaluate)(state, keys)                # the greedy policies

One iteration ([`SAC.iteration`][jaxsample.algos.sac.SAC.iteration]): collect
``[num_steps, num_envs]`` (uniformly random actions until ``learning_starts``
env steps are in), add them to the replay buffer, update the running
observation statistics, then ``gradient_steps`` gradient steps
([`SAC.update`][jaxsample.algos.sac.SAC.update]), each on its own minibatch:
the critics toward the soft target, the actor, the temperature, the target
critics' Polyak step ([`jaxsample.algos.off_policy`][jaxsample.algos.off_policy]
holds the loop, shared with TD3).

The policy ([`SquashedGaussianActor`][jaxsample.agents.SquashedGaussianActor])
acts with ``a = loc + scale * tanh(u)``, ``u ~ N(mean(s), std(s))``, in the
Box; its log-density is corrected for the squash and the scale; the greedy
action is ``loc + scale * tanh(mean(s))``. The critics' target
([`SAC.targets`][jaxsample.algos.sac.SAC.targets])::

    y = r + gamma * (1 - terminated) * (min_k Qtarget_k(s', a') - alpha * log pi(a'|s'))

with ``a' ~ pi(.|s')`` and ``s'`` the step's TRUE next observation,
``samples.env.final_observation``: at a time-limit truncation (every episode
end of Pendulum) the state the env reached, bootstrapped from; at a
termination nothing is. The temperature ``alpha = exp(log_alpha)`` is learned
toward the target entropy ``-|A|`` (``target_entropy``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxsample.agents import ContinuousParams, SquashedGaussianActor
from jaxsample.algos import common, off_policy
from jaxsample.algos.off_policy import TrainState
from jaxsample.algos.off_policy_configs import SACConfig
from jaxsample.algos.trainer import Reports, run, train
from jaxsample.evaluation import Evaluator
from jaxsample.replay import Replayer
from jaxsample.sampler import SamplerProtocol
from jaxsample.traj_info import summarize
from jaxsample.types import PyTree, Samples

__all__ = ["SAC", "HParams", "Learner", "SACConfig", "TrainState", "make_train"]


HParams = common.hparams_type(SACConfig, __name__)
"""SAC's settings that are data (``SACConfig.HPARAMS``: lr, the target's
gamma, the Polyak step tau): float32 ``[]`` for one run, ``[N]`` to vmap ``N``."""


@struct.dataclass
class Learner:
    """SAC's part of the [`TrainState`][jaxsample.algos.off_policy.TrainState]
    (``state.learner``): the target critics (the tree of
    ``params.critic``), the optimizer states of the actor, the critics and
    the temperature, and ``log_alpha`` (float32 ``[]``)."""

    target_critic: PyTree
    actor_opt: PyTree
    critic_opt: PyTree
    log_alpha: jax.Array
    alpha_opt: PyTree


@dataclasses.dataclass(frozen=True, eq=False)
class SAC(common.RunLength):
    """SAC as pure functions; build it with [`make_train`][jaxsample.algos.sac.make_train].

    All methods are jittable and vmappable (over keys and `HParams`).
    ``metrics`` of an iteration, float32 scalars unless noted: those of
    [`common.episode_metrics`][jaxsample.algos.common.episode_metrics]
    (``env_steps``, ``episode_return_mean``, ...), ``updates`` (int32,
    gradient steps so far) and the means over the iteration's gradient steps
    (NaN before learning starts) of ``loss`` (the critics'), ``q_mean`` (the
    replayed actions' mean Q), ``actor_loss``, ``alpha`` and ``entropy``
    (``-log pi`` of the actor's fresh actions), and ``lr``.

    Attributes:
      config: the run's config.
      env: the environment it trains in.
      env_params: its parameters.
      agent: the [`SquashedGaussianActor`][jaxsample.agents.SquashedGaussianActor]
        (its critics' parameters are in ``state.params`` too).
      sampler: the sampler of its batches (`make_train`).
      replayer: the `uniform` replayer, or the `prioritized` one.
      evaluator: the greedy policy's [`Evaluator`][jaxsample.evaluation.Evaluator]
        (``eval_episodes`` envs, one episode each).
      optimizer: `common.make_optimizer` (each network its own state),
        stepped by ``-lr`` times its output.
    """

    config: SACConfig
    env: Any
    env_params: Any
    agent: SquashedGaussianActor
    sampler: SamplerProtocol
    replayer: Replayer
    evaluator: Evaluator
    optimizer: optax.GradientTransformation
    reports = Reports()

    @property
    def target_entropy(self) -> float:
        """The config's ``target_entropy``, ``-|A|`` where it is None."""
        c = self.config
        return -float(self.agent.action_size) if c.target_entropy is None else c.target_entropy

    def hparams(self, **overrides: Any) -> HParams:
        """`HParams` from the config, with ``overrides`` (e.g. ``lr=[...]``)."""
        return common.hparams_of(HParams, self.config, **overrides)

    def init(self, key: jax.Array, hparams: HParams | None = None) -> TrainState:
        """A fresh run from ``key``: networks, target critics (copies),
        optimizers, ``log(alpha_init)``, envs and an empty buffer."""

        def learner(params: ContinuousParams, hparams: HParams) -> Learner:
            log_alpha = jnp.full((), math.log(self.config.alpha_init), jnp.float32)
            opt = self.optimizer.init
            return Learner(params.critic, opt(params.actor), opt(params.critic), log_alpha,
                           opt(log_alpha))  # fmt: skip

        return off_policy.init(self, HParams, key, hparams, learner)

    def iteration(self, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        """One SAC iteration (see the module docstring; metrics: the class's)."""
        state, batch = off_policy.collect(self, state)
        return off_policy.learn(self, state, batch, self.update)

    def targets(
        self, params: ContinuousParams, learner: Learner, samples: Samples,
        gamma: jax.Array, noise: jax.Array,
    ) -> jax.Array:  # fmt: skip
        """float32 ``[L, N]``: the soft targets of ``samples`` (leaves ``[L, N, ...]``).

        ``y = r + gamma * (1 - end) * (min_k Qtarget_k(s', a') - alpha * log
        pi(a'|s'))`` with ``s'`` the true next observation
        (``samples.env.final_observation``), ``a' = loc + scale * tanh(mean +
        std * noise)`` (``noise`` ``[L, N, |A|]``, standard normal: the
        reparameterisation, given so that a test can fix it) and ``end`` the
        step's termination (its ``done`` with ``truncation_as_termination``).
        """
        t = off_policy.transitions(self, params, samples)
        policy = jax.vmap(self.agent.policy, in_axes=(None, 0, 0))
        next_action, next_log_prob = policy(params.actor, t.next_x, noise.reshape(len(t.x), -1))
        q = jax.vmap(self.agent.q_values, in_axes=(None, 0, 0))
        next_q = jnp.min(q(learner.target_critic, t.next_x, next_action), axis=-1)
        next_v = next_q - jnp.exp(learner.log_alpha) * next_log_prob
        y = t.reward + gamma * jnp.where(t.ends, 0.0, next_v)
        return y.reshape(jnp.shape(samples.env.reward))

    def update(
        self, params: ContinuousParams, learner: Learner, samples: Samples, weight: jax.Array,
        hparams: HParams, key: jax.Array, updates: jax.Array,
    ) -> tuple[ContinuousParams, Learner, jax.Array, dict[str, jax.Array]]:  # fmt: skip
        """One gradient step on ``samples`` (``[1, N]``): ``(params, learner,
        td [N], metrics)`` (`off_policy.Update`).

        The critics' loss is the mean over valid steps of ``weight * 0.5 *
        sum_k (Q_k(s, a) - y)**2`` (``td``: the mean ``|Q_k - y|``); then the
        actor's, ``mean(alpha * log pi(a~|s) - min_k Q_k(s, a~))`` with fresh
        actions ``a~`` and the updated critics; then the temperature's,
        ``mean(-alpha * (log pi(a~|s) + target_entropy))``; last the target
        critics' Polyak step.
        """
        del updates
        k_next, k_actor = jax.random.split(key)
        n, size = samples.env.reward.size, self.agent.action_size
        noise = jax.random.normal(k_next, (*samples.env.reward.shape, size))
        y = jax.lax.stop_gradient(self.targets(params, learner, samples, hparams.gamma, noise))
        t = off_policy.transitions(self, params, samples)
        y, w = y.reshape(-1), weight * t.valid
        count = jnp.maximum(jnp.sum(t.valid), 1.0)
        q = jax.vmap(self.agent.q_values, in_axes=(None, 0, 0))
        policy = jax.vmap(self.agent.policy, in_axes=(None, 0, 0))

        def critic_loss(critic: PyTree) -> tuple[jax.Array, tuple]:
            td = q(critic, t.x, t.action) - y[:, None]  # [N, K]
            loss = jnp.sum(w * 0.5 * jnp.sum(jnp.square(td), axis=-1)) / count
            q_mean = jnp.sum(t.valid * jnp.mean(td + y[:, None], axis=-1)) / count
            return loss, (q_mean, jnp.mean(jnp.abs(td), axis=-1))

        (loss, (q_mean, td)), grads = jax.value_and_grad(critic_loss, has_aux=True)(params.critic)
        critic, critic_opt = self._step(grads, learner.critic_opt, params.critic, hparams.lr)
        alpha = jnp.exp(learner.log_alpha)
        fresh = jax.random.normal(k_actor, (n, size))

        def actor_loss(actor: PyTree) -> tuple[jax.Array, jax.Array]:
            action, log_prob = policy(actor, t.x, fresh)
            q_min = jnp.min(q(critic, t.x, action), axis=-1)
            return jnp.sum(t.valid * (alpha * log_prob - q_min)) / count, log_prob

        (a_loss, log_prob), grads = jax.value_and_grad(actor_loss, has_aux=True)(params.actor)
        actor, actor_opt = self._step(grads, learner.actor_opt, params.actor, hparams.lr)
        log_alpha, alpha_opt = learner.log_alpha, learner.alpha_opt
        if self.config.learn_alpha:
            gap = jax.lax.stop_gradient(log_prob + self.target_entropy)

            def alpha_loss(log_alpha: jax.Array) -> jax.Array:
                return jnp.sum(t.valid * -jnp.exp(log_alpha) * gap) / count

            grads = jax.grad(alpha_loss)(log_alpha)
            log_alpha, alpha_opt = self._step(grads, alpha_opt, log_alpha, hparams.lr)
        target_critic = off_policy.polyak(critic, learner.target_critic, hparams.tau)
        metrics = {
            "loss": loss, "q_mean": q_mean, "actor_loss": a_loss, "alpha": jnp.exp(log_alpha),
            "entropy": -jnp.sum(t.valid * log_prob) / count, "lr": hparams.lr,
        }  # fmt: skip
        learner = Learner(target_critic, actor_opt, critic_opt, log_alpha, alpha_opt)
        return params.replace(actor=actor, critic=critic), learner, td, metrics

    def _step(self, grads: PyTree, opt_state: PyTree, tree: PyTree, lr: jax.Array) -> tuple:
        """One optimizer step of ``tree``: ``(tree, opt_state)``."""
        updates, opt_state = self.optimizer.update(grads, opt_state, tree)
        return jax.tree.map(lambda p, u: p - lr * u, tree, updates), opt_state

    def evaluate(self, state: TrainState, key: jax.Array) -> dict[str, jax.Array]:
        """``summarize`` of ``eval_episodes`` greedy episodes (``loc + scale *
        tanh(mean)``), one per env from fresh resets; jittable, vmappable."""
        return summarize(self.evaluator.run(key, state.params))

    def run(self, state: TrainState, num_iterations: int) -> tuple[TrainState, dict]:
        """`jaxsample.algos.trainer.run`: ``num_iterations`` (static) iterations."""
        return run(self, state, num_iterations)

    def train(self, key: jax.Array, hparams: HParams | None = None) -> tuple[TrainState, dict]:
        """`jaxsample.algos.trainer.train`: ``init`` and the whole run."""
        return train(self, key, hparams)


def make_train(config: SACConfig, *, env: Any = None, env_params: Any = None) -> SAC:
    """Build SAC for ``config``: a [`SAC`][jaxsample.algos.sac.SAC] of pure functions.

    Args:
      config: a [`SACConfig`][jaxsample.algos.off_policy_configs.SACConfig].
      env: a gymnax environment with a bounded ``Box`` action space to use
        instead of ``config.env_name``.
      env_params: its parameters (default: its ``default_params``).

    A ``Discrete`` action space is a one-line ``TypeError`` that names the
    algorithms for it (PPO, DQN, PQN). The sampler is
    ``make_sampler(env, env_params, agent, BatchSpec(num_steps, num_envs),
    reset_mode="auto")`` with the sparse final-observation store (exact
    wherever a target bootstraps); the replayer ``replay.uniform(examples,
    num_envs, buffer_capacity)`` or, with ``prioritized_replay``,
    ``replay.prioritized``.
    """
    if not isinstance(config, SACConfig):
        raise TypeError(f"config must be a SACConfig, got {type(config).__name__}")

    def agent(space: Any, activation: Any) -> SquashedGaussianActor:
        return SquashedGaussianActor(
            space, config.hidden_sizes, activation, config.num_critics,
            config.normalize_observations, log_std_min=config.log_std_min,
            log_std_max=config.log_std_max,
        )  # fmt: skip

    parts = off_policy.make_parts(config, env, env_params, "SAC", agent)
    return SAC(config, *parts, optimizer=common.make_optimizer(config))

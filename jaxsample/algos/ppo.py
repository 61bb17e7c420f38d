"""PPO compiled whole, built only on jaxsample's public API.

``make_train(config)`` returns a [`Trainer`][jaxsample.algos.ppo.Trainer], a frozen object of pure
functions. ``trainer.train(key, hparams)`` is the whole run (collection with
[`jaxsample.make_sampler`][jaxsample.sampler.make_sampler], GAE, epochs and minibatches, all inside
one
``lax.scan``): jit it, and ``jax.vmap`` it over seeds and over hyperparameters
([`HParams`][jaxsample.algos.ppo.HParams]: learning rate, clip, entropy and value coefficients) at
once::

    import jax, jax.numpy as jnp
    from jaxsample.algos import ppo

    trainer = ppo.make_train(ppo.PPOConfig())            # CleanRL's CartPole setup
    keys = jax.random.split(jax.random.key(0), 4)          # 2 seeds x 2 lrs
    hp = trainer.hparams(lr=jnp.array([2.5e-4, 2.5e-4, 1e-3, 1e-3]))
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys, hp)
    metrics["average_return"][:, -1]                       # [4] final returns

Value targets ([`gae`][jaxsample.algos.ppo.gae]) bootstrap through truncation, not through
termination: at a step cut by the time limit the TD target is
``r + gamma * V(final_observation)``, the value of the true next observation the
sampler kept ([`truncation_values`][jaxsample.algos.returns.truncation_values]: the critic
on the sparse store's few slots), at a terminated step it is just ``r``, and the
lambda-recursion stops at every episode end. Treating truncations as terminations
(what most JAX PPO code does: after an auto-reset the next observation it has is
the reset one) teaches the critic that the 500th step of CartPole is worth ``r``.

A multi-agent env (an action space [`PerAgent`][jaxsample.envs.per_agent.PerAgent],
e.g. ``jaxmarl/MPE_simple_spread_v3``) is trained with parameter sharing
(IPPO): the agent below, built for one agent's space, acts for every agent as
a [`SharedAgent`][jaxsample.agents.SharedAgent]; values, rewards and advantages are
``[T, B, N]`` (GAE per agent, the env's ends broadcast over the agents) and
the agents are one more axis of every minibatch sample.

Two variants (``config.recurrent``):

* feedforward: [`CategoricalActorCritic`][jaxsample.agents.CategoricalActorCritic] (or
  [`GaussianActorCritic`][jaxsample.agents.GaussianActorCritic] for a ``Box`` action space);
  minibatches are random subsets of the ``T * B`` steps.
* recurrent: [`RecurrentActorCritic`][jaxsample.agents.RecurrentActorCritic]; minibatches are
  random subsets of the ``B`` envs, each a whole ``T``-step sequence re-unrolled
  by ``evaluate_sequence`` from ``samples.agent.initial_state`` with the state
  reset exactly where the sampler reset it (``reset[t] = done[t - 1]``).

Everything here is pure (callers jit) except the reference benchmark,
[`reference_run`][jaxsample.algos.ppo.reference_run], a runner that jits.
From the command line, ``jaxsample train --seeds 8 --preset none`` trains the
same settings.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct
from gymnax.environments import spaces
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxsample.agents import (
    CategoricalActorCritic,
    GaussianActorCritic,
    HeldNoise,
    RecurrentActorCritic,
    SharedAgent,
)
from jaxsample.algos import common
from jaxsample.algos.common import TrainerBase, episode_metrics, make_env, make_trainer_sampler
from jaxsample.algos.configs import MASKED_CARTPOLE_RECURRENT, PPOConfig
from jaxsample.algos.games import VsRandom, is_game, vs_random
from jaxsample.algos.returns import final_values, gae, truncation_values, turn_signs
from jaxsample.algos.trainer import chunk_size
from jaxsample.envs import mask_velocity
from jaxsample.envs.per_agent import PerAgent
from jaxsample.metrics import StepMetrics
from jaxsample.sampler import SamplerState
from jaxsample.types import AgentInputs, Batch, PyTree, Samples

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


@struct.dataclass
class HParams:
    """PPO's loss and optimizer settings that are data, not static config (one
    float32 scalar each per run; vmap over them): `Trainer.hparams`."""

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
      sampler_state: [`jaxsample.SamplerState`][jaxsample.sampler.SamplerState] (envs, recurrent
        states,
        per-env key chains).
      key: the key of the minibatch permutations (split every iteration).
      iteration: int32 ``[]``, iterations done (drives the lr annealing).
      metrics: [`jaxsample.StepMetrics`][jaxsample.metrics.StepMetrics] (exact env-step and episode
        counts,
        the returns of the last ``metrics_window`` episodes).
      hparams: this run's [`HParams`][jaxsample.algos.ppo.HParams].
    """

    params: PyTree
    opt_state: PyTree
    sampler_state: SamplerState
    key: jax.Array
    iteration: jax.Array
    metrics: StepMetrics
    hparams: HParams


class _Rollout(struct.PyTreeNode):
    """What the loss needs from a batch; leaves ``[T, B, ...]`` except
    ``initial_state`` (``[B, ...]``)."""

    inputs: AgentInputs
    action: PyTree
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array
    reset: jax.Array
    initial_state: PyTree


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
    ``old_*``: at collection; ``advantage``, ``target``: from [`gae`][jaxsample.algos.ppo.gae].
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


def permutation(key: jax.Array, n: int) -> jax.Array:
    """A uniformly random permutation of ``range(n)`` (int32 ``[n]``): the
    indices sorted by random uint32 words, in as many rounds as
    ``jax.random.permutation`` sorts (one below ``n`` of about 1600; round
    ``r > 0`` draws with ``fold_in(key, r)``), but drawn from ``key`` itself:
    one hash less than ``jax.random.permutation``'s split of the key first."""
    rounds = max(1, math.ceil(3 * math.log(max(n, 1)) / math.log(2**32 - 1)))
    perm = jnp.arange(n, dtype=jnp.int32)
    for r in range(rounds):
        bits = jax.random.bits(jax.random.fold_in(key, r) if r else key, (n,), jnp.uint32)
        perm = jax.lax.sort_key_val(bits, perm)[1]
    return perm


# ----------------------------------------------------------------------------
# Trainer
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Trainer(TrainerBase):
    """PPO as pure functions; build it with [`make_train`][jaxsample.algos.ppo.make_train].

    * ``init(key, hparams=None) -> TrainState``
    * ``iteration(state) -> (state, metrics)``: one collect, then ``learn``.
    * ``learn(state, batch) -> (state, metrics)``: GAE and ``update_epochs`` x
      ``num_minibatches`` gradient steps on a collected ``batch``.
    * ``run(state, num_iterations) -> (state, metrics)``: ``lax.scan`` of
      ``iteration``; ``num_iterations`` is static (``static_argnums=1``).
    * ``train(key, hparams=None) -> (state, metrics)``: ``init`` then ``run``
      for ``config.num_iterations``.

    All are jittable and vmappable (over keys and [`HParams`][jaxsample.algos.ppo.HParams]).
    ``metrics``
    is a dict of float32 scalars per iteration (stacked ``[num_iterations]`` by
    ``run``): ``env_steps`` (after the iteration), ``episode_return_mean``,
    ``episode_length_mean``, ``n_episodes`` (episodes completed in this batch;
    the means are NaN when none did), ``average_return``,
    ``average_episode_length`` (over the last ``metrics_window`` episodes, NaN
    before the first), ``lr``, ``loss``, ``pg_loss``, ``value_loss``,
    ``entropy``, ``approx_kl``, ``clip_frac`` (means over the iteration's
    minibatches), ``explained_variance``. In a zero-sum two-player game,
    ``iteration`` adds the greedy policy's rates against a uniformly random
    legal opponent (``games``: [`jaxsample.algos.games.VsRandom`][jaxsample.algos.games.VsRandom]),
    ``win_or_draw_vs_random``, ``win_vs_random``, ``draw_vs_random``,
    ``loss_vs_random``: at its evaluations, NaN at the other iterations.
    """

    optimizer: optax.GradientTransformation
    mesh: Mesh | None = None
    mesh_axis: str = "envs"
    negamax: bool = False
    games: VsRandom | None = None
    hparams_type = HParams

    # -- pure functions ------------------------------------------------------

    def init(self, key: jax.Array, hparams: HParams | None = None) -> TrainState:
        """A fresh run from ``key`` (a ``jax.random.key``); ``hparams`` default to
        the config's (`hparams`)."""
        hparams, params, k_sampler, k_train = self._start(key, hparams)
        return TrainState(
            params=params,
            opt_state=self.optimizer.init(params),
            sampler_state=self.sampler.init(k_sampler, params),
            key=k_train,
            iteration=jnp.zeros((), jnp.int32),
            metrics=StepMetrics.init(self.config.metrics_window),
            hparams=hparams,
        )

    def iteration(self, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        """One PPO iteration: collect ``[T, B]`` with ``state.params``, then
        [`learn`][jaxsample.algos.ppo.Trainer.learn], then in a game the evaluation
        against a random opponent when it is due (``games``)."""
        sampler_state, batch = self.sampler.collect(state.sampler_state, state.params)
        state, metrics = self.learn(state.replace(sampler_state=sampler_state), batch)
        if self.games is not None:
            metrics.update(self.games.metrics(state.params, state.key, state.iteration))
        return state, metrics

    def learn(self, state: TrainState, batch: Batch) -> tuple[TrainState, dict[str, jax.Array]]:
        """GAE and the ``update_epochs`` x ``num_minibatches`` gradient steps on ``batch``.

        Everything of an iteration but the collection: ``state.sampler_state`` is
        left as it is, so an actor/learner driver can collect elsewhere and feed
        the batches here. The batch's ``agent_info`` (log-probabilities, values)
        is the behaviour policy's, so a batch collected with older parameters is
        learned from with PPO's clipped importance ratio against those.
        """
        c = self.config
        rollout = self._rollout(state.params, batch.samples)
        lr = self._lr(state.iteration, state.hparams.lr)
        # One hash for the next key and every epoch's (not a split of a split).
        keys = jax.random.split(state.key, c.update_epochs + 1)
        key, k_epochs = keys[0], keys[1:]

        def epoch(carry, k_epoch):
            minibatches = self._minibatches(rollout, k_epoch)
            return jax.lax.scan(self._update, carry, minibatches)

        (params, opt_state, _, _), stats = jax.lax.scan(
            epoch,
            (state.params, state.opt_state, state.hparams, lr),
            k_epochs,
        )
        metrics = state.metrics.update(batch)
        new_state = state.replace(
            params=params,
            opt_state=opt_state,
            key=key,
            iteration=state.iteration + 1,
            metrics=metrics,
        )
        out = {k: jnp.mean(v) for k, v in stats.items()}
        residual = jnp.var(rollout.target - rollout.value)
        out.update(
            episode_metrics(batch, metrics),
            lr=lr,
            explained_variance=1.0 - residual / jnp.maximum(jnp.var(rollout.target), 1e-8),
        )
        return new_state, out

    # -- internals -------------------------------------------------------------

    def _rollout(self, params: PyTree, samples: Samples) -> _Rollout:
        c = self.config
        env, ag = samples.env, samples.agent
        # the values learn the scaled return; the metrics keep the env's rewards
        reward = env.reward if c.reward_scale == 1.0 else env.reward * c.reward_scale
        advantage, target = gae(
            reward,
            ag.agent_info.value,
            truncation_values(self.agent, params, samples),
            samples.bootstrap_value,
            env.terminated,
            env.truncated,
            gamma=c.gamma,
            lam=c.gae_lambda,
            valid=samples.valid,
            next_sign=turn_signs(env.env_info) if self.negamax else None,
        )
        # The sampler reset the state before step t iff done[t - 1]; the state
        # before step 0 (initial_state) already accounts for the previous batch.
        reset = jnp.concatenate([jnp.zeros_like(env.done[:1]), env.done[:-1]], axis=0)
        return _Rollout(
            inputs=samples.agent_inputs,
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
        T, B = rollout.advantage.shape[:2]  # [T, B, N] with a team of N agents
        if c.recurrent:
            perm = permutation(key, B)
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
        perm = permutation(key, T * B)
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


def _make_agent(config: PPOConfig, space: Any) -> Any:
    """The actor-critic of ``config`` for an env's action space: recurrent, or
    categorical (``Discrete``) or Gaussian (``Box``); one agent's, shared by
    every agent of a multi-agent env (a ``PerAgent`` space)."""
    team = space if isinstance(space, PerAgent) else None  # a multi-agent env
    space = space.space if team else space
    act = {"tanh": jnp.tanh, "relu": jax.nn.relu}[config.activation]
    if config.recurrent:
        agent = RecurrentActorCritic(
            space,
            hidden_size=config.rnn_hidden_size,
            cell=config.rnn_cell,
            encoder_sizes=config.rnn_encoder_sizes,
        )
    elif isinstance(space, spaces.Discrete):
        agent = CategoricalActorCritic(space, hidden_sizes=config.hidden_sizes, activation=act)
    elif isinstance(space, spaces.Box):
        agent = GaussianActorCritic(
            space,
            hidden_sizes=config.hidden_sizes,
            activation=act,
            log_std_init=config.log_std_init,
        )
        if config.noise_repeat > 1:
            agent = HeldNoise(agent, config.noise_repeat)
    else:
        raise TypeError(f"PPO needs a Discrete or Box action space, got {type(space).__name__}")
    return SharedAgent(agent, team.num_agents) if team else agent


def _check_mesh(config: PPOConfig, mesh: Mesh, mesh_axis: str) -> None:
    """A ``ValueError`` unless a minibatch splits evenly over the mesh axis."""
    n = int(mesh.shape[mesh_axis])
    per_minibatch = (
        config.num_envs // config.num_minibatches if config.recurrent else config.minibatch_size
    )
    if per_minibatch % n:
        raise ValueError(
            f"a minibatch of {per_minibatch} "
            f"{'env sequences' if config.recurrent else 'steps'} cannot be split over "
            f"the {n} devices of mesh axis {mesh_axis!r}: change num_minibatches"
        )


def make_train(
    config: PPOConfig,
    *,
    env: Any = None,
    env_params: Any = None,
    mesh: Mesh | None = None,
    mesh_axis: str = "envs",
) -> Trainer:
    """Build PPO for ``config``: a [`Trainer`][jaxsample.algos.ppo.Trainer] of pure functions.

    Args:
      config: a [`PPOConfig`][jaxsample.algos.ppo.PPOConfig].
      env, env_params: a gymnax environment to use instead of
        ``gymnax.make(config.env_name)`` (``env_params`` defaults to its
        ``default_params``). ``config.mask_velocity`` wraps either.
      mesh, mesh_axis: run data parallel over this mesh axis (Anakin style, one
        program): the sampler splits the ``num_envs`` envs over its devices
        ([`jaxsample.distributed`][jaxsample.distributed]), every minibatch is split over them too,
        and the gradient of the minibatch loss is all-reduced; the parameters
        and optimizer state are replicated. Same seed, same global batch: the
        same run as on one device, up to float rounding. ``num_envs``, and
        each minibatch, must be divisible by the axis size.

    The sampler is ``make_sampler(env, env_params, agent, BatchSpec(num_steps,
    num_envs), reset_mode="auto", bootstrap_value=True)`` with the default sparse
    final-observation store, and ``store_agent_state=True`` for an agent with
    state (the recurrent one, a [`HeldNoise`][jaxsample.agents.HeldNoise]
    policy; see [`final_values`][jaxsample.algos.ppo.final_values]). The
    optimizer is
    ``chain(clip_by_global_norm(max_grad_norm), scale_by_adam(eps=adam_eps))``;
    the step is scaled by ``-hparams.lr`` times the annealing factor.
    """
    if not isinstance(config, PPOConfig):
        raise TypeError(f"config must be a PPOConfig, got {type(config).__name__}")
    env, env_params = make_env(config, env, env_params)
    if config.mask_velocity:
        env = mask_velocity(env)
    agent = _make_agent(config, env.action_space(env_params))
    sampler = make_trainer_sampler(
        env,
        env_params,
        agent,
        config,
        bootstrap_value=True,
        store_agent_state=config.recurrent or config.noise_repeat > 1,
        mesh=mesh,
        mesh_axis=mesh_axis,
    )
    if mesh is not None:
        _check_mesh(config, mesh, mesh_axis)
    optimizer = common.make_optimizer(config)
    negamax = config.negamax == "on"
    if config.negamax == "auto":  # what the env says: a Pgx two-player game is zero-sum
        negamax = is_game(env)
    n = config.num_iterations
    every = config.eval_every or chunk_size(n, 20)  # the reports of a default run
    games = vs_random(env, env_params, agent, games=config.eval_games, every=every, last=n)
    return Trainer(
        config, env, env_params, agent, sampler, optimizer, mesh, mesh_axis, negamax, games
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
    compiler: Callable[[Any, tuple], Any] | None = None,
) -> dict[str, Any]:
    """Train ``len(seeds)`` runs (x ``len(lrs)``) under one ``jax.vmap``; by
    default the reference benchmark, CleanRL's CartPole-v1 PPO with 8 seeds.

    Returns the report of `jaxsample.algos.common.reference_run` (which
    ``compiler`` is passed to).
    """
    config = PPOConfig() if config is None else config
    _, report = common.reference_run(
        make_train(config), seeds, lrs=lrs, tail_iterations=tail_iterations, compiler=compiler
    )
    return report

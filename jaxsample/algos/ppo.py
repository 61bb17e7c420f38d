"""PPO, top-down in one module: CleanRL's and PureJaxRL's clipped PPO on the sampler.

``make_train(config)`` returns a [`PPO`][jaxsample.algos.ppo.PPO] trainer of
pure functions (the [`Trainer`][jaxsample.algos.trainer.Trainer] protocol);
jit it, and vmap it over seeds and [`HParams`][jaxsample.algos.ppo.HParams]::

    trainer = ppo.make_train(ppo.PPOConfig())              # CleanRL's CartPole setup
    keys = jax.random.split(jax.random.key(0), 4)          # 2 seeds x 2 lrs
    hp = trainer.hparams(lr=jnp.array([2.5e-4, 2.5e-4, 1e-3, 1e-3]))
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys, hp)

One iteration: collect ``[T, B]`` with the sampler; advantages and value
targets by [`gae`][jaxsample.algos.returns.gae], which bootstraps a step cut
by the time limit from the value of its true final observation
([`truncation_values`][jaxsample.algos.returns.truncation_values]) and a
terminated step from nothing (most JAX PPO code, left with the reset
observation after an auto-reset, teaches the critic that CartPole's 500th step
is worth ``r``); then ``update_epochs`` passes of ``num_minibatches`` Adam
steps on the clipped loss (`ppo_loss`).

The variants are named pieces chosen once, in `make_train`: **recurrent**
(minibatches of whole env sequences, `shuffled_sequences`, re-unrolled with the
state reset where the sampler reset it, `evaluate_sequences`); **a team of
agents** (IPPO: one policy shared by all, [`SharedAgent`][jaxsample.agents.SharedAgent];
arrays gain an agent axis ``[T, B, N]``); **self-play** in a zero-sum game
(negamax values, [`turn_signs`][jaxsample.algos.returns.turn_signs]); **an
evaluation hook** whose metrics the iteration reports (a game's match against a
random opponent, [`games.evaluation`][jaxsample.algos.games.evaluation]); **a
mesh** (data parallel in the same program).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
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
from jaxsample.algos.configs import MASKED_CARTPOLE_RECURRENT, PPOConfig
from jaxsample.algos.returns import gae, truncation_values, turn_signs
from jaxsample.algos.trainer import Reports, run, train
from jaxsample.envs import mask_velocity
from jaxsample.envs.per_agent import PerAgent
from jaxsample.metrics import StepMetrics
from jaxsample.sampler import SamplerProtocol, SamplerState
from jaxsample.types import AgentInputs, Batch, PyTree, Samples

__all__ = [
    "MASKED_CARTPOLE_RECURRENT", "PPO", "HParams", "PPOConfig", "TrainState", "make_train",
    "ppo_loss",
]  # fmt: skip


HParams = common.hparams_type(PPOConfig, __name__)
"""PPO's settings that are data, not static config (``PPOConfig.HPARAMS``: lr,
clip_eps, ent_coef, vf_coef): float32 ``[]`` for one run, ``[N]`` to vmap ``N``."""


@struct.dataclass
class TrainState:
    """Everything a PPO run carries from one iteration to the next: ``key``
    draws the minibatch permutations; ``iteration`` (int32) drives the lr
    annealing; ``metrics`` counts steps and episodes exactly."""

    params: PyTree
    opt_state: PyTree
    sampler_state: SamplerState
    key: jax.Array
    iteration: jax.Array
    metrics: StepMetrics
    hparams: HParams


class Rollout(struct.PyTreeNode):
    """What the loss needs from a batch: leaves ``[T, B, ...]`` (``[T, B, N]``
    for a team), except ``initial_state`` ``[B, ...]``; ``reset[t] = done[t - 1]``."""

    inputs: AgentInputs
    action: PyTree
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array
    reset: jax.Array
    initial_state: PyTree


def make_train(
    config: PPOConfig, *, env: Any = None, env_params: Any = None,
    evaluation: Callable[..., Any] | None = None, mesh: Mesh | None = None,
    mesh_axis: str = "envs",
) -> PPO:  # fmt: skip
    """Build PPO for ``config``.

    Args:
      config: a [`PPOConfig`][jaxsample.algos.configs.PPOConfig].
      env: an environment instead of the one ``config.env_name`` names.
      env_params: its parameters (default: its ``default_params``).
      evaluation: None, or a factory ``evaluation(env, env_params, agent,
        num_iterations)`` of a hook (or None) that the iteration calls as
        ``hook(params, key, iterations_done)`` for float32 metrics (NaN when
        not due) named by ``hook.names`` ([`games.evaluation`][jaxsample.algos.games.evaluation]).
      mesh: a ``jax.sharding.Mesh``: data parallel over its ``mesh_axis``,
        in one program (the envs and every minibatch split over its devices,
        the gradient all-reduced); ``num_envs`` and a minibatch must divide by
        the axis's size.
      mesh_axis: the axis of ``mesh`` to split over.

    The sampler resets in ``"auto"`` mode, returns ``bootstrap_value``, and
    stores an agent's state before each step where it has one (recurrent, or
    [`HeldNoise`][jaxsample.agents.HeldNoise]).
    """
    if not isinstance(config, PPOConfig):
        raise TypeError(f"config must be a PPOConfig, got {type(config).__name__}")
    env, env_params = common.make_env(config, env, env_params)
    if config.mask_velocity:
        env = mask_velocity(env)
    agent = make_agent(config, env.action_space(env_params))
    sampler = common.make_trainer_sampler(
        env, env_params, agent, config, bootstrap_value=True,
        store_agent_state=config.recurrent or config.noise_repeat > 1,
        mesh=mesh, mesh_axis=mesh_axis,
    )  # fmt: skip
    if mesh is not None:
        _check_mesh(config, mesh, mesh_axis)
    # self-play: "auto" is what the env says (Pgx's two-player games are zero-sum)
    negamax = config.negamax == "on" or (
        config.negamax == "auto" and bool(getattr(env, "zero_sum", False))
    )
    recurrent = config.recurrent
    hook = None if evaluation is None else evaluation(env, env_params, agent, config.num_iterations)
    return PPO(
        config, env, env_params, agent, sampler, common.make_optimizer(config),
        minibatches=shuffled_sequences if recurrent else shuffled_steps,
        evaluate_minibatch=evaluate_sequences if recurrent else evaluate_steps,
        next_sign=turn_signs if negamax else None,
        evaluation=hook, mesh=mesh, mesh_axis=mesh_axis,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True, eq=False)
class PPO(common.RunLength):
    """PPO as pure functions; build it with `make_train`. ``metrics`` of an
    iteration (float32 scalars): ``env_steps``,
    ``episode_return_mean``, ``episode_length_mean``, ``n_episodes`` (of this
    batch; NaN means when none), ``average_return``, ``average_episode_length``
    (last ``metrics_window`` episodes), ``lr``, ``loss``, ``pg_loss``,
    ``value_loss``, ``entropy``, ``approx_kl``, ``clip_frac`` (means over the
    minibatches), ``explained_variance``, and the evaluation's metrics.

    Its pieces: ``minibatches`` (`shuffled_steps` or `shuffled_sequences`),
    ``evaluate_minibatch`` (`evaluate_steps` or `evaluate_sequences`),
    ``next_sign`` (self-play's `turn_signs`, or None), ``evaluation`` (the
    hook, or None).
    """

    config: PPOConfig
    env: Any
    env_params: Any
    agent: Any
    sampler: SamplerProtocol
    optimizer: optax.GradientTransformation
    minibatches: Callable[..., Rollout]
    evaluate_minibatch: Callable[..., tuple[jax.Array, jax.Array, jax.Array]]
    next_sign: Callable[[dict], jax.Array] | None = None
    evaluation: Any = None
    mesh: Mesh | None = None
    mesh_axis: str = "envs"

    @property
    def reports(self) -> Reports:
        return Reports(evaluation=self.evaluation.names if self.evaluation else ())

    def hparams(self, **overrides: Any) -> HParams:
        """`HParams` from the config, with ``overrides`` (e.g. ``lr=[...]``)."""
        return common.hparams_of(HParams, self.config, **overrides)

    def init(self, key: jax.Array, hparams: HParams | None = None) -> TrainState:
        """A fresh run from ``key``; ``hparams`` default to the config's."""
        hparams, params, k_sampler, k_train = common.start(self, HParams, key, hparams)
        return TrainState(
            params, self.optimizer.init(params), self.sampler.init(k_sampler, params), k_train,
            iteration=jnp.zeros((), jnp.int32),
            metrics=StepMetrics.init(self.config.metrics_window), hparams=hparams,
        )  # fmt: skip

    def iteration(self, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        """Collect ``[T, B]`` with ``state.params``, `learn`, then the evaluation."""
        sampler_state, batch = self.sampler.collect(state.sampler_state, state.params)
        state, metrics = self.learn(state.replace(sampler_state=sampler_state), batch)
        if self.evaluation is not None:
            metrics.update(self.evaluation(state.params, state.key, state.iteration))
        return state, metrics

    def learn(self, state: TrainState, batch: Batch) -> tuple[TrainState, dict[str, jax.Array]]:
        """GAE, then ``update_epochs`` x ``num_minibatches`` gradient steps on
        ``batch``. ``state.sampler_state`` is left as is (an actor/learner driver
        collects elsewhere); the batch's log-probabilities and values are the
        behaviour policy's, so an older batch is learned from with PPO's clipped
        ratio against those."""
        c = self.config
        rollout = self.rollout(state.params, batch.samples)
        lr = common.annealed_lr(c, state.iteration, state.hparams.lr)
        # One hash for the next key and every epoch's (not a split of a split).
        keys = jax.random.split(state.key, c.update_epochs + 1)
        key, k_epochs = keys[0], keys[1:]

        def epoch(carry: tuple, k_epoch: jax.Array) -> tuple[tuple, dict[str, jax.Array]]:
            minibatches = self.minibatches(rollout, k_epoch, c.num_minibatches, self.shard)
            return jax.lax.scan(self.update, carry, minibatches)

        (params, opt_state, _, _), stats = jax.lax.scan(
            epoch, (state.params, state.opt_state, state.hparams, lr), k_epochs
        )
        metrics = state.metrics.update(batch)
        new_state = state.replace(
            params=params, opt_state=opt_state, key=key,
            iteration=state.iteration + 1, metrics=metrics,
        )  # fmt: skip
        out = {k: jnp.mean(v) for k, v in stats.items()}
        residual = jnp.var(rollout.target - rollout.value)
        out.update(
            common.episode_metrics(batch, metrics),
            lr=lr,
            explained_variance=1.0 - residual / jnp.maximum(jnp.var(rollout.target), 1e-8),
        )
        return new_state, out

    def rollout(self, params: PyTree, samples: Samples) -> Rollout:
        """The batch's advantages and value targets (`gae`), and what the loss reads."""
        c = self.config
        env, ag = samples.env, samples.agent
        # the values learn the scaled return; the metrics keep the env's rewards
        reward = env.reward if c.reward_scale == 1.0 else env.reward * c.reward_scale
        final_value = truncation_values(self.agent, params, samples)  # where truncated
        sign = None if self.next_sign is None else self.next_sign(env.env_info)
        advantage, target = gae(
            reward, ag.agent_info.value, final_value, samples.bootstrap_value, env.terminated,
            env.truncated, gamma=c.gamma, lam=c.gae_lambda, valid=samples.valid, next_sign=sign,
        )  # fmt: skip
        # The sampler reset the state before step t iff done[t - 1]; the state
        # before step 0 (initial_state) already accounts for the previous batch.
        reset = jnp.concatenate([jnp.zeros_like(env.done[:1]), env.done[:-1]], axis=0)
        return Rollout(
            inputs=samples.agent_inputs, action=ag.action, log_prob=ag.agent_info.log_prob,
            value=ag.agent_info.value, advantage=advantage, target=target, reset=reset,
            initial_state=ag.initial_state,
        )  # fmt: skip

    def update(self, carry: tuple, mb: Rollout) -> tuple[tuple, dict[str, jax.Array]]:
        """One Adam step on one minibatch."""
        params, opt_state, hparams, lr = carry
        c = self.config

        def loss_fn(p: PyTree) -> tuple[jax.Array, dict[str, jax.Array]]:
            log_prob, entropy, value = self.evaluate_minibatch(self.agent, p, mb)
            return ppo_loss(
                log_prob, entropy, value, mb.log_prob, mb.value, mb.advantage, mb.target,
                hparams, clip_vloss=c.clip_vloss, normalize_advantages=c.normalize_advantages,
            )  # fmt: skip

        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: -lr * u, updates)
        params = optax.apply_updates(params, updates)
        return (params, opt_state, hparams, lr), {"loss": loss, **stats}

    def shard(self, tree: PyTree, axis: int) -> PyTree:
        """With a mesh, ``tree``'s leaves split over its devices along ``axis``
        (the gradient of a minibatch mean is then each device's part,
        all-reduced); without one, ``tree`` as is."""
        if self.mesh is None:
            return tree
        sharding = NamedSharding(self.mesh, P(*(None,) * axis, self.mesh_axis))
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), tree)

    def run(self, state: TrainState, num_iterations: int) -> tuple[TrainState, dict]:
        """`jaxsample.algos.trainer.run`: ``num_iterations`` (static) iterations."""
        return run(self, state, num_iterations)

    def train(self, key: jax.Array, hparams: HParams | None = None) -> tuple[TrainState, dict]:
        """`jaxsample.algos.trainer.train`: ``init`` and the whole run."""
        return train(self, key, hparams)


def ppo_loss(
    log_prob: jax.Array, entropy: jax.Array, value: jax.Array, old_log_prob: jax.Array,
    old_value: jax.Array, advantage: jax.Array, target: jax.Array, hparams: HParams, *,
    clip_vloss: bool = True, normalize_advantages: bool = True,
) -> tuple[jax.Array, dict[str, jax.Array]]:  # fmt: skip
    """PPO's clipped surrogate loss over one minibatch (any common shape).

    ``log_prob``, ``entropy``, ``value``: under the current parameters;
    ``old_*``: at collection; ``advantage``, ``target``: from `gae`.
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
        "pg_loss": pg_loss, "value_loss": value_loss, "entropy": entropy,
        "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
        "clip_frac": (jnp.abs(ratio - 1.0) > hparams.clip_eps).mean(dtype=jnp.float32),
    }  # fmt: skip
    return loss, stats


# ----------------------------------------------------------------------------
# Minibatches and their evaluation: steps (feedforward) or sequences (recurrent)
# ----------------------------------------------------------------------------


def shuffled_steps(
    rollout: Rollout, key: jax.Array, M: int, shard: Callable[[PyTree, int], PyTree]
) -> Rollout:
    """``M`` minibatches of random steps: leaves ``[T, B, ...] -> [M, T * B / M, ...]``."""
    T, B = rollout.advantage.shape[:2]
    perm = permutation(key, T * B)
    steps = rollout.replace(initial_state=(), reset=jnp.zeros((T, B), bool))
    steps = jax.tree.map(
        lambda x: jnp.take(x.reshape(T * B, *x.shape[2:]), perm, axis=0).reshape(
            M, T * B // M, *x.shape[2:]
        ),
        steps,
    )
    return shard(steps, 1)


def evaluate_steps(agent: Any, params: PyTree, mb: Rollout) -> tuple[jax.Array, ...]:
    """``(log_prob, entropy, value)`` of a minibatch of steps under ``params``."""
    return jax.vmap(agent.evaluate, in_axes=(None, 0, 0))(params, mb.inputs, mb.action)


def shuffled_sequences(
    rollout: Rollout, key: jax.Array, M: int, shard: Callable[[PyTree, int], PyTree]
) -> Rollout:
    """``M`` minibatches of whole env sequences: leaves ``[T, B, ...] -> [M, T,
    B / M, ...]``, ``initial_state`` ``[B, ...] -> [M, B / M, ...]``."""
    T, B = rollout.advantage.shape[:2]
    perm = permutation(key, B)
    steps = jax.tree.map(
        lambda x: jnp.swapaxes(jnp.take(x, perm, axis=1).reshape(T, M, B // M, *x.shape[2:]), 0, 1),
        rollout.replace(initial_state=()),
    )
    initial = jax.tree.map(
        lambda x: jnp.take(x, perm, axis=0).reshape(M, B // M, *x.shape[1:]), rollout.initial_state
    )
    return shard(steps, 2).replace(initial_state=shard(initial, 1))


def evaluate_sequences(agent: Any, params: PyTree, mb: Rollout) -> tuple[jax.Array, ...]:
    """``(log_prob, entropy, value)`` of a minibatch of sequences, each re-unrolled
    from its initial state with the state reset where the sampler reset it."""
    return jax.vmap(agent.evaluate_sequence, in_axes=(None, 1, 0, 1, 1), out_axes=1)(
        params, mb.inputs, mb.initial_state, mb.reset, mb.action
    )


def permutation(key: jax.Array, n: int) -> jax.Array:
    """A uniformly random permutation of ``range(n)`` (int32 ``[n]``): indices
    sorted by random words in ``jax.random.permutation``'s number of rounds,
    drawn from ``key`` itself (one hash less than its split first)."""
    rounds = max(1, math.ceil(3 * math.log(max(n, 1)) / math.log(2**32 - 1)))
    perm = jnp.arange(n, dtype=jnp.int32)
    for r in range(rounds):
        bits = jax.random.bits(jax.random.fold_in(key, r) if r else key, (n,), jnp.uint32)
        perm = jax.lax.sort_key_val(bits, perm)[1]
    return perm


def make_agent(config: PPOConfig, space: Any) -> Any:
    """The actor-critic of ``config`` for an action space: recurrent, or
    categorical (``Discrete``) or Gaussian (``Box``); one agent's, shared by
    every agent of a multi-agent env (a ``PerAgent`` space)."""
    team = space if isinstance(space, PerAgent) else None
    space = space.space if team else space
    act = {"tanh": jnp.tanh, "relu": jax.nn.relu}[config.activation]
    if config.recurrent:
        agent = RecurrentActorCritic(
            space, hidden_size=config.rnn_hidden_size, cell=config.rnn_cell,
            encoder_sizes=config.rnn_encoder_sizes,
        )  # fmt: skip
    elif isinstance(space, spaces.Discrete):
        agent = CategoricalActorCritic(space, hidden_sizes=config.hidden_sizes, activation=act)
    elif isinstance(space, spaces.Box):
        agent = GaussianActorCritic(
            space, hidden_sizes=config.hidden_sizes, activation=act,
            log_std_init=config.log_std_init,
        )  # fmt: skip
    else:
        raise TypeError(f"PPO needs a Discrete or Box action space, got {type(space).__name__}")
    if config.noise_repeat > 1:
        agent = HeldNoise(agent, config.noise_repeat)
    return SharedAgent(agent, team.num_agents) if team else agent


def _check_mesh(config: PPOConfig, mesh: Mesh, mesh_axis: str) -> None:
    """A ``ValueError`` unless a minibatch splits evenly over the mesh axis."""
    n, c = int(mesh.shape[mesh_axis]), config
    per_minibatch = c.num_envs // c.num_minibatches if c.recurrent else c.minibatch_size
    if per_minibatch % n:
        raise ValueError(
            f"a minibatch of {per_minibatch} {'env sequences' if c.recurrent else 'steps'} "
            f"cannot be split over the {n} devices of mesh axis {mesh_axis!r}: "
            "change num_minibatches"
        )

"""What the off-policy trainers for continuous control ([`sac`][jaxsample.algos.sac],
[`td3`][jaxsample.algos.td3]) share, written once: their parts, their state,
the collection (uniformly random actions until ``learning_starts``) and the
replay learning of an iteration, around the one function each trainer owns,
its gradient step ``update``.

One iteration (`collect`, then `learn`): collect ``[num_steps, num_envs]``
(random actions while the run is in its prefill, the agent's after), add the
batch to the replay buffer (`jaxsample.replay.uniform`, or `prioritized`),
update the running observation statistics (``normalize_observations``), then,
once ``learning_starts`` env steps are in, ``gradient_steps`` gradient steps,
each on a fresh minibatch of ``batch_size`` transitions (`Transitions`:
features, action, reward, the end that stops the bootstrap, and the features of
the TRUE next observation, ``samples.env.final_observation``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsample.agents import ContinuousParams, flatten_observation
from jaxsample.agents.continuous import box_bounds
from jaxsample.algos import common
from jaxsample.core.batched import cond_any
from jaxsample.errors import ConfigError, ConfigTypeError
from jaxsample.evaluation import make_evaluator
from jaxsample.metrics import StepMetrics
from jaxsample.replay import ReplayState, prioritized, uniform
from jaxsample.sampler import SamplerState
from jaxsample.types import Batch, PyTree, Samples

__all__ = ["ACTIVATIONS", "Parts", "TrainState", "Transitions", "collect", "init", "learn",
           "make_parts", "polyak", "transitions"]  # fmt: skip

#: The configs' ``activation`` names.
ACTIVATIONS = {"relu": nn.relu, "tanh": nn.tanh, "swish": nn.swish}


@struct.dataclass
class TrainState:
    """Everything a SAC or TD3 run carries from one iteration to the next.

    Attributes:
      params: the agent's [`ContinuousParams`][jaxsample.agents.ContinuousParams]
        (actor, critics, observation statistics): what the sampler, the
        evaluation and a loaded run act with.
      learner: the trainer's own (target networks, optimizer states, SAC's
        temperature).
      sampler_state: the envs and their key chains.
      replay_state: the buffer, leaves ``[num_envs, buffer_capacity, ...]``.
      key: the key of the minibatches and the policies' noise.
      iteration: int32 ``[]``, iterations done.
      updates: int32 ``[]``, gradient steps done.
      metrics: `StepMetrics` of the training episodes.
      hparams: this run's ``HParams``.
    """

    params: ContinuousParams
    learner: PyTree
    sampler_state: SamplerState
    replay_state: ReplayState
    key: jax.Array
    iteration: jax.Array
    updates: jax.Array
    metrics: StepMetrics
    hparams: PyTree


class Parts(NamedTuple):
    """A trainer's parts: what it acts in and with, its buffer and evaluator."""

    env: Any
    env_params: Any
    agent: Any
    sampler: Any
    replayer: Any
    evaluator: Any


class Transitions(NamedTuple):
    """A minibatch of ``N`` transitions (`transitions`).

    Attributes:
      x: ``[N, D]`` the features of the observation (normalised when the
        agent normalises).
      action: ``[N, *act]``.
      reward: ``[N]`` float32.
      ends: ``[N]`` bool, no bootstrap: ``terminated`` (and ``truncated`` with
        ``truncation_as_termination``, the ablation).
      next_x: ``[N, D]`` the features of the true next observation
        (``samples.env.final_observation``: at a truncation the state the env
        reached, not the reset observation that follows).
      valid: ``[N]`` float32, 1 for stored steps.
    """

    x: jax.Array
    action: jax.Array
    reward: jax.Array
    ends: jax.Array
    next_x: jax.Array
    valid: jax.Array


def make_parts(config: Any, env: Any, env_params: Any, who: str, make_agent: Callable) -> Parts:
    """The env (``config.env_name`` unless given), the agent
    ``make_agent(space, activation)``, the sampler, the replayer and the
    evaluator of ``eval_episodes`` greedy episodes. A ``Discrete`` action
    space (or an unbounded Box) is a one-line error naming ``who`` and the
    algorithms that fit: a [`ConfigTypeError`][jaxsample.errors.ConfigTypeError] of the field
    ``env_name`` when the env is the config's."""
    named = env is None
    env, env_params = common.make_env(config, env, env_params)
    space = env.action_space(env_params)
    try:
        box_bounds(space, who)
    except (TypeError, ValueError) as e:
        if not named:
            raise
        error = ConfigTypeError if isinstance(e, TypeError) else ConfigError
        raise error("env_name", f"{config.env_name!r}: {e}") from None
    agent = make_agent(space, ACTIVATIONS[config.activation])
    sampler = common.make_trainer_sampler(env, env_params, agent, config)
    if config.prioritized_replay:
        replayer = prioritized(sampler.examples, config.num_envs, config.buffer_capacity,
                               alpha=config.priority_alpha, beta=config.priority_beta)  # fmt: skip
    else:
        replayer = uniform(sampler.examples, config.num_envs, config.buffer_capacity)
    try:
        limit = int(np.asarray(env_params.max_steps_in_episode))
    except (AttributeError, TypeError, ValueError, OverflowError):
        limit = 10_000
    evaluator = make_evaluator(env, env_params, agent, n_envs=config.eval_episodes,
                               max_steps=config.eval_episodes * (limit + 1),
                               discount=config.gamma)  # fmt: skip
    return Parts(env, env_params, agent, sampler, replayer, evaluator)


def init(trainer: Any, hparams_type: type, key: jax.Array, hparams: Any,
         learner: Callable[[ContinuousParams, Any], PyTree]) -> TrainState:  # fmt: skip
    """A fresh run: the agent's parameters, ``learner(params, hparams)``, the
    envs and an empty buffer (`common.start` checks ``hparams``)."""
    hparams, params, k_sampler, k_train = common.start(trainer, hparams_type, key, hparams)
    return TrainState(
        params=params, learner=learner(params, hparams),
        sampler_state=trainer.sampler.init(k_sampler, params),
        replay_state=trainer.replayer.init(), key=k_train,
        iteration=jnp.zeros((), jnp.int32), updates=jnp.zeros((), jnp.int32),
        metrics=StepMetrics.init(trainer.config.metrics_window), hparams=hparams,
    )  # fmt: skip


def collect(trainer: Any, state: TrainState) -> tuple[TrainState, Batch]:
    """One batch: uniformly random actions while the run's env steps before
    it are ``< learning_starts`` (the prefill: a conditional even when vmapped),
    the agent's after."""
    c, sampler = trainer.config, trainer.sampler
    prefill = state.iteration * c.steps_per_iteration < c.learning_starts
    sampler_state, batch = cond_any(
        prefill, sampler.collect_random, sampler.collect, state.sampler_state, state.params
    )
    return state.replace(sampler_state=sampler_state), batch


def transitions(trainer: Any, params: ContinuousParams, samples: Samples) -> Transitions:
    """The `Transitions` of ``samples`` (leaves ``[L, N, ...]``, flattened to
    ``L * N``), features from ``params.obs_norm``."""
    env = samples.env
    ends = jnp.asarray(env.terminated, bool)
    if trainer.config.truncation_as_termination:
        ends = ends | jnp.asarray(env.truncated, bool)

    features = jax.vmap(trainer.agent.features, in_axes=(None, 0))
    return Transitions(
        x=features(params.obs_norm, _flat(env.observation)),
        action=_flat(samples.agent.action).astype(jnp.float32),
        reward=_flat(env.reward).astype(jnp.float32), ends=_flat(ends),
        next_x=features(params.obs_norm, _flat(env.final_observation)),
        valid=_flat(samples.valid).astype(jnp.float32),
    )  # fmt: skip


def _flat(x: PyTree) -> PyTree:
    """Leaves ``[L, N, ...]`` -> ``[L * N, ...]``."""
    return jax.tree.map(lambda a: a.reshape((-1, *a.shape[2:])), x)


def polyak(online: PyTree, target: PyTree, tau: jax.Array) -> PyTree:
    """``tau * online + (1 - tau) * target``, leaf by leaf."""
    return jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)


#: An algorithm's gradient step: ``update(params, learner, samples, weight,
#: hparams, key, updates) -> (params, learner, td [N], metrics)``, ``samples``
#: ``[1, N]``, ``weight`` ``[N]`` (importance weights; ones for uniform replay),
#: ``updates`` the gradient steps before this one, ``td`` what prioritized
#: replay's new priorities come from, ``metrics`` float32 scalars (NaN where
#: not defined at this step: the means skip them).
Update = Callable[..., tuple[ContinuousParams, PyTree, jax.Array, dict[str, jax.Array]]]


def learn(
    trainer: Any, state: TrainState, batch: Batch, update: Update
) -> tuple[TrainState, dict[str, jax.Array]]:
    """Everything of an iteration but the collection (see the module): the
    new state and the iteration's metrics, ``common.episode_metrics``,
    ``updates`` (int32, gradient steps so far) and the means over its gradient
    steps of ``update``'s metrics (NaN before learning starts)."""
    c, replayer = trainer.config, trainer.replayer
    per = c.prioritized_replay
    replay_state = replayer.add(state.replay_state, batch)
    params = state.params
    if c.normalize_observations:  # the raw observations' running statistics
        obs = _flat(batch.samples.env.observation)
        x = jax.vmap(flatten_observation)(obs)
        norm = params.obs_norm.update(x, batch.samples.valid.reshape(-1))
        params = params.replace(obs_norm=norm)
    metrics = state.metrics.update(batch)
    env_steps = (state.iteration + 1) * c.steps_per_iteration
    keys = jax.random.split(state.key, c.gradient_steps + 1)

    def gradient_step(carry: tuple, k: jax.Array) -> tuple[tuple, dict]:
        params, learner, r_state, updates = carry  # r_state: the buffer with priorities
        k_sample, k_update = jax.random.split(k)
        samples, info = replayer.sample(r_state if per else replay_state, k_sample,
                                        c.batch_size, 1)  # fmt: skip
        weight = info.weight if per else jnp.ones((c.batch_size,), jnp.float32)
        params, learner, td, out = update(
            params, learner, samples, weight, state.hparams, k_update, updates
        )
        if per:
            r_state = replayer.update_priorities(r_state, info, jnp.abs(td) + c.priority_eps)
        return (params, learner, r_state, updates + 1), out

    def learn_fn(carry: tuple) -> tuple:
        carry, out = jax.lax.scan(gradient_step, carry, keys[1:])
        return carry, jax.tree.map(jnp.nanmean, out)

    def skip_fn(carry: tuple) -> tuple:
        shapes = jax.eval_shape(learn_fn, carry)[1]
        return carry, jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)

    carry = (params, state.learner, replay_state if per else (), state.updates)
    (params, learner, r_state, updates), out = cond_any(
        env_steps >= c.learning_starts, learn_fn, skip_fn, carry
    )
    replay_state = r_state if per else replay_state
    new_state = state.replace(
        params=params, learner=learner, replay_state=replay_state, key=keys[0],
        iteration=state.iteration + 1, updates=updates, metrics=metrics,
    )  # fmt: skip
    return new_state, {**common.episode_metrics(batch, metrics), **out, "updates": updates}

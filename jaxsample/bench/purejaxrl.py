"""A PureJaxRL-equivalent PPO, written inline: the peer that jaxsample's PPO is
timed against (compile and run), without PureJaxRL as a dependency.

It computes what PureJaxRL's single-file ``ppo.py`` computes for a gymnax env
with a discrete action space, structured as that file is (one ``train(key)``
closure of nested ``lax.scan`` s), so that its compile and run times are those
of the program a user would write by hand:

* the network: separate actor and critic MLPs (``config.hidden_sizes``, tanh)
  on the flattened observation (PureJaxRL's ``FlattenObservationWrapper``),
  orthogonal initialization (``sqrt(2)`` hidden, 0.01 policy head, 1.0 value
  head; flax's, drawn per seed as jaxsample's agents draw it:
  `jaxsample.agents.initializers`), zero biases; a categorical policy from the logits;
* the rollout: ``lax.scan`` over ``config.num_steps`` of the network's forward
  pass on ``[B, obs]``, ``vmap(env.step)`` with ``split(key, B)``, the episode
  return and length tracked in the carry (PureJaxRL's ``LogWrapper``), every
  step's info kept as the iteration's metric (``returned_episode_returns``,
  ``returned_episode``), as PureJaxRL returns it;
* GAE by a reverse ``lax.scan`` with ``done = terminated | truncated`` (it does
  not bootstrap through truncation: PureJaxRL's behaviour, kept for the
  comparison), then ``update_epochs`` x ``num_minibatches`` steps of the
  clipped surrogate with the clipped value loss and per-minibatch advantage
  normalization, through ``optax.chain(clip_by_global_norm, adam(schedule))``
  with the learning rate annealed per gradient step as PureJaxRL does.

The settings come from a [`PPOConfig`][jaxsample.algos.configs.PPOConfig] (the same
object jaxsample's trainer is built from), so both sides run the same
hyperparameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import constant
from gymnax.environments import spaces

from jaxsample.agents.initializers import orthogonal
from jaxsample.algos.configs import PPOConfig


class _ActorCritic(nn.Module):
    """Separate actor and critic tanh MLPs; returns ``(logits, value)``."""

    num_actions: int
    hidden_sizes: tuple[int, ...]

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        def mlp(h: jax.Array, out: int, scale: float) -> jax.Array:
            for width in self.hidden_sizes:
                h = nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(h)
                h = jnp.tanh(h)
            return nn.Dense(out, kernel_init=orthogonal(scale), bias_init=constant(0.0))(h)

        return mlp(x, self.num_actions, 0.01), jnp.squeeze(mlp(x, 1, 1.0), -1)


def make_train(
    config: PPOConfig, env: Any, env_params: Any
) -> Callable[[jax.Array], dict[str, Any]]:
    """PureJaxRL's ``make_train(config)`` for ``config`` on the gymnax ``env``.

    Returns ``train(key) -> {"runner_state": ..., "metrics": info}``; the
    metrics hold ``returned_episode_returns`` and ``returned_episode``
    ``[num_iterations, num_steps, num_envs]``.
    """
    if not isinstance(config, PPOConfig):
        raise TypeError(f"config must be a PPOConfig, got {type(config).__name__}")
    space = env.action_space(env_params)
    if not isinstance(space, spaces.Discrete):
        raise TypeError(f"the PureJaxRL peer takes a Discrete action space, got {space}")
    c = config
    B, T, M, E = c.num_envs, c.num_steps, c.num_minibatches, c.update_epochs
    num_updates = c.num_iterations
    network = _ActorCritic(int(space.n), tuple(c.hidden_sizes))

    def schedule(count: jax.Array) -> jax.Array:
        return c.lr * (1.0 - (count // (M * E)) / num_updates)

    obs_shape = env.observation_space(env_params).shape

    def apply(params: Any, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        # PureJaxRL's FlattenObservationWrapper: [..., *obs] -> [..., prod(obs)].
        lead = obs.shape[: obs.ndim - len(obs_shape)]
        return network.apply(params, obs.reshape((*lead, -1)).astype(jnp.float32))

    tx = optax.chain(
        optax.clip_by_global_norm(c.max_grad_norm),
        optax.adam(learning_rate=schedule if c.anneal_lr else c.lr, eps=c.adam_eps),
    )

    def train(key: jax.Array) -> dict[str, Any]:
        key, k_init, k_reset, k_run = jax.random.split(key, 4)
        params = network.init(k_init, jnp.zeros((int(np.prod(obs_shape)),)))
        opt_state = tx.init(params)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(k_reset, B), env_params
        )
        log = (jnp.zeros((B,)), jnp.zeros((B,), jnp.int32))  # episode return, length

        def update_step(runner: tuple, _: Any) -> tuple[tuple, dict[str, jax.Array]]:
            def env_step(runner: tuple, _: Any) -> tuple[tuple, tuple]:
                params, opt_state, env_state, last_obs, log, key = runner
                key, k_act, k_step = jax.random.split(key, 3)
                logits, value = apply(params, last_obs)
                action = jax.random.categorical(k_act, logits)
                log_prob = jnp.take_along_axis(
                    jax.nn.log_softmax(logits), action[:, None], axis=-1
                )[:, 0]
                obs, env_state, reward, terminated, truncated, _ = jax.vmap(
                    env.step, in_axes=(0, 0, 0, None)
                )(jax.random.split(k_step, B), env_state, action, env_params)
                done = terminated | truncated
                ep_return, ep_length = log[0] + reward, log[1] + 1
                info = {
                    "returned_episode_returns": jnp.where(done, ep_return, 0.0),
                    "returned_episode": done,
                }
                log = (jnp.where(done, 0.0, ep_return), jnp.where(done, 0, ep_length))
                transition = (done, action, value, reward, log_prob, last_obs, info)
                return (params, opt_state, env_state, obs, log, key), transition

            runner, traj = jax.lax.scan(env_step, runner, None, T)
            params, opt_state, env_state, last_obs, log, key = runner
            done, action, value, reward, log_prob, obs, info = traj
            _, last_value = apply(params, last_obs)

            def gae_step(carry: tuple, x: tuple) -> tuple[tuple, jax.Array]:
                gae, next_value = carry
                done, value, reward = x
                not_done = 1.0 - done
                delta = reward + c.gamma * next_value * not_done - value
                gae = delta + c.gamma * c.gae_lambda * not_done * gae
                return (gae, value), gae

            _, advantages = jax.lax.scan(
                gae_step,
                (jnp.zeros_like(last_value), last_value),
                (done, value, reward),
                reverse=True,
                unroll=16,
            )
            targets = advantages + value

            def update_epoch(update: tuple, _: Any) -> tuple[tuple, jax.Array]:
                def update_minibatch(opt: tuple, mb: tuple) -> tuple[tuple, jax.Array]:
                    params, opt_state = opt

                    def loss_fn(p: Any, mb: tuple) -> tuple[jax.Array, tuple]:
                        obs, action, old_value, old_log_prob, gae, targets = mb
                        logits, value = apply(p, obs)
                        log_probs = jax.nn.log_softmax(logits)
                        log_prob = jnp.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
                        clipped = old_value + (value - old_value).clip(-c.clip_eps, c.clip_eps)
                        value_loss = (
                            0.5
                            * jnp.maximum(
                                jnp.square(value - targets), jnp.square(clipped - targets)
                            ).mean()
                        )
                        ratio = jnp.exp(log_prob - old_log_prob)
                        gae = (gae - gae.mean()) / (gae.std() + 1e-8)
                        actor_loss = -jnp.minimum(
                            ratio * gae, jnp.clip(ratio, 1.0 - c.clip_eps, 1.0 + c.clip_eps) * gae
                        ).mean()
                        entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1).mean()
                        total = actor_loss + c.vf_coef * value_loss - c.ent_coef * entropy
                        return total, (value_loss, actor_loss, entropy)

                    loss, grads = jax.value_and_grad(loss_fn, has_aux=True)(params, mb)
                    updates, opt_state = tx.update(grads, opt_state, params)
                    return (optax.apply_updates(params, updates), opt_state), loss

                params, opt_state, batch, key = update
                key, k_perm = jax.random.split(key)
                permutation = jax.random.permutation(k_perm, T * B)
                minibatches = jax.tree.map(
                    lambda x: jnp.take(x.reshape((T * B, *x.shape[2:])), permutation, axis=0)
                    .reshape((M, -1, *x.shape[2:])),
                    batch,
                )  # fmt: skip
                (params, opt_state), loss = jax.lax.scan(
                    update_minibatch, (params, opt_state), minibatches
                )
                return (params, opt_state, batch, key), loss

            batch = (obs, action, value, log_prob, advantages, targets)
            (params, opt_state, _, key), _ = jax.lax.scan(
                update_epoch, (params, opt_state, batch, key), None, E
            )
            return (params, opt_state, env_state, last_obs, log, key), info

        runner = (params, opt_state, env_state, obs, log, k_run)
        runner, metrics = jax.lax.scan(update_step, runner, None, num_updates)
        return {"runner_state": runner, "metrics": metrics}

    return train


def mean_returns(metrics: dict[str, jax.Array]) -> jax.Array:
    """``[..., num_iterations]`` mean return of the episodes each iteration
    completed (NaN where none), from `make_train`'s metrics."""
    ended = metrics["returned_episode"]
    n = jnp.sum(ended, axis=(-2, -1))
    total = jnp.sum(metrics["returned_episode_returns"], axis=(-2, -1))
    return jnp.where(n > 0, total / jnp.maximum(n, 1), jnp.nan)

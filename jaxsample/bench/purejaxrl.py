"""A PureJaxRL-equivalent PPO, written inline: the peer that jaxsample's PPO is
timed against (compile and run), without PureJaxRL as a dependency.

It computes what PureJaxRL's single-file ``ppo.py`` computes for a gymnax env
with a discrete action space, structured as that file is (nested ``lax.scan`` s
under one ``train(key)``; its closures are the methods of `_PPO`, under
their names, which traces to the same program), so that its compile and run
times are those of the program a user would write by hand:

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

import dataclasses
import functools
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


def _schedule(c: PPOConfig, count: jax.Array) -> jax.Array:
    """PureJaxRL's ``linear_schedule``: the learning rate annealed per gradient step."""
    return c.lr * (1.0 - (count // (c.num_minibatches * c.update_epochs)) / c.num_iterations)


@dataclasses.dataclass(frozen=True)
class _PPO:
    """The pieces of PureJaxRL's ``train`` closure, one method each under the
    names of its ``ppo.py`` (``_env_step``, ``_calculate_gae``, ``_loss_fn``,
    ``_update_minbatch``, ``_update_epoch``, ``_update_step``). Methods
    instead of nested closures trace to the same program, equation for
    equation."""

    c: PPOConfig
    env: Any
    env_params: Any
    network: _ActorCritic
    obs_shape: tuple[int, ...]
    tx: optax.GradientTransformation

    def apply(self, params: Any, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(logits, value)``; PureJaxRL's ``FlattenObservationWrapper``:
        ``[..., *obs] -> [..., prod(obs)]``."""
        lead = obs.shape[: obs.ndim - len(self.obs_shape)]
        return self.network.apply(params, obs.reshape((*lead, -1)).astype(jnp.float32))

    def env_step(self, runner: tuple, _: Any) -> tuple[tuple, tuple]:
        """One step of the ``B`` envs; the transition and the ``LogWrapper``'s info."""
        params, opt_state, env_state, last_obs, log, key = runner
        key, k_act, k_step = jax.random.split(key, 3)
        logits, value = self.apply(params, last_obs)
        action = jax.random.categorical(k_act, logits)
        log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=-1)[:, 0]
        obs, env_state, reward, terminated, truncated, _ = jax.vmap(
            self.env.step, in_axes=(0, 0, 0, None)
        )(jax.random.split(k_step, self.c.num_envs), env_state, action, self.env_params)
        done = terminated | truncated
        ep_return, ep_length = log[0] + reward, log[1] + 1
        info = {
            "returned_episode_returns": jnp.where(done, ep_return, 0.0),
            "returned_episode": done,
        }
        log = (jnp.where(done, 0.0, ep_return), jnp.where(done, 0, ep_length))
        transition = (done, action, value, reward, log_prob, last_obs, info)
        return (params, opt_state, env_state, obs, log, key), transition

    def calculate_gae(self, traj: tuple, last_value: jax.Array) -> jax.Array:
        """``[T, B]`` advantages by a reverse scan (``done`` ends the
        bootstrap, truncation included)."""
        c = self.c

        def gae_step(carry: tuple, x: tuple) -> tuple[tuple, jax.Array]:
            gae, next_value = carry
            done, value, reward = x
            not_done = 1.0 - done
            delta = reward + c.gamma * next_value * not_done - value
            gae = delta + c.gamma * c.gae_lambda * not_done * gae
            return (gae, value), gae

        _, advantages = jax.lax.scan(
            gae_step, (jnp.zeros_like(last_value), last_value), traj, reverse=True, unroll=16
        )
        return advantages

    def loss_fn(self, p: Any, mb: tuple) -> tuple[jax.Array, tuple]:
        """The clipped surrogate, the clipped value loss and the entropy bonus."""
        c = self.c
        obs, action, old_value, old_log_prob, gae, targets = mb
        logits, value = self.apply(p, obs)
        log_probs = jax.nn.log_softmax(logits)
        log_prob = jnp.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
        clipped = old_value + (value - old_value).clip(-c.clip_eps, c.clip_eps)
        value_loss = (
            0.5 * jnp.maximum(jnp.square(value - targets), jnp.square(clipped - targets)).mean()
        )
        ratio = jnp.exp(log_prob - old_log_prob)
        gae = (gae - gae.mean()) / (gae.std() + 1e-8)
        actor_loss = -jnp.minimum(
            ratio * gae, jnp.clip(ratio, 1.0 - c.clip_eps, 1.0 + c.clip_eps) * gae
        ).mean()
        entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1).mean()
        total = actor_loss + c.vf_coef * value_loss - c.ent_coef * entropy
        return total, (value_loss, actor_loss, entropy)

    def update_minibatch(self, opt: tuple, mb: tuple) -> tuple[tuple, jax.Array]:
        params, opt_state = opt
        loss, grads = jax.value_and_grad(self.loss_fn, has_aux=True)(params, mb)
        updates, opt_state = self.tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    def update_epoch(self, update: tuple, _: Any) -> tuple[tuple, jax.Array]:
        """One epoch: the batch shuffled into ``num_minibatches`` minibatches."""
        n, M = self.c.num_steps * self.c.num_envs, self.c.num_minibatches
        params, opt_state, batch, key = update
        key, k_perm = jax.random.split(key)
        permutation = jax.random.permutation(k_perm, n)
        minibatches = jax.tree.map(
            lambda x: jnp.take(x.reshape((n, *x.shape[2:])), permutation, axis=0)
            .reshape((M, -1, *x.shape[2:])),
            batch,
        )  # fmt: skip
        (params, opt_state), loss = jax.lax.scan(
            self.update_minibatch, (params, opt_state), minibatches
        )
        return (params, opt_state, batch, key), loss

    def update_step(self, runner: tuple, _: Any) -> tuple[tuple, dict[str, jax.Array]]:
        """One iteration: the rollout, GAE, ``update_epochs`` epochs."""
        runner, traj = jax.lax.scan(self.env_step, runner, None, self.c.num_steps)
        params, opt_state, env_state, last_obs, log, key = runner
        done, action, value, reward, log_prob, obs, info = traj
        _, last_value = self.apply(params, last_obs)
        advantages = self.calculate_gae((done, value, reward), last_value)
        targets = advantages + value
        batch = (obs, action, value, log_prob, advantages, targets)
        (params, opt_state, _, key), _ = jax.lax.scan(
            self.update_epoch, (params, opt_state, batch, key), None, self.c.update_epochs
        )
        return (params, opt_state, env_state, last_obs, log, key), info

    def train(self, key: jax.Array) -> dict[str, Any]:
        """PureJaxRL's ``train(rng)``."""
        B = self.c.num_envs
        key, k_init, k_reset, k_run = jax.random.split(key, 4)
        params = self.network.init(k_init, jnp.zeros((int(np.prod(self.obs_shape)),)))
        opt_state = self.tx.init(params)
        obs, env_state = jax.vmap(self.env.reset, in_axes=(0, None))(
            jax.random.split(k_reset, B), self.env_params
        )
        log = (jnp.zeros((B,)), jnp.zeros((B,), jnp.int32))  # episode return, length
        runner = (params, opt_state, env_state, obs, log, k_run)
        runner, metrics = jax.lax.scan(self.update_step, runner, None, self.c.num_iterations)
        return {"runner_state": runner, "metrics": metrics}


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
    tx = optax.chain(
        optax.clip_by_global_norm(c.max_grad_norm),
        optax.adam(
            learning_rate=functools.partial(_schedule, c) if c.anneal_lr else c.lr, eps=c.adam_eps
        ),
    )
    network = _ActorCritic(int(space.n), tuple(c.hidden_sizes))
    obs_shape = env.observation_space(env_params).shape
    return _PPO(c, env, env_params, network, obs_shape, tx).train


def mean_returns(metrics: dict[str, jax.Array]) -> jax.Array:
    """``[..., num_iterations]`` mean return of the episodes each iteration
    completed (NaN where none), from `make_train`'s metrics."""
    ended = metrics["returned_episode"]
    n = jnp.sum(ended, axis=(-2, -1))
    total = jnp.sum(metrics["returned_episode_returns"], axis=(-2, -1))
    return jnp.where(n > 0, total / jnp.maximum(n, 1), jnp.nan)

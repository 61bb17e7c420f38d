"""How well can any policy do on gymnax's Pendulum-v1? Dynamic programming says.

gymnax publishes a return of -130 for Pendulum-v1 (gymnax-blines' checkpoint).
This tool computes the best return a policy can expect from the env's start
distribution, independently of any learning: finite-horizon value iteration
over a ``(theta, theta_dot)`` grid (bilinear interpolation, ``theta``
periodic, a set of evenly spaced torques), then the greedy one-step-lookahead
policy of those values plays episodes of gymnax's own env, from its own
resets. The policy's mean return is a return that is reached, so the optimum
is at least that; the grid's value at the starts estimates it from the other
side, and the two meet as the grid is refined (see ``docs/presets.md``).

It also evaluates a gymnax-blines checkpoint (``agents/Pendulum-v1/*.pkl`` of a
local clone; no download here) on the same episodes: ``--checkpoint``.

Usage::

    python tools/pendulum_optimum.py --grid 720 641 --torques 41
    python tools/pendulum_optimum.py --checkpoint ../gymnax-blines/agents/Pendulum-v1/es.pkl

Prints one JSON line: the grid, the value at the starts, the policy's mean
return over ``--episodes`` episodes, and the spread of means of 164-episode
blocks (gymnax-blines' ``num_test_rollouts``): min, median, max and the
share of blocks at or above -130.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from collections.abc import Callable
from typing import Any

import gymnax
import jax
import jax.numpy as jnp
import numpy as np

HORIZON = 200  # gymnax's max_steps_in_episode
BLOCK = 164  # gymnax-blines' num_test_rollouts
PUBLISHED = -130.0


def angle(x: jax.Array) -> jax.Array:
    """``x`` wrapped into ``[-pi, pi)``."""
    return ((x + jnp.pi) % (2 * jnp.pi)) - jnp.pi


def model_step(
    params: gymnax.EnvParams, theta: jax.Array, theta_dot: jax.Array, torque: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The env's dynamics and reward written out (any shapes that broadcast):
    ``(theta', theta_dot', reward)``; tested equal to gymnax's ``step``."""
    u = jnp.clip(torque, -params.max_torque, params.max_torque)
    reward = -(angle(theta) ** 2 + 0.1 * theta_dot**2 + 0.001 * u**2)
    accel = 3 * params.g / (2 * params.l) * jnp.sin(theta) + 3.0 / (params.m * params.l**2) * u
    new_dot = jnp.clip(theta_dot + accel * params.dt, -params.max_speed, params.max_speed)
    return theta + new_dot * params.dt, new_dot, reward


class Grid:
    """Values on ``n_theta x n_dot`` points; ``theta`` periodic, ``theta_dot`` in
    ``[-max_speed, max_speed]``; ``torques`` the actions the maximum runs over."""

    def __init__(self, params: gymnax.EnvParams, n_theta: int, n_dot: int, n_torques: int):
        self.params, self.n_theta, self.n_dot = params, n_theta, n_dot
        self.torques = jnp.linspace(-params.max_torque, params.max_torque, n_torques)
        theta = jnp.linspace(-jnp.pi, jnp.pi, n_theta, endpoint=False)
        dot = jnp.linspace(-params.max_speed, params.max_speed, n_dot)
        self.theta, self.dot = jnp.meshgrid(theta, dot, indexing="ij")

    def at(self, values: jax.Array, theta: jax.Array, theta_dot: jax.Array) -> jax.Array:
        """``values`` ``[n_theta, n_dot]`` interpolated at states of any shape."""
        x = (angle(theta) + jnp.pi) / (2 * jnp.pi) * self.n_theta
        i0 = jnp.floor(x).astype(jnp.int32)
        fx = x - i0
        i0, i1 = i0 % self.n_theta, (i0 + 1) % self.n_theta
        top = self.params.max_speed
        y = jnp.clip((theta_dot + top) / (2 * top) * (self.n_dot - 1), 0, self.n_dot - 1 - 1e-4)
        j0 = jnp.floor(y).astype(jnp.int32)
        fy = y - j0
        return (1 - fx) * ((1 - fy) * values[i0, j0] + fy * values[i0, j0 + 1]) + fx * (
            (1 - fy) * values[i1, j0] + fy * values[i1, j0 + 1]
        )

    def q(self, values: jax.Array, theta: jax.Array, theta_dot: jax.Array) -> jax.Array:
        """Each torque's reward plus the next state's value: ``[..., n_torques]``."""
        torques = self.torques.reshape((1,) * theta.ndim + (-1,))
        new_theta, new_dot, reward = model_step(
            self.params, theta[..., None], theta_dot[..., None], torques
        )
        return reward + self.at(values, new_theta, new_dot)

    def values(self) -> jax.Array:
        """``[HORIZON + 1, n_theta, n_dot]``: row ``t`` is the value with
        ``HORIZON - t`` steps to go (the last row zeros)."""
        backup = jax.jit(lambda v: self.q(v, self.theta, self.dot).max(-1))
        rows = [jnp.zeros_like(self.theta)]
        for _ in range(HORIZON):
            rows.append(backup(rows[-1]))
        return jnp.stack(rows[::-1])


#: ``(observation [3], gymnax EnvState, step index t) -> torque [1]``
Policy = Callable[[jax.Array, Any, jax.Array], jax.Array]


def play(
    env: gymnax.environments.environment.Environment,
    params: gymnax.EnvParams,
    policy: Policy,
    episodes: int,
    key: jax.Array,
) -> tuple[np.ndarray, jax.Array]:
    """``policy`` on gymnax's env from its own resets: the ``[episodes]``
    returns and the ``[episodes]`` start states."""

    def episode(key: jax.Array) -> tuple[jax.Array, jax.Array]:
        reset_key, step_key = jax.random.split(key)
        obs, start = env.reset(reset_key, params)

        def body(carry, t):
            obs, state, total = carry
            obs, state, reward = env.step(step_key, state, policy(obs, state, t), params)[:3]
            return (obs, state, total + reward), None

        return jax.lax.scan(body, (obs, start, 0.0), jnp.arange(HORIZON))[0][2], start

    returns, starts = jax.jit(jax.vmap(episode))(jax.random.split(key, episodes))
    return np.asarray(returns), starts


def dp_policy(grid: Grid, values: jax.Array) -> Policy:
    """The greedy one-step lookahead on the grid's values (time-dependent)."""
    return lambda obs, state, t: grid.torques[
        jnp.argmax(grid.q(values[t + 1], state.theta, state.theta_dot))
    ][None]


def blines_policy(path: str) -> Policy:
    """The mean action of a gymnax-blines Pendulum checkpoint: its PPO
    ``GaussianSeparateMLP`` (``actor_fc_*``) or its ES ``MLP`` (``Dense_*``),
    two relu layers."""

    class Config(dict):  # stands in for the dotmap that holds its training config
        def __setstate__(self, state: dict) -> None:
            self.update(state)

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> type:
            return Config if module.startswith("dotmap") else super().find_class(module, name)

    with open(path, "rb") as f:
        saved = Unpickler(f).load()
    try:
        net = saved["network"]["params"]
    except (KeyError, TypeError):
        why = f"checkpoint {path}: no ['network']['params'] (not gymnax-blines')"
        raise ValueError(why) from None
    names = (
        ["actor_fc_1", "actor_fc_2", "actor_fc_mu"]
        if "actor_fc_1" in net
        else ["Dense_0", "Dense_1", "Dense_2"]
    )
    if missing := [n for n in names if n not in net]:
        raise ValueError(f"checkpoint {path}: no layer {', '.join(missing)} (a Pendulum MLP's)")
    layers = [(jnp.asarray(net[n]["kernel"]), jnp.asarray(net[n]["bias"])) for n in names]

    def policy(obs: jax.Array, state: Any, t: jax.Array) -> jax.Array:
        h = obs
        for i, (w, b) in enumerate(layers):
            h = h @ w + b
            h = jax.nn.relu(h) if i < len(layers) - 1 else h
        return h

    return policy


def summary(returns: np.ndarray) -> dict:
    """The mean and the spread of ``BLOCK``-episode means."""
    blocks = returns[: len(returns) // BLOCK * BLOCK].reshape(-1, BLOCK).mean(1)
    return {
        "episodes": int(returns.size),
        "mean": round(float(returns.mean()), 2),
        "blocks": int(blocks.size),
        "block_min": round(float(blocks.min()), 2),
        "block_median": round(float(np.median(blocks)), 2),
        "block_max": round(float(blocks.max()), 2),
        "share_of_blocks_at_published": round(float((blocks >= PUBLISHED).mean()), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=int, nargs=2, default=(360, 321), metavar=("THETA", "DOT"))
    parser.add_argument("--torques", type=int, default=41)
    parser.add_argument("--episodes", type=int, default=BLOCK * 60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", help="a gymnax-blines Pendulum-v1 .pkl instead of the DP")
    args = parser.parse_args(argv)
    if min(args.grid) < 4:
        parser.error(f"--grid: both sizes must be >= 4, got {args.grid[0]} {args.grid[1]}")
    if args.torques < 2:
        parser.error(f"--torques must be >= 2, got {args.torques}")
    if args.episodes < BLOCK:
        parser.error(f"--episodes must be >= {BLOCK} (one block), got {args.episodes}")
    if args.checkpoint and not os.path.isfile(args.checkpoint):
        parser.error(f"--checkpoint: no file {args.checkpoint}")
    env, params = gymnax.make("Pendulum-v1")
    key = jax.random.PRNGKey(args.seed)
    if args.checkpoint:
        line = {"checkpoint": args.checkpoint}
        try:
            policy = blines_policy(args.checkpoint)
        except (ValueError, pickle.UnpicklingError, EOFError) as e:
            parser.error(f"--checkpoint: {e}")
        returns, _ = play(env, params, policy, args.episodes, key)
    else:
        grid = Grid(params, *args.grid, args.torques)
        values = grid.values()
        returns, starts = play(env, params, dp_policy(grid, values), args.episodes, key)
        line = {
            "grid": list(args.grid),
            "torques": args.torques,
            "value_at_starts": round(
                float(grid.at(values[0], starts.theta, starts.theta_dot).mean()), 2
            ),
        }
    line.update(summary(returns))
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())

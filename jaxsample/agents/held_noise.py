"""Temporally correlated exploration: a policy's noise held for k steps.

A Gaussian actor samples ``a_t = mean(s_t) + std * eps_t`` with a fresh
``eps_t ~ N(0, I)`` every step; its exploration is white noise, whose energy
averages out over the slow dynamics of an env like MountainCarContinuous
(the car needs one push held for tens of steps, then the other).
[`HeldNoise`][jaxsample.agents.HeldNoise] draws ``eps`` at the first step of
an episode and every ``repeat`` steps after, and reuses it in between: the
exploration of gSDE's ``sde_sample_freq`` (Raffin et al., 2022), on the
action rather than on features. At each step the action's distribution given
the state is still ``N(mean(s_t), std)``, so the learner's log-probabilities
and entropies are the inner agent's.

A categorical policy samples ``argmax(logits(s_t) + g_t)`` with Gumbel noise
``g_t`` (``jax.random.categorical``'s own draw); holding ``g`` for ``repeat``
steps keeps each step's action distribution ``softmax(logits(s_t))`` while a
near-uniform policy repeats its action instead of dithering: the push held
long enough to build MountainCar's swing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxsample.agents.actor_critic import (
    ActorCriticInfo,
    CategoricalActorCritic,
    GaussianActorCritic,
)
from jaxsample.types import AgentInputs, AgentStep, PyTree

__all__ = ["HeldNoise", "NoiseState"]


@struct.dataclass
class NoiseState:
    """The held noise of one env: ``noise`` shaped like the action (a Gaussian
    policy's) or like the logits ``[n]`` (a categorical policy's), float32, and
    ``age``, the steps it has been used (int32, in ``[0, repeat)``; 0: draw
    a new one)."""

    noise: jax.Array
    age: jax.Array


@dataclasses.dataclass(frozen=True)
class HeldNoise:
    """``agent``, a `GaussianActorCritic` or a `CategoricalActorCritic`, acting
    with noise held ``repeat`` steps.

    The state of an env is a `NoiseState` (the sampler restarts it with
    ``initial_state`` when the env's episode ends, so each episode draws its
    own first noise). ``step`` returns the inner agent's
    ``ActorCriticInfo(log_prob, value, dist_params)`` for the action taken;
    every other member (``init``, ``value``, ``evaluate``, ``log_prob``, ...)
    is the inner agent's. ``as_eval`` is the inner agent's greedy copy: a
    greedy policy has no noise to hold. ``repeat = 1`` draws every step,
    as the inner agent does.
    """

    agent: GaussianActorCritic | CategoricalActorCritic
    repeat: int

    def __post_init__(self) -> None:
        if not isinstance(self.agent, GaussianActorCritic | CategoricalActorCritic):
            raise TypeError(
                f"HeldNoise holds a Gaussian or categorical policy's noise: agent must be a "
                f"GaussianActorCritic or CategoricalActorCritic, got {type(self.agent).__name__}"
            )
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat < 1:
            raise ValueError(f"repeat must be an int >= 1, got {self.repeat!r}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.agent, name)

    def initial_state(self, env_rank: jax.Array) -> NoiseState:
        """No noise drawn yet: zeros ``[*act]`` (categorical: ``[n]``) and age 0."""
        del env_rank
        space = self.agent.action_space
        shape = (space.n,) if isinstance(self.agent, CategoricalActorCritic) else space.shape
        return NoiseState(jnp.zeros(shape, jnp.float32), jnp.zeros((), jnp.int32))

    def step(
        self, params: PyTree, inputs: AgentInputs, state: NoiseState, key: jax.Array
    ) -> tuple[AgentStep, NoiseState]:
        """``mean + std * noise`` (categorical: ``argmax(logits + noise)``,
        Gumbel noise, only legal actions under ``inputs.action_mask``), the
        noise drawn with ``key`` when ``state.age`` is 0 and the held one
        otherwise; the age advances modulo ``repeat``."""
        dtype = self.agent.action_space.dtype
        if isinstance(self.agent, CategoricalActorCritic):
            dist_params, value = self.agent.forward(params, inputs.observation, inputs.action_mask)
            fresh = jax.random.gumbel(key, dist_params.shape, jnp.float32)
            noise = jnp.where(state.age == 0, fresh, state.noise)
            action = jnp.argmax(dist_params + noise).astype(dtype)
        else:
            dist_params, value = self.agent.forward(params, inputs.observation)
            mean, log_std = dist_params
            fresh = jax.random.normal(key, mean.shape, jnp.float32)
            noise = jnp.where(state.age == 0, fresh, state.noise)
            action = (mean + jnp.exp(log_std) * noise).astype(dtype)
        info = ActorCriticInfo(
            log_prob=self.agent.dist_log_prob(dist_params, action),
            value=value,
            dist_params=dist_params,
        )
        return AgentStep(action=action, agent_info=info), NoiseState(
            noise, (state.age + 1) % self.repeat
        )

    def as_eval(self) -> GaussianActorCritic | CategoricalActorCritic:
        """The inner agent's greedy copy (same params)."""
        return self.agent.as_eval()

"""Actors and twin critics for continuous control, as agents: SAC's
[`SquashedGaussianActor`][jaxsample.agents.SquashedGaussianActor] and TD3's
[`DeterministicActor`][jaxsample.agents.DeterministicActor].

Unbatched (ONE environment; the sampler vmaps, a learner vmaps the
learner-side helpers over its minibatch). Both act in a ``Box`` with finite
bounds ``[low, high]``: the policy's output ``y`` in ``[-1, 1]`` (a ``tanh``)
is rescaled to ``loc + scale * y`` with ``loc = (low + high) / 2`` and
``scale = (high - low) / 2``, so every action is inside the Box. Their
parameters are [`ContinuousParams`][jaxsample.agents.ContinuousParams]: the
actor, ``num_critics`` Q-networks (leaves stacked ``[K, ...]``) and the
running observation statistics that ``normalize_observations`` uses
([`RunningNorm`][jaxsample.agents.RunningNorm]), so an evaluation or a loaded
run acts on the same features the learner saw. A critic sees the features and
the action in ``[-1, 1]`` units, ``(a - loc) / scale``. The networks are MLPs
with flax's default initialisation (LeCun-normal kernels, zero biases), as
rejax's and CleanRL's SAC and TD3.

``agent_info`` is ``()``: a replay buffer stores nothing more than the step.
``value`` is ``min_k Q_k(s, greedy action)``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces

from jaxsample.agents.actor_critic import flatten_observation, validate_hidden_sizes
from jaxsample.agents.base import Stateless
from jaxsample.types import AgentInputs, AgentStep, PyTree

__all__ = [
    "ContinuousParams",
    "DeterministicActor",
    "RunningNorm",
    "SquashedGaussianActor",
]

_LOG_2PI = math.log(2.0 * math.pi)


@struct.dataclass
class RunningNorm:
    """Running mean and variance of the observation features (Chan et al.'s
    parallel update, as gym's ``RunningMeanStd``): ``mean``, ``var`` float32
    ``[D]`` and ``count`` float32 ``[]`` (starts at 1e-4 with mean 0, var 1)."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array

    @classmethod
    def init(cls, size: int) -> RunningNorm:
        return cls(jnp.zeros((size,), jnp.float32), jnp.ones((size,), jnp.float32),
                   jnp.full((), 1e-4, jnp.float32))  # fmt: skip

    def update(self, x: jax.Array, weight: jax.Array) -> RunningNorm:
        """The statistics with the rows of ``x`` ``[N, D]`` whose ``weight`` (``[N]``,
        0 or 1: e.g. ``samples.valid``) is 1 added."""
        w = weight.astype(jnp.float32)[:, None]
        n = jnp.sum(w)
        mean = jnp.sum(w * x, axis=0) / jnp.maximum(n, 1.0)
        var = jnp.sum(w * jnp.square(x - mean[None, :]), axis=0) / jnp.maximum(n, 1.0)
        total = self.count + n
        delta = mean - self.mean
        m2 = self.var * self.count + var * n + jnp.square(delta) * self.count * n / total
        return RunningNorm(self.mean + delta * n / total, m2 / total, total)

    def normalize(self, x: jax.Array) -> jax.Array:
        """``(x - mean) / sqrt(var + 1e-8)``, ``x`` ``[..., D]``."""
        return (x - self.mean) / jnp.sqrt(self.var + 1e-8)


@struct.dataclass
class ContinuousParams:
    """Parameters of a continuous actor and its critics.

    Attributes:
      actor: the actor MLP's flax variables.
      critic: the ``K`` critics' flax variables, every leaf ``[K, ...]``.
      obs_norm: the observation statistics (`RunningNorm`; unused unless the
        agent has ``normalize_observations``).
    """

    actor: PyTree
    critic: PyTree
    obs_norm: RunningNorm


class MLP(nn.Module):
    """``[D] -> [outputs]``: ``hidden_sizes`` dense layers with ``activation``,
    then a linear layer (flax's default initialisation)."""

    hidden_sizes: tuple[int, ...]
    activation: Callable[[jax.Array], jax.Array]
    outputs: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, size in enumerate(self.hidden_sizes):
            x = self.activation(nn.Dense(size, name=f"dense_{i}")(x))
        return nn.Dense(self.outputs, name="head")(x)


def box_bounds(action_space: Any, who: str) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` float32 of a ``Box`` with finite bounds, shaped like its
    action; a one-line ``TypeError`` / ``ValueError`` naming ``who`` otherwise."""
    if isinstance(action_space, spaces.Discrete):
        raise TypeError(
            f"{who} is for continuous actions (a Box); for a Discrete action space use PPO, "
            "DQN or PQN (--algo ppo, dqn or pqn)"
        )
    if not isinstance(action_space, spaces.Box):
        raise TypeError(f"{who} needs a Box action space, got {type(action_space).__name__}")
    shape = action_space.shape
    shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
    low = np.broadcast_to(np.asarray(action_space.low, np.float32), shape)
    high = np.broadcast_to(np.asarray(action_space.high, np.float32), shape)
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (high > low).all()):
        raise ValueError(f"{who} needs a Box with finite bounds low < high, got {action_space}")
    return low, high


@dataclasses.dataclass(frozen=True)
class _ContinuousAgent(Stateless):
    """What both actors share: bounds, features, critics, the protocol (a
    subclass adds ``greedy_action(actor, x)`` and ``explore(actor, x, key)``)."""

    action_space: Any
    hidden_sizes: Sequence[int] = (256, 256)
    activation: Callable[[jax.Array], jax.Array] = nn.relu
    num_critics: int = 2
    normalize_observations: bool = False
    greedy: bool = False

    def __post_init__(self) -> None:
        low, high = box_bounds(self.action_space, type(self).__name__)
        object.__setattr__(self, "hidden_sizes", validate_hidden_sizes(self.hidden_sizes))
        n = self.num_critics
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"num_critics must be an int >= 1, got {n!r}")
        if not callable(self.activation):
            raise TypeError(f"activation must be callable, got {self.activation!r}")
        for name in ("normalize_observations", "greedy"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        object.__setattr__(self, "_bounds", (tuple(low.ravel()), tuple(high.ravel()), low.shape))

    # -- bounds --------------------------------------------------------------

    @property
    def action_shape(self) -> tuple[int, ...]:
        return self._bounds[2]

    @property
    def action_size(self) -> int:
        """``|A|``, the number of action dimensions."""
        return math.prod(self.action_shape)

    def loc_scale(self) -> tuple[jax.Array, jax.Array]:
        """``((low + high) / 2, (high - low) / 2)`` shaped like the action, float32."""
        low, high, shape = self._bounds
        low, high = (jnp.reshape(jnp.asarray(b, jnp.float32), shape) for b in (low, high))
        return (low + high) / 2, (high - low) / 2

    def rescale(self, y: jax.Array) -> jax.Array:
        """``loc + scale * y``: ``y`` in ``[-1, 1]`` (``[prod(act)]``) to the Box."""
        loc, scale = self.loc_scale()
        return loc + scale * jnp.reshape(y, self.action_shape)

    def clip(self, action: jax.Array) -> jax.Array:
        """``action`` clipped to ``[low, high]``."""
        loc, scale = self.loc_scale()
        return jnp.clip(action, loc - scale, loc + scale)

    # -- networks ------------------------------------------------------------

    def actor_outputs(self) -> int:
        return self.action_size

    def actor_network(self) -> MLP:
        return MLP(self.hidden_sizes, self.activation, self.actor_outputs())

    def critic_network(self) -> MLP:
        return MLP(self.hidden_sizes, self.activation, 1)

    def init(self, key: jax.Array, observation: PyTree) -> ContinuousParams:
        """Parameters from ONE example observation (no batch axis)."""
        x = flatten_observation(observation)
        k_actor, k_critic = jax.random.split(key)
        critic_in = jnp.zeros((x.shape[0] + self.action_size,), jnp.float32)
        critic = jax.vmap(self.critic_network().init, in_axes=(0, None))(
            jax.random.split(k_critic, self.num_critics), critic_in
        )
        return ContinuousParams(
            actor=self.actor_network().init(k_actor, x), critic=critic,
            obs_norm=RunningNorm.init(x.shape[0]),
        )  # fmt: skip

    def features(self, obs_norm: RunningNorm, observation: PyTree) -> jax.Array:
        """``[D]`` float32: the flattened observation, normalised with
        ``obs_norm`` when the agent has ``normalize_observations``."""
        x = flatten_observation(observation)
        if x.shape != obs_norm.mean.shape:
            raise ValueError(
                f"observation flattens to {x.shape[0]} features but params expect "
                f"{obs_norm.mean.shape[0]}: agents act on ONE environment's inputs"
            )
        return obs_norm.normalize(x) if self.normalize_observations else x

    def q_values(self, critic: PyTree, x: jax.Array, action: jax.Array) -> jax.Array:
        """``[K]``: every critic's ``Q(x, action)`` (``x`` the ``[D]`` features)."""
        loc, scale = self.loc_scale()
        unit = jnp.ravel((action - loc) / scale)
        inputs = jnp.concatenate([x, unit])
        out = jax.vmap(self.critic_network().apply, in_axes=(0, None))(critic, inputs)
        return out[:, 0]

    # -- protocol ------------------------------------------------------------

    def step(
        self, params: ContinuousParams, inputs: AgentInputs, state: PyTree, key: jax.Array
    ) -> tuple[AgentStep, PyTree]:
        """The exploring action (the greedy one when ``greedy``), in the Box;
        ``agent_info`` ``()``."""
        x = self.features(params.obs_norm, inputs.observation)
        if self.greedy:
            action = self.greedy_action(params.actor, x)
        else:
            action = self.explore(params.actor, x, key)
        return AgentStep(action=action.astype(self.action_space.dtype), agent_info=()), state

    def value(self, params: ContinuousParams, inputs: AgentInputs, state: PyTree) -> jax.Array:
        """``min_k Q_k(s, greedy action)``: float32 scalar."""
        del state
        x = self.features(params.obs_norm, inputs.observation)
        return jnp.min(self.q_values(params.critic, x, self.greedy_action(params.actor, x)))

    def as_eval(self) -> Any:
        """The greedy copy (same params)."""
        return dataclasses.replace(self, greedy=True)


@dataclasses.dataclass(frozen=True)
class SquashedGaussianActor(_ContinuousAgent):
    """SAC's actor: ``a = loc + scale * tanh(u)``, ``u ~ N(mean(s), std(s))``.

    The actor MLP outputs ``mean`` and ``log_std`` (``[|A|]`` each; ``log_std``
    clipped to ``[log_std_min, log_std_max]``). The greedy action is
    ``loc + scale * tanh(mean)``. `policy` gives the action of a given noise
    and its log-density, corrected for the squash and the scale::

        log pi(a|s) = log N(u; mean, std) - sum log(1 - tanh(u)**2) - sum log(scale)

    Attributes (beyond the shared ``action_space``, ``hidden_sizes``,
    ``activation``, ``num_critics``, ``normalize_observations``, ``greedy``):
      log_std_min: the lower clip of ``log_std``.
      log_std_max: the upper clip of ``log_std``.
    """

    log_std_min: float = -10.0
    log_std_max: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (math.isfinite(self.log_std_min) and math.isfinite(self.log_std_max)
                and self.log_std_min < self.log_std_max):  # fmt: skip
            raise ValueError(
                f"log_std_min < log_std_max must be finite, got {self.log_std_min}, "
                f"{self.log_std_max}"
            )

    def actor_outputs(self) -> int:
        return 2 * self.action_size

    def mean_log_std(self, actor: PyTree, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(mean, log_std)``, ``[|A|]`` each (``log_std`` clipped)."""
        mean, log_std = jnp.split(self.actor_network().apply(actor, x), 2)
        return mean, jnp.clip(log_std, self.log_std_min, self.log_std_max)

    def policy(self, actor: PyTree, x: jax.Array, noise: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(action, log_prob)`` of ``u = mean + std * noise`` (``noise`` ``[|A|]``
        standard normal): the action in the Box, the log-density above (scalar)."""
        mean, log_std = self.mean_log_std(actor, x)
        u = mean + jnp.exp(log_std) * noise
        gaussian = jnp.sum(-0.5 * jnp.square(noise) - log_std - 0.5 * _LOG_2PI)
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|
        squash = jnp.sum(2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u)))
        log_scale = jnp.sum(jnp.log(self.loc_scale()[1]))
        return self.rescale(jnp.tanh(u)), gaussian - squash - log_scale

    def greedy_action(self, actor: PyTree, x: jax.Array) -> jax.Array:
        return self.rescale(jnp.tanh(self.mean_log_std(actor, x)[0]))

    def explore(self, actor: PyTree, x: jax.Array, key: jax.Array) -> jax.Array:
        return self.policy(actor, x, jax.random.normal(key, (self.action_size,)))[0]


@dataclasses.dataclass(frozen=True)
class DeterministicActor(_ContinuousAgent):
    """TD3's actor: ``mu(s) = loc + scale * tanh(f(s))``, exploring with
    ``clip(mu(s) + exploration_noise * scale * eps, low, high)``, ``eps ~ N(0, I)``.

    Attributes (beyond the shared ones):
      exploration_noise: the exploration noise's standard deviation, in units
        of ``scale`` (half the Box's width), ``>= 0``.
    """

    exploration_noise: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.exploration_noise, int | float) and self.exploration_noise >= 0):
            raise ValueError(f"exploration_noise must be >= 0, got {self.exploration_noise!r}")

    def action(self, actor: PyTree, x: jax.Array) -> jax.Array:
        """``mu(s)``, in the Box."""
        return self.rescale(jnp.tanh(self.actor_network().apply(actor, x)))

    def greedy_action(self, actor: PyTree, x: jax.Array) -> jax.Array:
        return self.action(actor, x)

    def explore(self, actor: PyTree, x: jax.Array, key: jax.Array) -> jax.Array:
        noise = jax.random.normal(key, self.action_shape) * self.exploration_noise
        return self.clip(self.action(actor, x) + noise * self.loc_scale()[1])

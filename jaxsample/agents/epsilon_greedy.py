"""Epsilon-greedy Q-network agent with rlpyt's vector epsilon:
[`EpsilonGreedyAgent`][jaxsample.agents.EpsilonGreedyAgent].

Unbatched (ONE environment; the sampler vmaps). The agent state is the env's own
final epsilon, a float32 scalar computed by ``initial_state(env_rank)``:

* without ``epsilon_final_min`` every env gets ``epsilon_final``;
* with it, env rank ``r`` of ``global_B`` gets
  ``numpy.logspace(log10(epsilon_final_min), log10(epsilon_final), global_B)[r]``,
  i.e. rank 0 explores least (``epsilon_final_min``) and rank ``global_B - 1``
  most (``epsilon_final``), log-spaced in between (rlpyt's ``eps_final_min``).
  With ``global_B == 1`` the single env gets ``epsilon_final_min`` (numpy's
  ``num=1`` semantics). Ranks outside ``0 .. global_B - 1`` are clipped into it.

The epsilon used at a step is ``epsilon_init + decay * (epsilon_final_b -
epsilon_init)`` where ``decay`` (in ``[0, 1]``, clipped) is part of the params, so
the training loop anneals exploration by replacing ``params.decay`` — no retrace.
The evaluation agent (``as_eval()``) acts with ``eval_epsilon`` instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces

from jaxsample.agents.actor_critic import (
    MLPTorso,
    check_features,
    flatten_observation,
    orthogonal_dense,
    validate_hidden_sizes,
)
from jaxsample.agents.base import num_actions
from jaxsample.agents.masks import legal, masked_argmax, masked_max, uniform_legal
from jaxsample.types import AgentInputs, AgentStep, PyTree


@struct.dataclass
class EpsilonGreedyParams:
    """Parameters of [`EpsilonGreedyAgent`][jaxsample.agents.EpsilonGreedyAgent].

    Attributes:
      network: the Q-network's flax variables dict.
      decay: float32 scalar in ``[0, 1]``: 0 acts with ``epsilon_init``, 1 with
        each env's final epsilon (linear in between).
    """

    network: PyTree
    decay: jax.Array


class EpsilonGreedyInfo(NamedTuple):
    """``agent_info`` of [`EpsilonGreedyAgent`][jaxsample.agents.EpsilonGreedyAgent] (one env).

    Attributes:
      q_values: ``[n]`` float32, the Q-values of the observation.
      epsilon: float32 scalar, the exploration probability used at this step.
    """

    q_values: jax.Array
    epsilon: jax.Array


class QNetwork(nn.Module):
    """MLP ``[D] -> [num_actions]`` (orthogonal init: hidden ``sqrt(2)``, head
    ``1.0``; ``layer_norm``: each hidden layer layer-normalised before its
    activation)."""

    num_actions: int
    hidden_sizes: tuple[int, ...]
    activation: Callable[[jax.Array], jax.Array]
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = MLPTorso(self.hidden_sizes, self.activation, self.layer_norm, name="torso")(x)
        return orthogonal_dense(self.num_actions, 1.0, name="q_head")(x)


def _check_probability(name: str, value: Any, *, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
        raise TypeError(f"{name} must be a float, got {value!r}")
    value = float(value)
    low_ok = value >= 0.0 if allow_zero else value > 0.0
    if not (low_ok and value <= 1.0):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(f"{name} must be in {interval}, got {value}")
    return value


@dataclasses.dataclass(frozen=True)
class EpsilonGreedyAgent:
    """Q-network agent acting epsilon-greedily over a ``Discrete(n)`` space.

    Attributes:
      action_space: ``gymnax.environments.spaces.Discrete`` (else TypeError).
      global_B: total number of training envs over all devices/processes (the
        range of ``env_rank``); >= 1.
      hidden_sizes: widths of the Q-network's hidden layers.
      epsilon_init: epsilon at ``decay = 0``, in ``[0, 1]``.
      epsilon_final: epsilon at ``decay = 1`` (the largest per-env final epsilon
        when ``epsilon_final_min`` is given), in ``[0, 1]``.
      epsilon_final_min: if given, ``0 < epsilon_final_min <= epsilon_final``:
        per-env final epsilons log-spaced from it (rank 0) to ``epsilon_final``
        (rank ``global_B - 1``).
      eval_epsilon: epsilon of the evaluation agent (``as_eval()``), in ``[0, 1]``.
      activation: hidden nonlinearity (default ReLU).
      layer_norm: layer-normalise each hidden layer before its activation
        (PQN's network, which learns without a target network).
      evaluation: act with ``eval_epsilon`` (set by ``as_eval``).

    State: float32 scalar, the env's final epsilon. ``agent_info``:
    [`EpsilonGreedyInfo`][jaxsample.agents.EpsilonGreedyInfo] ``(q_values [n], epsilon [])``.
    ``value`` is
    ``max_a Q``.
    """

    action_space: Any
    global_B: int
    hidden_sizes: Sequence[int] = (64, 64)
    epsilon_init: float = 1.0
    epsilon_final: float = 0.01
    epsilon_final_min: float | None = None
    eval_epsilon: float = 0.0
    activation: Callable[[jax.Array], jax.Array] = nn.relu
    layer_norm: bool = False
    evaluation: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.action_space, spaces.Discrete):
            raise TypeError(
                "action_space must be gymnax.environments.spaces.Discrete, got "
                f"{type(self.action_space).__name__}"
            )
        if num_actions(self.action_space) < 1:
            raise ValueError(f"action_space must have at least one action, got {self.action_space}")
        if isinstance(self.global_B, bool) or not isinstance(self.global_B, int | np.integer):
            raise TypeError(f"global_B must be an int, got {self.global_B!r}")
        if self.global_B < 1:
            raise ValueError(f"global_B must be >= 1, got {self.global_B}")
        object.__setattr__(self, "global_B", int(self.global_B))
        object.__setattr__(self, "hidden_sizes", validate_hidden_sizes(self.hidden_sizes))
        for name in ("epsilon_init", "epsilon_final", "eval_epsilon"):
            object.__setattr__(self, name, _check_probability(name, getattr(self, name)))
        if self.epsilon_final_min is not None:
            value = _check_probability(
                "epsilon_final_min", self.epsilon_final_min, allow_zero=False
            )
            if value > self.epsilon_final:
                raise ValueError(
                    f"epsilon_final_min must be <= epsilon_final ({self.epsilon_final}), "
                    f"got {value}"
                )
            object.__setattr__(self, "epsilon_final_min", value)
        if not callable(self.activation):
            raise TypeError(f"activation must be callable, got {self.activation!r}")
        if not isinstance(self.layer_norm, bool):
            raise TypeError(f"layer_norm must be a bool, got {self.layer_norm!r}")
        if not isinstance(self.evaluation, bool):
            raise TypeError(f"evaluation must be a bool, got {self.evaluation!r}")

    # -- network -------------------------------------------------------------

    @property
    def n_actions(self) -> int:
        return num_actions(self.action_space)

    @property
    def network(self) -> QNetwork:
        """The flax Q-network module."""
        return QNetwork(self.n_actions, self.hidden_sizes, self.activation, self.layer_norm)

    def init(self, key: jax.Array, observation: PyTree) -> EpsilonGreedyParams:
        """Params from ONE example observation (no batch axis); ``decay = 0``."""
        network = self.network.init(key, flatten_observation(observation))
        return EpsilonGreedyParams(network=network, decay=jnp.zeros((), jnp.float32))

    def q_values(self, network_params: PyTree, observation: PyTree) -> jax.Array:
        """``[n]`` float32 Q-values of one observation (``network_params`` = ``params.network``)."""
        x = flatten_observation(observation)
        p = network_params["params"]
        layer = p["torso"]["dense_0"] if self.hidden_sizes else p["q_head"]
        check_features(x, layer["kernel"].shape[0])
        return self.network.apply(network_params, x)

    # -- epsilon -------------------------------------------------------------

    def final_epsilons(self) -> np.ndarray:
        """``[global_B]`` float64 numpy: every rank's final epsilon (for logging)."""
        if self.epsilon_final_min is None:
            return np.full((self.global_B,), self.epsilon_final)
        return np.logspace(
            math.log10(self.epsilon_final_min), math.log10(self.epsilon_final), self.global_B
        )

    def epsilon(self, params: EpsilonGreedyParams, state: jax.Array) -> jax.Array:
        """The float32 scalar epsilon used at a step, from ``params.decay`` and ``state``."""
        if self.evaluation:
            return jnp.asarray(self.eval_epsilon, jnp.float32)
        decay = jnp.asarray(params.decay)
        if decay.shape != ():
            raise ValueError(
                f"params.decay must be a scalar (one env's params), got shape {decay.shape}"
            )
        decay = jnp.clip(decay.astype(jnp.float32), 0.0, 1.0)
        init = jnp.asarray(self.epsilon_init, jnp.float32)
        # == init + decay * (state - init), written so that decay = 1 gives state exactly.
        return (1.0 - decay) * init + decay * state

    # -- protocol ------------------------------------------------------------

    def initial_state(self, env_rank: jax.Array) -> jax.Array:
        """This env's final epsilon, float32 scalar (``env_rank``: int32 scalar, may be traced)."""
        if self.epsilon_final_min is None or self.global_B == 1:
            eps = self.epsilon_final if self.epsilon_final_min is None else self.epsilon_final_min
            return jnp.full((), eps, jnp.float32)
        rank = jnp.clip(jnp.asarray(env_rank, jnp.int32), 0, self.global_B - 1)
        frac = rank.astype(jnp.float32) / jnp.float32(self.global_B - 1)
        log_min = math.log10(self.epsilon_final_min)
        log_max = math.log10(self.epsilon_final)
        exponent = jnp.float32(log_min) + frac * jnp.float32(log_max - log_min)
        return jnp.power(jnp.float32(10.0), exponent)

    def step(
        self, params: EpsilonGreedyParams, inputs: AgentInputs, state: jax.Array, key: jax.Array
    ) -> tuple[AgentStep, jax.Array]:
        """Greedy action w.p. ``1 - epsilon``, else uniform over all ``n`` actions.

        With ``inputs.action_mask`` (bool ``[n]``) both are over the legal
        actions only: the greedy action maximises Q over them and the random
        one is uniform among them (``q_values`` in the info stay the
        network's, unmasked). The action is a scalar of the space's dtype;
        the state is returned unchanged.
        """
        q = self.q_values(params.network, inputs.observation)
        eps = self.epsilon(params, state)
        explore_key, action_key = jax.random.split(key)
        explore = jax.random.uniform(explore_key, (), jnp.float32) < eps
        mask = inputs.action_mask
        if mask is None:
            random_action = jax.random.randint(action_key, (), 0, self.n_actions, jnp.int32)
        else:
            random_action = uniform_legal(action_key, legal(mask, self.n_actions))
        greedy_action = masked_argmax(q, mask)
        action = jnp.where(explore, random_action, greedy_action).astype(self.action_space.dtype)
        info = EpsilonGreedyInfo(q_values=q, epsilon=eps)
        return AgentStep(action=action, agent_info=info), state

    def value(
        self, params: EpsilonGreedyParams, inputs: AgentInputs, state: jax.Array
    ) -> jax.Array:
        """``max_a Q(observation, a)`` over the legal actions of
        ``inputs.action_mask`` (all without one): float32 scalar."""
        del state
        return masked_max(self.q_values(params.network, inputs.observation), inputs.action_mask)

    def as_eval(self) -> EpsilonGreedyAgent:
        """The copy acting with ``eval_epsilon`` (same params and state)."""
        return dataclasses.replace(self, evaluation=True)

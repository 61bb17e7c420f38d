"""Recurrent (GRU / LSTM) actor-critic:
[`RecurrentActorCritic`][jaxsample.agents.RecurrentActorCritic].

Unbatched like every agent (ONE environment; the sampler vmaps). The recurrent
state is the cell's carry: ``[H]`` float32 for a GRU, ``(c [H], h [H])`` for an
LSTM; ``initial_state`` is zeros, the same for every env rank.

Per step the network sees ``concat(flatten(observation), prev_action_features,
prev_reward[None])`` where ``prev_action_features`` is a one-hot ``[n]`` of the
previous action for a ``Discrete`` space (the null action after a reset is action
0, so its one-hot is that of action 0, as in rlpyt) or the raw flattened previous
action for a ``Box``; either input can be switched off. Then an optional MLP
encoder, the cell, and linear policy / value heads (CleanRL init: orthogonal
``0.01`` / ``1.0``).

The learner recomputes a collected sequence with
[`RecurrentActorCritic.unroll`][jaxsample.agents.RecurrentActorCritic.unroll]
(one env, time-major ``[T, ...]``, ``lax.scan``), or gets PPO's quantities from
[`RecurrentActorCritic.evaluate_sequence`][jaxsample.agents.RecurrentActorCritic.evaluate_sequence];
vmap either over ``B`` (the
sampler stores the state at the start of each batch in
``samples.agent.initial_state`` and ``reset[t] = done[t - 1]``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from jaxsample.agents.actor_critic import (
    Heads,
    MLPTorso,
    act,
    check_actor_critic,
    check_features,
    flatten_observation,
)
from jaxsample.agents.base import null_action
from jaxsample.agents.initializers import orthogonal
from jaxsample.types import AgentInputs, AgentStep, PyTree

_CELLS = ("gru", "lstm")


class RecurrentActorCriticNet(nn.Module):
    """``(carry, features [D]) -> (carry, policy_out [num_outputs], log_std | None, value [])``."""

    heads: Heads
    hidden_size: int
    cell: str
    encoder_sizes: tuple[int, ...]
    activation: Callable[[jax.Array], jax.Array]

    @nn.compact
    def __call__(
        self, carry: PyTree, x: jax.Array
    ) -> tuple[PyTree, jax.Array, jax.Array | None, jax.Array]:
        x = MLPTorso(self.encoder_sizes, self.activation, name="encoder")(x)
        if self.cell == "gru":
            cell = nn.GRUCell(
                features=self.hidden_size, recurrent_kernel_init=orthogonal(), name="cell"
            )
        else:
            cell = nn.OptimizedLSTMCell(
                features=self.hidden_size, recurrent_kernel_init=orthogonal(), name="cell"
            )
        carry, y = cell(carry, x)
        return carry, *self.heads(self, y, y)


@dataclasses.dataclass(frozen=True)
class RecurrentActorCritic:
    """GRU / LSTM actor-critic for a ``Discrete`` or ``Box`` action space (one env).

    Attributes:
      action_space: ``Discrete`` (categorical policy, ``dist_params`` = logits
        ``[n]``) or ``Box`` (diagonal Gaussian with a learned state-independent
        ``log_std``, ``dist_params`` = ``(mean, log_std)`` shaped like the action;
        sampled unclipped, the env clips); anything else is a TypeError.
      hidden_size: width ``H`` of the cell.
      cell: ``"gru"`` or ``"lstm"``.
      use_prev_action: feed the previous action.
      use_prev_reward: feed the previous reward.
      greedy: act with the mode (argmax / mean) instead of sampling.
      encoder_sizes: widths of an MLP applied to the features before the cell
        (default none).
      activation: the encoder's nonlinearity.
      log_std_init: initial ``log_std`` (Box only).

    ``params`` is the flax variables dict returned by ``init``; ``agent_info`` is
    [`ActorCriticInfo`][jaxsample.agents.ActorCriticInfo] ``(log_prob [], value [], dist_params)``.
    """

    action_space: Any
    hidden_size: int = 128
    cell: Literal["gru", "lstm"] = "gru"
    use_prev_action: bool = True
    use_prev_reward: bool = True
    greedy: bool = False
    encoder_sizes: Sequence[int] = ()
    activation: Callable[[jax.Array], jax.Array] = nn.tanh
    log_std_init: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.hidden_size, bool) or not isinstance(self.hidden_size, int):
            raise TypeError(f"hidden_size must be an int, got {self.hidden_size!r}")
        if self.hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {self.hidden_size}")
        if self.cell not in _CELLS:
            raise ValueError(f"cell must be one of {_CELLS}, got {self.cell!r}")
        flags = ("use_prev_action", "use_prev_reward", "greedy")
        check_actor_critic(self, (spaces.Discrete, spaces.Box), "encoder_sizes", flags)

    # -- network -------------------------------------------------------------

    @property
    def network(self) -> RecurrentActorCriticNet:
        """The flax module."""
        return RecurrentActorCriticNet(
            heads=Heads.of(self._head, self.log_std_init),
            hidden_size=self.hidden_size,
            cell=self.cell,
            encoder_sizes=self.encoder_sizes,
            activation=self.activation,
        )

    def features(self, inputs: AgentInputs) -> jax.Array:
        """``[D]`` float32: flattened observation (+ prev action features, + prev reward)."""
        parts = [flatten_observation(inputs.observation)]
        if self.use_prev_action:
            parts.append(self._head.prev_action_features(inputs.prev_action))
        if self.use_prev_reward:
            reward = jnp.asarray(inputs.prev_reward)
            if reward.shape != ():
                raise ValueError(
                    "prev_reward must be a scalar: agents act on ONE environment's inputs "
                    f"(no batch axis; the sampler vmaps), got shape {reward.shape}"
                )
            parts.append(jnp.reshape(reward, (1,)).astype(jnp.float32))
        return jnp.concatenate(parts)

    def init(self, key: jax.Array, observation: PyTree) -> PyTree:
        """Parameters (a flax variables dict) from ONE example observation (no batch axis)."""
        inputs = AgentInputs(
            observation=observation,
            prev_action=null_action(self.action_space),
            prev_reward=jnp.zeros((), jnp.float32),
        )
        carry = self.initial_state(jnp.zeros((), jnp.int32))
        return self.network.init(key, carry, self.features(inputs))

    def _expected_features(self, params: PyTree) -> int:
        p = params["params"]
        if self.encoder_sizes:
            return p["encoder"]["dense_0"]["kernel"].shape[0]
        first = "ir" if self.cell == "gru" else "ii"
        return p["cell"][first]["kernel"].shape[0]

    def _check_state(self, state: PyTree) -> None:
        expected = jax.tree.structure(self.initial_state(jnp.zeros((), jnp.int32)))
        if jax.tree.structure(state) != expected or any(
            jnp.shape(x) != (self.hidden_size,) for x in jax.tree.leaves(state)
        ):
            shapes = jax.tree.map(jnp.shape, state)
            raise ValueError(
                f"state must be the {self.cell} carry of ONE env (leaves "
                f"[{self.hidden_size}], structure {expected}), got shapes {shapes}"
            )

    def apply_step(
        self, params: PyTree, inputs: AgentInputs, state: PyTree
    ) -> tuple[PyTree, jax.Array, PyTree]:
        """One cell step: ``(dist_params, value [], next_state)`` (logits
        masked by ``inputs.action_mask`` where it is not None)."""
        self._check_state(state)
        x = self.features(inputs)
        check_features(x, self._expected_features(params), "inputs")
        next_state, out, log_std, value = self.network.apply(params, state, x)
        dist_params = self._head.masked(self._head.dist_params(out, log_std), inputs.action_mask)
        return dist_params, value, next_state

    # -- protocol ------------------------------------------------------------

    def initial_state(self, env_rank: jax.Array) -> PyTree:
        """Zeros: ``[H]`` (GRU) or ``(c [H], h [H])`` (LSTM), float32; same for every rank."""
        del env_rank
        zeros = jnp.zeros((self.hidden_size,), jnp.float32)
        return zeros if self.cell == "gru" else (zeros, zeros)

    def step(
        self, params: PyTree, inputs: AgentInputs, state: PyTree, key: jax.Array
    ) -> tuple[AgentStep, PyTree]:
        """Advance the cell on ``inputs`` and act.

        Returns ``(AgentStep(action, ActorCriticInfo(log_prob, value, dist_params)),
        next_state)``. Resetting the state after an episode end is the caller's
        job (the sampler puts ``initial_state`` back).
        """
        dist_params, value, next_state = self.apply_step(params, inputs, state)
        return act(self._head, dist_params, value, key, self.greedy), next_state

    def value(self, params: PyTree, inputs: AgentInputs, state: PyTree) -> jax.Array:
        """Value of ``inputs`` from ``state`` (what ``step`` would report), float32 scalar.

        The advanced state is discarded: ``state`` is left as it was.
        """
        return self.apply_step(params, inputs, state)[1]

    def as_eval(self) -> RecurrentActorCritic:
        """The greedy copy of this agent (same params)."""
        return dataclasses.replace(self, greedy=True)

    # -- learner-side helpers (one env, time-major; vmap over B) --------------

    def unroll(
        self, params: PyTree, inputs: AgentInputs, initial_state: PyTree, reset: jax.Array
    ) -> tuple[PyTree, jax.Array, PyTree]:
        """Recompute the policy over one env's collected sequence.

        Args:
          params: network parameters.
          inputs: ``AgentInputs`` with leaves ``[T, ...]`` (time-major, one env).
          initial_state: the state before step 0 (``samples.agent.initial_state[b]``).
          reset: ``[T]`` bool; ``reset[t]`` resets the state to ``initial_state(.)``
            (zeros) BEFORE step ``t``: the sampler's ``done[t - 1]`` (pass
            ``reset[0] = False`` to continue from ``initial_state``).

        Returns:
          ``(dist_params, values, final_state)``: ``dist_params`` with a leading
          ``[T]`` axis, ``values`` ``[T]`` float32 and the state after step
          ``T - 1`` (not reset, even if the episode ended there).
        """
        reset = jnp.asarray(reset)
        lengths = {jnp.shape(x)[0] if jnp.ndim(x) else None for x in jax.tree.leaves(inputs)}
        if len(lengths) != 1 or None in lengths:
            raise ValueError(
                "inputs leaves must all have the same leading time axis [T, ...], got shapes "
                f"{jax.tree.map(jnp.shape, inputs)}"
            )
        (length,) = lengths
        if reset.shape != (length,) or reset.dtype != jnp.bool_:
            raise ValueError(
                f"reset must be a [T] = [{length}] bool array, got {reset.shape} {reset.dtype}"
            )
        zeros = self.initial_state(jnp.zeros((), jnp.int32))

        def body(
            state: PyTree, x: tuple[AgentInputs, jax.Array]
        ) -> tuple[PyTree, tuple[PyTree, jax.Array]]:
            step_inputs, step_reset = x
            state = jax.tree.map(lambda z, s: jnp.where(step_reset, z, s), zeros, state)
            dist_params, value, next_state = self.apply_step(params, step_inputs, state)
            return next_state, (dist_params, value)

        final_state, (dist_params, values) = jax.lax.scan(body, initial_state, (inputs, reset))
        return dist_params, values, final_state

    def evaluate_sequence(
        self,
        params: PyTree,
        inputs: AgentInputs,
        initial_state: PyTree,
        reset: jax.Array,
        action: jax.Array,
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(log_prob [T], entropy [T], value [T])`` of ``action`` ``[T, *act]`` (for PPO).

        Arguments as for [`unroll`][jaxsample.agents.RecurrentActorCritic.unroll].
        """
        dist_params, values, _ = self.unroll(params, inputs, initial_state, reset)
        log_prob = jax.vmap(self._head.log_prob)(dist_params, action)
        entropy = jax.vmap(self._head.entropy)(dist_params)
        return log_prob, entropy, values

    def dist_log_prob(self, dist_params: PyTree, action: jax.Array) -> jax.Array:
        """Log-probability of ``action`` under stored ``dist_params`` (one step): scalar."""
        return self._head.log_prob(dist_params, action)

    def dist_entropy(self, dist_params: PyTree) -> jax.Array:
        """Entropy of the distribution with ``dist_params`` (one step): scalar."""
        return self._head.entropy(dist_params)

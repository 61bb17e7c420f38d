"""Feedforward actor-critic agents:
[`CategoricalActorCritic`][jaxsample.agents.CategoricalActorCritic] and
[`GaussianActorCritic`][jaxsample.agents.GaussianActorCritic].

Both follow the unbatched agent protocol of [`jaxsample.agents.Agent`][jaxsample.agents.Agent]:
every
function acts on ONE environment (no batch axis); the sampler vmaps them. The
network is a flax linen MLP with separate actor and critic torsos and CleanRL's
PPO initialisation (orthogonal kernels, zero biases; hidden layers ``std=sqrt(2)``,
policy head ``0.01``, value head ``1.0``).

The observation may be any pytree: its leaves are cast to float32, flattened and
concatenated (in ``jax.tree.leaves`` order) into one feature vector ``[D]``.

``agent_info`` is [`ActorCriticInfo`][jaxsample.agents.ActorCriticInfo] ``(log_prob, value,
dist_params)``:

* categorical: ``dist_params`` = logits ``[n]``, masked where the inputs
  have an ``action_mask`` (illegal logits ``finfo.min``:
  [`jaxsample.agents.masks.masked_logits`][jaxsample.agents.masked_logits]), so the action, its
  log-probability and the entropy are the masked distribution's;
* Gaussian: ``dist_params`` = ``(mean, log_std)``, both shaped like the action.

The learner-side helpers (``log_prob``, ``entropy``, ``evaluate``,
``dist_log_prob``, ``dist_entropy``) are unbatched too: ``jax.vmap`` them over
``[T, B]`` (or a flat minibatch axis) in the loss.
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
from gymnax.environments import spaces

from jaxsample.agents.base import Stateless
from jaxsample.agents.initializers import orthogonal
from jaxsample.agents.masks import masked_logits
from jaxsample.types import AgentInputs, AgentStep, PyTree

_LOG_2PI = math.log(2.0 * math.pi)


class ActorCriticInfo(NamedTuple):
    """``agent_info`` of the actor-critic agents (one env; the sampler adds ``[T, B]``).

    Attributes:
      log_prob: float32 scalar, log-probability of the action taken under the
        behaviour policy (for a greedy agent: of the greedy action).
      value: float32 scalar, the critic's value of the inputs.
      dist_params: the policy's distribution parameters: logits ``[n]`` (float32)
        for a categorical policy, ``(mean, log_std)`` (each ``[*act]`` float32)
        for a Gaussian one.
    """

    log_prob: jax.Array
    value: jax.Array
    dist_params: PyTree


# ----------------------------------------------------------------------------
# Distributions (pure, unbatched)
# ----------------------------------------------------------------------------


def categorical_log_prob(logits: jax.Array, action: jax.Array) -> jax.Array:
    """``log softmax(logits)[action]``; ``logits`` ``[n]``, ``action`` int scalar -> scalar."""
    return jax.nn.log_softmax(logits)[action]


def categorical_entropy(logits: jax.Array) -> jax.Array:
    """Entropy of ``softmax(logits)``; ``logits`` ``[n]`` -> float32 scalar."""
    log_p = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(log_p) * log_p)


def gaussian_log_prob(mean: jax.Array, log_std: jax.Array, action: jax.Array) -> jax.Array:
    """Log-density of a diagonal Gaussian, summed over all action dimensions.

    ``mean``, ``log_std`` and ``action`` all have the action's shape ``[*act]``;
    returns a float32 scalar.
    """
    z = (action - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * jnp.square(z) - log_std - 0.5 * _LOG_2PI)


def gaussian_entropy(log_std: jax.Array) -> jax.Array:
    """Entropy of a diagonal Gaussian; ``log_std`` ``[*act]`` -> float32 scalar."""
    return jnp.sum(log_std + 0.5 * (1.0 + _LOG_2PI))


# ----------------------------------------------------------------------------
# Policy heads: what depends on the action space
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CategoricalHead:
    """Categorical policy over ``Discrete(n)``; ``dist_params`` = logits ``[n]``."""

    n: int
    dtype: Any

    @property
    def num_outputs(self) -> int:
        return self.n

    def log_prob(self, dist_params: jax.Array, action: jax.Array) -> jax.Array:
        return categorical_log_prob(dist_params, action)

    def entropy(self, dist_params: jax.Array) -> jax.Array:
        return categorical_entropy(dist_params)

    def sample(self, dist_params: jax.Array, key: jax.Array) -> jax.Array:
        return jax.random.categorical(key, dist_params).astype(self.dtype)

    def mode(self, dist_params: jax.Array) -> jax.Array:
        return jnp.argmax(dist_params).astype(self.dtype)

    def dist_params(self, out: jax.Array, log_std: jax.Array | None) -> jax.Array:
        """The logits: the network's policy output ``[n]`` as it is."""
        del log_std
        return out

    def masked(self, dist_params: jax.Array, action_mask: jax.Array | None) -> jax.Array:
        """The logits with the illegal actions of ``action_mask`` (bool ``[n]``
        or None) at ``finfo.min``."""
        return masked_logits(dist_params, action_mask)

    def prev_action_features(self, prev_action: jax.Array) -> jax.Array:
        """One-hot ``[n]`` float32 (the null action 0 maps to action 0's one-hot)."""
        _check_prev_action(prev_action, ())
        return jax.nn.one_hot(prev_action, self.n, dtype=jnp.float32)


@dataclasses.dataclass(frozen=True)
class GaussianHead:
    """Diagonal Gaussian over a ``Box``; ``dist_params`` = ``(mean, log_std)``.

    ``low`` and ``high`` are the Box's bounds, flattened (``-inf`` / ``inf``
    where it has none): the greedy action (`mode`) is the mean of the action
    the environment executes, which clips to them.
    """

    shape: tuple[int, ...]
    dtype: Any
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()

    @property
    def num_outputs(self) -> int:
        return math.prod(self.shape)

    def log_prob(self, dist_params: tuple[jax.Array, jax.Array], action: jax.Array) -> jax.Array:
        mean, log_std = dist_params
        return gaussian_log_prob(mean, log_std, action.astype(jnp.float32))

    def entropy(self, dist_params: tuple[jax.Array, jax.Array]) -> jax.Array:
        return gaussian_entropy(dist_params[1])

    def sample(self, dist_params: tuple[jax.Array, jax.Array], key: jax.Array) -> jax.Array:
        mean, log_std = dist_params
        noise = jax.random.normal(key, mean.shape, jnp.float32)
        return (mean + jnp.exp(log_std) * noise).astype(self.dtype)

    def mode(self, dist_params: tuple[jax.Array, jax.Array]) -> jax.Array:
        """The greedy action: ``E[clip(a, low, high)]`` for ``a ~ N(mean, std)``,
        the mean of what the environment executes (it clips to the Box). Not
        ``clip(mean)``: a policy trained with clipped actions may keep its mean
        beyond a bound, and acting with the bound there makes it a bang-bang
        controller that its sampled actions are not (on Brax's inverted
        pendulum, mid-training: returns ~200 against ~1000). Where the Box is
        unbounded, or the mean lies well inside it, this is the mean."""
        mean, log_std = dist_params
        if not self.low:
            return mean.astype(self.dtype)
        return expected_clipped(mean, jnp.exp(log_std), self.bounds()).astype(self.dtype)

    def bounds(self) -> tuple[jax.Array, jax.Array]:
        """``(low, high)`` shaped like the action, float32."""
        low = jnp.reshape(jnp.asarray(self.low, jnp.float32), self.shape)
        return low, jnp.reshape(jnp.asarray(self.high, jnp.float32), self.shape)

    def masked(self, dist_params: PyTree, action_mask: jax.Array | None) -> PyTree:
        """``dist_params`` as they are: a ``Box`` has no legal-action mask."""
        if action_mask is not None:
            raise ValueError("action_mask: a Box action space has no legal-action mask")
        return dist_params

    def dist_params(self, out: jax.Array, log_std: jax.Array | None) -> tuple[jax.Array, jax.Array]:
        """``(mean, log_std)`` shaped like the action, from the network's policy
        output and ``log_std`` (each ``[prod(act)]``)."""
        return jnp.reshape(out, self.shape), jnp.reshape(log_std, self.shape)

    def prev_action_features(self, prev_action: jax.Array) -> jax.Array:
        """The raw previous action, flattened to ``[prod(act)]`` float32."""
        _check_prev_action(prev_action, self.shape)
        return jnp.ravel(prev_action).astype(jnp.float32)


def _check_prev_action(prev_action: jax.Array, shape: tuple[int, ...]) -> None:
    if jnp.shape(prev_action) != shape:
        raise ValueError(
            f"prev_action must have the action's shape {shape}: agents act on ONE "
            f"environment's inputs (no batch axis; the sampler vmaps), got "
            f"{jnp.shape(prev_action)}"
        )


def _space_name(space: Any) -> str:
    return type(space).__name__


def expected_clipped(
    mean: jax.Array, std: jax.Array, bounds: tuple[jax.Array, jax.Array]
) -> jax.Array:
    """``E[clip(x, low, high)]`` for ``x ~ N(mean, std**2)``, elementwise:
    ``low P(x < low) + high P(x > high)`` plus the mean of ``x`` over
    ``[low, high]``. Infinite bounds drop their term."""
    from jax.scipy.stats import norm

    low, high = bounds
    a = jnp.where(jnp.isfinite(low), (low - mean) / std, -jnp.inf)
    b = jnp.where(jnp.isfinite(high), (high - mean) / std, jnp.inf)
    below = jnp.where(jnp.isfinite(low), low * norm.cdf(a), 0.0)
    above = jnp.where(jnp.isfinite(high), high * norm.sf(b), 0.0)
    inside = mean * (norm.cdf(b) - norm.cdf(a)) + std * (norm.pdf(a) - norm.pdf(b))
    return below + above + inside


def _flat_bounds(action_space: Any, shape: tuple[int, ...]) -> tuple[tuple[float, ...], ...]:
    """The Box's ``(low, high)`` broadcast to ``shape`` and flattened to floats;
    ``((), ())`` when it is unbounded everywhere."""
    low = np.broadcast_to(np.asarray(action_space.low, np.float64), shape).ravel()
    high = np.broadcast_to(np.asarray(action_space.high, np.float64), shape).ravel()
    if not (np.isfinite(low).any() or np.isfinite(high).any()):
        return (), ()
    return tuple(float(x) for x in low), tuple(float(x) for x in high)


def make_head(action_space: Any, allowed: Sequence[type]) -> CategoricalHead | GaussianHead:
    """The policy head for ``action_space``; TypeError naming ``action_space`` otherwise."""
    names = " or ".join(f"gymnax.environments.spaces.{t.__name__}" for t in allowed)
    if not isinstance(action_space, tuple(allowed)):
        raise TypeError(f"action_space must be {names}, got {_space_name(action_space)}")
    if isinstance(action_space, spaces.Discrete):
        if int(action_space.n) < 1:
            raise ValueError(f"action_space must have at least one action, got n={action_space.n}")
        return CategoricalHead(n=int(action_space.n), dtype=jnp.dtype(action_space.dtype))
    shape = action_space.shape
    shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
    dtype = jnp.dtype(action_space.dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"action_space (a Box) must have a floating dtype, got {dtype}")
    low, high = _flat_bounds(action_space, shape)
    return GaussianHead(shape=shape, dtype=dtype, low=low, high=high)


# ----------------------------------------------------------------------------
# Networks
# ----------------------------------------------------------------------------


def flatten_observation(observation: PyTree) -> jax.Array:
    """One env's observation pytree -> ``[D]`` float32 (leaves raveled, concatenated)."""
    leaves = jax.tree.leaves(observation)
    if not leaves:
        raise ValueError("observation has no array leaves")
    return jnp.concatenate([jnp.ravel(jnp.asarray(x)).astype(jnp.float32) for x in leaves])


def check_features(features: jax.Array, expected: int, what: str = "observation") -> None:
    """Trace-time check that the flattened inputs match the size the params expect."""
    if features.shape != (expected,):
        raise ValueError(
            f"{what} flattens to {features.shape[0]} features but params expect {expected}: "
            "agents act on ONE environment's inputs (no batch axis; the sampler vmaps), "
            "with the same structure as the example given to init"
        )


def orthogonal_dense(features: int, scale: float, name: str | None = None) -> nn.Dense:
    """A dense layer with CleanRL's init: orthogonal kernel (``scale``), zero bias."""
    return nn.Dense(
        features,
        kernel_init=orthogonal(scale),
        bias_init=nn.initializers.zeros,
        name=name,
    )


def act(
    head: CategoricalHead | GaussianHead,
    dist_params: PyTree,
    value: jax.Array,
    key: jax.Array,
    greedy: bool,
) -> AgentStep:
    """The actor-critic agents' ``AgentStep``: the mode of the policy (``greedy``)
    or a sample drawn with ``key``, and ``ActorCriticInfo(log_prob, value,
    dist_params)``."""
    action = head.mode(dist_params) if greedy else head.sample(dist_params, key)
    info = ActorCriticInfo(
        log_prob=head.log_prob(dist_params, action), value=value, dist_params=dist_params
    )
    return AgentStep(action=action, agent_info=info)


class Heads(NamedTuple):
    """The policy and value heads of an actor-critic flax module (one of its
    fields): ``num_outputs`` policy outputs, and for a Gaussian policy a
    state-independent ``log_std`` parameter initialised to ``log_std_init``."""

    num_outputs: int
    gaussian: bool = False
    log_std_init: float = 0.0

    @classmethod
    def of(cls, head: CategoricalHead | GaussianHead, log_std_init: float = 0.0) -> Heads:
        """The heads of an agent's policy ``head``."""
        return cls(head.num_outputs, isinstance(head, GaussianHead), log_std_init)

    def __call__(
        self, module: nn.Module, policy_in: jax.Array, value_in: jax.Array
    ) -> tuple[jax.Array, jax.Array | None, jax.Array]:
        """Inside ``module``'s compact ``__call__`` (the layers and ``log_std``
        are ``module``'s): ``(policy_out [num_outputs], log_std
        [num_outputs] | None, value [])``."""
        policy_out = orthogonal_dense(self.num_outputs, 0.01, name="policy_head")(policy_in)
        value = orthogonal_dense(1, 1.0, name="value_head")(value_in)
        log_std = None
        if self.gaussian:
            log_std = module.param(
                "log_std", nn.initializers.constant(self.log_std_init), (self.num_outputs,)
            )
        return policy_out, log_std, jnp.reshape(value, ())


class MLPTorso(nn.Module):
    """``[D] -> [hidden_sizes[-1]]`` (identity when ``hidden_sizes`` is empty);
    with ``layer_norm`` each dense layer's output is layer-normalised
    (``norm_<i>``) before the activation, as PQN's Q-network is."""

    hidden_sizes: tuple[int, ...]
    activation: Callable[[jax.Array], jax.Array]
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, size in enumerate(self.hidden_sizes):
            x = orthogonal_dense(size, math.sqrt(2.0), name=f"dense_{i}")(x)
            if self.layer_norm:
                x = nn.LayerNorm(name=f"norm_{i}")(x)
            x = self.activation(x)
        return x


class ActorCriticMLP(nn.Module):
    """Separate actor and critic MLPs on one feature vector ``[D]``.

    Returns ``(policy_out, log_std, value)`` of its `Heads`:
    ``policy_out`` ``[num_outputs]``, ``log_std`` ``[num_outputs]`` (a
    state-independent parameter) or None for a categorical policy, ``value`` a
    float32 scalar.
    """

    heads: Heads
    hidden_sizes: tuple[int, ...]
    activation: Callable[[jax.Array], jax.Array]

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array | None, jax.Array]:
        actor = MLPTorso(self.hidden_sizes, self.activation, name="actor")(x)
        critic = MLPTorso(self.hidden_sizes, self.activation, name="critic")(x)
        return self.heads(self, actor, critic)


def apply_actor_critic(
    params: PyTree, x: jax.Array, layers: int, activation: Callable[[jax.Array], jax.Array]
) -> tuple[jax.Array, jax.Array | None, jax.Array]:
    """``ActorCriticMLP(...).apply(params, x)`` for its ``params`` (``layers``
    hidden layers, no layer norm) without flax's module machinery: the same
    operations in the same order, so the same program and values (a test
    compares the two jaxprs), traced in a fraction of the time
    (docs/benchmarks.md)."""
    p = params["params"]

    def dense(layer: PyTree, h: jax.Array) -> jax.Array:  # flax.linen.Dense.__call__'s
        y = jax.lax.dot_general(h, layer["kernel"], (((h.ndim - 1,), (0,)), ((), ())))
        return y + jnp.reshape(layer["bias"], (1,) * (y.ndim - 1) + (-1,))

    def torso(layers_params: PyTree, h: jax.Array) -> jax.Array:
        for i in range(layers):
            h = activation(dense(layers_params[f"dense_{i}"], h))
        return h

    actor, critic = torso(p.get("actor"), x), torso(p.get("critic"), x)  # none: no layers
    out, value = dense(p["policy_head"], actor), dense(p["value_head"], critic)
    return out, p.get("log_std"), jnp.reshape(value, ())


def validate_hidden_sizes(hidden_sizes: Sequence[int], name: str = "hidden_sizes") -> tuple:
    """``hidden_sizes`` as a tuple of positive ints, or a ValueError naming it."""
    try:
        sizes = tuple(hidden_sizes)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints, got {hidden_sizes!r}") from None
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(f"{name} must contain positive ints, got {hidden_sizes!r}")
    return sizes


def check_actor_critic(
    agent: Any, allowed: Sequence[type], sizes: str, flags: Sequence[str] = ("greedy",)
) -> None:
    """The construction checks of the actor-critic agents (frozen dataclasses):
    ``agent.action_space`` one of ``allowed`` (its head stored as
    ``agent._head``), ``agent.<sizes>`` positive ints (stored as a tuple),
    ``agent.activation`` callable, each of ``flags`` a bool."""
    head = make_head(agent.action_space, allowed)
    object.__setattr__(agent, sizes, validate_hidden_sizes(getattr(agent, sizes), sizes))
    if not callable(agent.activation):
        raise TypeError(f"activation must be callable, got {agent.activation!r}")
    for name in flags:
        if not isinstance(getattr(agent, name), bool):
            raise TypeError(f"{name} must be a bool, got {getattr(agent, name)!r}")
    object.__setattr__(agent, "_head", head)


# ----------------------------------------------------------------------------
# Agents
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _FeedforwardActorCritic(Stateless):
    """Shared implementation; see
    [`CategoricalActorCritic`][jaxsample.agents.CategoricalActorCritic]."""

    action_space: Any
    hidden_sizes: Sequence[int] = (64, 64)
    activation: Callable[[jax.Array], jax.Array] = nn.tanh
    greedy: bool = False

    _allowed_spaces = (spaces.Discrete,)

    def __post_init__(self) -> None:
        check_actor_critic(self, self._allowed_spaces, "hidden_sizes")

    # -- network -------------------------------------------------------------

    @property
    def network(self) -> ActorCriticMLP:
        """The flax module (``apply(params, features[D]) -> (out, log_std, value)``)."""
        heads = Heads.of(self._head, getattr(self, "log_std_init", 0.0))
        return ActorCriticMLP(heads, self.hidden_sizes, self.activation)

    def init(self, key: jax.Array, observation: PyTree) -> PyTree:
        """Parameters (a flax variables dict) from ONE example observation (no batch axis)."""
        return self.network.init(key, flatten_observation(observation))

    def _expected_features(self, params: PyTree) -> int:
        p = params["params"]
        if self.hidden_sizes:
            return p["actor"]["dense_0"]["kernel"].shape[0]
        return p["policy_head"]["kernel"].shape[0]

    def forward(
        self, params: PyTree, observation: PyTree, action_mask: jax.Array | None = None
    ) -> tuple[PyTree, jax.Array]:
        """``(dist_params, value)`` of one observation (logits masked by
        ``action_mask``, bool ``[n]``, when given)."""
        x = flatten_observation(observation)
        check_features(x, self._expected_features(params))
        out, log_std, value = apply_actor_critic(params, x, len(self.hidden_sizes), self.activation)
        return self._head.masked(self._head.dist_params(out, log_std), action_mask), value

    # -- protocol ------------------------------------------------------------

    def step(
        self, params: PyTree, inputs: AgentInputs, state: PyTree, key: jax.Array
    ) -> tuple[AgentStep, PyTree]:
        """Sample (or, when ``greedy``, take the mode of) the policy at ``inputs.observation``.

        Returns ``(AgentStep(action, ActorCriticInfo(log_prob, value, dist_params)),
        state)``; the action has the action space's shape and dtype.
        """
        dist_params, value = self.forward(params, inputs.observation, inputs.action_mask)
        return act(self._head, dist_params, value, key, self.greedy), state

    def value(self, params: PyTree, inputs: AgentInputs, state: PyTree) -> jax.Array:
        """The critic's value of ``inputs.observation``: float32 scalar."""
        del state
        return self.forward(params, inputs.observation)[1]

    def as_eval(self) -> Any:
        """The greedy copy of this agent (same params)."""
        return dataclasses.replace(self, greedy=True)

    # -- learner-side helpers (unbatched; vmap them) -------------------------

    def dist_log_prob(self, dist_params: PyTree, action: jax.Array) -> jax.Array:
        """Log-probability of ``action`` under stored ``dist_params``: scalar."""
        return self._head.log_prob(dist_params, action)

    def dist_entropy(self, dist_params: PyTree) -> jax.Array:
        """Entropy of the distribution with ``dist_params``: scalar."""
        return self._head.entropy(dist_params)

    def log_prob(
        self,
        params: PyTree,
        observation: PyTree,
        action: jax.Array,
        action_mask: jax.Array | None = None,
    ) -> jax.Array:
        """Log-probability of ``action`` at ``observation`` under ``params``
        (the masked distribution with ``action_mask``): scalar."""
        return self._head.log_prob(self.forward(params, observation, action_mask)[0], action)

    def entropy(
        self, params: PyTree, observation: PyTree, action_mask: jax.Array | None = None
    ) -> jax.Array:
        """Policy entropy at ``observation`` (masked with ``action_mask``): scalar."""
        return self._head.entropy(self.forward(params, observation, action_mask)[0])

    def evaluate(
        self, params: PyTree, inputs: AgentInputs, action: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(log_prob, entropy, value)`` of ``action`` at ``inputs`` (for PPO;
        the distribution masked by ``inputs.action_mask``): scalars."""
        dist_params, value = self.forward(params, inputs.observation, inputs.action_mask)
        return self._head.log_prob(dist_params, action), self._head.entropy(dist_params), value


@dataclasses.dataclass(frozen=True)
class CategoricalActorCritic(_FeedforwardActorCritic):
    """Categorical MLP actor-critic for a ``Discrete(n)`` action space (one env).

    Attributes:
      action_space: ``gymnax.environments.spaces.Discrete``; anything else is a
        TypeError at construction.
      hidden_sizes: widths of the actor and of the critic torsos (each its own).
      activation: hidden nonlinearity (default ``tanh``, as CleanRL's PPO).
      greedy: act with ``argmax(logits)`` instead of sampling (see ``as_eval``).

    ``params`` is the flax variables dict returned by ``init``. The action is a
    scalar of the space's dtype (int32); ``agent_info`` is
    ``ActorCriticInfo(log_prob [], value [], dist_params=logits [n])``. With
    ``inputs.action_mask`` (bool ``[n]``) the policy is the masked one: only
    legal actions are drawn (or taken greedily), and the stored logits,
    log-probability and entropy are the masked distribution's.
    """

    _allowed_spaces = (spaces.Discrete,)


@dataclasses.dataclass(frozen=True)
class GaussianActorCritic(_FeedforwardActorCritic):
    """Diagonal-Gaussian MLP actor-critic for a ``Box`` action space (one env).

    The mean comes from the actor MLP; ``log_std`` is a learned, state-independent
    parameter (initialised to ``log_std_init``). Actions are sampled UNCLIPPED
    (so ``log_prob`` is exact): the environment clips to the Box bounds (gymnax's
    continuous envs do), and a learner may clip too. The action has the Box's
    shape and dtype (which must be floating; float32 for gymnax's Box). ``agent_info`` is
    ``ActorCriticInfo(log_prob [], value [], dist_params=(mean, log_std))`` with
    ``mean`` and ``log_std`` shaped like the action (the Box's shape, float32).
    A greedy agent (`as_eval`) acts with the mean of the action the
    environment executes, ``E[clip(a, low, high)]`` (`GaussianHead.mode`):
    the mean itself where the Box is unbounded or the mean well inside it.
    """

    log_std_init: float = 0.0

    _allowed_spaces = (spaces.Box,)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.log_std_init, int | float) or not math.isfinite(self.log_std_init):
            raise ValueError(f"log_std_init must be a finite float, got {self.log_std_init!r}")

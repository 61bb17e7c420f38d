"""The static configurations of the off-policy trainers, validated when
constructed: [`SACConfig`][jaxsample.algos.off_policy_configs.SACConfig]
for [`jaxsample.algos.sac`][jaxsample.algos.sac],
[`TD3Config`][jaxsample.algos.off_policy_configs.TD3Config] for
[`jaxsample.algos.td3`][jaxsample.algos.td3] and
[`PQNConfig`][jaxsample.algos.off_policy_configs.PQNConfig] for
[`jaxsample.algos.pqn`][jaxsample.algos.pqn] (each module re-exports its own),
on the checks of [`configs`][jaxsample.algos.configs] (a bad field raises a
[`ConfigError`][jaxsample.errors.ConfigError] that names it, as data:
``error.field``). A module of its own beside ``configs`` (which keeps PPO's
and DQN's) so that neither passes 600 lines.

Imports no JAX (nor numpy), as ``configs``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from jaxsample._checks import MAX_REPLAY_CAPACITY, check_int
from jaxsample.algos.configs import _MAX_TIMESTEPS, _RunLength, check_config, check_float
from jaxsample.errors import ConfigError

__all__ = ["PQNConfig", "SACConfig", "TD3Config"]


_OFF_POLICY_ACTIVATIONS = ("relu", "tanh", "swish")
_OFF_POLICY_POSITIVE_INTS = (
    "buffer_capacity", "batch_size", "gradient_steps", "num_critics", "eval_episodes",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class _ContinuousOffPolicy(_RunLength):
    """The fields SAC and TD3 share (documented on
    [`SACConfig`][jaxsample.algos.off_policy_configs.SACConfig])."""

    env_name: str = "Pendulum-v1"
    num_envs: int = 1
    num_steps: int = 1
    total_timesteps: int = 20_000
    buffer_capacity: int = 100_000
    batch_size: int = 256
    learning_starts: int = 1_000
    gradient_steps: int = 1
    lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    num_critics: int = 2
    max_grad_norm: float | None = None
    adam_eps: float = 1e-8
    normalize_observations: bool = False
    truncation_as_termination: bool = False
    prioritized_replay: bool = False
    priority_alpha: float = 0.6
    priority_beta: float = 0.4
    priority_eps: float = 1e-6
    max_decorrelation_steps: int = 0
    metrics_window: int = 20
    eval_episodes: int = 16

    def _check_off_policy(self, bools: tuple[str, ...] = (), floats: tuple = ()) -> None:
        check_config(
            self,
            ints=[(name, 1) for name in _OFF_POLICY_POSITIVE_INTS] + [("learning_starts", 0)],
            bools=(
                "normalize_observations",
                "truncation_as_termination",
                "prioritized_replay",
                *bools,
            ),
            floats=(
                ("lr", 0.0, math.inf, True),
                ("gamma", 0.0, 1.0, False),
                ("tau", 0.0, 1.0, True),
                ("adam_eps", 0.0, math.inf, False),
                ("priority_alpha", 0.0, 1.0, False),
                ("priority_beta", 0.0, 1.0, False),
                ("priority_eps", 0.0, math.inf, True),
                *floats,
            ),
            sizes=("hidden_sizes",),
        )
        for name, maximum in (
            ("total_timesteps", _MAX_TIMESTEPS),
            ("learning_starts", _MAX_TIMESTEPS),
            ("buffer_capacity", MAX_REPLAY_CAPACITY),
            ("metrics_window", 2**30 - 1),
        ):
            if getattr(self, name) > maximum:
                raise ConfigError(name, f"must be <= {maximum}, got {getattr(self, name)}")
        if self.max_grad_norm is not None:
            check_float("max_grad_norm", self.max_grad_norm, 0.0, math.inf, True)
        if self.activation not in _OFF_POLICY_ACTIVATIONS:
            raise ConfigError(
                "activation", f"must be one of {_OFF_POLICY_ACTIVATIONS}, got {self.activation!r}"
            )


@dataclasses.dataclass(frozen=True)
class SACConfig(_ContinuousOffPolicy):
    """Static configuration of a SAC run (validated when constructed).

    The defaults are CleanRL's and SB3's SAC (Adam 3e-4, batches of 256,
    tau 0.005, 256 x 256 ReLU networks, the temperature learned toward
    ``-|A|``) on Pendulum-v1 for 20k steps, with one env and one gradient step
    per env step; the tuned settings are the presets (``presets.toml``).

    Step counts (``total_timesteps``, ``learning_starts``) are environment
    steps summed over all envs; one iteration collects ``steps_per_iteration =
    num_envs * num_steps`` of them, then takes ``gradient_steps`` gradient
    steps (the replay ratio is ``gradient_steps / steps_per_iteration``).

    Attributes:
      env_name: a gymnax id or ``"<suite>/<env>"`` with a bounded ``Box``
        action space; ignored when [`make_train`][jaxsample.algos.sac.make_train]
        is given an ``env``.
      num_envs: ``B``, environments collected in parallel.
      num_steps: ``T``, steps per env per iteration.
      total_timesteps: the run is ``total_timesteps // (B * T)`` iterations.
      buffer_capacity: replay steps kept per env (``num_envs * buffer_capacity``
        transitions in all).
      batch_size: transitions per gradient step.
      learning_starts: env steps of uniformly random actions first (the
        prefill, kept in the buffer); learning starts once as many are in.
      gradient_steps: gradient steps per iteration once learning has started.
      lr: Adam's learning rate of the actor, the critics and the temperature
        (the default of [`HParams`][jaxsample.algos.sac.HParams]).
      gamma: the discount (also the sampler's, for ``discounted_return``).
      tau: the Polyak step of the target critics, ``target <- tau * online +
        (1 - tau) * target`` after every gradient step.
      hidden_sizes: the actor's and each critic's MLP widths.
      activation: their hidden layers' nonlinearity, ``"relu"``, ``"tanh"``
        or ``"swish"``.
      num_critics: ``K`` critics; the target is their minimum (2: twin).
      max_grad_norm: global gradient-norm clip of each network, or None.
      adam_eps: Adam's epsilon.
      normalize_observations: act and learn on observations normalised by
        their running mean and variance (kept in the agent's parameters,
        checkpointed; the buffer keeps the raw ones).
      truncation_as_termination: the ablation only: no bootstrap at a
        truncated step either (``r + gamma * (1 - done) * ...``, what rejax
        and most JAX code do). False: a truncated step bootstraps from its
        true final observation, a terminated one does not.
      prioritized_replay: use Schaul et al.'s prioritized replay instead of
        the uniform buffer, as DQN's (priorities ``|td| + eps``, the mean
        over critics).
      priority_alpha: its priority exponent, in ``[0, 1]``.
      priority_beta: its importance-weight exponent, in ``[0, 1]`` (constant).
      priority_eps: added to ``|td|`` for the new priorities, ``> 0``.
      max_decorrelation_steps: the sampler's start-state decorrelation.
      metrics_window: episodes averaged by ``StepMetrics`` (``average_return``).
      eval_episodes: episodes of ``evaluate`` (one per env).
      target_entropy: the entropy the temperature is tuned toward; None:
        ``-|A|``.
      alpha_init: the initial temperature, ``> 0``.
      learn_alpha: learn ``log(alpha)``; False keeps ``alpha_init``.
      log_std_min: the lower clip of the actor's ``log_std``.
      log_std_max: the upper clip of the actor's ``log_std``.
    """

    #: The fields that are data (the trainer's ``HParams``, vmapped; a list sweeps).
    HPARAMS: ClassVar[tuple[str, ...]] = ("lr", "gamma", "tau")

    target_entropy: float | None = None
    alpha_init: float = 1.0
    learn_alpha: bool = True
    log_std_min: float = -5.0
    log_std_max: float = 2.0

    def __post_init__(self) -> None:
        self._check_off_policy(
            bools=("learn_alpha",),
            floats=(
                ("alpha_init", 0.0, math.inf, True),
                ("log_std_min", -math.inf, math.inf, False),
                ("log_std_max", -math.inf, math.inf, False),
            ),
        )
        if self.target_entropy is not None:
            check_float("target_entropy", self.target_entropy, -math.inf, math.inf)
        if not (math.isfinite(self.log_std_min) and self.log_std_min < self.log_std_max
                and math.isfinite(self.log_std_max)):  # fmt: skip
            raise ConfigError(
                "log_std_min",
                f"must be finite and < log_std_max ({self.log_std_max}), got {self.log_std_min}",
            )


@dataclasses.dataclass(frozen=True)
class TD3Config(_ContinuousOffPolicy):
    """Static configuration of a TD3 run (validated when constructed).

    The fields of [`SACConfig`][jaxsample.algos.off_policy_configs.SACConfig] but its
    temperature's and ``log_std``'s; the defaults are Fujimoto et al.'s TD3
    (Adam 3e-4, batches of 256, tau 0.005, 256 x 256 ReLU networks,
    exploration noise 0.1, target-policy noise 0.2 clipped at 0.5, the actor
    and the targets updated every second critic update) on Pendulum-v1.

    Attributes:
      exploration_noise: the acting noise's standard deviation in units of the
        Box's half-width; the noisy action is clipped to the Box.
      target_noise: target-policy smoothing: the target action is
        ``clip(mu'(s') + clip(target_noise * eps, -c, c) * scale, low, high)``
        with ``eps`` standard normal, in units of the half-width ``scale``.
      target_noise_clip: ``c`` above, the clip of the smoothing noise, in
        units of the half-width.
      policy_delay: the actor and both targets are updated after every
        ``policy_delay``-th critic update.
    """

    #: The fields that are data (the trainer's ``HParams``, vmapped; a list sweeps).
    HPARAMS: ClassVar[tuple[str, ...]] = ("lr", "gamma", "tau", "target_noise")

    exploration_noise: float = 0.1
    target_noise: float = 0.2
    target_noise_clip: float = 0.5
    policy_delay: int = 2

    def __post_init__(self) -> None:
        self._check_off_policy(
            floats=(
                ("exploration_noise", 0.0, math.inf, False),
                ("target_noise", 0.0, math.inf, False),
                ("target_noise_clip", 0.0, math.inf, False),
            ),
        )
        check_int("policy_delay", self.policy_delay, 1)


@dataclasses.dataclass(frozen=True)
class PQNConfig(_RunLength):
    """Static configuration of a PQN run (validated when constructed).

    The defaults are purejaxql's CartPole-v1 PQN (``config/alg/pqn_cartpole.yaml``):
    32 envs x 64 steps, 5e5 steps, 4 epochs x 16 minibatches, RAdam 1e-4
    linearly annealed, gradients clipped at norm 10, rewards scaled by 0.1,
    gamma 0.99, lambda 0.95, epsilon from 1 to 0.2 over the first fifth of the
    run, a 256 x 256 ReLU network layer-normalised after each hidden layer.

    Attributes:
      env_name: a gymnax environment id or ``"<suite>/<env>"`` with a
        ``Discrete`` action space; ignored when [`make_train`][jaxsample.algos.pqn.make_train]
        is given an ``env``.
      num_envs: ``B``, environments collected in parallel.
      num_steps: ``T``, steps per env per iteration (one batch of
        ``B * T`` steps).
      total_timesteps: the run is ``total_timesteps // (B * T)`` iterations.
      lr: the learning rate (the default of [`HParams`][jaxsample.algos.pqn.HParams]).
      anneal_lr: scale it by ``1 - i / num_iterations`` at iteration ``i``.
      update_epochs: passes over each batch.
      num_minibatches: minibatches of steps per pass (``B * T`` must be
        divisible by it).
      gamma: the discount, in ``[0, 1]`` (default of `HParams`).
      q_lambda: the lambda of the Q(lambda) returns, in ``[0, 1]`` (default
        of `HParams`).
      reward_scale: the targets learn the rewards times this (the reported
        returns are the env's).
      epsilon_init: exploration probability at the start of the run, as
        [`DQNConfig`][jaxsample.algos.configs.DQNConfig]'s.
      epsilon_final: final exploration probability (that of the most
        exploring env when ``epsilon_final_min`` is set), as DQN's.
      epsilon_final_min: None or rlpyt's per-env final epsilons, as DQN's.
      exploration_fraction: fraction of ``total_timesteps`` over which the
        epsilons decay linearly, as DQN's.
      optimizer: ``"radam"`` (purejaxql's) or ``"adam"``.
      max_grad_norm: global gradient-norm clip.
      adam_eps: the optimizer's epsilon.
      hidden_sizes: the Q-network's MLP widths.
      layer_norm: layer-normalise every hidden layer (PQN's stabiliser in
        place of a target network).
      max_decorrelation_steps: the sampler's start-state decorrelation.
      metrics_window: episodes averaged by ``StepMetrics`` (``average_return``).
      eval_episodes: episodes of [`evaluate`][jaxsample.algos.pqn.PQN.evaluate] (one per env).
    """

    HPARAMS: ClassVar[tuple[str, ...]] = ("lr", "gamma", "q_lambda")

    env_name: str = "CartPole-v1"
    num_envs: int = 32
    num_steps: int = 64
    total_timesteps: int = 500_000
    lr: float = 1e-4
    anneal_lr: bool = True
    update_epochs: int = 4
    num_minibatches: int = 16
    gamma: float = 0.99
    q_lambda: float = 0.95
    reward_scale: float = 0.1
    epsilon_init: float = 1.0
    epsilon_final: float = 0.2
    epsilon_final_min: float | None = None
    exploration_fraction: float = 0.2
    optimizer: str = "radam"
    max_grad_norm: float = 10.0
    adam_eps: float = 1e-8
    hidden_sizes: tuple[int, ...] = (256, 256)
    layer_norm: bool = True
    max_decorrelation_steps: int = 0
    metrics_window: int = 100
    eval_episodes: int = 16

    def __post_init__(self) -> None:
        check_config(
            self,
            ints=[("update_epochs", 1), ("num_minibatches", 1), ("eval_episodes", 1)],
            bools=("anneal_lr", "layer_norm"),
            floats=[
                ("lr", 0.0, math.inf, True),
                ("gamma", 0.0, 1.0, False),
                ("q_lambda", 0.0, 1.0, False),
                ("reward_scale", 0.0, math.inf, True),
                ("epsilon_init", 0.0, 1.0, False),
                ("epsilon_final", 0.0, 1.0, False),
                ("exploration_fraction", 0.0, 1.0, False),
                ("max_grad_norm", 0.0, math.inf, True),
                ("adam_eps", 0.0, math.inf, False),
            ],
            sizes=("hidden_sizes",),
        )
        if self.total_timesteps > _MAX_TIMESTEPS:
            raise ValueError(
                f"total_timesteps must be <= {_MAX_TIMESTEPS}, got {self.total_timesteps}"
            )
        if self.epsilon_final_min is not None:
            check_float("epsilon_final_min", self.epsilon_final_min, 0.0, 1.0, True)
            if self.epsilon_final_min > self.epsilon_final:
                raise ValueError(
                    f"epsilon_final_min must be <= epsilon_final ({self.epsilon_final}), "
                    f"got {self.epsilon_final_min}"
                )
        if self.optimizer not in _OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {_OPTIMIZERS}, got {self.optimizer!r}")
        if self.steps_per_iteration % self.num_minibatches:
            raise ValueError(
                f"num_minibatches ({self.num_minibatches}) must divide num_envs * num_steps "
                f"({self.steps_per_iteration})"
            )


_OPTIMIZERS = ("radam", "adam")

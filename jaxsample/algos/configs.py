"""The static configurations of the reference trainers, validated when constructed.

[`PPOConfig`][jaxsample.algos.configs.PPOConfig] (and the preset `MASKED_CARTPOLE_RECURRENT`) for
[`jaxsample.algos.ppo`][jaxsample.algos.ppo], [`DQNConfig`][jaxsample.algos.configs.DQNConfig] for
[`jaxsample.algos.dqn`][jaxsample.algos.dqn]
(both modules re-export theirs). A bad field raises a
[`ConfigError`][jaxsample.errors.ConfigError] (a ``ValueError``) or
[`ConfigTypeError`][jaxsample.errors.ConfigTypeError] (a ``TypeError``) whose
``field`` names it ([`check_config`][jaxsample.algos.configs.check_config],
[`check_float`][jaxsample.algos.configs.check_float]).

This module imports no JAX (nor numpy): the command line builds its flags
and checks their values from it before anything heavy is imported.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any, ClassVar

from jaxsample._checks import MAX_REPLAY_CAPACITY, check_int, numpy_types
from jaxsample.errors import ConfigError, ConfigTypeError

__all__ = [
    "MASKED_CARTPOLE_RECURRENT",
    "SELF_PLAY_CONNECT_FOUR",
    "SELF_PLAY_TIC_TAC_TOE",
    "DQNConfig",
    "PPOConfig",
    "check_config",
    "check_float",
]

_CELLS = ("gru", "lstm")
_ACTIVATIONS = ("tanh", "relu")
_NEGAMAX = ("auto", "on", "off")
_PPO_POSITIVE_INTS = ("update_epochs", "num_minibatches", "rnn_hidden_size", "noise_repeat")
_PPO_NON_NEGATIVE_FLOATS = ("clip_eps", "ent_coef", "vf_coef", "adam_eps")
_LOSSES = ("mse", "huber")
_MAX_TIMESTEPS = 2**31 - 1  # env steps are counted in int32
_DQN_POSITIVE_INTS = (
    "buffer_capacity",
    "batch_size",
    "gradient_steps",
    "target_update_interval",
    "eval_episodes",
)


# ----------------------------------------------------------------------------
# Config checks
# ----------------------------------------------------------------------------


def check_float(name: str, value: Any, low: float, high: float, open_low: bool = False) -> None:
    """Raise a `ConfigError` naming ``name`` unless ``value`` is a real number in
    ``[low, high]`` (``(low, high]`` with ``open_low``); bools and NaN are not."""
    if isinstance(value, bool) or not isinstance(value, (int, float, *numpy_types("floating"))):
        raise ConfigTypeError(name, f"must be a float, got {value!r}")
    above = value > low if open_low else value >= low
    if math.isnan(value) or not above or value > high:
        raise ConfigError(name, f"must be in {'(' if open_low else '['}{low}, {high}], got {value}")


def _check_sizes(config: Any, name: str) -> None:
    """``config.<name>`` must be a sequence of positive ints; stored as a tuple."""
    sizes = getattr(config, name)
    ints = (int, *numpy_types("integer"))
    if not isinstance(sizes, (tuple, list)) or any(
        isinstance(s, bool) or not isinstance(s, ints) or s < 1 for s in sizes
    ):
        raise ConfigError(name, f"must be a tuple of positive ints, got {sizes!r}")
    object.__setattr__(config, name, tuple(int(s) for s in sizes))


def check_config(
    config: Any,
    *,
    ints: Iterable[tuple[str, int]] = (),
    bools: Iterable[str] = (),
    floats: Iterable[tuple[str, float, float, bool]] = (),
    sizes: Iterable[str] = (),
) -> None:
    """The checks every trainer config runs in ``__post_init__``.

    ``config`` (a frozen dataclass with the fields of both trainers' configs:
    ``env_name``, ``num_envs``, ``num_steps``, ``total_timesteps``,
    ``max_decorrelation_steps`` and ``metrics_window``) must have a str
    ``env_name``, positive ints ``num_envs``, ``num_steps``,
    ``total_timesteps``, ``metrics_window`` and a non-negative int
    ``max_decorrelation_steps``; each ``(name, minimum)`` of ``ints`` an int
    field ``>= minimum``; each of
    ``bools`` a bool; each ``(name, low, high, open_low)`` of ``floats`` a
    float ([`check_float`][jaxsample.algos.configs.check_float]); each of ``sizes`` a tuple of
    positive ints
    (a list is stored as a tuple). Last, the run must have an iteration:
    ``total_timesteps >= num_envs * num_steps``.
    """
    if not isinstance(config.env_name, str):
        raise ConfigTypeError("env_name", f"must be a str, got {config.env_name!r}")
    shared = ("num_envs", "num_steps", "total_timesteps", "metrics_window")
    for name, minimum in [*((n, 1) for n in shared), ("max_decorrelation_steps", 0), *ints]:
        check_int(name, getattr(config, name), minimum)
    for name in bools:
        if not isinstance(getattr(config, name), bool):
            raise ConfigTypeError(name, f"must be a bool, got {getattr(config, name)!r}")
    for name, low, high, open_low in floats:
        check_float(name, getattr(config, name), low, high, open_low)
    for name in sizes:
        _check_sizes(config, name)
    per_iteration = config.num_envs * config.num_steps
    if config.total_timesteps < per_iteration:
        raise ConfigError(
            "total_timesteps",
            f"({config.total_timesteps}) must be >= num_envs * num_steps "
            f"({per_iteration}): the run would have no iteration",
        )


class _RunLength:
    """The run length of a config with ``num_envs``, ``num_steps`` and
    ``total_timesteps`` (a base class of both trainers' configs)."""

    num_envs: int
    num_steps: int
    total_timesteps: int

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps per iteration, ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        """Iterations of a full run, ``total_timesteps // steps_per_iteration``."""
        return self.total_timesteps // self.steps_per_iteration


# ----------------------------------------------------------------------------
# PPO
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PPOConfig(_RunLength):
    """Static configuration of a PPO run (validated when constructed).

    The defaults are CleanRL's ``ppo.py`` on CartPole-v1 (4 envs x 128 steps,
    5e5 steps, Adam 2.5e-4 linearly annealed to 0, 4 epochs x 4 minibatches,
    gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01, value 0.5, max grad norm
    0.5, clipped value loss, per-minibatch advantage normalization).

    Attributes:
      env_name: a gymnax environment id or a suite's ``"<suite>/<env>"``
        ([`jaxsample.envs.suites.make`][jaxsample.envs.suites.make]); ignored
        when [`make_train`][jaxsample.algos.ppo.make_train] is given an ``env``.
      num_envs: ``B``, environments collected in parallel.
      num_steps: ``T``, steps per env per iteration (``B * T`` steps per batch).
      total_timesteps: the run is ``total_timesteps // (B * T)`` iterations.
      lr: Adam's learning rate (the default of `lr`).
      anneal_lr: scale the learning rate by ``1 - i / num_iterations`` at
        iteration ``i`` (0-based; 0 past the end of the run).
      update_epochs: passes over each batch.
      num_minibatches: minibatches per epoch. Feedforward: ``B * T`` must be
        divisible by it; recurrent (minibatches of whole env sequences): ``B``
        must.
      gamma: the discount, in ``[0, 1]``.
      gae_lambda: GAE's lambda, in ``[0, 1]``.
      reward_scale: the rewards are multiplied by it before GAE (the values
        learn the scaled return; the reported returns are the env's), as in
        Brax's PPO: rewards of hundreds make value errors whose gradient
        dominates the global-norm clip of the actor's and critic's gradient.
      clip_eps: PPO's ratio clip (default of `clip_eps`).
      clip_vloss: clip the value loss around the old values as CleanRL does.
      ent_coef: the entropy bonus's coefficient (default of `ent_coef`).
      vf_coef: the value loss's coefficient (default of `vf_coef`).
      max_grad_norm: global gradient-norm clip.
      adam_eps: Adam's epsilon (CleanRL: 1e-5).
      normalize_advantages: normalize the advantages per minibatch.
      recurrent: use [`RecurrentActorCritic`][jaxsample.agents.RecurrentActorCritic].
      hidden_sizes: the feedforward actor's and critic's MLP widths.
      activation: their hidden layers' nonlinearity, ``"tanh"`` (CleanRL's) or
        ``"relu"``.
      log_std_init: a Gaussian policy's initial ``log_std`` (its learned,
        state-independent log standard deviation; 0: a standard deviation of 1
        in the action's units).
      noise_repeat: the exploration noise of a Gaussian policy (a categorical
        one: its Gumbel noise) is drawn every ``noise_repeat`` steps and held
        in between ([`HeldNoise`][jaxsample.agents.HeldNoise]; 1: every step;
        feedforward policies only).
      rnn_hidden_size: the recurrent agent's cell width.
      rnn_cell: its cell, ``"gru"`` or ``"lstm"``.
      rnn_encoder_sizes: the widths of its MLP before the cell.
      mask_velocity: wrap the env with
        [`jaxsample.envs.mask_velocity`][jaxsample.envs.mask_velocity]
        (e.g. CartPole with only position and angle observed: a POMDP).
      max_decorrelation_steps: the sampler's start-state decorrelation.
      metrics_window: episodes averaged by ``StepMetrics`` (``average_return``).
      negamax: self-play in a zero-sum two-player game: values are from the
        acting player's view and GAE negates the next value (and advantage)
        where the other player moves next
        ([`turn_signs`][jaxsample.algos.returns.turn_signs], read from the env's
        ``player``/``next_player`` info). ``"auto"`` (default): what the env
        says (its ``zero_sum`` attribute: True for Pgx's two-player games);
        ``"on"``; ``"off"``.
      eval_games: in a zero-sum two-player game (``env.zero_sum``, Pgx's), the
        trainer plays its greedy policy ``eval_games`` games (even; half opened
        by each side; 0: none) against a uniformly random legal opponent after
        every ``eval_every``-th iteration and after the last, and reports the
        ``*_vs_random`` rates ([`jaxsample.algos.games`][jaxsample.algos.games]).
      eval_every: the iterations between those evaluations (0: the run's
        iterations over 20).
    """

    #: The fields that are data, not static config: those of the trainer's
    #: ``HParams`` (one float32 each per run, vmapped), the ones a list sweeps.
    HPARAMS: ClassVar[tuple[str, ...]] = ("lr", "clip_eps", "ent_coef", "vf_coef")

    env_name: str = "CartPole-v1"
    num_envs: int = 4
    num_steps: int = 128
    total_timesteps: int = 500_000
    lr: float = 2.5e-4
    anneal_lr: bool = True
    update_epochs: int = 4
    num_minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    reward_scale: float = 1.0
    clip_eps: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5
    normalize_advantages: bool = True
    recurrent: bool = False
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    log_std_init: float = 0.0
    noise_repeat: int = 1
    rnn_hidden_size: int = 128
    rnn_cell: str = "gru"
    rnn_encoder_sizes: tuple[int, ...] = ()
    mask_velocity: bool = False
    max_decorrelation_steps: int = 0
    metrics_window: int = 20
    negamax: str = "auto"
    eval_games: int = 128
    eval_every: int = 0

    def __post_init__(self) -> None:
        if self.negamax not in _NEGAMAX:
            raise ConfigError("negamax", f"must be one of {_NEGAMAX}, got {self.negamax!r}")
        check_config(
            self,
            ints=[(name, 1) for name in _PPO_POSITIVE_INTS]
            + [("eval_games", 0), ("eval_every", 0)],
            bools=("anneal_lr", "clip_vloss", "normalize_advantages", "recurrent", "mask_velocity"),
            floats=[
                ("lr", 0.0, math.inf, True),  # 0: a run that never learns
                *((name, 0.0, math.inf, False) for name in _PPO_NON_NEGATIVE_FLOATS),
                ("gamma", 0.0, 1.0, False),
                ("gae_lambda", 0.0, 1.0, False),
                ("max_grad_norm", 0.0, math.inf, True),
                ("reward_scale", 0.0, math.inf, True),
                ("log_std_init", -math.inf, math.inf, False),
            ],
            sizes=("hidden_sizes", "rnn_encoder_sizes"),
        )
        if self.rnn_cell not in _CELLS:
            raise ConfigError("rnn_cell", f"must be one of {_CELLS}, got {self.rnn_cell!r}")
        if self.activation not in _ACTIVATIONS:
            raise ConfigError(
                "activation", f"must be one of {_ACTIVATIONS}, got {self.activation!r}"
            )
        if math.isinf(self.log_std_init):
            raise ConfigError("log_std_init", f"must be finite, got {self.log_std_init!r}")
        if self.eval_games % 2:
            raise ConfigError(
                "eval_games", f"must be even (half opened by each side), got {self.eval_games}"
            )
        if self.recurrent:
            if self.noise_repeat > 1:
                raise ConfigError(
                    "noise_repeat", f"holds a feedforward policy's noise: must be 1 with "
                    f"recurrent=True, got {self.noise_repeat}",
                )  # fmt: skip
            if self.num_envs % self.num_minibatches:
                raise ConfigError(
                    "num_minibatches",
                    f"({self.num_minibatches}) must divide num_envs ({self.num_envs}): "
                    "recurrent PPO minibatches whole env sequences",
                )
        elif self.batch_size % self.num_minibatches:
            raise ConfigError(
                "num_minibatches",
                f"({self.num_minibatches}) must divide num_envs * num_steps ({self.batch_size})",
            )

    @property
    def batch_size(self) -> int:
        """Environment steps per iteration, ``num_envs * num_steps``
        (``steps_per_iteration``)."""
        return self.steps_per_iteration

    @property
    def minibatch_size(self) -> int:
        """Steps per minibatch, ``batch_size // num_minibatches``."""
        return self.batch_size // self.num_minibatches


#: Recurrent PPO for CartPole with the velocities hidden (a POMDP). After RL Zoo's
#: tuned RecurrentPPO for CartPoleNoVel-v1: short sequences, many epochs, lr 1e-3,
#: a shorter horizon (gamma 0.98, lambda 0.8); here with an entropy bonus of 0.01,
#: a GRU of 64 after a 64-unit encoder, 32 envs x 32 steps in minibatches of 8
#: whole env sequences. With ``recurrent=False`` it is the feedforward baseline.
MASKED_CARTPOLE_RECURRENT = PPOConfig(
    env_name="CartPole-v1",
    mask_velocity=True,
    recurrent=True,
    num_envs=32,
    num_steps=32,
    total_timesteps=300_000,
    lr=1e-3,
    update_epochs=20,
    num_minibatches=4,
    gamma=0.98,
    gae_lambda=0.8,
    ent_coef=0.01,
    rnn_hidden_size=64,
    rnn_encoder_sizes=(64,),
)


# ----------------------------------------------------------------------------
# DQN
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DQNConfig(_RunLength):
    """Static configuration of a DQN run (validated when constructed).

    The defaults train CartPole-v1 to a return of ~500 within 5e5 env steps
    (the reference benchmark, ``jaxsample.bench.reference.reference_run``).
    They follow
    purejaxrl's and CleanRL's CartPole DQN: 10 envs x 1 step per iteration and one gradient
    step per iteration (one per 10 env steps), minibatches of 128, a 10k-step
    buffer, Adam 2.5e-4, MSE loss, target copied every 500 env steps, learning
    from 10k steps on, epsilon from 1 down to 0.05 over half the run; here the
    final epsilon is rlpyt's vector epsilon, log-spaced over envs from 0.01.

    Step counts (``total_timesteps``, ``learning_starts``,
    ``target_update_interval``) are environment steps summed over all envs; one
    iteration takes ``steps_per_iteration = num_envs * num_steps`` of them.

    Attributes:
      env_name: a gymnax environment id or ``"<suite>/<env>"`` with a
        ``Discrete`` action space; ignored when [`make_train`][jaxsample.algos.dqn.make_train] is
        given an
        ``env``.
      num_envs: ``B``, environments collected in parallel (also the agent's
        ``global_B``: env ``b`` has rank ``b``).
      num_steps: ``T``, steps per env per iteration.
      total_timesteps: the run is ``total_timesteps // steps_per_iteration``
        iterations.
      buffer_capacity: replay steps kept per env (the buffer holds
        ``num_envs * buffer_capacity`` transitions).
      batch_size: transitions per gradient step (the replay minibatch; not
        ``steps_per_iteration``).
      lr: Adam's learning rate (the default of `lr`).
      anneal_lr: scale the learning rate by ``1 - i / num_iterations`` at
        iteration ``i`` (0-based), as PPO does.
      gamma: discount of the TD target (the default of `gamma`);
        also the sampler's discount for ``discounted_return``.
      learning_starts: env steps collected before the first gradient step.
      gradient_steps: gradient steps per iteration once learning has started.
      target_update_interval: env steps between target-network updates.
      tau: the target update is ``target <- tau * online + (1 - tau) *
        target``, in ``(0, 1]`` (1: a copy).
      epsilon_init: exploration probability at the start of the run.
      epsilon_final: final exploration probability (that of the most exploring
        env, rank ``num_envs - 1``, when ``epsilon_final_min`` is set).
      epsilon_final_min: None (every env ends at ``epsilon_final``) or rlpyt's
        ``eps_final_min``, in ``(0, epsilon_final]``: env ``b`` ends at
        ``logspace(log10(epsilon_final_min), log10(epsilon_final),
        num_envs)[b]``.
      exploration_fraction: fraction of ``total_timesteps`` over which every
        env's epsilon anneals linearly to its final value; 0 starts there.
      double_dqn: pick the bootstrap action with the online network.
      loss: ``"mse"`` (``0.5 * td**2``) or ``"huber"`` (delta 1). With Adam on
        CartPole the Huber loss let the Q-values diverge in our runs (the
        large errors of terminal steps get no more weight than any other).
      max_grad_norm: global gradient-norm clip, or None for none.
      adam_eps: Adam's epsilon.
      hidden_sizes: the Q-network's MLP widths.
      max_decorrelation_steps: the sampler's start-state decorrelation.
      metrics_window: episodes averaged by ``StepMetrics`` (``average_return``).
      eval_episodes: episodes of [`evaluate`][jaxsample.algos.dqn.DQN.evaluate] (one per env).
      prioritized_replay: use `prioritized` (Schaul et
        al.'s prioritized replay) instead of the uniform buffer.
      priority_alpha: its priority exponent, in ``[0, 1]``.
      priority_beta: its importance-weight exponent, in ``[0, 1]`` (constant).
      priority_eps: added to ``|td|`` for the new priorities, ``> 0``.
    """

    #: The fields that are data, not static config: those of the trainer's
    #: ``HParams`` (one float32 each per run, vmapped), the ones a list sweeps.
    HPARAMS: ClassVar[tuple[str, ...]] = ("lr", "gamma")

    env_name: str = "CartPole-v1"
    num_envs: int = 10
    num_steps: int = 1
    total_timesteps: int = 500_000
    buffer_capacity: int = 1_000
    batch_size: int = 128
    lr: float = 2.5e-4
    anneal_lr: bool = False
    gamma: float = 0.99
    learning_starts: int = 10_000
    gradient_steps: int = 1
    target_update_interval: int = 500
    tau: float = 1.0
    epsilon_init: float = 1.0
    epsilon_final: float = 0.05
    epsilon_final_min: float | None = 0.01
    exploration_fraction: float = 0.5
    double_dqn: bool = False
    loss: str = "mse"
    max_grad_norm: float | None = None
    adam_eps: float = 1e-8
    hidden_sizes: tuple[int, ...] = (120, 84)
    max_decorrelation_steps: int = 0
    metrics_window: int = 100
    eval_episodes: int = 16
    prioritized_replay: bool = False
    priority_alpha: float = 0.6
    priority_beta: float = 0.4
    priority_eps: float = 1e-6

    def __post_init__(self) -> None:
        check_config(
            self,
            ints=[(name, 1) for name in _DQN_POSITIVE_INTS] + [("learning_starts", 0)],
            bools=("anneal_lr", "double_dqn", "prioritized_replay"),
            floats=(
                ("lr", 0.0, math.inf, True),
                ("gamma", 0.0, 1.0, False),
                ("tau", 0.0, 1.0, True),
                ("epsilon_init", 0.0, 1.0, False),
                ("epsilon_final", 0.0, 1.0, False),
                ("exploration_fraction", 0.0, 1.0, False),
                ("adam_eps", 0.0, math.inf, False),
                ("priority_alpha", 0.0, 1.0, False),
                ("priority_beta", 0.0, 1.0, False),
                ("priority_eps", 0.0, math.inf, True),
            ),
            sizes=("hidden_sizes",),
        )
        for name, maximum in (
            ("total_timesteps", _MAX_TIMESTEPS),
            ("learning_starts", _MAX_TIMESTEPS),
            ("target_update_interval", _MAX_TIMESTEPS),
            ("buffer_capacity", MAX_REPLAY_CAPACITY),
            ("metrics_window", 2**30 - 1),
        ):
            if getattr(self, name) > maximum:
                raise ConfigError(name, f"must be <= {maximum}, got {getattr(self, name)}")
        if self.epsilon_final_min is not None:
            check_float("epsilon_final_min", self.epsilon_final_min, 0.0, 1.0, True)
            if self.epsilon_final_min > self.epsilon_final:
                raise ConfigError(
                    "epsilon_final_min",
                    f"must be <= epsilon_final ({self.epsilon_final}), "
                    f"got {self.epsilon_final_min}",
                )
        if self.max_grad_norm is not None:
            check_float("max_grad_norm", self.max_grad_norm, 0.0, math.inf, True)
        if self.loss not in _LOSSES:
            raise ConfigError("loss", f"must be one of {_LOSSES}, got {self.loss!r}")


#: PPO self-play on Pgx's tic-tac-toe: one network plays both sides (negamax
#: values, chosen by the env), masked to legal moves; 128 envs x 32 moves,
#: lr 1e-3, entropy 0.2 (self-play then keeps visiting the positions a
#: random opponent leads to; at 0.05 its greedy policy lost to one about one
#: game in six), no discount. Rates: docs/benchmarks.md.
SELF_PLAY_TIC_TAC_TOE = PPOConfig(
    env_name="pgx/tic_tac_toe",
    num_envs=128,
    num_steps=32,
    total_timesteps=1_000_000,
    lr=1e-3,
    ent_coef=0.2,
    gamma=1.0,
    hidden_sizes=(128, 128),
)

#: `SELF_PLAY_TIC_TAC_TOE`'s settings on Pgx's connect four, with a
#: wider network, entropy 0.1 (at 0.05 self-play narrowed to lines a random
#: opponent still beat about one game in nine) and 6M steps.
SELF_PLAY_CONNECT_FOUR = dataclasses.replace(
    SELF_PLAY_TIC_TAC_TOE,
    env_name="pgx/connect_four",
    total_timesteps=6_000_000,
    ent_coef=0.1,
    hidden_sizes=(256, 256),
)

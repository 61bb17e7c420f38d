"""Agents following the unbatched protocol of [`jaxsample.agents.Agent`][jaxsample.agents.Agent]."""

from jaxsample.agents.actor_critic import (
    ActorCriticInfo,
    CategoricalActorCritic,
    GaussianActorCritic,
    categorical_entropy,
    categorical_log_prob,
    flatten_observation,
    gaussian_entropy,
    gaussian_log_prob,
)
from jaxsample.agents.base import Agent, RandomAgent, action_spec, null_action
from jaxsample.agents.continuous import (
    ContinuousParams,
    DeterministicActor,
    RunningNorm,
    SquashedGaussianActor,
)
from jaxsample.agents.epsilon_greedy import (
    EpsilonGreedyAgent,
    EpsilonGreedyInfo,
    EpsilonGreedyParams,
)
from jaxsample.agents.held_noise import HeldNoise, NoiseState
from jaxsample.agents.masks import masked_argmax, masked_logits, masked_max, uniform_legal
from jaxsample.agents.recurrent import RecurrentActorCritic
from jaxsample.agents.shared import SharedAgent
from jaxsample.agents.turns import TurnTaking, seat_returns

__all__ = [
    "ActorCriticInfo",
    "Agent",
    "CategoricalActorCritic",
    "ContinuousParams",
    "DeterministicActor",
    "EpsilonGreedyAgent",
    "EpsilonGreedyInfo",
    "EpsilonGreedyParams",
    "GaussianActorCritic",
    "HeldNoise",
    "NoiseState",
    "RandomAgent",
    "RecurrentActorCritic",
    "RunningNorm",
    "SharedAgent",
    "SquashedGaussianActor",
    "TurnTaking",
    "action_spec",
    "categorical_entropy",
    "categorical_log_prob",
    "flatten_observation",
    "gaussian_entropy",
    "gaussian_log_prob",
    "masked_argmax",
    "masked_logits",
    "masked_max",
    "null_action",
    "seat_returns",
    "uniform_legal",
]

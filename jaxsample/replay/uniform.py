"""ALF's uniform replay: one ring of ``capacity`` steps per env."""

from __future__ import annotations

from jaxsample._checks import check_int
from jaxsample.replay import ring
from jaxsample.replay.types import MAX_CAPACITY, Replayer
from jaxsample.types import Samples

__all__ = ["uniform"]


def uniform(
    examples: Samples, B: int, capacity: int, *, store_agent_state: bool = False
) -> Replayer:
    """ALF's uniform replay: a ring of ``capacity`` steps per env.

    ``add`` accepts batches of any length ``T`` (the oldest steps are
    overwritten); ``sample`` draws contiguous sequences uniformly over
    (env, start) pairs (see [`Replayer`][jaxsample.replay.Replayer]).

    Args:
      examples: ``sampler.examples``.
      B: number of envs.
      capacity: steps kept per env (``1 .. 2**30``); the buffer holds
        ``B * capacity`` steps.
      store_agent_state: keep the agent's recurrent state per step (ALF's
        ``use_rollout_state``); ``add`` then needs ``agent_state`` and sampled
        sequences carry the state before their first step.
    """
    capacity = check_int("capacity", capacity, 1, MAX_CAPACITY)
    return ring.replayer(
        "uniform", examples, B, capacity, unroll_length=None, store_agent_state=store_agent_state
    )

"""ALF's CycleOneTimeExperienceReplayer: a ring of ``unroll_length + 1`` steps per env."""

from __future__ import annotations

from jaxsample._checks import check_int
from jaxsample.replay import ring
from jaxsample.replay.types import MAX_CAPACITY, Replayer
from jaxsample.types import Samples

__all__ = ["cycle_one_time"]


def cycle_one_time(
    examples: Samples, B: int, unroll_length: int, *, store_agent_state: bool = False
) -> Replayer:
    """ALF's CycleOneTimeExperienceReplayer: a ring of ``unroll_length + 1`` steps.

    The ring of `uniform`, one step longer than an
    unroll, with ``add`` taking exactly ``unroll_length`` steps. ``replay_all``
    then returns ``[unroll_length + 1, B, ...]``: the last step of the previous
    unroll followed by the latest unroll. Consecutive windows overlap by exactly
    one step, so the last step of each unroll (which a TD/GAE learner can only
    use as a bootstrap target) is trained as the first step of the next window.
    After the first ``add`` row 0 is padding (``valid`` False, ``done`` True).

    Args:
      examples: ``sampler.examples``.
      B: number of envs.
      unroll_length: the batch length ``T`` (``batch_spec.T``).
      store_agent_state: keep the agent's recurrent state per step (ALF's
        ``use_rollout_state``); ``add`` then needs ``agent_state`` and
        ``replay_all`` returns the state before row 0.
    """
    unroll_length = check_int("unroll_length", unroll_length, 1, MAX_CAPACITY - 1)
    return ring.replayer(
        "cycle_one_time",
        examples,
        B,
        unroll_length + 1,
        unroll_length=unroll_length,
        store_agent_state=store_agent_state,
    )

"""Initial collect steps (ALF's ``initial_collect_steps``, TorchRL's
``init_random_frames``): random-policy batches into a replayer, in jit."""

from __future__ import annotations

from typing import Any

import jax

from jaxsample._checks import check_int
from jaxsample.replay.types import Replayer, ReplayState
from jaxsample.types import PyTree

__all__ = ["prefill"]


def prefill(
    sampler: Any,
    replayer: Replayer,
    sampler_state: Any,
    replay_state: ReplayState,
    agent_params: PyTree,
    num_steps: int,
) -> tuple[Any, ReplayState]:
    """Collect at least ``num_steps`` env steps with uniformly random actions into
    ``replay_state``, before learning starts; pure and jittable.

    ``ceil(num_steps / (T * B))`` batches of ``sampler.collect_random`` (a
    ``lax.scan``), each added to the replayer: the random steps are kept as
    data, unlike decorrelation steps, and the sampler's stream continues from
    them (the next ``collect`` follows the last random step).

    Args:
      sampler: a [`Sampler`][jaxsample.sampler.Sampler] (``make_sampler`` without a mesh).
      replayer: a replayer built from ``sampler.examples`` for its ``B`` envs
        that accepts ``T``-step batches.
      sampler_state: the sampler's state.
      replay_state: the replayer's state.
      agent_params: the agent's parameters (for ``bootstrap_value`` only).
      num_steps: env steps summed over envs, a static int ``>= 0``; 0 returns
        the states unchanged.

    Returns:
      ``(sampler_state, replay_state)``.
    """
    if not hasattr(sampler, "collect_random"):
        raise TypeError(
            f"sampler must be a jaxsample Sampler (make_sampler), got {type(sampler).__name__}"
        )
    if not isinstance(replayer, Replayer):
        raise TypeError(f"replayer must be a jaxsample Replayer, got {type(replayer).__name__}")
    num_steps = check_int("num_steps", num_steps, 0)
    T, B = sampler.batch_spec
    n_batches = -(-num_steps // (T * B))
    if n_batches == 0:
        return sampler_state, replay_state

    def body(carry: tuple, _: None) -> tuple[tuple, None]:
        s_state, r_state = carry
        s_state, batch = sampler.collect_random(s_state, agent_params)
        return (s_state, replayer.add(r_state, batch)), None

    (sampler_state, replay_state), _ = jax.lax.scan(
        body, (sampler_state, replay_state), None, length=n_batches
    )
    return sampler_state, replay_state

"""ALF's OneTimeExperienceReplayer: keeps only the latest unroll."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxsample._checks import check_int
from jaxsample.replay import ring
from jaxsample.replay.steps import as_samples, check_tree
from jaxsample.replay.types import MAX_CAPACITY, Replayer, ReplayInfo, ReplayState
from jaxsample.types import Batch, PyTree, Samples

__all__ = ["one_time"]


def one_time(examples: Samples, B: int, T: int, *, store_agent_state: bool = False) -> Replayer:
    """ALF's OneTimeExperienceReplayer: keeps only the latest unroll.

    A ring of exactly ``T`` steps per env, so each ``add`` (of exactly ``T``
    steps) replaces the whole buffer and the write position stays 0; it also
    keeps the batch's ``agent.initial_state`` and ``bootstrap_value``
    (`batch_initial_state`,
    `batch_bootstrap_value`).
    ``replay_all`` returns that batch, so each step is used once: the batch's
    own samples with a dense final observation, its ``agent.initial_state`` and
    ``bootstrap_value``. ``sample`` draws sequences from it as
    `uniform` would.

    Args:
      examples: ``sampler.examples``.
      B: number of envs.
      T: the batch length (``batch_spec.T``); also the capacity.
      store_agent_state: keep the agent's recurrent state per step (ALF's
        ``use_rollout_state``); ``add`` then needs ``agent_state``. The batch's
        ``agent.initial_state`` is kept regardless, for ``replay_all``.
    """
    T = check_int("T", T, 1, MAX_CAPACITY)
    base = ring.replayer(
        "one_time",
        examples,
        B,
        T,
        unroll_length=T,
        store_agent_state=store_agent_state,
        subsets=False,
    )
    ex = base.examples
    num_envs = base.num_envs

    def init() -> ReplayState:
        return base.init().replace(
            batch_initial_state=ring.zeros(ex.agent.initial_state, (num_envs,)),
            batch_bootstrap_value=ring.zeros(ex.bootstrap_value, (num_envs,)),
        )

    def add(
        state: ReplayState, batch: Batch | Samples, agent_state: PyTree = None, **subset: Any
    ) -> ReplayState:
        state = base.add(state, batch, agent_state, **subset)  # refuses env_ids/env_mask
        samples = as_samples(batch)
        lead = (num_envs,)
        check_tree(
            "agent.initial_state", ex.agent.initial_state, samples.agent.initial_state, lead, "[B]"
        )
        state = state.replace(batch_initial_state=samples.agent.initial_state)
        if ex.bootstrap_value is not None:
            if samples.bootstrap_value is None:
                raise ValueError("replay add: field bootstrap_value is None, but examples has one")
            check_tree("bootstrap_value", ex.bootstrap_value, samples.bootstrap_value, lead, "[B]")
            state = state.replace(batch_bootstrap_value=samples.bootstrap_value)
        return state

    def replay_all(state: ReplayState) -> tuple[Samples, ReplayInfo]:
        out, info = base.replay_all(state)
        agent = out.agent.replace(initial_state=state.batch_initial_state)
        return out.replace(agent=agent, bootstrap_value=state.batch_bootstrap_value), info

    return dataclasses.replace(base, init=init, add=add, replay_all=replay_all)

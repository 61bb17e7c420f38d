"""The host sampler's reset mode: one strategy, chosen when the sampler is built.

``reset_mode`` decides what a host batch does at its start, with each step's
action and with each step's outputs; `choose` picks one small frozen object
once, and the host loop (`jaxsample.host.sampler.HostSampler`) calls its
methods without asking which mode it is. The JAX sampler's modes are chosen
the same way, with the same names (`jaxsample.core.modes`), as is its store of
final observations (`jaxsample.core.finals.choose`):

* `AutoReset` (``"auto"``): every env steps at every step; a done env goes on
  from its reset observation;
* `WaitReset` (``"wait"``): an env that ended idles for the rest of the batch
  (it still steps, with the null action, and its outputs are dropped), holding
  the reset observation it reached; the envs stepped while idle are reset when
  the next batch starts;
* `EpisodicReset` (``"episodic"``): as ``"wait"``, but every batch starts with
  a reset of every env (and new episodes of the agents), and its last step
  truncates the envs still running: every batch is one ``T``-step episode.

The methods act on a batch's `HostBuffers` in place; ``active`` is the
``[B]`` bool of the envs not idle at a step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from jaxsample.core.acting import AgentCarry
from jaxsample.host.buffers import HostBuffers
from jaxsample.host.envs import EnvHandle, StepResult
from jaxsample.traj_info import TrajAccumulator

Fresh = Callable[[], tuple[AgentCarry, TrajAccumulator]]


@dataclasses.dataclass(frozen=True)
class AutoReset:
    """``reset_mode="auto"``; the interface every mode has (``T``: the
    batch's steps)."""

    T: int
    idles: ClassVar[bool] = False  # an env may idle (HostBuffers.held is needed)

    def start(
        self, handle: EnvHandle, state: Any, observation: np.ndarray, fresh: Fresh
    ) -> tuple[bool, AgentCarry, TrajAccumulator]:
        """The batch's start: ``(moved, agent, traj)``, whether the envs were
        reset (``handle.generation`` is bumped first: older states are stale),
        and the agents' carry and trajectory accumulators to start from
        (``state``'s, or ``fresh()``'s new episodes). A reset writes its
        observations into ``observation`` ``[B, *obs]``."""
        del handle, observation, fresh
        return False, state.agent, state.traj

    def flags(self, done: np.ndarray, active: np.ndarray) -> np.ndarray:
        """A step's done and active flags ``[B]`` as one uint8 array for the
        device (bit 0 done, bit 1 active; every env is active here and the
        device ignores bit 1)."""
        del active
        return done.view(np.uint8)

    def action(self, action: np.ndarray, active: np.ndarray) -> np.ndarray:
        """The ``[B, *act]`` actions the envs step with."""
        del active
        return action

    def ends(self, t: int, res: StepResult) -> tuple[np.ndarray, np.ndarray, bool]:
        """``(truncated, done, any_truncated)`` of step ``t``."""
        del t
        return res.truncated, res.done, res.any_done and bool(res.truncated.any())

    def observe(
        self, buf: HostBuffers, t: int, res: StepResult, done: np.ndarray, active: np.ndarray
    ) -> np.ndarray:
        """What the agent's next step needs from step ``t``: write its reward
        (and the next observations ``buf.observation[t + 1]``); return the
        envs active at step ``t + 1``."""
        del done
        buf.reward[t] = res.reward
        return active

    def record(
        self, buf: HostBuffers, t: int, res: StepResult, truncated: np.ndarray, active: np.ndarray
    ) -> None:
        """The rest of step ``t`` (after its env info is written): its flags."""
        del active
        buf.terminated[t], buf.truncated[t] = res.terminated, truncated

    def next_observation(self, buf: HostBuffers, active: np.ndarray) -> np.ndarray:
        """The ``[B, *obs]`` observations after the batch (``active``: the envs
        active after its last step)."""
        del active
        return buf.observation[self.T]

    def stale(self, buf: HostBuffers) -> np.ndarray:
        """The next state's ``stale`` ``[B]``: the envs to reset when the next
        batch starts."""
        return np.zeros_like(buf.stale)


@dataclasses.dataclass(frozen=True)
class WaitReset(AutoReset):
    """``reset_mode="wait"``: an env that ended idles until the next batch."""

    idles: ClassVar[bool] = True

    def start(
        self, handle: EnvHandle, state: Any, observation: np.ndarray, fresh: Fresh
    ) -> tuple[bool, AgentCarry, TrajAccumulator]:
        if not state.stale.any():
            return False, state.agent, state.traj
        handle.generation += 1  # the envs move now: older states are stale
        assert handle.adapter is not None
        handle.adapter.reset_where(state.stale, observation)
        return True, state.agent, state.traj

    def flags(self, done: np.ndarray, active: np.ndarray) -> np.ndarray:
        return done.view(np.uint8) | (active.view(np.uint8) << 1)

    def action(self, action: np.ndarray, active: np.ndarray) -> np.ndarray:
        """Idle envs step with the null action; their outputs are dropped."""
        lead = active.reshape(active.shape + (1,) * (action.ndim - 1))
        return np.where(lead, action, np.zeros_like(action))

    def observe(
        self, buf: HostBuffers, t: int, res: StepResult, done: np.ndarray, active: np.ndarray
    ) -> np.ndarray:
        assert buf.held is not None
        buf.reward[t] = np.where(active, res.reward, 0)
        ended = done & active
        buf.held[ended] = buf.observation[t + 1][ended]
        goes_on = active & ~done
        if t + 1 < self.T:
            buf.observation[t + 1][~goes_on] = 0
        return goes_on

    def record(
        self, buf: HostBuffers, t: int, res: StepResult, truncated: np.ndarray, active: np.ndarray
    ) -> None:
        for info in buf.env_info.values():
            info[t][~active] = 0
        buf.terminated[t] = res.terminated & active
        buf.truncated[t] = truncated & active
        buf.valid[t] = active
        buf.stale[...] |= ~active

    def next_observation(self, buf: HostBuffers, active: np.ndarray) -> np.ndarray:
        """An idle env holds the reset observation it reached."""
        assert buf.held is not None
        next_observation = buf.observation[self.T]
        next_observation[~active] = buf.held[~active]
        return next_observation

    def stale(self, buf: HostBuffers) -> np.ndarray:
        return buf.stale


@dataclasses.dataclass(frozen=True)
class EpisodicReset(WaitReset):
    """``reset_mode="episodic"``: every batch is one ``T``-step episode."""

    def start(
        self, handle: EnvHandle, state: Any, observation: np.ndarray, fresh: Fresh
    ) -> tuple[bool, AgentCarry, TrajAccumulator]:
        handle.generation += 1  # the envs move now: older states are stale
        assert handle.adapter is not None
        handle.adapter.reset(None, observation)
        agent, traj = fresh()
        return True, agent, traj

    def ends(self, t: int, res: StepResult) -> tuple[np.ndarray, np.ndarray, bool]:
        if t < self.T - 1:
            return super().ends(t, res)
        truncated = res.truncated | ~res.terminated  # the last step ends every episode
        return truncated, res.terminated | truncated, True

    def stale(self, buf: HostBuffers) -> np.ndarray:
        return np.zeros_like(buf.stale)


MODES: dict[str, type[AutoReset]] = {
    "auto": AutoReset,
    "wait": WaitReset,
    "episodic": EpisodicReset,
}


def choose(reset_mode: str, T: int) -> AutoReset:
    """The strategy of ``reset_mode`` for batches of ``T`` steps."""
    return MODES[reset_mode](T)

"""The host sampler's numpy buffers of one batch, and its final-observation store.

A host batch is written step by step into preallocated numpy buffers
(`HostBuffers`: no per-step lists, no stacking); the env adapter writes each
next observation straight into its row. `write_host_finals` is the host's
final-observation store (the JAX samplers' is `jaxsample.core.finals`): it
keeps the true final observations in ``HostBuffers.final``, dense or sparse,
laid out as `jaxsample.core.finals.as_batch` expects. After the ``T`` steps
`HostBuffers.batch` hands the buffers to the device in one transfer
(`jaxsample.host.device.HostBatch`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from jaxsample.core.options import SamplerOptions
from jaxsample.host.device import HostBatch
from jaxsample.host.envs import StepResult


def np_zeros(spec: Any, lead: tuple[int, ...]) -> np.ndarray:
    """Zeros ``[*lead, *spec.shape]`` of ``spec.dtype``."""
    return np.zeros((*lead, *spec.shape), spec.dtype)


@dataclasses.dataclass(frozen=True)
class HostBuffers:
    """The numpy buffers one host batch is written into, in place (build
    with `zeros`)."""

    observation: np.ndarray  # [T + 1, B, *obs]: row t + 1 is written by step t
    reward: np.ndarray  # [T, B] float32
    terminated: np.ndarray  # [T, B] bool
    truncated: np.ndarray  # [T, B] bool
    valid: np.ndarray  # [T, B] bool: not idle (all True in "auto" mode)
    env_info: dict[str, np.ndarray]  # [T, B, ...]
    final: np.ndarray  # dense: [T, B, *obs]; sparse: slots [B, K, *obs]
    n_truncated: np.ndarray  # [B] int64: the sparse slots used
    held: np.ndarray | None  # [B, *obs]: the reset observation an idle env reached
    stale: np.ndarray  # [B] bool: stepped while idle

    @classmethod
    def zeros(
        cls,
        options: SamplerOptions,
        observation: jax.ShapeDtypeStruct,
        env_info: Mapping[str, jax.ShapeDtypeStruct],
        slots: int,
        idles: bool,
    ) -> HostBuffers:
        """The zeroed buffers of a batch of ``options.batch_spec`` (``slots``:
        ``K`` of the sparse store; ``idles``: envs may idle, so ``held`` is
        allocated)."""
        T, B = options.batch_spec
        dense = options.final_observation == "dense"
        obs = np_zeros(observation, (T + 1, B))
        return cls(
            observation=obs,
            reward=np.zeros((T, B), np.float32),
            terminated=np.zeros((T, B), bool),
            truncated=np.zeros((T, B), bool),
            valid=np.ones((T, B), bool),
            env_info={k: np_zeros(s, (T, B)) for k, s in env_info.items()},
            final=np_zeros(observation, (T, B) if dense else (B, slots)),
            n_truncated=np.zeros((B,), np.int64),
            held=np.zeros_like(obs[0]) if idles else None,
            stale=np.zeros((B,), bool),
        )

    def batch(
        self, next_observation: np.ndarray, last_done: np.ndarray, last_active: np.ndarray
    ) -> HostBatch:
        """The buffers as the device's `HostBatch` (``last_*``: ``[B]``, the
        last step's done and not-idle flags)."""
        T = self.reward.shape[0]
        return HostBatch(
            observation=self.observation[:T],
            reward=self.reward,
            terminated=self.terminated,
            truncated=self.truncated,
            valid=self.valid,
            env_info=self.env_info,
            final=self.final,
            next_observation=next_observation,
            last_reward=self.reward[T - 1],
            last_done=last_done,
            last_active=last_active,
        )


def write_host_finals(
    final: np.ndarray,
    n_truncated: np.ndarray,
    dense: bool,
    t: int,
    res: StepResult,
    truncated: np.ndarray,
    active: np.ndarray,
    next_obs: np.ndarray,
) -> None:
    """The host sampler's store: record the true final observations of step
    ``t`` in the numpy buffer ``final`` (dense ``[T, B, *obs]``, sparse slots
    ``[B, K, *obs]`` with ``n_truncated`` ``[B]`` slots used). ``res`` is the
    host env's step (its ``final_rows`` of the envs in ``final_mask``),
    ``truncated`` the step's truncations (forced ones included), ``active`` the
    envs not idle, ``next_obs`` the observations after the step."""
    if dense:  # res.final_mask is res.done
        final[t] = next_obs
        if res.any_done:
            final[t][res.done] = res.final_rows
        final[t][~active] = 0
        return
    which = truncated & active
    if not which.any():
        return
    rows = next_obs[which]  # a forced (episodic) truncation: the env goes on
    if res.any_done:  # res.final_mask is res.truncated: the env's own
        own = res.truncated[which]
        position = np.cumsum(res.truncated) - 1  # row of each env in final_rows
        rows[own] = res.final_rows[position[which & res.truncated]]
    envs = np.flatnonzero(which)
    slot = n_truncated[envs]
    slots = final.shape[1]
    if (slot >= slots).any():
        raise RuntimeError(
            f"an env truncated more than {slots} times in one batch, more than the sparse "
            "final-observation store holds (its bound comes from the env's time limit); "
            "build the sampler with final_observation='dense'"
        )
    final[envs, slot] = rows
    n_truncated[envs] += 1

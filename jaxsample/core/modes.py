"""The reset modes: one strategy, chosen when a sampler is built.

docs/design.md's reset modes differ in a few points of the JAX sampler's
batch (`jaxsample.core.rollout`); `choose` picks the strategy of
``options.reset_mode`` once, so the rollout never asks which mode it runs:

* `AutoReset` (``"auto"``, rlpyt's ResetCollector): a done env resets at
  once, mid-batch; every step is valid, so no ``valid`` flag goes through the
  scan (the batch's is all True).
* `WaitReset` (``"wait"``, WaitResetCollector): a done env idles for the rest
  of the batch (`WaitReset.hold`: it keeps its state and writes zeros with
  ``valid`` False) and resets when the next batch starts.
* `EpisodicReset` (``"episodic"``, BatchedEpisodicSampler): as ``"wait"``,
  and every batch is one ``T``-step episode: every env restarts with the
  batch (`EpisodicReset.begin`) and the batch's last step truncates.

Per-env methods are unbatched (``begin``, ``truncate``, ``hold``); ``valid``
and ``last_done`` read the batched outputs of the scan. The host sampler's
loop has its own, numpy, form of the modes (`jaxsample.host.modes`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from jaxsample.core import keys as K
from jaxsample.core.acting import where_leading
from jaxsample.core.step import EnvStepper


class Mode(Protocol):
    """The strategies' interface (see `AutoReset` for the methods)."""

    def begin(self, stepper: EnvStepper, s: Any, keys: K.EpochKeys) -> Any: ...

    def truncate(self, t: jax.Array, T: int) -> jax.Array | None: ...

    def hold(self, s: Any, new: Any, done: jax.Array, out: Any) -> tuple[Any, Any]: ...

    def valid(self, out: Any, shape: tuple[int, ...]) -> jax.Array: ...

    def last_done(self, out: Any) -> jax.Array: ...


@dataclasses.dataclass(frozen=True)
class AutoReset:
    """``"auto"``: a done env resets at once; every step is valid."""

    def begin(self, stepper: EnvStepper, s: Any, keys: K.EpochKeys) -> Any:
        """One env's state ``s`` (a `SamplerState`) at the start of a batch,
        whose step keys are ``keys``: as it is."""
        del stepper, keys
        return s

    def truncate(self, t: jax.Array, T: int) -> jax.Array | None:
        """Whether step ``t`` of a ``T``-step batch truncates the episode
        (unless it terminates); None: never."""
        del t, T
        return None

    def hold(self, s: Any, new: Any, done: jax.Array, out: Any) -> tuple[Any, Any]:
        """``(new, out)`` of one env's step from ``s`` to ``new`` (``done``:
        it ended its episode; ``out``: what it writes, a ``_StepOut``): as
        they are."""
        del s, done
        return new, out

    def valid(self, out: Any, shape: tuple[int, ...]) -> jax.Array:
        """The ``valid`` flags (bool, ``shape``: ``[B]`` of a step, ``[T, B]``
        of the batch) of the outputs ``out``: all True."""
        del out
        return jnp.ones(shape, bool)

    def last_done(self, out: Any) -> jax.Array:
        """``[B]``: the envs whose agent restarts after the batch's last step
        (``out``: the stacked ``[T, B]`` outputs): those it ended."""
        return out.terminated[-1] | out.truncated[-1]


@dataclasses.dataclass(frozen=True)
class WaitReset(AutoReset):
    """``"wait"``: a done env idles until the batch ends, then resets."""

    def hold(self, s: Any, new: Any, done: jax.Array, out: Any) -> tuple[Any, Any]:
        """An env idle at this step (``s.idle``: it finished earlier in the
        batch) keeps its state ``s`` and writes zeros (``valid`` False);
        otherwise it takes ``new`` and goes idle where ``done``."""
        out = out.replace(valid=jnp.ones((), bool))
        idle = s.idle
        new = where_leading(idle, s, new.replace(idle=done))
        out = where_leading(idle, jax.tree.map(jnp.zeros_like, out), out)
        return new, out

    def valid(self, out: Any, shape: tuple[int, ...]) -> jax.Array:
        """``out.valid``: False on the idle steps."""
        del shape
        return out.valid

    def last_done(self, out: Any) -> jax.Array:
        """The envs the last step ended, or that idled at it."""
        return super().last_done(out) | ~out.valid[-1]


@dataclasses.dataclass(frozen=True)
class EpisodicReset(WaitReset):
    """``"episodic"``: every batch is one ``T``-step episode of every env."""

    def begin(self, stepper: EnvStepper, s: Any, keys: K.EpochKeys) -> Any:
        """A new episode (the env's reset with the episodic reset key of the
        batch's first step) and a fresh trajectory accumulator."""
        k_reset = K.step_key(keys, jnp.zeros((), jnp.uint32), K.EPISODIC_RESET)
        return s.replace(env=stepper.start(k_reset, s.env.agent.env_rank), traj=s.traj.reset())

    def truncate(self, t: jax.Array, T: int) -> jax.Array | None:
        """The batch's last step truncates."""
        return t == T - 1


def choose(reset_mode: str) -> Mode:
    """The strategy of ``reset_mode`` (``"auto"``, ``"wait"`` or ``"episodic"``,
    checked by `SamplerOptions`)."""
    return {"auto": AutoReset, "wait": WaitReset, "episodic": EpisodicReset}[reset_mode]()

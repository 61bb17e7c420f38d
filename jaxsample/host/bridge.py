"""A host vector env callable from inside ``jax.jit``: [`make_bridge`][jaxsample.host.make_bridge].

For programs that need the env inside a compiled program — a ``lax.scan``
rollout, a jitted train step that also collects — [`HostEnvBridge`][jaxsample.host.HostEnvBridge]
exposes
``reset(key)`` and ``step(action)`` over the ``B`` envs of a host vector env as
``jax.experimental.io_callback(..., ordered=True)`` calls:

* ``io_callback``, not ``pure_callback``: stepping an env is a side effect.
  ``pure_callback`` lets JAX drop a call whose outputs are unused, run one call
  twice, or reorder calls (and its ``vmap_method`` batching would hand the host
  a batch it never asked for); any of these would silently corrupt the episode
  stream of a stateful env.
* ``ordered=True``: the calls run in program order, including across the
  iterations of a ``scan``/``while_loop`` and across separate jitted calls.
  JAX cannot ``vmap`` an ordered effect ("Cannot vmap ordered IO callback"):
  the bridge is already batched over the ``B`` host envs, so call it on the
  whole batch — do not ``vmap`` it (e.g. over seeds).

The autoreset translation is the host sampler's (see
`jaxsample.host.envs`): ``step`` returns the observation the agent sees
next (the reset observation after a done step), and the true next observation
of every env as ``final_observation``.

An env that raises inside ``step`` may have advanced steps whose outputs never
reached the program, so every later ``step`` raises an error naming that failure
(rather than running on from an unknown point) until ``reset`` starts again.

Cost, honestly: every call is a device -> host -> device round trip that
the compiled program waits for; nothing of the env overlaps with device work,
and on an accelerator each step also synchronizes the device stream. The bridge
makes a host env *composable* with compiled code, not faster: per step it costs
what the host sampler costs plus the callback's overhead (measured by
``python -m jaxsample.bench.host``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from jaxsample.agents.base import action_spec
from jaxsample.host.envs import (
    EnvHandle,
    gymnax_space,
    observation_spec,
    require_gymnasium,
    seed_of,
)


class BridgeStep(NamedTuple):
    """What [`HostEnvBridge.step`][jaxsample.host.HostEnvBridge.step] returns; leaves ``[B, ...]``.

    Attributes:
      observation: ``[B, *obs]`` what the agent sees next (the reset observation
        of an env whose episode ended at this step).
      reward: ``[B]`` float32.
      terminated: ``[B]`` bool.
      truncated: ``[B]`` bool.
      final_observation: ``[B, *obs]`` the true next observation of every env,
        terminated and truncated ones included.
    """

    observation: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_observation: jax.Array


@dataclasses.dataclass(frozen=True, eq=False)
class HostEnvBridge:
    """``reset`` / ``step`` of a host vector env, callable inside ``jax.jit``.

    Build it with [`make_bridge`][jaxsample.host.make_bridge]. Both methods are batched over the
    ``num_envs`` envs and must not be ``vmap``-ped.
    """

    num_envs: int
    env_ranks: tuple[int, ...]
    observation_spec: jax.ShapeDtypeStruct  # one env's observation
    action_space: Any  # gymnax space of one env's action
    autoreset_mode: str
    _handle: EnvHandle

    @property
    def env(self) -> Any:
        """The host vector env (None for a factory before the first ``reset``)."""
        return self._handle.env

    def _batched(self, spec: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct((self.num_envs, *spec.shape), spec.dtype)

    def reset(self, key: jax.Array) -> jax.Array:
        """Seed and reset every env (creating them, for a factory): env ``b`` gets
        the seed [`jaxsample.host.env_seeds`][jaxsample.host.env_seeds] gives its rank.

        Args:
          key: a ``jax.random.key`` (may be traced).

        Returns:
          ``[B, *obs]`` the first observations.
        """
        ranks = jnp.asarray(self.env_ranks, jnp.int32)
        seeds = jax.vmap(seed_of, in_axes=(None, 0))(key, ranks)
        return io_callback(
            self._reset_host, self._batched(self.observation_spec), seeds, ordered=True
        )

    def step(self, action: jax.Array) -> BridgeStep:
        """Step every env with ``action`` (``[B, *act]``, may be traced).

        Raises:
          ValueError: at trace time, when ``action`` does not have the shape and
            dtype of ``B`` actions of ``action_space``.
          RuntimeError: at run time (inside JAX's callback error), before
            ``reset`` or after the env raised in an earlier step.
        """
        expected = self._batched(action_spec(self.action_space))
        if jnp.shape(action) != expected.shape or jnp.result_type(action) != expected.dtype:
            raise ValueError(
                f"action must be {expected.dtype}{list(expected.shape)} ([B, *act] of "
                f"{self.action_space}), got {jnp.result_type(action)}{list(jnp.shape(action))}"
            )
        obs = self._batched(self.observation_spec)
        flags = jax.ShapeDtypeStruct((self.num_envs,), jnp.bool_)
        out = BridgeStep(
            observation=obs,
            reward=jax.ShapeDtypeStruct((self.num_envs,), jnp.float32),
            terminated=flags,
            truncated=flags,
            final_observation=obs,
        )
        return BridgeStep(*io_callback(self._step_host, tuple(out), action, ordered=True))

    # ------------------------------------------------------- host side
    def _reset_host(self, seeds: np.ndarray) -> np.ndarray:
        # EnvHandle.start clears the handle's failure once the reset succeeded.
        out = np.zeros((self.num_envs, *self.observation_spec.shape), self.observation_spec.dtype)
        self._handle.start([int(s) for s in np.asarray(seeds)], out)
        return out

    def _step_host(self, action: np.ndarray) -> tuple[np.ndarray, ...]:
        handle = self._handle
        adapter = handle.adapter
        if adapter is None:
            raise RuntimeError("HostEnvBridge.step before reset: call bridge.reset(key) first")
        if handle.failure is not None:
            raise RuntimeError(
                f"HostEnvBridge.step after the host env failed ({handle.failure}): its "
                "envs may have advanced by steps whose outputs were never returned, so "
                "the episode stream cannot go on; call bridge.reset(key) to start again"
            )
        out = np.zeros((self.num_envs, *self.observation_spec.shape), self.observation_spec.dtype)
        try:
            res = adapter.step(np.asarray(action), out)
        except BaseException as error:
            handle.failure = f"{type(error).__name__}: {error}"
            raise
        final = out.copy()
        if res.any_done:
            final[res.done] = res.final_rows
        reward = np.asarray(res.reward, np.float32)
        return out, reward, res.terminated, res.truncated, final


def make_bridge(
    env: Any,
    num_envs: int | None = None,
    *,
    env_ranks: Sequence[int] | None = None,
    autoreset_mode: Any = None,
) -> HostEnvBridge:
    """Expose a host vector env to ``jax.jit`` (see the module docstring).

    Args:
      env: a ``gymnasium.vector.VectorEnv`` or a factory
        ``make_env(seeds: list[int]) -> VectorEnv`` (as for
        [`jaxsample.host.make_host_sampler`][jaxsample.host.make_host_sampler]; envpool needs a
        factory).
      num_envs: the number of envs; required for a factory (which is called
        once here to read the spaces), checked against an instance.
      env_ranks: the global rank of each env (default ``range(num_envs)``); the
        seeds come from them.
      autoreset_mode: overrides the env's ``metadata["autoreset_mode"]``.

    Raises:
      ImportError: gymnasium (>= 1.1) is not installed (``pip install
        'jaxsample[host]'``).
      TypeError: for an argument of the wrong type.
      ValueError: for a bad value.
    """
    require_gymnasium()
    if num_envs is None:
        num_envs = getattr(env, "num_envs", None)
        if num_envs is None:
            raise TypeError("num_envs is required when env is a factory")
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    num_envs = int(num_envs)
    handle = EnvHandle(env, num_envs, autoreset_mode)
    if env_ranks is None:
        env_ranks = tuple(range(num_envs))
    else:
        env_ranks = tuple(int(r) for r in env_ranks)
        if len(env_ranks) != num_envs or len(set(env_ranks)) != num_envs or min(env_ranks) < 0:
            raise ValueError(f"env_ranks must be {num_envs} distinct non-negative ints")
    return HostEnvBridge(
        num_envs=num_envs,
        env_ranks=env_ranks,
        observation_spec=observation_spec(handle.observation_space),
        action_space=gymnax_space(handle.action_space),
        autoreset_mode=handle.mode,
        _handle=handle,
    )

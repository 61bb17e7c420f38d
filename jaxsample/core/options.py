"""The options every sampler (JAX or host) takes, checked once.

:func:`check_options` validates ``batch_spec``, ``reset_mode``,
``max_decorrelation_steps``, ``discount``, ``bootstrap_value``,
``store_agent_state``, ``final_observation``, ``env_ranks``, ``global_B``,
``traj_fields`` and ``traj_done``
and raises a ``TypeError``/``ValueError`` naming the bad one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal, TypedDict

import jax
import numpy as np

from jaxsample._checks import check_bool, check_int
from jaxsample.core.keys import EPOCH
from jaxsample.traj_info import TrajField, check_traj_fields
from jaxsample.types import BatchSpec

ResetMode = Literal["auto", "wait", "episodic"]
RESET_MODES = ("auto", "wait", "episodic")
FinalObservation = Literal["sparse", "dense"]
FINAL_OBSERVATION_STORES = ("sparse", "dense")


@dataclasses.dataclass(frozen=True, eq=False)
class SamplerOptions:
    """The options every sampler (JAX or host) holds, as :func:`check_options`
    returns them (``env_ranks``/``global_B`` filled in; see
    :func:`jaxsample.make_sampler` for their meaning)."""

    agent: Any
    batch_spec: BatchSpec
    reset_mode: ResetMode
    max_decorrelation_steps: int
    discount: float
    bootstrap_value: bool
    final_observation: FinalObservation
    store_agent_state: bool
    env_ranks: tuple[int, ...]
    global_B: int
    traj_fields: tuple[TrajField, ...]
    traj_done: str | None


class SamplerKwargs(TypedDict, total=False):
    """The keyword options of every sampler factory, as ``**options`` (defaults
    and meaning: :func:`jaxsample.make_sampler`)."""

    max_decorrelation_steps: int
    reset_mode: ResetMode
    discount: float
    bootstrap_value: bool
    final_observation: FinalObservation
    store_agent_state: bool
    env_ranks: Sequence[int] | None
    global_B: int | None
    traj_fields: Sequence[TrajField]
    traj_done: str | None


def check_discount(discount: Any) -> float:
    """``float(discount)``, or a clear error unless it is a real number in ``[0, 1]``
    (a Python, numpy or concrete JAX scalar)."""
    is_array = isinstance(discount, (np.ndarray, np.generic, jax.Array))
    if is_array and not isinstance(discount, jax.core.Tracer) and np.shape(discount) == ():
        value = np.asarray(discount)
        if np.issubdtype(value.dtype, np.number) and value.dtype != bool:
            discount = value.item()
    if isinstance(discount, bool) or not isinstance(discount, (int, float)):
        raise TypeError(f"discount must be a float, got {discount!r}")
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {discount}")
    return float(discount)


def check_env(env: Any, env_params: Any = None) -> None:
    """Raise a ``TypeError`` unless ``env`` has gymnax's ``step``, ``reset`` and
    ``action_space``, and ``env_params`` (when given) is of the type of the env's
    ``default_params`` (the parameters of another env fail deep inside gymnax)."""
    if isinstance(env, type):
        raise TypeError(f"env must be an environment instance, got the class {env.__name__}")
    for name in ("step", "reset", "action_space"):
        if not callable(getattr(env, name, None)):
            raise TypeError(f"env must be a gymnax environment with {name}(...)")
    default = getattr(env, "default_params", None)
    if env_params is not None and default is not None and type(env_params) is not type(default):
        raise TypeError(
            f"env_params must be a {type(default).__name__} (env.default_params' type) for "
            f"{type(env).__name__}, got a {type(env_params).__name__}: the parameters of "
            "another env?"
        )


def check_agent(
    agent: Any,
    methods: Sequence[str] = ("initial_state", "step", "value"),
    what: str = "agent",
) -> None:
    """Raise a ``TypeError`` (calling the agent ``what``) unless ``agent`` has
    the methods ``methods``."""
    if isinstance(agent, type):
        raise TypeError(
            f"{what} must be an agent instance, got the class {agent.__name__}: "
            f"did you mean {agent.__name__}(...)?"
        )
    for name in methods:
        if not callable(getattr(agent, name, None)):
            raise TypeError(f"{what} must have a method {name}(...), see jaxsample.agents.Agent")


def check_options(
    agent: Any,
    batch_spec: Any,
    *,
    max_decorrelation_steps: Any = 0,
    reset_mode: Any = "auto",
    discount: Any = 0.99,
    bootstrap_value: Any = False,
    store_agent_state: Any = False,
    final_observation: Any = "sparse",
    env_ranks: Sequence[int] | None = None,
    global_B: int | None = None,
    traj_fields: Sequence[TrajField] = (),
    traj_done: str | None = None,
) -> dict[str, Any]:
    """Check the options every sampler (JAX or host) takes; raise a clear
    ``TypeError``/``ValueError`` naming the bad one.

    The defaults are :func:`jaxsample.make_sampler`'s. Returns the fields of
    :class:`SamplerOptions` (the keyword arguments of a
    sampler's constructor) with the defaults filled in (``env_ranks =
    range(B)``, ``global_B = max(env_ranks) + 1``).
    """
    if not isinstance(batch_spec, BatchSpec):
        raise TypeError(f"batch_spec must be a jaxsample.BatchSpec(T, B), got {batch_spec!r}")
    T = check_int("batch_spec.T", getattr(batch_spec, "T", None), 1)
    if T > EPOCH:
        raise ValueError(f"batch_spec.T must be <= 2**30, got {T}")
    B = check_int("batch_spec.B", getattr(batch_spec, "B", None), 1)
    batch_spec = BatchSpec(T, B)
    if reset_mode not in RESET_MODES:
        raise ValueError(f"reset_mode must be one of {RESET_MODES}, got {reset_mode!r}")
    max_decorrelation_steps = check_int("max_decorrelation_steps", max_decorrelation_steps, 0)
    if reset_mode == "episodic" and max_decorrelation_steps:
        raise ValueError(
            "max_decorrelation_steps must be 0 with reset_mode='episodic' "
            "(every batch resets all envs, so there is nothing to decorrelate)"
        )
    discount = check_discount(discount)
    bootstrap_value = check_bool("bootstrap_value", bootstrap_value)
    store_agent_state = check_bool("store_agent_state", store_agent_state)
    if final_observation not in FINAL_OBSERVATION_STORES:
        raise ValueError(
            f"final_observation must be one of {FINAL_OBSERVATION_STORES}, "
            f"got {final_observation!r}"
        )
    if env_ranks is None:
        env_ranks = tuple(range(B))
    else:
        env_ranks = tuple(check_int("env_ranks[i]", r, 0) for r in env_ranks)
        if len(env_ranks) != B:
            raise ValueError(f"env_ranks has {len(env_ranks)} entries, but B={B}")
        if len(set(env_ranks)) != B:
            raise ValueError("env_ranks must be distinct")
    if global_B is None:
        global_B = max(env_ranks) + 1
    global_B = check_int("global_B", global_B, 1)
    if max(env_ranks) >= global_B:
        raise ValueError(f"env_ranks must be < global_B={global_B}, got {max(env_ranks)}")
    check_agent(agent)
    traj_fields = check_traj_fields(traj_fields)
    if traj_done is not None and not isinstance(traj_done, str):
        raise TypeError(f"traj_done must be the name of an info entry (a str), got {traj_done!r}")
    return {
        "agent": agent,
        "batch_spec": batch_spec,
        "reset_mode": reset_mode,
        "max_decorrelation_steps": max_decorrelation_steps,
        "discount": discount,
        "bootstrap_value": bootstrap_value,
        "final_observation": final_observation,
        "store_agent_state": store_agent_state,
        "env_ranks": env_ranks,
        "global_B": global_B,
        "traj_fields": traj_fields,
        "traj_done": traj_done,
    }

"""The options every sampler (JAX or host) takes, stated and checked once.

[`SamplerOptions`][jaxsample.core.options.SamplerOptions] (frozen) validates ``batch_spec``,
``reset_mode``,
``max_decorrelation_steps``, ``discount``, ``bootstrap_value``,
``store_agent_state``, ``final_observation``, ``env_ranks``, ``global_B``,
``traj_fields`` and ``traj_done`` in ``__post_init__`` and raises a
``TypeError``/``ValueError`` naming the bad one; `check_agent`,
`check_env` and `check_discount` check the factories' other
arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

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
    """The options every sampler (JAX or host) holds, checked once.

    Build it with keywords (``SamplerOptions(batch_spec, reset_mode="wait")``);
    ``__post_init__`` checks every field (a ``TypeError``/``ValueError`` naming
    the bad one) and normalizes it (``batch_spec`` a ``BatchSpec`` of ints,
    ``env_ranks`` a tuple, default ``range(B)``; ``global_B`` default
    ``max(env_ranks) + 1``). The factories take these as keyword options
    ([`jaxsample.make_sampler`][jaxsample.sampler.make_sampler],
    [`jaxsample.host.make_host_sampler`][jaxsample.host.make_host_sampler])
    and the samplers hold them as ``sampler.options``.

    Attributes:
      batch_spec: ``BatchSpec(T, B)``, both positive, ``T <= 2**30``.
      max_decorrelation_steps: before the first batch each env takes a random
        number ``1..max`` of uniformly random actions, so that the ``B`` envs are
        at different points of their episodes (rlpyt's decorrelation). Episodes
        that end during decorrelation are not reported; the one in progress
        when it ends keeps counting, so its reported length and return cover all
        its steps since its real start, random ones included. 0 disables it;
        it must be 0 with ``reset_mode="episodic"``.
      reset_mode: ``"auto"``, ``"wait"`` or ``"episodic"`` (see README).
      discount: in ``[0, 1]``, for ``TrajInfo.discounted_return``.
      bootstrap_value: also return ``samples.bootstrap_value`` ``[B]``.
      final_observation: ``"sparse"`` (default) keeps the true next observation
        of every step that can be bootstrapped from (not done, or truncated) at
        almost no cost; ``"dense"`` also keeps it on terminated steps, for
        learners that need it (e.g. models of the dynamics), at the cost of a
        second ``[T, B, *obs]`` array. The sparse store keeps ``K`` slots per
        env: ``ceil(T / limit)`` for an unmodified built-in gymnax env (possibly
        under [`jaxsample.envs`][jaxsample.envs] wrappers) whose time limit is known for
        sure, else ``T`` (as much memory as ``"dense"``), so it is exact for
        any env ([`truncation_bound`][jaxsample.sampler.truncation_bound]).
      store_agent_state: also return the agent's state before every step,
        ``samples.agent.state`` ``[T, B, ...]`` (ALF's ``use_rollout_state``).
      env_ranks: the global rank of each of the ``B`` envs (default
        ``range(B)``); keys and ``agent.initial_state`` depend on it.
      global_B: the number of envs over all devices and processes (default
        ``max(env_ranks) + 1``).
      traj_fields: user fields of ``TrajInfo`` (rlpyt's ``TrajInfoCls``): a
        list of [`TrajField`][jaxsample.traj_info.TrajField], pure per-step reducers
        carried with the built-in fields (decorrelation steps included);
        reported in ``batch.traj_infos.extra[name]`` and by
        [`summarize`][jaxsample.traj_info.summarize].
      traj_done: the name of a bool scalar entry of the env's ``info`` that
        marks the end of a game (rlpyt's ``traj_done``): a termination ends a
        trajectory (``TrajInfo.completed``, fresh accumulators) only where it
        is True, a truncation always; episodes (``done``, resets) are
        unchanged. None: every episode end ends a trajectory.
    """

    batch_spec: BatchSpec
    _: dataclasses.KW_ONLY
    max_decorrelation_steps: int = 0
    reset_mode: ResetMode = "auto"
    discount: float = 0.99
    bootstrap_value: bool = False
    final_observation: FinalObservation = "sparse"
    store_agent_state: bool = False
    env_ranks: tuple[int, ...] = None  # type: ignore[assignment]  # default range(B)
    global_B: int = None  # type: ignore[assignment]  # default max(env_ranks) + 1
    traj_fields: tuple[TrajField, ...] = ()
    traj_done: str | None = None

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        batch_spec = self.batch_spec
        if not isinstance(batch_spec, BatchSpec):
            raise TypeError(f"batch_spec must be a jaxsample.BatchSpec(T, B), got {batch_spec!r}")
        T = check_int("batch_spec.T", getattr(batch_spec, "T", None), 1)
        if T > EPOCH:
            raise ValueError(f"batch_spec.T must be <= 2**30, got {T}")
        B = check_int("batch_spec.B", getattr(batch_spec, "B", None), 1)
        put("batch_spec", BatchSpec(T, B))
        reset_mode = self.reset_mode
        if reset_mode not in RESET_MODES:
            raise ValueError(f"reset_mode must be one of {RESET_MODES}, got {reset_mode!r}")
        decorrelation = check_int("max_decorrelation_steps", self.max_decorrelation_steps, 0)
        if reset_mode == "episodic" and decorrelation:
            raise ValueError(
                "max_decorrelation_steps must be 0 with reset_mode='episodic' "
                "(every batch resets all envs, so there is nothing to decorrelate)"
            )
        put("max_decorrelation_steps", decorrelation)
        put("discount", check_discount(self.discount))
        put("bootstrap_value", check_bool("bootstrap_value", self.bootstrap_value))
        put("store_agent_state", check_bool("store_agent_state", self.store_agent_state))
        if self.final_observation not in FINAL_OBSERVATION_STORES:
            raise ValueError(
                f"final_observation must be one of {FINAL_OBSERVATION_STORES}, "
                f"got {self.final_observation!r}"
            )
        env_ranks = self.env_ranks
        if env_ranks is None:
            env_ranks = tuple(range(B))
        else:
            env_ranks = tuple(check_int("env_ranks[i]", r, 0) for r in env_ranks)
            if len(env_ranks) != B:
                raise ValueError(f"env_ranks has {len(env_ranks)} entries, but B={B}")
            if len(set(env_ranks)) != B:
                raise ValueError("env_ranks must be distinct")
        put("env_ranks", env_ranks)
        global_B = max(env_ranks) + 1 if self.global_B is None else self.global_B
        global_B = check_int("global_B", global_B, 1)
        if max(env_ranks) >= global_B:
            raise ValueError(f"env_ranks must be < global_B={global_B}, got {max(env_ranks)}")
        put("global_B", global_B)
        put("traj_fields", check_traj_fields(self.traj_fields))
        traj_done = self.traj_done
        if traj_done is not None and not isinstance(traj_done, str):
            raise TypeError(
                f"traj_done must be the name of an info entry (a str), got {traj_done!r}"
            )


def sampler_options(factory: str, batch_spec: Any, options: Mapping[str, Any]) -> SamplerOptions:
    """The [`SamplerOptions`][jaxsample.core.options.SamplerOptions] of a factory's ``batch_spec``
    and keyword
    ``options`` (a ``TypeError`` naming ``factory`` for an unknown keyword)."""
    known = {f.name for f in dataclasses.fields(SamplerOptions)} - {"_", "batch_spec"}
    for name in options:
        if name not in known:
            raise TypeError(f"{factory}() got an unexpected keyword argument {name!r}")
    return SamplerOptions(batch_spec, **options)


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

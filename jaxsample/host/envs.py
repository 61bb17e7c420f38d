"""Host (non-JAX) vector environments: optional imports, seeds, spaces, and the
translation of gymnasium's autoreset modes to jaxsample's conventions.

Shared by the host sampler (`jaxsample.host.sampler`) and the in-jit bridge
(`jaxsample.host.bridge`). gymnasium and envpool are optional: nothing here
imports them at module import time, and [`require_gymnasium`][jaxsample.host.require_gymnasium] /
[`require_envpool`][jaxsample.host.require_envpool] raise an ``ImportError`` that names the extra to
install.

The translation (docs/design.md: at a done step the agent next sees the reset
observation, and the step records the true final observation):

* ``AutoresetMode.SAME_STEP``: ``step`` already returns the reset observation of
  a done env and its true final one in ``info["final_obs"]`` (and the step's own
  info in ``info["final_info"]``); nothing extra is called.
* ``AutoresetMode.NEXT_STEP`` (gymnasium's default, and envpool's behaviour):
  ``step`` returns the true final observation; the env would reset on the *next*
  ``step`` call, ignoring its action and returning reward 0 — a step that is
  not a transition and must not be recorded. Instead the done envs are reset at
  once with ``reset(options={"reset_mask": done})``, which also clears the
  pending autoreset, so every ``step`` call is a real transition.
* ``AutoresetMode.DISABLED``: the same masked reset, which that mode requires.

So NEXT_STEP and DISABLED cost one masked ``reset`` call on the steps where some
env ended; SAME_STEP costs nothing extra.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces as gymnax_spaces

HOST_EXTRA = "pip install 'jaxsample[host]'"
ENVPOOL_EXTRA = "pip install 'jaxsample[envpool]'"
NEXT_STEP, SAME_STEP, DISABLED = "NextStep", "SameStep", "Disabled"
AUTORESET_MODES = (NEXT_STEP, SAME_STEP, DISABLED)
SEED_BITS = 31  # envpool takes int32 seeds; gymnasium any non-negative int

EnvFactory = Callable[[list[int]], Any]


def require_gymnasium() -> Any:
    """Import gymnasium (>= 1.1: vector autoreset modes and masked resets), or
    raise an ``ImportError`` naming the extra to install."""
    try:
        import gymnasium
        from gymnasium.vector import AutoresetMode  # noqa: F401  (gymnasium >= 1.1)
    except ImportError as e:
        raise ImportError(
            "jaxsample.host needs gymnasium >= 1.1 (vector envs with autoreset modes "
            f"and masked resets); install it with: {HOST_EXTRA}"
        ) from e
    return gymnasium


def require_envpool() -> Any:
    """Import envpool, or raise an ``ImportError`` naming the extra to install."""
    require_gymnasium()
    try:
        import envpool
    except ImportError as e:
        raise ImportError(f"envpool is not installed; install it with: {ENVPOOL_EXTRA}") from e
    return envpool


def is_envpool(env: Any) -> bool:
    """Whether ``env`` is an envpool pool (checked without importing envpool)."""
    if "envpool" not in sys.modules:
        return False
    return any(c.__name__ == "EnvPoolMixin" for c in type(env).__mro__)


def seed_of(key: jax.Array, rank: Any) -> jax.Array:
    """The seed of the env of global rank ``rank`` as a uint32 scalar
    (jittable); see [`env_seeds`][jaxsample.host.env_seeds]."""
    k_reset = jax.random.split(jax.random.fold_in(key, rank), 3)[0]
    return jax.random.bits(k_reset, dtype=jnp.uint32) >> (32 - SEED_BITS)


def env_seeds(key: jax.Array, env_ranks: Sequence[int]) -> list[int]:
    """The seed of each env: 31 bits of ``split(fold_in(key, rank), 3)[0]``.

    That key is the JAX sampler's reset key of the env of global rank ``rank``,
    so a seed depends only on the run's key and the env's global rank: no
    ``seed + rank`` arithmetic that makes run ``s`` env ``1`` collide with run
    ``s + 1`` env ``0`` (rlpyt), and the same key gives the same seeds whatever
    the number of processes the envs are spread over. Seeds are below
    ``2**31`` (envpool takes int32 seeds).

    Args:
      key: a ``jax.random.key``.
      env_ranks: the global ranks of the envs.

    Returns:
      One Python int per rank.
    """
    return [int(seed_of(key, int(r))) for r in env_ranks]


def decorrelation_plan(
    seeds: np.ndarray, max_steps: int, space: Any
) -> tuple[np.ndarray, np.ndarray]:
    """The decorrelation of each env, drawn on the host from its seed.

    Env ``b``: ``rng = numpy.random.default_rng(seeds[b])`` draws its number of
    steps ``n_b = rng.integers(1, max_steps + 1)`` and seeds a copy of the
    env's (gymnasium) action space with ``rng.integers(2**31)``, whose
    ``sample()`` gives its ``n_b`` random actions. A vector env steps all its
    envs together, so env ``b``'s actions fill the last ``n_b`` of
    ``max_steps`` steps; before them it takes the null action (zeros).

    Returns:
      ``n_steps`` ``[B]`` and ``actions`` ``[max_steps, B, *act]``.
    """
    n_steps = np.zeros((len(seeds),), np.int64)
    actions = None
    for b, seed in enumerate(seeds):
        rng = np.random.default_rng(int(seed))
        n = int(rng.integers(1, max_steps + 1))
        own = copy.deepcopy(space)
        own.seed(int(rng.integers(2**31)))
        sampled = [np.asarray(own.sample()) for _ in range(n)]
        if actions is None:
            actions = np.zeros((max_steps, len(seeds), *sampled[0].shape), sampled[0].dtype)
        actions[max_steps - n :, b] = sampled
        n_steps[b] = n
    assert actions is not None
    return n_steps, actions


def gymnax_space(space: Any) -> Any:
    """The gymnax space of a gymnasium ``Discrete`` or ``Box`` space.

    Build agents for host envs from it, e.g.
    ``RandomAgent(gymnax_space(vec_env.single_action_space))``. Dtypes are
    JAX's canonical ones (float64 becomes float32 unless ``jax_enable_x64``).

    Raises:
      TypeError: for other spaces, or a ``Discrete`` space whose ``start`` is not 0.
    """
    name = type(space).__name__
    if name == "Discrete" and hasattr(space, "n"):
        if int(getattr(space, "start", 0)) != 0:
            raise TypeError(f"a Discrete action space must start at 0, got start={space.start}")
        return gymnax_spaces.Discrete(int(space.n))
    if name == "Box" and hasattr(space, "low"):
        dtype = jax.dtypes.canonicalize_dtype(space.dtype)
        return gymnax_spaces.Box(
            np.asarray(space.low).astype(dtype),
            np.asarray(space.high).astype(dtype),
            tuple(space.shape),
            dtype,
        )
    raise TypeError(
        f"host envs support Discrete and Box action spaces, got {space!r}; "
        "wrap the env to flatten other spaces"
    )


def observation_spec(space: Any) -> jax.ShapeDtypeStruct:
    """Shape and (canonical) dtype of one env's observation, for ``Box`` and
    ``Discrete`` observation spaces."""
    name = type(space).__name__
    if name in ("Box", "Discrete") and getattr(space, "shape", None) is not None:
        return jax.ShapeDtypeStruct(tuple(space.shape), jax.dtypes.canonicalize_dtype(space.dtype))
    raise TypeError(
        f"host envs support Box and Discrete observation spaces, got {space!r}; "
        "wrap the env to flatten other spaces"
    )


def autoreset_mode(env: Any, override: Any = None) -> str:
    """The env's autoreset mode as ``"NextStep"``, ``"SameStep"`` or ``"Disabled"``.

    ``override`` (an ``AutoresetMode`` or its value) wins; otherwise
    ``env.metadata["autoreset_mode"]``; otherwise ``"NextStep"``, gymnasium's
    default.
    """
    mode = override
    if mode is None:
        mode = (getattr(env, "metadata", None) or {}).get("autoreset_mode")
    if mode is None:
        return NEXT_STEP
    mode = getattr(mode, "value", mode)
    if mode not in AUTORESET_MODES:
        raise ValueError(f"autoreset_mode must be one of {AUTORESET_MODES}, got {mode!r}")
    return mode


def time_limit(env: Any) -> int | None:
    """The env's time limit if it can be read (envpool's config, or the spec of
    a gymnasium vector env's first sub-env), else None."""
    try:
        if is_envpool(env):
            limit = env.config.get("max_episode_steps")
        elif hasattr(env, "envs"):
            limit = env.envs[0].spec.max_episode_steps
        else:
            limit = env.get_attr("spec")[0].max_episode_steps
    except Exception:  # an env without a readable spec: no bound
        return None
    if isinstance(limit, (int, np.integer)) and not isinstance(limit, bool) and limit >= 1:
        return int(limit)
    return None


class StepResult(NamedTuple):
    """What `VecAdapter.step` returns besides the observation it writes.

    ``final_rows``: ``[n, *obs]``, the true final observations of the envs where
    ``final_mask`` is True (in env order), or None when no env is done; for the
    other envs the true next observation is the one written to ``out``.
    """

    reward: np.ndarray  # [B], as the env returns it
    terminated: np.ndarray  # [B] bool
    truncated: np.ndarray  # [B] bool
    done: np.ndarray  # [B] bool
    any_done: bool
    info: dict[str, Any]
    final_mask: np.ndarray | None  # [B] bool
    final_rows: np.ndarray | None


class VecAdapter:
    """One host vector env driven in jaxsample's conventions (see module doc).

    Every observation is written into a caller's buffer (``out``, ``[B, *obs]``)
    with the buffer's dtype, so the caller decides where it lands and nothing
    is copied twice.
    """

    def __init__(self, env: Any, mode: str):
        self.env = env
        self.mode = mode
        self.envpool = is_envpool(env)
        self.num_envs = int(env.num_envs)

    def reset(self, seeds: Sequence[int] | None, out: np.ndarray) -> None:
        """Reset every env (with one seed per env, unless ``seeds`` is None or the
        env is an envpool pool, whose seeds are fixed when it is created)."""
        if self.envpool:
            obs, info = self.env.reset()
            if not np.array_equal(
                info.get("env_id", np.arange(self.num_envs)), np.arange(self.num_envs)
            ):
                raise RuntimeError(
                    "envpool returned the envs out of order; use a synchronous pool "
                    "(batch_size == num_envs)"
                )
        else:
            obs, _ = self.env.reset(seed=None if seeds is None else [int(s) for s in seeds])
        out[...] = obs

    def reset_where(self, mask: np.ndarray, out: np.ndarray) -> None:
        """Reset the envs where ``mask`` is True; write their observations to
        ``out[mask]`` and leave the other rows of ``out`` alone."""
        if self.envpool:  # envpool's own API: reset these env ids, get only them back
            obs, info = self.env.reset(np.flatnonzero(mask).astype(np.int32))
            out[np.asarray(info["env_id"])] = obs
        else:
            obs, _ = self.env.reset(options={"reset_mask": np.array(mask, bool)})
            out[mask] = np.asarray(obs)[mask]

    def step(
        self, action: np.ndarray, out: np.ndarray, final_of_terminated: bool = True
    ) -> StepResult:
        """Step every env; write the observation each env's agent sees next (the
        reset observation after a done step) to ``out``.

        The true final observations of the done envs come back in
        ``final_rows`` — of the truncated ones only, when
        ``final_of_terminated`` is False (all a sparse store keeps).
        """
        obs, reward, terminated, truncated, info = self.env.step(action)
        out[...] = obs
        terminated = np.asarray(terminated, bool)
        truncated = np.asarray(truncated, bool)
        done = terminated | truncated
        any_done = bool(done.any())
        final_mask = final_rows = None
        if any_done:
            final_mask = done if final_of_terminated else truncated
            if self.mode == SAME_STEP:
                final = info.get("final_obs")
                if final is None:
                    raise RuntimeError(
                        "a SameStep vector env must return info['final_obs'] for the envs "
                        "that are done; is autoreset_mode right?"
                    )
                if final_of_terminated or truncated.any():
                    final_rows = np.empty((int(final_mask.sum()), *out.shape[1:]), out.dtype)
                    for i, row in enumerate(final[final_mask]):
                        final_rows[i] = row
                else:
                    final_rows = out[:0]  # no truncated env: nothing to keep
            else:
                final_rows = out[final_mask]  # a copy: the true final observations
                self.reset_where(done, out)
        return StepResult(
            reward, terminated, truncated, done, any_done, info, final_mask, final_rows
        )


def write_info(
    info: dict[str, Any], name: str, done: np.ndarray, mode: str, out: np.ndarray
) -> None:
    """Write the per-env entry ``name`` of a step's ``info`` into ``out`` (``[B, ...]``).

    Envs without the entry (gymnasium's ``info["_" + name]`` mask is False, or
    the key is absent) keep what ``out`` holds. For a done env of a SameStep
    env the step's own info is ``info["final_info"]``; ``info`` then holds the
    reset's.
    """

    def put(src: Any, mask: np.ndarray) -> None:
        if not isinstance(src, dict) or name not in src:
            return
        present = np.asarray(src.get(f"_{name}", np.ones(mask.shape, bool)), bool) & mask
        out[present] = np.asarray(src[name])[present]

    if mode == SAME_STEP:
        put(info, ~done)
        if done.any():
            put(info.get("final_info"), done)
    else:
        put(info, np.ones(done.shape, bool))


class EnvHandle:
    """The host env of a sampler or bridge, and which state may use it.

    ``env`` is a vector env instance (reseeded by ``reset(seed=...)``) or a
    factory ``make_env(seeds) -> vector env`` called with one seed per env
    (needed for envpool, whose seeds are fixed at creation). ``generation``
    counts the uses that invalidate older states (bumped just before the envs
    move). ``failure`` describes an error raised after the envs had moved (None
    when there was none since the last `start`): the envs then advanced
    by steps whose outputs nobody received, so they must be restarted.
    """

    def __init__(self, env_or_factory: Any, B: int, mode_override: Any):
        require_gymnasium()
        self.factory: EnvFactory | None = None
        if _is_vector_env(env_or_factory):
            env = env_or_factory
            if is_envpool(env):
                raise TypeError(
                    "env: an envpool pool fixes its seeds when it is created, so it "
                    "cannot be seeded from the sampler's key. Pass a factory instead, "
                    "e.g. jaxsample.host.envpool_factory(task_id, ...) or "
                    "lambda seeds: envpool.make(task_id, env_type='gymnasium', "
                    "num_envs=len(seeds), seed=seeds)"
                )
        elif callable(env_or_factory):
            self.factory = env_or_factory
            env = self._make(list(range(B)))  # a probe, for the spaces
        else:
            raise TypeError(
                "env must be a gymnasium.vector.VectorEnv or a factory "
                f"make_env(seeds: list[int]) -> VectorEnv, got {type(env_or_factory).__name__}"
            )
        if int(env.num_envs) != B:
            raise ValueError(f"env has num_envs={env.num_envs}, but batch_spec.B={B}")
        if is_envpool(env):
            config = env.config
            if config.get("batch_size", B) != config.get("num_envs", B):
                raise ValueError(
                    "env: an asynchronous envpool pool (batch_size < num_envs) is not "
                    "supported; create it with batch_size == num_envs"
                )
        self.mode = autoreset_mode(env, mode_override)
        self.action_space = env.single_action_space
        self.observation_space = env.single_observation_space
        self.time_limit = time_limit(env)
        if self.factory is not None:
            env.close()
            env = None
        self.env = env
        self.adapter = VecAdapter(env, self.mode) if env is not None else None
        self.generation = 0
        self.failure: str | None = None

    def _make(self, seeds: list[int]) -> Any:
        assert self.factory is not None
        env = self.factory(seeds)
        if not _is_vector_env(env):
            raise TypeError(
                f"the env factory must return a gymnasium VectorEnv, got {type(env).__name__}"
            )
        return env

    def start(self, seeds: list[int], out: np.ndarray) -> VecAdapter:
        """(Re)create or reseed the env; write the reset observations to ``out``.

        Older states are stale from here on; ``failure`` is cleared once the
        reset succeeded (an interrupted reset is itself a failure)."""
        self.generation += 1
        self.failure = "the reset of the envs was interrupted"
        if self.factory is not None:
            if self.env is not None:
                self.env.close()
            self.env = self._make(seeds)
            if int(self.env.num_envs) != len(seeds):
                raise ValueError(
                    f"the env factory returned num_envs={self.env.num_envs} for {len(seeds)} seeds"
                )
            self.adapter = VecAdapter(self.env, self.mode)
        assert self.adapter is not None
        self.adapter.reset(seeds, out)
        self.failure = None
        return self.adapter


def _is_vector_env(env: Any) -> bool:
    gymnasium = require_gymnasium()
    return isinstance(env, gymnasium.vector.VectorEnv)


def gymnasium_factory(env_id: str, *, autoreset_mode: Any = SAME_STEP, **kwargs: Any) -> EnvFactory:
    """A factory ``make_env(seeds)`` of a gymnasium ``SyncVectorEnv`` of
    ``len(seeds)`` copies of ``gymnasium.make(env_id, **kwargs)``.

    The sampler seeds the envs with ``reset(seed=seeds)``. ``autoreset_mode``:
    an ``AutoresetMode`` or its value; the default, SameStep, is the one the
    host sampler drives without extra calls (NextStep, gymnasium's default,
    costs a masked ``reset`` on every step where some env ended).
    """
    gymnasium = require_gymnasium()

    def make_env(seeds: list[int]) -> Any:
        fns = [lambda: gymnasium.make(env_id, **kwargs)] * len(seeds)
        return gymnasium.vector.SyncVectorEnv(fns, autoreset_mode=autoreset_mode)

    return make_env


def envpool_factory(task_id: str, **kwargs: Any) -> EnvFactory:
    """A factory ``make_env(seeds)`` of a synchronous envpool pool of
    ``len(seeds)`` envs, env ``i`` seeded with ``seeds[i]``:
    ``envpool.make(task_id, env_type="gymnasium", num_envs=len(seeds), seed=seeds, **kwargs)``.
    """
    envpool = require_envpool()

    def make_env(seeds: list[int]) -> Any:
        return envpool.make(
            task_id, env_type="gymnasium", num_envs=len(seeds), seed=list(seeds), **kwargs
        )

    return make_env

"""The sampler on a JAX suite's env vs the suite's own ``scan(vmap(step))``.

For each suite name (``"navix/Navix-Empty-5x5-v0"``, ...), `suite_overhead`
times, interleaved in one process (`measure`),
``sampler.collect`` of a random agent on the adapted env and a bare
``lax.scan(vmap(step))`` of the suite's OWN auto-resetting step with random
actions (Brax ``AutoResetWrapper(EpisodeWrapper(env))``, Jumanji
``AutoResetWrapper``, Navix's ``step``, XLand-MiniGrid's
``GymAutoResetWrapper``, Craftax's ``auto_reset=True`` env, JaxMARL's own
``step``, which auto-resets, with actions keyed by agent, Pgx's
``pgx.experimental.auto_reset``), storing what
the gymnax floor stores (`own_rollout`). ``ratio`` is the sampler's
throughput over the bare loop's (>= 1: the sampler is faster); ``pool_ratio``
the same for the sampler with cheap resets (``reset_pool``, as ``jaxsample
bench``'s ``"pool"`` method), which avoids the auto-reset's every-step reset.
The suites' own auto-resets compute a reset at every step and select it
(``jnp.where``) or branch per env (Navix's ``lax.cond``, a select under
vmap); the sampler's gymnax step does the same select. For Pgx both
draw uniformly among the legal actions (the sampler's random agent reads
the mask it is given, the own loop Pgx's ``legal_action_mask``); for
Jumanji's masked envs the sampler draws legal actions and the own loop any
action. Run
``python -m jaxsample.bench.suites --B 64 --T 128``.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxsample.bench.measure import JaxPlan, measure, pool_size, random_plan
from jaxsample.envs import suites

__all__ = ["DEFAULT_ENVS", "own_rollout", "suite_overhead"]

DEFAULT_ENVS = (
    "navix/Navix-Empty-5x5-v0",
    "xminigrid/MiniGrid-Empty-5x5",
    "jumanji/Snake-v1",
    "craftax/Craftax-Classic-Symbolic-v1",
    "brax/inverted_pendulum",
    "jaxmarl/MPE_simple_spread_v3",
    "pgx/connect_four",
)


def _own_step(env: Any, params: Any) -> tuple[Callable, Callable, Callable]:
    """``(reset(key) -> (state, obs), step(key, state, action) -> out,
    view(out) -> (state, obs, reward, done))`` of the suite's own
    auto-resetting env, for one env: ``step`` is the suite's step, ``view``
    picks the next state, observation, reward and episode end out of what it
    returns."""
    inner = env.env if hasattr(env, "env") else None
    if isinstance(env, suites.BraxEnv):
        from brax.envs.wrappers.training import AutoResetWrapper, EpisodeWrapper

        own = AutoResetWrapper(EpisodeWrapper(inner, env.episode_length, 1))

        def brax_reset(key: jax.Array) -> tuple[Any, Any]:
            s = own.reset(key)
            return s, s.obs

        return brax_reset, lambda k, s, a: own.step(s, a), lambda s: (s, s.obs, s.reward, s.done)
    if isinstance(env, suites.JumanjiEnv):
        from jumanji.wrappers import AutoResetWrapper

        own = AutoResetWrapper(inner)

        def jumanji_reset(key: jax.Array) -> tuple[Any, Any]:
            state, ts = own.reset(key)
            return state, ts.observation

        return (
            jumanji_reset,
            lambda k, s, a: own.step(s, a),
            lambda out: (out[0], out[1].observation, out[1].reward, out[1].last()),
        )
    if isinstance(env, suites.NavixEnv):
        return (
            _timestep_reset(inner.reset),
            lambda k, ts, a: inner.step(ts, a),
            lambda ts: (ts, ts.observation, ts.reward, ts.is_done()),
        )
    if isinstance(env, suites.XMiniGridEnv):
        from xminigrid.wrappers import GymAutoResetWrapper

        own = GymAutoResetWrapper(inner)
        return (
            _timestep_reset(lambda k: own.reset(params, k)),
            lambda k, ts, a: own.step(params, ts, a),
            lambda ts: (ts, ts.observation, ts.reward, ts.last()),
        )
    if isinstance(env, suites.CraftaxEnv):
        from craftax.craftax_env import make_craftax_env_from_name

        own = make_craftax_env_from_name(inner.name.replace("-NoAutoReset", ""), auto_reset=True)

        def craftax_reset(key: jax.Array) -> tuple[Any, Any]:
            obs, state = own.reset(key, params)
            return state, obs

        return (
            craftax_reset,
            lambda k, s, a: own.step(k, s, a, params),
            lambda out: (out[1], out[0], out[2], out[3]),  # (obs, state, reward, done, info)
        )
    if isinstance(env, suites.PgxEnv):
        from pgx.experimental import auto_reset

        own_pgx = auto_reset(inner.step, inner.init)

        def pgx_reset(key: jax.Array) -> tuple[Any, Any]:
            state = inner.init(key)
            return state, state.observation

        return (
            pgx_reset,
            lambda k, s, a: own_pgx(s, a, k),
            lambda s: (s, s.observation, s.rewards[0], s.terminated | s.truncated),
        )
    if isinstance(env, suites.JaxMARLEnv):
        return _jaxmarl_own_step(inner, env.agents)
    raise TypeError(f"no suite's own step for {type(env).__name__}")


def _jaxmarl_own_step(inner: Any, agents: tuple[str, ...]) -> tuple[Callable, Callable, Callable]:
    """JaxMARL's own auto-resetting ``step`` (dicts keyed by agent), stacked
    over the agents as the adapter stacks them; the episode ends at
    ``dones["__all__"]``."""

    def stack(by_agent: dict[str, Any]) -> jax.Array:
        return jnp.stack([by_agent[a] for a in agents])

    def jaxmarl_reset(key: jax.Array) -> tuple[Any, Any]:
        obs, state = inner.reset(key)
        return state, stack(obs)

    def jaxmarl_step(key: jax.Array, state: Any, action: jax.Array) -> Any:
        return inner.step(key, state, {a: action[i] for i, a in enumerate(agents)})

    return (
        jaxmarl_reset,
        jaxmarl_step,
        lambda out: (out[1], stack(out[0]), stack(out[2]), out[3]["__all__"]),
    )


def _own_action(env: Any, params: Any) -> Callable[[jax.Array, Any], Any]:
    """``sample(key, state)``: the own loop's random action for one env:
    uniform among the legal actions of the suite's state where the env has
    masks (Pgx's ``legal_action_mask``), else ``action_space.sample``."""
    space = env.action_space(params)
    if isinstance(env, suites.PgxEnv):
        from jaxsample.agents import uniform_legal

        return lambda k, s: uniform_legal(k, s.legal_action_mask)
    return lambda k, s: space.sample(k)


def _timestep_reset(reset: Callable) -> Callable:
    """``reset(key) -> (timestep, observation)`` of a reset that returns the
    first timestep (Navix, XLand-MiniGrid)."""

    def timestep_reset(key: jax.Array) -> tuple[Any, Any]:
        ts = reset(key)
        return ts, ts.observation

    return timestep_reset


def own_rollout(env: Any, params: Any, T: int, B: int) -> JaxPlan:
    """The bare ``scan(vmap(step))`` of the suite's own auto-resetting step,
    random actions, storing what the gymnax floor
    ([`bare_rollout`][jaxsample.bench.bare_rollout]) stores: the observation
    each action was taken on (carried from the step before, as a policy's
    rollout carries it), the action, the reward and the episode's end ``[T,
    B]``."""
    reset, step, view = _own_step(env, params)
    sample = jax.vmap(_own_action(env, params))
    vstep = jax.vmap(lambda k, s, a: view(step(k, s, a)))

    def init(key: jax.Array):
        state, obs = jax.vmap(reset)(jax.random.split(key, B))
        return key, state, obs

    def run(carry):
        def body(c, _):
            key, state, obs = c
            key, k_action, k_step = jax.random.split(key, 3)
            action = sample(jax.random.split(k_action, B), state)
            state, next_obs, reward, done = vstep(jax.random.split(k_step, B), state, action)
            out = (obs, action, jnp.asarray(reward, jnp.float32), jnp.asarray(done, bool))
            return (key, state, next_obs), out

        return jax.lax.scan(body, carry, None, T)

    return JaxPlan(init, run)


def suite_overhead(name: str, *, T: int, B: int, reps: int = 5, seed: int = 0) -> dict:
    """Median seconds per call of the sampler (default options, and with
    ``reset_pool``) and of the suite's own loop, steps per second of each,
    ``ratio`` (sampler / own throughput) and ``pool_ratio`` (pooled / own)."""
    env, params = suites.make(name)
    key = jax.random.key(seed)
    pool = pool_size(B)
    programs = {
        "sampler": random_plan(env, params, T, B).build(key),
        "pool": random_plan(env, params, T, B, reset_pool=pool).build(key),
        "own": own_rollout(env, params, T, B).build(key),
    }
    times, _ = measure(programs, reps=reps, min_rep_seconds=0.2)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "env": name,
        "B": B,
        "T": T,
        "reset_pool": pool,
        "sampler_s": med["sampler"],
        "pool_s": med["pool"],
        "own_s": med["own"],
        "sampler_sps": T * B / med["sampler"],
        "pool_sps": T * B / med["pool"],
        "own_sps": T * B / med["own"],
        "ratio": med["own"] / med["sampler"],
        "pool_ratio": med["own"] / med["pool"],
    }


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS))
    p.add_argument("--B", type=int, default=64)
    p.add_argument("--T", type=int, default=128)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    print(
        "| env | B | T | sampler steps/s | with reset_pool | suite's own steps/s "
        "| ratio | with reset_pool |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.envs:
        with jax.numpy_rank_promotion("allow"):
            r = suite_overhead(name, T=args.T, B=args.B, reps=args.reps)
        print(
            f"| {name} | {args.B} | {args.T} | {r['sampler_sps']:,.0f} | {r['pool_sps']:,.0f} "
            f"| {r['own_sps']:,.0f} | {r['ratio']:.2f} | {r['pool_ratio']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""JAX suites through the sampler, each against the suite itself.

For every adapter of :mod:`jaxsample.envs.suites`, one sampler batch (auto
reset, dense final observations, random actions) equals a plain Python loop
over the suite's OWN reset/step (its own wrappers for the time limit where it
has them: Brax's ``EpisodeWrapper``; dm_env's ``step_type``/``discount`` for
Jumanji and XLand-MiniGrid; Navix's ``step_type``; Craftax's ``done`` split by
its health; JaxMARL's ``step_env`` with actions keyed by agent, whose MPE ends
only at its time limit), driven with the batch's actions and the sampler's key schedule
re-derived here (docs/design.md, "Key schedule"). Short time limits make
episodes truncate inside the batch: those steps must be truncated, not
terminated, with the true final observation.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsample as js
from jaxsample import replay
from jaxsample.envs import suites

T, B, LIMIT = 48, 4, 10


@dataclasses.dataclass(frozen=True)
class Case:
    """An adapter and the suite's own reset/step for one env (no batch axis):
    ``reset(key) -> (obs, state)``, ``step(key, state, action) -> (obs,
    state, reward, terminated, truncated)``."""

    env: Any
    params: Any
    reset: Callable
    step: Callable
    limit: int | None = None  # jaxsample's episode_length on top of the suite's
    # the legal actions of (obs, state), for a suite with masks
    mask: Callable | None = None
    # (state before, state after) -> what env_info holds of the step
    info: Callable | None = None


def navix_case() -> Case:
    import navix

    # RGB observations: rendered from the cache the adapter does not carry.
    raw = navix.make("Navix-Empty-5x5-v0", max_steps=LIMIT, observation_fn=navix.observations.rgb)

    def step(key, ts, a):  # the public step: it never sees a done timestep here
        ts = raw.step(ts, a)
        return ts.observation, ts, ts.reward, ts.is_termination(), ts.is_truncation()

    def reset(key):
        ts = raw.reset(key)
        return ts.observation, ts

    return Case(suites.from_navix(raw), suites.NoParams(), reset, step)


def xminigrid_case() -> Case:
    import xminigrid

    raw, params = xminigrid.make("MiniGrid-Empty-5x5")
    params = params.replace(max_steps=LIMIT)

    def reset(key):
        ts = raw.reset(params, key)
        return ts.observation, ts

    def step(key, ts, a):
        ts = raw.step(params, ts, a)
        return (
            ts.observation,
            ts,
            ts.reward,
            ts.last() & (ts.discount == 0),
            ts.last() & (ts.discount > 0),
        )

    return Case(suites.from_xminigrid(raw, params), params, reset, step)


def jumanji_case() -> Case:
    import jumanji

    # Snake ends its own time limit with discount 0 (a termination); the
    # adapter's episode_length below it is the truncation
    raw = jumanji.make("Snake-v1", num_rows=6, num_cols=6, time_limit=1000)

    def reset(key):
        state, ts = raw.reset(key)
        return ts.observation, state

    def step(key, state, a):
        state, ts = raw.step(state, a)
        return (
            ts.observation,
            state,
            ts.reward,
            ts.last() & (ts.discount == 0),
            ts.last() & (ts.discount > 0),
        )

    def mask(obs, state):
        return obs.action_mask

    env = suites.from_jumanji(raw, episode_length=4)
    return Case(env, suites.NoParams(), reset, step, 4, mask)


def pgx_case(name: str = "connect_four") -> Case:
    import pgx

    # a game of at least 7 moves: the adapter's limit of 6 truncates some
    raw = pgx.make(name)

    def reset(key):
        state = raw.init(key)
        return state.observation, state

    def step(key, state, a):
        mover = state.current_player
        state = raw.step(state, a, key)
        return state.observation, state, state.rewards[mover], state.terminated, state.truncated

    def info(before, after):
        return {
            "player": before.current_player,
            "next_player": after.current_player,
            "rewards": after.rewards,
        }

    def mask(obs, state):
        return state.legal_action_mask

    env = suites.from_pgx(raw, episode_length=6)
    return Case(env, suites.NoParams(), reset, step, 6, mask, info)


def craftax_case(name: str = "Craftax-Classic-Symbolic-v1") -> Case:
    from craftax.craftax_env import make_craftax_env_from_name

    raw = make_craftax_env_from_name(name, auto_reset=False)
    params = raw.default_params.replace(max_timesteps=LIMIT)

    def step(key, state, a):
        obs, state, reward, done, _ = raw.step(key, state, a, params)
        truncated = done & (state.timestep >= LIMIT) & (state.player_health > 0)
        return obs, state, reward, done & ~truncated, truncated

    return Case(suites.from_craftax(raw), params, lambda k: raw.reset(k, params), step)


def jaxmarl_case() -> Case:
    """MPE simple spread, 3 agents: observations ``[B, 3, 18]``, actions and
    rewards ``[B, 3]``; its ``max_steps`` of 10 ends an episode at the 11th
    step (tested before the count rises), a truncation."""
    from jaxsample.envs.suites.base import import_quietly

    raw = import_quietly("jaxmarl").make("MPE_simple_spread_v3", max_steps=LIMIT)

    def stack(d):
        return jnp.stack([d[a] for a in raw.agents])

    def reset(key):
        obs, state = raw.reset(key)
        return stack(obs), state

    def step(key, state, a):
        obs, state, reward, dones, _ = raw.step_env(
            key, state, {name: a[i] for i, name in enumerate(raw.agents)}
        )
        return stack(obs), state, stack(reward), jnp.zeros((), bool), dones["__all__"]

    return Case(suites.from_jaxmarl(raw), suites.NoParams(), reset, step)


def brax_case(backend: str = "mjx") -> Case:
    from brax import envs
    from brax.envs.wrappers.training import EpisodeWrapper

    raw = envs.get_environment("inverted_pendulum", backend=backend)
    wrapped = EpisodeWrapper(raw, LIMIT, 1)

    def reset(key):
        s = wrapped.reset(key)
        return s.obs, s

    def step(key, s, a):
        s = wrapped.step(s, a)
        trunc = s.info["truncation"] > 0
        return s.obs, s, s.reward, (s.done > 0) & ~trunc, trunc

    return Case(suites.from_brax(raw, LIMIT), suites.NoParams(), reset, step)


def _select(done, a, b):
    return jax.tree.map(lambda x, y: jax.lax.select(done, x, y), a, b)


def _strong(tree: Any) -> Any:
    """``tree`` without weak types: a suite's reset and step return some
    fields weakly typed and others not, and a jitted step called with states of
    both kinds would compile once for each (~6 s each for Craftax)."""

    def strong(x: jax.Array) -> jax.Array:
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return x
        return jax.lax.convert_element_type(x, x.dtype)

    return jax.tree.map(strong, tree)


def reference(case: Case, key: jax.Array, actions: Any) -> dict[str, Any]:
    """A Python loop over time of the suite's own reset/step (vmapped over the
    ``B`` envs), with the sampler's keys: env ``b`` resets from
    ``split(fold_in(key, b), 3)[0]``; step ``n`` steps with ``fold_in(k_run,
    4 n + 1)`` and auto-resets with ``fold_in(k_run, 4 n + 2)``."""
    reset = jax.jit(lambda k: _strong(jax.vmap(case.reset)(k)))
    step = jax.jit(lambda k, s, a: _strong(jax.vmap(case.step)(k, s, a)))
    select = jax.jit(jax.vmap(_select))
    mask = jax.jit(jax.vmap(case.mask or (lambda o, s: ())))
    info = jax.jit(jax.vmap(case.info or (lambda a, b: ())))
    keys = [jax.random.split(jax.random.fold_in(key, b), 3) for b in range(B)]
    k_run = jnp.stack([k[2] for k in keys])
    obs, state = reset(jnp.stack([k[0] for k in keys]))
    count = np.zeros(B, int)
    fields = ("obs", "final", "reward", "term", "trunc", "mask", "final_mask", "info")
    out: dict[str, list] = {k: [] for k in fields}
    for t in range(T):
        k_step, k_reset = (
            jax.vmap(jax.random.fold_in, (0, None))(k_run, np.uint32(4 * t + s)) for s in (1, 2)
        )
        nobs, nstate, reward, term, trunc = step(k_step, state, actions[t])
        robs, rstate = reset(k_reset)
        count += 1
        if case.limit is not None:
            trunc = np.asarray(trunc) | ((count >= case.limit) & ~np.asarray(term))
        done = np.asarray(term | trunc)
        count[done] = 0
        values = (
            obs,
            nobs,
            reward,
            term,
            trunc,
            mask(obs, state),
            mask(nobs, nstate),
            info(state, nstate),
        )
        for k, v in zip(out, values, strict=True):
            out[k].append(jax.tree.map(np.asarray, v))
        obs, state = select(done, robs, nobs), select(done, rstate, nstate)
    return {k: jax.tree.map(lambda *x: np.stack(x), *v) for k, v in out.items()}


def check_against_reference(case: Case) -> js.Batch:
    """The sampler's batch (default sparse final-observation store) equals the
    reference; the adapter's time limit is known, so the store keeps
    ``ceil(T / limit)`` slots per env, not ``T``."""
    agent = js.agents.RandomAgent(case.env.action_space(case.params))
    sampler = js.make_sampler(case.env, case.params, agent, js.BatchSpec(T, B))
    limit = js.sampler.known_time_limit(case.env, case.params)
    assert limit is not None and sampler._finals.slots == math.ceil(T / limit) < T
    key = jax.random.key(3)
    _, batch = jax.jit(lambda k: sampler.collect(sampler.init(k, ()), ()))(key)
    env = batch.samples.env
    ref = reference(case, key, batch.samples.agent.action)
    close = dict(rtol=1e-5, atol=1e-5)
    # the sparse store keeps every final observation but those of terminations
    kept = jax.tree.map(
        lambda f: np.where(ref["term"].reshape(ref["term"].shape + (1,) * (f.ndim - 2)), 0, f),
        ref["final"],
    )
    for got, want in ((env.observation, ref["obs"]), (env.final_observation, kept)):
        jax.tree.map(lambda g, w: np.testing.assert_allclose(np.asarray(g), w, **close), got, want)
    np.testing.assert_allclose(env.reward, ref["reward"], **close)
    np.testing.assert_array_equal(env.terminated, ref["term"])
    np.testing.assert_array_equal(env.truncated, ref["trunc"])
    # the time limit is hit inside the batch: truncated, not terminated
    assert ref["trunc"].any() and not (ref["trunc"] & ref["term"]).any()
    if case.mask is None:
        assert env.action_mask is None and env.final_action_mask is None
    else:
        # the masks the actions were chosen under, and those of the final
        # observations (exact where the final observation is kept)
        np.testing.assert_array_equal(env.action_mask, ref["mask"])
        kept_mask = np.where(ref["term"][..., None], False, ref["final_mask"])
        np.testing.assert_array_equal(env.final_action_mask, kept_mask)
        # the random agent draws legal actions only
        action = np.asarray(batch.samples.agent.action)
        assert np.take_along_axis(ref["mask"], action[..., None], -1).all()
    if case.info is not None:
        for k, want in ref["info"].items():
            np.testing.assert_array_equal(env.env_info[k], want, err_msg=k)
    return batch


# In the default set (what CI runs, under 5 minutes): the adapters whose
# programs compile in ~5-10 s of CPU here (most of it XLA compiling the
# suite's step and reset twice: in the sampler's program and in the
# reference's), one of each kind: a multi-agent suite, a two-player game. The
# others run in the slow set: Navix and Jumanji (~12 s cold each),
# XLand-MiniGrid (~10 s), Brax on its spring backend (~20 s) and on MJX
# (~40 s), Craftax on Craftax-Classic (~30 s) and Craftax-Symbolic (~75 s).
FAST = {
    "jaxmarl-mpe": jaxmarl_case,
    "pgx": pgx_case,
}
SLOW = {
    "navix": navix_case,
    "jumanji": jumanji_case,
    "xminigrid": xminigrid_case,
    "brax-spring": lambda: brax_case("spring"),
    "craftax-classic": craftax_case,
    "craftax-symbolic": lambda: craftax_case("Craftax-Symbolic-v1"),
    "brax-mjx": brax_case,
}


@pytest.mark.parametrize("name", sorted(FAST))
@pytest.mark.long
def test_batch_equals_the_suites_own_loop(name: str) -> None:
    # navix's own code broadcasts ranks implicitly (conftest raises on that)
    with jax.numpy_rank_promotion("allow"):
        check_against_reference(FAST[name]())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_batch_equals_the_suites_own_loop_slow_suites(name: str) -> None:
    with jax.numpy_rank_promotion("allow"):
        check_against_reference(SLOW[name]())


@pytest.mark.slow
def test_pytree_observations_through_replay_and_actor_critic() -> None:
    """Jumanji's ``Observation`` pytree: actor-critic acts on it, every reset
    mode and decorrelation collect it, the replayer stores it."""
    env, params = suites.make("jumanji/Snake-v1")
    agent = js.agents.CategoricalActorCritic(env.action_space(params), hidden_sizes=(8,))
    obs, _ = env.reset(jax.random.key(0), params)
    agent_params = agent.init(jax.random.key(1), obs)
    sampler = js.make_sampler(
        env, params, agent, js.BatchSpec(8, 2), max_decorrelation_steps=5, reset_mode="wait"
    )
    _, batch = jax.jit(sampler.collect)(sampler.init(jax.random.key(2), agent_params), agent_params)
    leaves = jax.tree.leaves(batch.samples.env.observation)
    assert [x.shape[:2] for x in leaves] == [(8, 2)] * 3
    rep = replay.uniform(sampler.examples, 2, 8)
    stored, _ = rep.replay_all(rep.add(rep.init(), batch))
    jax.tree.map(
        lambda s, b: np.testing.assert_array_equal(np.asarray(s), np.asarray(b)),
        stored.env.observation,
        batch.samples.env.observation,
    )


def test_registry_names_and_errors() -> None:
    assert suites.is_env_name("CartPole-v1") and suites.is_env_name("navix/anything")
    assert not suites.is_env_name("nope/X") and not suites.is_env_name(3)
    with pytest.raises(ValueError, match="unknown suite 'nope'"):
        suites.make("nope/X")
    with pytest.raises(ValueError, match="navix/NoSuchEnv"):
        suites.make("navix/NoSuchEnv")
    with pytest.raises(ValueError, match="not a gymnax environment"):
        suites.make("CartPole-v9")
    with pytest.raises(TypeError, match="episode_length must be an int"):
        suites.SuiteEnv(episode_length=1.5)
    with pytest.raises(ValueError, match="episode_length must be >= 1"):
        suites.SuiteEnv(episode_length=0)
    with pytest.raises(TypeError, match="must be a Brax env"):
        suites.from_brax(object())
    with pytest.raises(TypeError, match="must be a Jumanji Environment"):
        suites.from_jumanji(object())


@pytest.mark.slow
def test_cli_lists_and_collects_suite_envs(capsys) -> None:
    from jaxsample import cli

    assert cli.main(["envs"]) == 0
    out = capsys.readouterr().out
    for line in ("brax/inverted_pendulum", "jumanji/Snake-v1", "navix/Navix-Empty-5x5-v0"):
        assert line in out
    assert "craftax/Craftax-Symbolic-v1" in out and "xminigrid/MiniGrid-Empty-5x5" in out
    with jax.numpy_rank_promotion("allow"):
        assert (
            cli.main(
                [
                    "collect",
                    "--env",
                    "navix/Navix-Empty-5x5-v0",
                    "--B",
                    "4",
                    "--T",
                    "8",
                    "--batches",
                    "1",
                ]
            )
            == 0
        )


def test_brax_adapter_takes_its_observation_size_without_running_reset() -> None:
    """Brax's ``observation_size`` property runs ``reset`` eagerly (an MJX
    reset op by op took ~25 s); the adapter reads the shape abstractly and
    refuses an observation that is not one flat vector."""
    from brax import envs

    raw = envs.get_environment("inverted_pendulum", backend="spring")

    class NoEagerReset(type(raw)):
        @property
        def observation_size(self):
            raise AssertionError("observation_size evaluated")

    raw.__class__ = NoEagerReset
    env = suites.from_brax(raw, 50)
    want = jax.eval_shape(raw.reset, jax.random.PRNGKey(0)).obs.shape
    assert env.observation_space(suites.NoParams()).shape == want == (4,)
    assert env.action_space(suites.NoParams()).shape == (1,)

    class DictObs(type(raw)):
        def reset(self, rng):
            state = super().reset(rng)
            return state.replace(obs={"state": state.obs})

    raw.__class__ = DictObs
    with pytest.raises(TypeError, match="one flat observation vector"):
        suites.from_brax(raw, 50)


def test_known_time_limits_come_from_the_suites_rules() -> None:
    """Snake never truncates by itself (its time limit is a termination): no
    adapter limit, no truncation, one slot. An adapter subclass that changes
    the step without stating its rule has no known limit (T slots)."""
    import jumanji

    snake = suites.from_jumanji(jumanji.make("Snake-v1"))
    assert js.sampler.known_time_limit(snake, suites.NoParams()) == math.inf
    assert js.sampler.truncation_bound(snake, suites.NoParams(), 64) == 1
    assert (
        suites.from_jumanji(jumanji.make("Snake-v1"), episode_length=30).known_time_limit(
            suites.NoParams()
        )
        == 30
    )

    class Custom(suites.JumanjiEnv):
        def suite_step(self, key, inner, action, params):
            return super().suite_step(key, inner, action, params)

    custom = Custom(jumanji.make("Snake-v1"), episode_length=30)
    assert js.sampler.known_time_limit(custom, suites.NoParams()) is None
    assert js.sampler.truncation_bound(custom, suites.NoParams(), 64) == 64
    maze = suites.from_jumanji(jumanji.make("Maze-v0"))  # its rule is not known here
    assert js.sampler.known_time_limit(maze, suites.NoParams()) is None

    class Delegating:  # a wrapper in PureJaxRL's style: it may truncate on its own
        def __init__(self, env):
            self._env = env

        def __getattr__(self, name):
            return getattr(self._env, name)

    wrapped = Delegating(snake)
    assert wrapped.known_time_limit(suites.NoParams()) == math.inf  # reachable, yet
    assert js.sampler.known_time_limit(wrapped, suites.NoParams()) is None


@pytest.mark.slow
def test_the_benchmarks_own_loop_stores_what_the_gymnax_floor_stores() -> None:
    """``jaxsample.bench.suites.own_rollout`` (the suite's own auto-resetting
    loop the sampler is timed against) stores, as the gymnax floor does, the
    observation each action was taken on, the action, the reward and the
    episode's end: here equal to Navix's own reset and step driven by the
    stored actions, over episodes that end inside the batch."""
    import navix

    from jaxsample.bench.suites import own_rollout

    raw = navix.make("Navix-Empty-5x5-v0", max_steps=5)
    env, params = suites.from_navix(raw), suites.NoParams()
    steps, key = 12, jax.random.key(0)
    plan = own_rollout(env, params, steps, 2)
    with jax.numpy_rank_promotion("allow"):
        _, (obs, action, reward, done) = jax.jit(plan.fn)(jax.jit(plan.init)(key))
        ts = jax.vmap(raw.reset)(jax.random.split(key, 2))
        for t in range(steps):
            np.testing.assert_array_equal(obs[t], ts.observation)
            ts = jax.vmap(raw.step)(ts, action[t])
            np.testing.assert_array_equal(reward[t], ts.reward)
            np.testing.assert_array_equal(done[t], ts.is_done())
    assert done.dtype == bool and done.sum() >= 2


@pytest.mark.slow
def test_the_suite_benchmark_reports_the_sampler_with_and_without_pooled_resets() -> None:
    """``suite_overhead`` times the default sampler, the sampler with
    ``reset_pool`` and the suite's own loop in one process; the ratios are the
    own loop's seconds over each sampler's."""
    from jaxsample.bench.suites import suite_overhead

    with jax.numpy_rank_promotion("allow"):
        r = suite_overhead("navix/Navix-Empty-5x5-v0", T=4, B=16, reps=1)
    assert r["reset_pool"] == 8
    for name in ("sampler", "pool", "own"):
        assert r[f"{name}_s"] > 0 and r[f"{name}_sps"] == pytest.approx(4 * 16 / r[f"{name}_s"])
    assert r["ratio"] == pytest.approx(r["own_s"] / r["sampler_s"])
    assert r["pool_ratio"] == pytest.approx(r["own_s"] / r["pool_s"])

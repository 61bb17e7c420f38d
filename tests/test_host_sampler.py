"""``jaxsample.host.make_host_sampler`` against independent references.

* A plain Python loop over ONE gymnasium (or envpool) env per rank, driven as
  docs/design.md says and seeded / keyed as ``jaxsample.host.sampler``'s docstring
  says, re-derives every field of every batch (over 3 consecutive ``collect``
  calls), for every gymnasium autoreset mode and every reset mode.
* the batch contract (data conventions, stream seams, restart values,
  TrajInfo, CartPole's dynamics) is checked on these cases and on the JAX
  sampler by one function, in tests/test_batch_contract.py.
* determinism, seeding, the state after an error, and bad input are in
  tests/test_host_sampler_state.py, on the cases defined here.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import gymnasium as gym
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import CounterAgent
from helpers import assert_close as _close
from helpers import counter_params as params
from helpers import counter_value as np_value

import jaxsample as js
from jaxsample import host

pytestmark = pytest.mark.filterwarnings(
    # envpool builds its Box spaces from float64 bounds
    "ignore:.*precision lowered by casting to float32:UserWarning"
)

T, B, N_BATCHES = 24, 4, 3
LIMIT = 13  # time limit: truncations and terminations both happen
DECORRELATION = 8
DISCOUNT = 0.9
WS = (1.0, -0.5, 2.0)  # new agent params every batch
KEY = jax.random.key(42)


class StepCount(gym.Wrapper):
    """Puts the number of steps since the last reset in ``info["count"]``."""

    def reset(self, **kwargs):
        self.n = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        self.n += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "count": self.n}


def make_single(limit: int = LIMIT) -> gym.Env:
    return StepCount(gym.make("CartPole-v1", max_episode_steps=limit))


def make_vec(mode: str, n: int = B, limit: int = LIMIT) -> gym.vector.VectorEnv:
    return gym.vector.SyncVectorEnv([lambda: make_single(limit)] * n, autoreset_mode=mode)


# ----------------------------------------------------------------------------
# The reference: one host env per rank, in a plain Python loop.
# ----------------------------------------------------------------------------


class _Traj:
    def __init__(self):
        self.rewards: list[float] = []

    def info(self, completed: bool) -> dict[str, Any]:
        r = np.asarray(self.rewards, np.float64)
        return {
            "completed": completed,
            "length": len(r),
            "episode_return": float(r.sum()),
            "discounted_return": float(np.sum(DISCOUNT ** np.arange(len(r)) * r)),
            "nonzero_rewards": int(np.count_nonzero(r)),
        }


class SingleGym:
    """One gymnasium env with the sampler's documented seeding."""

    info_key = "count"

    def __init__(self, seed: int):
        self.env = make_single()
        self.seed = seed

    def first_reset(self):
        return self.env.reset(seed=self.seed)[0]

    def reset(self):
        return self.env.reset()[0]

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(int(action))
        return obs, float(reward), bool(terminated), bool(truncated), info[self.info_key]


class SingleEnvpool:
    """One envpool env (a pool of one, seeded with the env's seed)."""

    info_key = "elapsed_step"

    def __init__(self, seed: int):
        import envpool

        self.env = envpool.make(
            "CartPole-v1", env_type="gymnasium", num_envs=1, seed=[seed], max_episode_steps=LIMIT
        )

    def first_reset(self):
        return self.env.reset()[0][0]

    def reset(self):
        return self.env.reset()[0][0]

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(np.asarray([action], np.int32))
        return (
            obs[0],
            float(reward[0]),
            bool(terminated[0]),
            bool(truncated[0]),
            info[self.info_key][0],
        )


@jax.jit
def agent_actions(k_run, steps):
    """CounterAgent's actions at the given steps of one env (its keys are
    ``fold_in(k_run, 4 n)``, as the sampler's docstring says)."""
    space = gymnax.environments.spaces.Discrete(2)
    return jax.vmap(lambda n: space.sample(jax.random.fold_in(k_run, 4 * n)))(steps)


class RefEnv:
    """The env of global rank ``rank`` driven as docs/design.md and the host
    sampler's docstring say (seeds, keys, decorrelation, resets)."""

    def __init__(self, single_cls, key, rank, *, decorrelation):
        self.rank = rank
        k_reset, k_decorrelate, self.k_run = jax.random.split(jax.random.fold_in(key, rank), 3)
        seed = int(jax.random.bits(k_reset, dtype=jnp.uint32)) >> 1
        self.env = single_cls(seed)
        self.n = 0  # steps taken in all batches (one key epoch here)
        # The agent's action at step n: sampled with fold_in(k_run, 4 n).
        self.actions = agent_actions(self.k_run, np.arange(N_BATCHES * T, dtype=np.uint32))
        self.obs = self.env.first_reset()
        self._after_reset()
        self.idle = self.stale = False
        if decorrelation:
            rng = np.random.default_rng(int(jax.random.bits(k_decorrelate, dtype=jnp.uint32)))
            n = int(rng.integers(1, decorrelation + 1))
            space = gym.spaces.Discrete(2)
            space.seed(int(rng.integers(2**31)))
            first = decorrelation - n
            for _ in range(first):  # thrown away: the null action, resets on done
                self._env_step(0)
            if first:
                self.obs = self.env.reset()
            for _ in range(n):
                action = space.sample()
                obs, reward, done, *_ = self._env_step(action)
                self.traj.rewards.append(reward)
                self._advance(obs, action, reward, done)

    def _env_step(self, action):
        """A step; the env is reset at once after a done step."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        final = obs
        if terminated or truncated:
            obs = self.env.reset()
        return obs, reward, terminated or truncated, terminated, truncated, final, info

    def _after_reset(self):
        self.prev_action, self.prev_reward = 0, 0.0
        self.count = 100 * self.rank
        self.traj = _Traj()

    def _advance(self, obs, action, reward, done):
        self.obs = obs
        if done:
            self._after_reset()
        else:
            self.prev_action, self.prev_reward = int(action), float(reward)

    def start_batch(self, mode: str) -> int:
        if mode == "episodic":
            self.obs = self.env.reset()
            self._after_reset()
        elif self.stale:
            self.obs = self.env.reset()
        self.idle = self.stale = False
        return self.count

    def step(self, t: int, mode: str, w: float) -> dict[str, Any] | None:
        action = self.actions[self.n]
        self.n += 1
        if self.idle:  # stepped with the null action, outputs dropped
            self._env_step(0)
            self.stale = True
            return None
        obs_t = np.asarray(self.obs)
        value = np_value(w, obs_t, self.prev_reward, self.count)
        obs, reward, _, terminated, truncated, final, info = self._env_step(action)
        if mode == "episodic" and t == T - 1 and not terminated:
            truncated = True
        done = terminated or truncated
        self.traj.rewards.append(reward)
        rec = {
            "observation": obs_t,
            "action": action,
            "prev_action": self.prev_action,
            "prev_reward": self.prev_reward,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
            "valid": True,
            "final_observation": np.asarray(final),
            "info": info,
            "count": self.count,
            "value": value,
            "traj": self.traj.info(completed=done),
        }
        self.count += 1
        self._advance(obs, action, reward, done)
        if done and mode != "auto":
            self.idle = True
        return rec


def _stack(records: list[list[dict | None]], name: str, sub: str | None = None) -> np.ndarray:
    blank = next(r for row in records for r in row if r is not None)

    def get(r):
        if r is None:
            return np.zeros_like(np.asarray(get(blank)))
        return np.asarray(r[name] if sub is None else r[name][sub])

    return np.stack([np.stack([get(r) for r in row]) for row in records])


class RefBatch(NamedTuple):
    records: list[list[dict | None]]
    initial_count: np.ndarray
    bootstrap: np.ndarray

    def field(self, name: str, sub: str | None = None) -> np.ndarray:
        return _stack(self.records, name, sub)


def reference(single_cls, mode: str, decorrelation: int, ranks) -> list[RefBatch]:
    envs = [RefEnv(single_cls, KEY, r, decorrelation=decorrelation) for r in ranks]
    out = []
    for w in WS:
        initial = np.asarray([e.start_batch(mode) for e in envs])
        records = [[e.step(t, mode, w) for e in envs] for t in range(T)]
        boot = np.asarray([np_value(w, e.obs, e.prev_reward, e.count) for e in envs])
        out.append(RefBatch(records, initial, boot))
    return out


# ----------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------


class Case(NamedTuple):
    backend: str  # "SameStep" / "NextStep" / "Disabled" (gymnasium) or "envpool"
    mode: str
    decorrelation: int
    store: str
    env_ranks: tuple[int, ...] = tuple(range(B))
    store_agent_state: bool = False


CASES = {
    "auto-samestep": Case("SameStep", "auto", DECORRELATION, "sparse"),
    "auto-nextstep": Case("NextStep", "auto", DECORRELATION, "sparse"),
    "wait-disabled-dense": Case("Disabled", "wait", DECORRELATION, "dense"),
    "wait-samestep": Case("SameStep", "wait", DECORRELATION, "sparse", store_agent_state=True),
    # env b is the env of global rank env_ranks[b]: its seed, keys, agent state.
    "episodic-nextstep-ranks": Case("NextStep", "episodic", 0, "sparse", (5, 2, 0, 3)),
    "envpool-auto": Case("envpool", "auto", DECORRELATION, "sparse"),
}


def make_env(backend: str):
    if backend == "envpool":
        return host.envpool_factory("CartPole-v1", max_episode_steps=LIMIT)
    return make_vec(backend)


def info_spec(backend: str) -> dict[str, jax.ShapeDtypeStruct]:
    name = "elapsed_step" if backend == "envpool" else "count"
    return {name: jax.ShapeDtypeStruct((), jnp.int32)}


@functools.cache
def sampler_of(name: str) -> host.HostSampler:
    return case_sampler(CASES[name], make_env(CASES[name].backend))


def case_sampler(c: Case, env: Any) -> host.HostSampler:
    """The host sampler of case ``c`` on ``env`` (its device programs depend on
    the case, not on the env: samplers of one case share their compilations)."""
    space = gymnax.environments.spaces.Discrete(2)
    return host.make_host_sampler(
        env,
        CounterAgent(space),
        js.BatchSpec(T, B),
        max_decorrelation_steps=c.decorrelation,
        reset_mode=c.mode,
        discount=DISCOUNT,
        bootstrap_value=True,
        final_observation=c.store,
        env_ranks=c.env_ranks,
        global_B=6,
        store_agent_state=c.store_agent_state,
        agent_params=params(1.0),
        info_spec=info_spec(c.backend),
    )


def collect(sampler, key=KEY, ws=WS):
    state = sampler.init(key, params(ws[0]))
    batches = []
    for w in ws:
        state, batch = sampler.collect(state, params(w))
        batches.append(jax.device_get(batch))
    return state, batches


@functools.cache
def run(name: str):
    return collect(sampler_of(name))[1]


@functools.cache
def ref(name: str) -> list[RefBatch]:
    c = CASES[name]
    single = SingleEnvpool if c.backend == "envpool" else SingleGym
    return reference(single, c.mode, c.decorrelation, c.env_ranks)


def check_against_reference(batch, r: RefBatch, case: Case) -> None:
    s, ti = batch.samples, batch.traj_infos
    env, agent = s.env, s.agent
    valid = r.field("valid")
    _close("observation", env.observation, r.field("observation"), np.float32)
    _close("reward", env.reward, r.field("reward"), np.float32)
    _close("prev_reward", env.prev_reward, r.field("prev_reward"), np.float32)
    _close("terminated", env.terminated, r.field("terminated"), bool)
    _close("truncated", env.truncated, r.field("truncated"), bool)
    _close("done", env.done, r.field("terminated") | r.field("truncated") | ~valid, bool)
    _close("valid", s.valid, valid, bool)
    _close("action", agent.action, r.field("action"), np.int32)
    _close("prev_action", agent.prev_action, r.field("prev_action"), np.int32)
    (name,) = info_spec(case.backend)
    _close(f"env_info[{name}]", env.env_info[name], r.field("info"), np.int32)
    keep = valid
    if case.store == "sparse":
        keep = keep & (~r.field("terminated") | r.field("truncated"))
    expected = np.where(keep[..., None], r.field("final_observation"), 0)
    _close("final_observation", env.final_observation, expected, np.float32)
    for f in ("completed", "length", "episode_return", "discounted_return", "nonzero_rewards"):
        _close(f"traj.{f}", getattr(ti, f), r.field("traj", f))
    _close("count", agent.agent_info["count"], r.field("count"), np.int32)
    _close("value", agent.agent_info["value"], r.field("value"), np.float32)
    _close("initial_state", agent.initial_state, r.initial_count, np.int32)
    if case.store_agent_state:  # the state before each step: the counter
        _close("agent.state", agent.state, r.field("count"), np.int32)
    else:
        assert agent.state is None
    _close("bootstrap_value", s.bootstrap_value, r.bootstrap, np.float32)


@pytest.mark.parametrize("name", list(CASES))
def test_matches_plain_loop_reference(name):
    for k, (batch, r) in enumerate(zip(run(name), ref(name), strict=True)):
        try:
            check_against_reference(batch, r, CASES[name])
        except AssertionError as e:
            raise AssertionError(f"batch {k}: {e}") from None


def test_cases_exercise_what_they_claim():
    """The events each case is for happen (no vacuous comparison)."""
    for name, c in CASES.items():
        rs = ref(name)
        term = np.stack([r.field("terminated") for r in rs])
        trunc = np.stack([r.field("truncated") for r in rs])
        valid = np.stack([r.field("valid") for r in rs])
        assert term.any() and trunc.any(), name
        if c.mode == "auto":
            # Several truncations of one env in one batch: the sparse store's
            # slots beyond the first are used.
            assert trunc.sum(axis=1).max() >= 2, name
        else:
            assert (~valid).any(), name  # idle steps
        if c.decorrelation:
            assert (rs[0].field("traj", "length")[0] > 1).any(), name
    # "wait": an env ends early in one batch and is reset again (it was stepped
    # while idle) at the start of the next.
    assert any((~r.field("valid")[:-1]).any() for r in ref("wait-samestep")[:-1])


def test_autoreset_modes_give_the_same_batches():
    """SameStep, NextStep and Disabled vector envs, translated, are one stream:
    same key, same batches (the sparse and dense stores agree where both keep)."""
    for a, b in (("auto-samestep", "auto-nextstep"), ("wait-samestep", "wait-disabled-dense")):
        for x, y in zip(run(a), run(b), strict=True):

            def common(b):  # without the store and the (optional) stored states
                s = b.samples
                env, agent = s.env.replace(final_store=0), s.agent.replace(state=None)
                return b.replace(samples=s.replace(env=env, agent=agent))

            fx, fy = common(x), common(y)
            for leaf_x, leaf_y in zip(jax.tree.leaves(fx), jax.tree.leaves(fy), strict=True):
                np.testing.assert_array_equal(leaf_x, leaf_y)
            keep = np.asarray(~x.samples.env.terminated | x.samples.env.truncated)
            np.testing.assert_array_equal(
                np.asarray(x.samples.env.final_observation)[keep],
                np.asarray(y.samples.env.final_observation)[keep],
            )
            assert isinstance(x.samples.env.final_store, js.SparseFinalObservation)
    # The dense store also keeps the true final observation of terminated steps.
    d = run("wait-disabled-dense")
    term = np.concatenate([np.asarray(b.samples.env.terminated) for b in d])
    final = np.concatenate([np.asarray(b.samples.env.final_observation) for b in d])
    assert term.any() and np.all(np.abs(final[term]).max(axis=-1) > 0)


# ----------------------------------------------------------------------------
# The JAX sampler with the same settings (the batch contract of both samplers:
# tests/test_batch_contract.py).
# ----------------------------------------------------------------------------


@functools.cache
def jax_batches(**options):
    """The JAX sampler on gymnax CartPole with the same settings and agent
    (``options``: more or other ``make_sampler`` options)."""
    env, env_params = gymnax.make("CartPole-v1")
    env_params = env_params.replace(max_steps_in_episode=LIMIT)
    sampler = js.make_sampler(
        env,
        env_params,
        CounterAgent(env.action_space(env_params)),
        js.BatchSpec(T, B),
        agent_params=params(1.0),
        **{
            "max_decorrelation_steps": DECORRELATION,
            "discount": DISCOUNT,
            "bootstrap_value": True,
            **options,
        },
    )
    state = jax.jit(sampler.init)(KEY, params(1.0))
    collect_jit = jax.jit(sampler.collect)
    batches = []
    for w in WS:
        state, batch = collect_jit(state, params(w))
        batches.append(jax.device_get(batch))
    return batches


def test_same_agent_keys_as_the_jax_sampler():
    """The host sampler gives the agent the JAX sampler's keys: with the same
    key, rank and step, CounterAgent (which samples from its key) takes the
    same actions on gymnasium's CartPole as on gymnax's, decorrelation and all."""
    for jb, hb in zip(jax_batches(), run("auto-samestep"), strict=True):
        np.testing.assert_array_equal(hb.samples.agent.action, jb.samples.agent.action)
        # ...while the envs themselves differ (gymnasium seeds its own resets).
        assert not np.array_equal(hb.samples.env.observation, jb.samples.env.observation)


def test_examples_describe_a_step_as_the_jax_sampler_does():
    hs = sampler_of("auto-samestep")
    env, env_params = gymnax.make("CartPole-v1")
    js_sampler = js.make_sampler(
        env,
        env_params,
        CounterAgent(env.action_space(env_params)),
        js.BatchSpec(T, B),
        bootstrap_value=True,
        agent_params=params(1.0),
    )
    ex_h, ex_j = hs.examples, js_sampler.examples
    assert ex_h.env.env_info == {"count": jax.ShapeDtypeStruct((), jnp.int32)}
    ex_h = ex_h.replace(env=ex_h.env.replace(env_info={}))
    ex_j = ex_j.replace(env=ex_j.env.replace(env_info={}))
    assert jax.tree.structure(ex_h) == jax.tree.structure(ex_j)
    assert jax.tree.leaves(ex_h) == jax.tree.leaves(ex_j)
    # ...and a batch has these shapes with [T, B] in front.
    b = run("auto-samestep")[0]
    one = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[2:], x.dtype), b.samples.env.reward)
    assert one == hs.examples.env.reward
    assert b.samples.env.final_observation.shape == (T, B, 4)

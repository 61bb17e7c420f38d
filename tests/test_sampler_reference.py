"""An independent reference for ``jaxsample.make_sampler``.

The reference below steps ONE gymnax environment at a time, in a plain Python
loop, with gymnax's own ``env.reset`` / ``env.step`` / ``env.step_env`` /
``env.reset_env`` (no vmap, no scan and no jaxsample code; the auto-reset
step written out with the step and reset keys, ``helpers.auto_step``). It
re-derives every per-env key from the schedule given in the docstring of
``jaxsample.core.keys`` and implements the data conventions and
reset modes of docs/design.md from scratch in numpy; every field of every ``Batch``
the sampler returns is then compared with it, over several consecutive
``collect`` calls (so the stream must also continue exactly across batches).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import CounterAgent, auto_step, counter_value, step_key
from helpers import assert_close as _close

import jaxsample as js

# ----------------------------------------------------------------------------
# Agents. RandomAgent is jaxsample's; CounterAgent is defined here so that its
# value and state are known functions of its inputs.
# ----------------------------------------------------------------------------


# ----------------------------------------------------------------------------
# The reference: one env at a time, in Python.
# ----------------------------------------------------------------------------


def _split(key, n=2):
    return list(jax.random.split(key, n))


def _np(x) -> np.ndarray:
    return np.asarray(jax.device_get(x))


class _Traj:
    """The running statistics of one trajectory, from scratch (float64)."""

    def __init__(self, discount: float):
        self.discount = discount
        self.rewards: list[float] = []

    def add(self, reward: float) -> None:
        self.rewards.append(float(reward))

    def info(self, completed: bool) -> dict[str, Any]:
        r = np.asarray(self.rewards, np.float64)
        return {
            "completed": completed,
            "length": len(r),
            "episode_return": float(r.sum()),
            "discounted_return": float(np.sum(self.discount ** np.arange(len(r)) * r)),
            "nonzero_rewards": int(np.count_nonzero(r)),
        }


class RefEnv:
    """One environment of global rank ``rank`` driven exactly as docs/design.md says."""

    def __init__(self, env, env_params, key, rank, *, max_decorrelation_steps, discount, sample):
        self.env, self.env_params, self.rank = env, env_params, rank
        self.discount, self.sample = discount, sample
        a = _np(self.sample(jax.random.key(0)))
        self.null = np.zeros(a.shape, a.dtype)

        k_reset, k_decorrelate, self.k_run = _split(jax.random.fold_in(key, rank), 3)
        self.n = 0  # steps taken in all batches
        self.obs, self.env_state = env.reset(k_reset, env_params)
        self._after_reset()
        self.idle = False
        if max_decorrelation_steps:
            k_count, k_steps = _split(k_decorrelate)
            n = int(jax.random.randint(k_count, (), 1, max_decorrelation_steps + 1))
            assert 1 <= n <= max_decorrelation_steps
            for i in range(n):
                k_action, k_env = _split(jax.random.fold_in(k_steps, i))
                action = self.sample(k_action)
                obs, env_state, reward, terminated, truncated, _ = env.step(
                    k_env, self.env_state, action, env_params
                )
                # Trajectory statistics keep running through decorrelation; the
                # agent does not act, so its state stays initial.
                self.traj.add(float(reward))
                self._advance(obs, env_state, action, reward, bool(terminated or truncated))

    def _after_reset(self) -> None:
        self.prev_action = self.null
        self.prev_reward = 0.0
        self.count = 100 * self.rank  # CounterAgent's initial state
        self.traj = _Traj(self.discount)

    def _advance(self, obs, env_state, action, reward, done) -> None:
        self.obs, self.env_state = obs, env_state
        if done:
            self._after_reset()
        else:
            self.prev_action = _np(action)
            self.prev_reward = float(reward)

    def key(self, n: int, stream: int) -> jax.Array:
        """Key of stream (0 agent, 1 env step, 2 reset, 3 episodic reset) for
        overall step n (helpers.step_key)."""
        return step_key(self.k_run, n, stream)

    def start_batch(self, mode: str) -> int:
        """Returns the agent state at the start of the batch."""
        self.idle = False
        if mode == "episodic":
            k_reset = self.key(self.n, 3)
            self.obs, self.env_state = self.env.reset(k_reset, self.env_params)
            self._after_reset()
        return self.count

    def step(self, t: int, T: int, mode: str, w: float) -> dict[str, Any]:
        k_agent = self.key(self.n, 0)
        self.n += 1  # idle steps use up their keys too
        if self.idle:
            return None
        obs = _np(self.obs)
        action = self.sample(k_agent)  # both agents sample the action space
        count = self.count
        value = counter_value(w, obs, self.prev_reward, count)
        next_obs, env_state, reward, terminated, truncated, info = auto_step(
            self.env, self.env_params, self.k_run, self.n - 1, self.env_state, action
        )
        reward, terminated, truncated = float(reward), bool(terminated), bool(truncated)
        if mode == "episodic" and t == T - 1 and not terminated:
            truncated = True
        done = terminated or truncated
        self.traj.add(reward)
        rec = {
            "observation": obs,
            "action": _np(action),
            "prev_action": self.prev_action,
            "prev_reward": self.prev_reward,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
            "done": done,
            "valid": True,
            "final_observation": _np(info["final_observation"]),
            "env_info": {
                k: _np(v)
                for k, v in info.items()
                if k not in ("final_observation", "terminated", "truncated")
            },
            "count": count,
            "value": value,
            "traj": self.traj.info(completed=done),
        }
        self.count = count + 1
        self._advance(next_obs, env_state, action, reward, done)
        if done and mode != "auto":
            self.idle = True
        return rec


class RefBatch(NamedTuple):
    fields: dict[str, Any]  # [T, B, ...] numpy arrays (env_info and traj: dicts)
    initial_count: np.ndarray  # [B]
    bootstrap_value: np.ndarray  # [B]


def _stack(records: list[list[dict | None]], blank: dict) -> dict[str, Any]:
    """records[t][b] (None on idle steps) -> dict of [T, B, ...] arrays."""

    def get(rec, path):
        for p in path:
            rec = rec[p]
        return rec

    def leaf_paths(d, prefix=()):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from leaf_paths(v, (*prefix, k))
            else:
                yield (*prefix, k)

    out: dict[str, Any] = {}
    for path in leaf_paths(blank):
        zero = np.zeros_like(np.asarray(get(blank, path)))
        arr = np.stack(
            [
                np.stack([zero if r is None else np.asarray(get(r, path)) for r in row])
                for row in records
            ]
        )
        node = out
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = arr
    return out


def reference_rollout(
    env, env_params, key, *, T, B, n_batches, mode, max_decorrelation_steps, discount, ws
) -> list[RefBatch]:
    sample = jax.jit(env.action_space(env_params).sample)
    envs = [
        RefEnv(
            env,
            env_params,
            key,
            rank,
            max_decorrelation_steps=max_decorrelation_steps,
            discount=discount,
            sample=sample,
        )
        for rank in range(B)
    ]
    batches = []
    for k in range(n_batches):
        initial = np.asarray([e.start_batch(mode) for e in envs], np.int32)
        records = [[e.step(t, T, mode, ws[k]) for e in envs] for t in range(T)]
        blank = next(r for row in records for r in row if r is not None)
        fields = _stack(records, blank)
        boot = np.asarray([counter_value(ws[k], _np(e.obs), e.prev_reward, e.count) for e in envs])
        batches.append(RefBatch(fields, initial, boot))
    return batches


# ----------------------------------------------------------------------------
# Comparison
# ----------------------------------------------------------------------------


def check_batch(batch: js.Batch, ref: RefBatch, *, store: str, counter: bool, boot: bool):
    f = ref.fields
    s = batch.samples
    env, agent = s.env, s.agent
    obs_dtype = f["observation"].dtype
    _close("observation", env.observation, f["observation"], obs_dtype)
    _close("reward", env.reward, f["reward"], jnp.float32)
    _close("prev_reward", env.prev_reward, f["prev_reward"], jnp.float32)
    _close("terminated", env.terminated, f["terminated"], bool)
    _close("truncated", env.truncated, f["truncated"], bool)
    _close("done", env.done, f["done"] | ~f["valid"], bool)  # held True on idle steps
    _close("valid", s.valid, f["valid"], bool)
    _close("action", agent.action, f["action"], f["action"].dtype)
    _close("prev_action", agent.prev_action, f["prev_action"], f["action"].dtype)
    assert set(env.env_info) == set(f["env_info"]), (set(env.env_info), set(f["env_info"]))
    for k, v in f["env_info"].items():
        _close(f"env_info[{k!r}]", env.env_info[k], v, v.dtype)

    # True next observations. Exact on every valid step with the dense store; the
    # sparse store keeps the valid steps that can be bootstrapped from (not
    # terminated, or truncated: a step can be both) and gives zeros elsewhere.
    keep = f["valid"]
    if store == "sparse":
        keep = keep & (~f["terminated"] | f["truncated"])
    expand = (...,) + (None,) * (f["observation"].ndim - 2)
    expected = np.where(keep[expand], f["final_observation"], 0)
    _close("final_observation", env.final_observation, expected, obs_dtype)

    ti = batch.traj_infos
    _close("traj.completed", ti.completed, f["traj"]["completed"], bool)
    _close("traj.length", ti.length, f["traj"]["length"], jnp.int32)
    _close("traj.episode_return", ti.episode_return, f["traj"]["episode_return"], jnp.float32)
    _close(
        "traj.discounted_return",
        ti.discounted_return,
        f["traj"]["discounted_return"],
        jnp.float32,
    )
    _close("traj.nonzero_rewards", ti.nonzero_rewards, f["traj"]["nonzero_rewards"], jnp.int32)

    if counter:
        _close("agent_info['count']", agent.agent_info["count"], f["count"], jnp.int32)
        _close("agent_info['value']", agent.agent_info["value"], f["value"], jnp.float32)
        _close("initial_state", agent.initial_state, ref.initial_count, jnp.int32)
    else:
        assert agent.agent_info == ()
    if boot:
        _close("bootstrap_value", s.bootstrap_value, ref.bootstrap_value, jnp.float32)
    else:
        assert s.bootstrap_value is None


# ----------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------


class Case(NamedTuple):
    env_name: str
    mode: str
    limit: int | None  # max_steps_in_episode override
    decorrelation: int
    counter: bool  # CounterAgent (else RandomAgent)
    store: str
    T: int = 24
    B: int = 3
    n_batches: int = 3
    discount: float = 0.9


CASES = {
    # Default time limit: terminations only; decorrelation; bootstrap values.
    "auto-decorrelate-counter": Case("CartPole-v1", "auto", None, 30, True, "sparse"),
    # Limit 5 < T/2: up to ceil(T / 5) truncations per env per batch.
    "auto-limit5-decorrelate": Case("CartPole-v1", "auto", 5, 7, False, "sparse"),
    # Limit 16: truncations and terminations, every true final obs kept.
    "auto-limit16-dense": Case("CartPole-v1", "auto", 16, 0, True, "dense"),
    "wait-limit15-decorrelate": Case("CartPole-v1", "wait", 15, 20, True, "sparse"),
    "wait-limit16-dense": Case("CartPole-v1", "wait", 16, 0, False, "dense", B=6),
    "episodic-default-counter": Case("CartPole-v1", "episodic", None, 0, True, "sparse"),
    "episodic-limit15-dense": Case("CartPole-v1", "episodic", 15, 0, True, "dense"),
    "breakout-auto": Case("Breakout-MinAtar", "auto", None, 5, False, "sparse", 6, 2, 2),
}


def _ws(n: int) -> list[float]:
    # New agent params every batch, so the params given to collect must be used.
    return [1.0, -0.5, 2.0, 0.25][:n]


@functools.cache
def _run(name: str):
    c = CASES[name]
    env, env_params = gymnax.make(c.env_name)
    if c.limit is not None:
        env_params = env_params.replace(max_steps_in_episode=c.limit)
    space = env.action_space(env_params)
    agent = CounterAgent(space) if c.counter else js.agents.RandomAgent(space)
    ws = _ws(c.n_batches)
    params = [{"w": jnp.float32(w)} for w in ws] if c.counter else [()] * c.n_batches
    sampler = js.make_sampler(
        env,
        env_params,
        agent,
        js.BatchSpec(c.T, c.B),
        max_decorrelation_steps=c.decorrelation,
        reset_mode=c.mode,
        discount=c.discount,
        bootstrap_value=c.counter,
        final_observation=c.store,
        agent_params=params[0] if c.counter else None,
    )
    key = jax.random.key(1234)
    state = jax.jit(sampler.init)(key, params[0])
    collect = jax.jit(sampler.collect)
    batches = []
    for p in params:
        state, batch = collect(state, p)
        batches.append(jax.device_get(batch))
    refs = reference_rollout(
        env,
        env_params,
        key,
        T=c.T,
        B=c.B,
        n_batches=c.n_batches,
        mode=c.mode,
        max_decorrelation_steps=c.decorrelation,
        discount=c.discount,
        ws=ws,
    )
    return batches, refs


# The default run keeps one case per reset mode (sparse store; decorrelation,
# RandomAgent and CounterAgent); the rest (the dense store, whose true final
# observations test_sampler_semantics re-steps with gymnax, and Breakout's image
# observations) are in the slow set.
SLOW = {
    "auto-decorrelate-counter",
    "auto-limit16-dense",
    "wait-limit16-dense",
    "episodic-limit15-dense",
    "breakout-auto",
}


@pytest.mark.parametrize(
    "name", [n if n not in SLOW else pytest.param(n, marks=pytest.mark.slow) for n in CASES]
)
def test_matches_reference(name):
    c = CASES[name]
    batches, refs = _run(name)
    for k, (batch, ref) in enumerate(zip(batches, refs, strict=True)):
        try:
            check_batch(batch, ref, store=c.store, counter=c.counter, boot=c.counter)
        except AssertionError as e:
            raise AssertionError(f"batch {k}: {e}") from None
    # Guards against vacuous comparisons: the events the case is for happen.
    CLAIMS[name](functools.partial(_all, name))


def _all(name: str, *path: str) -> np.ndarray:
    """A reference field over all batches, [n_batches, T, B]."""
    _, refs = _run(name)
    out = []
    for r in refs:
        x = r.fields
        for p in path:
            x = x[p]
        out.append(x)
    return np.stack(out)


def _decorrelated(get) -> None:
    """Decorrelation leaves trajectories in progress: batch 0 step 0 lengths > 1."""
    assert (get("traj", "length")[0, 0] > 1).any()


def _auto_decorrelate_counter(get) -> None:
    # Terminations (the sparse store gives zeros there), no time limit hit.
    assert get("terminated").any()
    assert not get("truncated").any()
    _decorrelated(get)


def _auto_limit5(get) -> None:
    # Limit 5: ceil(24 / 5) = 5 truncations of one env in one batch happen
    # (every slot of the sparse store is used).
    trunc = get("truncated")
    assert trunc.sum(axis=1).max() == 5, trunc.sum(axis=1)
    assert (trunc.sum(axis=1) >= 4).all()


def _both_ends(get) -> None:
    # Limit 16: both kinds of episode end (dense store: final obs on both).
    assert get("terminated").any()
    assert get("truncated").any()


def _wait_limit15(get) -> None:
    # Wait mode: idle steps, and a truncation ends some episode.
    assert (~get("valid")).any()
    assert get("truncated").any()
    _decorrelated(get)


def _wait_limit16(get) -> None:
    _both_ends(get)
    assert (~get("valid")).any()


def _episodic_default(get) -> None:
    # Episodic: some env survives to the forced truncation at T-1, some
    # terminates early.
    assert get("truncated")[:, -1].any()
    assert get("terminated").any()


def _episodic_limit15(get) -> None:
    # With limit 15 the time limit truncates mid-batch.
    assert get("truncated")[:, :-1].any()


def _breakout(get) -> None:
    # Breakout: image observations that change over the batch.
    obs = get("observation")
    assert obs.shape[-3:] == (10, 10, 4)
    assert not np.array_equal(obs[:, 0], obs[:, -1])


CLAIMS = {
    "auto-decorrelate-counter": _auto_decorrelate_counter,
    "auto-limit5-decorrelate": _auto_limit5,
    "auto-limit16-dense": _both_ends,
    "wait-limit15-decorrelate": _wait_limit15,
    "wait-limit16-dense": _wait_limit16,
    "episodic-default-counter": _episodic_default,
    "episodic-limit15-dense": _episodic_limit15,
    "breakout-auto": _breakout,
}
assert set(CLAIMS) == set(CASES)


def test_episodic_reference_properties():
    """docs/design.md's episodic guarantees, read off the sampler's batches."""
    batches, _ = _run("episodic-default-counter")
    for b in batches:
        env = b.samples.env
        assert np.all(env.done[-1])
        assert np.all(b.traj_infos.length[0] == 1)
        assert np.all(env.prev_reward[0] == 0)
        assert np.all(b.samples.agent.prev_action[0] == 0)
        # CounterAgent restarts each batch at 100 * rank.
        np.testing.assert_array_equal(b.samples.agent.initial_state, 100 * np.arange(3))

"""``jaxsample.make_evaluator`` against a plain Python reference.

The reference steps ONE gymnax environment at a time in a Python loop with
gymnax's public ``env.reset`` / ``env.step`` (jitted one call at a time, for
speed; no vmap, no loop primitives, no jaxsample code), re-deriving every key
from the schedule in the docstring of ``jaxsample.evaluation``. The agents'
actions are recomputed in numpy (a greedy MLP, a deterministic function of the
agent's inputs and state), or drawn from the action space with the agent's key.
From the episodes of every env it then selects what each mode must report and
compares every field, the ``[N]`` layout and the number of steps taken.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import chex
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsample as js
from jaxsample.evaluation import EvalStats, make_evaluator

ENV_NAME = "CartPole-v1"

# ----------------------------------------------------------------------------
# Agents
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class InputsAgent:
    """Deterministic; the action depends on its state and previous inputs.

    State: an int32 counter, ``7 * env_rank`` at the start of an episode, +1 per
    step. Action: ``(state // 3 + prev_action + [prev_reward > 0]) % 2``, so a
    missed reset of the state, the previous action or the previous reward (or
    a wrong env rank) changes the episodes.
    """

    def initial_state(self, env_rank):
        return jnp.asarray(env_rank, jnp.int32) * 7

    def step(self, params, inputs, state, key):
        del params, key
        prev = jnp.asarray(inputs.prev_action, jnp.int32)
        a = (state // 3 + prev + (inputs.prev_reward > 0).astype(jnp.int32)) % 2
        return js.AgentStep(action=a.astype(jnp.int32), agent_info=()), state + 1

    def value(self, params, inputs, state):
        return jnp.zeros((), jnp.float32)

    def as_eval(self):
        return self


def inputs_agent_act(rank, state, prev_action, prev_reward):
    """The reference's InputsAgent: ``(action, next_state)``."""
    if state is None:
        state = 7 * rank
    action = (state // 3 + int(prev_action) + int(prev_reward > 0)) % 2
    return action, state + 1


def greedy_params(seed: int, flip: bool = False):
    env, env_params = gymnax.make(ENV_NAME)
    agent = js.agents.CategoricalActorCritic(env.action_space(env_params), hidden_sizes=(16,))
    obs, _ = env.reset(jax.random.key(0), env_params)
    params = agent.init(jax.random.key(seed), obs)
    if flip:  # negate the policy head: the other action becomes greedy
        head = params["params"]["policy_head"]
        params = {
            "params": {
                **params["params"],
                "policy_head": jax.tree.map(lambda x: -x, head),
            }
        }
    return agent, params


def greedy_np_action(params, obs) -> int:
    """argmax of the actor MLP, in numpy (one hidden tanh layer)."""
    p = jax.tree.map(lambda x: np.asarray(x, np.float32), params["params"])
    x = np.asarray(obs, np.float32)
    h = np.tanh(x @ p["actor"]["dense_0"]["kernel"] + p["actor"]["dense_0"]["bias"])
    logits = h @ p["policy_head"]["kernel"] + p["policy_head"]["bias"]
    return int(np.argmax(logits))


# ----------------------------------------------------------------------------
# The reference
# ----------------------------------------------------------------------------

FIELDS = ("completed", "length", "episode_return", "discounted_return", "nonzero_rewards")


def _info(rewards: list[float], discount: float, completed: bool) -> dict[str, Any]:
    r = np.asarray(rewards, np.float64)
    return {
        "completed": completed,
        "length": len(r),
        "episode_return": float(r.sum()),
        "discounted_return": float(np.sum(discount ** np.arange(len(r)) * r)),
        "nonzero_rewards": int(np.count_nonzero(r)),
    }


@functools.cache
def _jitted(env_name: str, limit: int | None):
    env, env_params = gymnax.make(env_name)
    if limit is not None:
        env_params = env_params.replace(max_steps_in_episode=limit)
    space = env.action_space(env_params)
    return env, env_params, jax.jit(env.reset), jax.jit(env.step), jax.jit(space.sample)


def run_env(limit, key, rank, max_T, agent_kind, params, discount):
    """One env for max_T steps: ``(episodes [(end_t, info)], running totals at max_T)``."""
    _, env_params, reset, step, sample = _jitted(ENV_NAME, limit)
    k_reset, k_run = jax.random.split(jax.random.fold_in(key, rank))
    obs, env_state = reset(k_reset, env_params)
    prev_action, prev_reward, state = 0, 0.0, None
    rewards: list[float] = []
    episodes = []
    for t in range(max_T):
        k_agent = jax.random.fold_in(k_run, 2 * t)
        k_env = jax.random.fold_in(k_run, 2 * t + 1)
        if agent_kind == "random":
            action = int(sample(k_agent))
        elif agent_kind == "greedy":
            action = greedy_np_action(params, obs)
        else:
            action, state = inputs_agent_act(rank, state, prev_action, prev_reward)
        obs, env_state, reward, terminated, truncated, _ = step(
            k_env, env_state, jnp.int32(action), env_params
        )
        rewards.append(float(reward))
        if bool(terminated) or bool(truncated):
            episodes.append((t, _info(rewards, discount, True)))
            rewards, prev_action, prev_reward, state = [], 0, 0.0, None
        else:
            prev_action, prev_reward = action, float(reward)
    return episodes, _info(rewards, discount, False)


class Ref(NamedTuple):
    out: dict[str, np.ndarray]  # [N] per field
    steps: int
    budget_exhausted: bool


def reference(c: Case, key, params) -> Ref:
    n, max_T = c.n_envs, c.max_steps // c.n_envs
    runs = [run_env(c.limit, key, b, max_T, c.agent, params, c.discount) for b in range(n)]
    zero = _info([], c.discount, False)
    if c.mode == "first_per_env":
        N = min(c.max_trajectories or n, n * max_T)
        slots = [zero] * N
        finish = 0  # the step after which every wanted episode has ended
        for b, (episodes, running) in enumerate(runs):
            quota = len(range(b, N, n))
            for j in range(quota):
                if j < len(episodes):
                    slots[j * n + b] = episodes[j][1]
                    finish = max(finish, episodes[j][0] + 1)
                else:  # cut by the budget: only the episode in progress has a slot
                    if j == len(episodes):
                        slots[j * n + b] = running
                    finish = math.inf
        exhausted = finish == math.inf
    else:
        N = min(c.max_trajectories or math.inf, n * max_T)
        ends = sorted((t, b, info) for b, (episodes, _) in enumerate(runs) for t, info in episodes)
        kept = ends[:N]
        slots = [info for _, _, info in kept] + [zero] * (N - len(kept))
        exhausted = len(ends) < N
        finish = math.inf if exhausted else kept[-1][0] + 1
    out = {f: np.asarray([s[f] for s in slots]) for f in FIELDS}
    return Ref(out, int(min(finish, max_T)), bool(exhausted))


def check(out: js.TrajInfo, stats: EvalStats, ref: Ref, n_envs: int) -> None:
    out, stats = jax.device_get((out, stats))
    N = ref.out["length"].shape[0]
    dtypes = (bool, np.int32, np.float32, np.float32, np.int32)
    for f, dtype in zip(FIELDS, dtypes, strict=True):
        got, want = np.asarray(getattr(out, f)), ref.out[f]
        assert got.shape == (N,), (f, got.shape, N)
        assert got.dtype == dtype, (f, got.dtype)
        if f in ("episode_return", "discounted_return"):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f)
        else:
            np.testing.assert_array_equal(got, want.astype(dtype), err_msg=f)
    assert int(stats.steps) == ref.steps
    assert int(stats.env_steps) == ref.steps * n_envs
    assert int(stats.n_completed) == int(ref.out["completed"].sum())
    assert bool(stats.budget_exhausted) == ref.budget_exhausted


# ----------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------


class Case(NamedTuple):
    mode: str
    agent: str  # "random", "greedy" or "inputs"
    n_envs: int
    max_steps: int
    max_trajectories: int | None
    limit: int | None = None  # CartPole's max_steps_in_episode
    discount: float = 0.9


CASES = {
    # One episode per env, all finished within the budget.
    "first-random": Case("first_per_env", "random", 5, 5 * 120 + 4, None),
    # Quota 3, 2, 2 episodes for envs 0, 1, 2 (slot j * n_envs + b).
    "first-random-quota": Case("first_per_env", "random", 3, 3 * 80 + 1, 7),
    # Budget of 14 steps per env: some episodes are cut (completed=False, running totals).
    "first-random-cut": Case("first_per_env", "random", 4, 4 * 14, None),
    # Fewer wanted than envs: envs 3 and 4 contribute nothing.
    # Several episodes per env with an agent whose actions depend on its state,
    # prev_action and prev_reward: a missed reset changes the episodes.
    "first-inputs-quota": Case("first_per_env", "inputs", 3, 3 * 100, 8),
    "first-inputs-few": Case("first_per_env", "inputs", 5, 5 * 60, 3, limit=25),
    "first-greedy": Case("first_per_env", "greedy", 4, 4 * 100, None),
    # Stops at the 6th trajectory, long before the budget.
    "rlpyt-random": Case("rlpyt", "random", 4, 4 * 150 + 3, 6),
    # No max_trajectories: capacity n_envs * max_T, stops at the budget.
    "rlpyt-random-nolimit": Case("rlpyt", "random", 3, 3 * 50, None),
    "rlpyt-inputs": Case("rlpyt", "inputs", 3, 3 * 100, 7),
    # Every env truncates at the same steps: the cap falls inside one step
    # (time, then env rank order; never more than max_trajectories).
    "rlpyt-inputs-ties": Case("rlpyt", "inputs", 4, 4 * 30, 6, limit=5),
    "rlpyt-greedy": Case("rlpyt", "greedy", 4, 4 * 100, 5),
}


@functools.cache
def _built(name: str):
    c = CASES[name]
    env, env_params, *_ = _jitted(ENV_NAME, c.limit)
    space = env.action_space(env_params)
    if c.agent == "random":
        agent, params = js.agents.RandomAgent(space), ()
    elif c.agent == "greedy":
        agent, params = greedy_params(seed=3)
    else:
        agent, params = InputsAgent(), ()
    ev = make_evaluator(
        env,
        env_params,
        agent,
        n_envs=c.n_envs,
        max_steps=c.max_steps,
        max_trajectories=c.max_trajectories,
        mode=c.mode,
        discount=c.discount,
    )
    return ev, params


@functools.cache
def _run(name: str):
    """The case's jitted ``run_with_stats`` (compiled once per file)."""
    return jax.jit(_built(name)[0].run_with_stats)


KEY = jax.random.key(2024)

# Each case compiles its own program: the default set keeps a cut, a quota,
# ties at the cap, an early stop, each agent and both modes; the rest run in the
# slow set.
_SLOW_CASES = (
    "first-random",
    "first-random-quota",
    "first-inputs-few",
    "rlpyt-random-nolimit",
    "rlpyt-inputs",
    "rlpyt-greedy",
)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_CASES else n for n in CASES],
)
def test_matches_reference(name):
    c = CASES[name]
    ev, params = _built(name)
    out, stats = _run(name)(KEY, params)
    ref = reference(c, KEY, params)
    check(out, stats, ref, c.n_envs)
    if c.max_trajectories is not None:
        assert out.completed.shape[0] <= c.max_trajectories
        assert int(np.sum(out.completed)) <= c.max_trajectories
    assert ev.capacity == ref.out["length"].shape[0]


def test_cases_cover_what_they_claim():
    """The reference cases exercise cuts, quotas and ties (else they prove little)."""
    cut = reference(CASES["first-random-cut"], KEY, ())
    assert cut.budget_exhausted and not cut.out["completed"].all()
    assert (cut.out["length"][~cut.out["completed"]] > 0).any()  # running totals kept
    ties = reference(CASES["rlpyt-inputs-ties"], KEY, ())
    assert ties.out["completed"].all() and ties.steps == 10  # 4 end at t=4, 2 of 4 at t=9
    stop = reference(CASES["rlpyt-random"], KEY, ())
    assert stop.steps < 150 and not stop.budget_exhausted
    few = reference(CASES["first-inputs-few"], KEY, ())
    assert few.out["completed"].all() and few.out["length"].shape == (3,)


def test_greedy_agent_acts_greedily():
    """A sampling agent is evaluated through as_eval(), the argmax of its logits.

    The run itself is checked in ``test_matches_reference[*-greedy]``: the agent
    given there samples (greedy=False) and the reference takes the numpy argmax.
    """
    agent, _ = greedy_params(seed=3)
    assert not agent.greedy
    for name in ("first-greedy", "rlpyt-greedy"):
        ev, _ = _built(name)
        assert ev.agent.greedy and ev.agent.hidden_sizes == agent.hidden_sizes


def test_jit_matches_eager():
    ev, params = _built("rlpyt-inputs-ties")
    jitted = jax.device_get(_run("rlpyt-inputs-ties")(KEY, params))
    eager = jax.device_get(ev.run_with_stats(KEY, params))
    chex.assert_trees_all_equal(jitted, eager)


def test_new_params_do_not_retrace():
    c = CASES["first-greedy"]  # the program of test_matches_reference[first-greedy]
    ev, p1 = _built("first-greedy")
    _, p2 = greedy_params(seed=3, flip=True)
    run = jax.jit(chex.assert_max_traces(ev.run_with_stats, n=1))
    outs = []
    for p in (p1, p2):
        out, stats = run(KEY, p)
        check(out, stats, reference(c, KEY, p), c.n_envs)  # the new params are used
        outs.append(out)
    assert not np.array_equal(outs[0].length, outs[1].length)


def test_summarize():
    ev, params = _built("first-random-cut")
    out, _ = jax.device_get(_run("first-random-cut")(KEY, params))  # run_with_stats' run
    assert jax.tree.structure(out) == jax.tree.structure(jax.eval_shape(ev.run, KEY, params))
    s = jax.device_get(jax.jit(js.summarize)(out))
    mask = np.asarray(out.completed)
    assert 0 < mask.sum() < mask.size
    assert s["n_trajectories"] == mask.sum()
    np.testing.assert_allclose(s["length_mean"], np.mean(out.length[mask]), rtol=1e-6)
    np.testing.assert_allclose(s["episode_return_max"], np.max(out.episode_return[mask]))


def test_stops_early_when_trajectories_are_in():
    """The while loop takes the steps it needs, not max_T = 100_000."""
    env, env_params, *_ = _jitted(ENV_NAME, None)
    agent = js.agents.RandomAgent(env.action_space(env_params))
    max_T = 100_000
    for mode, max_traj in (("rlpyt", 3), ("first_per_env", None)):
        ev = make_evaluator(
            env,
            env_params,
            agent,
            n_envs=4,
            max_steps=4 * max_T,
            max_trajectories=max_traj,
            mode=mode,
        )
        assert ev.max_T == max_T
        out, stats = jax.device_get(jax.jit(ev.run_with_stats)(KEY, ()))
        assert out.completed.shape == ((3,) if mode == "rlpyt" else (4,))
        assert out.completed.all() and not stats.budget_exhausted
        # CartPole episodes end within 500 steps: the loop stopped at the last end
        # needed, long before max_T.
        assert int(stats.steps) <= 500
        assert int(stats.env_steps) == 4 * int(stats.steps)
        if mode == "first_per_env":
            assert int(stats.steps) == int(np.max(out.length))


def test_default_is_unbiased_rlpyt_favours_short_episodes():
    """rlpyt's issue #93: the first finishers are the short episodes."""
    env, env_params, *_ = _jitted(ENV_NAME, None)
    agent = js.agents.RandomAgent(env.action_space(env_params))
    n = 64
    default = make_evaluator(env, env_params, agent, n_envs=n, max_steps=n * 500)
    assert default.mode == "first_per_env" and default.capacity == n
    rlpyt = make_evaluator(
        env, env_params, agent, n_envs=n, max_steps=n * 500, max_trajectories=16, mode="rlpyt"
    )
    fair = jax.device_get(jax.jit(default.run)(KEY, ()))
    short = jax.device_get(jax.jit(rlpyt.run)(KEY, ()))
    assert fair.completed.all() and short.completed.all()
    # The same first episodes of the same envs: rlpyt keeps the 16 shortest of them.
    np.testing.assert_array_equal(np.sort(short.length), np.sort(fair.length)[:16])
    assert np.mean(short.length) < 0.8 * np.mean(fair.length)


# ----------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_envs": 0}, ValueError, "n_envs"),
        ({"n_envs": -2}, ValueError, "n_envs"),
        ({"n_envs": 2.0}, TypeError, "n_envs"),
        ({"max_steps": 3}, ValueError, "max_steps"),
        ({"max_steps": 2**31}, ValueError, "max_steps"),
        ({"max_steps": "100"}, TypeError, "max_steps"),
        ({"max_trajectories": 0}, ValueError, "max_trajectories"),
        ({"max_trajectories": True}, TypeError, "max_trajectories"),
        ({"mode": "all"}, ValueError, "mode"),
        ({"discount": 1.5}, ValueError, "discount"),
        ({"discount": None}, TypeError, "discount"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    env, env_params, *_ = _jitted(ENV_NAME, None)
    agent = js.agents.RandomAgent(env.action_space(env_params))
    args = {"n_envs": 4, "max_steps": 100, **kwargs}
    with pytest.raises(error, match=match):
        make_evaluator(env, env_params, agent, **args)


def test_bad_agent():
    env, env_params, *_ = _jitted(ENV_NAME, None)

    @dataclasses.dataclass(frozen=True)
    class NoEval:
        def initial_state(self, env_rank):
            return ()

        def step(self, params, inputs, state, key):
            return js.AgentStep(jnp.int32(0), ()), state

    with pytest.raises(TypeError, match="as_eval"):
        make_evaluator(env, env_params, NoEval(), n_envs=2, max_steps=10)

    @dataclasses.dataclass(frozen=True)
    class WrongAction(NoEval):
        def step(self, params, inputs, state, key):
            return js.AgentStep(jnp.zeros((2,), jnp.float32), ()), state

        def as_eval(self):
            return self

    # Checked at build time when the parameters are known, else by run (the
    # agent has no init: it is never called with made-up parameters).
    with pytest.raises(ValueError, match="agent action"):
        make_evaluator(env, env_params, WrongAction(), n_envs=2, max_steps=10, agent_params=())
    evaluator = make_evaluator(env, env_params, WrongAction(), n_envs=2, max_steps=10)
    with pytest.raises(ValueError, match="agent action"):
        evaluator.run(jax.random.key(0), ())


def test_bad_key():
    ev, params = _built("rlpyt-inputs-ties")
    with pytest.raises(TypeError, match="key"):
        ev.run(jax.random.PRNGKey(0), params)
    with pytest.raises(ValueError, match="key"):
        ev.run(jax.random.split(KEY, 2), params)

"""JaxMARL multi-agent envs (``jaxsample.envs.suites.jaxmarl``) and the shared
agent (``jaxsample.agents.SharedAgent``).

The adapter is checked against JaxMARL's OWN loop: its public ``step`` (which
auto-resets, splitting the key as gymnax does) driven with the same keys and
actions gives the adapter's stacked observations, rewards and episode ends,
over episodes that end inside the run; the ends are split into terminated and
truncated by the rules of the module docstring.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("jaxmarl")

import jaxsample as js
from jaxsample.agents import SharedAgent
from jaxsample.envs import suites
from jaxsample.envs.per_agent import PerAgent
from jaxsample.envs.suites.base import import_quietly
from jaxsample.envs.suites.jaxmarl import space_of

jaxmarl = import_quietly("jaxmarl")


@pytest.fixture(autouse=True)
def _rank_promotion():
    """JaxMARL's own code broadcasts ranks implicitly (conftest raises on that)."""
    with jax.numpy_rank_promotion("allow"):
        yield


def _own_and_adapted(name: str, steps: int, **kwargs):
    """``steps`` steps of JaxMARL's own ``step`` and of the adapter's, with the
    same keys and random actions (one env): stacked numpy arrays."""
    raw = jaxmarl.make(name, **kwargs)
    env = suites.from_jaxmarl(raw)
    params = env.default_params
    space = env.action_space(params)
    own_step = jax.jit(raw.step)
    step = jax.jit(env.step)
    key = jax.random.key(7)
    k_reset, key = jax.random.split(key)
    own_obs, own_state = raw.reset(k_reset)
    obs, state = env.reset(k_reset, params)
    out = {k: [] for k in ("own_obs", "obs", "own_reward", "reward", "own_done", "term", "trunc")}
    masks = []
    for t in range(steps):
        k_act, k_step = jax.random.split(jax.random.fold_in(key, t))
        action = space.sample(k_act)
        if hasattr(env, "action_mask"):
            # a legal action per agent (the games refuse or ignore others)
            mask = env.action_mask(state, params)
            masks.append(np.asarray(mask))
            action = jax.vmap(lambda k, m: jax.random.choice(k, m.shape[0], p=m / m.sum()))(
                jax.random.split(k_act, env.num_agents), mask.astype(jnp.float32)
            ).astype(space.dtype)
        actions = {a: action[i] for i, a in enumerate(env.agents)}
        out["own_obs"].append(np.stack([own_obs[a] for a in env.agents]))
        out["obs"].append(np.asarray(obs))
        own_obs, own_state, own_r, own_d, _ = own_step(k_step, own_state, actions)
        obs, state, r, term, trunc, _ = step(k_step, state, action, params)
        out["own_reward"].append(np.stack([own_r[a] for a in env.agents]))
        out["reward"].append(np.asarray(r))
        out["own_done"].append(bool(own_d["__all__"]))
        out["term"].append(bool(term))
        out["trunc"].append(bool(trunc))
    return env, {k: np.stack(v) for k, v in out.items()}, masks


def _check_same(out: dict) -> None:
    # equal up to float rounding: the two jitted programs fuse differently
    close = dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["obs"], out["own_obs"], **close)
    np.testing.assert_allclose(out["reward"], out["own_reward"], **close)
    np.testing.assert_array_equal(out["term"] | out["trunc"], out["own_done"])
    assert not (out["term"] & out["trunc"]).any()
    assert out["reward"].dtype == np.float32


@pytest.mark.long
def test_mpe_equals_jaxmarls_own_loop_and_its_ends_are_truncations() -> None:
    env, out, _ = _own_and_adapted("MPE_simple_spread_v3", 60, max_steps=10)
    _check_same(out)
    assert env.observation_space(env.default_params).shape == (3, 18)
    assert out["obs"].shape == (60, 3, 18) and out["reward"].shape == (60, 3)
    # MPE ends only at its time limit: after max_steps + 1 = 11 steps, truncated
    ends = np.flatnonzero(out["own_done"])
    np.testing.assert_array_equal(ends, [10, 21, 32, 43, 54])
    assert out["trunc"][ends].all() and not out["term"].any()
    assert env.known_time_limit(env.default_params) == 11


@pytest.mark.slow  # ~25 s of CPU cold: XLA compiling Hanabi's step twice
def test_hanabi_equals_jaxmarls_own_loop_and_its_ends_are_terminations() -> None:
    _env, out, masks = _own_and_adapted("hanabi", 150)
    _check_same(out)
    assert out["own_done"].any() and out["term"][out["own_done"]].all()
    assert not out["trunc"].any()
    # Hanabi: only the player whose turn it is has a move besides the no-op
    masks = np.stack(masks)
    assert masks.shape == (150, 2, 21) and masks.dtype == bool
    assert (masks.sum(-1) > 1).sum(-1).max() == 1


@pytest.mark.slow
def test_smax_equals_jaxmarls_own_loop_time_limit_truncates() -> None:
    scenario = jaxmarl.environments.smax.map_name_to_scenario("3m")
    _env, out, masks = _own_and_adapted("HeuristicEnemySMAX", 40, scenario=scenario, max_steps=8)
    _check_same(out)
    assert out["trunc"].any()  # the 9th step of an episode that no team won
    assert np.stack(masks).shape == (40, 3, 8)  # 5 moves, 3 enemies to shoot


def test_heterogeneous_teams_are_refused_naming_the_agents() -> None:
    raw = jaxmarl.make("MPE_simple_tag_v3")
    with pytest.raises(TypeError, match=r"observation spaces differ.*'adversary_0'.*'agent_0'"):
        suites.from_jaxmarl(raw)
    smax = jaxmarl.make("SMAX", num_allies=2, num_enemies=3)
    with pytest.raises(TypeError, match=r"action spaces differ.*Discrete\(8\).*'ally_0'"):
        suites.from_jaxmarl(smax)
    with pytest.raises(TypeError, match="must be a JaxMARL MultiAgentEnv"):
        suites.from_jaxmarl(object())


def test_registry_makes_jaxmarl_envs_with_masks_where_the_env_has_them() -> None:
    env, params = suites.make("jaxmarl/MPE_simple_spread_v3")
    assert isinstance(env, suites.JaxMARLEnv) and not hasattr(env, "action_mask")
    assert env.agents == ("agent_0", "agent_1", "agent_2")
    space = env.action_space(params)
    assert isinstance(space, PerAgent) and space.shape == (3,) and space.space.n == 5
    assert "MPE_simple_spread_v3" in suites.available()["jaxmarl"]
    smax, params = suites.make("jaxmarl/SMAX")
    assert isinstance(smax, suites.MaskedJaxMARLEnv)
    _, state = smax.reset(jax.random.key(0), params)
    mask = smax.action_mask(state, params)
    assert mask.shape == (10, 10) and mask.dtype == bool
    # at the start nobody is in range: the 4 moves and stop, no attack
    np.testing.assert_array_equal(mask[:, :5], True)
    np.testing.assert_array_equal(mask[:, 5:], False)


def test_per_agent_space_samples_every_agent() -> None:
    space = PerAgent(space_of(jaxmarl.environments.spaces.Discrete(4)), 3)
    x = space.sample(jax.random.key(0))
    assert x.shape == (3,) and x.dtype == jnp.int32 and bool(space.contains(x))
    assert not bool(space.contains(jnp.array([0, 1, 4])))
    draws = jax.vmap(space.sample)(jax.random.split(jax.random.key(1), 400))
    assert set(np.unique(draws[:, 2]).tolist()) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="num_agents must be an int >= 1"):
        PerAgent(space.space, 0)


def test_random_team_actions_are_uniform_over_each_agents_legal_actions() -> None:
    """A random agent (and decorrelation's random steps) on a masked team:
    each agent's action is drawn among its own row of the mask ``[N, n]``."""
    space = PerAgent(space_of(jaxmarl.environments.spaces.Discrete(5)), 3)
    mask = jnp.array([[True, False, True, False, False], [False] * 4 + [True], [True] * 5])
    agent = js.agents.RandomAgent(space)
    inputs = js.AgentInputs(space.sample(jax.random.key(0)), None, None, action_mask=mask)

    def act(key):
        return agent.step((), inputs, (), key)[0].action

    draws = np.asarray(jax.vmap(act)(jax.random.split(jax.random.key(2), 600)))
    assert draws.shape == (600, 3) and draws.dtype == np.int32
    for i in range(3):
        allowed = set(np.flatnonzero(np.asarray(mask[i])).tolist())
        assert set(np.unique(draws[:, i]).tolist()) == allowed


def test_shared_agent_is_the_agent_vmapped_over_the_agent_axis() -> None:
    """Same params for every agent, agent i acts with split(key, N)[i]: equal
    to calling the single agent on each agent's inputs by hand."""
    from gymnax.environments import spaces

    inner = js.agents.CategoricalActorCritic(spaces.Discrete(5), hidden_sizes=(8,))
    team = SharedAgent(inner, 3)
    obs = jax.random.normal(jax.random.key(0), (3, 6))
    params = team.init(jax.random.key(1), obs)
    inputs = js.AgentInputs(obs, jnp.zeros(3, jnp.int32), jnp.zeros(3, jnp.float32))
    key = jax.random.key(2)
    step, state = team.step(params, inputs, team.initial_state(jnp.int32(4)), key)
    assert step.action.shape == (3,) and step.agent_info.value.shape == (3,)
    keys = jax.random.split(key, 3)
    for i in range(3):
        one = js.AgentInputs(obs[i], inputs.prev_action[i], inputs.prev_reward[i])
        want, _ = inner.step(params, one, (), keys[i])
        assert int(step.action[i]) == int(want.action)
        np.testing.assert_allclose(step.agent_info.value[i], want.agent_info.value, rtol=1e-6)
        np.testing.assert_allclose(
            team.value(params, inputs, state)[i], want.agent_info.value, rtol=1e-6
        )
    log_prob, entropy, value = team.evaluate(params, inputs, step.action)
    np.testing.assert_allclose(log_prob, step.agent_info.log_prob, rtol=1e-6)
    assert entropy.shape == value.shape == (3,)
    assert isinstance(team.as_eval(), SharedAgent) and team.as_eval().agent.greedy
    with pytest.raises(ValueError, match="leading agent axis of 3"):
        team.value(params, js.AgentInputs(obs[:2], jnp.zeros(2), jnp.zeros(2)), ())
    with pytest.raises(ValueError, match="num_agents must be an int >= 1"):
        SharedAgent(inner, 0)


def test_shared_agent_gives_every_agent_its_own_rank() -> None:
    class Ranks:  # an agent whose state is its rank
        def initial_state(self, rank):
            return rank

        def step(self, params, inputs, state, key):
            return js.AgentStep(state, ()), state

        def value(self, params, inputs, state):
            return jnp.zeros(())

    team = SharedAgent(Ranks(), 4)
    ranks = jax.vmap(team.initial_state)(jnp.arange(2, dtype=jnp.int32))
    np.testing.assert_array_equal(ranks, [[0, 1, 2, 3], [4, 5, 6, 7]])


def test_team_and_agent_returns_of_a_reward_per_agent() -> None:
    """A reward ``[N]``: the team return is the sum over steps of the mean
    over agents, ``agent_returns`` each agent's sum (a plain-Python reference)."""
    from jaxsample.traj_info import TrajAccumulator

    rewards = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [-1.0, 3.0, 0.5]], np.float32)
    acc = TrajAccumulator.zeros((), (3,))
    for r in rewards:
        acc = acc.add(jnp.asarray(r), 0.5)
    info = acc.info(jnp.ones((), bool))
    team = [float(np.mean(r)) for r in rewards]
    assert float(info.episode_return) == pytest.approx(sum(team))
    assert float(info.discounted_return) == pytest.approx(
        sum(0.5**k * x for k, x in enumerate(team))
    )
    np.testing.assert_allclose(info.agent_returns, rewards.sum(0))
    assert int(info.nonzero_rewards) == 2 and int(info.length) == 3
    assert acc.reset().agent_returns.shape == (3,)
    assert TrajAccumulator.zeros().agent_returns is None  # one agent: unchanged
    with pytest.raises(ValueError, match=r"reward must have shape \(3,\)"):
        acc.add(jnp.zeros(()), 0.5)


def test_gae_per_agent_equals_gae_of_each_agent() -> None:
    """Rewards and values ``[T, B, N]`` with the env's ends ``[T, B]``: each
    agent's advantages are GAE of its own column, with the env's ends."""
    from jaxsample.algos.returns import gae

    T, B, N = 12, 2, 3
    k = jax.random.split(jax.random.key(0), 5)
    reward, value, final = (jax.random.normal(x, (T, B, N)) for x in k[:3])
    bootstrap = jax.random.normal(k[3], (B, N))
    ends = jax.random.randint(k[4], (T, B), 0, 4)
    terminated, truncated = ends == 1, ends == 2
    kw = dict(gamma=0.9, lam=0.8)
    adv, ret = gae(reward, value, final, bootstrap, terminated, truncated, **kw)
    assert adv.shape == ret.shape == (T, B, N)
    for i in range(N):
        a, r = gae(
            reward[..., i],
            value[..., i],
            final[..., i],
            bootstrap[:, i],
            terminated,
            truncated,
            **kw,
        )
        np.testing.assert_allclose(adv[..., i], a, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(ret[..., i], r, rtol=1e-6, atol=1e-6)


def test_shared_recurrent_agent_evaluates_each_agents_sequence() -> None:
    from gymnax.environments import spaces

    inner = js.agents.RecurrentActorCritic(spaces.Discrete(4), hidden_size=8)
    team = SharedAgent(inner, 2)
    T = 5
    obs = jax.random.normal(jax.random.key(0), (T, 2, 3))
    inputs = js.AgentInputs(obs, jnp.zeros((T, 2), jnp.int32), jnp.zeros((T, 2), jnp.float32))
    params = team.init(jax.random.key(1), obs[0])
    initial = team.initial_state(jnp.int32(0))
    reset = jnp.array([False, False, True, False, False])
    action = jnp.array([[0, 1], [2, 3], [1, 1], [0, 2], [3, 0]], jnp.int32)
    got = team.evaluate_sequence(params, inputs, initial, reset, action)
    for i in range(2):
        one = jax.tree.map(lambda x, i=i: x[:, i], inputs)
        state = jax.tree.map(lambda x, i=i: x[i], initial)
        want = inner.evaluate_sequence(params, one, state, reset, action[:, i])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g[:, i], w, rtol=1e-5, atol=1e-6)


def _mpe_batches(mesh) -> dict:
    """Two batches of 8 MPE envs (a shared random team, decorrelated, time
    limit 11 steps) on ``mesh`` (None: one device), flattened to arrays."""
    env = suites.from_jaxmarl(jaxmarl.make("MPE_simple_spread_v3", max_steps=10))
    params = env.default_params
    space = env.action_space(params)
    agent = SharedAgent(js.agents.RandomAgent(space.space), space.num_agents)
    sampler = js.make_sampler(
        env, params, agent, js.BatchSpec(T=24, B=8), max_decorrelation_steps=6, mesh=mesh
    )
    state = jax.jit(sampler.init)(jax.random.key(3), ())
    collect = jax.jit(sampler.collect)
    out = {}
    for i in range(2):
        state, batch = collect(state, ())
        env_samples = batch.samples.env
        leaves = {
            "obs": env_samples.observation,
            "final": env_samples.final_observation,
            "reward": env_samples.reward,
            "prev_reward": env_samples.prev_reward,
            "truncated": env_samples.truncated,
            "action": batch.samples.agent.action,
            "team": batch.traj_infos.episode_return,
            "agents": batch.traj_infos.agent_returns,
        }
        out.update({f"{k}{i}": np.asarray(v) for k, v in leaves.items()})
    return out


@pytest.mark.slow
def test_batches_on_two_devices_equal_one_device() -> None:
    """The agent axis under sharding: 8 envs over 2 of conftest's forced CPU
    devices give the one-device batches (same seed, same ranks). What the keys
    decide (actions, episode ends) is equal bit for bit; MPE's float physics
    to rounding: XLA's CPU code for a per-device batch of 4 envs rounds some
    results 1 ulp away from a batch of 8 (as tests/test_distributed.py allows
    for a network's outputs)."""
    one = _mpe_batches(None)
    two = _mpe_batches(jax.sharding.Mesh(np.array(jax.devices()[:2]), ("envs",)))
    assert one["reward0"].shape == (24, 8, 3) and one["agents1"].shape == (24, 8, 3)
    assert one["truncated0"].any() and one["truncated1"].any()
    for k in one:
        if np.issubdtype(one[k].dtype, np.floating):
            np.testing.assert_allclose(two[k], one[k], rtol=1e-5, atol=1e-6, err_msg=k)
        else:
            np.testing.assert_array_equal(two[k], one[k], err_msg=k)


_EXACT_SCRIPT = """
import sys
import jax
import numpy as np
sys.path.insert(0, sys.argv[1])
import test_jaxmarl as t
with jax.numpy_rank_promotion("allow"):
    one = t._mpe_batches(None)
    two = t._mpe_batches(jax.sharding.Mesh(np.array(jax.devices()[:2]), ("envs",)))
diff = {k: int((two[k] != one[k]).sum()) for k in one}
assert one["truncated0"].any() and len(diff) == 16, diff
print("DIFFERENT", sum(diff.values()), diff)
"""


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 ISA flag")
def test_batches_on_two_devices_equal_one_device_bit_for_bit_without_fma() -> None:
    """The 1-ulp differences the test above allows are XLA's, not the
    sampler's: XLA's CPU backend lets LLVM contract a multiply and an add
    into one fused multiply-add (one rounding instead of two), and a sharded
    program may fuse MPE's physics at other boundaries than the one-device
    program, so some ``a * b + c`` can be contracted in one and not in the
    other. On an ISA without FMA (``--xla_cpu_max_isa=AVX``) every batch,
    physics included, is the same bit for bit on 2 devices as on 1 (a fresh
    process: XLA's flags are read when JAX starts). (Under default flags the
    same script found such differences until the sampler reset after the
    step; it finds none now with jax 0.11.2, which the first test does not
    require.)"""
    tests = str(Path(__file__).parent)
    found = {}
    for flags in ("--xla_cpu_max_isa=AVX",):
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count=2 {flags}")
        out = subprocess.run(
            [sys.executable, "-c", _EXACT_SCRIPT, tests],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        ).stdout
        found[flags] = int(out.split("DIFFERENT ")[1].split()[0])
    assert found["--xla_cpu_max_isa=AVX"] == 0, found


@pytest.mark.slow
def test_masked_smax_takes_no_illegal_action_over_1e5_steps() -> None:
    """A masked JaxMARL env through the sampler: SMAX 3m against the heuristic
    enemy, a shared actor-critic (random init: its unmasked policy puts weight
    on every action) acting for the 3 allies, 13 batches of 64 envs x 128 steps
    (106,496 env steps, 3 actions each). Every action taken is legal under the
    mask it was chosen under (``samples.env.action_mask``), the masks do rule
    actions out (dead units, out-of-range attacks), and ``check_actions=True``
    (which also reports an illegal action) stays silent."""
    scenario = jaxmarl.environments.smax.map_name_to_scenario("3m")
    env = suites.from_jaxmarl(jaxmarl.make("HeuristicEnemySMAX", scenario=scenario))
    params = env.default_params
    space = env.action_space(params)
    agent = SharedAgent(js.agents.CategoricalActorCritic(space.space), space.num_agents)
    sampler = js.make_sampler(
        env,
        params,
        agent,
        js.BatchSpec(T=128, B=64),
        max_decorrelation_steps=20,
        check_actions=True,
    )
    k_init, k_params = jax.random.split(jax.random.key(11))
    obs, _ = env.reset(k_params, params)
    agent_params = agent.init(k_params, obs)
    state = jax.jit(sampler.init)(k_init, agent_params)
    collect = jax.jit(sampler.collect)
    steps = illegal = ruled_out = 0
    for _ in range(13):
        state, batch = collect(state, agent_params)
        mask = np.asarray(batch.samples.env.action_mask)  # [T, B, N, A]
        action = np.asarray(batch.samples.agent.action)  # [T, B, N]
        assert mask.shape == (*action.shape, space.space.n)
        legal = np.take_along_axis(mask, action[..., None].astype(np.int64), axis=-1)[..., 0]
        illegal += int((~legal).sum())
        ruled_out += int((~mask).sum())
        steps += action.shape[0] * action.shape[1]
    assert steps >= 100_000
    assert ruled_out > 0
    assert illegal == 0

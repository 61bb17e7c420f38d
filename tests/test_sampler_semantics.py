"""Semantics of ``jaxsample.make_sampler`` that follow from docs/design.md alone.

Unlike ``test_sampler_reference.py`` these tests do not reproduce the key
schedule: they check the env's own dynamics, the seams between steps and
batches, jit vs eager, retracing, determinism, input validation,
``summarize`` and the "wait" / "episodic" reset modes. Every registered
gymnax env goes through the sampler in test_gymnax_envs.py.
"""

from __future__ import annotations

import dataclasses
import functools

import chex
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments.classic_control.cartpole import CartPole
from helpers import CounterAgent, auto_step, concat
from helpers import counter_params as params
from helpers import counter_value as np_value

import jaxsample as js
from jaxsample.core.finals import InfoStore, PooledStore, RecomputeStore, recompute_finals

T, B = 8, 4
LIMIT = 14  # CartPole time limit: truncations as well as terminations
DECORRELATION = 10


@functools.cache
def cartpole(limit: int | None = LIMIT):
    env, env_params = gymnax.make("CartPole-v1")
    if limit is not None:
        env_params = env_params.replace(max_steps_in_episode=limit)
    return env, env_params


class Compiled:
    """A sampler with jitted init/collect and a count of collect's traces."""

    def __init__(self, **kwargs):
        limit = kwargs.pop("limit", LIMIT)
        spec = kwargs.pop("spec", js.BatchSpec(T, B))
        env, env_params = cartpole(limit)
        self.env, self.env_params = env, env_params
        self.sampler = js.make_sampler(
            env,
            env_params,
            CounterAgent(env.action_space(env_params)),
            spec,
            agent_params=params(1.0),
            **kwargs,
        )
        self.traces = 0

        def counted(state, p):
            self.traces += 1
            return self.sampler.collect(state, p)

        self.init = jax.jit(self.sampler.init)
        self.collect = jax.jit(counted)

    def run(self, key, ws):
        state = self.init(key, params(ws[0]))
        start = state
        batches = []
        for w in ws:
            state, batch = self.collect(state, params(w))
            batches.append(jax.device_get(batch))
        return start, state, batches


@functools.cache
def compiled(name: str) -> Compiled:
    common = {"max_decorrelation_steps": DECORRELATION, "bootstrap_value": True, "discount": 0.9}
    if name == "sparse":
        return Compiled(**common)
    if name == "dense":
        return Compiled(final_observation="dense", **common)
    if name == "sparse2T":
        return Compiled(spec=js.BatchSpec(2 * T, B), **common)
    if name == "wait":
        return Compiled(
            reset_mode="wait", limit=None, spec=js.BatchSpec(16, 4), max_decorrelation_steps=10
        )
    if name == "episodic":
        return Compiled(reset_mode="episodic", limit=None, spec=js.BatchSpec(16, 4))
    raise KeyError(name)


KEY = jax.random.key(7)
WS = (1.0, -0.5, 2.0, 0.25)


@functools.cache
def run(name: str, seed: int = 7, ws: tuple[float, ...] = WS):
    return compiled(name).run(jax.random.key(seed), ws)


# ----------------------------------------------------------------------------
# (a) the final-observation stores (the env's own dynamics and the seams between
# steps and batches: tests/test_batch_contract.py)
# ----------------------------------------------------------------------------


def test_sparse_store_equals_dense_store():
    """Same key: the two stores agree wherever the sparse one keeps a value."""
    _, _, sparse = run("sparse")
    _, _, dense = run("dense")
    for s, d in zip(sparse, dense, strict=True):
        env_s, env_d = s.samples.env, d.samples.env
        np.testing.assert_array_equal(env_s.observation, env_d.observation)
        keep = np.asarray(~env_s.terminated | env_s.truncated)
        fs, fd = np.asarray(env_s.final_observation), np.asarray(env_d.final_observation)
        np.testing.assert_array_equal(fs[keep], fd[keep])
        assert np.all(fs[~keep] == 0)
        assert isinstance(env_s.final_store, js.SparseFinalObservation)


@pytest.mark.slow  # two samplers' compiles; both paths also meet references in the default set
def test_sparse_store_recomputed_or_taken_from_the_step_is_the_same() -> None:
    """The sampler's default (a gymnax env reset after its step, the final
    observations taken from the env before the reset) and gymnax's
    auto-resetting step written out, whose store recomputes a truncated
    step's final observation (the store chosen for an env with its own step
    and a known time limit, observation larger than half the state) or keeps
    the step's own: the same batches, bit for bit, all three."""
    env, env_params = gymnax.make("CartPole-v1")
    env_params = env_params.replace(max_steps_in_episode=5)  # truncations in most batches
    agent = js.agents.RandomAgent(env.action_space(env_params))
    sampler = js.make_sampler(env, env_params, agent, js.BatchSpec(16, 3))
    assert isinstance(sampler._finals, PooledStore) and sampler._finals.slots == 4
    assert recompute_finals(sampler._stepper.env_spec, 5)  # 16-byte obs, 20-byte state
    stores = (RecomputeStore(4, sampler._stepper), InfoStore(4))
    others = [dataclasses.replace(sampler, _resets=None, _finals=store) for store in stores]
    key = jax.random.key(2)
    (sa, a), *rest = (jax.jit(s.collect)(s.init(key, ()), ()) for s in (sampler, *others))
    assert np.asarray(a.samples.env.truncated).sum() >= 3
    for sb, b in rest:
        for x, y in zip(jax.tree.leaves((sa, a)), jax.tree.leaves((sb, b)), strict=True):
            if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
                x, y = jax.random.key_data(x), jax.random.key_data(y)
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


class FastClockCartPole(CartPole):
    """CartPole whose ``state.time`` advances 3 per step: it truncates every
    ``limit / 3`` steps, 3x more often than gymnax's time limit suggests."""

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs, state.replace(time=state.time + 2), reward, terminated, info


@pytest.mark.parametrize("store", ["sparse", pytest.param("dense", marks=pytest.mark.slow)])
def test_final_observations_exact_for_an_env_that_truncates_more_often(store):
    """A custom env may truncate more often than its time limit says: the sparse
    store must not drop any final observation. Checked against a plain loop
    re-stepping the env with the batch's actions and the documented env keys."""
    env = FastClockCartPole()
    env_params = env.default_params.replace(max_steps_in_episode=12)  # truncates every 4
    T, B, key = 32, 3, jax.random.key(5)
    assert js.sampler.truncation_bound(env, env_params, T) == T  # not ceil(32 / 12) = 3
    agent = js.agents.RandomAgent(env.action_space(env_params))
    sampler = js.make_sampler(env, env_params, agent, js.BatchSpec(T, B), final_observation=store)
    # no known limit: the sparse store takes the step's
    assert not isinstance(sampler._finals, RecomputeStore)
    state, collect, batches = sampler.init(key, ()), jax.jit(sampler.collect), []
    for _ in range(2):
        state, batch = collect(state, ())
        batches.append(batch)
    get = functools.partial(concat, batches)
    obs, action = get(lambda b: b.samples.env.observation), get(lambda b: b.samples.agent.action)
    final = get(lambda b: b.samples.env.final_observation)
    term, trunc = get(lambda b: b.samples.env.terminated), get(lambda b: b.samples.env.truncated)
    per_batch = trunc.reshape(2, T, B).sum(axis=1)
    assert per_batch.max() > 3  # more than the time-limit bound would have kept
    for b in range(B):
        k_reset, _, k_run = jax.random.split(jax.random.fold_in(key, b), 3)
        o, s = env.reset(k_reset, env_params)
        for n in range(2 * T):
            np.testing.assert_allclose(obs[n, b], o, rtol=1e-6, atol=1e-6)
            o, s, _, te, tr, info = auto_step(env, env_params, k_run, n, s, action[n, b])
            assert (term[n, b], trunc[n, b]) == (bool(te), bool(tr))
            want = np.asarray(info["final_observation"])
            if store == "sparse" and te and not tr:
                want = np.zeros_like(want)  # terminated steps: zeros in the sparse store
            np.testing.assert_allclose(final[n, b], want, rtol=1e-6, atol=1e-6)


def test_bootstrap_value_is_the_value_of_the_next_inputs():
    """bootstrap_value of batch k = value of batch k+1's step-0 inputs, with
    batch k's params, and the agent state was not advanced by computing it."""
    _, _, batches = run("sparse")
    for k in range(len(batches) - 1):
        nxt = batches[k + 1]
        expected = np_value(
            WS[k],
            nxt.samples.env.observation[0],
            nxt.samples.env.prev_reward[0],
            nxt.samples.agent.agent_info["count"][0],
        )
        np.testing.assert_allclose(batches[k].samples.bootstrap_value, expected, rtol=1e-5)
        assert batches[k].samples.bootstrap_value.dtype == np.float32
    # agent_info value (computed inside the step) uses the current params.
    for k, b in enumerate(batches):
        expected = np_value(
            WS[k],
            b.samples.env.observation,
            b.samples.env.prev_reward,
            b.samples.agent.agent_info["count"],
        )
        np.testing.assert_allclose(b.samples.agent.agent_info["value"], expected, rtol=1e-5)


# ----------------------------------------------------------------------------
# (b) consecutive batches continue the same stream
# ----------------------------------------------------------------------------


def _step_fields(batch) -> dict[str, np.ndarray]:
    s = batch.samples
    out = {
        "observation": s.env.observation,
        "final_observation": s.env.final_observation,
        "reward": s.env.reward,
        "prev_reward": s.env.prev_reward,
        "terminated": s.env.terminated,
        "truncated": s.env.truncated,
        "done": s.env.done,
        "discount": s.env.env_info["discount"],
        "action": s.agent.action,
        "prev_action": s.agent.prev_action,
        "count": s.agent.agent_info["count"],
        "value": s.agent.agent_info["value"],
        "valid": s.valid,
    }
    for f in dataclasses.fields(batch.traj_infos):
        value = getattr(batch.traj_infos, f.name)
        if f.name == "extra":  # the user's fields, by name (none here)
            out.update({f"traj.extra.{k}": v for k, v in value.items()})
        elif value is not None:  # agent_returns: None for one agent
            out[f"traj.{f.name}"] = value
    return {k: np.asarray(v) for k, v in out.items()}


def _state_arrays(state):
    return jax.tree.map(np.asarray, state.replace(key=jax.random.key_data(state.key)))


def test_a_batch_of_T_is_a_prefix_of_a_batch_of_2T():
    _, _, (b1, _) = run("sparse", ws=(1.0, 1.0))
    _, _, (b,) = run("sparse2T", ws=(1.0,))
    short, long = _step_fields(b1), _step_fields(b)
    for k in long:
        if k != "final_observation":  # the sparse store needs step T for step T-1
            np.testing.assert_array_equal(short[k], long[k][:T], err_msg=k)
    keep = ~short["done"][-1] | short["truncated"][-1]
    np.testing.assert_array_equal(
        short["final_observation"][:-1], long["final_observation"][: T - 1]
    )
    np.testing.assert_array_equal(
        short["final_observation"][-1][keep], long["final_observation"][T - 1][keep]
    )
    np.testing.assert_array_equal(b1.samples.agent.initial_state, b.samples.agent.initial_state)


def test_two_batches_of_T_equal_one_batch_of_2T():
    """Consecutive batches continue the same stream (auto mode, same key)."""
    _, state_T, (b1, b2) = run("sparse", ws=(1.0, 1.0))
    _, state_2T, (b,) = run("sparse2T", ws=(1.0,))
    short1, short2, long = _step_fields(b1), _step_fields(b2), _step_fields(b)
    for k in long:
        np.testing.assert_array_equal(np.concatenate([short1[k], short2[k]]), long[k], err_msg=k)
    assert long["truncated"].any() and long["terminated"].any()
    np.testing.assert_array_equal(b2.samples.bootstrap_value, b.samples.bootstrap_value)
    # The states to continue from agree too (keys as raw data).
    chex.assert_trees_all_equal(_state_arrays(state_T), _state_arrays(state_2T))


# ----------------------------------------------------------------------------
# (c) jit vs eager, (d) no retrace, (e) determinism
# ----------------------------------------------------------------------------


def test_eager_collect_matches_jit():
    c = compiled("sparse")
    state = c.sampler.init(KEY, params(1.0))  # eager init
    jit_state = c.init(KEY, params(1.0))
    chex.assert_trees_all_close(
        _state_arrays(state),
        _state_arrays(jit_state),
        rtol=1e-6,
        atol=1e-6,
    )
    new_state, batch = c.sampler.collect(state, params(0.5))  # eager collect
    _, jit_batch = c.collect(jit_state, params(0.5))
    eager, jitted = _step_fields(batch), _step_fields(jit_batch)
    for k in eager:
        np.testing.assert_allclose(eager[k], jitted[k], rtol=1e-6, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(
        batch.samples.bootstrap_value, jit_batch.samples.bootstrap_value, rtol=1e-6
    )
    assert isinstance(new_state, js.SamplerState)


def test_new_params_do_not_retrace():
    c = compiled("sparse")
    _, state, batches = run("sparse")  # init + 3 collects with 3 different params
    for w in (3.0, 4.0):
        state, _ = c.collect(state, params(w))
    assert c.traces == 1
    # ...and the params were used (value depends on w).
    values = [np.asarray(b.samples.agent.agent_info["value"]) for b in batches]
    assert not np.allclose(values[0], values[1])


def test_donated_collect_does_not_retrace():
    c = compiled("sparse")
    collect = jax.jit(chex.assert_max_traces(c.sampler.collect, n=1), donate_argnums=0)
    state = c.init(KEY, params(1.0))
    expected = [c.collect(state, params(w))[1] for w in (1.0,)]
    for w in (1.0, 2.0, 3.0):
        state, batch = collect(state, params(w))
        if w == 1.0:
            np.testing.assert_array_equal(
                batch.samples.env.observation, expected[0].samples.env.observation
            )
    assert batch.samples.env.observation.shape == (T, B, 4)


def test_same_key_same_samples_different_key_different():
    c = compiled("sparse")
    _, _, a = run("sparse", seed=3)
    _, _, b = c.run(jax.random.key(3), WS)  # recomputed, not cached
    _, _, other = run("sparse", seed=4)
    for x, y, z in zip(a, b, other, strict=True):
        fx, fy, fz = _step_fields(x), _step_fields(y), _step_fields(z)
        for k in fx:
            np.testing.assert_array_equal(fx[k], fy[k], err_msg=k)
        assert not np.array_equal(fx["observation"], fz["observation"])
        assert not np.array_equal(fx["action"], fz["action"])


# ----------------------------------------------------------------------------
# (f) bad inputs
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BadAgent(CounterAgent):
    mode: str = ""

    def step(self, params, inputs, state, key):
        (step, new_state) = super().step(params, inputs, state, key)
        if self.mode == "float_action":
            step = step._replace(action=step.action.astype(jnp.float32))
        elif self.mode == "action_shape":
            step = step._replace(action=jnp.stack([step.action, step.action]))
        elif self.mode == "state_structure":
            new_state = (new_state, new_state)
        elif self.mode == "state_dtype":
            new_state = new_state.astype(jnp.float32)
        return step, new_state


def _make(**kwargs):
    env, env_params = cartpole(None)
    agent = kwargs.pop("agent", CounterAgent(env.action_space(env_params)))
    spec = kwargs.pop("spec", js.BatchSpec(4, 2))
    return js.make_sampler(env, env_params, agent, spec, agent_params=params(1.0), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"spec": js.BatchSpec(0, 2)}, ValueError, "batch_spec.T"),
        ({"spec": js.BatchSpec(4, -1)}, ValueError, "batch_spec.B"),
        ({"spec": js.BatchSpec(4, True)}, TypeError, "batch_spec.B"),
        ({"spec": js.BatchSpec(4.0, 2)}, TypeError, "batch_spec.T"),
        ({"reset_mode": "bogus"}, ValueError, "reset_mode"),
        ({"max_decorrelation_steps": -1}, ValueError, "max_decorrelation_steps"),
        (
            {"max_decorrelation_steps": 5, "reset_mode": "episodic"},
            ValueError,
            "max_decorrelation_steps",
        ),
        ({"discount": 1.5}, ValueError, "discount"),
        ({"discount": -0.1}, ValueError, "discount"),
        ({"discount": "0.9"}, TypeError, "discount"),
        ({"final_observation": "x"}, ValueError, "final_observation"),
        ({"bootstrap_value": 1}, TypeError, "bootstrap_value"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        _make(**kwargs)


@pytest.mark.parametrize(
    ("mode", "match"),
    [
        ("float_action", r"action.*float32"),
        ("action_shape", r"action.*\[2\]"),
        ("state_structure", "agent state"),
        ("state_dtype", r"agent state.*float32"),
    ],
)
def test_bad_agent(mode, match):
    env, env_params = cartpole(None)
    with pytest.raises(ValueError, match=match):
        _make(agent=BadAgent(env.action_space(env_params), mode))


def test_bad_key_and_state():
    sampler = _make()
    with pytest.raises(TypeError, match="key"):
        sampler.init(jax.random.PRNGKey(0), params(1.0))  # raw uint32 key
    with pytest.raises(TypeError, match="key"):
        sampler.init(0, params(1.0))
    with pytest.raises(ValueError, match="key"):
        sampler.init(jax.random.split(jax.random.key(0), 2), params(1.0))
    other = _make(spec=js.BatchSpec(4, 3))
    state = jax.eval_shape(other.init, jax.random.key(0), params(1.0))
    with pytest.raises(ValueError, match="B=2"):
        jax.eval_shape(sampler.collect, state, params(1.0))
    with pytest.raises(TypeError, match="state"):
        sampler.collect({"not": "a state"}, params(1.0))


# ----------------------------------------------------------------------------
# (g) summarize
# ----------------------------------------------------------------------------


def _np_summary(ti) -> dict[str, float]:
    mask = np.asarray(ti.completed, bool)
    out = {"n_trajectories": float(mask.sum())}
    for name in ("length", "episode_return", "discounted_return", "nonzero_rewards"):
        x = np.asarray(getattr(ti, name), np.float64)[mask]
        stats = (x.mean(), x.std(), x.min(), x.max()) if x.size else (np.nan,) * 4
        for suffix, v in zip(("mean", "std", "min", "max"), stats, strict=True):
            out[f"{name}_{suffix}"] = float(v)
    return out


def _check_summary(ti) -> None:
    expected = _np_summary(ti)
    for fn in (js.summarize, jax.jit(js.summarize)):
        got = fn(ti)
        assert set(got) == set(expected)
        for k, v in expected.items():
            assert np.asarray(got[k]).shape == () and np.asarray(got[k]).dtype == np.float32, k
            np.testing.assert_allclose(float(got[k]), v, rtol=1e-5, atol=1e-5, err_msg=k)


def test_summarize_matches_numpy():
    _, _, batches = run("sparse")
    _check_summary(batches[0].traj_infos)
    # All batches at once, and a flat [N] TrajInfo as an evaluator returns.
    stacked = jax.tree.map(lambda *x: np.concatenate(x), *[b.traj_infos for b in batches])
    assert np.asarray(stacked.completed).sum() >= 3  # a nontrivial std
    _check_summary(stacked)
    _check_summary(jax.tree.map(lambda x: np.asarray(x).reshape(-1), stacked))


def test_summarize_some_fields_and_stats():
    _, _, batches = run("sparse")
    ti = batches[0].traj_infos
    expected = _np_summary(ti)
    got = jax.jit(lambda t: js.summarize(t, ("episode_return", "length"), ("mean", "max")))(ti)
    want = ["n_trajectories", "episode_return_mean", "episode_return_max"]
    assert set(got) == {*want, "length_mean", "length_max"}
    for k in got:
        np.testing.assert_allclose(float(got[k]), expected[k], rtol=1e-5, atol=1e-5, err_msg=k)
    with pytest.raises(ValueError, match="stats must be among"):
        js.summarize(ti, stats=("median",))
    with pytest.raises(ValueError, match=r"fields: no trajectory field \['lives'\]"):
        js.summarize(ti, fields=("lives",))
    with_vector = ti.replace(extra={"vec": np.zeros((T, B, 3), np.float32)})
    assert "vec_mean" not in js.summarize(with_vector)  # by default: skipped, as documented
    with pytest.raises(ValueError, match="fields: 'vec' is not a scalar per step"):
        js.summarize(with_vector, fields=("vec",))


def test_summarize_without_completed_trajectories_is_nan():
    _, _, batches = run("sparse")
    ti = batches[0].traj_infos.replace(completed=np.zeros((T, B), bool))
    got = js.summarize(ti)
    assert float(got["n_trajectories"]) == 0.0
    for k, v in got.items():
        if k != "n_trajectories":
            assert np.isnan(float(v)), k


# ----------------------------------------------------------------------------
# (h) "wait" and "episodic" reset modes
# ----------------------------------------------------------------------------


def _idle_and_ends(batch):
    s = batch.samples
    valid = np.asarray(s.valid)
    ended = np.asarray(s.env.terminated | s.env.truncated) & valid
    return valid, ended


def _check_waiting(batch, name):
    """At most one end per env; valid is True then False after the end; done is
    held True; idle steps are all zeros."""
    s, ti = batch.samples, batch.traj_infos
    valid, ended = _idle_and_ends(batch)
    assert np.all(ended.sum(axis=0) <= 1), name
    ended_before = np.cumsum(ended, axis=0) - ended  # ends strictly before t
    np.testing.assert_array_equal(valid, ended_before == 0, err_msg=name)
    np.testing.assert_array_equal(np.asarray(s.env.done), ended | ~valid, err_msg=name)
    np.testing.assert_array_equal(np.asarray(ti.completed), ended, err_msg=name)
    idle = ~valid
    leaves = [
        s.env.observation,
        s.env.final_observation,
        s.env.reward,
        s.env.prev_reward,
        s.env.terminated,
        s.env.truncated,
        s.env.env_info["discount"],
        s.agent.action,
        s.agent.prev_action,
        s.agent.agent_info["count"],
        s.agent.agent_info["value"],
        ti.length,
        ti.episode_return,
        ti.discounted_return,
        ti.nonzero_rewards,
    ]
    for i, x in enumerate(leaves):
        assert np.all(np.asarray(x)[idle] == 0), (name, i)
    assert np.all(np.asarray(ti.length)[valid] >= 1)
    return valid, ended


def test_wait_mode():
    c = compiled("wait")
    _, _, batches = run("wait")
    n_envs = batches[0].samples.valid.shape[1]
    ranks = 100 * np.arange(n_envs)
    any_idle = any_continued = False
    for k, b in enumerate(batches):
        valid, ended = _check_waiting(b, f"batch {k}")
        any_idle |= bool((~valid).any())
        if k + 1 < len(batches):
            nxt = batches[k + 1]
            e_ended = ended.any(axis=0)
            s, n = b.samples, nxt.samples
            # An env that ended resets for the next batch.
            assert np.all(np.asarray(n.agent.prev_action[0])[e_ended] == 0)
            assert np.all(np.asarray(n.env.prev_reward[0])[e_ended] == 0)
            assert np.all(np.asarray(nxt.traj_infos.length[0])[e_ended] == 1)
            assert np.all(np.asarray(n.agent.initial_state)[e_ended] == ranks[e_ended])
            assert np.all(np.abs(np.asarray(n.env.observation[0])[e_ended]) <= 0.05)
            # One that did not continues its episode.
            go = ~e_ended
            any_continued |= bool(go.any())
            np.testing.assert_array_equal(
                np.asarray(n.env.observation[0])[go], np.asarray(s.env.final_observation[-1])[go]
            )
            np.testing.assert_array_equal(
                np.asarray(n.agent.prev_action[0])[go], np.asarray(s.agent.action[-1])[go]
            )
            np.testing.assert_array_equal(
                np.asarray(n.env.prev_reward[0])[go], np.asarray(s.env.reward[-1])[go]
            )
            np.testing.assert_array_equal(
                np.asarray(nxt.traj_infos.length[0])[go],
                np.asarray(b.traj_infos.length[-1])[go] + 1,
            )
    assert any_idle and any_continued
    assert c.traces == 1


def test_episodic_mode():
    c = compiled("episodic")
    _, _, batches = run("episodic")
    n_envs = batches[0].samples.valid.shape[1]
    any_early = False
    for k, b in enumerate(batches):
        s = b.samples
        valid, ended = _check_waiting(b, f"batch {k}")
        assert np.all(np.asarray(s.env.done)[-1])
        assert np.all(ended.sum(axis=0) == 1)  # exactly one T-step episode per env
        assert np.all(valid[0])
        assert np.all(np.asarray(s.agent.prev_action[0]) == 0)
        assert np.all(np.asarray(s.env.prev_reward[0]) == 0)
        assert np.all(np.asarray(b.traj_infos.length[0]) == 1)
        np.testing.assert_array_equal(s.agent.initial_state, 100 * np.arange(n_envs))
        np.testing.assert_array_equal(s.agent.agent_info["count"][0], 100 * np.arange(n_envs))
        assert np.all(np.abs(np.asarray(s.env.observation[0])) <= 0.05)
        # Survivors are truncated at T-1 (not terminated), with a true final obs.
        last = valid[-1]
        assert np.all(ended[-1][last])
        survivors = last & ~np.asarray(s.env.terminated[-1])
        assert np.all(np.any(np.asarray(s.env.final_observation[-1])[survivors] != 0, axis=-1))
        any_early |= bool((~last).any())
    assert any_early
    assert c.traces == 1


def test_every_sampler_offers_the_sampler_protocol():
    """``SamplerProtocol`` is what the JAX, sharded and host samplers share;
    the reset mode is a strategy chosen once (``core.modes``)."""
    from jaxsample.core import modes
    from jaxsample.distributed import shard_sampler
    from jaxsample.host import HostSampler
    from jaxsample.sampler import SamplerProtocol

    sampler = compiled("wait").sampler
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("envs",))
    for one in (sampler, shard_sampler(sampler, mesh)):
        assert isinstance(one, SamplerProtocol)
    members = {name for name in vars(SamplerProtocol) if not name.startswith("_")}
    assert members == {"agent", "options", "batch_spec", "examples", "init", "collect"}
    host = {f.name for f in dataclasses.fields(HostSampler)} | set(dir(HostSampler))
    assert members <= host
    assert type(sampler._mode) is modes.WaitReset
    assert [type(modes.choose(m)) for m in js.sampler.RESET_MODES] == [
        modes.AutoReset,
        modes.WaitReset,
        modes.EpisodicReset,
    ]

"""TrajInfo: counts saturate instead of wrapping; user fields (TrajField) and
traj_done against a plain Python loop, in the JAX and host samplers."""

import chex
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsample as js
from jaxsample.traj_info import COUNT_MAX, TrajAccumulator

# One worker builds the module fixtures for all its tests.
pytestmark = pytest.mark.xdist_group("test_traj_info")


def test_accumulator_counts_saturate_instead_of_wrapping() -> None:
    acc = TrajAccumulator.zeros().replace(
        length=jnp.int32(COUNT_MAX - 2), nonzero_rewards=jnp.int32(COUNT_MAX - 1)
    )
    add = jax.jit(lambda a, r: a.add(r, 0.99))
    lengths, nonzero = [], []
    for reward in (1.0, 0.0, 1.0, 1.0):
        acc = add(acc, jnp.float32(reward))
        lengths.append(int(acc.length))
        nonzero.append(int(acc.nonzero_rewards))
    assert lengths == [COUNT_MAX - 1, COUNT_MAX, COUNT_MAX, COUNT_MAX]
    assert nonzero == [COUNT_MAX, COUNT_MAX, COUNT_MAX, COUNT_MAX]
    # Below the limit the counts are exact.
    small = add(TrajAccumulator.zeros(), jnp.float32(0.0))
    assert int(small.length) == 1 and int(small.nonzero_rewards) == 0


def test_sampler_reports_no_negative_length_in_a_very_long_episode() -> None:
    env, params = gymnax.make("CartPole-v1")
    agent = js.agents.RandomAgent(env.action_space(params))
    sampler = js.make_sampler(env, params, agent, js.BatchSpec(T=8, B=4))
    state = sampler.init(jax.random.key(0), None)
    near = jnp.full((4,), COUNT_MAX - 3, jnp.int32)
    state = state.replace(traj=state.traj.replace(length=near, nonzero_rewards=near))
    _, batch = jax.jit(sampler.collect)(state, None)
    length = np.asarray(batch.traj_infos.length)
    assert length.min() >= 0 and length.max() == COUNT_MAX
    # Env 0's first steps continue the long episode: COUNT_MAX - 2, -1, then held.
    assert length[:2, 0].tolist() == [COUNT_MAX - 2, COUNT_MAX - 1]


# ----------------------------------------------------------------------------
# User fields (rlpyt's TrajInfoCls) and traj_done (game end vs episode end)
# ----------------------------------------------------------------------------

LIVES = 2
T, B = 24, 3


class Lives:
    """CartPole where a termination costs one of ``LIVES`` lives; ``info["game_over"]``
    when the last one goes (or a truncation ends the game). The episode (``done``,
    the reset) ends at every termination, as with Atari's episodic lives."""

    def __init__(self) -> None:
        self.env, self.default_params = gymnax.make("CartPole-v1")

    def action_space(self, params=None):
        return self.env.action_space(params)

    def observation_space(self, params):
        return self.env.observation_space(params)

    def reset(self, key, params=None):
        obs, state = self.env.reset(key, params)
        return obs, (state, jnp.int32(LIVES))

    def step(self, key, state, action, params=None):
        inner, lives = state
        obs, inner, reward, terminated, truncated, info = self.env.step(key, inner, action, params)
        lives = jnp.where(terminated, lives - 1, lives)
        over = terminated & (lives == 0)
        lives = jnp.where(over | truncated, LIVES, lives)
        return obs, (inner, lives), reward, terminated, truncated, {**info, "game_over": over}


FIELDS = [
    js.TrajField("steps", 0, lambda v, s: v + 1),
    js.TrajField("ret", 0.0, lambda v, s: v + s.reward),
    js.TrajField("max_x", -np.inf, lambda v, s: jnp.maximum(v, s.observation[0])),
    js.TrajField("lost", 0, lambda v, s: v + s.terminated),
    js.TrajField("right", 0, lambda v, s: v + (s.action == 1)),
    js.TrajField("game_over", False, lambda v, s: v | s.env_info["game_over"]),
]


def reference(batches, start: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """TrajInfo (completed, length, episode_return and the FIELDS) in a plain
    Python loop over each env's steps, from the accumulators ``start`` ``[B]``;
    a trajectory ends at a truncation or a termination with game_over."""
    fresh = {"length": 0, "episode_return": 0.0, "steps": 0, "ret": 0.0, "max_x": -np.inf,
             "lost": 0, "right": 0, "game_over": False}  # fmt: skip
    out = {k: [] for k in ("completed", *fresh)}
    for b_idx in range(B):
        acc = {k: start[k][b_idx] for k in fresh}
        rows = {k: [] for k in out}
        for batch in batches:
            env = batch.samples.env
            obs, act = np.asarray(env.observation), np.asarray(batch.samples.agent.action)
            for t in range(T):
                r = float(env.reward[t, b_idx])
                term, trunc = bool(env.terminated[t, b_idx]), bool(env.truncated[t, b_idx])
                over = bool(env.env_info["game_over"][t, b_idx])
                acc["length"] += 1
                acc["steps"] += 1
                acc["episode_return"] += r
                acc["ret"] += r
                acc["max_x"] = max(acc["max_x"], float(obs[t, b_idx, 0]))
                acc["lost"] += term
                acc["right"] += int(act[t, b_idx] == 1)
                acc["game_over"] |= over
                end = trunc or (term and over)
                rows["completed"].append(end)
                for k in fresh:
                    rows[k].append(acc[k])
                if end:
                    acc = dict(fresh)
        for k in out:
            out[k].append(rows[k])
    return {k: np.asarray(v).T for k, v in out.items()}  # [N * T, B]


def check_against_reference(batches, start) -> np.ndarray:
    want = reference(batches, start)
    infos = [b.traj_infos for b in batches]
    got = {
        "completed": np.concatenate([i.completed for i in infos]),
        "length": np.concatenate([i.length for i in infos]),
        "episode_return": np.concatenate([i.episode_return for i in infos]),
        **{f.name: np.concatenate([i.extra[f.name] for i in infos]) for f in FIELDS},
    }
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-6, err_msg=k)
    assert got["steps"].dtype == np.int32 and got["max_x"].dtype == np.float32
    assert got["game_over"].dtype == bool
    return want["completed"]


@pytest.fixture(scope="module")
def lives_run():
    env = Lives()
    agent = js.agents.RandomAgent(env.action_space(env.default_params))
    sampler = js.make_sampler(
        env, env.default_params, agent, js.BatchSpec(T, B), max_decorrelation_steps=12,
        traj_fields=FIELDS, traj_done="game_over",
    )  # fmt: skip
    state = jax.jit(sampler.init)(jax.random.key(3), None)
    collect = jax.jit(chex.assert_max_traces(sampler.collect, n=1))
    start = state.traj
    batches = []
    for _ in range(3):
        state, batch = collect(state, None)
        batches.append(batch)
    return start, batches


def test_user_fields_and_traj_done_match_a_python_loop(lives_run) -> None:
    start, batches = lives_run
    # The decorrelation steps count too: the fields start where the built-in ones do.
    np.testing.assert_array_equal(start.extra["steps"], start.length)
    np.testing.assert_allclose(start.extra["ret"], start.episode_return, rtol=1e-6)
    assert int(np.max(start.length)) > 0
    begin = {"length": start.length, "episode_return": start.episode_return, **start.extra}
    completed = check_against_reference(batches, jax.tree.map(np.asarray, begin))
    done = np.concatenate([np.asarray(b.samples.env.done) for b in batches])
    # A lost life is an episode end (done, reset) but not a trajectory end.
    assert completed.sum() >= 2 and done.sum() > completed.sum()
    assert not np.any(completed & ~done)


def test_summarize_reports_user_fields(lives_run) -> None:
    _, batches = lives_run
    info = batches[-1].traj_infos
    s = jax.jit(js.summarize)(info)
    mask = np.asarray(info.completed)
    assert mask.any()
    for f in FIELDS:
        x = np.asarray(info.extra[f.name], np.float64)[mask]
        np.testing.assert_allclose(float(s[f"{f.name}_mean"]), x.mean(), rtol=1e-5)
        np.testing.assert_allclose(float(s[f"{f.name}_max"]), x.max(), rtol=1e-6)
        np.testing.assert_allclose(float(s[f"{f.name}_min"]), x.min(), rtol=1e-6)
    assert float(s["game_over_mean"]) <= 1.0  # a bool field's mean is a rate


def test_traj_fields_and_traj_done_bad_input() -> None:
    env, params = gymnax.make("CartPole-v1")
    agent = js.agents.RandomAgent(env.action_space(params))

    def make(**kw):
        return js.make_sampler(env, params, agent, js.BatchSpec(4, 2), **kw)

    with pytest.raises(TypeError, match="traj_fields"):
        make(traj_fields=FIELDS[0])
    with pytest.raises(TypeError, match=r"traj_fields\[0\]"):
        make(traj_fields=[lambda v, s: v])
    with pytest.raises(ValueError, match="taken"):
        make(traj_fields=[js.TrajField("length", 0, lambda v, s: v)])
    with pytest.raises(ValueError, match="taken"):
        make(traj_fields=[FIELDS[0], FIELDS[0]])
    with pytest.raises(TypeError, match="traj_done"):
        make(traj_done=1)
    with pytest.raises(ValueError, match="traj_done='lives'"):
        make(traj_done="lives")  # not in CartPole's info
    bad = make(traj_fields=[js.TrajField("vec", 0.0, lambda v, s: s.observation)])
    with pytest.raises(ValueError, match=r"'vec'.*shape"):
        jax.eval_shape(bad.collect, bad.init(jax.random.key(0), None), None)


def test_host_sampler_user_fields_and_traj_done() -> None:
    """The host sampler assembles the same TrajInfo (a gymnasium Lives env
    against the same Python loop); decorrelation with them is a clear error."""
    gym = pytest.importorskip("gymnasium")

    class GymLives(gym.Wrapper):
        lives = LIVES

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.lives -= int(terminated)
            over = bool(terminated and self.lives == 0)
            if over or truncated:
                self.lives = LIVES
            return obs, reward, terminated, truncated, {**info, "game_over": over}

    def vec():
        return gym.vector.SyncVectorEnv(
            [lambda: GymLives(gym.make("CartPole-v1", max_episode_steps=30))] * B
        )

    agent = js.agents.RandomAgent(gymnax.environments.spaces.Discrete(2))
    spec = {"game_over": jax.ShapeDtypeStruct((), bool)}
    kw = {"traj_fields": FIELDS, "traj_done": "game_over", "info_spec": spec}
    with pytest.raises(ValueError, match="max_decorrelation_steps=0"):
        js.host.make_host_sampler(vec(), agent, js.BatchSpec(T, B), max_decorrelation_steps=3, **kw)
    with pytest.raises(ValueError, match="info_spec"):
        js.host.make_host_sampler(vec(), agent, js.BatchSpec(T, B), traj_done="x", info_spec=spec)
    sampler = js.host.make_host_sampler(vec(), agent, js.BatchSpec(T, B), **kw)
    state = sampler.init(jax.random.key(0), None)
    batches = []
    for _ in range(2):
        state, batch = sampler.collect(state, None)
        batches.append(batch)
    zeros = {f.name: np.full(B, np.asarray(f.init)) for f in FIELDS}
    start = {"length": np.zeros(B, int), "episode_return": np.zeros(B), **zeros}
    completed = check_against_reference(batches, start)
    done = np.concatenate([np.asarray(b.samples.env.done) for b in batches])
    assert completed.sum() >= 1 and done.sum() > completed.sum()

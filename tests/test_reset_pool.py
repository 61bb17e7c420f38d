"""Cheap resets (``make_sampler(reset_pool=R)``) against an independent reference.

The reference is a plain Python loop over ONE CartPole env at a time with
gymnax's own ``step_env`` / ``is_truncated`` / ``reset``, re-deriving the key
schedule of docs/design.md and applying the documented pool rule: at step
``n``, the ``m``-th env of block ``j`` (rank order) that ended gets
``env.reset(fold_in(k_run[j G + m], 4 n + 2))`` (the reset key of step ``n``). It checks every
transition (nothing lost), the true final observations, terminated/truncated,
TrajInfo and the resets, over two consecutive batches; the rule does not
depend on ``R``, which another ``R`` shows bit for bit, and neither do the
samples on one or two devices.
"""

from __future__ import annotations

import gymnax
import jax
import numpy as np
import pytest
from jax.sharding import Mesh

import jaxsample as js

T, B, G = 32, 8, 4
ENV, PARAMS = gymnax.make("CartPole-v1")
# One worker builds the module fixtures for all its tests.
pytestmark = pytest.mark.xdist_group("test_reset_pool")
AGENT = js.agents.RandomAgent(ENV.action_space(PARAMS))


def _sampler(R: int, **kw) -> js.Sampler:
    kw.setdefault("final_observation", "dense")
    return js.make_sampler(
        ENV,
        PARAMS,
        AGENT,
        js.BatchSpec(kw.pop("T", T), B),
        reset_pool=R,
        reset_pool_block=G,
        **kw,
    )


def _batches(sampler: js.Sampler, n: int = 2):
    state = jax.jit(sampler.init)(jax.random.key(3), ())
    collect = jax.jit(sampler.collect)
    out = []
    for _ in range(n):
        state, batch = collect(state, ())
        out.append(jax.device_get(batch))
    return state, out


@pytest.fixture(scope="module")
def pooled():
    """R=1: every step with two ended envs in a block takes extra rounds."""
    return _batches(_sampler(1))


def close(got, expected) -> None:
    """Equal up to float rounding (XLA fuses the vmapped dynamics differently)."""
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-6)


def _leaves_equal(a, b) -> None:
    def data(x):
        return jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x

    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(data(x)), np.asarray(data(y)))


def test_pooled_resets_follow_the_documented_rule(pooled) -> None:
    _, batches = pooled
    step_env = jax.jit(ENV.step_env)
    runs = [jax.random.split(jax.random.fold_in(jax.random.key(3), r), 3) for r in range(B)]
    envs = [ENV.reset(k[0], PARAMS) for k in runs]  # (obs, state)
    returns, lengths = np.zeros(B), np.zeros(B, int)
    rounds = 0
    for n in range(2 * T):
        batch = batches[n // T]
        e, t = batch.samples.env, n % T
        k_step, k_reset = (
            [jax.random.fold_in(runs[r][2], 4 * n + s) for r in range(B)] for s in (1, 2)
        )
        ended = []
        for b in range(B):
            obs, state = envs[b]
            close(e.observation[t, b], obs)
            action = batch.samples.agent.action[t, b]
            obs, state, reward, terminated, _ = step_env(k_step[b], state, action, PARAMS)
            truncated = bool(ENV.is_truncated(state, PARAMS))
            close(e.final_observation[t, b], obs)
            assert float(e.reward[t, b]) == float(reward)
            assert bool(e.terminated[t, b]) == bool(terminated)
            assert bool(e.truncated[t, b]) == truncated
            returns[b] += float(reward)
            lengths[b] += 1
            done = bool(terminated) or truncated
            info = batch.traj_infos
            assert bool(info.completed[t, b]) == done
            if done:
                assert int(info.length[t, b]) == lengths[b]
                assert float(info.episode_return[t, b]) == pytest.approx(returns[b])
                returns[b], lengths[b] = 0.0, 0
                ended.append(b)
            envs[b] = (obs, state)
        for j in range(B // G):  # the m-th ended env of block j: the key of env j G + m
            in_block = [b for b in ended if b // G == j]
            rounds = max(rounds, len(in_block))
            for m, b in enumerate(in_block):
                envs[b] = ENV.reset(k_reset[j * G + m], PARAMS)
    assert rounds >= 2, "some step must end two envs of one block (R=1 deals twice)"


def test_the_rule_does_not_depend_on_the_pool_size(pooled) -> None:
    state, batches = pooled
    state4, batches4 = _batches(_sampler(G))
    _leaves_equal((state, batches), (state4, batches4))


def test_episodic_mode_pools_by_the_same_rule() -> None:
    # Episodic: the batch's cut at its last step truncates every env, but it
    # ends no env's own episode, so nothing is reset there (as gymnax's step
    # does not): the batch ends at the true observations, the default sampler's.
    sampler = _sampler(1, T=6, reset_mode="episodic", final_observation="sparse")
    state, (batch,) = _batches(sampler, 1)
    assert np.asarray(batch.samples.env.done[-1]).all()
    default = js.make_sampler(ENV, PARAMS, AGENT, js.BatchSpec(6, B), reset_mode="episodic")
    want_state, (want,) = _batches(default, 1)
    close(state.env.observation, want_state.env.observation)
    cut = ~np.asarray(want.samples.env.terminated[-1])  # not ended by the env itself
    assert cut.any()
    final = np.asarray(batch.samples.env.final_observation[-1])
    close(np.asarray(state.env.observation)[cut], final[cut])


@pytest.mark.slow
def test_decorrelation_pools_by_the_same_rule() -> None:
    """Decorrelation deals resets by the same rule, whatever R."""
    inits = [
        jax.jit(_sampler(R, max_decorrelation_steps=40).init)(jax.random.key(5), ()) for R in (1, G)
    ]
    _leaves_equal(inits[0], inits[1])
    assert int(np.asarray(inits[0].traj.length).min()) < 40 - 25, "no env ended during it"


@pytest.mark.slow  # a mesh sampler equals a single-device one: test_distributed
def test_pooled_samples_are_the_same_on_two_devices(pooled) -> None:
    mesh = Mesh(np.array(jax.devices()[:2]), ("envs",))
    state, batches = _batches(
        js.make_sampler(
            ENV,
            PARAMS,
            AGENT,
            js.BatchSpec(T, B),
            final_observation="dense",
            reset_pool=1,
            reset_pool_block=G,
            mesh=mesh,
        )
    )
    _leaves_equal(pooled, (state, batches))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"reset_pool": -1}, ValueError, "reset_pool must be >= 0"),
        ({"reset_pool": 1.5}, TypeError, "reset_pool must be an int"),
        ({"reset_pool": 5, "reset_pool_block": 4}, ValueError, "reset_pool must be <= "),
        ({"reset_pool": 1, "reset_pool_block": 3}, ValueError, "must divide batch_spec.B"),
        ({"reset_pool_block": 4}, ValueError, "reset_pool_block needs reset_pool"),
        (
            {"reset_pool": 1, "reset_pool_block": 4, "env_ranks": [2, 3, 4, 5, 6, 7, 8, 9]},
            ValueError,
            "env_ranks must be whole blocks",
        ),
    ],
)
def test_bad_pool_arguments_are_named(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        js.make_sampler(ENV, PARAMS, AGENT, js.BatchSpec(4, 8), **kwargs)


def test_pool_needs_gymnax_step_and_whole_blocks_per_device() -> None:
    class OwnStep(type(ENV)):
        def step(self, *a, **k):  # pragma: no cover - never called
            return super().step(*a, **k)

    with pytest.raises(TypeError, match="replaces step"):
        js.make_sampler(OwnStep(), PARAMS, AGENT, js.BatchSpec(4, 8), reset_pool=1)
    mesh = Mesh(np.array(jax.devices()[:4]), ("envs",))
    with pytest.raises(ValueError, match="envs per device"):
        js.make_sampler(
            ENV, PARAMS, AGENT, js.BatchSpec(4, 8), reset_pool=1, reset_pool_block=4, mesh=mesh
        )


def test_the_default_block_is_taken_per_device() -> None:
    """Issue 30 item 7: with a mesh and no reset_pool_block, the default is the
    largest divisor of the envs PER DEVICE up to 64 (here 8 over 2 devices: 4),
    not of B, and the sampler is the one-device sampler with that block."""
    mesh = Mesh(np.array(jax.devices()[:2]), ("envs",))
    sharded = js.make_sampler(ENV, PARAMS, AGENT, js.BatchSpec(4, 8), reset_pool=1, mesh=mesh)
    assert sharded.local._resets.block == 4
    one = js.make_sampler(ENV, PARAMS, AGENT, js.BatchSpec(4, 8), reset_pool=1)
    assert one._resets.block == 8  # without a mesh: of B
    same = js.make_sampler(ENV, PARAMS, AGENT, js.BatchSpec(4, 8), reset_pool=1, reset_pool_block=4)
    _leaves_equal(_batches(same, 1), _batches(sharded, 1))

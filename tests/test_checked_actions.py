"""The checked-actions mode (issue 13 item 3): an agent whose action is outside
the action space (5 for ``Discrete(2)`` makes CartPole push with 9x force, no
error) is caught at run time, under jit, with a message naming the env rank,
the step, the action and the space; the default program has none of it."""

import dataclasses

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsample as js

KEY = jax.random.key(3)


@dataclasses.dataclass(frozen=True)
class OutOfRange:
    """Random CartPole actions, except that env rank ``rank`` adds 5 from the
    batch step ``at`` on (from its own step counter, its state)."""

    rank: int = 1
    at: int = 3

    def init(self, key, observation):
        return ()

    def initial_state(self, env_rank):
        return jnp.asarray(env_rank, jnp.int32), jnp.zeros((), jnp.int32)

    def step(self, params, inputs, state, key):
        rank, t = state
        action = jax.random.randint(key, (), 0, 2)
        action = jnp.where((rank == self.rank) & (t >= self.at), action + 5, action)
        return js.AgentStep(action, ()), (rank, t + 1)

    def value(self, params, inputs, state):
        return jnp.zeros(())

    def as_eval(self):
        return self


@dataclasses.dataclass(frozen=True)
class NanPendulum(OutOfRange):
    """Box actions for Pendulum: NaN for env rank ``rank`` from step ``at``."""

    def step(self, params, inputs, state, key):
        rank, t = state
        action = jax.random.uniform(key, (1,), minval=-2.0, maxval=2.0)
        action = jnp.where((rank == self.rank) & (t >= self.at), jnp.nan, action)
        return js.AgentStep(action, ()), (rank, t + 1)


def _sampler(agent=None, env="CartPole-v1", **kw) -> js.Sampler:
    env, params = gymnax.make(env)
    return js.make_sampler(env, params, agent or OutOfRange(), js.BatchSpec(T=8, B=4), **kw)


def test_default_accepts_out_of_range_actions_silently() -> None:
    """What the checked mode is for: without it the env takes the action."""
    sampler = _sampler()
    _, batch = jax.jit(sampler.collect)(sampler.init(KEY, ()), ())
    assert int(np.max(batch.samples.agent.action)) >= 5


def test_checked_mode_names_rank_step_action_and_space() -> None:
    sampler = _sampler(check_actions=True)
    collect = jax.jit(sampler.collect)
    state = sampler.init(KEY, ())
    with pytest.raises(Exception, match="check_actions") as info:
        jax.block_until_ready(collect(state, ()))
    message = str(info.value)
    assert "outside the action space Discrete(2" in message
    assert "env rank 1 at batch step 3 chose action" in message
    action = int(message.split("chose action ")[1].split()[0])
    assert action in (5, 6)


def test_checked_mode_catches_nan_box_actions() -> None:
    sampler = _sampler(NanPendulum(rank=2, at=0), env="Pendulum-v1", check_actions=True)
    with pytest.raises(Exception, match=r"env rank 2 at batch step 0 chose action \[nan\]"):
        jax.block_until_ready(jax.jit(sampler.collect)(sampler.init(KEY, ()), ()))


@pytest.mark.parametrize("reset_mode", ["auto", "wait"])
def test_checked_mode_changes_nothing_for_a_good_agent(reset_mode) -> None:
    good = OutOfRange(rank=-1)  # never out of range
    kw = dict(reset_mode=reset_mode, max_decorrelation_steps=0)
    plain, checked = _sampler(good, **kw), _sampler(good, check_actions=True, **kw)
    s1, s2 = plain.init(KEY, ()), checked.init(KEY, ())
    (_, b1), (_, b2) = plain.collect(s1, ()), checked.collect(s2, ())
    for x, y in zip(jax.tree.leaves(b1), jax.tree.leaves(b2), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_default_program_has_no_check() -> None:
    """Off, the lowered program has no host callback; on, it has one."""

    def lowered(sampler: js.Sampler) -> str:
        state = sampler.init(KEY, ())
        return jax.jit(sampler.collect).lower(state, ()).as_text()

    assert "callback" not in lowered(_sampler())
    assert "callback" in lowered(_sampler(check_actions=True))


def test_evaluator_checked_mode() -> None:
    env, params = gymnax.make("CartPole-v1")
    kw = dict(n_envs=3, max_steps=300)
    agent = OutOfRange(rank=2, at=1)
    jax.block_until_ready(js.make_evaluator(env, params, agent, **kw).run(KEY, ()))  # silent
    checked = js.make_evaluator(env, params, agent, check_actions=True, **kw)
    with pytest.raises(Exception, match=r"check_actions.*env rank 2 at step 1 chose action"):
        jax.block_until_ready(jax.jit(checked.run)(KEY, ()))


def test_check_actions_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="check_actions must be a bool"):
        _sampler(check_actions="yes")
    env, params = gymnax.make("CartPole-v1")
    with pytest.raises(TypeError, match="check_actions must be a bool"):
        js.make_evaluator(env, params, OutOfRange(), n_envs=1, max_steps=4, check_actions=1)

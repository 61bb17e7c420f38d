"""The checked-actions mode (issue 13 item 3): an agent whose action is outside
the action space (5 for ``Discrete(2)`` makes CartPole push with 9x force, no
error) is caught at run time, under jit, with a message naming the env rank,
the step, the action and the space; the default program has none of it."""

import dataclasses
import functools

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsample as js

KEY = jax.random.key(3)


def bad(rank: int = 1, at: int = 3) -> dict[str, jax.Array]:
    """OutOfRange's parameters: env rank ``rank`` goes out of range from batch
    step ``at`` on (rank -1: never). Parameters, not fields, so a good and a bad
    agent run the same compiled program."""
    return {"rank": jnp.int32(rank), "at": jnp.int32(at)}


GOOD = bad(rank=-1)


@dataclasses.dataclass(frozen=True)
class OutOfRange:
    """Random CartPole actions, except that env rank ``params["rank"]`` adds 5
    from the batch step ``params["at"]`` on (from its own step counter, its state)."""

    def init(self, key, observation):
        return bad()

    def initial_state(self, env_rank):
        return jnp.asarray(env_rank, jnp.int32), jnp.zeros((), jnp.int32)

    def step(self, params, inputs, state, key):
        rank, t = state
        action = jax.random.randint(key, (), 0, 2)
        action = jnp.where((rank == params["rank"]) & (t >= params["at"]), action + 5, action)
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
        action = jnp.where((rank == params["rank"]) & (t >= params["at"]), jnp.nan, action)
        return js.AgentStep(action, ()), (rank, t + 1)


def _sampler(agent=None, env="CartPole-v1", **kw) -> js.Sampler:
    env, params = gymnax.make(env)
    return js.make_sampler(env, params, agent or OutOfRange(), js.BatchSpec(T=8, B=4), **kw)


@functools.cache
def _compiled(check_actions: bool = False, reset_mode: str = "auto"):
    """The CartPole sampler and its jitted init and collect, built once per
    option (shared by the tests below)."""
    sampler = _sampler(check_actions=check_actions, reset_mode=reset_mode)
    return sampler, jax.jit(sampler.init), jax.jit(sampler.collect)


def _collect(params, **options) -> js.Batch:
    _, init, collect = _compiled(**options)
    return jax.block_until_ready(collect(init(KEY, params), params)[1])


def test_default_accepts_out_of_range_actions_silently() -> None:
    """What the checked mode is for: without it the env takes the action."""
    batch = _collect(bad())
    assert int(np.max(batch.samples.agent.action)) >= 5


def test_checked_mode_names_rank_step_action_and_space() -> None:
    with pytest.raises(Exception, match="check_actions") as info:
        _collect(bad(), check_actions=True)
    message = str(info.value)
    assert "outside the action space Discrete(2" in message
    assert "env rank 1 at batch step 3 chose action" in message
    action = int(message.split("chose action ")[1].split()[0])
    assert action in (5, 6)


def test_checked_mode_catches_nan_box_actions() -> None:
    sampler = _sampler(NanPendulum(), env="Pendulum-v1", check_actions=True)
    params = bad(rank=2, at=0)
    with pytest.raises(Exception, match=r"env rank 2 at batch step 0 chose action \[nan\]"):
        jax.block_until_ready(jax.jit(sampler.collect)(sampler.init(KEY, params), params))


@pytest.mark.parametrize("reset_mode", ["auto", pytest.param("wait", marks=pytest.mark.slow)])
def test_checked_mode_changes_nothing_for_a_good_agent(reset_mode) -> None:
    plain = _collect(GOOD, reset_mode=reset_mode)
    checked = _collect(GOOD, check_actions=True, reset_mode=reset_mode)
    for x, y in zip(jax.tree.leaves(plain), jax.tree.leaves(checked), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_default_program_has_no_check() -> None:
    """Off, the lowered program has no host callback; on, it has one."""

    def lowered(check_actions: bool) -> str:
        _, init, collect = _compiled(check_actions)
        return collect.lower(jax.eval_shape(init, KEY, bad()), bad()).as_text()

    assert "callback" not in lowered(False)
    assert "callback" in lowered(True)


def test_evaluator_checked_mode() -> None:
    env, params = gymnax.make("CartPole-v1")
    kw = dict(n_envs=3, max_steps=300)
    agent, p = OutOfRange(), bad(rank=2, at=1)
    jax.block_until_ready(js.make_evaluator(env, params, agent, **kw).run(KEY, p))  # silent
    checked = js.make_evaluator(env, params, agent, check_actions=True, **kw)
    with pytest.raises(Exception, match=r"check_actions.*env rank 2 at step 1 chose action"):
        jax.block_until_ready(jax.jit(checked.run)(KEY, p))


def test_check_actions_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="check_actions must be a bool"):
        _sampler(check_actions="yes")
    env, params = gymnax.make("CartPole-v1")
    with pytest.raises(TypeError, match="check_actions must be a bool"):
        js.make_evaluator(env, params, OutOfRange(), n_envs=1, max_steps=4, check_actions=1)

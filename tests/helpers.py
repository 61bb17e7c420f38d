"""What several test files share: the counter agent and its numpy value, and
an env that crashes on demand (:func:`crashing`).

``CounterAgent`` acts randomly (from its key, as RandomAgent does) and carries
an int32 step counter as its recurrent state, starting at ``100 * env_rank``
and +1 per step, so a missed reset or a wrong ``env_rank`` shows in the
batch; its value ``w * sum(observation) + prev_reward + 0.01 * counter`` has
an independent numpy twin, :func:`counter_value`. ``agent_info`` holds the
counter before the step and the value of the inputs.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jaxsample as js


@dataclasses.dataclass(frozen=True)
class CounterAgent:
    """Random actions, a step counter as recurrent state, a known value."""

    action_space: Any

    def initial_state(self, env_rank):
        return jnp.asarray(env_rank, jnp.int32) * 100

    def step(self, params, inputs, state, key):
        action = self.action_space.sample(key)
        info = {"count": state, "value": self.value(params, inputs, state)}
        return js.AgentStep(action=action, agent_info=info), state + 1

    def value(self, params, inputs, state):
        obs_sum = jnp.sum(jnp.asarray(inputs.observation, jnp.float32))
        return params["w"] * obs_sum + inputs.prev_reward + 0.01 * state.astype(jnp.float32)


def counter_value(w, obs, prev_reward, count):
    """CounterAgent's value in numpy (float64): ``obs`` ``[..., n]`` -> ``[...]``."""
    return float(w) * np.sum(np.asarray(obs, np.float64), axis=-1) + prev_reward + 0.01 * count


def counter_params(w: float) -> dict[str, jax.Array]:
    """CounterAgent's parameters."""
    return {"w": jnp.float32(w)}


class Crash:
    """The switch of :func:`crashing`: while ``Crash.on``, wrapped envs raise."""

    on = False


def crashing(env: Any) -> Any:
    """``env`` (a gymnasium env) whose ``step`` raises ``OSError("simulator
    crashed")`` while ``Crash.on``: an env that fails mid-batch."""
    import gymnasium as gym

    class Crashing(gym.Wrapper):
        def step(self, action):
            if Crash.on:
                raise OSError("simulator crashed")
            return self.env.step(action)

    return Crashing(env)

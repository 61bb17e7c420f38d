"""What several test files share: the counter agent and its numpy value, an
env that crashes on demand (:func:`crashing`), and the sampler's documented
key schedule and auto-resetting step (:func:`step_key`, :func:`auto_step`),
and the actor/learner driver tests' check that no driver thread outlives a test
(:func:`no_leftover_driver_threads`, an autouse fixture where imported).

``CounterAgent`` acts randomly (from its key, as RandomAgent does) and carries
an int32 step counter as its recurrent state, starting at ``100 * env_rank``
and +1 per step, so a missed reset or a wrong ``env_rank`` shows in the
batch; its value ``w * sum(observation) + prev_reward + 0.01 * counter`` has
an independent numpy twin, :func:`counter_value`. ``agent_info`` holds the
counter before the step and the value of the inputs.
"""

import dataclasses
import importlib.util
import threading
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry_2x32

import jaxsample as js
from jaxsample import driver as jd


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


EPOCH = 2**30  # steps per key epoch (jaxsample/core/keys.py docstring)
#: The time limit of a subprocess a test runs: only a guard against a hang. A
#: busy 2-core machine (CI beside other jobs, or a second copy of the suite)
#: can make a 30 s subprocess take minutes; no test may fail from that.
HANG_SECONDS = 1800


def step_key(k_run: jax.Array, n: int, stream: int) -> jax.Array:
    """The key of stream ``stream`` (0 agent, 1 env step, 2 reset, 3 episodic
    reset) of an env's step ``n`` (over all batches), as
    jaxsample/core/keys.py's docstring says: Threefry-2x32 of the 64-bit count
    ``(n // EPOCH, 4 (n mod EPOCH) + stream)`` under the env's run key, which
    in the first epoch is ``fold_in(k_run, 4 n + stream)``."""
    count = np.array([n // EPOCH, 4 * (n % EPOCH) + stream], np.uint32)
    return jax.random.wrap_key_data(threefry_2x32(jax.random.key_data(k_run), count))


def auto_step(env: Any, env_params: Any, k_run: jax.Array, n: int, state: Any, action: Any):
    """Step ``n`` of one env as the schedule says, with the env's own functions:
    ``env.step_env`` with the step key, ``env.is_truncated``, and where the
    step ends the episode ``env.reset_env`` with the reset key. Returns gymnax's
    ``(obs, state, reward, terminated, truncated, info)`` with
    ``info["final_observation"]``."""
    obs, state, reward, terminated, info = env.step_env(
        step_key(k_run, n, 1), state, action, env_params
    )
    truncated = env.is_truncated(state, env_params)
    info = {**info, "terminated": terminated, "truncated": truncated, "final_observation": obs}
    if bool(terminated) or bool(truncated):
        obs, state = env.reset_env(step_key(k_run, n, 2), env_params)
    return obs, state, reward, terminated, truncated, info


def build_wheel(tmp_path: Any) -> Any:
    """The jaxsample wheel (``pip wheel --no-deps``), built from a copy of the
    checkout in ``tmp_path`` so that the build leaves nothing in it; its path."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(root / "jaxsample", src / "jaxsample", ignore=ignore)
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-w", str(tmp_path / "dist"), str(src)], check=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("jaxsample-*.whl")
    return wheel


def concat(batches, get):
    """``get(batch)`` of consecutive batches joined along T (one stream)."""
    return np.concatenate([np.asarray(get(b)) for b in batches], axis=0)


def assert_close(name, actual, expected, dtype=None) -> None:
    """``actual`` equals ``expected`` (same shape; ``dtype`` when given; floats
    to 1e-5), the message naming ``name``."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != {expected.shape}"
    if dtype is not None:
        assert actual.dtype == np.dtype(dtype), f"{name}: dtype {actual.dtype} != {dtype}"
    if np.issubdtype(actual.dtype, np.floating):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5, err_msg=name)
    else:
        np.testing.assert_array_equal(actual, expected.astype(actual.dtype), err_msg=name)


def load_tool(name: str) -> Any:
    """The module ``tools/<name>.py`` (the repository's scripts, not a package)."""
    path = Path(__file__).resolve().parent.parent / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def driver_threads() -> list[threading.Thread]:
    """The actor/learner driver's threads still alive."""
    return [t for t in threading.enumerate() if t.name.startswith(jd.THREAD_PREFIX)]


@pytest.fixture(autouse=True)
def no_leftover_driver_threads():
    """Fails a test that leaves a driver thread running (autouse where imported)."""
    yield
    assert driver_threads() == [], "driver threads left running"

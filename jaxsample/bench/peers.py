"""The host peers of the grid: gymnasium's synchronous vector env and envpool.

They run on the host CPU whatever the JAX backend, step with uniformly random
actions drawn by numpy and write the same four ``[T, B]`` arrays as the floor
([`bare_rollout`][jaxsample.bench.bare_rollout]: observation, action, reward,
done) into preallocated numpy buffers. They exist for the classic-control envs
of `PEER_ENVS` only.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxsample.bench.measure import Program

#: gymnax env name -> the peers' id of the same environment.
PEER_ENVS = {"CartPole-v1": "CartPole-v1"}


def _gymnasium_maker(module: Any, env_id: str, B: int, seed: int) -> Callable:
    def make() -> tuple[Any, np.ndarray, int]:
        kwargs: dict[str, Any] = {}
        mode = getattr(getattr(module, "vector", None), "AutoresetMode", None)
        if mode is not None:  # gymnasium >= 1.1: reset in the same step, as gymnax
            kwargs["vector_kwargs"] = {"autoreset_mode": mode.SAME_STEP}
        env = module.make_vec(env_id, num_envs=B, vectorization_mode="sync", **kwargs)
        obs, _ = env.reset(seed=seed)
        return env, obs, int(env.single_action_space.n)

    return make


def _envpool_maker(module: Any, env_id: str, B: int, seed: int) -> Callable:
    def make() -> tuple[Any, np.ndarray, int]:
        env = module.make(env_id, env_type="gymnasium", num_envs=B, seed=seed)
        obs, _ = env.reset()
        return env, obs, int(env.action_space.n)

    return make


#: method name -> ``maker(module, env_id, B, seed) -> make()``.
PEER_MAKERS = {"gymnasium": _gymnasium_maker, "envpool": _envpool_maker}


def host_program(make: Callable, T: int, B: int, seed: int) -> Program:
    """A host vector env stepping ``T`` random actions per call into numpy buffers."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # the peers warn about dtypes and spaces
        warnings.simplefilter("ignore")
        env, obs, n_actions = make()
    compile_s = time.perf_counter() - t0
    obs = np.asarray(obs)
    if obs.shape[0] != B:
        raise ValueError(f"the peer returned {obs.shape[0]} observations for B={B}")
    rng = np.random.default_rng(seed)
    buffers = {
        "observation": np.zeros((T, *obs.shape), obs.dtype),
        "action": np.zeros((T, B), np.int32),
        "reward": np.zeros((T, B), np.float32),
        "done": np.zeros((T, B), bool),
    }
    current = [obs]

    def call() -> None:
        o = current[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for t in range(T):
                a = rng.integers(0, n_actions, size=B, dtype=np.int32)
                buffers["observation"][t] = o
                buffers["action"][t] = a
                o, r, term, trunc, _ = env.step(a)
                buffers["reward"][t] = r
                np.logical_or(term, trunc, out=buffers["done"][t])
        current[0] = o

    def close() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            getattr(env, "close", lambda: None)()

    output_bytes = sum(b.nbytes for b in buffers.values())
    return Program(call, compile_s, None, output_bytes, True, close, buffers)

"""Benchmark of the host sampler: ``python -m jaxsample.bench.host``.

The same agent (PPO's 64x64 tanh actor-critic, `CategoricalActorCritic`,
one set of parameters) collects ``T`` steps of ``B`` CartPole-v1 envs with:

* ``host:<env>`` — [`jaxsample.host.make_host_sampler`][jaxsample.host.make_host_sampler] over a
  host vector
  env (a full [`Batch`][jaxsample.types.Batch]: TrajInfo, prev_action/prev_reward,
  final observations, agent_info);
* ``loop:<env>`` — a plain Python loop over the same kind of vector env with
  the same jitted policy: per step one jitted call (the vmapped ``agent.step``),
  the actions to the host, ``env.step``, the observation, action, reward,
  terminated and truncated written into preallocated numpy buffers and the
  ``agent_info`` kept on the device; at the end one transfer and one stack. It
  does none of the sampler's bookkeeping (and with a NextStep env records the
  reset steps as if they were transitions);
* ``bridge:<env>`` — a jitted ``lax.scan`` of ``T`` steps that drives the env
  through [`jaxsample.host.make_bridge`][jaxsample.host.make_bridge] (one ordered ``io_callback``
  per
  step) and stores the loop's arrays;
* ``jax:gymnax`` — [`jaxsample.make_sampler`][jaxsample.sampler.make_sampler] on gymnax's
  CartPole-v1 (one
  compiled program per batch).

``<env>`` is ``samestep`` / ``nextstep`` (gymnasium ``SyncVectorEnv`` in that
autoreset mode) or ``envpool`` (when installed). All methods run in one
process; after a warm-up (compilation) every repetition times ``calls``
batches of each method, the methods interleaved and their order reversed on
every other repetition (`interleave`), and the
median over repetitions is reported as env steps per second with the ratios
``host / loop`` per env and ``jax / host:samestep``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnax
import jax
import jax.numpy as jnp
import numpy as np

import jaxsample as js
from jaxsample import host
from jaxsample.bench.measure import interleave, time_once
from jaxsample.bench.report import write_json


@dataclasses.dataclass
class Method:
    """One way of collecting a batch: ``run()`` collects one, blocks, and
    returns how many of its ``T x B`` env steps are transitions (a plain loop
    over a NextStep env also records the env's reset steps, whose action is
    ignored and whose reward is 0)."""

    name: str
    run: Callable[[], Any]
    close: Callable[[], None] = lambda: None


def _envpool_available() -> bool:
    try:
        host.require_envpool()
    except ImportError:
        return False
    return True


def _vec_env(kind: str, B: int, seeds: list[int]) -> Any:
    """A fresh vector env of ``B`` CartPole-v1 envs (``seeds`` for envpool)."""
    if kind == "envpool":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # envpool's float64 Box bounds
            return host.envpool_factory("CartPole-v1")(seeds)
    mode = {"samestep": "SameStep", "nextstep": "NextStep"}[kind]
    return host.gymnasium_factory("CartPole-v1", autoreset_mode=mode)(seeds)


def _host_method(kind, agent, params, B, T, key) -> Method:
    factory = functools.partial(_vec_env, kind, B)
    sampler = host.make_host_sampler(factory, agent, js.BatchSpec(T, B), agent_params=params)
    box = {"state": sampler.init(key, params)}

    def run():
        box["state"], batch = sampler.collect(box["state"], params)
        jax.block_until_ready(batch)
        return B * T

    return Method(f"host:{kind}", run, lambda: box["state"].env.close())


def _act(agent, params, obs, keys, t):
    """The vmapped ``agent.step`` at step ``t`` (keys as the sampler's), no
    previous action or reward."""
    k = jax.vmap(lambda key: jax.random.fold_in(key, 3 * t))(keys)
    prev_action = jnp.zeros(obs.shape[:1], jnp.int32)
    inputs = js.AgentInputs(obs, prev_action, jnp.zeros(obs.shape[:1], jnp.float32))
    return jax.vmap(agent.step, in_axes=(None, 0, None, 0))(params, inputs, (), k)[0]


def _policy(agent):
    """The jitted `_act` of a plain loop: ``(action, agent_info)``."""

    @jax.jit
    def policy(params, obs, keys, t):
        step = _act(agent, params, obs, keys, t)
        return step.action, step.agent_info

    return policy


def _loop_method(kind, agent, params, B, T, key) -> Method:
    seeds = host.env_seeds(key, range(B))
    env = _vec_env(kind, B, seeds)
    policy = _policy(agent)
    keys = jax.random.split(key, B)
    box = {
        "obs": env.reset(seed=None if kind == "envpool" else seeds)[0],
        "n": 0,
        "done": np.zeros((B,), bool),
    }

    def run():
        obs_buf = np.zeros((T, B, 4), np.float32)
        act_buf = np.zeros((T, B), np.int32)
        rew_buf = np.zeros((T, B), np.float32)
        term_buf = np.zeros((T, B), bool)
        trunc_buf = np.zeros((T, B), bool)
        infos = []
        obs = box["obs"]
        for t in range(T):
            action, info = policy(params, obs, keys, np.uint32(box["n"] + t))
            action = np.asarray(action)
            infos.append(info)
            obs_buf[t] = obs
            act_buf[t] = action
            obs, rew_buf[t], term_buf[t], trunc_buf[t], _ = env.step(action)
        box["obs"], box["n"] = obs, box["n"] + T
        batch = jax.device_put((obs_buf, act_buf, rew_buf, term_buf, trunc_buf))
        info = jax.tree.map(lambda *x: jnp.stack(x), *infos)
        jax.block_until_ready((batch, info))
        if kind == "samestep":
            return B * T
        done = term_buf | trunc_buf  # NextStep: the step after a done one is a reset
        resets = int(box["done"].sum()) + int(done[:-1].sum())
        box["done"] = done[-1]
        return B * T - resets

    return Method(f"loop:{kind}", run, env.close)


def _bridge_method(kind, agent, params, B, T, key) -> Method:
    bridge = host.make_bridge(functools.partial(_vec_env, kind, B), B)
    keys = jax.random.split(key, B)

    @jax.jit
    def rollout(params, obs, t0):
        def body(obs, t):
            step = _act(agent, params, obs, keys, t)
            out = bridge.step(step.action)
            return out.observation, (obs, step.action, out.reward, out.terminated, out.truncated)

        return jax.lax.scan(body, obs, t0 + jnp.arange(T, dtype=jnp.uint32))

    box = {"obs": jax.jit(bridge.reset)(key), "n": 0}

    def run():
        box["obs"], out = rollout(params, box["obs"], np.uint32(box["n"]))
        box["n"] += T
        jax.block_until_ready(out)
        return B * T

    return Method(f"bridge:{kind}", run, lambda: bridge.env.close())


def _jax_method(agent, params, B, T, key) -> Method:
    env, env_params = gymnax.make("CartPole-v1")
    sampler = js.make_sampler(env, env_params, agent, js.BatchSpec(T, B), agent_params=params)
    collect = jax.jit(sampler.collect, donate_argnums=0)
    box = {"state": jax.jit(sampler.init)(key, params)}

    def run():
        box["state"], batch = collect(box["state"], params)
        jax.block_until_ready(batch)
        return B * T

    return Method("jax:gymnax", run)


def run_benchmark(
    B: int = 16,
    T: int = 128,
    reps: int = 7,
    calls: int = 2,
    envs: Sequence[str] = ("samestep", "nextstep", "envpool"),
    bridge: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Measure every method; returns a JSON-ready dict (see the module doc)."""
    envs = [e for e in envs if e != "envpool" or _envpool_available()]
    key = jax.random.key(seed)
    space = gymnax.environments.spaces.Discrete(2)
    agent = js.agents.CategoricalActorCritic(space)
    params = agent.init(jax.random.key(1), jnp.zeros((4,), jnp.float32))
    methods: list[Method] = []
    for kind in envs:
        methods.append(_host_method(kind, agent, params, B, T, key))
        methods.append(_loop_method(kind, agent, params, B, T, key))
    if bridge and "samestep" in envs:
        methods.append(_bridge_method("samestep", agent, params, B, T, key))
    methods.append(_jax_method(agent, params, B, T, key))
    compile_s = {}
    for m in methods:  # warm-up: compile, first env steps
        compile_s[m.name] = time_once(m.run)[1]
        m.run()
    counts: dict[str, list[int]] = {m.name: [] for m in methods}  # transitions per call

    def counted(m: Method) -> Callable[[], None]:
        return lambda: counts[m.name].append(m.run())

    times = interleave({m.name: counted(m) for m in methods}, reps=reps, calls=calls)
    kept = {
        name: [sum(c[i * calls : (i + 1) * calls]) / calls for i in range(reps)]
        for name, c in counts.items()
    }
    for m in methods:
        m.close()
    steps = B * T
    rate = {n: [k / t for k, t in zip(kept[n], ts, strict=True)] for n, ts in times.items()}
    results = {
        name: {
            "steps_per_s": steps / statistics.median(ts),
            "steps_per_s_q1_q3": [steps / np.quantile(ts, 0.75), steps / np.quantile(ts, 0.25)],
            "transitions_per_s": statistics.median(rate[name]),
            "first_call_s": compile_s[name],
        }
        for name, ts in times.items()
    }

    def ratio(a: str, b: str) -> float:
        """Median over repetitions of the paired transitions/s ratio a / b."""
        return statistics.median(x / y for x, y in zip(rate[a], rate[b], strict=True))

    ratios = {f"host:{k} / loop:{k}": ratio(f"host:{k}", f"loop:{k}") for k in envs}
    if "samestep" in envs:
        for name in ("jax:gymnax", "bridge:samestep"):
            if name in times:
                ratios[f"{name} / host:samestep"] = ratio(name, "host:samestep")
    return {
        "B": B,
        "T": T,
        "reps": reps,
        "calls": calls,
        "backend": jax.default_backend(),
        "results": results,
        "ratios": ratios,
        "note": "ratios: transitions/s of the first over the second (higher: the first "
        "is faster), medians of the per-repetition ratios",
    }


def format_result(result: dict[str, Any]) -> str:
    """A plain-text table of `run_benchmark`'s result."""
    lines = [
        f"CartPole-v1, B={result['B']}, T={result['T']}, backend={result['backend']}, "
        f"{result['reps']} interleaved reps x {result['calls']} calls, medians",
        f"{'method':<18} {'steps/s':>12} {'q1..q3':>22} {'transitions/s':>14} {'first call s':>13}",
    ]
    for name, r in result["results"].items():
        lo, hi = r["steps_per_s_q1_q3"]
        lines.append(
            f"{name:<18} {r['steps_per_s']:>12,.0f} {lo:>10,.0f}..{hi:<10,.0f} "
            f"{r['transitions_per_s']:>14,.0f} {r['first_call_s']:>13.2f}"
        )
    lines.append("transitions/s ratios (paired, median):")
    lines += [f"  {k}: {v:.2f}" for k, v in result["ratios"].items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--B", type=int, nargs="+", default=[16], help="numbers of envs")
    parser.add_argument("--T", type=int, default=128, help="steps per batch")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2, help="batches per repetition")
    parser.add_argument(
        "--envs", nargs="+", default=["samestep", "nextstep", "envpool"], help="host envs"
    )
    parser.add_argument("--no-bridge", action="store_true", help="skip the bridge")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    out = []
    for B in args.B:
        result = run_benchmark(
            B=B,
            T=args.T,
            reps=args.reps,
            calls=args.calls,
            envs=args.envs,
            bridge=not args.no_bridge,
        )
        print(format_result(result), flush=True)
        out.append(result)
    if args.json:
        write_json(out, args.json)


if __name__ == "__main__":
    main()

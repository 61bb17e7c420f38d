"""Run one collection (or a few PPO iterations) on a mesh over all devices and save it.

Used by ``tests/test_distributed.py`` in subprocesses, with a device count set by
``XLA_FLAGS`` or several processes joined by ``jax.distributed``:

    python tests/distributed_worker.py --job sampler --mode auto --out x.npz
    python tests/distributed_worker.py --job sampler --process-id 0 --num-processes 2 \\
        --port 12345 --local-devices 2 --out p0.npz

The test imports :func:`sampler_batches` and :func:`ppo_params` to compute the
one-device reference in its own process, so both sides run the same code.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

B, T, BATCHES = 16, 48, 2
TIME_LIMIT = 20  # several truncations per env per batch: exercises the sparse final obs


def make_sampler(mode: str, agent_kind: str, mesh: Any, B: int = B) -> tuple[Any, Any]:
    """A CartPole sampler of ``B`` envs (on ``mesh``, or one device when None)
    and its agent's parameters (None for the random agent)."""
    import gymnax
    import jax

    import jaxsample as js

    env, params = gymnax.make("CartPole-v1")
    params = params.replace(max_steps_in_episode=TIME_LIMIT)
    options: dict[str, Any] = {}
    if agent_kind == "pgx":  # legal-action masks, turns and per-player fields
        from jaxsample.envs import suites

        env, params = suites.make_pgx("tic_tac_toe", episode_length=5), suites.NoParams()
        options["traj_fields"] = suites.player_returns()
    space = env.action_space(params)
    if agent_kind == "recurrent":
        agent = js.agents.RecurrentActorCritic(space, hidden_size=8)
        obs = jax.numpy.zeros(env.observation_space(params).shape)
        # jitted: eagerly, each op of the initializers would compile on its own
        agent_params = jax.jit(agent.init)(jax.random.key(7), obs)
    else:
        agent, agent_params = js.agents.RandomAgent(space), None
    sampler = js.make_sampler(
        env,
        params,
        agent,
        js.BatchSpec(T=T, B=B),
        max_decorrelation_steps=0 if mode == "episodic" else 10,
        reset_mode=mode,
        bootstrap_value=agent_kind == "recurrent",
        agent_params=agent_params,
        mesh=mesh,
        **options,
    )
    return sampler, agent_params


def jitted(sampler: Any) -> tuple[Any, Any]:
    """``sampler``'s ``init`` and ``collect`` (donating the state), jitted as
    every job here compiles them (a test that jits the same ones with the same
    options hits the compilation cache)."""
    import jax

    init = jax.jit(sampler.init)
    return init, jax.jit(sampler.collect, donate_argnums=0)


def sampler_batches(mode: str, agent_kind: str, mesh: Any, B: int = B) -> dict[str, Any]:
    """Two consecutive batches and the final state of :func:`make_sampler`'s
    sampler, as a flat dict of arrays."""
    import jax

    sampler, agent_params = make_sampler(mode, agent_kind, mesh, B)
    init, collect = jitted(sampler)
    state = init(jax.random.key(11), agent_params)
    out: dict[str, Any] = {}
    for i in range(BATCHES):
        state, batch = collect(state, agent_params)
        env = batch.samples.env
        env = env.replace(final_store=env.final_observation, final_mask_store=env.final_action_mask)
        batch = batch.replace(samples=batch.samples.replace(env=env))
        out.update(_flat(f"batch{i}", batch))
    out.update(_flat("state", state.replace(key=jax.random.key_data(state.key))))
    return out


def ppo_params(mesh: Any, recurrent: bool = False) -> dict[str, Any]:
    """The parameters after 2 PPO iterations on ``mesh`` (16 envs x 16 steps)."""
    import jax

    from jaxsample.algos import ppo

    config = ppo.PPOConfig(
        num_envs=16,
        num_steps=16,
        total_timesteps=16 * 16 * 2,
        num_minibatches=2,
        recurrent=recurrent,
        rnn_hidden_size=8,
    )
    trainer = ppo.make_train(config, mesh=mesh)
    state, metrics = jax.jit(trainer.train)(jax.random.key(5))
    return {**_flat("params", state.params), **_flat("metrics", metrics)}


def _flat(prefix: str, tree: Any) -> dict[str, Any]:
    import jax

    from jaxsample.distributed import process_local

    leaves = jax.tree_util.tree_leaves_with_path(process_local(tree))
    return {prefix + jax.tree_util.keystr(path): leaf for path, leaf in leaves}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--job", choices=("sampler", "ppo", "disagree"), required=True)
    p.add_argument("--mode", default="auto")
    p.add_argument("--agent", default="random")
    p.add_argument("--out", required=True)
    p.add_argument("--process-id", type=int, default=0)
    p.add_argument("--num-processes", type=int, default=1)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--local-devices", type=int, default=1)
    args = p.parse_args()
    # The test session's XLA flags (tests/conftest.py), this worker's device count.
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={args.local_devices}"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import numpy as np

    jax.config.update("jax_numpy_rank_promotion", "raise")
    if args.num_processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            f"127.0.0.1:{args.port}",
            num_processes=args.num_processes,
            process_id=args.process_id,
            initialization_timeout=60,
        )
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("envs",))
    if args.job == "sampler":
        out = sampler_batches(args.mode, args.agent, mesh)
    elif args.job == "ppo":
        out = ppo_params(mesh)
    else:  # every process but 0 asks for 4 more envs
        try:
            sampler_batches("auto", "random", mesh, B=B + 4 * (jax.process_index() > 0))
        except ValueError as e:
            out = {"error": np.array(str(e))}
        else:
            out = {"error": np.array("")}
    np.savez(args.out, **out)
    if args.num_processes > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    sys.exit(main())

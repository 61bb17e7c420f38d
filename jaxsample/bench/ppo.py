"""PPO with jaxsample against the same PPO with a hand-written rollout.

The inline trainer replaces exactly one thing in
[`jaxsample.algos.ppo.PPO`][jaxsample.algos.ppo.PPO]:
the collection. Its rollout is what one writes by hand without jaxsample, a
``lax.scan`` over ``vmap(env.step)`` with the agent's forward pass, keeping
gymnax's ``info["final_observation"]`` densely so that truncations can be
bootstrapped too; GAE, the minibatches, the loss and the optimizer are the
trainer's own. Both run in one process, interleaved
(`interleave`), compiled separately, the
compile split into tracing, lowering and XLA's compile and each program's
size (jaxpr equations, HLO fusions) reported beside it (`format_overhead`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

import jaxsample as js
from jaxsample._checks import check_int
from jaxsample.algos import ppo
from jaxsample.algos.returns import gae
from jaxsample.bench.measure import Part, compare_programs
from jaxsample.bench.report import format_programs
from jaxsample.runs import loop

#: The two programs, in the order they are reported.
PROGRAMS = ("jaxsample", "inline")


class _InlineState(struct.PyTreeNode):
    """The hand-written rollout's carry; leaves ``[B, ...]``."""

    env_state: Any
    obs: Any
    key: jax.Array
    ep_return: jax.Array
    ep_length: jax.Array


class InlinePPO:
    """``ppo.PPO`` with its sampler swapped for a hand-written rollout
    (feedforward agents only)."""

    def __init__(self, trainer: ppo.PPO) -> None:
        if trainer.config.recurrent:
            raise ValueError("the inline comparison covers the feedforward PPO only")
        self.t = trainer

    def init(self, key: jax.Array) -> tuple[ppo.TrainState, _InlineState]:
        state = self.t.init(key)
        B = self.t.config.num_envs
        k_reset, k_run = jax.random.split(jax.random.fold_in(key, 1))
        obs, env_state = jax.vmap(self.t.env.reset, in_axes=(0, None))(
            jax.random.split(k_reset, B), self.t.env_params
        )
        inline = _InlineState(
            env_state=env_state,
            obs=obs,
            key=k_run,
            ep_return=jnp.zeros((B,), jnp.float32),
            ep_length=jnp.zeros((B,), jnp.int32),
        )
        return state.replace(sampler_state=()), inline

    def _collect(self, params: Any, s: _InlineState):
        agent, env, env_params = self.t.agent, self.t.env, self.t.env_params
        T, B = self.t.config.num_steps, self.t.config.num_envs
        null = jnp.zeros((), jnp.float32)
        per_env = js.AgentInputs(0, None, None)  # feedforward: no prev action/reward

        def body(s: _InlineState, _):
            key, k_act, k_env = jax.random.split(s.key, 3)
            inputs = js.AgentInputs(s.obs, null, null)
            step, _ = jax.vmap(agent.step, in_axes=(None, per_env, None, 0))(
                params, inputs, (), jax.random.split(k_act, B)
            )
            obs, env_state, reward, terminated, truncated, info = jax.vmap(
                env.step, in_axes=(0, 0, 0, None)
            )(jax.random.split(k_env, B), s.env_state, step.action, env_params)
            done = terminated | truncated
            ep_return = s.ep_return + reward
            ep_length = s.ep_length + 1
            out = (
                s.obs,
                step.action,
                step.agent_info.log_prob,
                step.agent_info.value,
                reward,
                terminated,
                truncated,
                info["final_observation"],
                jnp.where(done, ep_return, 0.0),
                done,
            )
            new = _InlineState(
                env_state=env_state,
                obs=obs,
                key=key,
                ep_return=jnp.where(done, 0.0, ep_return),
                ep_length=jnp.where(done, 0, ep_length),
            )
            return new, out

        s, out = jax.lax.scan(body, s, None, T)
        obs, action, log_prob, value, reward, term, trunc, final_obs, ended_return, done = out
        inputs = js.AgentInputs(s.obs, null, null)
        value_of = jax.vmap(agent.value, in_axes=(None, per_env, None))
        bootstrap = value_of(params, inputs, ())
        final_inputs = js.AgentInputs(final_obs, null, null)
        final_value = jax.vmap(value_of, in_axes=(None, per_env, None))(params, final_inputs, ())
        c = self.t.config
        advantage, target = gae(
            reward, value, final_value, bootstrap, term, trunc, gamma=c.gamma, lam=c.gae_lambda
        )
        rollout = ppo.Rollout(
            inputs=js.AgentInputs(obs, jnp.zeros_like(action), jnp.zeros_like(reward)),
            action=action,
            log_prob=log_prob,
            value=value,
            advantage=advantage,
            target=target,
            reset=jnp.zeros_like(done),
            initial_state=(),
        )
        n_done = jnp.sum(done)
        mean_return = jnp.where(n_done > 0, jnp.sum(ended_return) / jnp.maximum(n_done, 1), jnp.nan)
        return s, rollout, mean_return

    def iteration(self, carry):
        state, inline = carry
        c = self.t.config
        inline, rollout, mean_return = self._collect(state.params, inline)
        frac = 1.0 - state.iteration.astype(jnp.float32) / self.t.num_iterations
        lr = state.hparams.lr * (jnp.maximum(frac, 0.0) if c.anneal_lr else 1.0)
        key, k_epochs = jax.random.split(state.key)

        def epoch(carry, k_epoch):
            minibatches = self.t.minibatches(rollout, k_epoch, c.num_minibatches, self.t.shard)
            return jax.lax.scan(self.t.update, carry, minibatches)

        (params, opt_state, _, _), _ = jax.lax.scan(
            epoch,
            (state.params, state.opt_state, state.hparams, lr),
            jax.random.split(k_epochs, c.update_epochs),
        )
        state = state.replace(
            params=params, opt_state=opt_state, key=key, iteration=state.iteration + 1
        )
        return (state, inline), mean_return

    def train(self, key: jax.Array):
        carry = self.init(key)
        return jax.lax.scan(lambda c, _: self.iteration(c), carry, None, self.t.num_iterations)


def ppo_overhead(
    *,
    seeds: int = 1,
    total_timesteps: int = 100_000,
    reps: int = 3,
    compile_reps: int = 1,
    config: ppo.PPOConfig | None = None,
) -> dict[str, Any]:
    """Wall time of a whole PPO run, jaxsample vs inline, vmapped over ``seeds``.

    Both programs (``jit(vmap(train))``, `PROGRAMS`) are compiled from
    scratch ``compile_reps`` times, interleaved, after an uncounted warm-up
    round, tracing, lowering and XLA's compile timed apart, then run ``reps``
    times, interleaved (`compare_programs`).

    Args:
      seeds: runs under one ``vmap``.
      total_timesteps: environment steps per run (with the default config).
      reps: interleaved timed runs of each program.
      compile_reps: interleaved from-scratch compiles of each program.
      config: the PPO settings (default: ``PPOConfig(total_timesteps=...)``).

    Returns:
      ``{"env", "seeds", "total_timesteps", "reps", "compile_reps",
      "compile_s": {program: {"trace", "lower", "compile", "total", "all"}},
      "size": {program: {"jaxpr_eqns", "hlo_fusions"}}
      (`program_size`),
      "run_s": {program: {"median", "all"}}, "ratio", "compile_ratio",
      "final_return": {program: [seeds]}}``: ``ratio`` is jaxsample's run
      time over inline's (lower is better; the target is <= 1.05),
      ``compile_ratio`` the same of the total compile times; the final
      returns (`runs.loop.final_returns`: the mean of the last 10 iterations
      that ended an episode) are a check that both train alike.
    """
    check_int("seeds", seeds, 1)
    if config is None:
        check_int("total_timesteps", total_timesteps, 1)
        config = ppo.PPOConfig(total_timesteps=total_timesteps)
    elif not isinstance(config, ppo.PPOConfig):
        raise TypeError(f"config must be a PPOConfig, got {type(config).__name__}")
    keys = jax.vmap(jax.random.key)(jnp.arange(seeds, dtype=jnp.uint32))

    def build() -> dict[str, tuple[list[Part], tuple]]:
        return {name: ([Part(fn, {})], (keys,)) for name, fn in _programs(config).items()}

    out = compare_programs(build, reps=reps, compile_reps=compile_reps)
    compile_s, run_s = out["compile_s"], out["run_s"]
    return {
        "env": config.env_name,
        "seeds": seeds,
        "total_timesteps": config.total_timesteps,
        "reps": reps,
        "compile_reps": compile_reps,
        "compile_s": compile_s,
        "size": out["size"],
        "run_s": run_s,
        "ratio": run_s["jaxsample"]["median"] / run_s["inline"]["median"],
        "compile_ratio": compile_s["jaxsample"]["total"] / compile_s["inline"]["total"],
        "final_return": {k: loop.final_returns(v).tolist() for k, v in out["outputs"].items()},
    }


def _programs(config: ppo.PPOConfig) -> dict[str, Any]:
    """Fresh jitted programs (a new trainer, new closures: nothing cached):
    every iteration's mean return of each run ``[R, I]``."""
    trainer = ppo.make_train(config)
    inline = InlinePPO(trainer)
    return {
        "jaxsample": jax.jit(jax.vmap(lambda k: trainer.train(k)[1]["episode_return_mean"])),
        "inline": jax.jit(jax.vmap(lambda k: inline.train(k)[1])),
    }


def format_overhead(result: dict[str, Any]) -> str:
    """`ppo_overhead`'s result as a small text table."""
    ratios = {"jaxsample/inline": {"run": result["ratio"], "compile": result["compile_ratio"]}}
    return format_programs(
        f"PPO with jaxsample vs a hand-written rollout ({result['env']}, "
        f"{result['total_timesteps']:,} steps, {result['seeds']} seed(s) under one vmap; "
        f"medians of {result['compile_reps']} fresh compile(s) and {result['reps']} runs, "
        "interleaved):",
        {**result, "ratios": ratios},
        width=11,
    )

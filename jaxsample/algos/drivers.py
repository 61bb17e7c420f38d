"""Actor/learner adapters for the reference trainers ([`jaxsample.driver`][jaxsample.driver]'s
runtime).

* [`ppo_driver`][jaxsample.algos.drivers.ppo_driver]: on-policy PPO on one-step-stale batches, each
  refreshed
  under the learner's parameters first
  ([`refresh_behaviour`][jaxsample.algos.drivers.refresh_behaviour]; no
  V-trace);
* [`dqn_driver`][jaxsample.algos.drivers.dqn_driver]: off-policy DQN, batches added to the replay
  buffer on the
  learner, the replay ratio held exactly, epsilon following the batch index.

Both build a [`Driver`][jaxsample.driver.Driver] with [`make_driver`][jaxsample.driver.make_driver]
and an ``init(key, num_actors)`` from the trainer. ``Driver`` and
``DriverResult`` (what ``Driver.train`` returns) are re-exported here.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxsample._checks import check_int
from jaxsample.algos.returns import final_values
from jaxsample.driver import Driver, DriverResult, make_driver
from jaxsample.types import PyTree

__all__ = [
    "ACTOR_KEY_TAG",
    "Driver",
    "DriverResult",
    "dqn_driver",
    "ppo_driver",
    "refresh_behaviour",
]


# Extra actors' sampler keys are fold_in(fold_in(key, ACTOR_KEY_TAG), a): not
# fold_in(key, a), which equals split(key, n)[a] under JAX's partitionable
# threefry, i.e. the very key trainer.init gives its own sampler.
ACTOR_KEY_TAG = 0x61637472  # "actr"


def _actor_states(trainer: Any, key: jax.Array, first: PyTree, params: PyTree, n: int) -> list:
    """Actor 0 continues the trainer's own sampler state; actor ``a > 0`` starts
    the same envs (same ranks) from ``fold_in(fold_in(key, ACTOR_KEY_TAG), a)``."""
    base = jax.random.fold_in(key, ACTOR_KEY_TAG)
    states = [first]
    for a in range(1, n):
        states.append(trainer.sampler.init(jax.random.fold_in(base, a), params))
    return states


def _trainer_driver(
    trainer: Any,
    collect: Any,
    learn: Any,
    *,
    steps_per_batch: int,
    num_batches: int,
    driver_kwargs: dict[str, Any],
) -> Driver:
    """[`make_driver`][jaxsample.driver.make_driver] for a trainer: publish ``state.params``, start
    from
    ``trainer.init(key)`` (`_actor_states`), ``max_staleness`` defaulting to
    ``sync_every`` (one publication stale)."""

    def init(key: jax.Array, num_actors: int) -> tuple[PyTree, list[PyTree]]:
        state = trainer.init(key)
        actors = _actor_states(trainer, key, state.sampler_state, state.params, num_actors)
        return state, actors

    kwargs = {"max_staleness": driver_kwargs.get("sync_every", 1), **driver_kwargs}
    return make_driver(
        collect,
        learn,
        lambda state: state.params,
        steps_per_batch=steps_per_batch,
        init=init,
        default_num_batches=num_batches,
        **kwargs,
    )


def refresh_behaviour(trainer: Any, params: PyTree, batch: Any) -> Any:
    """``batch`` with its log-probabilities, values and bootstrap values
    re-evaluated under ``params`` (a ``ppo.PPO`` trainer's agent; leaves ``[T, B]``).

    ``agent_info.log_prob`` and ``agent_info.value`` become those of the
    batch's actions and inputs under ``params`` (``agent.evaluate``, or
    ``agent.evaluate_sequence`` from ``samples.agent.initial_state`` with the
    sampler's resets for a recurrent agent), and ``samples.bootstrap_value``
    becomes ``final_values(...)[T - 1]`` ([`jaxsample.algos.returns`][jaxsample.algos.returns]), the
    value under ``params`` of the inputs after the last step (what GAE reads
    there when that step is not done). ``dist_params`` is left as collected (PPO does not read it).
    """
    samples = batch.samples
    env, ag = samples.env, samples.agent
    inputs = samples.agent_inputs
    if trainer.config.recurrent:
        reset = jnp.concatenate([jnp.zeros_like(env.done[:1]), env.done[:-1]], axis=0)
        evaluate = jax.vmap(trainer.agent.evaluate_sequence, in_axes=(None, 1, 0, 1, 1), out_axes=1)
        log_prob, _, value = evaluate(params, inputs, ag.initial_state, reset, ag.action)
    else:
        step = jax.vmap(trainer.agent.evaluate, in_axes=(None, 0, 0))
        log_prob, _, value = jax.vmap(step, in_axes=(None, 0, 0))(params, inputs, ag.action)
    info = ag.agent_info._replace(
        log_prob=log_prob.astype(ag.agent_info.log_prob.dtype),
        value=value.astype(ag.agent_info.value.dtype),
    )
    bootstrap = final_values(trainer.agent, params, samples)[-1]
    samples = samples.replace(
        agent=ag.replace(agent_info=info),
        bootstrap_value=bootstrap.astype(samples.bootstrap_value.dtype),
    )
    return batch.replace(samples=samples)


def ppo_driver(trainer: Any, *, refresh: bool = True, **driver_kwargs: Any) -> Driver:
    """A [`Driver`][jaxsample.driver.Driver] for a ``ppo.PPO`` trainer
    ([`make_train`][jaxsample.algos.ppo.make_train]).

    On-policy with bounded staleness (IMPALA's setting, with PPO's clip in
    place of V-trace): the learner runs ``trainer.learn`` (GAE,
    ``update_epochs`` x ``num_minibatches`` clipped-PPO steps) on each batch.
    With ``refresh`` (default) it first re-evaluates the batch's
    log-probabilities, values and bootstrap values under its current
    parameters ([`refresh_behaviour`][jaxsample.algos.drivers.refresh_behaviour]): PPO's ratio and
        value clip are
    then taken around the policy being trained (decoupled PPO's proximal
    policy, without its behaviour importance weight) and GAE uses one critic.
    Without ``refresh`` the ratio is against the behaviour policy the batch
    was collected with and GAE mixes the behaviour critic's values with the
    learner's; on one-step-stale CartPole batches that ended at a mean return
    of 440 over 8 seeds against 500 with ``refresh`` (and 500 synchronously).
    With staleness 0 the refreshed values equal the collected ones up to float
    rounding; ``refresh=False, mode="sync", num_buffers=1`` reproduces
    ``trainer.run`` bit for bit.

    Defaults: two buffers, publish every batch, ``max_staleness=sync_every``
    (one publication stale). The learning-rate annealing follows the
    learner's batch count.

    ``init(key, num_actors)``: the learner state is ``trainer.init(key)``; actor 0 starts
    from its ``sampler_state`` (so ``mode="sync", num_buffers=1`` reproduces
    ``trainer.run``), actor ``a > 0`` from its own ``sampler.init`` key (see
    ``ACTOR_KEY_TAG``).
    The learner state's own ``sampler_state`` is carried along unused.
    ``train(key)`` runs ``trainer.num_iterations`` batches.
    """
    if not (hasattr(trainer, "learn") and hasattr(trainer, "sampler")):
        raise TypeError(f"trainer must be a ppo.PPO, got {type(trainer).__name__}")
    if not isinstance(refresh, bool):
        raise TypeError(f"refresh must be a bool, got {refresh!r}")

    def collect(sampler_state: PyTree, params: PyTree, index: jax.Array):
        del index
        return trainer.sampler.collect(sampler_state, params)

    def learn(state: PyTree, batch: PyTree):
        return trainer.learn(state, refresh_behaviour(trainer, state.params, batch))

    return _trainer_driver(
        trainer,
        collect,
        learn if refresh else trainer.learn,
        steps_per_batch=trainer.config.batch_size,
        num_batches=trainer.num_iterations,
        driver_kwargs=driver_kwargs,
    )


def dqn_driver(trainer: Any, *, iterations_per_batch: int = 1, **driver_kwargs: Any) -> Driver:
    """A [`Driver`][jaxsample.driver.Driver] for a ``dqn.DQN`` trainer
    ([`make_train`][jaxsample.algos.dqn.make_train]), or a ``pqn.PQN`` one
    (the same schedule; its ``learn`` is PQN's epochs on the batch, no replay).

    One driver batch is ``iterations_per_batch`` (``K``) DQN iterations: the
    actor collects ``K`` ``[num_steps, num_envs]`` batches in one program
    (leaves ``[K, T, B, ...]``), and the learner runs ``trainer.learn`` on
    each in turn: add to the replay buffer (on the learner device), the
    ``gradient_steps`` gradient steps once ``learning_starts`` steps are in,
    the target update. Larger ``K`` amortizes the per-batch host work (DQN's
    iterations are 10 env steps by default) at the cost of acting with
    parameters up to ``K`` iterations older.

    Replay ratio: ``gradient_steps / (num_envs * num_steps)`` updates per
    collected step once learning has started (0.1 by default), held exactly:
    every batch is learned exactly once and a slow learner stops the actor, so
    the learner's ``updates`` metric equals what the synchronous loop does
    after the same number of steps, whatever the timing.

    Epsilon follows the batch index, not the learner: iteration ``index * K + j``
    acts with ``trainer.decay(index * K + j)``, exactly the synchronous
    schedule, so an actor's stream is a function of its network versions alone.

    ``init(key, num_actors)``: as [`ppo_driver`][jaxsample.algos.drivers.ppo_driver]'s
    (``trainer.init(key)``; actor 0
    continues its sampler state). ``train(key)`` runs ``num_iterations // K``
    batches. Defaults: two buffers, publish every batch,
    ``max_staleness=sync_every``.
    """
    if not (hasattr(trainer, "learn") and hasattr(trainer, "decay")):
        raise TypeError(f"trainer must be a dqn.DQN, got {type(trainer).__name__}")
    K = check_int("iterations_per_batch", iterations_per_batch, 1)
    if trainer.num_iterations < K:
        raise ValueError(
            f"iterations_per_batch ({K}) must be <= the trainer's num_iterations "
            f"({trainer.num_iterations})"
        )

    def collect(sampler_state: PyTree, params: PyTree, index: jax.Array):
        def one(s: PyTree, j: jax.Array):
            acting = params.replace(decay=trainer.decay(index * K + j))
            return trainer.sampler.collect(s, acting)

        return jax.lax.scan(one, sampler_state, jnp.arange(K, dtype=jnp.int32))

    def learn(state: PyTree, batches: PyTree):
        return jax.lax.scan(trainer.learn, state, batches)

    return _trainer_driver(
        trainer,
        collect,
        learn,
        steps_per_batch=K * trainer.config.steps_per_iteration,
        num_batches=trainer.num_iterations // K,
        driver_kwargs=driver_kwargs,
    )

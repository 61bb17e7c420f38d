"""What the reference trainers ([`ppo`][jaxsample.algos.ppo], [`dqn`][jaxsample.algos.dqn]) share.

Written once here:

* the environment a config names (`make_env`), the sampler a trainer
  collects with (`make_trainer_sampler`) and its optimizer
  (`make_optimizer`);
* `TrainerBase`, the fields and methods both ``Trainer`` objects have:
  ``num_iterations``, ``hparams(**overrides)`` (hyperparameters as data, one
  vmap lane per run), ``run`` (a ``lax.scan`` of ``iteration``) and ``train``,
  plus the pieces of ``init`` and ``learn`` they have in common (the checked
  ``HParams``, the first parameters, the annealed learning rate, the
  episode metrics);
* `reference_run`, the seeds x learning-rates sweep under one
  ``jax.vmap`` (a runner: it jits): the only function of the trainers that
  calls ``jax.jit``; everything else is pure, and callers jit. (From the
  command line, ``jaxsample train`` trains the same configs.)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxsample._checks import check_int
from jaxsample.algos.trainer import Reports, over_runs
from jaxsample.envs import suites
from jaxsample.metrics import StepMetrics
from jaxsample.sampler import SamplerProtocol, make_sampler
from jaxsample.traj_info import summarize
from jaxsample.types import Batch, BatchSpec, PyTree

__all__ = [
    "TrainerBase",
    "episode_metrics",
    "make_env",
    "make_optimizer",
    "make_trainer_sampler",
    "reference_run",
]


def make_env(config: Any, env: Any, env_params: Any) -> tuple[Any, Any]:
    """``(env, env_params)``: the env named ``config.env_name`` (a gymnax name
    or a suite's ``"<suite>/<env>"``, [`jaxsample.envs.suites.make`][jaxsample.envs.suites.make])
    when
    ``env`` is None, else ``env`` with ``env_params`` (default: its
    ``default_params``)."""
    if env is None:
        if env_params is not None:
            raise ValueError("env_params given without env")
        try:
            return suites.make(config.env_name)
        except ValueError as e:
            raise ValueError(f"env_name: {e}") from None
    return env, env.default_params if env_params is None else env_params


def make_trainer_sampler(
    env: Any, env_params: Any, agent: Any, config: Any, **options: Any
) -> SamplerProtocol:
    """The sampler a trainer collects with: ``make_sampler(env, env_params,
    agent, BatchSpec(T=config.num_steps, B=config.num_envs), reset_mode="auto",
    max_decorrelation_steps=config.max_decorrelation_steps,
    discount=config.gamma, **options)`` (the default sparse final-observation
    store: exact wherever a value target bootstraps)."""
    return make_sampler(
        env,
        env_params,
        agent,
        BatchSpec(T=config.num_steps, B=config.num_envs),
        max_decorrelation_steps=config.max_decorrelation_steps,
        reset_mode="auto",
        discount=config.gamma,
        **options,
    )


def make_optimizer(config: Any) -> optax.GradientTransformation:
    """``clip_by_global_norm(config.max_grad_norm)`` (unless it is None) then
    ``scale_by_adam(eps=config.adam_eps)``; a trainer steps by ``-lr`` times
    its output, so the learning rate can be traced (vmapped).

    Both act on the parameters raveled into one vector (``optax.flatten``; the
    state's moments are vectors too): the same arithmetic, in a few kernels
    instead of a few per parameter array, which XLA compiles in less time."""
    transforms = []
    if config.max_grad_norm is not None:
        transforms.append(optax.clip_by_global_norm(config.max_grad_norm))
    transforms.append(optax.scale_by_adam(eps=config.adam_eps))
    return optax.flatten(optax.chain(*transforms))


# ----------------------------------------------------------------------------
# The trainers' shared fields and methods
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class TrainerBase:
    """Fields and methods of PPO's and DQN's ``Trainer`` (frozen dataclasses;
    ``hparams_type`` is the algorithm's hyperparameter struct, whose fields
    default to the config's fields of the same names). A subclass adds its own
    fields and defines ``init`` and ``iteration``.

    Attributes:
      config: the algorithm's config.
      env, env_params: the gymnax environment.
      agent: the acting agent.
      sampler: the sampler it collects with (a
        [`SamplerProtocol`][jaxsample.sampler.SamplerProtocol]: one device or sharded).
    """

    hparams_type: ClassVar[type]
    config: Any
    env: Any
    env_params: Any
    agent: Any
    sampler: SamplerProtocol

    @property
    def num_iterations(self) -> int:
        """Iterations of a full run (``config.num_iterations``)."""
        return self.config.num_iterations

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps of one run per iteration."""
        return self.config.steps_per_iteration

    @property
    def reports(self) -> Reports:
        """What its metrics are: a game's evaluations against a random opponent
        where it has them."""
        from jaxsample.algos import games

        return Reports(evaluation=games.METRICS if getattr(self, "games", None) else ())

    def hparams(self, **overrides: Any) -> Any:
        """``HParams`` from the config, with ``overrides`` (e.g. ``lr=[...]``).

        Fields are float32 and broadcast to one common shape, so giving one
        field an ``[N]`` array makes ``N`` runs to vmap over.
        """
        fields = [f.name for f in dataclasses.fields(self.hparams_type)]
        unknown = set(overrides) - set(fields)
        if unknown:
            raise ValueError(f"unknown hparams {sorted(unknown)}; the fields are {fields}")
        values = {
            name: jnp.asarray(overrides.get(name, getattr(self.config, name)), jnp.float32)
            for name in fields
        }
        shape = jnp.broadcast_shapes(*(v.shape for v in values.values()))
        return self.hparams_type(**{k: jnp.broadcast_to(v, shape) for k, v in values.items()})

    def init(self, key: jax.Array, hparams: Any = None) -> Any:
        """A fresh run's state (the subclass's)."""
        raise NotImplementedError

    def iteration(self, state: Any) -> tuple[Any, dict[str, jax.Array]]:
        """One iteration: ``(state, metrics)`` (the subclass's)."""
        raise NotImplementedError

    def run(self, state: Any, num_iterations: int) -> tuple[Any, dict[str, jax.Array]]:
        """``num_iterations`` (static) iterations; metrics stacked ``[num_iterations]``."""
        check_int("num_iterations", num_iterations, 1)
        return jax.lax.scan(lambda s, _: self.iteration(s), state, None, length=int(num_iterations))

    def train(self, key: jax.Array, hparams: Any = None) -> tuple[Any, dict[str, jax.Array]]:
        """The whole run: ``run(init(key, hparams), config.num_iterations)``."""
        return self.run(self.init(key, hparams), self.num_iterations)

    # -- pieces of init and learn --------------------------------------------

    def _start(self, key: jax.Array, hparams: Any) -> tuple[Any, PyTree, jax.Array, jax.Array]:
        """``(hparams, params, k_sampler, k_train)`` for ``init``: the checked
        float32 hyperparameters of one run (the config's when None), the
        agent's first parameters (from an all-zeros example observation) and
        the sampler's and the trainer's keys (``key`` split in three)."""
        hparams = self.hparams() if hparams is None else hparams
        if not isinstance(hparams, self.hparams_type):
            raise TypeError(f"hparams must be an HParams, got {type(hparams).__name__}")
        for f in dataclasses.fields(self.hparams_type):
            if jnp.shape(getattr(hparams, f.name)) != ():
                raise ValueError(
                    f"hparams.{f.name} must be a scalar for one run (vmap to run several), "
                    f"got shape {jnp.shape(getattr(hparams, f.name))}"
                )
        hparams = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), hparams)
        k_params, k_sampler, k_train = jax.random.split(key, 3)
        example = jax.tree.map(
            lambda s: jnp.zeros(s.shape, s.dtype), self.sampler.examples.env.observation
        )
        return hparams, self.agent.init(k_params, example), k_sampler, k_train

    def _lr(self, iteration: jax.Array, lr: jax.Array) -> jax.Array:
        """The learning rate of iteration ``iteration`` (0-based): ``lr``, times
        ``1 - iteration / num_iterations`` (floored at 0) with ``config.anneal_lr``."""
        if not self.config.anneal_lr:
            return lr * 1.0
        frac = 1.0 - iteration.astype(jnp.float32) / self.num_iterations
        return lr * jnp.maximum(frac, 0.0)


def episode_metrics(batch: Batch, metrics: StepMetrics) -> dict[str, jax.Array]:
    """The per-iteration episode figures both trainers report: ``env_steps``
    (after the iteration), ``episode_return_mean``, ``episode_length_mean``,
    ``n_episodes`` (this batch's completed episodes; NaN means when none),
    ``average_return``, ``average_episode_length`` (last ``metrics_window``
    episodes)."""
    episodes = summarize(batch.traj_infos, ("episode_return", "length"), ("mean",))
    summary = metrics.summary()
    return {
        "env_steps": summary["environment_steps"],
        "episode_return_mean": episodes["episode_return_mean"],
        "episode_length_mean": episodes["length_mean"],
        "n_episodes": episodes["n_trajectories"],
        "average_return": summary["average_return"],
        "average_episode_length": summary["average_episode_length"],
    }


# ----------------------------------------------------------------------------
# Reference runs (a runner: this one jits)
# ----------------------------------------------------------------------------


def reference_run(
    trainer: TrainerBase,
    seeds: Sequence[int],
    *,
    lrs: Sequence[float] | None = None,
    tail_iterations: int,
    compiler: Callable[[Any, tuple], Any] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Train ``len(seeds)`` runs (x ``len(lrs)``) of ``trainer`` under one ``jax.vmap``.

    Run ``i`` is seed ``seeds[i // len(lrs)]`` (its key ``jax.random.key(seed)``)
    with learning rate ``lrs[i % len(lrs)]`` (default: the config's).
    ``compiler(jitted, args)`` returns the compiled program (default:
    ``jitted.lower(*args).compile()``): a benchmark's, to time its stages.

    Returns:
      ``(state, report)``: the final vmapped trainer state and a dict with
      ``compile_s``, ``run_s`` (wall times), ``final_return`` (per run,
      ``StepMetrics``' mean over the last ``metrics_window`` episodes),
      ``tail_return`` (mean return of the episodes completed in the last
      ``tail_iterations`` iterations), ``metrics`` (numpy, ``[runs,
      iterations]``) and the ``seeds`` and ``lrs`` of each run; for a trainer
      with an ``evaluate(state, key)`` method (DQN's), ``eval_return``: the
      ``episode_return_mean`` it reports per run, with key ``fold_in(key, 1)``.
    """
    seed_list = [int(s) for s in seeds]
    lr_list = [trainer.config.lr] if lrs is None else [float(x) for x in lrs]
    run_seeds = [s for s in seed_list for _ in lr_list]
    run_lrs = [lr for _ in seed_list for lr in lr_list]
    keys = jax.vmap(jax.random.key)(jnp.asarray(run_seeds, jnp.uint32))
    hparams = trainer.hparams(lr=jnp.asarray(run_lrs, jnp.float32))
    train = jax.jit(over_runs(trainer.train))
    t0 = time.perf_counter()
    if compiler is None:
        compiled = train.lower(keys, hparams).compile()
    else:
        compiled = compiler(train, (keys, hparams))
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = jax.block_until_ready(compiled(keys, hparams))
    run_s = time.perf_counter() - t0
    metrics = jax.tree.map(np.asarray, metrics)
    tail = slice(-tail_iterations, None)
    returns = metrics["episode_return_mean"][:, tail]
    counts = metrics["n_episodes"][:, tail]
    tail_return = np.nansum(np.nan_to_num(returns) * counts, axis=1) / np.maximum(
        counts.sum(axis=1), 1
    )
    report = {
        "compile_s": compile_s,
        "run_s": run_s,
        "final_return": metrics["average_return"][:, -1],
        "tail_return": tail_return,
        "metrics": metrics,
        "seeds": run_seeds,
        "lrs": run_lrs,
    }
    evaluate = getattr(trainer, "evaluate", None)
    if evaluate is not None:
        eval_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
        evaluation = jax.jit(jax.vmap(evaluate))(state, eval_keys)
        report["eval_return"] = np.asarray(evaluation["episode_return_mean"])
    return state, report

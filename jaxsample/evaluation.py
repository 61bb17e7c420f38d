"""Policy evaluation: ``make_evaluator(...) -> Evaluator(run, run_with_stats)``.

The evaluator runs ``n_envs`` environments with the agent in its evaluation
(greedy) behaviour, ``agent.as_eval()``, and returns the statistics of finished
trajectories as a [`TrajInfo`][jaxsample.types.TrajInfo] whose fields have one flat
axis ``[N]`` (``N = evaluator.capacity``, static) and a ``completed`` mask.

One step of one env is the samplers' per-env step
(`jaxsample.core.step.EnvStepper`, unbatched, in ``"auto"`` reset
mode), vmapped
over the ``n_envs`` envs, and repeated by a ``lax.while_loop`` that stops as soon
as the wanted trajectories are in, or when the step budget
``max_T = max_steps // n_envs`` steps per env (rlpyt's ``max_T``) is spent. A run
therefore costs the steps it needs, not ``max_steps``.

Modes (which trajectories are reported):

* ``"first_per_env"`` (default, unbiased): the ``M`` trajectories reported are
  fixed before the run: the first ``M`` in (episode number, env rank) order,
  i.e. env ``b`` contributes its first ``ceil((M - b) / n_envs)`` episodes,
  where ``M = max_trajectories`` (default ``n_envs``: every env one episode,
  all started together from a fresh reset). Slot ``j * n_envs + b`` holds the
  ``j``-th episode of env ``b``. The run stops when all of them have finished
  or the budget is spent; an episode cut by the budget is reported with
  ``completed=False`` (and its running totals).
* ``"rlpyt"`` (rlpyt's eval collectors): every env keeps resetting and each
  trajectory that finishes is recorded, in order of its end step and then env
  rank, until ``max_trajectories`` are in or the budget is spent; episodes
  still running at the end are dropped.

Why ``"first_per_env"`` is the default: which trajectories ``"rlpyt"`` keeps
depends on their lengths. Stopping at the first ``max_trajectories`` to finish
keeps the earliest finishers, and the budget drops the episodes still running,
so short episodes are over-represented (rlpyt issue #93); where return and
length are correlated (CartPole: return == length) the average return is
biased. In ``"first_per_env"`` the set of episodes is chosen in advance and
each is an independent episode from a fresh reset, so their mean is an
unbiased estimate as long as they all finish (``EvalStats.budget_exhausted`` is
False; otherwise raise ``max_steps``).

Key schedule (what a reference implementation must reproduce; written in
`jaxsample.core.keys`). For the env of rank ``b`` (``0 .. n_envs - 1``):

* ``k_reset, k_run = split(fold_in(key, b))``; the env starts from
  ``env.reset(k_reset)``;
* at step ``t`` of the run (``0 <= t < max_T``, counted from the start, across
  episodes) the agent acts with ``k_agent = fold_in(k_run, 2 t)`` and the env
  steps with ``env.step(fold_in(k_run, 2 t + 1), ...)``, which auto-resets
  with its own split of that key, as gymnax does.

After an episode end the agent's inputs restart as docs/design.md says: the reset
observation, the null previous action, ``prev_reward = 0`` and
``agent.initial_state(b)``.

`Evaluator.trace` replays the first episode of one env rank with the same
keys, step by step, and keeps its env states (what a video renders): the
same steps as ``run``'s (for an env whose ``step`` is gymnax's own: every
env jaxsample adapts), without the reset after the end.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax import struct

from jaxsample._checks import check_bool, check_int, check_key
from jaxsample.agents.base import Agent
from jaxsample.core import keys as K
from jaxsample.core.masking import legal_actions
from jaxsample.core.options import check_agent, check_discount, check_env
from jaxsample.core.specs import agent_spec, default_params
from jaxsample.core.step import EnvCarry, EnvStepper, track, traj_step
from jaxsample.traj_info import TrajAccumulator, TrajField, check_traj_fields
from jaxsample.types import PyTree, TrajInfo

EvalMode = Literal["first_per_env", "rlpyt"]
EVAL_MODES = ("first_per_env", "rlpyt")
# Steps are counted in int32 and per-step keys use fold_in(k, 2 t + 1) < 2**32.
_MAX_STEPS_LIMIT = 2**31 - 1


@struct.dataclass
class EvalStats:
    """Diagnostics of one evaluation run (int32 / bool scalars).

    Attributes:
      steps: loop iterations, i.e. steps taken by each env (``<= max_T``).
      env_steps: ``steps * n_envs``, the environment steps paid for.
      n_completed: number of ``completed`` entries in the returned TrajInfo.
      budget_exhausted: the loop ran all ``max_T`` steps without collecting every
        wanted trajectory. In ``"first_per_env"`` mode the estimate is then
        biased towards short episodes (some were cut): raise ``max_steps``.
        (In ``"rlpyt"`` mode without ``max_trajectories`` the budget is the only
        stop, so it is True unless every env finished at every step.)
    """

    steps: jax.Array
    env_steps: jax.Array
    n_completed: jax.Array
    budget_exhausted: jax.Array


@struct.dataclass
class Episode:
    """One env's first episode, step by step (`Evaluator.trace`; ``S`` the
    steps traced).

    Attributes:
      env_state: ``[S + 1, ...]`` the env's state: frame 0 the reset state,
        frame ``t`` the state after step ``t``; after the episode's end its
        final state is held (no reset).
      reward: float32 ``[S]`` (the env's reward shape after it), 0 after the end.
      length: int32 scalar, the steps of the episode (its end included), or
        ``S`` where it did not end within them.
      ended: bool scalar, whether it ended within the ``S`` steps.
    """

    env_state: PyTree
    reward: jax.Array
    length: jax.Array
    ended: jax.Array


@struct.dataclass
class _EnvState:
    """One env inside the loop (leaves scalars per env; ``[n_envs, ...]`` vmapped)."""

    env: EnvCarry  # the samplers' per-env carry
    traj: TrajAccumulator
    key: jax.Array  # k_run of the key schedule
    n_done: jax.Array  # int32, episodes recorded so far ("first_per_env")


@struct.dataclass
class _Loop:
    """The ``lax.while_loop`` carry."""

    t: jax.Array  # int32, steps taken
    envs: _EnvState  # [n_envs, ...]
    out: TrajInfo  # fields [N]
    count: jax.Array  # int32, trajectories recorded


@dataclasses.dataclass(frozen=True, eq=False)
class Evaluator:
    """Runs an agent's greedy behaviour and reports finished trajectories.

    Build it with [`make_evaluator`][jaxsample.evaluation.make_evaluator].
    ``run`` and ``run_with_stats`` are pure and jittable; everything else is
    static configuration.

    Attributes:
      env: the environment, as given.
      env_params: its parameters, as given.
      agent: the evaluation agent (``agent.as_eval()`` of the one given).
      n_envs: the number of envs stepped together, as given.
      max_steps: the total env-step budget, as given.
      max_trajectories: the number of trajectories wanted, as given (None: no
        limit but the budget).
      mode: ``"first_per_env"`` or ``"rlpyt"``, as given.
      discount: the discount of the returns, as given.
      max_T: ``max_steps // n_envs``, the step budget of each env.
      capacity: ``N``, the static length of the returned TrajInfo fields:
        ``min(max_trajectories, n_envs * max_T)``; when ``max_trajectories`` is
        None, ``n_envs`` in ``"first_per_env"`` mode and ``n_envs * max_T``
        (every env finishing at every step) in ``"rlpyt"`` mode.
      traj_fields: the extra per-trajectory fields recorded, as given.
    """

    env: Any
    env_params: Any
    agent: Agent
    n_envs: int
    max_steps: int
    max_trajectories: int | None
    mode: EvalMode
    discount: float
    max_T: int
    capacity: int
    _stepper: EnvStepper
    _quota: tuple[int, ...]  # "first_per_env": episodes wanted from each env
    traj_fields: tuple[TrajField, ...] = ()

    def run(self, key: jax.Array, agent_params: PyTree) -> TrajInfo:
        """Evaluate ``agent_params``; pure and jittable.

        Args:
          key: a ``jax.random.key`` (shape ``()``).
          agent_params: the agent's parameters.

        Returns:
          A [`TrajInfo`][jaxsample.types.TrajInfo] with fields ``[N]``
          (``N = capacity``): ``completed`` (bool), ``length`` (int32),
          ``episode_return`` and ``discounted_return`` (float32),
          ``nonzero_rewards`` (int32). Entries with ``completed`` True are
          finished trajectories, never more than ``max_trajectories``. In
          ``"first_per_env"`` mode entry ``j * n_envs + b`` is episode ``j`` of
          env ``b`` (an episode cut by the budget holds its running totals with
          ``completed`` False); in ``"rlpyt"`` mode entries are in order of end
          step, then env rank, and unused entries are zeros. Reduce it with
          [`jaxsample.summarize`][jaxsample.traj_info.summarize].
        """
        return self.run_with_stats(key, agent_params)[0]

    def run_with_stats(self, key: jax.Array, agent_params: PyTree) -> tuple[TrajInfo, EvalStats]:
        """[`run`][jaxsample.evaluation.Evaluator.run] plus
        [`EvalStats`][jaxsample.evaluation.EvalStats] (steps taken, budget exhausted)."""
        check_key(key)
        B, N = self.n_envs, self.capacity
        ranks = jnp.arange(B, dtype=jnp.int32)
        envs = jax.vmap(self._init_env, in_axes=(None, 0))(key, ranks)
        zeros = self._traj().info(jnp.zeros((), bool))
        out = jax.tree.map(lambda x: jnp.zeros((N, *x.shape), x.dtype), zeros)
        start = _Loop(
            t=jnp.zeros((), jnp.int32), envs=envs, out=out, count=jnp.zeros((), jnp.int32)
        )
        quota = jnp.asarray(self._quota, jnp.int32)
        step = jax.vmap(self._env_step, in_axes=(0, None, None))

        def wanted(c: _Loop) -> jax.Array:
            """Some wanted trajectory has not finished yet."""
            if self.mode == "rlpyt":
                return c.count < N
            return jnp.any(c.envs.n_done < quota)

        def cond(c: _Loop) -> jax.Array:
            return (c.t < self.max_T) & wanted(c)

        def body(c: _Loop) -> _Loop:
            envs, done, info, action = step(c.envs, agent_params, c.t)
            legal = legal_actions(c.envs.env.observation)
            self._stepper.agent.check_actions_fit(
                action, jnp.ones((B,), bool), ranks, c.t, "step", legal
            )
            if self.mode == "rlpyt":
                record = done
                before = jnp.cumsum(done, dtype=jnp.int32) - done.astype(jnp.int32)
                slot = c.count + before  # slots >= N are dropped below
            else:
                record = done & (c.envs.n_done < quota)
                slot = c.envs.n_done * B + ranks
                envs = envs.replace(n_done=c.envs.n_done + record.astype(jnp.int32))
            out = _scatter(c.out, jnp.where(record, slot, N), info)
            count = jnp.minimum(c.count + jnp.sum(record, dtype=jnp.int32), N)
            return _Loop(t=c.t + 1, envs=envs, out=out, count=count)

        end = jax.lax.while_loop(cond, body, start)
        out = end.out
        if self.mode == "first_per_env":
            # Episodes cut by the budget: running totals, completed=False.
            cut = end.envs.n_done < quota
            partial = jax.vmap(lambda a: a.info(jnp.zeros((), bool)))(end.envs.traj)
            out = _scatter(out, jnp.where(cut, end.envs.n_done * B + ranks, N), partial)
        stats = EvalStats(
            steps=end.t,
            env_steps=end.t * B,
            n_completed=end.count,
            budget_exhausted=wanted(end),
        )
        return out, stats

    def trace(self, key: jax.Array, agent_params: PyTree, rank: Any, steps: int) -> Episode:
        """The first episode of the env of rank ``rank`` (a scalar, traced or
        not) with ``run``'s keys, as an `Episode` of ``steps`` steps (a
        static int >= 1); pure and jittable. Its steps are those of
        ``run(key, agent_params)``'s env ``rank`` (for an env whose ``step``
        is gymnax's own; another env steps with ``step_env`` and the step's
        env key), ending at the same step with the same return."""
        check_key(key)
        steps = check_int("steps", steps, 1)
        start = self._init_env(key, jnp.asarray(rank, jnp.int32))
        act = self._stepper.agent.agent_act(agent_params)

        def body(carry: tuple[EnvCarry, jax.Array], t: jax.Array) -> tuple[Any, Any]:
            env, ended = carry
            k_agent, k_env = K.eval_step_keys(start.key, t)
            keys = self._stepper.keys_of(k_env)
            moved, tr = self._stepper.step(env, act, k_agent, keys, auto_reset=False)
            env = jax.tree.map(lambda a, b: jax.lax.select(ended, a, b), env, moved)
            reward = jnp.where(ended, jnp.zeros_like(tr.reward), tr.reward)
            return (env, ended | tr.done), (env.env_state, reward, ended)

        times = jnp.arange(steps, dtype=jnp.int32)
        (_, ended), (states, reward, before) = jax.lax.scan(
            body, (start.env, jnp.zeros((), bool)), times
        )
        first = start.env.env_state
        states = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, states)
        length = jnp.sum(~before, dtype=jnp.int32)
        return Episode(env_state=states, reward=reward, length=length, ended=ended)

    # ------------------------------------------------------------ internals
    def _traj(self) -> TrajAccumulator:
        """A fresh accumulator for the env's reward (``[N]`` for a team)."""
        return TrajAccumulator.zeros(self.traj_fields, self._stepper.env_spec.reward.shape)

    def _init_env(self, key: jax.Array, rank: jax.Array) -> _EnvState:
        k_reset, k_run = K.eval_env_keys(key, rank)
        return _EnvState(
            env=self._stepper.start(k_reset, rank),
            traj=self._traj(),
            key=k_run,
            n_done=jnp.zeros((), jnp.int32),
        )

    def _env_step(
        self, s: _EnvState, agent_params: PyTree, t: jax.Array
    ) -> tuple[_EnvState, jax.Array, TrajInfo, PyTree]:
        """Step ``t`` of one env (unbatched): the core per-env step, and the
        trajectory's accounting.

        Returns the next state, ``done`` (bool scalar), the TrajInfo of the
        step (the trajectory's totals where ``done``) and the action taken.
        """
        k_agent, k_env = K.eval_step_keys(s.key, t)
        act = self._stepper.agent.agent_act(agent_params)
        env, tr = self._stepper.step(s.env, act, k_agent, self._stepper.keys_of(k_env))
        step = traj_step(s.env.observation, tr) if self.traj_fields else None
        traj, info = track(s.traj, tr.reward, tr.done, self.discount, step)
        return s.replace(env=env, traj=traj), tr.done, info, tr.action


def _scatter(out: TrajInfo, slot: jax.Array, values: TrajInfo) -> TrajInfo:
    """``out[slot[b]] = values[b]`` field by field; slots ``>= N`` are dropped."""
    return jax.tree.map(lambda buf, v: buf.at[slot].set(v, mode="drop"), out, values)


def make_evaluator(
    env: Any,
    env_params: Any,
    agent: Agent,
    *,
    n_envs: int,
    max_steps: int,
    max_trajectories: int | None = None,
    mode: EvalMode = "first_per_env",
    discount: float = 0.99,
    agent_params: PyTree = None,
    check_actions: bool = False,
    traj_fields: Sequence[TrajField] = (),
) -> Evaluator:
    """Build an evaluator of ``agent.as_eval()`` on ``n_envs`` envs.

    Args:
      env: a gymnax (>= 1.0) environment.
      env_params: its parameters.
      agent: an [`Agent`][jaxsample.agents.Agent]; the evaluator acts with
        ``agent.as_eval()`` (its greedy behaviour).
      n_envs: number of envs stepped together, >= 1 (their ranks are
        ``0 .. n_envs - 1``).
      max_steps: total env-step budget, >= ``n_envs``: each env takes at most
        ``max_T = max_steps // n_envs`` steps (rlpyt's ``eval_max_steps``).
      max_trajectories: the number of trajectories wanted, >= 1 (rlpyt's
        ``eval_max_trajectories``); the run stops once they are in. Default:
        ``n_envs`` in ``"first_per_env"`` mode (one episode per env); no limit
        but the budget in ``"rlpyt"`` mode (then the output has
        ``n_envs * max_T`` entries: give a limit to bound its memory). In
        ``"first_per_env"`` mode a value below ``n_envs`` leaves the envs of
        rank ``>= max_trajectories`` unused.
      mode: ``"first_per_env"`` (default; unbiased: the episodes reported are
        chosen before the run, each env's first ones, all envs starting
        together) or ``"rlpyt"`` (the first trajectories to finish; biased
        towards short episodes). See the module docstring.
      discount: in ``[0, 1]``, for ``TrajInfo.discounted_return``.
      agent_params: an example of the agent's parameters (arrays or
        ``jax.ShapeDtypeStruct``), used only to check the agent. Defaults to
        ``jax.eval_shape(agent.init, key, observation)`` when the agent has an
        ``init`` method; without either, ``run`` checks the agent with the
        parameters it is given.
      check_actions: the checked mode (as in
        [`jaxsample.make_sampler`][jaxsample.sampler.make_sampler]):
        ``run`` raises when an action is outside the action space or not
        legal (an env with legal-action masks); off by default, at no cost.
      traj_fields: user fields of the returned ``TrajInfo.extra``
        ([`TrajField`][jaxsample.traj_info.TrajField], as the sampler's ``traj_fields``),
        e.g. ``js.agents.seat_returns()`` for a game against an opponent.

    Returns:
      An [`Evaluator`][jaxsample.evaluation.Evaluator]; call
      ``evaluator.run(key, agent_params)`` (under ``jax.jit`` or not).

    Raises:
      TypeError: naming the offending argument, for an argument of the wrong
        type.
      ValueError: naming the offending argument, for a bad value, or an agent
        whose action does not fit the action space.
    """
    n_envs, max_steps, max_trajectories = _check_run(n_envs, max_steps, max_trajectories, mode)
    discount = check_discount(discount)
    check_bool("check_actions", check_actions)
    traj_fields = check_traj_fields(traj_fields)
    eval_agent, stepper = _eval_stepper(env, env_params, agent, agent_params, check_actions)
    max_T = max_steps // n_envs
    capacity, quota = _slots(n_envs, max_T, max_trajectories, mode)
    return Evaluator(
        env=env,
        env_params=env_params,
        agent=eval_agent,
        n_envs=n_envs,
        max_steps=max_steps,
        max_trajectories=max_trajectories,
        mode=mode,
        discount=discount,
        max_T=max_T,
        capacity=capacity,
        _stepper=stepper,
        _quota=quota,
        traj_fields=traj_fields,
    )


def _check_run(
    n_envs: Any, max_steps: Any, max_trajectories: Any, mode: Any
) -> tuple[int, int, int | None]:
    """``(n_envs, max_steps, max_trajectories)`` checked (``n_envs >= 1``,
    ``n_envs <= max_steps <= 2**31 - 1``, ``max_trajectories`` None or ``>= 1``),
    and ``mode``."""
    n_envs = check_int("n_envs", n_envs, 1)
    max_steps = check_int("max_steps", max_steps, n_envs)
    if max_steps > _MAX_STEPS_LIMIT:
        raise ValueError(f"max_steps must be <= {_MAX_STEPS_LIMIT}, got {max_steps}")
    if max_trajectories is not None:
        max_trajectories = check_int("max_trajectories", max_trajectories, 1)
    if mode not in EVAL_MODES:
        raise ValueError(f"mode must be one of {EVAL_MODES}, got {mode!r}")
    return n_envs, max_steps, max_trajectories


def _eval_stepper(
    env: Any, env_params: Any, agent: Any, agent_params: PyTree, check_actions: bool
) -> tuple[Agent, EnvStepper]:
    """``agent.as_eval()`` and the per-env step of it on ``env``, checked: the
    env, the agent's methods, and the agent against the env with
    ``agent_params`` (default ``agent.init``'s shapes; without either, ``run``
    checks the agent with the parameters it is given)."""
    check_env(env, env_params)
    if not callable(getattr(agent, "as_eval", None)):
        raise TypeError("agent must have a method as_eval() giving its greedy behaviour")
    eval_agent = agent.as_eval()
    check_agent(eval_agent, ("initial_state", "step"), what="agent.as_eval()")
    stepper = EnvStepper.of(env, env_params, eval_agent, check_actions)
    env_s = stepper.env_spec
    agent_params = default_params(eval_agent, agent_params, env_s.observation)
    if agent_params is not None:
        agent_spec(
            eval_agent, agent_params, env_s.observation, env_s.action_space, reward=env_s.reward
        )
    return eval_agent, stepper


def _slots(
    n_envs: int, max_T: int, max_trajectories: int | None, mode: str
) -> tuple[int, tuple[int, ...]]:
    """``(capacity, quota)``: ``N``, the number of output slots (see
    `Evaluator.capacity`), and ``"first_per_env"``'s episodes wanted from each
    env (slot ``j * n_envs + b < N`` is episode ``j`` of env ``b``)."""
    most = n_envs * max_T  # at most one trajectory per env per step
    if max_trajectories is None:
        wanted = n_envs if mode == "first_per_env" else most
    else:
        wanted = max_trajectories
    capacity = min(wanted, most)
    quota = tuple(max(0, math.ceil((capacity - b) / n_envs)) for b in range(n_envs))
    return capacity, quota

"""Tests of jaxsample.algos.ppo: GAE, value targets, the compiled trainer, learning."""

import dataclasses
import functools

import chex
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsample as js
from jaxsample.algos import ppo
from jaxsample.algos.games import when
from jaxsample.algos.returns import final_values, gae, truncation_values

jax.config.update("jax_numpy_rank_promotion", "raise")

GAMMA, LAM = 0.9, 0.8


# ----------------------------------------------------------------------------
# GAE against a plain loop
# ----------------------------------------------------------------------------


def numpy_gae(reward, value, final_value, bootstrap_value, terminated, truncated, valid=None):
    """One env, ``[T]``: the textbook recursion, written step by step."""
    T = len(reward)
    valid = np.ones(T, bool) if valid is None else valid
    adv = np.zeros(T)
    last = 0.0
    for t in reversed(range(T)):
        if not valid[t]:
            adv[t] = last = 0.0
            continue
        if terminated[t]:
            target = reward[t]  # no bootstrap through a termination
        elif truncated[t]:
            target = reward[t] + GAMMA * final_value[t]  # the true next observation
        elif t == T - 1:
            target = reward[t] + GAMMA * bootstrap_value
        else:
            target = reward[t] + GAMMA * value[t + 1]
        ended = terminated[t] or truncated[t]
        last = target - value[t] + (0.0 if ended else GAMMA * LAM * last)
        adv[t] = last
    return adv, adv + np.asarray(value)


def run_gae(reward, value, final_value, bootstrap_value, terminated, truncated, valid=None):
    f = functools.partial(gae, gamma=GAMMA, lam=LAM)
    args = (
        jnp.asarray(reward, jnp.float32),
        jnp.asarray(value, jnp.float32),
        jnp.asarray(final_value, jnp.float32),
        jnp.asarray(bootstrap_value, jnp.float32),
        jnp.asarray(terminated, bool),
        jnp.asarray(truncated, bool),
    )
    valid = None if valid is None else jnp.asarray(valid, bool)
    eager = f(*args, valid=valid)
    jitted = jax.jit(f)(*args, valid=valid)
    for a, b in zip(eager, jitted, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    return tuple(np.asarray(x) for x in eager)


T = 6
REWARD = [1.0, 0.5, 2.0, -1.0, 1.0, 0.25]
VALUE = [0.3, 1.2, -0.4, 0.8, 2.0, 1.5]
FINAL = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0]  # V(final obs); only read where truncated
BOOT = 3.0
F, X = False, True
CASES = {
    "no episode end: bootstrap_value": ([F] * 6, [F] * 6),
    "termination": ([F, F, X, F, F, F], [F] * 6),
    "truncation": ([F] * 6, [F, F, X, F, F, F]),
    "both in one sequence": ([F, X, F, F, F, F], [F, F, F, X, F, F]),
    "terminated at the last step": ([F, F, F, F, F, X], [F] * 6),
    "truncated at the last step": ([F] * 6, [F, F, F, F, F, X]),
    "terminated and truncated at once": ([F, F, X, F, F, F], [F, F, X, F, F, F]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_gae_matches_numpy_loop(case):
    terminated, truncated = CASES[case]
    got = run_gae(REWARD, VALUE, FINAL, BOOT, terminated, truncated)
    want = numpy_gae(REWARD, VALUE, FINAL, BOOT, terminated, truncated)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_gae_hand_computed_truncation_and_termination():
    """Two steps by hand: a truncation bootstraps from V(final obs), a termination does not."""
    adv, ret = run_gae([1.0, 1.0], [0.5, 0.5], [4.0, 4.0], 2.0, [F, F], [X, F])
    # t=1: not done, last step -> 1 + 0.9 * 2.0 - 0.5; t=0: truncated -> 1 + 0.9 * 4 - 0.5, cut.
    np.testing.assert_allclose(adv, [1 + 0.9 * 4.0 - 0.5, 1 + 0.9 * 2.0 - 0.5], rtol=1e-6)
    np.testing.assert_allclose(ret, adv + 0.5, rtol=1e-6)
    adv, _ = run_gae([1.0, 1.0], [0.5, 0.5], [4.0, 4.0], 2.0, [X, F], [F, F])
    np.testing.assert_allclose(adv[0], 1 - 0.5, rtol=1e-6)


def test_naive_gae_differs_at_truncation():
    """Treating the truncation as a termination (the common mistake) changes the targets."""
    terminated, truncated = CASES["truncation"]
    correct = run_gae(REWARD, VALUE, FINAL, BOOT, terminated, truncated)
    naive = numpy_gae(REWARD, VALUE, FINAL, BOOT, truncated, [F] * T)
    assert not np.allclose(correct[1], naive[1])
    # Steps 0..2 lead up to the truncation: their targets all change; later ones do not.
    changed = ~np.isclose(correct[1], naive[1])
    np.testing.assert_array_equal(changed, [X, X, X, F, F, F])
    assert correct[1][2] == pytest.approx(REWARD[2] + GAMMA * FINAL[2])
    assert naive[1][2] == pytest.approx(REWARD[2])


def test_gae_random_batch_matches_columns_and_numpy():
    rng = np.random.default_rng(0)
    T, B = 40, 5
    reward, value, final = (rng.normal(size=(T, B)) for _ in range(3))
    boot = rng.normal(size=B)
    terminated = rng.random((T, B)) < 0.1
    truncated = rng.random((T, B)) < 0.1
    valid = np.ones((T, B), bool)
    valid[30:, 0] = False  # an idle tail, as in the sampler's "wait" mode
    terminated[29, 0] = True
    adv, ret = run_gae(reward, value, final, boot, terminated, truncated, valid)
    assert adv.shape == ret.shape == (T, B)
    for b in range(B):
        want = numpy_gae(
            reward[:, b],
            value[:, b],
            final[:, b],
            boot[b],
            terminated[:, b],
            truncated[:, b],
            valid[:, b],
        )
        np.testing.assert_allclose(adv[:, b], want[0], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(ret[:, b], want[1], rtol=1e-4, atol=1e-4)
    assert (adv[30:, 0] == 0).all()


def test_gae_shape_errors():
    z = jnp.zeros((4, 2))
    b = jnp.zeros((4, 2), bool)
    with pytest.raises(ValueError, match="bootstrap_value"):
        gae(z, z, z, jnp.zeros(3), b, b, gamma=0.9, lam=0.9)
    with pytest.raises(ValueError, match="final_value"):
        gae(z, z, jnp.zeros((4, 3)), jnp.zeros(2), b, b, gamma=0.9, lam=0.9)


# ----------------------------------------------------------------------------
# Value targets from a real batch
# ----------------------------------------------------------------------------


def tiny_config(**kw) -> ppo.PPOConfig:
    base = dict(
        num_envs=4,
        num_steps=16,
        total_timesteps=4 * 16 * 3,
        num_minibatches=2,
        update_epochs=2,
        hidden_sizes=(16,),
        rnn_hidden_size=8,
    )
    return ppo.PPOConfig(**{**base, **kw})


@functools.cache
def short_cartpole_trainer(recurrent: bool) -> ppo.PPO:
    """CartPole with a 10-step time limit, so batches hold truncations."""
    env, params = gymnax.make("CartPole-v1")
    params = params.replace(max_steps_in_episode=10)
    cfg = tiny_config(recurrent=recurrent, num_steps=32, mask_velocity=recurrent)
    return ppo.make_train(cfg, env=env, env_params=params)


@functools.cache
def collected(recurrent: bool):
    trainer = short_cartpole_trainer(recurrent)
    state = trainer.init(jax.random.key(0))
    # Params far from the init's (whose policy head is nearly uniform).
    leaves, tree = jax.tree.flatten(state.params)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    noisy = [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    state = state.replace(params=jax.tree.unflatten(tree, noisy))
    _, batch = jax.jit(trainer.sampler.collect)(state.sampler_state, state.params)
    return trainer, state, batch


# One jitted final_values for the file (compiled once per agent).
jit_final_values = jax.jit(final_values, static_argnums=0)
jit_truncation_values = jax.jit(truncation_values, static_argnums=0)


@pytest.mark.parametrize(
    "recurrent",
    [False, pytest.param(True, marks=pytest.mark.slow)],  # recurrent: ~6 s more
    ids=["feedforward", "recurrent"],
)
def test_final_values_are_next_values_and_truncation_values(recurrent):
    trainer, state, batch = collected(recurrent)
    agent, params, samples = trainer.agent, state.params, batch.samples
    fv = np.asarray(jit_final_values(agent, params, samples))
    env = samples.env
    done, truncated = np.asarray(env.done), np.asarray(env.truncated)
    assert fv.shape == done.shape and truncated.sum() >= 4
    # Not done: V(final obs of t) is what the agent reported at t + 1 (or bootstrap_value).
    value = np.asarray(samples.agent.agent_info.value)
    following = np.concatenate([value[1:], np.asarray(samples.bootstrap_value)[None]])
    np.testing.assert_allclose(fv[~done], following[~done], rtol=1e-5, atol=1e-5)
    # Truncated: independently, from agent.unroll over the env's whole sequence with
    # the step after t replaced by the inputs the agent would have seen had the
    # episode gone on (true final observation, action[t], reward[t]) and no reset
    # there: its value at t + 1 is V(final obs of t) from the state after step t.
    reset = np.concatenate([np.zeros_like(done[:1]), done[:-1]])
    inputs = js.AgentInputs(env.observation, samples.agent.prev_action, env.prev_reward)
    final_obs = env.final_observation
    T = done.shape[0]

    @jax.jit
    def reference(t, b):
        pad = lambda x: jnp.concatenate([x, x[-1:]])  # noqa: E731  (T + 1 steps)
        seq = jax.tree.map(lambda x: pad(x[:, b]), inputs)
        nxt = js.AgentInputs(final_obs[t, b], samples.agent.action[t, b], env.reward[t, b])
        seq = jax.tree.map(lambda s, n: s.at[t + 1].set(n), seq, nxt)
        seq_reset = pad(jnp.asarray(reset)[:, b]).at[t + 1].set(False)
        init = jax.tree.map(lambda x: x[b], samples.agent.initial_state)
        if recurrent:
            return agent.unroll(params, seq, init, seq_reset)[1][t + 1]
        return agent.value(params, nxt, ())

    for t, b in zip(*np.nonzero(truncated), strict=True):
        assert fv[t, b] == pytest.approx(float(reference(t, b)), rel=1e-5, abs=1e-5)
        # ... and the final observation is the true one, not the reset one.
        assert not np.allclose(final_obs[t, b], env.observation[min(t + 1, T - 1), b])
    # What GAE reads (PPO's truncation_values: only the store's slots for the
    # feedforward agent): final_values at the truncated steps, zeros elsewhere.
    tv = np.asarray(jit_truncation_values(agent, params, samples))
    np.testing.assert_allclose(tv[truncated], fv[truncated], rtol=1e-6, atol=1e-6)
    assert (tv[~truncated] == 0).all()


def test_final_values_needs_stored_state_for_recurrent_agent():
    trainer, state, batch = collected(True)
    samples = batch.samples.replace(agent=batch.samples.agent.replace(state=None))
    with pytest.raises(ValueError, match="store_agent_state"):
        final_values(trainer.agent, state.params, samples)


@pytest.mark.parametrize(
    "recurrent",
    [False, pytest.param(True, marks=pytest.mark.slow)],  # recurrent: ~10 s more
    ids=["feedforward", "recurrent"],
)
def test_loss_inputs_reproduce_the_behaviour_policy(recurrent):
    """At the collection params, the re-evaluated log-probs and values are the
    sampler's (ratio 1): the recurrent re-unroll resets exactly where the sampler did."""
    trainer, state, batch = collected(recurrent)
    rollout = trainer.rollout(state.params, batch.samples)
    mbs = trainer.minibatches(
        rollout, jax.random.key(5), trainer.config.num_minibatches, trainer.shard
    )
    for i in range(trainer.config.num_minibatches):
        mb = jax.tree.map(lambda x, i=i: x[i], mbs)
        log_prob, _, value = trainer.evaluate_minibatch(trainer.agent, state.params, mb)
        np.testing.assert_allclose(log_prob, mb.log_prob, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(value, mb.value, rtol=1e-5, atol=1e-5)
    if recurrent:
        assert np.asarray(rollout.reset).any() and not np.asarray(rollout.reset[0]).any()
    # The value targets of the truncated steps bootstrap from the final observation.
    env = batch.samples.env
    fv = jit_final_values(trainer.agent, state.params, batch.samples)
    t, b = np.nonzero(np.asarray(env.truncated & ~env.terminated))
    want = np.asarray(env.reward + trainer.config.gamma * fv)[t, b]
    np.testing.assert_allclose(np.asarray(rollout.target)[t, b], want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------
# The compiled trainer
# ----------------------------------------------------------------------------


@functools.cache
def tiny_trainer(recurrent: bool) -> ppo.PPO:
    return ppo.make_train(tiny_config(recurrent=recurrent))


@functools.cache
def jitted_train():
    return jax.jit(tiny_trainer(False).train)


@pytest.mark.slow
def test_train_vmaps_over_seeds_and_learning_rates():
    """2 seeds x 2 learning rates in one program (the recurrent variant is vmapped
    over seeds in its learning test)."""
    trainer = tiny_trainer(False)
    n_iter = trainer.num_iterations
    assert n_iter == 3
    seeds = jnp.asarray([0, 1, 0, 1], jnp.uint32)
    keys = jax.vmap(jax.random.key)(seeds)
    hp = trainer.hparams(lr=jnp.asarray([1e-3, 1e-3, 3e-3, 3e-3]))
    assert hp.ent_coef.shape == (4,) and float(hp.clip_eps[0]) == pytest.approx(0.2)
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys, hp)
    for name in ("env_steps", "episode_return_mean", "loss", "pg_loss", "value_loss", "lr"):
        assert metrics[name].shape == (4, n_iter), name
        assert metrics[name].dtype == jnp.float32, name
    np.testing.assert_array_equal(metrics["env_steps"][0], [64.0, 128.0, 192.0])
    assert (
        js.metrics.as_dict(jax.tree.map(lambda x: x[0], state.metrics))["environment_steps"] == 192
    )
    # lr annealed linearly from hparams.lr: 1, 2/3, 1/3 of it.
    np.testing.assert_allclose(metrics["lr"][2], 3e-3 * np.array([1, 2 / 3, 1 / 3]), rtol=1e-6)
    assert np.isfinite(metrics["loss"]).all()
    np.testing.assert_array_equal(state.iteration, [3, 3, 3, 3])
    leaves = [np.asarray(x) for x in jax.tree.leaves(state.params)]
    # Same seed, different lr: different params; the collected data of the first
    # iteration (before any update) is the same.
    assert any(not np.allclose(x[0], x[2]) for x in leaves)
    assert metrics["episode_return_mean"][0, 0] == metrics["episode_return_mean"][2, 0] or (
        np.isnan(metrics["episode_return_mean"][0, 0])
        and np.isnan(metrics["episode_return_mean"][2, 0])
    )
    # Different seeds: different params.
    assert any(not np.allclose(x[0], x[1]) for x in leaves)
    # A run inside the vmap is the run on its own.
    _, one_metrics = jitted_train()(keys[3], jax.tree.map(lambda x: x[3], hp))
    np.testing.assert_allclose(one_metrics["loss"], metrics["loss"][3], rtol=1e-4, atol=1e-5)


def test_train_is_deterministic_and_default_hparams():
    trainer = tiny_trainer(False)
    train, hp = jitted_train(), trainer.hparams()
    s1, m1 = train(jax.random.key(7), hp)
    s2, m2 = train(jax.random.key(7), hp)
    jax.tree.map(np.testing.assert_array_equal, (s1.params, m1), (s2.params, m2))
    s3, _ = train(jax.random.key(8), hp)
    assert not np.allclose(jax.tree.leaves(s1.params)[0], jax.tree.leaves(s3.params)[0])
    # hparams=None means the config's values.
    a, b = trainer.init(jax.random.key(7)), trainer.init(jax.random.key(7), hp)
    jax.tree.map(np.testing.assert_array_equal, (a.params, a.hparams), (b.params, b.hparams))
    assert float(hp.lr) == pytest.approx(2.5e-4) and hp.lr.dtype == jnp.float32


def test_run_continues_without_retracing():
    trainer = tiny_trainer(False)

    @functools.partial(jax.jit, static_argnums=1)
    @chex.assert_max_traces(n=1)
    def run(state, num_iterations):
        return trainer.run(state, num_iterations)

    state, metrics = run(trainer.init(jax.random.key(0)), 2)
    assert metrics["loss"].shape == (2,)
    state, metrics = run(state, 2)  # continues the run; annealing clamps at 0 past its end
    assert int(state.iteration) == 4
    np.testing.assert_array_equal(metrics["env_steps"], [192.0, 256.0])
    np.testing.assert_allclose(metrics["lr"], [2.5e-4 / 3, 0.0], rtol=1e-6, atol=1e-12)


@pytest.mark.slow
def test_gaussian_policy_runs():
    trainer = ppo.make_train(tiny_config(env_name="Pendulum-v1", num_minibatches=4))
    assert isinstance(trainer.agent, js.agents.GaussianActorCritic)
    _, metrics = jax.jit(trainer.train)(jax.random.key(0))
    assert np.isfinite(metrics["loss"]).all()


def test_config_validation():
    with pytest.raises(ValueError, match="num_minibatches"):
        ppo.PPOConfig(num_envs=4, num_steps=10, num_minibatches=3)
    with pytest.raises(ValueError, match="num_envs"):
        ppo.PPOConfig(recurrent=True, num_envs=4, num_minibatches=3, num_steps=12)
    with pytest.raises(ValueError, match="gamma"):
        ppo.PPOConfig(gamma=1.5)
    with pytest.raises(TypeError, match="num_envs"):
        ppo.PPOConfig(num_envs=4.0)
    with pytest.raises(ValueError, match="total_timesteps"):
        ppo.PPOConfig(total_timesteps=100)
    with pytest.raises(ValueError, match="rnn_cell"):
        ppo.PPOConfig(rnn_cell="rnn")
    with pytest.raises(ValueError, match="env_name"):
        ppo.make_train(ppo.PPOConfig(env_name="NoSuchEnv-v0"))
    with pytest.raises(ValueError, match="mask_velocity"):
        ppo.make_train(ppo.PPOConfig(env_name="Catch-bsuite", mask_velocity=True))
    trainer = tiny_trainer(False)
    with pytest.raises(ValueError, match="unknown hparams"):
        trainer.hparams(learning_rate=1.0)
    with pytest.raises(ValueError, match=r"hparams\.lr must be a scalar"):
        trainer.init(jax.random.key(0), trainer.hparams(lr=jnp.ones(2)))
    cfg = ppo.PPOConfig()
    assert (cfg.batch_size, cfg.minibatch_size, cfg.num_iterations) == (512, 128, 976)
    assert dataclasses.replace(cfg, hidden_sizes=[8]).hidden_sizes == (8,)


# ----------------------------------------------------------------------------
# Learning (the slow part of the suite; fixed seeds, so deterministic)
# ----------------------------------------------------------------------------


def train_returns(config: ppo.PPOConfig, n_seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """Per seed: the mean return of the last ``metrics_window`` episodes, and of
    all the episodes completed in the last quarter of the run."""
    trainer = ppo.make_train(config)
    keys = jax.random.split(jax.random.key(0), n_seeds)
    _, metrics = jax.jit(jax.vmap(trainer.train))(keys)
    metrics = jax.tree.map(np.asarray, metrics)
    tail = slice(-(trainer.num_iterations // 4), None)
    returns, counts = metrics["episode_return_mean"][:, tail], metrics["n_episodes"][:, tail]
    tail_mean = (np.nan_to_num(returns) * counts).sum(1) / np.maximum(counts.sum(1), 1)
    return metrics["average_return"][:, -1], tail_mean


@pytest.mark.slow
def test_feedforward_ppo_learns_cartpole():
    """CleanRL's setup at a fifth of its budget: 4 seeds, vmapped (~15 s)."""
    returns, _ = train_returns(ppo.PPOConfig(total_timesteps=100_000), n_seeds=4)
    assert (returns > 150).sum() >= 3, returns
    assert returns.mean() > 180, returns


@pytest.mark.slow
def test_recurrent_ppo_learns_a_memory_task_no_feedforward_policy_can():
    """bsuite's MemoryChain (gymnax): the context bit is shown at the first
    step only, and the last step pays +1 or -1 for an action that matches it
    or not. At that step the observation (time left, query) is the same for
    either context, so any memoryless policy has expected return 0, whatever
    it learns; above 0.8 the agent remembers. The preset's recurrent PPO, 2
    seeds, 16k steps each. (Masked CartPole, docs/guides/training.md's
    example, needs ten times the budget: a manual run, see that guide.)"""
    config = dataclasses.replace(
        ppo.MASKED_CARTPOLE_RECURRENT,
        env_name="MemoryChain-bsuite",
        mask_velocity=False,
        total_timesteps=16_384,
    )
    _, recurrent = train_returns(config, n_seeds=2)
    print("MemoryChain, last-quarter returns:", recurrent)
    assert recurrent.min() > 0.8, recurrent


def test_minibatch_permutation_is_a_uniform_permutation_in_jaxs_rounds():
    """ppo.permutation: every n gives a permutation of range(n), the same one
    for the same key, in 1 sort below n ~ 1600 and 2 above (as
    jax.random.permutation); each element lands on each position equally often."""
    for n in (1, 7, 512, 5000):
        perm = np.asarray(jax.jit(ppo.permutation, static_argnums=1)(jax.random.key(n), n))
        np.testing.assert_array_equal(np.sort(perm), np.arange(n))
        np.testing.assert_array_equal(perm, np.asarray(ppo.permutation(jax.random.key(n), n)))
    sorts = [str(jax.make_jaxpr(ppo.permutation, static_argnums=1)(jax.random.key(0), n)).count(
        "sort[") for n in (512, 5000)]  # fmt: skip
    assert sorts == [1, 2]
    keys = jax.random.split(jax.random.key(1), 4000)
    perms = np.asarray(jax.vmap(lambda k: ppo.permutation(k, 4))(keys))
    counts = np.stack([(perms == i).sum(axis=0) for i in range(4)])  # [element, position]
    chi2 = ((counts - 1000.0) ** 2 / 1000.0).sum()
    assert chi2 < 40, counts  # 16 cells, 9 degrees of freedom: p < 1e-5 if uniform


def _dots_outside_loop_bodies(compiled_hlo: str) -> int:
    """How many ``dot`` instructions of a compiled HLO module run on every
    call: in the computations reachable from ``ENTRY`` other than through a
    ``while`` loop's ``body``."""
    import re

    bodies: dict[str, str] = {}
    name = None
    for line in compiled_hlo.splitlines():
        head = re.match(r"^(ENTRY )?%([\w.\-]+) ", line)
        if head and line.rstrip().endswith("{"):
            name = "ENTRY" if head.group(1) else head.group(2)
            bodies[name] = ""
        elif name is not None:
            bodies[name] += line + "\n"
    edge = re.compile(r"(calls|condition|to_apply|branch_computations)=\{?%([\w.\-]+)")
    seen, todo = set(), ["ENTRY"]
    while todo:
        comp = todo.pop()
        if comp not in seen:
            seen.add(comp)
            todo += [callee for _, callee in edge.findall(bodies.get(comp, ""))]
    return sum(bodies.get(comp, "").count(" dot(") for comp in seen)


def test_when_runs_fn_only_where_due_batched_or_not() -> None:
    """``jaxsample.algos.games.when`` (a game's evaluations): ``fn`` where
    due, NaN elsewhere (lane by lane under vmap), and ``fn``'s work stays in
    the body of a loop that runs only where due, batched or not: nothing of it
    runs on a call where no lane is due (it would if XLA hoisted ``fn`` out of
    the loop, or if vmap made a ``cond`` run both branches)."""

    def fn(x):
        for _ in range(3):
            x = jnp.tanh(x @ x)
        return {"y": x.sum()}

    x = jnp.full((4, 16, 16), 0.01)
    want = np.asarray(jax.jit(jax.vmap(fn))(x)["y"])
    batched = jax.jit(jax.vmap(lambda d, x: when(d, fn, x)))
    got = np.asarray(batched(jnp.array([True, False, True, False]), x)["y"])
    np.testing.assert_allclose(got[[0, 2]], want[[0, 2]], rtol=1e-6)
    assert np.isnan(got[[1, 3]]).all()

    def dots(f, *args):
        return _dots_outside_loop_bodies(f.lower(*args).compile().as_text())

    # the measure sees fn's three matmuls where they run on every call
    assert dots(jax.jit(jax.vmap(fn)), x) == 3
    assert dots(batched, jnp.zeros(4, bool), x) == 0
    single = jax.jit(lambda d, x: when(d, fn, x))
    assert dots(single, jnp.asarray(False), x[0]) == 0
    skipped = single(jnp.asarray(False), x[0])["y"]
    assert np.isnan(skipped)

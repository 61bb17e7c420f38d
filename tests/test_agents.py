"""Tests of the learning agents (unbatched protocol, vmapped here over a few envs)."""

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

import jaxsample.agents as A
from jaxsample.types import AgentInputs, AgentStep

# conftest.py sets this too; repeated so the file is strict when run on its own.
jax.config.update("jax_numpy_rank_promotion", "raise")

B = 5
N_ACTIONS = 4
BOX_SHAPE = (2,)
# A pytree observation of one env: 3 + 2 * 2 = 7 features once flattened.
OBS = {"pos": jnp.zeros((3,), jnp.float32), "grid": jnp.zeros((2, 2), jnp.float32)}


def discrete() -> spaces.Discrete:
    return spaces.Discrete(N_ACTIONS)


def box() -> spaces.Box:
    return spaces.Box(-2.0, 2.0, BOX_SHAPE, jnp.float32)


AGENTS = {
    "categorical": lambda: A.CategoricalActorCritic(discrete(), hidden_sizes=(16, 16)),
    "gaussian": lambda: A.GaussianActorCritic(box(), hidden_sizes=(16, 16)),
    "gru-discrete": lambda: A.RecurrentActorCritic(discrete(), hidden_size=8, cell="gru"),
    "lstm-box": lambda: A.RecurrentActorCritic(
        box(), hidden_size=8, cell="lstm", encoder_sizes=(16,)
    ),
    "epsilon-greedy": lambda: A.EpsilonGreedyAgent(
        discrete(),
        global_B=B,
        hidden_sizes=(16,),
        epsilon_init=0.5,
        epsilon_final=0.1,
        epsilon_final_min=0.001,
    ),
}
agent_ids = pytest.mark.parametrize("name", list(AGENTS))
# The tests that compile per agent run a representative subset by default
# (discrete feedforward, Box recurrent, epsilon-greedy); the Box feedforward
# and discrete GRU agents are compiled by test_gaussian_matches_formula and
# test_recurrent_unroll_equals_loop_of_steps, and run here in the slow set.
_SLOW_AGENTS = ("gaussian", "gru-discrete")
compiled_agent_ids = pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_AGENTS else n for n in AGENTS],
)


def random_obs(key: jax.Array, n: int) -> dict:
    k1, k2 = jax.random.split(key)
    return {
        "pos": jax.random.normal(k1, (n, 3), jnp.float32),
        "grid": jax.random.normal(k2, (n, 2, 2), jnp.float32),
    }


def random_inputs(agent, key: jax.Array, n: int = B) -> AgentInputs:
    """``n`` envs' inputs (leading axis ``n``), with random previous actions and rewards."""
    k_obs, k_act, k_rew = jax.random.split(key, 3)
    prev_action = jax.vmap(agent.action_space.sample)(jax.random.split(k_act, n))
    return AgentInputs(
        observation=random_obs(k_obs, n),
        prev_action=prev_action,
        prev_reward=jax.random.normal(k_rew, (n,), jnp.float32),
    )


def one(tree, i: int = 0):
    return jax.tree.map(lambda x: x[i], tree)


@functools.cache
def make_agent(name: str):
    """One shared instance per name, so jitted functions are compiled once per file."""
    return AGENTS[name]()


@functools.cache
def setup(name: str, seed: int = 0):
    """``(agent, params, inputs [B], states [B], keys [B])`` (shared: arrays are immutable)."""
    agent = make_agent(name)
    params = agent.init(jax.random.key(seed), OBS)
    inputs = random_inputs(agent, jax.random.key(seed + 100))
    states = jax.vmap(agent.initial_state)(jnp.arange(B, dtype=jnp.int32))
    keys = jax.vmap(lambda r: jax.random.fold_in(jax.random.key(seed + 200), r))(jnp.arange(B))
    return agent, params, inputs, states, keys


@functools.cache
def vstep(agent, jit: bool = True):
    """``agent.step`` vmapped over envs (jitted unless ``jit=False``: eager is slow)."""
    fn = jax.vmap(agent.step, in_axes=(None, 0, 0, 0))
    return jax.jit(fn) if jit else fn


@functools.cache
def vvalue(agent, jit: bool = True):
    fn = jax.vmap(agent.value, in_axes=(None, 0, 0))
    return jax.jit(fn) if jit else fn


def assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def np_log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def np_features(obs: dict) -> np.ndarray:
    """Flatten a batch of pytree observations like the agents do (``jax.tree.leaves`` order)."""
    leaves = jax.tree.leaves(obs)
    return np.concatenate([np.asarray(x).reshape(x.shape[0], -1) for x in leaves], axis=1)


def np_mlp(p: dict, x: np.ndarray, n_hidden: int, head: str, torso: str) -> np.ndarray:
    for i in range(n_hidden):
        layer = p[torso][f"dense_{i}"]
        x = np.tanh(x @ np.asarray(layer["kernel"]) + np.asarray(layer["bias"]))
    return x @ np.asarray(p[head]["kernel"]) + np.asarray(p[head]["bias"])


# ----------------------------------------------------------------------------
# Protocol, shapes and dtypes
# ----------------------------------------------------------------------------


@agent_ids
def test_shapes_and_dtypes_under_vmap(name):
    agent, params, inputs, states, keys = setup(name)
    assert isinstance(agent, A.Agent)
    # Traced only (jax.eval_shape): the values are checked by the other tests.
    out, next_states = jax.eval_shape(vstep(agent, jit=False), params, inputs, states, keys)
    assert isinstance(out, AgentStep)
    space = agent.action_space
    act_shape = () if isinstance(space, spaces.Discrete) else BOX_SHAPE
    assert out.action.shape == (B, *act_shape)
    assert out.action.dtype == jnp.dtype(space.dtype)
    assert jax.tree.structure(next_states) == jax.tree.structure(states)
    for s, s2 in zip(jax.tree.leaves(states), jax.tree.leaves(next_states), strict=True):
        assert s.shape == s2.shape and s.dtype == s2.dtype
    info = out.agent_info
    if name == "epsilon-greedy":
        assert isinstance(info, A.EpsilonGreedyInfo)
        assert info.q_values.shape == (B, N_ACTIONS) and info.q_values.dtype == jnp.float32
        assert info.epsilon.shape == (B,) and info.epsilon.dtype == jnp.float32
    else:
        assert isinstance(info, A.ActorCriticInfo)
        assert info.log_prob.shape == (B,) and info.log_prob.dtype == jnp.float32
        assert info.value.shape == (B,) and info.value.dtype == jnp.float32
        if isinstance(space, spaces.Discrete):
            assert info.dist_params.shape == (B, N_ACTIONS)
        else:
            mean, log_std = info.dist_params
            assert mean.shape == log_std.shape == (B, *BOX_SHAPE)
            assert mean.dtype == log_std.dtype == jnp.float32
    value = jax.eval_shape(vvalue(agent, jit=False), params, inputs, states)
    assert value.shape == (B,) and value.dtype == jnp.float32
    # The sampler's own check: one env, traced with abstract inputs.
    spec = jax.eval_shape(agent.value, params, one(inputs), one(states))
    assert spec.shape == () and spec.dtype == jnp.float32


@compiled_agent_ids
def test_jit_matches_eager_and_does_not_retrace(name):
    agent, params, inputs, states, keys = setup(name)
    traces = []

    def fn(p, inp, st, k):
        traces.append(None)
        return vstep(agent, jit=False)(p, inp, st, k), vvalue(agent, jit=False)(p, inp, st)

    eager = fn(params, inputs, states, keys)
    jitted = jax.jit(fn)
    assert_trees_close(jitted(params, inputs, states, keys), eager)
    new_params = agent.init(jax.random.key(7), OBS)
    jitted(new_params, inputs, states, keys)
    assert len(traces) == 2  # one eager call, one trace for both jitted calls


@compiled_agent_ids
def test_same_key_same_action(name):
    agent, params, inputs, states, keys = setup(name)
    a1 = vstep(agent)(params, inputs, states, keys)[0].action
    a2 = vstep(agent)(params, inputs, states, keys)[0].action
    np.testing.assert_array_equal(a1, a2)
    # Different keys give different behaviour somewhere (the policy is stochastic).
    many = jax.jit(jax.vmap(lambda k: agent.step(params, one(inputs), one(states), k)[0].action))(
        jax.random.split(jax.random.key(3), 64)
    )
    assert len(np.unique(np.asarray(many), axis=0)) > 1


def _expected_clipped(dist_params, space) -> np.ndarray:
    """An independent reference: E[clip(x, low, high)], x ~ N(mean, std), by
    a Riemann sum over the Gaussian's density (scipy-free, float64)."""
    mean, log_std = (np.asarray(x, np.float64) for x in dist_params)
    std = np.exp(log_std)
    low = np.broadcast_to(np.asarray(space.low, np.float64), mean.shape)
    high = np.broadcast_to(np.asarray(space.high, np.float64), mean.shape)
    z = np.linspace(-12, 12, 48001)
    density = np.exp(-0.5 * z**2) / np.sqrt(2 * np.pi)
    x = mean[..., None] + std[..., None] * z
    clipped = np.clip(x, low[..., None], high[..., None])
    return (clipped * density).sum(-1) * (z[1] - z[0])


def test_the_greedy_gaussian_action_is_the_mean_of_the_executed_action() -> None:
    """Its mean beyond a bound is not that bound (a bang-bang controller):
    E[clip(a)] under the policy; well inside the bounds, the mean."""
    from jaxsample.agents.actor_critic import GaussianHead

    head = GaussianHead(shape=(3,), dtype=jnp.float32, low=(-1.0,) * 3, high=(1.0, 1.0, 2.0))
    mean = jnp.array([1.8, 0.1, -0.3])
    log_std = jnp.log(jnp.array([0.83, 1e-3, 0.5]))
    action = np.asarray(head.mode((mean, log_std)))
    space = spaces.Box(-1.0, jnp.array([1.0, 1.0, 2.0]), (3,), jnp.float32)
    np.testing.assert_allclose(action, _expected_clipped((mean, log_std), space), atol=1e-5)
    assert 0.5 < action[0] < 0.95  # not clip(1.8) = 1
    assert abs(action[1] - 0.1) < 1e-6  # a sharp policy inside the bounds: its mean
    unbounded = GaussianHead(shape=(3,), dtype=jnp.float32)
    np.testing.assert_array_equal(np.asarray(unbounded.mode((mean, log_std))), mean)


@compiled_agent_ids
def test_eval_agent_is_deterministic_and_greedy(name):
    agent, params, inputs, states, keys = setup(name)
    ev = agent.as_eval()
    assert type(ev) is type(agent) and ev != agent
    assert ev.as_eval() == ev
    out1 = vstep(ev)(params, inputs, states, keys)[0]
    other_keys = jax.random.split(jax.random.key(99), B)
    out2 = vstep(ev)(params, inputs, states, other_keys)[0]
    np.testing.assert_array_equal(out1.action, out2.action)
    info = out1.agent_info
    if name == "epsilon-greedy":
        expected = np.argmax(np.asarray(info.q_values), axis=-1)
        np.testing.assert_allclose(info.epsilon, np.zeros(B))
    elif isinstance(agent.action_space, spaces.Discrete):
        expected = np.argmax(np.asarray(info.dist_params), axis=-1)
    else:  # the mean of the executed (clipped) action, E[clip(a, low, high)]
        expected = _expected_clipped(info.dist_params, agent.action_space)
    np.testing.assert_allclose(np.asarray(out1.action), expected, rtol=1e-5, atol=1e-6)
    # The training agent's network outputs are the same (only the action choice differs).
    train_info = vstep(agent)(params, inputs, states, keys)[0].agent_info
    if name == "epsilon-greedy":
        assert_trees_close(train_info.q_values, info.q_values)
    else:
        assert_trees_close(train_info.dist_params, info.dist_params)
        assert_trees_close(train_info.value, info.value)


@agent_ids
def test_batched_observation_is_a_clear_error(name):
    agent, params, inputs, states, keys = setup(name)
    with pytest.raises(ValueError, match="ONE environment"):
        jax.eval_shape(agent.step, params, inputs, one(states), keys[0])


def test_works_with_gymnax_envs():
    """Agent and env fit together (traced only: shapes and dtypes, no compilation)."""
    import gymnax

    for env_name, make in (
        ("CartPole-v1", lambda s: A.CategoricalActorCritic(s)),
        ("Pendulum-v1", lambda s: A.GaussianActorCritic(s)),
        ("CartPole-v1", lambda s: A.RecurrentActorCritic(s, hidden_size=8)),
        ("Pendulum-v1", lambda s: A.RecurrentActorCritic(s, hidden_size=8, cell="lstm")),
        ("CartPole-v1", lambda s: A.EpsilonGreedyAgent(s, global_B=B)),
    ):
        env, env_params = gymnax.make(env_name)
        space = env.action_space(env_params)
        agent = make(space)

        def rollout_step(key, agent=agent, env=env, env_params=env_params, space=space):
            keys = jax.random.split(key, 4)
            obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
                jax.random.split(keys[0], B), env_params
            )
            params = agent.init(keys[1], one(obs))
            null = A.null_action(space)
            inputs = AgentInputs(
                obs, jnp.broadcast_to(null, (B, *null.shape)), jnp.zeros((B,), jnp.float32)
            )
            states = jax.vmap(agent.initial_state)(jnp.arange(B, dtype=jnp.int32))
            out, _ = vstep(agent, jit=False)(params, inputs, states, jax.random.split(keys[2], B))
            env_out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(keys[3], B), env_state, out.action, env_params
            )
            return out, env_out

        out, _ = jax.eval_shape(rollout_step, jax.random.key(0))
        assert out.action.shape == (B, *A.action_spec(space).shape)
        assert out.action.dtype == A.action_spec(space).dtype


# ----------------------------------------------------------------------------
# Feedforward actor-critics
# ----------------------------------------------------------------------------


def test_categorical_matches_numpy():
    agent, params, inputs, states, keys = setup("categorical")
    out = vstep(agent)(params, inputs, states, keys)[0]
    info = out.agent_info
    p = params["params"]
    x = np_features(inputs.observation)
    logits = np_mlp(p, x, 2, "policy_head", "actor")
    value = np_mlp(p, x, 2, "value_head", "critic")[:, 0]
    np.testing.assert_allclose(info.dist_params, logits, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(info.value, value, rtol=1e-4, atol=1e-6)
    log_p = np_log_softmax(logits)
    action = np.asarray(out.action)
    np.testing.assert_allclose(info.log_prob, log_p[np.arange(B), action], rtol=1e-5)
    entropy = -(np.exp(log_p) * log_p).sum(-1)

    all_actions = jnp.arange(N_ACTIONS, dtype=jnp.int32)
    obs0 = one(inputs.observation)
    lp_all = jax.vmap(agent.log_prob, in_axes=(None, None, 0))(params, obs0, all_actions)
    np.testing.assert_allclose(lp_all, log_p[0], rtol=1e-5)
    np.testing.assert_allclose(agent.entropy(params, obs0), entropy[0], rtol=1e-5)
    lp, ent, val = jax.vmap(agent.evaluate, in_axes=(None, 0, 0))(params, inputs, out.action)
    np.testing.assert_allclose(lp, info.log_prob, rtol=1e-5)
    np.testing.assert_allclose(ent, entropy, rtol=1e-5)
    np.testing.assert_allclose(val, info.value, rtol=1e-5)
    np.testing.assert_allclose(
        jax.vmap(agent.dist_log_prob)(info.dist_params, out.action), info.log_prob, rtol=1e-6
    )
    np.testing.assert_allclose(jax.vmap(agent.dist_entropy)(info.dist_params), entropy, rtol=1e-5)


def test_categorical_sampling_frequencies():
    agent, params, *_ = setup("categorical")
    # Make the logits a known constant: zero policy kernel, chosen bias.
    bias = jnp.asarray([0.0, 1.0, -1.0, 0.5], jnp.float32)
    head = {"kernel": jnp.zeros_like(params["params"]["policy_head"]["kernel"]), "bias": bias}
    params = {"params": {**params["params"], "policy_head": head}}
    n = 8000
    inputs = AgentInputs(OBS, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32))
    actions = jax.jit(jax.vmap(lambda k: agent.step(params, inputs, (), k)[0].action))(
        jax.random.split(jax.random.key(1), n)
    )
    freq = np.bincount(np.asarray(actions), minlength=N_ACTIONS) / n
    np.testing.assert_allclose(freq, np.exp(np_log_softmax(np.asarray(bias))), atol=0.02)


def test_gaussian_matches_formula():
    agent, params, inputs, states, keys = setup("gaussian")
    log_std = jnp.asarray([-0.5, 0.3], jnp.float32)
    params = {"params": {**params["params"], "log_std": log_std}}
    out = vstep(agent)(params, inputs, states, keys)[0]
    mean, ls = (np.asarray(x) for x in out.agent_info.dist_params)
    p = params["params"]
    x = np_features(inputs.observation)
    np.testing.assert_allclose(mean, np_mlp(p, x, 2, "policy_head", "actor"), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ls, np.broadcast_to(np.asarray(log_std), (B, 2)))
    a = np.asarray(out.action, np.float64)
    std = np.exp(ls.astype(np.float64))
    density = np.prod(np.exp(-0.5 * ((a - mean) / std) ** 2) / (std * np.sqrt(2 * np.pi)), -1)
    np.testing.assert_allclose(out.agent_info.log_prob, np.log(density), rtol=1e-5)
    entropy = np.sum(0.5 * np.log(2 * np.pi * np.e * std**2), -1)
    lp, ent, val = jax.vmap(agent.evaluate, in_axes=(None, 0, 0))(params, inputs, out.action)
    np.testing.assert_allclose(lp, np.log(density), rtol=1e-5)
    np.testing.assert_allclose(ent, entropy, rtol=1e-5)
    np.testing.assert_allclose(val, out.agent_info.value, rtol=1e-6)  # two programs: 1 ulp
    obs0 = one(inputs.observation)
    np.testing.assert_allclose(agent.entropy(params, obs0), entropy[0], rtol=1e-5)
    np.testing.assert_allclose(agent.log_prob(params, obs0, out.action[0]), lp[0], rtol=1e-6)
    # Samples are unclipped draws from N(mean, std): check the moments.
    draws = jax.vmap(lambda k: agent.step(params, one(inputs), (), k)[0].action)(
        jax.random.split(jax.random.key(5), 8000)
    )
    np.testing.assert_allclose(np.mean(draws, 0), mean[0], atol=0.05)
    np.testing.assert_allclose(np.std(draws, 0), std[0], rtol=0.05)


@pytest.mark.parametrize("name", ["categorical", "gaussian"])
def test_cleanrl_orthogonal_init(name):
    _, params, *_ = setup(name)
    p = params["params"]

    def check(layer, scale):
        k = np.asarray(layer["kernel"], np.float64)
        gram = k.T @ k if k.shape[0] >= k.shape[1] else k @ k.T
        np.testing.assert_allclose(gram, scale**2 * np.eye(gram.shape[0]), atol=1e-5)
        np.testing.assert_array_equal(layer["bias"], np.zeros(k.shape[1]))

    for torso in ("actor", "critic"):
        for i in range(2):
            check(p[torso][f"dense_{i}"], math.sqrt(2.0))
    check(p["policy_head"], 0.01)
    check(p["value_head"], 1.0)
    if name == "gaussian":
        np.testing.assert_array_equal(p["log_std"], np.zeros(BOX_SHAPE))


def test_actor_critic_activation_and_no_hidden_layers():
    agent = A.CategoricalActorCritic(discrete(), hidden_sizes=[], activation=nn.relu)
    assert agent.hidden_sizes == ()
    params = agent.init(jax.random.key(0), OBS)
    inputs = AgentInputs(OBS, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32))
    out, _ = agent.step(params, inputs, (), jax.random.key(1))
    assert out.action.shape == () and out.action.dtype == jnp.int32


# ----------------------------------------------------------------------------
# Recurrent
# ----------------------------------------------------------------------------

# Discrete GRU and Box LSTM by default; the other two pairs in the slow set.
RECURRENT = pytest.mark.parametrize(
    "space_fn,cell",
    [
        (discrete, "gru"),
        pytest.param(discrete, "lstm", marks=pytest.mark.slow),
        pytest.param(box, "gru", marks=pytest.mark.slow),
        (box, "lstm"),
    ],
)


def loop_of_steps(agent, params, inputs, state0, reset, keys):
    """Reference: a Python loop of ``step`` with resets (one env, time-major)."""
    state = state0
    step = jax.jit(agent.step)
    infos, actions = [], []
    for t in range(reset.shape[0]):
        if bool(reset[t]):
            state = agent.initial_state(jnp.zeros((), jnp.int32))
        out, state = step(params, one(inputs, t), state, keys[t])
        infos.append(out.agent_info)
        actions.append(out.action)
    stack = lambda xs: jax.tree.map(lambda *x: jnp.stack(x), *xs)  # noqa: E731
    return stack(infos), stack(actions), state


@RECURRENT
def test_recurrent_unroll_equals_loop_of_steps(space_fn, cell):
    T = 9
    agent = A.RecurrentActorCritic(space_fn(), hidden_size=8, cell=cell)
    params = agent.init(jax.random.key(0), OBS)
    inputs = random_inputs(agent, jax.random.key(1), T)
    reset = jnp.asarray([False, False, False, True, False, False, True, True, False])
    # Start from a non-zero state, as a later batch would.
    state0 = jax.tree.map(
        lambda x: jax.random.normal(jax.random.key(2), x.shape, x.dtype),
        agent.initial_state(jnp.zeros((), jnp.int32)),
    )
    keys = jax.random.split(jax.random.key(3), T)
    infos, actions, final = loop_of_steps(agent, params, inputs, state0, reset, keys)

    @jax.jit
    def learner(params, inputs, state0, reset, actions):
        no_reset = jnp.zeros_like(reset)
        return (
            agent.unroll(params, inputs, state0, reset),
            agent.unroll(params, inputs, state0, no_reset)[1],
            agent.evaluate_sequence(params, inputs, state0, reset, actions),
        )

    unrolled, values_nr, evaluated = learner(params, inputs, state0, reset, actions)
    dist_params, values, final_u = unrolled
    assert values.shape == (T,) and values.dtype == jnp.float32
    assert_trees_close(dist_params, infos.dist_params, rtol=1e-5, atol=1e-6)
    assert_trees_close(values, infos.value, rtol=1e-5, atol=1e-6)
    assert_trees_close(final_u, final, rtol=1e-5, atol=1e-6)

    log_prob, entropy, value = evaluated
    assert log_prob.shape == entropy.shape == value.shape == (T,)
    np.testing.assert_allclose(log_prob, infos.log_prob, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, infos.value, rtol=1e-5, atol=1e-6)
    step_entropy = jax.vmap(agent.dist_entropy)(infos.dist_params)
    np.testing.assert_allclose(entropy, step_entropy, rtol=1e-5, atol=1e-6)

    # Without resets the result differs (the state carries information).
    assert not np.allclose(values_nr[3:], values[3:])
    np.testing.assert_allclose(values_nr[:3], values[:3], rtol=1e-6)


def test_recurrent_unroll_vmaps_over_envs():
    T = 6
    agent = A.RecurrentActorCritic(discrete(), hidden_size=8, cell="lstm")
    params = agent.init(jax.random.key(0), OBS)
    inputs = jax.tree.map(
        lambda x: x.reshape(B, T, *x.shape[1:]), random_inputs(agent, jax.random.key(1), B * T)
    )
    state0 = jax.vmap(agent.initial_state)(jnp.arange(B, dtype=jnp.int32))
    reset = jax.random.bernoulli(jax.random.key(2), 0.3, (B, T))
    actions = jax.random.randint(jax.random.key(3), (B, T), 0, N_ACTIONS, jnp.int32)
    batched = jax.jit(jax.vmap(agent.evaluate_sequence, in_axes=(None, 0, 0, 0, 0)))
    lp, ent, val = batched(params, inputs, state0, reset, actions)
    assert lp.shape == ent.shape == val.shape == (B, T)
    one_env = jax.jit(agent.evaluate_sequence)
    for b in range(B):
        lp_b = one_env(params, one(inputs, b), one(state0, b), reset[b], actions[b])[0]
        np.testing.assert_allclose(lp[b], lp_b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_recurrent_state_and_value(cell):
    agent = A.RecurrentActorCritic(discrete(), hidden_size=8, cell=cell)
    state = agent.initial_state(jnp.asarray(3, jnp.int32))
    n_leaves = 1 if cell == "gru" else 2
    assert len(jax.tree.leaves(state)) == n_leaves
    for x in jax.tree.leaves(state):
        assert x.shape == (8,) and x.dtype == jnp.float32
        np.testing.assert_array_equal(x, np.zeros(8))
    params = agent.init(jax.random.key(0), OBS)
    inputs = one(random_inputs(agent, jax.random.key(1)))
    out, next_state = agent.step(params, inputs, state, jax.random.key(2))
    assert not all(np.allclose(x, 0) for x in jax.tree.leaves(next_state))
    # value() reports the step's value, returns only a scalar, and leaves the state alone.
    v = agent.value(params, inputs, next_state)
    assert isinstance(v, jax.Array) and v.shape == ()
    out2, state2 = agent.step(params, inputs, next_state, jax.random.key(2))
    np.testing.assert_allclose(v, out2.agent_info.value, rtol=1e-6)
    np.testing.assert_allclose(agent.value(params, inputs, state), out.agent_info.value, rtol=1e-6)
    out3, state3 = agent.step(params, inputs, next_state, jax.random.key(2))
    assert_trees_close(state2, state3)
    assert_trees_close(out2, out3)


@pytest.mark.parametrize("space_fn", [discrete, box])
def test_recurrent_prev_action_and_reward_inputs(space_fn):
    key = jax.random.key(0)
    for use_a, use_r in ((True, False), (False, True)):
        agent = A.RecurrentActorCritic(
            space_fn(), hidden_size=8, use_prev_action=use_a, use_prev_reward=use_r
        )
        params = agent.init(key, OBS)
        state = agent.initial_state(jnp.zeros((), jnp.int32))
        base = one(random_inputs(agent, jax.random.key(1)))
        other_action = base._replace(prev_action=agent.action_space.sample(jax.random.key(9)))
        if isinstance(agent.action_space, spaces.Discrete):
            other_action = base._replace(prev_action=(base.prev_action + 1) % N_ACTIONS)
        other_reward = base._replace(prev_reward=base.prev_reward + 1.0)
        v = agent.value(params, base, state)
        changed_a = not np.isclose(agent.value(params, other_action, state), v)
        changed_r = not np.isclose(agent.value(params, other_reward, state), v)
        assert changed_a == use_a
        assert changed_r == use_r
        n_feat = 7 + (N_ACTIONS if space_fn is discrete else 2) * use_a + use_r
        assert agent.features(base).shape == (n_feat,)


def test_recurrent_unroll_checks_reset():
    agent, params, *_ = setup("gru-discrete")
    inputs = random_inputs(agent, jax.random.key(1), 4)
    state = agent.initial_state(jnp.zeros((), jnp.int32))
    with pytest.raises(ValueError, match="reset"):
        agent.unroll(params, inputs, state, jnp.zeros((5,), bool))
    with pytest.raises(ValueError, match="reset"):
        agent.unroll(params, inputs, state, jnp.zeros((4,), jnp.int32))
    with pytest.raises(ValueError, match="state"):
        agent.step(params, one(inputs), (state, state), jax.random.key(0))


# ----------------------------------------------------------------------------
# Constructor errors
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: A.CategoricalActorCritic(box()),
        lambda: A.GaussianActorCritic(discrete()),
        lambda: A.RecurrentActorCritic(spaces.Tuple([discrete(), discrete()])),
        lambda: A.EpsilonGreedyAgent(box(), global_B=2),
        lambda: A.GaussianActorCritic(spaces.Box(0, 3, (2,), jnp.int32)),
    ],
)
def test_wrong_action_space_is_a_type_error(make):
    with pytest.raises(TypeError, match="action_space"):
        make()


@pytest.mark.parametrize(
    "make,field",
    [
        (lambda: A.CategoricalActorCritic(discrete(), hidden_sizes=(0,)), "hidden_sizes"),
        (lambda: A.GaussianActorCritic(box(), log_std_init=math.inf), "log_std_init"),
        (lambda: A.RecurrentActorCritic(discrete(), cell="rnn"), "cell"),
        (lambda: A.RecurrentActorCritic(discrete(), hidden_size=0), "hidden_size"),
        (lambda: A.RecurrentActorCritic(discrete(), encoder_sizes=(-1,)), "encoder_sizes"),
        (lambda: A.EpsilonGreedyAgent(discrete(), global_B=0), "global_B"),
        (lambda: A.EpsilonGreedyAgent(discrete(), 2, epsilon_init=1.5), "epsilon_init"),
        (lambda: A.EpsilonGreedyAgent(discrete(), 2, epsilon_final=-0.1), "epsilon_final"),
        (
            lambda: A.EpsilonGreedyAgent(discrete(), 2, epsilon_final_min=0.0),
            "epsilon_final_min",
        ),
        (
            lambda: A.EpsilonGreedyAgent(discrete(), 2, epsilon_final=0.01, epsilon_final_min=0.1),
            "epsilon_final_min",
        ),
        (lambda: A.EpsilonGreedyAgent(discrete(), 2, eval_epsilon=2.0), "eval_epsilon"),
        (lambda: A.EpsilonGreedyAgent(discrete(), 2, hidden_sizes=(8, 0)), "hidden_sizes"),
    ],
)
def test_bad_arguments_are_value_errors(make, field):
    with pytest.raises(ValueError, match=field):
        make()


@pytest.mark.parametrize(
    "make,field",
    [
        (lambda: A.CategoricalActorCritic(discrete(), greedy=1), "greedy"),
        (lambda: A.CategoricalActorCritic(discrete(), activation="tanh"), "activation"),
        (lambda: A.RecurrentActorCritic(discrete(), use_prev_action=None), "use_prev_action"),
        (lambda: A.RecurrentActorCritic(discrete(), hidden_size=8.0), "hidden_size"),
        (lambda: A.EpsilonGreedyAgent(discrete(), global_B=2.0), "global_B"),
    ],
)
def test_bad_argument_types_are_type_errors(make, field):
    with pytest.raises(TypeError, match=field):
        make()


@pytest.mark.parametrize(
    "agent",
    [
        A.CategoricalActorCritic(spaces.Discrete(3), hidden_sizes=(5, 7)),
        A.GaussianActorCritic(spaces.Box(-1.0, 1.0, (2,)), hidden_sizes=(6,), activation=nn.relu),
        A.CategoricalActorCritic(spaces.Discrete(2), hidden_sizes=()),
    ],
    ids=["categorical", "gaussian", "no-hidden"],
)
def test_actor_critic_apply_is_flax_apply_op_for_op(agent) -> None:
    """The feedforward actor-critics apply their network without flax's module
    machinery (`apply_actor_critic`): the same jaxpr as the flax module's
    ``apply``, so the same program and values."""
    from jaxsample.agents.actor_critic import apply_actor_critic

    params = agent.init(jax.random.key(0), jnp.zeros(4))
    params = jax.tree.map(lambda p: p + 0.1 * jnp.arange(p.size).reshape(p.shape), params)
    layers, x = len(agent.hidden_sizes), jnp.linspace(-1.0, 1.0, 4)

    def ours(p, x):
        return apply_actor_critic(p, x, layers, agent.activation)

    assert str(jax.make_jaxpr(ours)(params, x)) == str(
        jax.make_jaxpr(agent.network.apply)(params, x)
    )
    got, want = ours(params, x), agent.network.apply(params, x)
    assert (got[1] is None) == (want[1] is None)
    for g, w in zip(got, want, strict=True):
        if w is not None:
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))

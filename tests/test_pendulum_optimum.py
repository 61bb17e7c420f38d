"""tools/pendulum_optimum.py: the dynamic-programming bound on Pendulum-v1's
return, checked against gymnax's own env."""

from __future__ import annotations

import pickle
import sys
import types
from pathlib import Path

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import pendulum_optimum as po


@pytest.fixture(scope="module")
def pendulum() -> tuple:
    return gymnax.make("Pendulum-v1")


def test_the_written_out_dynamics_are_gymnaxs(pendulum: tuple) -> None:
    env, params = pendulum
    key = jax.random.PRNGKey(3)
    _, state = env.reset(key, params)
    theta = jax.random.uniform(key, (500,), minval=-9.0, maxval=9.0)
    dot = jax.random.uniform(jax.random.fold_in(key, 1), (500,), minval=-8.0, maxval=8.0)
    torque = jax.random.uniform(jax.random.fold_in(key, 2), (500,), minval=-3.0, maxval=3.0)

    def gymnax_step(theta, dot, torque):
        s = state.replace(theta=theta, theta_dot=dot)
        _, s, reward = env.step(key, s, torque[None], params)[:3]
        return s.theta, s.theta_dot, reward

    ours = po.model_step(params, theta, dot, torque)
    theirs = jax.vmap(gymnax_step)(theta, dot, torque)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_the_dp_policy_reaches_its_own_value_on_gymnax_and_beats_simple_controllers(
    pendulum: tuple,
) -> None:
    env, params = pendulum
    grid = po.Grid(params, 60, 61, 9)
    values = grid.values()
    assert values.shape == (po.HORIZON + 1, 60, 61)
    assert np.all(np.asarray(values[-1]) == 0)
    key = jax.random.PRNGKey(0)
    returns, starts = po.play(env, params, po.dp_policy(grid, values), po.BLOCK, key)
    value = float(grid.at(values[0], starts.theta, starts.theta_dot).mean())
    # the grid's estimate and what its policy really gets in gymnax's env meet
    assert abs(float(returns.mean()) - value) < 3.0, (returns.mean(), value)
    # ... and beat doing nothing and a hand-made energy-pumping swing-up on the same starts
    idle, _ = po.play(env, params, lambda obs, state, t: jnp.zeros(1), po.BLOCK, key)

    def pump(obs, state, t):
        upright = jnp.cos(state.theta) > 0.9
        balance = -10.0 * po.angle(state.theta) - 2.0 * state.theta_dot
        return jnp.clip(jnp.where(upright, balance, 2.0 * jnp.sign(state.theta_dot)), -2, 2)[None]

    pumped, _ = po.play(env, params, pump, po.BLOCK, key)
    assert returns.mean() > pumped.mean() + 10 and pumped.mean() > idle.mean()


def test_a_gymnax_blines_checkpoint_loads_without_dotmap(tmp_path: Path) -> None:
    # a pickle as gymnax-blines writes it: the config a dotmap.DotMap, params nested dicts
    fake = types.ModuleType("dotmap")

    class DotMap:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    DotMap.__module__, DotMap.__qualname__ = "dotmap", "DotMap"
    fake.DotMap = DotMap
    rng = np.random.default_rng(0)
    layers = {
        n: {"kernel": rng.normal(size=s), "bias": rng.normal(size=s[1])}
        for n, s in (
            ("Dense_0", (3, 8)),
            ("Dense_1", (8, 8)),
            ("Dense_2", (8, 1)),
            ("Dense_3", (8, 1)),
        )
    }
    sys.modules["dotmap"] = fake
    try:
        blob = pickle.dumps({"network": {"params": layers}, "train_config": DotMap(lr=1.0)})
    finally:
        del sys.modules["dotmap"]
    path = tmp_path / "es.pkl"
    path.write_bytes(blob)
    policy = po.blines_policy(str(path))
    obs = np.array([0.3, -0.9, 1.5])
    h = np.maximum(obs @ layers["Dense_0"]["kernel"] + layers["Dense_0"]["bias"], 0)
    h = np.maximum(h @ layers["Dense_1"]["kernel"] + layers["Dense_1"]["bias"], 0)
    mean = h @ layers["Dense_2"]["kernel"] + layers["Dense_2"]["bias"]
    np.testing.assert_allclose(policy(jnp.asarray(obs), None, 0), mean, rtol=1e-5)


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--grid", "3", "50"], "--grid"),
        (["--torques", "1"], "--torques"),
        (["--episodes", "100"], "--episodes"),
        (["--checkpoint", "/nonexistent/es.pkl"], "--checkpoint: no file"),
    ],
)
def test_bad_arguments_are_one_line_naming_the_flag(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        po.main(argv)
    assert stop.value.code == 2
    assert named in capsys.readouterr().err


def test_a_checkpoint_of_another_shape_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.pkl").write_bytes(pickle.dumps({"weights": [1, 2]}))
    (tmp_path / "b.pkl").write_bytes(pickle.dumps({"network": {"params": {"Dense_0": {}}}}))
    (tmp_path / "c.pkl").write_bytes(b"not a pickle")
    for name, named in (("a", "['network']['params']"), ("b", "Dense_1, Dense_2"), ("c", "")):
        with pytest.raises(SystemExit) as stop:
            po.main(["--checkpoint", str(tmp_path / f"{name}.pkl")])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert "--checkpoint:" in err and named in err, err

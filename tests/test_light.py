"""Issue 50 item 5: the light layer (configs, registry, presets, errors)
imports no JAX nor numpy; a config error names its field as data
(``ConfigError.field``), which the command line writes as the field's flag;
``jaxsample train --env X --help`` shows X's preset values as the defaults."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from jaxsample._checks import MAX_REPLAY_CAPACITY, check_int
from jaxsample.algos import presets
from jaxsample.algos.configs import MASKED_CARTPOLE_RECURRENT, DQNConfig, PPOConfig
from jaxsample.cli import main
from jaxsample.errors import ConfigError, ConfigTypeError, UsageError

LIGHT = (
    "jaxsample.errors",
    "jaxsample._checks",
    "jaxsample.algos.configs",
    "jaxsample.algos.off_policy_configs",
    "jaxsample.algos.registry",
    "jaxsample.algos.presets",
    "jaxsample.bench.schema",
    "jaxsample.cli.parser",
)


def test_the_light_layer_imports_no_jax_nor_numpy() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for m in {LIGHT!r}: importlib.import_module(m)\n"
        "from jaxsample.algos import presets\n"
        "presets.get('Breakout-MinAtar').config()\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout))
    assert loaded.isdisjoint({"jax", "jaxlib", "numpy", "flax", "optax", "gymnax"}), loaded


@pytest.mark.parametrize(
    ("make", "field", "kind"),
    [
        (lambda: PPOConfig(lr=0.0), "lr", ValueError),
        (lambda: PPOConfig(num_envs=8.0), "num_envs", TypeError),
        (lambda: PPOConfig(env_name=3), "env_name", TypeError),
        (lambda: PPOConfig(hidden_sizes=(0,)), "hidden_sizes", ValueError),
        (lambda: PPOConfig(num_minibatches=3), "num_minibatches", ValueError),
        (lambda: PPOConfig(total_timesteps=10), "total_timesteps", ValueError),
        (lambda: PPOConfig(rnn_cell="tcn"), "rnn_cell", ValueError),
        (lambda: PPOConfig(anneal_lr=1), "anneal_lr", TypeError),
        (lambda: DQNConfig(buffer_capacity=MAX_REPLAY_CAPACITY + 1), "buffer_capacity", ValueError),
        (lambda: DQNConfig(epsilon_final_min=0.5), "epsilon_final_min", ValueError),
        (lambda: DQNConfig(loss="l1"), "loss", ValueError),
        (lambda: check_int("T", 0, 1), "T", ValueError),
    ],
)
def test_a_config_error_names_its_field_as_data(make, field, kind) -> None:
    """The field is an attribute; the error stays the ``ValueError`` /
    ``TypeError`` callers caught before."""
    with pytest.raises(ConfigError) as info:
        make()
    error = info.value
    assert error.field == field and isinstance(error, kind)
    assert isinstance(error, ConfigTypeError) == (kind is TypeError)
    assert str(error) == f"{field} {error.problem}"
    assert error.named("--flag") == f"--flag {error.problem}"


def test_an_unknown_env_is_an_error_of_env_name() -> None:
    from jaxsample.algos.common import make_env

    with pytest.raises(ConfigError) as info:
        make_env(PPOConfig(env_name="CartPol-v1"), None, None)
    assert info.value.field == "env_name" and isinstance(info.value, ValueError)
    assert "did you mean 'CartPole-v1'?" in str(info.value)


@pytest.mark.parametrize(
    ("flags", "file", "match"),
    [
        ({"total_timesteps": 10}, {}, "--total-steps (10) must be >= num_envs * num_steps"),
        ({"num_envs": 0}, {}, "--num-envs must be >= 1, got 0"),
        ({"lr": [1e-3, 0.0]}, {}, "--lr must be in (0.0, inf], got 0.0"),
        ({}, {"num_minibatches": 3}, "--config 'c.toml': num_minibatches (3) must divide"),
        ({"num_minibatches": 3}, {"num_minibatches": 2}, "--num-minibatches (3) must divide"),
    ],
)
def test_the_command_line_writes_the_fields_flag(flags, file, match) -> None:
    """The flag comes from the parser's own table (`field_flag`), the file key
    where only the file set the field."""
    from jaxsample.cli.config import resolve_config

    with pytest.raises(UsageError) as info:
        resolve_config("ppo", "CartPole-v1", False, file, flags, "c.toml")
    assert str(info.value).startswith(match), str(info.value)


def test_the_flag_table_is_the_parsers() -> None:
    from jaxsample.cli.config import field_flag, usage_error
    from jaxsample.cli.parser import _parser

    _, sub, _ = _parser(["train"])
    options = {o for a in sub.choices["train"]._actions for o in a.option_strings}
    for field in ("num_envs", "total_timesteps", "hidden_sizes", "env_name", "mask_velocity"):
        assert field_flag(field) in options, field
    assert field_flag("total_timesteps") == "--total-steps"
    error = ConfigError("env_name", "'CartPol-v1': unknown")
    assert str(usage_error(error, {}, {}, None)) == "--env 'CartPol-v1': unknown"


def _help_defaults(argv: list[str], capsys) -> tuple[str, dict[str, str]]:
    """``(the config group's title, {flag: its shown default})`` of ``train
    ARGV --help``."""
    with pytest.raises(SystemExit) as info:
        main(["train", *argv, "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    title = re.search(r"(\w+Config fields \([^)]*\)):", text).group(1)
    flag = r"(--[\w-]+)(?: [A-Z\[\],.]+)?(?:,? --[\w-]+ [A-Z]+)? \(default: ([^;)]*)"
    shown = dict(re.findall(flag, text))
    return title, shown


def _expected(config) -> dict[str, str]:
    return {
        "--num-envs": str(config.num_envs),
        "--total-steps": str(config.total_timesteps),
        "--lr": str(config.lr),
        "--hidden-sizes": ",".join(map(str, config.hidden_sizes)),
        "--anneal-lr": str(config.anneal_lr).lower(),
    }


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        (["--env", "Breakout-MinAtar"], "preset Breakout-MinAtar"),
        (["--preset", "Breakout-MinAtar"], "preset Breakout-MinAtar"),
        (["--env-id", "Breakout-MinAtar"], "preset Breakout-MinAtar"),
        (["--config", "CONFIG"], "preset Breakout-MinAtar"),
        ([], "preset CartPole-v1"),  # the default env's preset: what a plain run trains
        (["--env", "Breakout-MinAtar", "--preset", "none"], None),
        (["--mask-velocity"], "the --mask-velocity config"),
    ],
)
def test_help_shows_the_presets_values_as_the_defaults(argv, where, tmp_path, capsys) -> None:
    (tmp_path / "c.toml").write_text('env = "Breakout-MinAtar"\n')
    argv = [str(tmp_path / "c.toml") if a == "CONFIG" else a for a in argv]
    title, shown = _help_defaults(argv, capsys)
    if where is None:
        config = PPOConfig()
    elif where.startswith("preset"):
        config = presets.get(where.split()[1]).config()
    else:
        config = MASKED_CARTPOLE_RECURRENT
    assert title.endswith(f"; defaults: {where})" if where else "vf_coef)"), title
    assert {k: shown[k] for k in _expected(config)} == _expected(config)


def test_help_of_the_breakout_preset_is_not_the_plain_defaults(capsys) -> None:
    """The issue's case: 10M steps on 64 envs, not 500000 on 4."""
    _, plain = _help_defaults(["--preset", "none"], capsys)
    _, breakout = _help_defaults(["--env", "Breakout-MinAtar"], capsys)
    preset = presets.get("Breakout-MinAtar").values
    assert (plain["--total-steps"], plain["--num-envs"]) == ("500000", "4")
    assert breakout["--total-steps"] == str(preset["total_timesteps"]) != "500000"
    assert breakout["--num-envs"] == str(preset["num_envs"]) != "4"


def test_help_of_an_algorithm_without_the_envs_preset_shows_its_defaults(capsys) -> None:
    title, shown = _help_defaults(["--algo", "dqn", "--env", "Breakout-MinAtar"], capsys)
    assert "defaults:" not in title
    assert shown["--num-envs"] == str(DQNConfig().num_envs)
    assert shown["--buffer-capacity"] == str(DQNConfig().buffer_capacity)


def test_help_with_an_unknown_preset_says_so(capsys) -> None:
    with pytest.raises(UsageError, match=r"no preset 'Acrobot' \(did you mean Acrobot-v1\?\)"):
        main(["train", "--preset", "Acrobot", "--help"])
    assert "did you mean Acrobot-v1?" in capsys.readouterr().err

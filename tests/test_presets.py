"""Issue 44 item 1: presets. ``jaxsample train --env NAME`` starts from the
preset tuned for NAME (``jaxsample/algos/presets.toml``, package data);
``--preset none`` gives the plain defaults, ``--preset NAME`` another; the
config file and the flags override it; the JSON and run.json name it."""

from __future__ import annotations

import dataclasses
import json
import zipfile

import pytest

from jaxsample.algos import presets
from jaxsample.algos.configs import (
    SELF_PLAY_CONNECT_FOUR,
    SELF_PLAY_TIC_TAC_TOE,
    PPOConfig,
)
from jaxsample.cli import main

GYMNAX_PRESETS = (
    "CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0",
    "Catch-bsuite", "Breakout-MinAtar", "Asterix-MinAtar", "Freeway-MinAtar",
    "SpaceInvaders-MinAtar",
)  # fmt: skip
SUITE_PRESETS = (
    "brax/inverted_pendulum", "pgx/tic_tac_toe", "pgx/connect_four",
    "jaxmarl/MPE_simple_spread_v3",
)  # fmt: skip


OFF_POLICY_PRESETS = ("Pendulum-v1:sac", "Pendulum-v1:td3", "brax/inverted_pendulum:sac")
PQN_PRESETS = tuple(
    f"{env}:pqn"
    for env in (
        "CartPole-v1",
        *(f"{g}-MinAtar" for g in ("Breakout", "Asterix", "SpaceInvaders", "Freeway")),
    )
)


def test_every_entry_builds_a_valid_config_and_names_its_source() -> None:
    import gymnax

    from jaxsample.algos import registry

    fields = {f.name for f in dataclasses.fields(PPOConfig)}
    ppo = [p for p in presets.presets().values() if p.algo == "ppo"]
    assert [p.name for p in ppo] == [*GYMNAX_PRESETS, *SUITE_PRESETS]
    assert [p.name for p in presets.presets().values() if p.algo != "ppo"] == [
        *OFF_POLICY_PRESETS, *PQN_PRESETS
    ]  # fmt: skip
    for preset in ppo:
        assert set(preset.values) <= fields - {"env_name"}, preset.name
        config = preset.config()
        assert config.env_name == preset.env == preset.name and preset.algo == "ppo"
    for preset in presets.presets().values():  # the naming rule: ENV, or ENV:ALGO
        algo_fields = {f.name for f in dataclasses.fields(registry.get(preset.algo).config_type)}
        assert set(preset.values) <= algo_fields - {"env_name"}, preset.name
        config = preset.config()
        assert isinstance(config, registry.get(preset.algo).config_type)
        assert (
            preset.name == presets.name_of(preset.env, preset.algo)
            and config.env_name == preset.env
        )
        assert preset.source and preset.mapping
        assert all(getattr(config, k) == (tuple(v) if isinstance(v, list) else v)
                   for k, v in preset.values.items())  # fmt: skip
        assert presets.for_env(preset.env, preset.algo) is preset
    for name in GYMNAX_PRESETS:
        assert name in gymnax.registered_envs
        assert "gymnax-blines agents/" + name + "/ppo.yaml" in presets.get(name).source
    assert presets.for_env("CartPole-v1", "dqn") is None and presets.for_env("Nope-v0") is None


def test_the_env_and_the_algo_choose_the_preset(ran) -> None:
    assert ran("--env", "Pendulum-v1", "--algo", "sac")["preset"] == "Pendulum-v1:sac"
    assert ran("--env", "Pendulum-v1", "--algo", "td3")["preset"] == "Pendulum-v1:td3"
    assert ran("--env", "Pendulum-v1")["preset"] == "Pendulum-v1"
    call = ran("--env", "Pendulum-v1", "--algo", "sac", "--preset", "none")
    assert call["preset"] is None and call["config"].num_envs == 1


def test_gymnax_blines_values_mapped_onto_our_fields() -> None:
    """Spot checks against gymnax-blines' files (commit 3f029d6): the
    settings that differ between envs."""
    cartpole, mountain = presets.get("CartPole-v1").config(), presets.get("MountainCar-v0").config()
    # CartPole's steps and rate are sized for time to solve (its mapping says how)
    assert (cartpole.num_envs, cartpole.num_steps, cartpole.total_timesteps) == (8, 32, 100_000)
    assert (cartpole.lr, cartpole.anneal_lr, cartpole.max_grad_norm) == (1e-3, False, 0.5)
    assert (mountain.update_epochs, mountain.ent_coef, mountain.total_timesteps) == (
        64, 0.003, 250_000
    )  # fmt: skip
    for name in ("Breakout-MinAtar", "Asterix-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar"):
        c = presets.get(name).config()
        assert (c.gamma, c.num_envs, c.num_steps, c.num_minibatches) == (0.999, 64, 128, 8)
        assert (c.hidden_sizes, c.total_timesteps) == ((256, 256), 10_000_000)
    # Pendulum keeps the source's budget; its batch is tuned here, and says so
    pendulum = presets.get("Pendulum-v1")
    assert pendulum.config().total_timesteps == 10**6
    assert (pendulum.config().num_envs, pendulum.config().num_steps) == (16, 256)
    assert "16 envs x 256 steps" in pendulum.mapping


def test_the_pgx_presets_are_the_self_play_settings() -> None:
    assert presets.get("pgx/tic_tac_toe").config() == SELF_PLAY_TIC_TAC_TOE
    assert presets.get("pgx/connect_four").config() == SELF_PLAY_CONNECT_FOUR


def test_the_env_chooses_its_preset(ran) -> None:
    call = ran("--env", "Acrobot-v1")
    assert call["preset"] == "Acrobot-v1"
    assert call["config"] == presets.get("Acrobot-v1").config()
    call = ran()  # the default env, CartPole-v1, has one too
    assert call["preset"] == "CartPole-v1" and call["config"].num_envs == 8


def test_the_pgx_games_default_to_self_play() -> None:
    """Issue 43 item 4's first part (resolved without building the env: the
    test extra has no Pgx)."""
    from jaxsample.cli.config import choose_preset, resolve_config

    for env, config in (
        ("pgx/tic_tac_toe", SELF_PLAY_TIC_TAC_TOE), ("pgx/connect_four", SELF_PLAY_CONNECT_FOUR)
    ):  # fmt: skip
        preset = choose_preset(None, "ppo", env, False)
        assert preset.name == env
        assert resolve_config("ppo", env, False, {}, {}, None, preset)[0] == config


def test_no_preset_for_other_envs_dqn_or_masked_velocities(ran) -> None:
    call = ran("--env", "Asterix-MinAtar", "--algo", "dqn", "--total-steps", "100")
    assert call["preset"] is None
    assert ran("--algo", "dqn")["config"].num_envs == 10
    call = ran("--env", "DeepSea-bsuite")
    assert call["preset"] is None and call["config"] == PPOConfig(env_name="DeepSea-bsuite")
    assert ran("--mask-velocity")["preset"] is None


def test_flags_and_the_config_file_override_the_preset(ran, tmp_path) -> None:
    c = ran("--env", "Acrobot-v1", "--num-envs", "4", "--max-grad-norm", "0.25")["config"]
    assert (c.num_envs, c.max_grad_norm, c.num_steps, c.lr) == (4, 0.25, 32, 2e-3)
    (tmp_path / "c.toml").write_text('env = "Acrobot-v1"\nnum_steps = 8\nlr = 1e-3\n')
    call = ran("--config", str(tmp_path / "c.toml"), "--lr", "3e-3")
    c = call["config"]
    assert (c.num_steps, c.lr, c.num_envs, call["preset"]) == (8, 3e-3, 16, "Acrobot-v1")


def test_preset_none_gives_the_plain_defaults(ran, tmp_path) -> None:
    call = ran("--env", "Acrobot-v1", "--preset", "none")
    assert call["preset"] is None and call["config"] == PPOConfig(env_name="Acrobot-v1")
    (tmp_path / "c.yaml").write_text("preset: none\n")
    call = ran("--config", str(tmp_path / "c.yaml"))
    assert call["preset"] is None and call["config"] == PPOConfig()


def test_preset_name_picks_one_explicitly(ran) -> None:
    call = ran("--env", "CartPole-v1", "--preset", "Acrobot-v1")
    assert call["preset"] == "Acrobot-v1"
    assert call["config"] == presets.get("Acrobot-v1").config(env_name="CartPole-v1")
    assert ran("--algo", "ppo-rnn", "--preset", "CartPole-v1")["config"].recurrent is True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--preset", "Acrobot"], "no preset 'Acrobot' (did you mean Acrobot-v1?)"),
        (["--algo", "dqn", "--preset", "CartPole-v1"], "is for --algo ppo, not dqn"),
        (["--mask-velocity", "--preset", "CartPole-v1"], "goes without --mask-velocity"),
    ],
)
def test_a_bad_preset_is_one_line(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["train", *argv])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and err.count("\n") == 0 and message in err, err


def test_run_json_names_the_preset_and_resumes_runs_recorded_before_it() -> None:
    from jaxsample.runs.folder import differences
    from jaxsample.runs.run import record_of

    config = presets.get("Catch-bsuite").config()
    record = record_of(config, 0, 1, {}, "Catch-bsuite")
    assert record["preset"] == "Catch-bsuite" and record["config"]["num_envs"] == 16
    older = {k: v for k, v in record.items() if k != "preset"}  # a run.json from before
    assert differences(older, record) == []
    other = record_of(dataclasses.replace(config, lr=1e-3), 0, 1, {}, "Catch-bsuite")
    assert differences(record, other) == ["lr: saved 0.0005, now 0.001"]


def test_the_json_of_a_run_records_its_preset(tmp_path) -> None:
    """One real iteration of the Catch preset (16 envs x 32 steps)."""
    out = tmp_path / "run.json"
    argv = ["train", "--env", "Catch-bsuite", "--total-steps", "512", "--chunks", "1"]
    assert main([*argv, "--json", str(out), "--no-compile-cache"]) == 0
    data = json.loads(out.read_text())
    assert data["preset"] == "Catch-bsuite" and data["config"]["num_envs"] == 16
    assert data["config"]["total_timesteps"] == 512 and "learning_rate" not in data["config"]


@pytest.mark.slow  # builds a wheel (~10 s on 2 cores)
def test_a_wheel_holds_the_presets(tmp_path) -> None:
    """Package data (pyproject.toml): without it the wheel has presets.py only."""
    pytest.importorskip("setuptools", minversion="77")  # the build backend, not isolated
    from helpers import build_wheel

    with zipfile.ZipFile(build_wheel(tmp_path)) as wheel:
        text = wheel.read("jaxsample/algos/presets.toml").decode()
    assert '["CartPole-v1"]' in text and "gymnax-blines" in text


@pytest.mark.slow
@pytest.mark.parametrize("name", GYMNAX_PRESETS)
def test_each_gymnax_preset_trains_one_iteration(name, tmp_path) -> None:
    """A smoke run: the preset's program compiles and runs (not its returns)."""
    from jaxsample.runs import run

    config = presets.get(name).config()
    config = dataclasses.replace(config, total_timesteps=config.steps_per_iteration)
    result = run.train(config, chunks=1, progress=False, say=None, preset=name)
    assert result.exit_status == 0 and len(result.training.env_steps) == 1

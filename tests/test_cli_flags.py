"""Issue 43 item 2: flags as researchers type them. No prefix matching,
negative numbers as values, "did you mean" for every unknown flag of every
subcommand, CleanRL's names as aliases (flags and config-file keys, listed
once in ``--help``, one name in the run's config), booleans as CleanRL
writes them. Nothing here trains: ``jaxsample.runs.run.train`` is replaced
by a recorder of what the command would run."""

from __future__ import annotations

import pytest

from jaxsample.cli import main


def _error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err  # one line
    return err


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["train", "--num-env", "8"], "did you mean --num-envs?"),
        (["train", "--num-env=8"], "did you mean --num-envs?"),
        (["train", "--algo", "dqn", "--buffer-cap", "8"], "did you mean --buffer-capacity?"),
        (["collect", "--batch", "3"], "did you mean --batches?"),
        (["eval", "--checkpoint", "x", "--episode", "3"], "did you mean --episodes?"),
        (["bench", "--method", "bare"], "did you mean --methods?"),
        (["--versio"], "did you mean --version?"),
    ],
)
def test_a_prefix_of_a_flag_is_an_error_naming_the_flag(argv, hint, capsys) -> None:
    err = _error(argv, capsys)
    assert "unrecognized arguments" in err and hint in err, err


def test_every_unknown_flag_gets_its_own_suggestion(capsys) -> None:
    err = _error(["train", "--num-env", "8", "--lrr", "2", "--sed", "1"], capsys)
    assert "--num-envs for --num-env" in err and "--lr for --lrr" in err, err
    assert "--seed for --sed" in err, err
    err = _error(["envs", "--verbose"], capsys)
    assert err.startswith("jaxsample envs: error: unrecognized arguments: --verbose"), err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lr", "-1e-3"], "--lr must be in (0.0, inf], got -0.001"),
        (["--lr", "-1e-3,2e-3"], "--lr must be in (0.0, inf], got -0.001"),
        (["--lr=-1e-3"], "--lr must be in (0.0, inf], got -0.001"),
        (["--ent-coef", "-.5"], "--ent-coef must be in [0.0, inf], got -0.5"),
        (["--gamma", "-1E-2"], "--gamma must be in [0.0, 1.0], got -0.01"),
        (["--num-envs", "-4"], "--num-envs must be >= 1, got -4"),
        (["--learning-rate", "-3e-4"], "--learning-rate must be in (0.0, inf], got -0.0003"),
    ],
)
def test_negative_numbers_are_values_and_reach_the_range_check(argv, message, capsys) -> None:
    assert message in _error(["train", *argv], capsys)


def test_cleanrl_ppo_names_set_our_fields(ran) -> None:
    call = ran(
        "--env-id", "Acrobot-v1", "--learning-rate", "1e-3", "--clip-coef", "0.1",
        "--total-timesteps", "4096", "--num-envs", "8", "--num-steps", "16",
        "--gae-lambda", "0.9", "--num-minibatches", "2", "--update-epochs", "3",
        "--ent-coef", "0.02", "--vf-coef", "0.4", "--max-grad-norm", "1.5",
        "--norm-adv", "False", "--anneal-lr=false", "--clip-vloss", "no", "--gamma", "0.95",
        "--seed", "3", "--track", "--wandb-project-name", "mine",
    )  # fmt: skip
    c = call["config"]
    assert (c.env_name, c.lr, c.clip_eps, c.total_timesteps) == ("Acrobot-v1", 1e-3, 0.1, 4096)
    assert (c.num_envs, c.num_steps, c.gae_lambda, c.num_minibatches) == (8, 16, 0.9, 2)
    assert (c.update_epochs, c.ent_coef, c.vf_coef, c.max_grad_norm) == (3, 0.02, 0.4, 1.5)
    assert (c.normalize_advantages, c.anneal_lr, c.clip_vloss, c.gamma) == (False,) * 3 + (0.95,)
    assert call["seed"] == 3 and call["wandb_project"] == "mine"


def test_cleanrl_dqn_names_set_our_fields(ran) -> None:
    c = ran(
        "--algo", "dqn", "--learning-rate", "5e-4", "--start-e", "0.8", "--end-e", "0.1",
        "--target-network-frequency", "250", "--learning-starts", "100", "--batch-size", "32",
        "--exploration-fraction", "0.3", "--tau", "0.5", "--total-timesteps", "2000",
    )["config"]  # fmt: skip
    assert (c.lr, c.epsilon_init, c.epsilon_final, c.target_update_interval) == (
        5e-4, 0.8, 0.1, 250
    )  # fmt: skip
    assert (c.learning_starts, c.batch_size, c.exploration_fraction, c.tau) == (100, 32, 0.3, 0.5)


def test_cleanrl_names_without_a_counterpart_say_what_to_use(capsys) -> None:
    err = _error(["train", "--algo", "dqn", "--buffer-size", "10000"], capsys)
    assert "--buffer-capacity counts them per env" in err, err
    assert "--gradient-steps" in _error(["train", "--train-frequency", "10"], capsys)


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        (["--anneal-lr"], True),
        (["--anneal-lr", "False"], False),
        (["--anneal-lr=False"], False),
        (["--anneal-lr", "true"], True),
        (["--anneal-lr", "0"], False),
        (["--no-anneal-lr"], False),
        (["--no-anneal-lr", "--anneal-lr", "yes"], True),  # the last one wins
    ],
)
def test_booleans_as_cleanrl_users_type_them(ran, argv, value) -> None:
    assert ran("--total-steps", "512", *argv)["config"].anneal_lr is value


def test_a_bool_flag_given_something_else_is_one_line(capsys) -> None:
    assert "--anneal-lr 'maybe': expected true or false" in _error(
        ["train", "--anneal-lr", "maybe"], capsys
    )


@pytest.mark.parametrize("suffix", ["toml", "yaml"])
def test_cleanrl_names_are_config_file_keys_too(ran, tmp_path, suffix) -> None:
    text = {
        "toml": 'env_id = "Acrobot-v1"\nlearning_rate = 3e-4\nclip-coef = 0.3\n'
        "total_timesteps = 1024\n",
        "yaml": "env_id: Acrobot-v1\nlearning_rate: 3.0e-4\nclip-coef: 0.3\n"
        "total_timesteps: 1024\n",
    }[suffix]
    path = tmp_path / f"c.{suffix}"
    path.write_text(text)
    c = ran("--config", str(path))["config"]
    assert (c.env_name, c.lr, c.clip_eps, c.total_timesteps) == ("Acrobot-v1", 3e-4, 0.3, 1024)
    c = ran("--config", str(path), "--lr", "1e-3")["config"]  # the flag over the file
    assert c.lr == 1e-3


def test_a_setting_under_both_names_in_a_file_is_an_error(tmp_path, capsys) -> None:
    (tmp_path / "c.toml").write_text("lr = 1e-3\nlearning_rate = 3e-4\n")
    err = _error(["train", "--config", str(tmp_path / "c.toml")], capsys)
    assert "lr is set twice (also as learning_rate)" in err, err


def test_help_lists_the_cleanrl_names_once(capsys) -> None:
    for algo, alias in (("ppo", "--clip-coef = --clip-eps"), ("dqn", "--start-e = --epsilon-init")):
        with pytest.raises(SystemExit):
            main(["train", "--algo", algo, "--help"])
        text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")
        assert text.count("--learning-rate") == 1 and alias in text, text
        assert "CleanRL names that are ours already" in text


def test_the_config_keeps_our_names(ran) -> None:
    import dataclasses

    c = ran("--learning-rate", "1e-3", "--clip-coef", "0.3", "--total-steps", "512")["config"]
    names = {f.name for f in dataclasses.fields(c)}
    assert {"lr", "clip_eps"} <= names and not {"learning_rate", "clip_coef"} & names

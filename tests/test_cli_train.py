"""``jaxsample train`` / ``eval`` as a researcher drives them: flags and a config
file, CSV / TensorBoard / W&B logs read back, a run killed halfway and resumed
to the same final parameters (PPO and DQN), ``eval`` on the checkpoint, and the
JSON's reproducibility fields. Tiny runs: one compile per algorithm, shared by
the tests of this module (the trainer and its programs are reused in-process);
the tests that train are marked slow (CLI runs).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import logging
import math
import shutil
import struct
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsample import checkpoint
from jaxsample.algos.trainer import Reports
from jaxsample.cli import main

PPO_TOML = """\
num_envs = 2
num_steps = 8
total_timesteps = 64
hidden_sizes = [8]
update_epochs = 1
num_minibatches = 1
lr = 2.5e-4
"""
# 4 iterations of 16 steps, 2 chunks; 2 seeds x 2 learning rates = 4 runs; the
# plain defaults under the file (the learning rate annealed), not CartPole's preset.
PPO_ARGS = ["train", "--seeds", "2", "--lr", "1e-3,2e-3", "--chunks", "2", "--ent-coef", "0.02"]
PPO_ARGS += ["--preset", "none"]
# 6 iterations of 4 steps, 2 chunks of 3; learning from step 8.
DQN_ARGS = [
    "train", "--algo", "dqn", "--num-envs", "2", "--num-steps", "2", "--total-steps", "24",
    "--learning-starts", "8", "--batch-size", "4", "--buffer-capacity", "8",
    "--hidden-sizes", "8", "--target-update-interval", "8", "--chunks", "2",
]  # fmt: skip


def _run(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


class _Killed(BaseException):
    """Stands for the process being killed right after a checkpoint."""


def _run_killed_after_first_save(argv: list[str], monkeypatch) -> None:
    real = checkpoint.save

    def save_then_die(*args, **kwargs):
        real(*args, **kwargs)
        raise _Killed

    with monkeypatch.context() as m:
        m.setattr(checkpoint, "save", save_then_die)
        with pytest.raises(_Killed), contextlib.redirect_stdout(io.StringIO()):
            main(argv)


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("ppo")
    (d / "ppo.toml").write_text(PPO_TOML)
    files = ["--json", str(d / "run.json"), "--tensorboard", str(d / "tb")]
    files += ["--checkpoint-dir", str(d / "full"), "--config", str(d / "ppo.toml")]
    printed = _run([*PPO_ARGS, *files])
    return d, printed


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("dqn")
    with pytest.MonkeyPatch.context() as m:
        m.setenv("WANDB_MODE", "offline")
        m.setenv("WANDB_DIR", str(d))
        m.setenv("WANDB_SILENT", "true")
        argv = [*DQN_ARGS, "--checkpoint-dir", str(d / "full"), "--csv", str(d / "train.csv")]
        printed = _run([*argv, "--wandb"])
    return d, printed


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _metric_names(algo: str) -> set[str]:
    """The metrics the trainer's program returns (from its own output shapes)."""
    from jaxsample.cli.config import resolve_config
    from jaxsample.runs.run import build_trainer as _build

    config = resolve_config(algo, "CartPole-v1", False, {}, {"num_envs": 2, "num_steps": 2}).config
    trainer = _build(config)
    state = jax.eval_shape(trainer.init, jax.random.key(0))
    return set(jax.eval_shape(trainer.iteration, state)[1])


@pytest.mark.slow
def test_json_holds_config_seeds_versions_backend_and_times(ppo_run) -> None:
    d, printed = ppo_run
    result = json.loads((d / "run.json").read_text())
    # The file's values, then the flags over them.
    config = result["config"]
    assert (config["num_envs"], config["hidden_sizes"], config["ent_coef"]) == (2, [8], 0.02)
    assert result["sweep"] == {"lr": [1e-3, 2e-3]} and result["seed"] == 0
    assert result["run_seeds"] == [0, 0, 1, 1]
    assert result["run_settings"] == [{"lr": 1e-3}, {"lr": 2e-3}] * 2
    assert result["versions"]["jax"] == jax.__version__
    assert set(result["versions"]) == {"jaxsample", "jax", "jaxlib", "flax", "optax", "gymnax"}
    assert result["backend"] == jax.default_backend()
    assert result["device_kind"] == jax.devices()[0].device_kind
    assert result["compile_seconds"] > 0 and result["wall_seconds"] > 0
    assert result["curve"]["env_steps"] == [16, 32, 48, 64]
    assert len(result["curve"]["returns"]) == 4
    # The resolved config is printed at the start, the progress in plain lines.
    assert "config: PPOConfig(" in printed and "ent_coef=0.02" in printed
    assert "compiling" in printed and "steps/s" in printed and "ETA" in printed


def _tensorboard_scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """Read tensorboardX event files back (TFRecord framing of Event protos)."""
    from tensorboardX.proto import event_pb2

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        i = 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i : i + 8])
            event = event_pb2.Event.FromString(data[i + 12 : i + 12 + n])
            i += 12 + n + 4
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out


@pytest.mark.slow
def test_csv_and_tensorboard_hold_every_metric_per_run(ppo_run) -> None:
    d, _ = ppo_run
    rows = _rows(d / "run.csv")
    metrics = _metric_names("ppo")
    assert metrics <= set(rows[0]) and {"run", "seed", "hparams.lr", "iteration"} <= set(rows[0])
    assert len(rows) == 4 * 4  # 4 runs x 4 iterations
    result = json.loads((d / "run.json").read_text())
    for row in rows:  # the CSV's returns are the JSON's curve
        r, i = int(row["run"]), int(row["iteration"])
        expected = result["curve"]["returns"][r][i]
        got = float(row["episode_return_mean"])
        assert (math.isnan(got) and expected is None) or got == pytest.approx(expected)
        assert int(row["env_steps"]) == 16 * (i + 1)
        assert float(row["lr"]) == pytest.approx(float(row["hparams.lr"]) * (1 - i / 4), 1e-6)
    # One TensorBoard series per run, steps on the x axis, every finite value.
    assert sorted(p.name for p in (d / "tb").iterdir()) == sorted(result["runs"])
    for r, name in enumerate(result["runs"]):
        scalars = _tensorboard_scalars(d / "tb" / name)
        assert {f"train/{m}" for m in ("loss", "entropy", "approx_kl", "lr")} <= set(scalars)
        for m in metrics - {"env_steps"}:
            expected = [
                (int(row["env_steps"]), float(row[m]))
                for row in rows
                if int(row["run"]) == r and math.isfinite(float(row[m]))
            ]
            got = scalars.get(f"train/{m}", [])
            assert [s for s, _ in got] == [s for s, _ in expected], m
            np.testing.assert_allclose([v for _, v in got], [v for _, v in expected], rtol=1e-6)


def _final_state(folder):
    """The arrays of the latest checkpoint, restored without a template."""
    import orbax.checkpoint as ocp

    step = checkpoint.latest_step(folder)
    with ocp.StandardCheckpointer() as c:
        return step, c.restore(folder / str(step) / "state")


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_a_run_killed_halfway_resumes_to_the_same_final_parameters(
    algo, ppo_run, dqn_run, tmp_path, monkeypatch
) -> None:
    d, _ = ppo_run if algo == "ppo" else dqn_run
    argv = [*PPO_ARGS, "--config", str(d / "ppo.toml")] if algo == "ppo" else list(DQN_ARGS)
    argv += ["--checkpoint-dir", str(tmp_path / "ck"), "--csv", str(tmp_path / "m.csv")]
    _run_killed_after_first_save(argv, monkeypatch)
    half = checkpoint.latest_step(tmp_path / "ck")
    assert half == (2 if algo == "ppo" else 3)
    printed = _run(argv)  # the same arguments again
    assert f"resuming from {tmp_path / 'ck'} at iteration {half}" in printed
    step, resumed = _final_state(tmp_path / "ck")
    full_step, full = _final_state(d / "full")
    assert step == full_step == (4 if algo == "ppo" else 6)
    jax.tree.map(np.testing.assert_array_equal, resumed, full)  # bit-identical
    # The resumed CSV has the whole history, equal to the uninterrupted run's.
    reference = d / ("run.csv" if algo == "ppo" else "train.csv")
    assert _rows(tmp_path / "m.csv") == _rows(reference)


@pytest.mark.slow
def test_resume_refuses_other_settings(ppo_run, capsys) -> None:
    d, _ = ppo_run
    argv = [*PPO_ARGS, "--config", str(d / "ppo.toml"), "--checkpoint-dir", str(d / "full")]
    err = _error_of([*argv, "--gamma", "0.9"], capsys)
    assert "other settings" in err and "gamma" in err


@pytest.mark.slow
def test_eval_reports_each_run_of_the_checkpoint(ppo_run, capsys) -> None:
    d, _ = ppo_run
    out = d / "eval.json"
    argv = ["eval", "--checkpoint", str(d / "full"), "--episodes", "2", "--json", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["iteration"] == 4 and result["sweep"] == {"lr": [1e-3, 2e-3]}
    assert [r["run"] for r in result["runs"]] == json.loads((d / "run.json").read_text())["runs"]
    for row in result["runs"]:
        for policy in ("greedy", "sampled"):  # side by side: what eval and training see
            assert row[f"{policy}_episodes"] == 2
            # CartPole pays 1 per step: an episode's return is its length.
            mean, length = row[f"{policy}_return_mean"], row[f"{policy}_length_mean"]
            assert mean == pytest.approx(length) and length >= 8
            assert f"{mean:.1f} ± " in printed


@pytest.mark.slow
def test_wandb_offline_logs_every_metric(dqn_run) -> None:
    """Every metric that has a value (the CSV's non-NaN entries; a NaN mean is
    an iteration without an episode end, left empty in W&B) is in the run."""
    d, _ = dqn_run
    (run_file,) = d.glob("wandb/offline-run-*/run-*.wandb")
    data = run_file.read_bytes()
    rows = _rows(d / "train.csv")
    names = _metric_names("dqn") - {"env_steps"}
    assert names <= set(rows[0])
    valued = {n for n in names if any(math.isfinite(float(r[n])) for r in rows)}
    assert len(valued) >= len(names) - 4  # at most the four episode statistics
    for name in valued:
        assert f"train/{name}".encode() in data, name


def test_help_lists_every_config_field_with_its_default(capsys) -> None:
    import dataclasses

    from jaxsample.algos.configs import DQNConfig, PPOConfig

    for algo, cls in (("ppo", PPOConfig), ("dqn", DQNConfig)):
        with pytest.raises(SystemExit):
            main(["train", "--algo", algo, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for field in dataclasses.fields(cls):
            if field.name in ("env_name", "recurrent", "mask_velocity"):
                continue  # --env, --algo, --mask-velocity
            assert "--" + field.name.replace("_", "-") in text, field.name
    assert "(default: 1000)" in text and "(default: 120,84)" in text  # DQN's buffer, MLP
    assert "(default: None)" not in text and "(default: ppo)" in text  # each default once
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("jaxsample 0.")


def test_settings_layer_defaults_then_file_then_flags(tmp_path) -> None:
    from jaxsample.cli.config import load_config_file, resolve_config

    (tmp_path / "c.yaml").write_text("num_envs: 8\nlr: [0.001, 0.0003]\ngamma: 0.9\n")
    values = load_config_file(str(tmp_path / "c.yaml"))
    config, sweep, overrides = resolve_config(
        "dqn", "CartPole-v1", False, values, {"gamma": [0.5, 0.7]}
    )
    assert config.num_envs == 8 and config.batch_size == 128  # file, default
    assert sweep == {"lr": [0.001, 0.0003], "gamma": [0.5, 0.7]}  # flags over the file
    assert overrides == {"env_name": "CartPole-v1", "num_envs": 8, "lr": 0.001, "gamma": 0.5}


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--lr", "fast"], "--lr 'fast': expected float"),
        (["--num-envs", "x"], "--num-envs 'x': expected int"),
        (["--num-envs", "0"], "--num-envs must be >= 1"),
        (["--gamma", "0.9,0.99"], "--gamma '0.9,0.99': expected float"),
        (["--hidden-sizes", "8,x"], "--hidden-sizes"),
        (["--rnn-cell", "tcn"], "--rnn-cell must be one of"),
        (["--config", "/no/such.toml"], "--config '/no/such.toml': no such file"),
        (["--config", "BAD"], "unknown setting"),
        (["--config", "BADTOML"], "--config"),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(args, match, tmp_path, capsys) -> None:
    (tmp_path / "bad.toml").write_text("num_envz = 4\n")
    (tmp_path / "broken.toml").write_text("num_envs = = 4\n")
    args = [
        {"BAD": str(tmp_path / "bad.toml"), "BADTOML": str(tmp_path / "broken.toml")}.get(a, a)
        for a in args
    ]
    with pytest.raises(SystemExit) as info:
        main(["train", *args])
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    err = "\n".join(x for x in lines if not x.startswith("note:"))  # jaxsample's notes
    assert err.count("\n") == 0 and match in err, err


class _ToyTrainer:
    """A trainer of the Trainer protocol whose iteration is a few flops: the
    one-program machinery tested without a PPO-sized compile (programs with
    host callbacks are not kept by JAX's persistent compilation cache)."""

    num_iterations = 6
    steps_per_iteration = 10
    reports = Reports()

    def hparams(self, **overrides):
        return {"lr": jax.numpy.asarray(overrides.get("lr", 0.5), jax.numpy.float32)}

    def init(self, key, hparams=None):
        hparams = self.hparams() if hparams is None else hparams
        x = jax.random.uniform(key)
        return {"x": x, "lr": hparams["lr"], "i": jax.numpy.zeros((), jax.numpy.int32)}

    def iteration(self, state):
        x = state["x"] * (1 - state["lr"]) + 1.0
        new = {**state, "x": x, "i": state["i"] + 1}
        loss = jax.numpy.where(state["i"] % 2 == 0, jax.numpy.nan, x * 2)
        return new, {"episode_return_mean": loss, "average_return": x, "loss": x * 3}


def test_one_program_reports_from_inside_and_matches_the_chunked_run() -> None:
    """The whole run as one program: ordered host callbacks every
    num_iterations / chunks iterations feed the progress; same results as the
    chunked run, and as a plain Python loop."""
    from jaxsample.runs import loop

    trainer = _ToyTrainer()
    hparams = {"lr": np.asarray([0.5, 0.25], np.float32)}
    common = dict(seeds=2, num_iterations=6, chunks=3, hparams=hparams)
    events = []
    one = loop.run_training(
        trainer, jax.random.key(3), progress=events.append, one_program=True, **common
    )
    assert [e["phase"] for e in events] == ["compiling", "running", "running", "running"]
    assert [e["steps"] for e in events[1:]] == [20, 40, 60]  # every 2 iterations, in order
    assert events[-1]["fraction"] == 1 and events[-1]["eta"] == 0
    # recent_return / recent_loss: the finite values of the run's recent
    # window (all of a 6-iteration run: loop.recent_window), each run's mean
    # then the mean over the 4 runs (the return is NaN at every other
    # iteration; no episode counts: each finite iteration weighs 1).
    returns, loss = (np.asarray(one.metrics[k]) for k in ("episode_return_mean", "loss"))
    assert loop.recent_window(6) == 6
    assert events[1]["recent_return"] == pytest.approx(returns[:, 1].mean(), rel=1e-6)
    assert events[2]["recent_return"] == pytest.approx(returns[:, [1, 3]].mean(), rel=1e-6)
    assert events[2]["recent_loss"] == pytest.approx(loss[:, :4].mean(), rel=1e-6)
    assert "evaluation" not in events[1]  # the trainer reports none
    chunked_events = []
    chunked = loop.run_training(
        trainer, jax.random.key(3), progress=chunked_events.append, **common
    )
    for a, b in zip(events[1:], chunked_events[1:], strict=True):  # the same figures
        for k in ("steps", "fraction", "recent_return", "recent_loss"):
            assert a[k] == pytest.approx(b[k], rel=1e-6)
    assert one.num_iterations == chunked.num_iterations == 6 == one.iterations
    for name in ("average_return", "loss", "episode_return_mean"):
        np.testing.assert_array_equal(one.metrics[name], chunked.metrics[name])
    np.testing.assert_array_equal(one.returns, chunked.returns)
    # A plain loop: run r is seed r // 2 (key fold_in(key, seed)) with lr[r % 2].
    x = np.asarray(one.metrics["average_return"])
    for r in range(4):
        value = float(jax.random.uniform(jax.random.fold_in(jax.random.key(3), r // 2)))
        for i in range(6):
            value = value * (1 - hparams["lr"][r % 2]) + 1.0
            assert x[r, i] == pytest.approx(value, rel=1e-6)


def test_run_training_reads_the_return_metric_the_trainer_reports() -> None:
    """The curves are the metric ``trainer.reports.returns`` names (PPO's and
    DQN's ``episode_return_mean`` by default)."""
    import dataclasses

    from jaxsample.runs import loop

    trainer = _ToyTrainer()
    run = loop.run_training(trainer, jax.random.key(3), seeds=2, num_iterations=4, chunks=2)
    np.testing.assert_array_equal(
        run.returns, np.asarray(run.metrics["episode_return_mean"], np.float64)
    )
    assert run.num_iterations == 4 and run.env_steps.tolist() == [10, 20, 30, 40]
    trainer.reports = dataclasses.replace(Reports(), returns="average_return")
    run = loop.run_training(trainer, jax.random.key(3), seeds=2, num_iterations=4, chunks=2)
    np.testing.assert_array_equal(run.returns, np.asarray(run.metrics["average_return"]))


def test_over_runs_vmaps_several_runs_and_traces_one_run_unbatched() -> None:
    """``over_runs``: several runs are ``jax.vmap`` (the same values);
    one run is ``fn`` of the run's own arguments with the axis added back (its
    scan carries the run's shapes, not a batch of one) and gives the values
    of ``fn`` called on that run alone."""
    from jaxsample.runs.programs import over_runs

    def f(x, scale):  # a scan, as a trainer's iteration has
        def body(c, _):
            return jnp.tanh(c * scale) + 0.5 * c, c.sum()

        return jax.lax.scan(body, x, None, 4)

    xs = jnp.linspace(-1.0, 1.0, 15, dtype=jnp.float32).reshape(3, 5)
    scales = jnp.asarray([0.5, 1.0, 2.0], jnp.float32)
    many = over_runs(f)(xs, scales)
    jax.tree.map(np.testing.assert_array_equal, many, jax.vmap(f)(xs, scales))
    one = over_runs(f)(xs[:1], scales[:1])
    alone = jax.tree.map(lambda y: y[None], f(xs[0], scales[0]))
    jax.tree.map(np.testing.assert_array_equal, one, alone)
    assert one[0].shape == (1, 5) and one[1].shape == (1, 4)
    jaxpr = jax.make_jaxpr(over_runs(f))(xs[:1], scales[:1])
    (scan,) = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
    assert scan.outvars[0].aval.shape == (5,)  # vmap would carry (1, 5)
    (batched,) = [
        e
        for e in jax.make_jaxpr(jax.vmap(f))(xs[:1], scales[:1]).eqns
        if e.primitive.name == "scan"
    ]
    assert batched.outvars[0].aval.shape == (1, 5)


def test_a_run_compiles_init_cheaply_on_cpu_and_names_a_bad_part() -> None:
    """Init runs once: XLA's cheapest LLVM level, its kernels compiled on one
    thread (beside the loop's tracing); the loop: -O2. The options are ones
    this XLA takes, and the results do not depend on them."""
    from jaxsample.runs import programs

    assert jax.default_backend() == "cpu"
    assert programs.compiler_options("init") == {
        "xla_backend_optimization_level": 0,
        "xla_cpu_parallel_codegen_split_count": 1,
    }
    assert programs.compiler_options("run") == {"xla_backend_optimization_level": 2}
    f = jax.jit(lambda x: jnp.tanh(x) * 3.0 + jnp.exp(-x))
    x = jnp.linspace(-3.0, 3.0, 64)
    for part in ("init", "run"):
        exe = f.lower(x).compile(programs.compiler_options(part))
        np.testing.assert_array_equal(exe(x), f(x))
    with pytest.raises(ValueError, match="part must be one of"):
        programs.compiler_options("loop")


def test_in_background_returns_the_result_or_raises_from_a_worker_thread() -> None:
    from jaxsample.runs import programs

    def where(x):
        return threading.current_thread().name, x * 2

    name, value = programs.in_background(where, 21)()
    assert name.startswith("jaxsample-compile") and value == 42

    def fails():
        raise ValueError("compile failed")

    wait = programs.in_background(fails)
    with pytest.raises(ValueError, match="compile failed"):
        wait()


class _ShardedToyTrainer(_ToyTrainer):
    """The toy trainer with a mesh: its state is placed on 2 devices (``x``
    split over them), a sharding only the compiled init knows."""

    reports = Reports(returns="average_return")

    def __init__(self):
        from jax.sharding import Mesh

        self.mesh = Mesh(np.array(jax.devices()[:2]), ("envs",))

    def init(self, key, hparams=None):
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        state = super().init(key, hparams)
        x = state["x"] + jnp.arange(4, dtype=jnp.float32)
        x = jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, P("envs")))
        return {**state, "x": x}

    def iteration(self, state):
        state, metrics = super().iteration(state)
        return state, {k: v.mean() for k, v in metrics.items()}


def test_the_run_is_compiled_while_init_compiles_and_a_sharded_state_is_kept() -> None:
    """Init's XLA compile overlaps the tracing of the run's programs, which are
    traced for init's abstract output (its shapes, dtypes and weak types); a
    trainer with a mesh (a sharded state: programs compiled for the abstract
    state would refuse it) compiles them for the state itself, and its run
    gives the plain loop's values. (In chunks: JAX 0.9's partitioner refuses
    the one program's host callbacks in a sharded program.)"""
    from jaxsample.runs import loop, programs

    runs = loop.runs_of(_ToyTrainer(), jax.random.key(3), 2)
    like, initial = programs.initial_state(_ToyTrainer(), runs)
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(like))
    state = initial()
    assert jax.tree.map(lambda x: (x.shape, x.dtype, x.weak_type), like) == jax.tree.map(
        lambda x: (x.shape, x.dtype, x.weak_type), state
    )

    sharded = _ShardedToyTrainer()
    run = loop.run_training(sharded, jax.random.key(3), seeds=2, num_iterations=6, chunks=3)
    assert run.final_state["x"].sharding.spec[1] == "envs"
    for r in range(2):
        value = float(jax.random.uniform(jax.random.fold_in(jax.random.key(3), r)))
        x = value + np.arange(4.0)
        for i in range(6):
            x = x * 0.5 + 1.0
            assert run.returns[r, i] == pytest.approx(x.mean(), rel=1e-6)


@pytest.mark.parametrize("live", [False, True])
def test_display_shows_compiling_then_steps_rate_elapsed_eta_return_loss(live) -> None:
    from jaxsample.runs.display import LiveDisplay

    stream = io.StringIO()
    display = LiveDisplay(stream, live=live)
    display({"phase": "compiling", "total_steps": 1000})
    for steps, ret in ((500, 12.5), (1000, 31.25)):
        display(
            {
                "phase": "running", "steps": steps, "total_steps": 1000,
                "fraction": steps / 1000, "steps_per_second": 2500.0, "elapsed": 75.0,
                "eta": (1000 - steps) / 2500.0 * 60, "recent_return": ret,
                "recent_loss": math.nan,
            }
        )  # fmt: skip
    display.close()
    text = stream.getvalue()
    assert "31.2" in text and "ETA 0:00" in text
    assert ("2.50k/s" if live else "2,500 steps/s") in text
    if live:  # rich: the bar's last state (80 columns: short figures)
        assert "1.00k/1.00k" in text
    else:
        assert text.splitlines()[0].startswith("compiling")
        assert "ETA 0:12" in text and "elapsed 1:15" in text and "loss n/a" in text


# --- Issue 30: what a user gets, on this module's PPO run (see also test_cli_robustness)


def _error_of(argv: list[str], capsys) -> str:
    """The one stderr line of a usage error (exit status 2)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("note:")]
    assert len(err) == 1, err
    return err[0]


def _tree_digest(folder) -> dict[str, str]:
    """Every file under ``folder`` and the hash of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _toml(values: dict) -> str:
    def show(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(show(x) for x in v) + "]"
        return json.dumps(v)

    return "".join(f"{k} = {show(v)}\n" for k, v in values.items())


@pytest.mark.slow
def test_the_json_records_a_replayable_run(ppo_run, tmp_path) -> None:
    """Item 3: ``seeds`` is the seeds given (2), not the runs (4); item 4: the
    JSON's config written to a TOML file and passed as --config with the same
    seeds and sweep gives the same config and the same curves, bit for bit;
    item 10: the default CSV path was said."""
    d, printed = ppo_run
    a = json.loads((d / "run.json").read_text())
    assert a["seeds"] == 2 and a["num_runs"] == 4 and a["run_seeds"] == [0, 0, 1, 1]
    saved = json.loads((d / "full" / "run.json").read_text())
    assert {k: a[k] for k in saved} == saved  # what the checkpoint folder recorded
    assert f"every metric goes to {d / 'run.csv'}" in printed
    (tmp_path / "c.toml").write_text(_toml(a["config"]))
    argv = ["train", "--config", str(tmp_path / "c.toml"), "--seeds", str(a["seeds"])]
    argv += ["--lr", ",".join(str(x) for x in a["sweep"]["lr"]), "--chunks", "2"]
    argv += ["--json", str(tmp_path / "b.json"), "--checkpoint-dir", str(tmp_path / "ck")]
    _run(argv)
    b = json.loads((tmp_path / "b.json").read_text())
    for key in ("algo", "config", "seed", "seeds", "sweep", "run_seeds", "run_settings"):
        assert b[key] == a[key], key
    assert b["curve"] == a["curve"]


@pytest.mark.slow
def test_other_settings_name_every_difference_with_both_values(ppo_run, capsys) -> None:
    d, _ = ppo_run
    argv = [*PPO_ARGS, "--config", str(d / "ppo.toml"), "--checkpoint-dir", str(d / "full")]
    line = _error_of([*argv, "--gamma", "0.9", "--ent-coef", "0.05", "--seeds", "3"], capsys)
    assert "ent_coef: saved 0.02, now 0.05" in line, line
    assert "gamma: saved 0.99, now 0.9" in line and "seeds: saved 2, now 3" in line, line


@pytest.mark.slow
def test_damaged_arrays_are_one_line_and_nothing_changes(ppo_run, tmp_path, capsys, caplog) -> None:
    d, _ = ppo_run
    folder = tmp_path / "ck"
    shutil.copytree(d / "full", folder)
    for path in (folder / "4").rglob("*"):
        if path.is_file() and "manifest" not in str(path) and path.stat().st_size > 0:
            path.write_bytes(b"\0" * path.stat().st_size)  # overwritten array files
    before = _tree_digest(folder)
    argv = [*PPO_ARGS, "--config", str(d / "ppo.toml"), "--checkpoint-dir", str(folder)]
    again = [*argv, "--csv", str(tmp_path / "m.csv")]
    for command in (again, ["eval", "--checkpoint", str(folder)]):
        with caplog.at_level(logging.DEBUG):
            line = _error_of(command, capsys)
        assert str(folder) in line and "iteration 4 cannot be read" in line, line
        # orbax's own log lines (ERROR:absl:Failed to json parse ...) stay quiet.
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        caplog.clear()
    assert _tree_digest(folder) == before


@pytest.mark.slow
def test_a_finished_run_started_again_says_it_is_complete(ppo_run, tmp_path) -> None:
    d, _ = ppo_run
    folder = tmp_path / "ck"
    shutil.copytree(d / "full", folder)
    before = _tree_digest(folder)
    argv = [*PPO_ARGS, "--config", str(d / "ppo.toml"), "--checkpoint-dir", str(folder)]
    printed = _run([*argv, "--json", str(tmp_path / "again.json")])
    assert f"{folder} holds this run complete (4 of 4 iterations)" in printed
    assert "compiled in" not in printed and " 0 steps/s" not in printed
    assert "restored (no iteration left to run)" in printed
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["curve"] == json.loads((d / "run.json").read_text())["curve"]
    assert _tree_digest(folder) == before
    assert math.isfinite(again["final_return"])

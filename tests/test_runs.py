"""The run package in Python, as a notebook uses it (issue 42): train into a
folder and load it back; an interrupt keeps the work and the same call
resumes it bit for bit; one writer per folder (a real second process holds
the lock); settings compared before any step; every output written beside and
renamed into place; a full disk (a real tmpfs) is one line and damages
nothing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import HANG_SECONDS

from jaxsample import runs
from jaxsample.algos.configs import PPOConfig
from jaxsample.runs import files
from jaxsample.runs.errors import FolderBusy, FolderMismatch, WriteFailed
from jaxsample.runs.folder import RunFolder
from jaxsample.runs.lock import FolderLock

pytestmark = pytest.mark.xdist_group("runs")

# 8 iterations of 16 steps: chunks=8 gives a checkpoint after every iteration.
TINY = PPOConfig(
    env_name="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=128, hidden_sizes=(8,),
    update_epochs=1, num_minibatches=1,
)  # fmt: skip
QUIET = {"progress": False, "say": None}


def _leaves(tree) -> list[np.ndarray]:
    def plain(x):
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            return np.asarray(jax.random.key_data(x))
        return np.asarray(x)

    return [plain(x) for x in jax.tree.leaves(tree)]


def _same(a, b) -> bool:
    la, lb = _leaves(a), _leaves(b)
    return len(la) == len(lb) and all(x.dtype == y.dtype and np.array_equal(x, y)
                                      for x, y in zip(la, lb, strict=True))  # fmt: skip


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """An uninterrupted run of TINY in a folder, 2 seeds, every output."""
    d = tmp_path_factory.mktemp("full")
    out = {k: str(d / f"out.{k}") for k in ("json", "csv")} | {"plot": str(d / "out.png")}
    result = runs.train(TINY, seeds=2, folder=d / "run", chunks=8, **out, **QUIET)
    return d, result


def test_train_into_a_folder_and_load_it(uninterrupted) -> None:
    d, result = uninterrupted
    assert not result.interrupted and result.exit_status == 0 and result.stopped_by is None
    assert result.names == ["seed0", "seed1"]
    assert sorted(Path(p).name for p in result.written) == ["out.csv", "out.json", "out.png"]
    data = json.loads((d / "out.json").read_text())
    assert data["completed_iterations"] == 8 and data["interrupted"] is False
    assert (d / "out.csv").read_text().count("\n") == 1 + 8 * 2
    run = runs.load(d / "run")
    assert run.iteration == 8 and run.complete and run.config == TINY
    assert _same(run.params, result.state.params)
    assert _same(run.params_of(1), jax.tree.map(lambda x: x[1], result.state.params))
    history, metrics = run.history, result.training.metrics
    assert np.array_equal(history["loss"], metrics["loss"], equal_nan=True)
    rows = run.evaluate(episodes=2)
    assert [r["run"] for r in rows] == ["seed0", "seed1"]
    assert all(r["episodes"] == 2 and r["return_mean"] >= 1 for r in rows)
    # no temporary file is left beside the outputs or in the folder
    leftovers = [p for p in d.rglob("*") if ".tmp" in p.name]
    assert leftovers == []


def test_an_interrupt_keeps_the_work_and_the_same_call_resumes_bit_for_bit(
    uninterrupted, tmp_path
) -> None:
    """A notebook's interrupt button (SIGINT in the main thread) after the
    third iteration: the call returns (no KeyboardInterrupt) with what it
    kept; calling it again finishes the run exactly as if never stopped."""
    _, full = uninterrupted
    seen = []

    def progress(event) -> None:
        if event.get("phase") == "running":
            seen.append(event["steps"])
            if len(seen) == 3:
                os.kill(os.getpid(), signal.SIGINT)

    folder = tmp_path / "run"
    before = signal.getsignal(signal.SIGINT)  # the worker's own (pytest-xdist's may ignore it)
    stopped = runs.train(TINY, seeds=2, folder=folder, chunks=8, progress=progress, say=None)
    assert stopped.interrupted and stopped.stopped_by == "SIGINT" and stopped.exit_status == 130
    assert len(stopped.training.env_steps) == 3
    assert (stopped.iterations, stopped.num_iterations) == (3, 8)  # done and planned
    from jaxsample.runs.run import final_line

    assert "after 3 of 8 iterations" in final_line(stopped)
    assert runs.load(folder).iteration == 3
    # the handler is gone again: the process's own SIGINT handling is back
    assert signal.getsignal(signal.SIGINT) is before
    assert before is not None
    resumed = runs.train(TINY, seeds=2, folder=folder, chunks=8, **QUIET)
    assert not resumed.interrupted and resumed.training.start_iteration == 3
    assert resumed.iterations == resumed.num_iterations == 8
    assert _same(resumed.state, full.state)
    assert np.array_equal(resumed.training.returns, full.training.returns, equal_nan=True)


@pytest.mark.parametrize("seconds, steps", [(0, [7, 8]), (3600, [8])])
def test_checkpoints_come_every_so_many_seconds_and_at_the_end(tmp_path, seconds, steps) -> None:
    """``checkpoint_seconds=0``: one after every chunk (the newest two kept);
    an hour: none of the run's 8 chunks is due, so the run saves once, at
    its end. Each order of checkpoints restores the same final state."""
    from jaxsample import checkpoint

    saves = []
    real = RunFolder.save

    def counted(self, state, done, metrics):
        saves.append(done)
        real(self, state, done, metrics)

    RunFolder.save = counted
    try:
        result = runs.train(TINY, folder=tmp_path / "run", chunks=8, checkpoint_seconds=seconds,
                            **QUIET)  # fmt: skip
    finally:
        RunFolder.save = real
    assert saves == ([1, 2, 3, 4, 5, 6, 7, 8] if seconds == 0 else [8])
    assert list(checkpoint.all_steps(tmp_path / "run")) == steps
    assert _same(runs.load(tmp_path / "run").state, result.state)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "60", True])
def test_a_bad_checkpoint_interval_is_named(tmp_path, bad) -> None:
    with pytest.raises(ValueError, match="checkpoint_seconds must be a number >= 0"):
        runs.train(TINY, folder=tmp_path / "run", checkpoint_seconds=bad, **QUIET)
    assert not (tmp_path / "run").exists()


def test_a_fresh_folder_is_opened_without_orbax(tmp_path) -> None:
    """Whether a new folder holds checkpoints is answered without importing
    orbax (half a second of a short run's start); a folder with a step's
    folder asks orbax."""
    script = (
        "import sys; from jaxsample.runs.folder import RunFolder; "
        "f = RunFolder(sys.argv[1]); print(f.latest_step(), 'orbax' in sys.modules)"
    )
    (tmp_path / "new").mkdir()
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "new")],
                         capture_output=True, text=True, timeout=HANG_SECONDS)  # fmt: skip
    assert out.stdout.split() == ["None", "False"], out.stderr[-2000:]


_HOLDER = """
import sys, time
from jaxsample.runs.lock import FolderLock
lock = FolderLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


@contextlib.contextmanager
def _holder(folder: Path):
    """A real second process holding ``folder``'s lock."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(folder)],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=HANG_SECONDS)
        proc.stdout.close()


def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_second_process_is_refused_and_a_dead_holders_lock_is_taken_over(tmp_path) -> None:
    folder = tmp_path / "run"
    with _holder(folder) as proc:
        before = _listing(folder)
        with pytest.raises(FolderBusy) as e:
            runs.train(TINY, folder=folder, **QUIET)
        message = str(e.value)
        assert f"pid {proc.pid} on " in message and "since 20" in message
        assert "\n" not in message and e.value.exit_status == 2
        assert _listing(folder) == before  # untouched: no run.json, no step
        proc.send_signal(signal.SIGKILL)  # the holder dies without cleaning up
        proc.wait(timeout=HANG_SECONDS)
    lock = FolderLock(folder).acquire()
    try:
        assert lock.took_over is not None and f"pid {proc.pid}" in lock.took_over
        with pytest.raises(FolderBusy):  # one writer also within a process
            FolderLock(folder).acquire()
    finally:
        lock.release()
    assert FolderLock(folder).acquire().took_over is None  # released cleanly: nothing to take over


def test_the_settings_are_compared_before_any_step_exists(tmp_path) -> None:
    """Run A (seed 1) has written its run.json but saved no step yet (it is
    compiling, or died compiling): a run with seed 0 on the folder is
    refused, and run.json still says seed 1."""
    from jaxsample.runs.run import record_of

    folder = tmp_path / "run"
    with RunFolder(folder) as f:
        assert f.start_or_resume(record_of(TINY, 1, 1, {}), lambda: None) is None
    before = _listing(folder)
    with pytest.raises(FolderMismatch, match=r"other settings: seed: saved 1, now 0"):
        runs.train(TINY, seed=0, folder=folder, **QUIET)
    assert _listing(folder) == before


def test_outputs_are_written_beside_and_renamed(tmp_path) -> None:
    path = tmp_path / "out.csv"
    path.write_text("earlier\n")

    def fail(tmp: str) -> None:
        Path(tmp).write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(WriteFailed, match=r"cannot write .*out.csv: No space left on device"):
        files.replace_file(path, fail)
    assert path.read_text() == "earlier\n" and os.listdir(tmp_path) == ["out.csv"]
    files.write_json(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1} and os.listdir(tmp_path) == ["out.csv"]


@contextlib.contextmanager
def small_disk(size: str = "2m"):
    """A real, small tmpfs, unmounted after (root only; skipped elsewhere)."""
    where = Path(f"/tmp/jaxsample-disk-{uuid.uuid4().hex[:8]}")
    where.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()[:80]})")
        try:
            yield where
        finally:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
    finally:
        with contextlib.suppress(OSError):
            where.rmdir()


def fill(disk: Path) -> None:
    """Fill ``disk`` to the last byte."""
    with open(disk / "filler", "wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(os.urandom(1 << 16))
            f.flush()
    with contextlib.suppress(OSError), open(disk / "filler2", "wb") as f:
        while True:
            f.write(b"x")
            f.flush()


def test_a_full_disk_under_a_checkpoint_is_one_line_and_keeps_the_earlier_one(capfd) -> None:
    with small_disk() as disk:
        folder = RunFolder(disk / "run").open()
        try:
            small = {"w": jax.numpy.arange(1000.0)}
            folder.save(small, 1, {"x": np.zeros((1, 1))})
            big = {"w": jax.random.normal(jax.random.key(0), (1_000_000,))}  # 4 MB, random
            with pytest.raises(WriteFailed) as e:
                folder.save(big, 2, {"x": np.zeros((1, 2))})
            assert "iteration 2" in str(e.value) and "\n" not in str(e.value)
            assert e.value.exit_status == 74
            assert sorted(os.listdir(disk / "run")) == [".lock.json", "1", "metrics.npz"]
            assert _same(folder.restore(small, 1)[0], small)
        finally:
            folder.close()
    _, err = capfd.readouterr()
    # none of orbax's log lines or worker-thread tracebacks (XLA's own log
    # lines of this test process's cache loads, on jax 0.9, are not orbax's)
    assert [x for x in err.splitlines() if not re.match(r"[EWIF]\d{4} ", x)] == []


def test_a_full_disk_under_the_json_is_one_line_and_keeps_the_earlier_files(
    uninterrupted,
) -> None:
    """``--json out.json`` on a full disk whose folder holds an earlier run's
    out.json / out.csv: WriteFailed (exit status 74) naming the path and
    the cause, and both earlier files byte for byte as they were."""
    with small_disk("1m") as disk:
        earlier = {n: os.urandom(20_000) for n in ("out.json", "out.csv")}
        for name, data in earlier.items():
            (disk / name).write_bytes(data)
        fill(disk)
        with pytest.raises(WriteFailed, match=r"No space left on device") as e:
            runs.train(TINY, seeds=2, json=str(disk / "out.json"), **QUIET)
        assert str(disk) in str(e.value) and e.value.exit_status == 74
        for name, data in earlier.items():
            assert (disk / name).read_bytes() == data
        assert {"out.csv", "out.json"} <= set(os.listdir(disk))
        assert not [n for n in os.listdir(disk) if ".tmp" in n]


def test_evaluate_greedy_and_sampled(uninterrupted) -> None:
    """``evaluate`` of both policies: CartPole pays 1 per step, so a return
    is a length; the sampled policy is the agent itself, the greedy one its
    ``as_eval``, each checked against the evaluator built by hand."""
    from jaxsample.evaluation import make_evaluator
    from jaxsample.traj_info import summarize

    d, _ = uninterrupted
    run = runs.load(d / "run")
    rows = {p: run.evaluate(episodes=3, seed=5, policy=p) for p in ("greedy", "sampled")}
    env, env_params, budget = run.trainer.env, run.trainer.env_params, 3 * (run.episode_limit + 1)
    by_hand = make_evaluator(env, env_params, run.agent, n_envs=3, max_steps=budget,
                             discount=TINY.gamma)  # fmt: skip
    key = jax.random.fold_in(jax.random.key(5), 1)
    stats = summarize(jax.jit(by_hand.run)(key, run.params_of(1)))
    assert rows["greedy"][1]["return_mean"] == pytest.approx(float(stats["episode_return_mean"]))
    for policy, table in rows.items():
        assert [r["policy"] for r in table] == [policy, policy]
        assert all(r["return_mean"] == pytest.approx(r["length_mean"]) for r in table)
    with pytest.raises(ValueError, match="policy must be one of"):
        run.evaluate(policy="mean")
    with pytest.raises(ValueError, match="not a two-player game"):
        run.play("random")
    from jaxsample.cli import main

    with pytest.raises(SystemExit) as e:
        main(["eval", "--checkpoint", str(d / "run"), "--opponent", "random"])
    assert e.value.code == 2


@pytest.mark.slow  # trains and plays tic-tac-toe (~40 s of compiles on 2 cores)
def test_play_a_game_against_random_and_another_run(tmp_path, capsys) -> None:
    """Wins, draws and losses per seat against a uniformly random legal player
    (checked against the evaluator with TurnTaking and seat_returns built by
    hand) and against another run folder's policy, in Python and through
    ``jaxsample eval --opponent``."""
    import dataclasses

    from jaxsample.agents import RandomAgent, TurnTaking, seat_returns
    from jaxsample.algos import configs
    from jaxsample.cli import main
    from jaxsample.evaluation import make_evaluator

    config = dataclasses.replace(
        configs.SELF_PLAY_TIC_TAC_TOE, num_envs=8, num_steps=16, total_timesteps=8 * 16 * 2,
        hidden_sizes=(8,),
    )  # fmt: skip
    runs.train(config, seeds=2, folder=tmp_path / "a", **QUIET)
    run = runs.load(tmp_path / "a")
    assert run.is_game
    rows = run.play("random", games=6, seed=3)
    env, env_params = run.trainer.env, run.trainer.env_params
    match = TurnTaking((run.agent, RandomAgent(env.action_space(env_params))))
    by_hand = make_evaluator(env, env_params, match, n_envs=6, max_steps=6 * 10,
                             traj_fields=seat_returns())  # fmt: skip
    key = jax.random.fold_in(jax.random.key(3), 1)
    infos = jax.jit(by_hand.run)(key, (run.params_of(1), ()))
    result = np.asarray(infos.extra["agent0_return"])[np.asarray(infos.completed)]
    row = rows[1]
    assert row["games"] == 6 == result.size
    assert (row["wins"], row["draws"], row["losses"]) == tuple(
        int((result == v).sum()) for v in (1, 0, -1)
    )
    for name in ("wins", "draws", "losses"):
        assert row[name] == row[f"first_{name}"] + row[f"second_{name}"]
    assert row["first_wins"] + row["first_draws"] + row["first_losses"] == 3  # opens every other
    assert row["win_or_draw"] == pytest.approx((row["wins"] + row["draws"]) / 6)
    assert all(r["games"] == 6 for r in run.play(run, games=6))  # a run folder as the opponent
    other = dataclasses.replace(run, config=dataclasses.replace(config, env_name="pgx/go_9x9"))
    with pytest.raises(ValueError, match="the opponent plays pgx/go_9x9, not pgx/tic_tac_toe"):
        run.play(other)
    assert main(["eval", "--checkpoint", str(tmp_path / "a"), "--episodes", "6", "--seed", "3",
                 "--opponent", str(tmp_path / "a")]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "against " in printed and "opening W/D/L" in printed
    assert main(["eval", "--checkpoint", str(tmp_path / "a"), "--episodes", "6", "--seed",
                 "3"]) == 0  # fmt: skip
    assert f"{row['wins']}/{row['draws']}/{row['losses']}" in capsys.readouterr().out


@pytest.mark.slow  # Brax's compile and a 500k-step run (~2-3 min on 2 cores)
def test_a_converged_continuous_policy_evaluates_as_it_trained(tmp_path) -> None:
    """Brax's inverted pendulum with the settings docs/benchmarks.md gives:
    the greedy policy evaluates within noise of the training curve's end.
    Before the greedy Gaussian action was the mean of the executed (clipped)
    action, the same checkpoint evaluated at ~250 against a curve at ~720:
    the policy's mean lay beyond the Box's bound 86% of the time and acting
    with the bound made it a bang-bang controller."""
    pytest.importorskip("brax")
    config = PPOConfig(
        env_name="brax/inverted_pendulum", total_timesteps=500_000, num_envs=64, num_steps=64,
        num_minibatches=8, lr=3e-4, ent_coef=0.0,
    )  # fmt: skip
    result = runs.train(config, folder=tmp_path / "run", **QUIET)
    trained = float(result.final_returns()[0])
    run = runs.load(tmp_path / "run")
    (greedy,) = run.evaluate(episodes=20, policy="greedy")
    (sampled,) = run.evaluate(episodes=20, policy="sampled")
    noise = 3 * (sampled["return_std"] or 0.0) / np.sqrt(20)
    assert greedy["return_mean"] >= 0.9 * trained, (greedy, trained)
    assert greedy["return_mean"] >= sampled["return_mean"] - noise, (greedy, sampled)


def test_a_folder_written_before_a_config_field_existed_resumes(tmp_path) -> None:
    """run.json without a field the config has now (a folder of an older
    jaxsample): the same run when the field is at its default, another run's
    settings when it is not."""
    import dataclasses

    from jaxsample.runs.run import record_of

    folder = tmp_path / "run"
    record = record_of(TINY, 0, 1, {})
    del record["config"]["eval_games"]
    folder.mkdir()
    files.write_json(folder / "run.json", record)
    runs.train(TINY, folder=folder, chunks=8, **QUIET)  # eval_games at its default
    assert runs.load(folder).iteration == 8
    files.write_json(folder / "run.json", record)
    with pytest.raises(FolderMismatch, match=r"eval_games: saved not recorded, now 64"):
        runs.train(dataclasses.replace(TINY, eval_games=64), folder=folder, **QUIET)


def test_a_save_that_fails_for_another_reason_than_the_disk_is_not_a_write_error(
    tmp_path,
) -> None:
    """Only the file system's failures become WriteFailed (exit 74): a defect
    keeps its own exception and traceback."""
    with RunFolder(tmp_path / "run") as folder, pytest.raises(TypeError, match="pytree"):
        folder.save({"w": "not an array"}, 1, {"x": np.zeros((1, 1))})


def test_a_preset_trains_from_python_as_the_command_line_trains_it() -> None:
    """``runs.train(preset=NAME)`` trains the config ``jaxsample train``
    builds for that preset (every preset); an explicit config means what it
    says (with a preset too: an error); a wrong name is one line naming the
    closest."""
    from jaxsample.algos import presets
    from jaxsample.cli.config import choose_preset, resolve_config

    for name, preset in presets.presets().items():
        chosen = choose_preset(name, preset.algo, preset.env, False)
        cli = resolve_config(preset.algo, preset.env, False, {}, {}, None, chosen).config
        assert presets.resolve(preset=name) == (cli, name), name
    assert presets.resolve(TINY) == (TINY, None)
    with pytest.raises(ValueError, match="pass config or preset, not both"):
        presets.resolve(TINY, "CartPole-v1")
    with pytest.raises(ValueError, match=r"preset: no preset 'CartPole-v2' \(did you mean"):
        runs.train(preset="CartPole-v2", **QUIET)
    with pytest.raises(TypeError, match="needs a config, or preset=NAME"):
        runs.train(**QUIET)


def test_the_first_line_says_how_long_the_run_is_and_its_preset(tmp_path) -> None:
    """The run's first line states its length in env steps per seed and the
    preset it came from (or none); a stopped run's last line says what it
    kept, from Python as from the command line."""
    from jaxsample.algos import presets
    from jaxsample.runs.run import _describe, _Plan

    config = presets.get("CartPole-v1").config()
    plan = _Plan.of(config, 4, 0, {}, 20, "CartPole-v1")
    first = _describe(plan)[0]
    steps = plan.iterations * config.num_envs * config.num_steps
    assert f"CartPole-v1 (preset CartPole-v1), {steps:,} steps per seed (" in first
    assert "4 seeds (4 runs under one vmap)" in first
    lines: list[str] = []
    runs.train(TINY, progress=False, say=lines.append)
    assert "CartPole-v1 (no preset), 128 steps per seed (8 iterations x 16), 1 seed" in lines[0]


_STOPPED = """
import os, signal, sys
from jaxsample import runs
from jaxsample.algos.configs import PPOConfig
config = PPOConfig(env_name="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=2048,
                   hidden_sizes=(8,), update_epochs=1, num_minibatches=1)
seen = []
def progress(event):
    if event.get("phase") == "running":
        seen.append(1)
        if len(seen) == 2:
            os.kill(os.getpid(), signal.SIGINT)
result = runs.train(config, folder=sys.argv[1], chunks=16, progress=progress, csv="m.csv")
print("returned", result.interrupted, result.iterations)
"""


def test_a_notebook_interrupt_says_what_it_kept(tmp_path) -> None:
    """A real SIGINT to a process running ``runs.train`` (a kernel's
    interrupt): the call returns and prints the command line's line."""
    out = subprocess.run(
        [sys.executable, "-c", _STOPPED, str(tmp_path / "run")],
        capture_output=True, text=True, timeout=HANG_SECONDS, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "returned True 16"
    kept = f"wrote m.csv, checkpoint {tmp_path / 'run'} at iteration 16"
    assert lines[-2] == f"interrupted (Ctrl-C) after 16 of 128 iterations: {kept}", out.stdout

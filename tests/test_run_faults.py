"""``jaxsample train`` under the faults clusters, Colab and laptops produce
(issue 42), with real processes, real signals and real file systems:
SIGTERM / SIGINT before and during training, a second command on the same
folder, a full disk, an unusable cache folder. The SLURM recipe of
docs/guides/runs.md (SIGTERM, then the same command again) and the Colab one
(the runtime lost: SIGKILL, then the same cell again) are simulated end to end
and compared bit for bit with an uninterrupted run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import HANG_SECONDS
from test_runs import _same, fill, small_disk

# 2 envs x 8 steps: tiny programs; 100k steps = 6250 iterations (~10-20 s).
TINY = ["--num-envs", "2", "--num-steps", "8", "--hidden-sizes", "8", "--update-epochs", "1",
        "--num-minibatches", "1", "--plot", ""]  # fmt: skip
LONG = [*TINY, "--total-steps", "100000"]
SHORT = [*TINY, "--total-steps", "64"]
XLA_LOG = re.compile(r"^[EWIF]\d{4} ")


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a user has it: the command's own default
    return env


def _start(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "jaxsample", *args], cwd=cwd, env=env or _env(cwd),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None):
    return subprocess.run([sys.executable, "-m", "jaxsample", *args], cwd=cwd,
                          env=env or _env(cwd), capture_output=True, text=True,
                          timeout=HANG_SECONDS)  # fmt: skip


def _wait_for(proc: subprocess.Popen, text: str) -> list[str]:
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"no {text!r} in the output: {''.join(lines)[-2000:]}")


def _wait_until_handled(proc: subprocess.Popen, sig: int) -> None:
    """Wait until ``proc`` has a handler of its own for ``sig`` (the kernel's
    ``SigCgt`` mask): a signal sent earlier meets Python's own startup."""
    bit = 1 << (sig - 1)
    deadline = time.monotonic() + HANG_SECONDS
    while time.monotonic() < deadline and proc.poll() is None:
        with open(f"/proc/{proc.pid}/status") as f:
            caught = next(x for x in f if x.startswith("SigCgt:")).split()[1]
        if int(caught, 16) & bit:
            return
        time.sleep(0.005)
    raise AssertionError(f"{signal.Signals(sig).name} never got a handler")


def _stop(proc: subprocess.Popen, sig: int) -> tuple[str, str, float]:
    """Send ``sig``; (rest of stdout, stderr, seconds from the signal to the exit)."""
    sent = time.perf_counter()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=HANG_SECONDS)
    return out, err, time.perf_counter() - sent


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err[-3000:]
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_before_the_first_iteration_exits_quietly_at_once(sig, tmp_path) -> None:
    """During the imports (SIGINT) or the compile (SIGTERM): exit 128 + signal
    within about a second (the compile would take seconds more), one line, no
    traceback, nothing written."""
    proc = _start(["train", *LONG, "--json", "a.json"], tmp_path)
    try:
        if sig == signal.SIGTERM:
            _wait_for(proc, "compiling the training program")
        else:  # its handlers are in; JAX and the trainer are still importing
            _wait_until_handled(proc, signal.SIGTERM)
        _, err, delay = _stop(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, err[-3000:]
    line = _one_line(err)
    assert line.startswith("jaxsample") and f"stopped by {signal.Signals(sig).name}" in line
    assert delay < 10, delay  # measured ~0.03 s; generous for a busy machine
    assert not (tmp_path / "a.json").exists() and not (tmp_path / "a.csv").exists()


@pytest.mark.long
def test_sigterm_during_training_keeps_what_was_trained_and_exits_143(tmp_path) -> None:
    proc = _start(["train", *LONG, "--json", "a.json"], tmp_path)
    try:
        _wait_for(proc, "steps/s")
        _, err, _ = _stop(proc, signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-3000:]
    line = _one_line(err)
    data = json.loads((tmp_path / "a.json").read_text())
    done = data["completed_iterations"]
    assert data["interrupted"] is True and data["stopped_by"] == "SIGTERM"
    assert 0 < done < 6250 and line.startswith(f"interrupted (SIGTERM) after {done} of 6250 ")
    assert (tmp_path / "a.csv").read_text().count("\n") == 1 + done


@pytest.mark.slow  # two CLI processes, one trains for a while (~1 min)
def test_a_second_command_on_the_folder_is_refused_and_the_settings_are_checked(
    tmp_path,
) -> None:
    """Run A (seed 1) is compiling in ck/ when run B (seed 0) is pointed at
    it: B refuses in one line naming A (exit 2, the folder untouched). A,
    stopped later, has saved seed 1's run; B's command is then refused for
    its other settings, whatever the folder holds."""
    longer = [*TINY, "--total-steps", "2000000", "--chunks", "200"]  # a minute or more
    a = _start(["train", *longer, "--seed", "1", "--checkpoint-dir", "ck"], tmp_path)
    try:
        _wait_for(a, "compiling the training program")
        b = _run(["train", *longer, "--checkpoint-dir", "ck", "--json", "b.json"], tmp_path)
        assert a.poll() is None, "run A ended before run B asked for the folder"
        assert b.returncode == 2, b.stderr[-3000:]
        line = _one_line(b.stderr)
        assert f"--checkpoint-dir 'ck' is in use by another run (pid {a.pid} on " in line
        assert not (tmp_path / "b.json").exists()
        _wait_for(a, "steps/s")
        _, err, _ = _stop(a, signal.SIGTERM)
    finally:
        if a.poll() is None:
            a.kill()
    assert a.returncode == 143, err[-3000:]
    assert json.loads((tmp_path / "ck" / "run.json").read_text())["seed"] == 1
    again = _run(["train", *longer, "--checkpoint-dir", "ck"], tmp_path)
    assert again.returncode == 2
    assert "other settings: seed: saved 1, now 0" in _one_line(again.stderr)


@pytest.mark.slow  # a CLI process (~20 s); tests/test_runs.py has the same in-process
def test_a_full_disk_is_one_line_exit_74_and_damages_nothing(tmp_path) -> None:
    """``--json`` on a full disk whose folder holds an earlier run's files."""
    with small_disk("1m") as disk:
        earlier = {n: os.urandom(20_000) for n in ("out.json", "out.csv")}
        for name, data in earlier.items():
            (disk / name).write_bytes(data)
        fill(disk)
        done = _run(["train", *SHORT, "--json", str(disk / "out.json")], tmp_path)
        assert done.returncode == 74, done.stderr[-3000:]
        line = _one_line(done.stderr)
        assert str(disk) in line and "No space left on device" in line
        for name, data in earlier.items():
            assert (disk / name).read_bytes() == data


@pytest.mark.long
def test_an_unusable_cache_folder_is_one_warning_and_the_run_goes_on(tmp_path) -> None:
    """``XDG_CACHE_HOME`` naming a file, then a populated cache on a read-only
    mount: one warning line each, exit 0, no JAX warning."""
    collect = ["collect", "--B", "1", "--T", "2", "--batches", "1"]
    env = _env(tmp_path)
    (tmp_path / "a-file").write_text("")
    env["XDG_CACHE_HOME"] = str(tmp_path / "a-file")
    done = _run(collect, tmp_path, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _one_line(done.stderr).startswith("warning: the compile cache folder ")
    with small_disk("8m") as disk:
        env["XDG_CACHE_HOME"] = str(disk)
        populated = disk / "jaxsample" / "jax"  # entries as a run leaves them
        populated.mkdir(parents=True)
        for name in ("jit_collect-0123abcd-cache", "jit_init-4567ef01-cache"):
            (populated / name).write_bytes(os.urandom(4096))
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        done = _run(collect, tmp_path, env)
    assert done.returncode == 0, done.stderr[-3000:]
    line = _one_line(done.stderr)
    assert line.startswith("warning: the compile cache folder ") and "Read-only" in line


def _final_state(folder: Path):
    from jaxsample import runs

    return runs.load(folder).state


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["slurm", "colab"])
def test_the_rerun_after_a_fault_ends_bit_for_bit_where_an_uninterrupted_run_ends(
    fault, tmp_path
) -> None:
    """SLURM (``--signal=B:TERM@60 --requeue``): SIGTERM mid-run (a checkpoint
    is saved, exit 143), then the same command: it resumes. Colab (the
    runtime is lost): SIGKILL mid-run, then the same command: it takes over
    the dead run's lock and resumes from the last chunk's checkpoint. Both end
    bit for bit where an uninterrupted run ends."""
    args = ["train", *LONG, "--chunks", "40", "--checkpoint-every", "0", "--checkpoint-dir"]
    full = _run([*args, "full", "--json", "full.json"], tmp_path)
    assert full.returncode == 0, full.stderr[-3000:]
    proc = _start([*args, "ck", "--json", "ck.json"], tmp_path)
    try:
        _wait_for(proc, "steps/s")
        sig = signal.SIGTERM if fault == "slurm" else signal.SIGKILL
        _, err, delay = _stop(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == (143 if fault == "slurm" else -9), err[-3000:]
    if fault == "slurm":
        assert _one_line(err).startswith("interrupted (SIGTERM) after ")
        assert "checkpoint ck at iteration" in err and delay < 60
    again = _run([*args, "ck", "--json", "ck.json"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from ck at iteration" in again.stdout
    took_over = "took over the lock of a run that is gone" in again.stdout
    assert took_over == (fault == "colab")
    assert _same(_final_state(tmp_path / "ck"), _final_state(tmp_path / "full"))
    curves = [json.loads((tmp_path / n).read_text())["curve"] for n in ("full.json", "ck.json")]
    assert curves[0] == curves[1]
    assert not any(XLA_LOG.match(x) for x in (again.stdout + again.stderr).splitlines())
    assert np.isfinite(json.loads((tmp_path / "ck.json").read_text())["final_return"])


@pytest.mark.slow  # trains, then a CLI process (~20-40 s on 2 cores)
def test_a_damaged_checkpoint_is_one_line_without_orbaxs_shutdown_noise(tmp_path) -> None:
    """Overwritten array data: ``eval`` says so in one line, and none of the
    ``RuntimeError: Event loop is closed`` tracebacks that orbax's pending
    operations printed at exit follow it."""
    from test_runs import QUIET
    from test_runs import TINY as CONFIG

    from jaxsample import runs

    runs.train(CONFIG, folder=tmp_path / "ck", chunks=2, **QUIET)
    for path in (tmp_path / "ck" / "8").rglob("*"):
        if path.is_file() and "/d/" in str(path):
            path.write_bytes(bytes(b ^ 0xFF for b in path.read_bytes()))
    done = _run(["eval", "--checkpoint", "ck"], tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "the checkpoint of iteration 8 cannot be read" in _one_line(done.stderr)

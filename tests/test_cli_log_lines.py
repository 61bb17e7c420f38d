"""The command's standard error holds what the user needs and nothing of
jaxlib's own noise (issue 52 item 6): with ``TF_CPP_MIN_LOG_LEVEL=1``
inherited (a notebook's ``!jaxsample ...``, a test harness), a bad argument
is one line, before anything is compiled or loaded; jaxlib 0.9's notes on a
program loaded from the compile cache are dropped (`jaxsample.cli.xla_log`);
XLA's real errors and everything else still come through."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jaxsample.cli import xla_log

HANG_SECONDS = 240
ABSL_LINE = re.compile(r"^[EWIF]\d{4} ", re.M)


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.pop("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", None)
    env["XDG_CACHE_HOME"] = str(cache)
    env["TF_CPP_MIN_LOG_LEVEL"] = "1"  # inherited from a Python that imported jax
    env.update(extra)
    return env


def _jaxsample(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jaxsample", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_SECONDS,
    )  # fmt: skip


_COLLECT = ["collect", "--env", "CartPole-v1", "--B", "4", "--T", "8", "--batches", "1"]


@pytest.mark.long
def test_cached_programs_and_bad_arguments_print_no_xla_lines(tmp_path) -> None:
    """A second ``collect`` loads its programs from the cache and prints no
    absl line; ``--B 0`` and ``--T 0`` then answer in one line each, with
    the cache full of programs."""
    env = _env(tmp_path / "cache")
    first = _jaxsample(_COLLECT, tmp_path, env)
    assert first.returncode == 0, first.stderr
    second = _jaxsample(_COLLECT, tmp_path, env)
    assert second.returncode == 0, second.stderr
    assert "loaded from the compile cache" in second.stdout, second.stdout
    assert not ABSL_LINE.search(first.stderr + second.stderr), second.stderr
    for flag in ("--B", "--T"):
        bad = _jaxsample([*_COLLECT, flag, "0"], tmp_path, env)
        assert bad.returncode == 2
        assert bad.stderr == f"jaxsample collect: error: {flag} must be >= 1, got 0\n"


@pytest.mark.long
def test_jaxlib_writes_the_lines_the_filter_knows(tmp_path) -> None:
    """The filter's patterns are jaxlib's wording: a plain Python that loads a
    program from JAX's cache gets `xla_log.KNOWN` lines from jaxlib < 0.11 and
    none from a newer one, where the command filters nothing."""
    script = textwrap.dedent(
        f"""
        import jax
        jax.config.update("jax_compilation_cache_dir", {str(tmp_path / "jax")!r})
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        print(jax.jit(lambda x: x * 2 + 1)(jax.numpy.arange(3.0)))
        """
    )
    env = _env(tmp_path)
    runs = [
        subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, timeout=HANG_SECONDS
        )
        for _ in range(2)
    ]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr
    known = [line for line in runs[1].stderr.splitlines() if xla_log.KNOWN.match(line)]
    assert bool(known) == xla_log.needs_filter(), runs[1].stderr
    if known:  # the feature check's two errors and the version note
        text = b"\n".join(known)
        assert b"+prefer-no-gather" in text and b"pjrt_executable.cc" in text


def test_the_filter_drops_only_the_known_lines(tmp_path) -> None:
    """`xla_log.Filter` on a descriptor: every byte written passes, in order,
    but for whole `KNOWN` lines; a line written in pieces is judged whole;
    the copier outlives the writer's abort."""
    known = [
        "W1205 09:12:20.393800   27397 pjrt_executable.cc:642] Assume version compatibility. "
        "PjRt-IFRT does not track XLA executable versions.\n",
        "E1205 09:12:20.397207   27413 cpu_aot_loader.cc:220] Loading XLA:CPU AOT result. "
        "Target machine feature +prefer-no-gather is not  supported on the host machine. "
        "Machine type ... This could lead to execution errors such as SIGILL.\n",
    ]
    pieces = [
        "jaxsample train: CartPole-v1\n",
        known[0],
        known[1][:7],
        known[1][7:40],
        known[1][40:],  # one known line in three writes
        "E1205 09:12:21.000000   27413 cpu_aot_loader.cc:220] Loading XLA:CPU AOT result. "
        "Target machine feature +avx512f is not supported on the host machine.\n",
        "W1205 09:12:22.000000   27397 pjrt_executable.cc:642] another warning\n",
        "progress 10%\r",
        "progress 20%\r",
        "E",
        "rror: a line of our own\n",
        "UserWarning: the user's own\n",
        "F1205 09:12:23.000000   27397 parse_flags_from_env.cc:234] Unknown flag\n",
        "no newline at the end",
    ]
    out = tmp_path / "stderr.txt"
    writer = textwrap.dedent(
        f"""
        import os, sys
        from jaxsample.cli import xla_log
        fd = os.open({str(out)!r}, os.O_WRONLY | os.O_CREAT)
        xla_log.Filter(fd)  # never stopped: the process aborts, as on a fatal XLA error
        for piece in {pieces!r}:
            os.write(fd, piece.encode())
        os.abort()
        """
    )
    run = subprocess.run([sys.executable, "-c", writer], timeout=60)
    assert run.returncode == -6  # SIGABRT
    kept = "".join(pieces)
    for line in known:
        kept = kept.replace(line, "")
    deadline = time.monotonic() + 30
    while out.read_bytes().decode() != kept and time.monotonic() < deadline:
        time.sleep(0.01)  # the copier finishes after its writer died
    assert out.read_bytes().decode() == kept


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path) -> None:
    """``jaxsample envs | true``: the command's output pipe is closed before it
    writes (``true`` exits at once, the command imports JAX first): no
    traceback, exit status 1."""
    run = subprocess.run(
        f"{sys.executable} -m jaxsample envs | true; echo ${{PIPESTATUS[0]}}", shell=True,
        executable="/bin/bash", cwd=tmp_path, env=_env(tmp_path / "cache"),
        capture_output=True, text=True, timeout=HANG_SECONDS,
    )  # fmt: skip
    assert run.stderr == "", run.stderr
    assert run.stdout.strip() == "1", run.stdout

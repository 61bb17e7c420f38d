"""The bench runners' device requests (``python -m jaxsample.bench.driver``,
``python -m jaxsample.bench.devices``): a device that does not exist is one
line and exit status 2 before anything is built; host devices are fabricated
only when asked for (``--host-devices N``, or an ``XLA_FLAGS`` that forces
them), and the run says so.

The test session has 4 forced host devices (conftest's ``XLA_FLAGS``)."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import pytest

from jaxsample.bench import device_requests
from jaxsample.bench import devices as bench_devices
from jaxsample.bench import driver as bench_driver
from jaxsample.errors import UsageError

FORCE = device_requests.FORCE_FLAG


def _no_gpu() -> bool:
    try:
        jax.devices("gpu")
    except RuntimeError:
        return True
    return False


needs_no_gpu = pytest.mark.skipif(not _no_gpu(), reason="this machine has a GPU")


class Restarted(Exception):
    """What the patched ``os.execve`` raises: the runner tried to restart."""


@pytest.fixture
def no_restart(monkeypatch: pytest.MonkeyPatch) -> list:
    """``os.execve`` records its call and raises `Restarted`."""
    calls: list = []

    def execve(path, args, env):
        calls.append((path, list(args), dict(env)))
        raise Restarted

    monkeypatch.setattr(os, "execve", execve)
    return calls


@pytest.fixture
def nothing_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runners' work fails the test if it starts."""

    def built(*args, **kwargs):
        raise AssertionError("the runner started building before checking its devices")

    monkeypatch.setattr(bench_driver, "speed", built)
    monkeypatch.setattr(bench_driver, "scores", built)
    monkeypatch.setattr(bench_devices, "device_scaling", built)


def _unforced_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's ``XLA_FLAGS`` without the forced host devices (as a user's)."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(FORCE)]
    monkeypatch.setenv("XLA_FLAGS", " ".join(flags))


@needs_no_gpu
@pytest.mark.usefixtures("nothing_built")
def test_driver_gpu_on_a_cpu_machine_is_a_usage_error(no_restart) -> None:
    with pytest.raises(UsageError, match=r"--actor-device 'gpu:0': this JAX has no gpu"):
        bench_driver.main(["--actor-device", "gpu:0"])
    assert not no_restart


@pytest.mark.usefixtures("nothing_built")
def test_driver_device_index_past_the_last_is_a_usage_error(no_restart) -> None:
    n = len(jax.devices("cpu"))
    with pytest.raises(UsageError) as e:
        bench_driver.main(["--learner-device", f"cpu:{n}"])
    assert str(e.value) == (
        f"--learner-device 'cpu:{n}': no such device, cpu has {n} "
        f"({', '.join(f'cpu:{i}' for i in range(n))}); ask for host devices with "
        f"--host-devices {n + 1}"
    )
    with pytest.raises(UsageError, match="give platform:index"):
        bench_driver.main(["--actor-device", "cpu:first"])
    with pytest.raises(UsageError, match="--workloads: unknown"):
        bench_driver.main(["--workloads", "nope"])
    assert not no_restart


def test_parse_device() -> None:
    cpu = jax.devices("cpu")
    assert device_requests.parse_device(None, cpu[0], "--x") is cpu[0]
    assert device_requests.parse_device("cpu:1", None, "--x") == cpu[1]
    assert device_requests.parse_device("CPU", None, "--x") == cpu[0]
    with pytest.raises(UsageError, match="a platform of cpu, gpu"):
        device_requests.parse_device("npu:0", None, "--x")


@pytest.mark.usefixtures("nothing_built")
def test_devices_count_beyond_the_devices_is_a_usage_error(no_restart) -> None:
    n = len(jax.devices())
    with pytest.raises(UsageError) as e:
        bench_devices.main(["--devices", "1", str(n + 1)])
    assert str(e.value) == (
        f"--devices {n + 1}: this JAX has {n} cpu devices; ask for host devices with "
        f"--host-devices {n + 1}"
    )
    with pytest.raises(UsageError, match="--devices 0: give device counts >= 1"):
        bench_devices.main(["--devices", "0"])
    assert not no_restart


def test_devices_fabricates_no_host_devices_unasked(
    monkeypatch: pytest.MonkeyPatch, no_restart, capsys
) -> None:
    """Without ``--host-devices`` and without forcing ``XLA_FLAGS`` the runner
    does not restart itself with forced devices (it did, silently), and prints
    no host-devices line."""
    _unforced_environ(monkeypatch)
    ran = []
    monkeypatch.setattr(bench_devices, "device_scaling", lambda *a: ran.append(a) or _fake())
    assert bench_devices.main(["--devices", "1"]) == 0
    assert not no_restart and ran
    assert "host devices" not in capsys.readouterr().out


def test_host_devices_restart_the_runner_when_asked(
    monkeypatch: pytest.MonkeyPatch, no_restart
) -> None:
    _unforced_environ(monkeypatch)
    monkeypatch.setenv("XLA_FLAGS", f"--xla_cpu_foo=1 {FORCE}=3")
    argv = ["--devices", "1", "2", "--host-devices", "2"]
    with pytest.raises(Restarted):
        bench_devices.main(argv)
    ((path, args, env),) = no_restart
    assert path == sys.executable
    assert args == [sys.executable, "-m", "jaxsample.bench.devices", *argv]
    assert env["XLA_FLAGS"] == f"--xla_cpu_foo=1 {FORCE}=2"  # the user's other flags kept
    with pytest.raises(UsageError, match="--host-devices 0: give a count >= 1"):
        bench_devices.main(["--host-devices", "0"])


def test_forced_host_devices_are_said(monkeypatch: pytest.MonkeyPatch, no_restart, capsys) -> None:
    """Once forced (the restarted runner, or the user's ``XLA_FLAGS``), the
    run says so in one line, naming how; nothing restarts again."""
    n = len(jax.devices())
    monkeypatch.setenv("XLA_FLAGS", f"{FORCE}={n}")
    monkeypatch.setattr(bench_devices, "device_scaling", lambda *a: _fake())
    assert bench_devices.main(["--devices", "1", "--host-devices", str(n)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        f"host devices: {n} CPU devices fabricated (--host-devices {n}); they share "
        f"this machine's {os.cpu_count()} cores"
    )
    assert bench_devices.main(["--devices", "1"]) == 0
    assert (
        f"(XLA_FLAGS={FORCE}={n} set in the environment)" in capsys.readouterr().out.splitlines()[0]
    )
    assert not no_restart


def _fake() -> dict:
    return {
        "env": "CartPole-v1",
        "B": 1,
        "T": 1,
        "backend": "cpu",
        "device_kind": "cpu",
        "cpu_count": 1,
        "unsharded_steps_per_s": 1.0,
        "rows": [],
    }


@needs_no_gpu
@pytest.mark.usefixtures("nothing_built")
def test_run_main_answers_a_usage_error_in_one_line_with_status_2(
    monkeypatch: pytest.MonkeyPatch, no_restart, capsys
) -> None:
    """What ``python -m jaxsample.bench.driver`` runs (the subprocess test below
    is the slow set's)."""
    monkeypatch.setattr(sys, "argv", ["driver.py", "--actor-device", "gpu:0"])
    prog = "python -m jaxsample.bench.driver"
    assert device_requests.run_main(bench_driver.main, prog) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [
        f"{prog}: error: --actor-device 'gpu:0': this JAX has no gpu devices "
        f"(it has {', '.join(f'cpu:{i}' for i in range(len(jax.devices())))})"
    ]
    assert not no_restart


@needs_no_gpu
@pytest.mark.slow  # a subprocess importing the runner (~12 s on 2 cores)
def test_driver_runner_answers_a_missing_device_in_one_line_with_status_2() -> None:
    """The runner as a user starts it, on a machine whose JAX has one CPU
    device: no restart with fabricated devices, one line, status 2."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(FORCE)]
    out = subprocess.run(
        [sys.executable, "-m", "jaxsample.bench.driver", "--actor-device", "gpu:0"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "XLA_FLAGS": " ".join(flags)},
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""
    assert out.stderr.splitlines() == [
        "python -m jaxsample.bench.driver: error: --actor-device 'gpu:0': this JAX has no "
        "gpu devices (it has cpu:0)"
    ]

"""Strict test settings: several CPU devices, no implicit rank promotion,
JAX's persistent compilation cache (shared by the xdist workers, the
subprocesses the tests start and the notebook kernels, through the
environment), and slow tests first (so the longest runs start at once and the
fast ones fill the other workers around them)."""

import os
from pathlib import Path

# Several host devices for the sharding tests; must be set before jax starts.
# Compilation is most of what a test costs and the tests' programs run tiny
# batches, so XLA's expensive backend passes are skipped (about a quarter less
# CPU time; the same IEEE arithmetic, deterministic). Every program of the
# session is compiled so, the xdist workers', subprocesses' and notebook
# kernels' too (they inherit the environment), so results compare bit for bit.
FAST_XLA = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count=4 {FAST_XLA}")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The cache lives in the user's cache folder, so a second run (another checkout
# included) is warm; a fresh machine starts cold and fills it. xdist sets
# PYTEST_XDIST_WORKER only after this file is imported, so the workers and
# their subprocesses share one folder ("main"): a program one compiled, the
# other loads. JAX writes an entry in place (no lock unless the cache has a
# size bound, whose eviction scan would cost each write a pass over thousands
# of entries); a read of an entry in the milliseconds another process writes
# it would be a warning, an error here. Not seen in this suite's runs.
_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    / "jaxsample"
    / "jax-tests"
    / os.environ.get("PYTEST_XDIST_WORKER", "main")
)
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(_CACHE))
# Every program is kept, the tiny ones too (a flax init outside jit compiles
# each op): the default set runs warm in under 2 minutes on 2 cores (2 min 20 s
# when only compiles over 0.2 s were kept); a cold run writes more (+10%).
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# XLA's C++ warnings off (pjrt logs "Assume version compatibility" at every
# cache hit): the CLI tests read their subprocesses' stderr line by line.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_debug_nans", False)


def pytest_collection_modifyitems(config, items) -> None:
    """Run the tests marked slow first, learning runs (the longest) before the
    other slow ones, then the default set's long tests (marked ``long``), so
    the workers do not wait on one long test at the end; stable order
    otherwise."""
    items.sort(
        key=lambda item: (
            item.get_closest_marker("slow") is None,
            "learns" not in item.name,
            item.get_closest_marker("long") is None,
        )
    )


@pytest.fixture
def ran(monkeypatch, tmp_path):
    """``ran(*argv)``: run ``jaxsample train *argv`` with the run package's
    `train` replaced by a recorder; what it was passed (config and options).
    Nothing trains."""
    import types

    from jaxsample.algos import presets
    from jaxsample.cli import main
    from jaxsample.runs import run

    calls: list[dict] = []

    def record(config=None, **kwargs):
        # the config the run would train (from a preset: the run's own function)
        preset = kwargs.pop("preset", None)
        config, preset = presets.resolve(config, preset, kwargs.get("overrides"))
        calls.append({"config": config, "preset": preset, **kwargs})
        return types.SimpleNamespace(interrupted=False, exit_status=0)

    monkeypatch.setattr(run, "train", record)
    monkeypatch.chdir(tmp_path)

    def train(*argv: str) -> dict:
        assert main(["train", *argv, "--csv", str(tmp_path / "t.csv")]) == 0
        return calls[-1]

    return train


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site, built once with ``mkdocs build --strict`` (about
    10 s on 2 cores, mostly mkdocstrings reading the package's docstrings);
    the build's failure fails every test that reads it (tests/test_docs.py,
    tests/test_api_reference.py: one ``xdist_group``, so one worker builds it).
    Not ``--quiet``: it raises mkdocs' log level past warnings, and ``--strict``
    counts only the warnings that are logged, so a quiet build passes with a
    broken cross-reference."""
    import subprocess
    import sys

    from helpers import HANG_SECONDS

    root = Path(__file__).resolve().parent.parent
    out_dir = tmp_path_factory.mktemp("mkdocs") / "site"
    build = ["build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(out_dir)]
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", *build],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # mkdocs-material's banner
    )
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "WARNING" not in log, log
    return out_dir

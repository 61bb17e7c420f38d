"""What a user sees installing the package and asking the CLI for help."""

from __future__ import annotations

import re
import tomllib
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_project_metadata_reads_without_deprecation_warnings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``pip install`` printed setuptools' ``project.license`` deprecation six
    times (the table form, ``{ text = ... }``): the license is an SPDX
    expression, which needs setuptools >= 77 (PEP 639)."""
    setuptools = pytest.importorskip("setuptools")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(pyproject["project"]["license"], str)
    assert "setuptools>=77" in pyproject["build-system"]["requires"]
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} predates PEP 639")
    monkeypatch.chdir(ROOT)  # the readme is read relative to the project
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert not [str(w.message) for w in caught if "license" in str(w.message).lower()]


def test_no_compile_cache_help_shows_no_default(capsys: pytest.CaptureFixture) -> None:
    """``--no-compile-cache`` is a store_false flag: the subcommands' help
    formatter printed its ``(default: True)`` after a help that already says
    what the default is. The value still defaults to True."""
    from jaxsample.cli.parser import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    start = help_text.index("--no-compile-cache compile every program again")
    assert "(default: True)" not in help_text[start : start + 300]
    assert "(default: JAX's persistent compilation cache" in help_text[start:]


#: The ``envs`` extra's packages as the README names their suites (mujoco-mjx
#: is Brax's physics, not a suite of its own).
SUITE_NAMES = {
    "brax": "Brax",
    "jumanji": "Jumanji",
    "craftax": "Craftax",
    "navix": "Navix",
    "xminigrid": "XLand-MiniGrid",
    "jaxmarl": "JaxMARL",
    "pgx": "Pgx",
}


def test_readme_envs_comment_names_every_suite_of_the_extra() -> None:
    """The README's ``.[envs]`` install line says what it adds: every suite of
    the extra (it left out Pgx)."""
    from packaging.requirements import Requirement

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    packages = {Requirement(r).name for r in extra["optional-dependencies"]["envs"]}
    assert packages - {"mujoco-mjx"} == set(SUITE_NAMES)
    (line,) = [ln for ln in (ROOT / "README.md").read_text().splitlines() if '".[envs]"' in ln]
    comment = line.split("#", 1)[1]
    missing = [name for name in SUITE_NAMES.values() if name not in comment]
    assert not missing, f"the README's .[envs] line leaves out {missing}"


def test_ci_run_installs_only_into_its_own_venvs() -> None:
    """``bash .ci/run`` (the README's test command) installed its Python 3.11
    part with ``python3 -m pip`` into the machine's own interpreter: every pip,
    ruff and pytest it runs is a ``.venv-py3xx`` interpreter's, each venv made
    by the script and git-ignored; the README says how long it takes."""
    script = (ROOT / ".ci/run").read_text()
    commands = [
        line.strip()
        for line in script.splitlines()
        if not line.strip().startswith("#") and re.search(r"-m (pip|pytest|ruff)\b", line)
    ]
    assert commands
    for cmd in commands:
        assert re.match(r"\.venv-py31[12]/bin/python -m ", cmd), cmd
    for venv in (".venv-py312", ".venv-py311"):
        assert re.search(rf"-m venv {venv}\b", script), venv
        assert f"{venv}/" in (ROOT / ".gitignore").read_text().splitlines()
    readme = (ROOT / "README.md").read_text()
    before_command = readme[: readme.index("\nbash .ci/run\n")]
    assert re.search(r"about \d+ minutes on 2 cores", before_command[-600:])

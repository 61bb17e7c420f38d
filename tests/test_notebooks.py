"""The notebooks run top to bottom (small), carry no outputs, and match their generator."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
NAMES = ["quickstart.ipynb", "end_to_end_ppo.ipynb", "accelerator_benchmark.ipynb"]


def _generator():
    spec = importlib.util.spec_from_file_location("make_notebooks", NOTEBOOKS / "make_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / name, as_version=4)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_committed_clean_and_matches_its_generator(name: str) -> None:
    nb = _read(name)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "clear the outputs"
    expected = _generator().build(_generator().NOTEBOOKS[name])
    assert [(c.cell_type, c.source) for c in nb.cells] == [
        (c.cell_type, c.source) for c in expected.cells
    ], "run python3 notebooks/make_notebooks.py"
    assert nb.metadata.kernelspec.name == "python3"
    # The first code cell installs jaxsample when it is missing (Colab).
    first = next(c for c in nb.cells if c.cell_type == "code").source
    assert 'find_spec("jaxsample") is None' in first and "%pip install" in first


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name: str, tmp_path, monkeypatch) -> None:
    from nbclient import NotebookClient

    # The kernel inherits this environment: small sizes, conftest's CPU devices,
    # and this checkout importable (so the install cell has nothing to do).
    monkeypatch.setenv("JAXSAMPLE_NOTEBOOK_SCALE", "small")
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    # Inline plots: an earlier import of envpool in this process sets MPLBACKEND=Agg.
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = _read(name)
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell

    text = "\n".join(
        out.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type == "stream" and out.name == "stdout"
    )
    images = sum(
        "image/png" in out.get("data", {})
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
    )
    assert "%pip" not in text and "Successfully installed" not in text  # nothing installed
    if name == "quickstart.ipynb":
        assert "env.observation          (128, 64, 4)" in text
        assert "prev_reward after a done step is 0: True" in text
        assert "episodic: " in text and "done[-1] all: True" in text
        assert images == 2
    elif name == "end_to_end_ppo.ipynb":
        assert "4 runs x 6 iterations" in text
        assert text.count("final average return") == 4
        # runs.train from the preset: its first line, its table
        assert "ppo on CartPole-v1 (preset CartPole-v1), 1,024 steps per seed" in text
        assert "final returns: [" in text and "final return: the mean return" in text
        assert images == 1
    else:
        from jaxsample import bench

        result = json.loads((tmp_path / "bench.json").read_text())
        assert [(c["env"], c["B"]) for c in result["cells"]] == [("CartPole-v1", 4)]
        assert result["cells"][0]["methods"].keys() == set(bench.METHODS)
        assert "  random " in text and "| env | B | T |" in text  # the table, the markdown
        assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert images == 1


class _Shell:
    """Stands in for IPython in the install cell: records each ``%pip`` line,
    expanded as IPython expands it, instead of running pip."""

    def __init__(self) -> None:
        self.pip: list[str] = []

    def run_line_magic(self, name: str, line: str, _stack_depth: int = 1) -> None:
        import sys

        from IPython.utils.text import DollarFormatter

        frame = sys._getframe(1)
        namespace = {**frame.f_globals, **frame.f_locals}
        assert name == "pip"
        self.pip.append(DollarFormatter().vformat(line, (), namespace))


def _run_install_cell(cwd: pathlib.Path, monkeypatch, spec: str | None = None) -> list[str]:
    """Run the notebooks' first code cell in ``cwd`` as a kernel without jaxsample would."""
    import importlib.util as iu

    from IPython.core.inputtransformer2 import TransformerManager

    real_find_spec = iu.find_spec
    monkeypatch.setattr(
        iu, "find_spec", lambda name, *a: None if name == "jaxsample" else real_find_spec(name, *a)
    )
    if spec is None:
        monkeypatch.delenv("JAXSAMPLE_PIP_SPEC", raising=False)
    else:
        monkeypatch.setenv("JAXSAMPLE_PIP_SPEC", spec)
    monkeypatch.chdir(cwd)
    shell = _Shell()
    code = TransformerManager().transform_cell(_generator().INSTALL)
    exec(compile(code, "install-cell", "exec"), {"get_ipython": lambda: shell})
    return shell.pip


@pytest.mark.slow
def test_install_cell_installs_an_uploaded_wheel(tmp_path, monkeypatch) -> None:
    """The Colab path the README documents: build the wheel with
    ``pip wheel --no-deps -w dist .``, upload it next to the notebook, run the
    first cell. The wheel it picks installs a jaxsample that imports whole."""
    import shutil
    import subprocess
    import sys
    import zipfile

    from helpers import build_wheel

    wheel = build_wheel(tmp_path)
    content = tmp_path / "content"  # Colab's working folder
    content.mkdir()
    shutil.copy(wheel, content / wheel.name)

    lines = _run_install_cell(content, monkeypatch)
    assert lines == [f"install -q {wheel.name}"]

    # What pip installs from this pure-Python wheel (its files, unpacked): every
    # subpackage, importable outside the checkout.
    site = tmp_path / "site"
    with zipfile.ZipFile(content / wheel.name) as archive:
        archive.extractall(site)
    probe = (
        "import jaxsample, jaxsample.core.rollout, jaxsample.bench, jaxsample.envs.suites, "
        "jaxsample.replay, jaxsample.host; print(jaxsample.__file__)"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert out.strip() == str(site / "jaxsample" / "__init__.py")


def test_install_cell_order_and_its_error(tmp_path, monkeypatch) -> None:
    """JAXSAMPLE_PIP_SPEC first, then the checkout around the notebook, then an
    uploaded wheel; with none of them, one clear error and nothing installed."""
    assert _run_install_cell(tmp_path, monkeypatch, spec="git+https://x/y.git") == [
        "install -q git+https://x/y.git"
    ]
    assert _run_install_cell(NOTEBOOKS, monkeypatch) == ["install -q -e .."]
    with pytest.raises(RuntimeError, match=r"upload a jaxsample-\*\.whl .* JAXSAMPLE_PIP_SPEC"):
        _run_install_cell(tmp_path, monkeypatch)

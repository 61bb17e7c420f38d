"""The package's layers show: no import cycle, no upward import, small modules.

The import graph (lazy imports inside functions included) comes from
``tools/import_graph.py``, which also prints it; its ``LAYERS`` table is the
layering of docs/design.md.
"""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "tools/import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_cycle_and_no_upward_import() -> None:
    tool = _tool()
    modules, edges = tool.graph()
    assert "jaxsample.core" in modules and "jaxsample.sampler" in edges
    assert tool.find_cycles(edges) == []
    assert tool.upward_imports(edges) == []
    # Every module has a layer (a new module must be placed in LAYERS).
    for m in modules:
        tool.layer(m)


def test_the_package_root_imports_no_high_layer() -> None:
    _, edges = _tool().graph()
    root = set(edges["jaxsample"])
    assert not {m for m in root if m.startswith(("jaxsample.algos", "jaxsample.driver"))}
    assert not {m for m in root if m.startswith(("jaxsample.bench", "jaxsample.cli"))}


def test_no_library_module_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted((ROOT / "jaxsample").rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > 600
    }
    assert long == {}

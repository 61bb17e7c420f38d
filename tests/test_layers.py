"""The package's layers show: no import cycle, no upward import, small modules.

The import graph (lazy imports inside functions included) comes from
``tools/import_graph.py``, which also prints it; its ``LAYERS`` table is the
layering of docs/design.md.
"""

from pathlib import Path

from helpers import load_tool

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    return load_tool("import_graph")


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


def test_no_function_in_core_over_60_lines() -> None:
    """Issue 28: the core is small composable functions; a function (method,
    nested function) of jaxsample/core longer than 60 lines, docstring
    included, fails here."""
    import ast

    long = {}
    for p in sorted((ROOT / "jaxsample/core").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    long[f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"] = n
    assert long == {}

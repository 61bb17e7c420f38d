"""The package's layers show: no import cycle, no upward import, small modules.

The import graph of ``jaxsample/`` and ``tools/`` (lazy imports inside
functions included) comes from ``tools/import_graph.py``, which also prints
it; its ``LAYERS`` table is the layering of docs/design.md, fine enough to
see the benchmarks import the command line, or a trainer the machinery that
runs it.
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
    assert {"tools.preset_page", "tools.preset_results"} <= modules  # tools/ too
    assert tool.find_cycles(edges) == []
    assert tool.unexpected_upward(edges) == []
    # The known upward imports only shrink: a removed one leaves the table.
    assert tool.stale_known(edges) == []
    # Every module has a layer (a new module must be placed in LAYERS).
    for m in modules:
        tool.layer(m)


def test_the_layers_are_fine_enough_to_see_what_the_issue_names() -> None:
    """bench -> cli, a trainer -> the run machinery, anything -> tools, and
    the light layer -> anything heavy are upward imports."""
    tool = _tool()
    upward = [
        ("jaxsample.bench.driver", "jaxsample.cli.base"),
        ("jaxsample.algos.ppo", "jaxsample.runs.loop"),
        ("jaxsample.algos.dqn", "jaxsample.runs.programs"),
        ("jaxsample.algos.common", "jaxsample.runs.program_store"),
        ("jaxsample.algos.trainer", "jaxsample.algos.ppo"),
        ("jaxsample.runs.run", "jaxsample.bench.training"),
        ("jaxsample.cli.parser", "tools.preset_page"),
        ("jaxsample.algos.registry", "jaxsample.algos.drivers"),
        ("jaxsample.algos.configs", "jaxsample.types"),
        ("jaxsample.errors", "jaxsample.replay.types"),
    ]
    for a, b in upward:
        assert tool.layer(a) < tool.layer(b), (a, b)
    edges = {a: {b: False} for a, b in upward}
    assert sorted(tool.upward_imports(edges)) == sorted(upward)
    light = {m for m in tool.graph()[0] if tool.layer(m) == 0}
    assert light == {
        "jaxsample.errors",
        "jaxsample._checks",
        "jaxsample.algos.configs",
        "jaxsample.algos.off_policy_configs",
        "jaxsample.algos.registry",
        "jaxsample.algos.presets",
    }


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

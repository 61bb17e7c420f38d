"""Module -> module imports of ``jaxsample/`` and ``tools/`` (lazy ones too),
cycles and upward imports.

``python3 tools/import_graph.py`` prints every edge (``lazy`` when the import
sits inside a function), then the cycles and the imports that go up a layer,
and exits 1 if there is any (beyond `KNOWN_UPWARD`, each of which must still
exist). A module's layer is that of the longest prefix of its dotted name
found in ``LAYERS``; a module may import its own layer or lower ones. The
scripts of ``tools/`` are modules ``tools.<name>`` (they import each other by
bare name: ``import preset_page``). A module loaded by name through
``importlib`` (the registry's trainers) is no edge.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "jaxsample"
TOOLS = ROOT.parent / "tools"

#: lowest first
LAYERS: list[tuple[str, ...]] = [
    # the light layer: no JAX (nor numpy); the command line's --help and
    # argument errors, and every layer's errors and argument checks
    (
        "jaxsample.errors",
        "jaxsample._checks",
        "jaxsample.algos.configs",
        "jaxsample.algos.off_policy_configs",
        "jaxsample.algos.registry",
        "jaxsample.algos.presets",
    ),
    ("jaxsample.types", "jaxsample.compile_cache"),
    (
        "jaxsample.traj_info",
        "jaxsample.metrics",
        "jaxsample.replay",
        "jaxsample.agents",
        "jaxsample.envs",
    ),
    (
        "jaxsample.core",
        "jaxsample.sampler",
        "jaxsample.evaluation",
        "jaxsample.host",
        "jaxsample.distributed",
        "jaxsample.checkpoint",
    ),
    ("jaxsample",),  # the package root (jaxsample/__init__.py)
    ("jaxsample.driver", "jaxsample._driver_run"),
    # what a trainer is built from: the Trainer protocol, value targets, the
    # trainers' shared pieces, games' evaluation
    (
        "jaxsample.algos.trainer",
        "jaxsample.algos.returns",
        "jaxsample.algos.common",
        "jaxsample.algos.games",
    ),
    # the trainers (and any other module of jaxsample.algos)
    ("jaxsample.algos", "jaxsample.algos.ppo", "jaxsample.algos.dqn", "jaxsample.algos.drivers"),
    # the run machinery: what runs a trainer
    ("jaxsample.runs",),
    ("jaxsample.bench",),
    ("jaxsample.cli", "jaxsample.__main__"),
    ("tools",),  # the repository's scripts
]

#: Upward imports that exist today and are being removed, each with why it
#: goes: not counted as failures while they exist; once one is gone, its
#: entry here fails the check until it is deleted (the table only shrinks).
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    """``jaxsample.algos.ppo`` of ``jaxsample/algos/ppo.py``, ``tools.preset_page``
    of ``tools/preset_page.py``."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> int:
    best, best_len = None, -1
    for i, names in enumerate(LAYERS):
        for name in names:
            hit = module == name or module.startswith(name + ".") or module.startswith(name + "_")
            if hit and len(name) > best_len and (name != "jaxsample" or module == "jaxsample"):
                best, best_len = i, len(name)
    if best is None:
        raise SystemExit(f"no layer for {module}: add it to LAYERS")
    return best


def imports(path: Path, modules: set[str]) -> list[tuple[str, bool]]:
    """``(imported module, lazy)`` for every jaxsample (or, in ``tools/``,
    sibling script) import in ``path``; ``from a import b`` counts as ``a.b``
    when that is a module."""
    tree = ast.parse(path.read_text(), str(path))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: list[tuple[str, bool]] = []

    def ours(name: str) -> str | None:
        """``name`` as a module of the graph: a tool imports its siblings by bare name."""
        if me.startswith("tools.") and f"tools.{name.split('.')[0]}" in modules:
            return f"tools.{name}"
        return name if name == "jaxsample" or name.startswith("jaxsample.") else None

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found = (ours(a.name) for a in child.names)
                out.extend((name, lazy) for name in found if name is not None)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                base = ours(base) if base else None
                if base is None:
                    continue
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    out.append((sub if sub in modules else base, lazy))
            visit(child, inner)

    visit(tree, False)
    return [(m, lazy) for m, lazy in out if m != me]


def graph() -> tuple[set[str], dict[str, dict[str, bool]]]:
    """The modules of ``jaxsample/`` and ``tools/`` and their edges ``{a: {b: lazy}}``."""
    paths = sorted(ROOT.rglob("*.py")) + sorted(TOOLS.glob("*.py"))
    modules = {module_name(p) for p in paths}
    edges: dict[str, dict[str, bool]] = {}
    for p in paths:
        me = module_name(p)
        for target, lazy in imports(p, modules):
            target = target if target in modules else target.rpartition(".")[0]
            prev = edges.setdefault(me, {}).get(target)
            edges[me][target] = lazy if prev is None else (prev and lazy)
    return modules, edges


def upward_imports(edges: dict[str, dict[str, bool]]) -> list[tuple[str, str]]:
    """The edges that go up a layer (a package importing its own parent excepted)."""
    return sorted(
        (a, b) for a in edges for b in edges[a] if layer(b) > layer(a) and not a.startswith(b + ".")
    )


def unexpected_upward(edges: dict[str, dict[str, bool]]) -> list[tuple[str, str]]:
    """The upward imports not in `KNOWN_UPWARD`: failures."""
    return [edge for edge in upward_imports(edges) if edge not in KNOWN_UPWARD]


def stale_known(edges: dict[str, dict[str, bool]]) -> list[tuple[str, str]]:
    """The entries of `KNOWN_UPWARD` that are no upward import any more: delete them."""
    return sorted(set(KNOWN_UPWARD) - set(upward_imports(edges)))


def main() -> int:
    modules, edges = graph()
    for me in sorted(edges):
        for target in sorted(edges[me]):
            print(f"{me} -> {target}{'  (lazy)' if edges[me][target] else ''}")

    upward = unexpected_upward(edges)
    stale = stale_known(edges)
    cycles = find_cycles(edges)
    print(f"\n{len(modules)} modules, {sum(map(len, edges.values()))} edges, {len(LAYERS)} layers")
    print(f"upward imports: {len(upward)}")
    for a, b in sorted(upward):
        print(f"  {a} (layer {layer(a)}) -> {b} (layer {layer(b)})")
    known = sorted(set(KNOWN_UPWARD) - set(stale))
    print(f"known upward imports being removed (KNOWN_UPWARD): {len(known)}")
    for a, b in known:
        print(f"  {a} -> {b}: {KNOWN_UPWARD[a, b]}")
    if stale:
        print(f"KNOWN_UPWARD entries that are gone (delete them): {len(stale)}")
        for a, b in stale:
            print(f"  {a} -> {b}")
    print(f"cycles (modules that import each other, directly or not): {len(cycles)}")
    for c in cycles:
        print("  " + ", ".join(c))
    return 1 if upward or stale or cycles else 0


def find_cycles(edges: dict[str, dict[str, bool]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module
    (Tarjan), ignoring a package's imports of its own submodules."""

    def succ(a: str) -> list[str]:
        # a package's __init__ importing its submodules is not a cycle with them
        return [b for b in edges.get(a, {}) if not b.startswith(a + ".")]

    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ(v):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return comps


if __name__ == "__main__":
    sys.exit(main())

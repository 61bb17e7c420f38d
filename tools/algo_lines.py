"""How much one reads to read an algorithm: its module's lines, and those of the
``jaxsample.algos`` modules it imports (transitively, statically; the package's
own ``__init__`` aside; no trainer imports the run loop). The config module,
data and checks of the light layer (no JAX), is counted apart.

    python tools/algo_lines.py ppo dqn
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "jaxsample.algos"
CONFIGS = "jaxsample.algos.configs"


def path_of(module: str) -> Path | None:
    """The file of a ``jaxsample.algos`` module, None for another or a package."""
    path = ROOT / (module.replace(".", "/") + ".py")
    return path if path.exists() else None


def imports(module: str) -> set[str]:
    """The ``jaxsample.algos`` modules that ``module`` imports (lazy ones too)."""
    path = path_of(module)
    if path is None:
        return set()
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n.startswith(PACKAGE + ".") and path_of(n)}
    return found - {module}


def closure(module: str) -> list[str]:
    """Every ``jaxsample.algos`` module ``module`` imports, transitively, sorted."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for name in imports(todo.pop()):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return sorted(seen - {module})


def lines(module: str) -> int:
    return len(path_of(module).read_text().splitlines())


def main(names: list[str]) -> None:
    for name in names or ["ppo", "dqn"]:
        module = f"{PACKAGE}.{name}"
        others = closure(module)
        print(f"{module}: {lines(module)} lines")
        for other in others:
            print(f"  imports {other}: {lines(other)}")
        total = sum(lines(o) for o in others)
        light = sum(lines(o) for o in others if o.startswith(CONFIGS))
        print(f"  imported algos modules: {total - light} lines (+ {light} of configs)")


if __name__ == "__main__":
    main(sys.argv[1:])

"""The API reference (docs/api/*.md, rendered by mkdocstrings) read back from
the built site (the ``site`` fixture, tests/conftest.py).

Google-style docstrings have one name per ``Args:``/``Attributes:`` entry and
one exception per ``Raises:`` entry, continued on lines indented deeper than
the entry. A grouped entry (``seeds, settings: ...``) renders as the name
``seeds,`` of type ``settings``; a continuation at the entry's indentation
renders as a new entry or is dropped (a ``Raises:`` text cut mid-sentence).
These tests read the rendered tables, and the docstrings of the whole package
(the modules the site does not render included).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import inspect
import re
import types
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "docs" / "api"

pytestmark = pytest.mark.xdist_group("mkdocs_site")

NAME = re.compile(r"\*{0,2}[A-Za-z_]\w*")
DOTTED = re.compile(r"[A-Za-z_][\w.]*")


class _Tables(HTMLParser):
    """The rows of mkdocstrings' section tables (``Parameters:``,
    ``Attributes:``, ``Raises:``, ``Returns:``): ``(object id, section,
    [cell texts])``, the object being the nearest heading's."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str, list[str]]] = []
        self._object = ""
        self._section: str | None = None
        self._title = False
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if re.fullmatch(r"h[1-6]", tag) and (a.get("id") or "").startswith("jaxsample"):
            self._object, self._section = a["id"] or "", None
        elif tag == "span" and a.get("class") == "doc-section-title":
            self._title, self._section = True, ""
        elif tag == "tr" and a.get("class") == "doc-section-item":
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self._title:
            self._title = False
        elif tag == "td" and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append((self._object, (self._section or "").rstrip(":"), self._row))
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._title:
            self._section = (self._section or "") + data
        elif self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def rows(site: Path) -> list[tuple[str, str, list[str]]]:
    """Every section-table row of the API pages."""
    found: list[tuple[str, str, list[str]]] = []
    for page in sorted((site / "api").rglob("index.html")):
        tables = _Tables()
        tables.feed(page.read_text())
        found += tables.rows
    assert len(found) > 500, "the API pages' tables were not found"
    return found


def _entries(rows: list, obj: str, section: str) -> dict[str, list[str]]:
    return {cells[0]: cells for o, s, cells in rows if o == obj and s == section}


def _resolve(path: str) -> Any:
    """The object of a heading id (``jaxsample.runs.run.RunResult``)."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise AssertionError(f"no object {path}")


def test_every_entry_names_one_thing(rows: list) -> None:
    """A parameter or attribute row names one identifier, with no comma or
    slash left in its name or type cell; a ``Raises`` row one exception."""
    bad = []
    for obj, section, cells in rows:
        if section in ("Parameters", "Attributes", "Other Parameters"):
            name, kind = cells[0], cells[1] if len(cells) > 2 else ""
            if not NAME.fullmatch(name) or kind.startswith(("/", ",")) or kind.endswith(","):
                bad.append((obj, section, name, kind))
        elif section == "Raises" and not DOTTED.fullmatch(cells[0]):
            bad.append((obj, section, cells[0]))
    assert not bad, bad


def _bare(annotation: str) -> str:
    """An annotation as the site shows it: no module prefixes, no spaces."""
    return re.sub(r"\b\w+\.", "", annotation).replace(" ", "")


@pytest.mark.parametrize(
    ("obj", "names"),
    [
        ("jaxsample.runs.run.RunResult", ["names", "seeds", "settings", "folder"]),
        ("jaxsample.runs.loaded.LoadedRun", ["history", "names", "seeds", "settings"]),
        ("jaxsample.algos.configs.PPOConfig", ["gamma", "gae_lambda", "ent_coef", "vf_coef"]),
        (
            "jaxsample.algos.off_policy_configs.PQNConfig",
            ["gamma", "q_lambda", "epsilon_final_min"],
        ),
        ("jaxsample.evaluation.Evaluator", ["n_envs", "max_steps", "mode", "discount"]),
        ("jaxsample.replay.Replayer", ["init", "add", "sample", "replay_all", "can_sample"]),
    ],
)
def test_grouped_attributes_render_one_row_each(rows: list, obj: str, names: list[str]) -> None:
    """The attributes once documented in groups (``seeds, settings:``) are
    rows of their own, each with its type from the class."""
    documented = _entries(rows, obj, "Attributes")
    missing = [n for n in names if n not in documented]
    assert not missing, f"{obj}: no row for {missing}; rows: {list(documented)}"
    annotations = inspect.get_annotations(_resolve(obj), eval_str=False)
    for name in names:
        kind, want = documented[name][1], str(annotations[name])
        assert _bare(kind) == _bare(want), (obj, name, kind, want)


def test_documented_attributes_are_the_objects(rows: list) -> None:
    """Every row of an ``Attributes`` table names an attribute of its object
    (a field, a class attribute, a property or an ``__init__`` argument),
    and a dataclass's table has every public field the class itself declares."""
    tables: dict[str, list[str]] = {}
    for obj, section, cells in rows:
        if section == "Attributes":
            tables.setdefault(obj, []).append(cells[0])
    assert len(tables) > 50
    problems = []
    for path, names in tables.items():
        obj = _resolve(path)
        known = set(dir(obj))
        if isinstance(obj, type):
            for klass in obj.__mro__:
                known |= set(inspect.get_annotations(klass))
            with contextlib.suppress(TypeError, ValueError):  # no signature
                known |= set(inspect.signature(obj).parameters)
        stray = [n for n in names if n not in known]
        own = inspect.get_annotations(obj) if isinstance(obj, type) else {}
        fields = (
            {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()
        )
        undocumented = [f for f in own if f in fields and not f.startswith("_") and f not in names]
        if stray or undocumented:
            problems.append((path, "not attributes:", stray, "undocumented:", undocumented))
    assert not problems, problems


def test_raises_entries_are_whole_sentences(rows: list) -> None:
    """A ``Raises`` description is whole (a continuation line at the entry's
    indentation was dropped: "... or an agent whose action does not")."""
    raises = [(o, cells) for o, s, cells in rows if s == "Raises"]
    assert len(raises) > 20
    cut = [(o, cells) for o, cells in raises if not cells[-1].rstrip().endswith((".", ")"))]
    assert not cut, cut
    make_sampler = _entries(rows, "jaxsample.sampler.make_sampler", "Raises")
    assert set(make_sampler) == {"TypeError", "ValueError"}, make_sampler
    assert make_sampler["ValueError"][-1].endswith(
        "or an agent whose action does not fit the action space, or whose state or "
        "agent_info changes structure."
    ), make_sampler
    make_evaluator = _entries(rows, "jaxsample.evaluation.make_evaluator", "Raises")
    assert make_evaluator["ValueError"][-1].endswith("does not fit the action space.")


def test_replay_factories_are_rendered(site: Path, rows: list) -> None:
    """``jaxsample.replay``'s factories share their names with their modules;
    the replay page still shows each, under the name users call."""
    html = (site / "api" / "replay" / "index.html").read_text()
    for name in ("uniform", "one_time", "prioritized", "prefill"):
        anchor = f'id="jaxsample.replay.{name}.{name}"'
        assert anchor in html, name
        heading = html[html.index(anchor) : html.index("</h", html.index(anchor))]
        text = re.sub(r"<[^>]*>|&para;", " ", heading.partition(">")[2]).split()
        assert text == [f"jaxsample.replay.{name}"], heading
    # with their docstrings' tables, not only a heading
    assert "capacity" in _entries(rows, "jaxsample.replay.uniform.uniform", "Parameters")
    assert "alpha" in _entries(rows, "jaxsample.replay.prioritized.prioritized", "Parameters")


def _directives() -> list[tuple[str, str]]:
    """``(page, module)`` for every ``::: module`` of docs/api/."""
    return [
        (page.stem, module)
        for page in sorted(API.glob("*.md"))
        for module in re.findall(r"^::: (\S+)", page.read_text(), re.M)
    ]


def test_every_exported_function_and_class_is_rendered(site: Path) -> None:
    """Each function and class a rendered module exports (``__all__``) has its
    entry on the module's page (a name that griffe resolves to a submodule of
    the same name is not rendered: the replay factories were missing)."""
    missing = []
    for page, module_name in _directives():
        module = _resolve(module_name)
        if not isinstance(module, types.ModuleType):  # one function (the replay factories)
            continue
        ids = set(
            re.findall(r'id="(jaxsample[^"]*)"', (site / "api" / page / "index.html").read_text())
        )
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or obj.__name__ != name:
                continue
            if not any(i == f"{module_name}.{name}" or i.endswith(f".{name}") for i in ids):
                missing.append(f"{page}: {module_name}.{name}")
    assert not missing, missing


# ---------------------------------------------------------------------------
# The docstrings themselves (every module of the package, rendered or not)
# ---------------------------------------------------------------------------

_SECTION = re.compile(
    r"(\s*)(Args|Arguments|Parameters|Attributes|Raises|Keyword Args|Other Parameters)"
    r"( \([^)]*\))?:\s*"
)
_ENTRY = re.compile(r"\*{0,2}[A-Za-z_]\w*( \([^)]*\))?:( |$)")
_RAISES = re.compile(r"[A-Za-z_][\w.]*:( |$)")


def bad_entries(doc: str) -> list[str]:
    """The lines of ``doc``'s ``Args``/``Attributes``/``Raises`` sections at an
    entry's indentation that are not one name (or exception) and a colon."""
    lines = doc.splitlines()
    bad = []
    i = 0
    while i < len(lines):
        m = _SECTION.fullmatch(lines[i])
        i += 1
        if not m:
            continue
        base, entry, item = len(m.group(1)), _RAISES if m.group(2) == "Raises" else _ENTRY, None
        while i < len(lines):
            line = lines[i]
            indent = len(line) - len(line.lstrip())
            if not line.strip():
                rest = [x for x in lines[i:] if x.strip()]
                if not rest or len(rest[0]) - len(rest[0].lstrip()) <= base:
                    break
            elif indent <= base:
                break
            elif item is None or indent == item:
                item = indent
                if not entry.match(line.strip()):
                    bad.append(line.strip())
            i += 1
    return bad


def test_bad_entries_finds_groups_and_cut_lines() -> None:
    doc = (
        "Build it.\n\nArgs:\n  env, env_params: the env.\n  agent: the agent,\n"
        "    wrapped.\n\n    A second paragraph.\n  n: count.\n\nRaises:\n"
        "  TypeError, ValueError: bad.\n  KeyError: missing, or\n  a cut line.\n"
    )
    assert bad_entries(doc) == [
        "env, env_params: the env.",
        "TypeError, ValueError: bad.",
        "a cut line.",
    ]
    assert bad_entries("Attributes:\n  a: one.\n  b (int): two,\n    wrapped.\n") == []


def test_docstring_entries_name_one_thing() -> None:
    """Across the package (the command line and the other modules the site
    does not render included): no grouped entry, no entry's continuation at
    the entry's indentation."""
    found = []
    for path in sorted((ROOT / "jaxsample").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=True)
                where = f"{path.relative_to(ROOT)}:{getattr(node, 'name', '')}"
                found += [f"{where}: {line}" for line in bad_entries(doc or "")]
    assert not found, found

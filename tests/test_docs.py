"""The README and the documentation site (mkdocs.yml, docs/).

* ``mkdocs build --strict`` builds the site: a broken link, a missing page or
  an API reference (``::: jaxsample.xxx``) to something that is not there fails.
* The docstrings cross-reference the mkdocstrings way (``[`Name`][jaxsample.x.Name]``,
  resolved and checked by the strict build, or plain inline code): no Sphinx role
  (``:class:``, ``:func:``, ...) in the package's source nor raw in the built site.
* Every ```` ```python ```` block of the README and of docs/ runs. The blocks of
  one page run in order in one namespace (a later block may use what an earlier
  one made), in a fresh working folder. A block that is not meant to run as
  written says so on the line before its fence, with the reason:
  ``<!-- docs-test: skip (needs a GPU) -->``. A page whose blocks take long
  carries ``<!-- docs-test: slow -->`` and runs in the slow set. Keep examples
  tiny (small ``T``, ``B``, budgets): the default set runs them. A slow page
  whose examples learn keeps a smoke run in the default set (the own-learner
  guide's: its learner and its agent for two iterations).
* The README stays a front page: at most 300 lines, its Quickstart's two
  commands as they are, its relative links pointing at files that exist.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import jax
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

SKIP = re.compile(r"<!--\s*docs-test:\s*skip\b")
SLOW = re.compile(r"<!--\s*docs-test:\s*slow\s*-->")
FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """The page's runnable python blocks: (line number, source), in order."""
    blocks: list[tuple[int, str]] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1  # the closing fence
        before = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
        if lang == "python" and not SKIP.search(before):
            blocks.append((start + 1, "\n".join(body) + "\n"))
    return blocks


def compile_block(path: Path, line: int, source: str) -> object:
    """A block's code as a user's interpreter compiles it: without this
    module's ``from __future__ import annotations`` (which ``compile`` would
    inherit), so a page's dataclasses and flax modules see real annotations."""
    return compile(source, f"{path.relative_to(ROOT)}:{line}", "exec", dont_inherit=True)


def _page_params() -> list:
    params = []
    for path in pages():
        if not python_blocks(path):
            continue
        marks = [pytest.mark.slow] if SLOW.search(path.read_text()) else []
        params.append(pytest.param(path, id=str(path.relative_to(ROOT)), marks=marks))
    return params


#: A Sphinx role as the site shows it when mkdocstrings leaves it alone: the
#: role's name, then its target as inline code (``<code>``) or, escaped or in a
#: code block, the backtick itself (":class:`~jaxsample.Sampler`", ":meth:`init`").
RAW_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|ref):(?:`|<code>)")


@pytest.mark.xdist_group("mkdocs_site")
def test_mkdocs_build_strict(site: Path) -> None:
    """The site builds with ``--strict`` (the ``site`` fixture, tests/conftest.py):
    no broken link, page or reference."""
    for page in ("index.html", "guides/training/index.html", "api/agents/index.html"):
        assert (site / page).is_file(), page
    # mkdocstrings rendered the docstrings, not an empty page
    assert "make_sampler" in (site / "api/jaxsample/index.html").read_text()


@pytest.mark.xdist_group("mkdocs_site")
def test_no_raw_sphinx_roles_in_site(site: Path) -> None:
    """The docstrings' cross-references are mkdocstrings' (``[`Name`][path]``,
    a link the strict build checks) or inline code, never a Sphinx role that
    the API reference would show as raw markup."""
    raw = {}
    for page in sorted(site.rglob("*.html")):
        hits = RAW_ROLE.findall(page.read_text())
        if hits:
            raw[str(page.relative_to(site))] = len(hits)
    assert not raw, f"raw Sphinx roles in the built site: {raw}"
    # and the references became links: autorefs' anchors into the API pages
    api = (site / "api/jaxsample/index.html").read_text()
    assert 'href="#jaxsample.sampler.make_sampler"' in api
    assert re.search(r'<a [^>]*href="[^"]*#jaxsample\.core\.options\.SamplerOptions"', api)


def test_sphinx_roles_are_not_in_the_docstrings() -> None:
    """The same check at the source: every module of the package, the ones the
    site does not render included (a new role fails here before it ships)."""
    role = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`")
    found = [
        f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}"
        for path in sorted((ROOT / "jaxsample").rglob("*.py"))
        for text in [path.read_text()]
        for m in role.finditer(text)
    ]
    assert not found, found


@pytest.mark.parametrize("path", _page_params())
def test_code_blocks_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's python blocks, as pasted, in order, in one namespace."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    # as a user runs them: JAX's default rank promotion (the test session raises)
    with jax.numpy_rank_promotion("allow"):
        for line, source in python_blocks(path):
            exec(compile_block(path, line, source), namespace)


OWN_LEARNER = DOCS / "guides" / "own-learner.md"


@pytest.mark.long  # cold: ~15 s on the shared 2 cores, compiling the learner (warm ~2 s)
def test_own_learner_guide_smoke() -> None:
    """The own-learner guide is a slow page (its examples learn CartPole, about
    10 s each); the default set runs its learner on its own agent, both as the
    page defines them, for two iterations: the page still fits the public API."""
    blocks = python_blocks(OWN_LEARNER)
    wanted = ("def make_train(", "class MyAgent:")
    definitions = [(line, src) for line, src in blocks if any(w in src for w in wanted)]
    assert len(definitions) == 2, f"{OWN_LEARNER.name}: the blocks defining {wanted}"
    namespace: dict = {"__name__": "__docs__"}
    with jax.numpy_rank_promotion("allow"):
        for line, source in definitions:
            exec(compile_block(OWN_LEARNER, line, source), namespace)
        train = namespace["make_train"](namespace["MyAgent"](n=2), iterations=2)
        params, returns = jax.jit(train)(jax.random.key(0))
    assert returns.shape == (2,)
    assert all(bool(jax.numpy.isfinite(x).all()) for x in jax.tree.leaves(params))


def test_every_page_is_in_the_nav() -> None:
    """mkdocs warns about pages left out of ``nav`` (strict: fails); this says
    which, without building."""
    nav = (ROOT / "mkdocs.yml").read_text()
    for path in DOCS.rglob("*.md"):
        assert str(path.relative_to(DOCS)) in nav, path


def test_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    # the Quickstart's two commands, exactly
    assert (
        "python3 -m pip install -e . && python3 -m jaxsample train --algo ppo "
        "--env CartPole-v1 --json ppo.json --plot ppo.png"
    ) in text
    assert "\nbash .ci/run\n" in text
    # its relative links (the site is checked by mkdocs; the README is not in it)
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_every_image_a_page_shows_is_in_the_repository() -> None:
    """mkdocs builds a page whose image is missing (no warning, even strict):
    every ``![...](path)`` of the README and of docs/ names a file git tracks,
    so a clean checkout shows it (a ``.gitignore`` rule once hid the presets'
    figures)."""
    tracked = subprocess.run(
        ["git", "ls-files", "--cached"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    tracked_paths = {(ROOT / t).resolve() for t in tracked}
    image = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
    for page in [README, *DOCS.rglob("*.md")]:
        for target in image.findall(page.read_text()):
            if "://" in target:
                continue
            path = (page.parent / target).resolve()
            assert path in tracked_paths, f"{page.relative_to(ROOT)}: {target} is not tracked"


#: Headless Chromium, where installed (CI has none: the test is skipped there).
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chromium-headless-shell")

#: Run in the page after it loads: each table's width and its scroll box's.
MEASURE = """<script>
window.addEventListener('load', () => {
  const out = Array.from(document.querySelectorAll('.md-typeset table')).map(t => {
    const box = t.closest('.md-typeset__scrollwrap') || t.parentElement;
    return {head: t.querySelector('tr').textContent.trim().slice(0, 60),
            box: box.clientWidth, scroll: box.scrollWidth};
  });
  const pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.mark.xdist_group("mkdocs_site")
def test_the_presets_tables_fit_a_1280px_window(site: Path) -> None:
    """At 1280 px (the navigation and the table of contents beside the
    content), no table of the presets page scrolls sideways: its last
    columns in view (tools/preset_page.py writes the results table)."""
    import html
    import json
    import shutil

    browser = next((path for b in BROWSERS if (path := shutil.which(b))), None)
    if browser is None:
        pytest.skip(f"no headless browser ({', '.join(BROWSERS)})")
    page = site / "presets" / "index.html"
    probe = page.with_name("measured.html")  # beside it: the same stylesheets
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"]
    try:
        out = subprocess.run(
            [browser, *flags, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        probe.unlink()
    found = re.search(r'<pre id="measured">(.*?)</pre>', out.stdout, re.S)
    assert found, out.stderr[-2000:]
    tables = json.loads(html.unescape(found.group(1)))
    assert len(tables) >= 3, tables
    wide = [t for t in tables if t["scroll"] > t["box"]]
    assert not wide, wide

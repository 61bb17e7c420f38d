"""Issue 53 item 2: the ``jaxsample`` command defers what training imports and
never uses (`jaxsample.cli.lazy_imports`): the plotting libraries gymnax imports
only to render, and ``scipy.linalg``'s package around the LAPACK pointers
jaxlib takes. Rendering and linear algebra still work in that process, and the
library alone defers nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import types

import pytest

from jaxsample.cli import lazy_imports


def _python(code: str, tmp_path) -> dict:
    """Run ``code`` in a fresh Python; it prints one JSON line last."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**__import__("os").environ, "MPLBACKEND": "Agg"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _in_command(names: tuple[str, ...], body: str, tmp_path) -> dict:
    """Run ``body`` (statements filling ``seen``; ``names``: module names) as
    the parser's main in the command's own process (`jaxsample.cli.main`, its
    deferral installed); ``seen`` with the command's ``code``."""
    code = textwrap.dedent("""
        import json, sys
        import jaxsample.cli.parser as parser
        names = NAMES
        seen = {}
        def probe(argv, signals):
        BODY
            return 0
        parser.main = probe
        from jaxsample.cli import main
        seen["code"] = main(["train"])
        print(json.dumps(seen))
        """)
    body = textwrap.indent(textwrap.dedent(body).strip(), "    ")
    return _python(code.replace("NAMES", repr(names)).replace("BODY", body), tmp_path)


_STATE = """
import json, sys
def state():
    kinds = {n: type(sys.modules[n]).__name__ if n in sys.modules else None
             for n in ("seaborn", "matplotlib", "matplotlib.colors", "matplotlib.pyplot")}
    loaded = [n for n in ("pandas", "scipy.stats", "PIL") if n in sys.modules]
    finders = [type(f).__name__ for f in sys.meta_path]
    return {"kinds": kinds, "loaded": loaded, "finders": finders}
"""


def test_the_command_defers_plotting_and_scipy_linalg_and_both_still_work(
    tmp_path,
) -> None:
    # the entry point's own wiring: the parser's main is replaced by a probe
    # that imports gymnax as train does, then renders Pong (seaborn, pyplot)
    # and Catch (pyplot) in the same process
    got = _python(
        _STATE
        + textwrap.dedent("""
        import jax
        import jaxsample.cli.parser as parser
        seen = {}
        def probe(argv, signals):
            import gymnax
            seen["after_import"] = state()
            import jax.numpy as jnp  # LAPACK: jaxlib imports scipy.linalg.cython_lapack
            q, r = jnp.linalg.qr(jnp.array([[2.0, 1.0], [1.0, 3.0]]))
            seen["det"] = float(jnp.linalg.det(q @ r))
            seen["linalg"] = {n: type(sys.modules[n]).__name__ if n in sys.modules else None
                              for n in ("scipy.linalg", "scipy.linalg.cython_lapack")}
            from scipy.linalg import det
            seen["scipy_det"] = float(det([[2.0, 1.0], [1.0, 3.0]]))
            key = jax.random.key(0)
            for name in ("Pong-misc", "Catch-bsuite"):
                env, params = gymnax.make(name)
                _, s = env.reset(key, params)
                drawn = env.render(s, params)
                seen[name] = type(drawn).__name__
            seen["after_render"] = state()
            import matplotlib.pyplot as plt, seaborn as sns
            seen["palette"] = len(sns.color_palette("cubehelix", 3))
            seen["figures"] = len(plt.get_fignums())
            return 0
        parser.main = probe
        from jaxsample.cli import main
        seen["code"] = main(["train"])
        seen["after_main"] = state()
        print(json.dumps(seen))
        """),
        tmp_path,
    )
    assert got["code"] == 0
    before = got["after_import"]
    assert set(before["kinds"].values()) == {"DeferredModule"}
    assert before["loaded"] == []  # no pandas, no scipy.stats, no PIL (matplotlib's)
    assert before["finders"][0] == "_DeferringFinder"
    # jaxlib's LAPACK pointers load without running scipy.linalg's package
    # (jaxlib versions that take none import neither), which runs at its use
    assert got["linalg"]["scipy.linalg"] in ("DeferredModule", None), got["linalg"]
    assert got["det"] == pytest.approx(5.0) and got["scipy_det"] == pytest.approx(5.0)
    assert got["Pong-misc"] == "AxesImage" and got["Catch-bsuite"] == "tuple"
    after = got["after_render"]
    assert set(after["kinds"].values()) == {"module"}
    assert after["loaded"] == ["pandas", "scipy.stats", "PIL"]
    assert got["palette"] == 3 and got["figures"] == 2
    assert "_DeferringFinder" not in got["after_main"]["finders"]  # removed on return


def test_the_command_defers_the_mosaic_dialects_jax_imports(tmp_path) -> None:
    """``import jax`` in the command's process leaves the Mosaic TPU and GPU
    dialect bindings (Pallas's) deferred; a use runs them in place."""
    got = _in_command(
        ("jaxlib.mosaic.python.tpu", "jaxlib.mosaic.python.mosaic_gpu"),
        """
        import jax
        jax.numpy.ones(2).block_until_ready()
        seen["after_jax"] = [type(sys.modules[n]).__name__ for n in names]
        from jaxlib.mosaic.python import tpu
        seen["has_ops"] = len([n for n in dir(tpu) if n.endswith("Op")]) > 10
        seen["after_use"] = type(sys.modules[names[0]]).__name__
        """,
        tmp_path,
    )
    assert got["code"] == 0
    import jax

    # jax 0.9 reads the GPU dialect's bindings as it imports (they run then)
    new_jax = tuple(map(int, jax.__version__.split(".")[:2])) >= (0, 11)
    gpu = "DeferredModule" if new_jax else "module"
    assert got["after_jax"] == ["DeferredModule", gpu]
    assert got["has_ops"] and got["after_use"] == "module"


def test_the_command_defers_what_flax_tabulate_needs_and_it_still_works(
    tmp_path,
) -> None:
    """What ``import flax.linen`` loads for ``Module.tabulate`` only
    (``rich.table``, ``yaml``) stays deferred in the command's process until
    used; then it works in place."""
    got = _in_command(
        ("rich.table", "yaml"),
        """
        import flax.linen as nn, jax, jax.numpy as jnp
        seen["after_import"] = [type(sys.modules[n]).__name__ for n in names]
        table = nn.Dense(3).tabulate(jax.random.key(0), jnp.ones((1, 2)))
        seen["tabulate"] = "Dense" in table and "params" in table
        import yaml
        seen["yaml"] = yaml.safe_load("a: [1, 2]")
        seen["after_use"] = [type(sys.modules[n]).__name__ for n in names]
        """,
        tmp_path,
    )
    assert got["code"] == 0
    assert got["after_import"] == ["DeferredModule"] * 2
    assert got["tabulate"] and got["yaml"] == {"a": [1, 2]}
    assert got["after_use"] == ["module"] * 2


def test_the_library_alone_defers_nothing(tmp_path) -> None:
    got = _python(_STATE + "import jaxsample, gymnax\nprint(json.dumps(state()))\n", tmp_path)
    assert "_DeferringFinder" not in got["finders"]
    assert set(got["kinds"].values()) == {"module"}
    assert got["loaded"] == ["pandas", "scipy.stats", "PIL"]


@pytest.fixture
def package(tmp_path, monkeypatch):
    """Modules whose code records its runs: ``lazyprobe_mod`` and
    ``lazyprobe_pkg.sub`` deferred (the package itself not), a deferred
    package ``lazyprobe_dpkg`` with deferred submodules ``a`` and ``b`` (as
    matplotlib, ``matplotlib.colors``), and ``lazyprobe_bad`` (deferred; it raises)."""
    (tmp_path / "lazyprobe_mod.py").write_text(
        "import builtins\nbuiltins.LAZYPROBE.append('mod')\nx = 1\n"
    )
    root = tmp_path / "lazyprobe_pkg"
    root.mkdir()
    (root / "__init__.py").write_text("import builtins\nbuiltins.LAZYPROBE.append('pkg')\nx = 1\n")
    (root / "sub.py").write_text(
        "import builtins\nbuiltins.LAZYPROBE.append('sub')\n"
        "import lazyprobe_pkg.sub as me\ny = lazyprobe_pkg_x = me.__name__\n"
    )
    (tmp_path / "lazyprobe_bad.py").write_text("raise RuntimeError('broken on purpose')\n")
    deferred = tmp_path / "lazyprobe_dpkg"
    deferred.mkdir()
    (deferred / "__init__.py").write_text(
        "import builtins\nbuiltins.LAZYPROBE.append('dpkg')\nbase = 10\n"
    )
    for sub in ("a", "b"):
        (deferred / f"{sub}.py").write_text(
            f"import builtins\nbuiltins.LAZYPROBE.append('{sub}')\n"
            "from lazyprobe_dpkg import base\nvalue = base + 1\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    runs: list[str] = []
    monkeypatch.setattr("builtins.LAZYPROBE", runs, raising=False)
    names = ("lazyprobe_mod", "lazyprobe_pkg.sub", "lazyprobe_bad", "lazyprobe_dpkg")
    names += ("lazyprobe_dpkg.a", "lazyprobe_dpkg.b")
    undo = lazy_imports.defer_imports(names)
    try:
        yield runs
    finally:
        undo()
        for name in (*names, "lazyprobe_pkg"):
            sys.modules.pop(name, None)


def test_a_deferred_module_runs_at_its_first_use_once(package) -> None:
    import lazyprobe_mod

    assert package == []
    assert isinstance(lazyprobe_mod, lazy_imports.DeferredModule)
    # what the import system reads does not run it, nor a second import
    assert lazyprobe_mod.__spec__.name == "lazyprobe_mod" and lazyprobe_mod.__name__
    import lazyprobe_mod as again

    assert again is lazyprobe_mod and package == []
    assert lazyprobe_mod.x == 1
    assert package == ["mod"] and type(lazyprobe_mod) is types.ModuleType
    assert lazyprobe_mod.__loader__ is lazyprobe_mod.__spec__.loader
    assert type(lazyprobe_mod.__spec__.loader).__name__ == "SourceFileLoader"
    assert lazyprobe_mod.x == 1 and package == ["mod"]


def test_a_deferred_submodule_is_bound_to_its_parent(package) -> None:
    import lazyprobe_pkg
    import lazyprobe_pkg.sub as sub

    assert package == ["pkg"]  # the parent is imported as usual
    assert lazyprobe_pkg.sub is sub and sys.modules["lazyprobe_pkg.sub"] is sub
    assert isinstance(sub, lazy_imports.DeferredModule)
    assert sub.y == "lazyprobe_pkg.sub"  # its code imports itself: a partial module
    assert package == ["pkg", "sub"]


def test_a_deferred_packages_deferred_submodules_are_bound_to_it_unrun(package) -> None:
    import lazyprobe_dpkg.a as a
    from lazyprobe_dpkg import b  # gymnax's `from matplotlib import colors`

    assert package == []
    dpkg = sys.modules["lazyprobe_dpkg"]
    assert dpkg.a is a and dpkg.b is b and isinstance(dpkg, lazy_imports.DeferredModule)
    assert package == []
    assert a.value == 11  # a's code imports the package's names: both run
    assert package == ["a", "dpkg"]
    assert b.value == 11 and package == ["a", "dpkg", "b"]
    assert dpkg.base == 10 and type(dpkg) is types.ModuleType


def test_a_deferred_module_that_fails_fails_at_its_use_every_time(package) -> None:
    for _ in range(2):
        import lazyprobe_bad

        with pytest.raises(RuntimeError, match="broken on purpose"):
            lazyprobe_bad.anything  # noqa: B018
        assert "lazyprobe_bad" not in sys.modules  # as a failed import leaves it


def test_threads_run_a_deferred_module_once(package) -> None:
    import lazyprobe_mod

    barrier = threading.Barrier(8)
    seen = []

    def use() -> None:
        barrier.wait()
        seen.append(lazyprobe_mod.x)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [1] * 8 and package == ["mod"]


def test_a_module_already_imported_is_left_as_it_is() -> None:
    import json as already

    undo = lazy_imports.defer_imports(["json"])
    try:
        assert sys.modules["json"] is already and type(already) is types.ModuleType
    finally:
        undo()
    assert not any(isinstance(f, lazy_imports._DeferringFinder) for f in sys.meta_path)

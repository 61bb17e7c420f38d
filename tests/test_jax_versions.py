"""Today's JAX: the dependency range, the deadlock-free initializers, the CLI's
persistent compilation cache, and (slow) a Colab-shaped install."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import HANG_SECONDS
from packaging.requirements import Requirement

from jaxsample import compile_cache

ROOT = Path(__file__).resolve().parent.parent
BROKEN = ("0.10.0", "0.10.1", "0.10.2", "0.11.0")  # the deadlocking jaxlibs


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = (Requirement(r) for r in project["dependencies"])
    return {r.name: r for r in reqs}


def test_dependencies_admit_todays_jax_and_exclude_the_deadlocking_jaxlibs() -> None:
    reqs = _requirements()
    for name in ("jax", "jaxlib"):
        spec = reqs[name].specifier
        for version in ("0.9.2", "0.11.1", "0.11.2", "0.12.0.1", "0.13.0", "1.0.0"):
            assert spec.contains(version), f"{name} {version} must be admitted"
        for version in (*BROKEN, "0.9.1"):  # 0.9.2 is the tested lower bound
            assert not spec.contains(version), f"{name} {version} must be excluded"
    for name in ("flax", "optax", "chex", "gymnax", "orbax-checkpoint"):
        upper = [s for s in reqs[name].specifier if s.operator in ("<", "<=", "==", "~=")]
        assert upper == [], f"{name} has an upper pin of our own: {upper}"


def _subjaxprs(value: object) -> list:
    """The jaxprs inside an equation's parameter (closed or not, in tuples)."""
    if isinstance(value, tuple | list):
        return [j for v in value for j in _subjaxprs(v)]
    inner = getattr(value, "jaxpr", None)  # a ClosedJaxpr
    if inner is not None and hasattr(inner, "eqns"):
        return [inner]
    return [value] if hasattr(value, "eqns") else []


def _qr_inputs(jaxpr) -> list[tuple[int, ...]]:
    """The operand shapes of every QR factorization in ``jaxpr``, nested ones too."""
    shapes = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("qr", "geqrf", "geqp3", "householder_product"):
            shapes.append(tuple(eqn.invars[0].aval.shape))
        for param in eqn.params.values():
            for sub in _subjaxprs(param):
                shapes += _qr_inputs(sub)
    return shapes


@pytest.mark.parametrize(
    ("shape", "scale"), [((4, 64), 2**0.5), ((64, 64), 2**0.5), ((64, 2), 0.01), ((3, 5, 7), 1.0)]
)
def test_orthogonal_is_flax_orthogonal_drawn_one_key_at_a_time(shape, scale) -> None:
    """Bit-identical to flax's initializer under vmap, and every QR it runs is
    unbatched (the batched LAPACK call is what deadlocked jaxlib 0.10-0.11)."""
    from jaxsample.agents.initializers import orthogonal

    keys = jax.random.split(jax.random.key(3), 8)

    def ours(k):
        return orthogonal(scale)(k, shape)

    def flax_(k):
        return nn.initializers.orthogonal(scale)(k, shape)

    np.testing.assert_array_equal(
        np.asarray(jax.jit(jax.vmap(ours))(keys)), np.asarray(jax.jit(jax.vmap(flax_))(keys))
    )
    qrs = _qr_inputs(jax.make_jaxpr(jax.vmap(ours))(keys).jaxpr)
    assert qrs and all(len(s) == 2 for s in qrs), qrs
    # The reference itself does batch its QR, so the check above can fail.
    qrs = _qr_inputs(jax.make_jaxpr(jax.vmap(flax_))(keys).jaxpr)
    assert qrs and all(len(s) == 3 for s in qrs), qrs


@pytest.mark.parametrize("agent_name", ["categorical", "gaussian", "gru", "lstm", "q", "purejaxrl"])
def test_shipped_networks_never_batch_a_qr_over_seeds(agent_name: str) -> None:
    """``jax.vmap(init)`` over seeds, as the trainers run it for ``--seeds``."""
    from gymnax.environments import spaces

    from jaxsample import agents
    from jaxsample.algos.configs import PPOConfig
    from jaxsample.bench import purejaxrl

    obs = jnp.zeros(4)
    discrete, box = spaces.Discrete(2), spaces.Box(-1.0, 1.0, (2,))
    init = {
        "categorical": lambda k: agents.CategoricalActorCritic(discrete).init(k, obs),
        "gaussian": lambda k: agents.GaussianActorCritic(box).init(k, obs),
        "gru": lambda k: agents.RecurrentActorCritic(discrete, cell="gru").init(k, obs),
        "lstm": lambda k: agents.RecurrentActorCritic(discrete, cell="lstm").init(k, obs),
        "q": lambda k: agents.EpsilonGreedyAgent(discrete, global_B=4).init(k, obs),
        "purejaxrl": lambda k: purejaxrl._ActorCritic(2, PPOConfig().hidden_sizes).init(k, obs),
    }[agent_name]
    keys = jax.random.split(jax.random.key(0), 8)
    shapes = _qr_inputs(jax.make_jaxpr(jax.vmap(init))(keys).jaxpr)
    assert shapes and all(len(s) == 2 for s in shapes), shapes


def _cli(args: list[str], cwd: Path, cache_home: Path) -> str:
    """Run ``python -m jaxsample ARGS`` with JAX's cache left to the CLI's
    default (the user's cache folder under ``cache_home``); its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["XDG_CACHE_HOME"] = str(cache_home)
    env.pop("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", None)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a user has it: the CLI's own default holds
    return _run([sys.executable, "-m", "jaxsample", *args], cwd, env, HANG_SECONDS)


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    """Run ``cmd``; its stdout, then its stderr (it must succeed)."""
    run = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout + run.stderr


_TRAIN = ["train", "--num-envs", "2", "--num-steps", "8", "--total-steps", "32"]
_TRAIN += ["--hidden-sizes", "8", "--update-epochs", "1", "--num-minibatches", "1"]
_TRAIN += ["--max-decorrelation-steps", "0", "--plot", ""]


@pytest.mark.long
def test_a_second_run_loads_its_programs_from_the_compile_cache(tmp_path) -> None:
    """The CLI keeps JAX's persistent compilation cache in the user's cache
    folder: a second ``train`` with the same settings compiles nothing (JAX's
    own monitoring events count the cache hits) and traces only the loop
    around its stored init and iteration, where this JAX caches programs with
    host callbacks, and says so in one line where it does not. Both runs
    train the same, bit for bit."""
    cache = tmp_path / "cache"
    folder = cache / "jaxsample" / "jax"
    first = _cli([*_TRAIN, "--json", "1.json"], tmp_path, cache)
    assert re.search(r"^compiled in [0-9.]+ s$", first, re.M), first
    assert any(folder.iterdir())
    # Issue 42 item 5: no XLA/absl log line (jaxlib 0.9's AOT loader logs ~20
    # on a cache load: "E1203 ... cpu_aot_loader.cc ...", "W... pjrt_executable.cc").
    xla_log = re.compile(r"^[EWIF]\d{4} ", re.M)
    assert not xla_log.search(first), first
    note = "does not cache programs with host callbacks"
    second = _cli([*_TRAIN, "--json", "2.json"], tmp_path, cache)
    assert not xla_log.search(second), second
    if not compile_cache.CACHES_CALLBACKS:  # every run compiles it: one line says so
        assert note in first and note in second
        return
    assert note not in first + second
    assert re.search(r"^loaded from the compile cache in [0-9.]+ s \(tracing", second, re.M)
    # the traced init and iteration were loaded, not traced again
    assert len(list((folder / "jaxsample-programs").glob("*.jaxexport"))) == 2
    csvs = [(tmp_path / f"{i}.csv").read_text() for i in (1, 2)]
    assert csvs[0] == csvs[1] and csvs[0].count("\n") == 3


@pytest.mark.slow
def test_no_compile_cache_compiles_again_and_trains_the_same(tmp_path) -> None:
    """``--no-compile-cache`` compiles the program as traced (no stored
    parts) and trains what the cached way trains, bit for bit; ``collect``
    loads its program on a second run."""
    cache = tmp_path / "cache"
    _cli([*_TRAIN, "--json", "1.json"], tmp_path, cache)
    third = _cli([*_TRAIN, "--json", "3.json", "--no-compile-cache"], tmp_path, cache)
    assert re.search(r"^compiled in [0-9.]+ s$", third, re.M), third
    assert (tmp_path / "1.csv").read_text() == (tmp_path / "3.csv").read_text()
    collect = ["collect", "--B", "4", "--T", "8", "--batches", "1"]
    assert "collect compiled in" in _cli(collect, tmp_path, tmp_path / "c2")
    assert "collect loaded from the compile cache in" in _cli(collect, tmp_path, tmp_path / "c2")


def test_compile_watch_counts_compiles_and_cache_loads(tmp_path) -> None:
    """In a fresh process: a program compiled, then (after JAX forgets its
    in-memory executables) loaded from the folder enable_compile_cache set."""
    script = f"""
import jax, jax.numpy as jnp, jaxsample as js
js.enable_compile_cache({str(tmp_path)!r})
f = lambda x: jnp.sin(x) @ x.T
x = jax.ShapeDtypeStruct((8, 8), jnp.float32)
with js.compile_cache.CompileWatch() as a:
    jax.jit(f).lower(x).compile()
jax.clear_caches()
with js.compile_cache.CompileWatch() as b:
    jax.jit(f).lower(x).compile()
print(a.compiles, a.hits, b.compiles, b.hits, a.summary(1.0), b.summary(0.5), sep=";")
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    fields = out.stdout.strip().split(";")
    assert fields[:4] == ["1", "0", "0", "1"], out.stdout
    assert fields[4] == "compiled in 1.0 s"
    assert fields[5].startswith("loaded from the compile cache in 0.5 s (tracing and lowering")


def test_enable_compile_cache_rejects_bad_settings(tmp_path) -> None:
    with pytest.raises(ValueError, match="min_compile_seconds"):
        compile_cache.enable_compile_cache(tmp_path, min_compile_seconds=-1)
    with pytest.raises(ValueError, match="max_bytes"):
        compile_cache.enable_compile_cache(tmp_path, max_bytes=0)


def _python312() -> list[str]:
    """A Python >= 3.12 (what Colab runs): this one, or one pyenv has."""
    if sys.version_info >= (3, 12):
        return [sys.executable]
    for name in ("python3.12", "python3.13"):
        if shutil.which(name) and subprocess.run([name, "-c", ""]).returncode == 0:
            return [name]
    versions = subprocess.run(
        ["pyenv", "versions", "--bare"], capture_output=True, text=True
    ).stdout.split()
    found = sorted(v for v in versions if re.fullmatch(r"3\.1[2-9]\.\d+", v))
    assert found, "the Colab-shaped install check needs a Python >= 3.12"
    return ["env", f"PYENV_VERSION={found[0]}", "python3"]


def _report(pip: list[str], *requirements: str) -> dict[str, str]:
    """What ``pip install REQUIREMENTS`` would install: ``{name: version}``."""
    out = subprocess.run(
        [*pip, "install", "-q", "--dry-run", "--report", "-", *requirements],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    return {
        i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(out)["install"]
    }


@pytest.mark.slow
def test_colab_shaped_install_keeps_the_users_jax(tmp_path) -> None:
    """A Python 3.12 venv that holds the newest JAX gymnax admits (and flax,
    optax, chex, as Colab does): installing the jaxsample wheel changes neither
    jax nor jaxlib, and the quickstart notebook runs there. Next to a JAX
    newer than gymnax admits, it changes what gymnax alone would change, no more."""
    venv = tmp_path / "venv"
    subprocess.run([*_python312(), "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    newest = _report(pip, "jax", "jaxlib")["jax"]
    admitted = _report(pip, "jax", "jaxlib", "gymnax")["jax"]
    subprocess.run(
        [*pip, "install", "-q", f"jax=={admitted}", f"jaxlib=={admitted}", "flax", "optax", "chex"],
        check=True,
        timeout=900,
    )
    from helpers import build_wheel

    wheel = build_wheel(tmp_path)
    changes = _report(pip, str(wheel))
    assert "jax" not in changes and "jaxlib" not in changes, changes
    assert "flax" not in changes, changes

    if newest != admitted:  # next to a newer JAX: only gymnax's cap moves it
        swap = [f"jax=={newest}", f"jaxlib=={newest}"]
        subprocess.run([*pip, "install", "-q", *swap], check=True, timeout=900)
        ours, gymnax_alone = _report(pip, str(wheel)), _report(pip, "gymnax")
        for name in ("jax", "jaxlib"):
            assert ours.get(name) == gymnax_alone.get(name), (name, ours, gymnax_alone)
        swap = [f"jax=={admitted}", f"jaxlib=={admitted}"]
        subprocess.run([*pip, "install", "-q", *swap], check=True, timeout=900)

    install = [*pip, "install", "-q", str(wheel), "nbclient", "ipykernel"]
    subprocess.run(install, check=True, timeout=900)
    run_notebook = f"""
import nbformat, os
from nbclient import NotebookClient
os.environ["JAXSAMPLE_NOTEBOOK_SCALE"] = "small"
nb = nbformat.read({str(ROOT / "notebooks" / "quickstart.ipynb")!r}, as_version=4)
NotebookClient(nb, timeout=600, kernel_name="python3").execute()
text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
print("jax", __import__("jax").__version__, "|", text)
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MPLBACKEND")}
    out = _run([str(venv / "bin" / "python"), "-c", run_notebook], tmp_path, env, 900)
    assert out.startswith(f"jax {admitted} |"), out[:200]
    assert "env.observation          (128, 64, 4)" in out
    assert "Successfully installed" not in out  # the install cell had nothing to do


def test_a_suite_that_does_not_import_with_this_jax_is_one_clear_line(
    tmp_path, monkeypatch, capsys
) -> None:
    """An installed suite release that fails to import (as one built for
    another JAX does): ``--env <suite>/...`` names the package, its version,
    this JAX and the error in one line; ``jaxsample envs`` says it is not
    usable instead of failing."""
    from jaxsample.cli import main
    from jaxsample.envs import suites

    (tmp_path / "oldsuite").mkdir()
    (tmp_path / "oldsuite" / "__init__.py").write_text(
        "raise AttributeError(\"module 'jax.core' has no attribute 'pytype_aval_mappings'\")\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(
        suites.SUITES, "oldsuite", ("oldsuite", "oldsuite", lambda n: None, lambda: ["A-v0"])
    )
    with pytest.raises(ValueError, match=r"^env 'oldsuite/A-v0': oldsuite \? is installed but"):
        suites.make("oldsuite/A-v0")
    message = suites.registry.import_error("oldsuite")
    assert f"jax {jax.__version__}" in message and "pytype_aval_mappings" in message
    assert "oldsuite" not in suites.available()
    with pytest.raises(SystemExit):
        main(["collect", "--env", "oldsuite/A-v0", "--B", "2", "--T", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not import with jax" in err[0]
    assert main(["envs"]) == 0
    printed = capsys.readouterr().out
    assert "not usable: oldsuite ? is installed but does not import" in printed
    assert "gymnax (" in printed


def test_program_store_loads_what_it_stored_and_survives_a_damaged_file(tmp_path) -> None:
    """A second store with the same identity loads the exported function
    (same outputs, pytrees included); another identity or argument shape
    exports anew; a damaged file is exported again; an unwritable folder
    only means nothing is stored."""
    from jaxsample.runs.program_store import ProgramStore

    def f(tree):
        return {"y": jnp.sin(tree["x"]) * tree["k"][0], "n": tree["k"][1] + 1}

    args = {"x": jnp.arange(4.0), "k": (jnp.float32(2.0), jnp.int32(3))}
    want = f(args)
    first = ProgramStore(tmp_path, "f v1")
    got = first.function("f", f, args)(args)
    assert first.loaded == []
    again = ProgramStore(tmp_path, "f v1")
    loaded = again.function("f", f, args)
    assert again.loaded == ["f"]
    for out in (got, loaded(args)):
        np.testing.assert_array_equal(out["y"], want["y"])
        assert int(out["n"]) == 4 and jax.tree.structure(out) == jax.tree.structure(want)
    other = ProgramStore(tmp_path, "f v2")
    other.function("f", f, args)
    other.function("f", f, {"x": jnp.arange(5.0), "k": args["k"]})
    assert other.loaded == [] and len(list(tmp_path.glob("f-*.jaxexport"))) == 3

    for path in tmp_path.glob("f-*.jaxexport"):
        path.write_bytes(b"not an export")
    damaged = ProgramStore(tmp_path, "f v1")
    np.testing.assert_array_equal(damaged.function("f", f, args)(args)["y"], want["y"])
    assert damaged.loaded == []
    healed = ProgramStore(tmp_path, "f v1")  # the damaged file was written anew
    healed.function("f", f, args)
    assert healed.loaded == ["f"]
    (tmp_path / "a-file").write_text("")  # a folder that cannot be made
    store = ProgramStore(tmp_path / "a-file" / "sub", "f v1")
    np.testing.assert_array_equal(store.function("f", f, args)(args)["y"], want["y"])
    assert store.loaded == []


@pytest.mark.long
def test_a_second_run_in_a_folder_loads_its_chunks_from_the_program_store(tmp_path) -> None:
    """A run folder's chunks (stored on jax >= 0.11, as the one program): the
    second ``train --checkpoint-dir`` of the same settings traces neither
    init nor its chunk (both loaded from the program store) and trains the
    same, bit for bit (the CSVs, the saved state)."""
    from jaxsample import runs

    if not compile_cache.CACHES_CALLBACKS:
        pytest.skip("no program store on jax < 0.11 (jaxlib 0.9.2 crashed loading a chunk)")
    cache = tmp_path / "cache"
    store = cache / "jaxsample" / "jax" / "jaxsample-programs"
    args = [*_TRAIN, "--total-steps", "64", "--chunks", "2"]
    first = _cli([*args, "--json", "1.json", "--checkpoint-dir", "r1"], tmp_path, cache)
    assert re.search(r"^compiled in [0-9.]+ s$", first, re.M), first
    stored = sorted(p.name.split("-")[0] for p in store.glob("*.jaxexport"))
    assert stored == ["chunk", "init"]
    second = _cli([*args, "--json", "2.json", "--checkpoint-dir", "r2"], tmp_path, cache)
    assert re.search(r"^loaded from the compile cache in [0-9.]+ s \(tracing", second, re.M)
    assert len(list(store.glob("*.jaxexport"))) == 2  # loaded, none exported again
    csvs = [(tmp_path / f"{i}.csv").read_text() for i in (1, 2)]
    assert csvs[0] == csvs[1] and csvs[0].count("\n") == 5
    states = [runs.load(tmp_path / f"r{i}").state for i in (1, 2)]
    for a, b in zip(jax.tree.leaves(states[0]), jax.tree.leaves(states[1]), strict=True):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

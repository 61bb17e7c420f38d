"""The benchmark grid: its JSON schema, its statistics, its skips, and that its
ratio cell is the same measurement as ``overhead()``.

Timings are not asserted (they belong to the benchmark itself); what is
asserted is that every reported figure follows from the recorded repetitions,
that the programs do the work they claim, and that bad input or a missing
peer gives a message, not a crash.
"""

from __future__ import annotations

import copy
import importlib.metadata
import inspect
import json
import math
import os
import re
import statistics
import subprocess
import sys

import jax
import jsonschema
import numpy as np
import pytest

from jaxsample import bench
from jaxsample.bench import grid as grid_module
from jaxsample.bench import measure, peers, scaling, system

# Bytes per env-step that the floor and the peers store for CartPole:
# observation 4 x float32, action int32, reward float32, done bool.
CARTPOLE_STEP_BYTES = 4 * 4 + 4 + 4 + 1

# One worker builds the module's grid (~9 s of compiles) for all its tests.
pytestmark = pytest.mark.xdist_group("bench_grid")


def test_xdist_keeps_the_group_on_one_worker(request, tmp_path) -> None:
    """Under ``--dist loadgroup`` (addopts) xdist sends the tests marked
    ``xdist_group`` to one worker by a suffix on their node ids, so a module
    fixture is built once; a pytest that xdist does not support drops the
    suffix silently (pytest-xdist#1386: pytest 9.2 with xdist 3.8), and every
    module fixture of the suite is then built on each worker. On an xdist
    worker this test's own node id shows it; in a serial run (no worker, no
    suffix) a one-test pytest run on one xdist worker does (~3 s)."""
    if getattr(request.config.option, "loadgroup", False):  # on an xdist worker
        nodeid = request.node.nodeid
        group = "bench_grid"
    else:
        out = tmp_path / "nodeid.txt"
        (tmp_path / "test_grouped.py").write_text(
            "import pathlib, pytest\n"
            "@pytest.mark.xdist_group('g')\n"
            "def test_a(request):\n"
            f"    pathlib.Path({str(out)!r}).write_text(request.node.nodeid)\n"
        )
        (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the repository's addopts
        args = ["-q", "-n", "1", "--dist", "loadgroup", "-p", "no:cacheprovider"]
        run = subprocess.run(
            [sys.executable, "-m", "pytest", *args, "test_grouped.py"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        nodeid, group = out.read_text(), "g"
    assert nodeid.endswith(f"@{group}"), (
        f"pytest-xdist does not group tests under pytest {pytest.__version__}: "
        "install the pytest that pyproject.toml's test extra asks for"
    )


@pytest.fixture(scope="module")
def grid() -> dict:
    """Every method at two tiny sizes; the peers only at the smaller one. (B=4, T=4
    are also the sizes of the other real runs here and in test_cli.py: the same
    programs, so they come from JAX's compilation cache.)"""
    spec = bench.GridSpec(
        envs=("CartPole-v1",), Bs=(2, 4), Ts=(4,), reps=3, peer_max_B=2, min_rep_seconds=0.0
    )
    return bench.run_grid(spec)


@pytest.mark.long
def test_grid_result_follows_the_schema(grid, tmp_path) -> None:
    jsonschema.validate(grid, bench.RESULT_SCHEMA)
    path = tmp_path / "bench.json"
    bench.write_json(grid, path)
    assert json.loads(path.read_text()) == grid  # strict JSON, lossless
    # The schema is not vacuous: it rejects broken results.
    for breakage in (
        lambda r: r.pop("cells"),
        lambda r: r["cells"][0]["methods"].update(nosuch=r["cells"][0]["methods"]["bare"]),
        lambda r: r["cells"][0]["methods"]["random"].update(ratio_to_floor="0.9"),
        lambda r: r["cells"][0]["methods"]["bare"]["run_s"].pop("median"),
        lambda r: r["system"].pop("backend"),
        lambda r: r["skipped"].append({"env": "CartPole-v1", "B": 1, "T": 1}),
    ):
        broken = copy.deepcopy(grid)
        breakage(broken)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, bench.RESULT_SCHEMA)


def test_grid_cells_follow_from_their_repetitions(grid) -> None:
    assert [(c["env"], c["B"], c["T"]) for c in grid["cells"]] == [
        ("CartPole-v1", 2, 4),
        ("CartPole-v1", 4, 4),
    ]
    small, large = grid["cells"]
    assert list(small["methods"]) == list(bench.METHODS)
    assert list(large["methods"]) == list(bench.JAX_METHODS)
    assert sorted(
        (s["B"], s["method"]) for s in grid["skipped"] if "peer_max_B" in s["reason"]
    ) == [(4, "envpool"), (4, "gymnasium")]
    for cell in grid["cells"]:
        steps = cell["T"] * cell["B"]
        assert cell["steps_per_call"] == steps
        for name, row in cell["methods"].items():
            # Each method against its own floor: mlp against bare_mlp (issue 30).
            own = "bare_mlp" if name in ("mlp", "bare_mlp") else "bare"
            assert row["floor"] == own
            floor = cell["methods"][own]["times_s"]
            times = row["times_s"]
            assert len(times) == 3 and all(t > 0 for t in times)
            med = statistics.median(times)
            assert row["run_s"]["median"] == pytest.approx(med)
            assert row["run_s"]["min"] == min(times) and row["run_s"]["max"] == max(times)
            assert row["run_s"]["q25"] <= med <= row["run_s"]["q75"]
            sps = row["steps_per_s"]
            assert sps["median"] == pytest.approx(steps / med)
            assert sps["q25"] <= sps["median"] <= sps["q75"] <= sps["best"]
            assert sps["best"] == pytest.approx(steps / min(times))
            # Throughput relative to the floor, from the medians of the repetitions.
            assert row["ratio_to_floor"] == pytest.approx(statistics.median(floor) / med)
            assert row["ratio_to_floor_best"] == pytest.approx(min(floor) / min(times))
            paired = sorted(f / t for f, t in zip(floor, times, strict=True))
            lo, hi = row["ratio_to_floor_spread"]
            assert paired[0] <= lo <= hi <= paired[-1]
            assert row["calls_per_rep"] == 1  # min_rep_seconds=0
            assert row["host"] is (name in bench.PEER_METHODS)
            if row["host"]:
                assert row["peak_bytes"] is None
            else:
                assert row["compile_s"] > 0
                # The compiled program's peak includes its own output.
                assert row["peak_bytes"] >= row["output_bytes"] > 0
        assert cell["methods"]["bare"]["ratio_to_floor"] == 1.0
        # The floor stores exactly observation, action, reward and done.
        assert cell["methods"]["bare"]["output_bytes"] == steps * CARTPOLE_STEP_BYTES
        # The samplers return more (prev_action, prev_reward, flags, TrajInfo, ...).
        assert cell["methods"]["random"]["output_bytes"] > steps * CARTPOLE_STEP_BYTES
        # The MLP's agent_info adds log_prob, value and logits per step.
        mlp, random = cell["methods"]["mlp"], cell["methods"]["random"]
        assert mlp["output_bytes"] - random["output_bytes"] == steps * (4 + 4 + 2 * 4)
    for peer in bench.PEER_METHODS:  # the peers store what the floor stores
        assert small["methods"][peer]["output_bytes"] == 2 * 4 * CARTPOLE_STEP_BYTES


def test_grid_records_the_system(grid) -> None:
    s = grid["system"]
    assert s["backend"] == jax.default_backend()
    assert s["device_kind"] == jax.devices()[0].device_kind
    assert s["device_count"] == jax.device_count() == 4  # conftest's host devices
    assert s["jax"] == jax.__version__
    assert s["jaxlib"] == importlib.metadata.version("jaxlib")
    assert s["gymnax"] == importlib.metadata.version("gymnax")
    assert s["cpu_count"] == os.cpu_count()
    assert grid["settings"]["Bs"] == [2, 4] and grid["settings"]["floor"] == "bare"
    assert grid["wall_s"] > 0


def test_table_markdown_and_plot(grid, tmp_path) -> None:
    table = bench.format_table(grid)
    for method in bench.METHODS:
        assert sum(f"  {method} " in line for line in table.splitlines()) == (
            2 if method in bench.JAX_METHODS else 1
        )
    assert "B > peer_max_B=2" in table and "note:" in table
    # One ratio (issue 30): the table's mlp ratio is the summary's mlp/bare_mlp.
    mlp = grid["cells"][-1]["methods"]["mlp"]
    assert f"{mlp['ratio_to_floor']:.3f}" in table
    assert f"mlp/bare_mlp {mlp['ratio_to_floor']:.2f}x" in table
    md = bench.markdown_table(grid).splitlines()
    assert md[0] == "| env | B | T | bare | random | pool | bare_mlp | mlp | gymnasium | envpool |"
    assert len(md) == 2 + len(grid["cells"])
    assert md[-1].startswith("| CartPole-v1 | 4 | 4 |") and md[-1].endswith("| – | – |")
    random = grid["cells"][-1]["methods"]["random"]
    assert f"({random['ratio_to_floor']:.2f}; best {random['ratio_to_floor_best']:.2f})" in (
        bench.markdown_table(grid, best=True)
    )

    path = tmp_path / "bench.png"
    fig = bench.plot(grid, path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 200_000
    ax_speed, ax_ratio = fig.axes
    assert [line.get_label() for line in ax_speed.get_lines()] == [
        bench.LABELS[m] for m in bench.METHODS
    ]
    # One ratio line per method that is not a floor (bare, bare_mlp), plus the line at 1.
    assert len(ax_ratio.get_lines()) == len(bench.METHODS) - 2 + 1
    bare = ax_speed.get_lines()[0]
    assert list(bare.get_xdata()) == [2, 4]
    assert list(bare.get_ydata()) == [
        c["methods"]["bare"]["steps_per_s"]["median"] for c in grid["cells"]
    ]


def test_plot_legend_covers_no_curve(tmp_path) -> None:
    """The legend sits outside every panel (inside the speed panel it hid
    CartPole's curves in docs/bench_cpu.png); one legend for the figure, every
    method of the result in it once. Plotted from the docs' own result."""
    from pathlib import Path

    result = json.loads((Path(__file__).parent.parent / "docs/bench_cpu.json").read_text())
    fig = bench.plot(result, tmp_path / "bench.png")
    fig.draw_without_rendering()  # the layout, as saved
    assert not [ax for ax in fig.axes if ax.get_legend() is not None]
    (legend,) = fig.legends
    box = legend.get_window_extent()
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent()), ax.get_title()
    assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)
    labels = [t.get_text() for t in legend.get_texts()]
    methods = {m for c in result["cells"] for m in c["methods"]}
    assert sorted(labels) == sorted(bench.LABELS[m] for m in methods)


def test_host_peers_step_real_cartpoles() -> None:
    T, B = 60, 3
    for name in bench.PEER_METHODS:
        environ = dict(os.environ)
        module = system.import_optional(name)
        assert module is not None, f"{name} is a dev dependency"
        assert dict(os.environ) == environ  # envpool's import sets MPLBACKEND=Agg
        make = peers.PEER_MAKERS[name](module, "CartPole-v1", B, 0)
        program = peers.host_program(make, T, B, seed=0)
        try:
            program.call()
        finally:
            program.close()
        buf = program.buffers
        assert buf["observation"].shape == (T, B, 4) and buf["observation"].dtype == np.float32
        assert set(np.unique(buf["action"])) <= {0, 1}
        if name == "envpool":  # the step after an episode's end resets, reward 0
            reset_step = np.zeros_like(buf["done"])
            reset_step[1:] = buf["done"][:-1]
            np.testing.assert_array_equal(buf["reward"], np.where(reset_step, 0.0, 1.0))
        else:  # gymnasium resets within the ending step, as gymnax: 1 per step
            np.testing.assert_array_equal(buf["reward"], 1.0)
        assert buf["done"].any(), "random CartPole episodes last ~20 steps"
        # Within an episode the observation moves every step.
        moving = ~buf["done"][:-1]
        assert np.all(np.any(buf["observation"][1:] != buf["observation"][:-1], axis=-1)[moving])


def test_a_missing_peer_is_a_note(monkeypatch) -> None:
    real = system.import_optional
    monkeypatch.setattr(
        grid_module,
        "import_optional",
        lambda name: None if name in bench.PEER_METHODS else real(name),
    )
    spec = bench.GridSpec(
        envs=("CartPole-v1",), Bs=(2,), Ts=(4,), methods=("bare", "gymnasium", "envpool"), reps=1
    )
    result = bench.run_grid(spec)
    jsonschema.validate(result, bench.RESULT_SCHEMA)
    assert [list(c["methods"]) for c in result["cells"]] == [["bare"]]
    for peer in ("gymnasium", "envpool"):
        assert any(n.startswith(f"{peer} is not installed") for n in result["notes"])
    assert "gymnasium is not installed" in bench.format_table(result)


def test_a_failing_peer_is_a_skip(monkeypatch) -> None:
    def broken(module, env_id, B, seed):
        def make():
            raise RuntimeError("no such env in this version")

        return make

    monkeypatch.setitem(peers.PEER_MAKERS, "envpool", broken)
    spec = bench.GridSpec(envs=("CartPole-v1",), Bs=(2,), Ts=(4,), methods=("envpool",), reps=1)
    result = bench.run_grid(spec)
    jsonschema.validate(result, bench.RESULT_SCHEMA)
    assert result["cells"] == []
    (skip,) = result["skipped"]
    assert skip["method"] == "envpool" and "no such env in this version" in skip["reason"]


def test_overhead_and_the_grid_make_the_same_measurement(monkeypatch) -> None:
    """overhead()'s ratio and the grid's "random" cell come from the same program
    builders, the same timing function and the same ratio formula."""
    built = []

    def fake_build(plan, key):
        built.append(plan.tag)
        return measure.Program(call=lambda: None, compile_s=0.5, peak_bytes=10, output_bytes=5)

    def tagged(name, builder):
        signature = inspect.signature(builder)

        def make(*args, **kwargs):
            plan = builder(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            settings = {k: v for k, v in bound.arguments.items() if k not in ("env", "env_params")}
            object.__setattr__(plan, "tag", (name, bound.arguments["env"].name, settings))
            return plan

        return make

    # Canned seconds per call, keyed by what overhead() and the grid call them.
    canned = {"bare": [1.0, 2.0, 3.0, 9.0], "random": [2.0, 2.5, 4.0, 1.0]}
    canned["sampler"] = canned["random"]
    measured = []

    def fake_measure(programs, *, reps, warmup=1, min_rep_seconds):
        measured.append((sorted(programs), reps, min_rep_seconds))
        return {k: canned[k] for k in programs}, {k: 1 for k in programs}

    monkeypatch.setattr(measure.JaxPlan, "build", fake_build)
    monkeypatch.setattr(grid_module, "bare_plan", tagged("bare", measure.bare_plan))
    monkeypatch.setattr(grid_module, "random_plan", tagged("random", measure.random_plan))
    monkeypatch.setattr(grid_module, "measure", fake_measure)

    over = bench.overhead("CartPole-v1", B=1024, T=128, reps=4)
    over_built = list(built)
    built.clear()
    spec = bench.GridSpec(
        envs=("CartPole-v1",), Bs=(1024,), Ts=(128,), methods=("bare", "random"), reps=4
    )
    cell = bench.run_grid(spec)["cells"][0]

    # The same plans, with the same settings (the default sparse final observation).
    key = lambda tag: tag[0]  # noqa: E731
    assert (
        sorted(over_built, key=key)
        == sorted(built, key=key)
        == [
            ("bare", "CartPole-v1", {"T": 128, "B": 1024}),
            (
                "random",
                "CartPole-v1",
                {"T": 128, "B": 1024, "final_observation": "sparse", "reset_pool": 0},
            ),
        ]
    )
    assert [m[1:] for m in measured] == [(4, bench.DEFAULT_MIN_REP_SECONDS)] * 2
    expected = statistics.median(canned["bare"]) / statistics.median(canned["random"])
    assert over["ratio"] == cell["methods"]["random"]["ratio_to_floor"] == expected
    assert over["steps_per_s"]["sampler"] == cell["methods"]["random"]["steps_per_s"]["median"]
    assert over["compile_s"] == {"sampler": 0.5, "bare": 0.5}


def test_overhead_measures_real_programs() -> None:
    r = bench.overhead("CartPole-v1", B=4, T=4, reps=2)
    assert r["env"] == "CartPole-v1" and r["B"] == 4 and r["T"] == 4
    assert r["ratio"] > 0 and r["steps_per_s"]["sampler"] > 0 and r["steps_per_s"]["bare"] > 0
    assert r["compile_s"]["sampler"] > 0 and r["compile_s"]["bare"] > 0
    assert r["batch_bytes"] > 4 * 4 * CARTPOLE_STEP_BYTES
    assert r["peak_over_batch"] >= 1.0


def test_measure_interleaves_and_calibrates(monkeypatch) -> None:
    clock = [0.0]
    order = []

    def program(name, seconds):
        def call():
            order.append(name)
            clock[0] += seconds

        return measure.Program(call=call, compile_s=0.0)

    progs = {"a": program("a", 2.0), "b": program("b", 1.0)}
    monkeypatch.setattr(measure, "_clock", lambda: clock[0])
    times, calls = measure.measure(progs, reps=4, warmup=2, min_rep_seconds=0.0)
    assert order == ["a", "a", "b", "b"] + ["a", "b", "b", "a"] * 2
    assert times == {"a": [2.0] * 4, "b": [1.0] * 4} and calls == {"a": 1, "b": 1}
    order.clear()
    times, calls = measure.measure(progs, reps=2, warmup=1, min_rep_seconds=5.0)
    assert calls == {"a": 3, "b": 5}  # a repetition lasts >= 5 s
    assert times == {"a": [2.0, 2.0], "b": [1.0, 1.0]}  # still seconds per call
    assert order == ["a", "b"] + ["a"] * 3 + ["b"] * 5 + ["b"] * 5 + ["a"] * 3


def test_memory_budget_and_call_time_stop_growing_B() -> None:
    # The floor at B=1024, T=4 returns 1024 * 4 * 25 bytes > 50 kB: skipped, and
    # every larger B with it; B=2 fits.
    spec = bench.GridSpec(
        envs=("CartPole-v1",),
        Bs=(2, 1024, 4096),
        Ts=(4,),
        methods=("bare",),
        reps=1,
        memory_budget_bytes=50_000,
    )
    result = bench.run_grid(spec)
    jsonschema.validate(result, bench.RESULT_SCHEMA)
    assert [c["B"] for c in result["cells"]] == [2]
    assert [s["B"] for s in result["skipped"]] == [1024, 4096]
    assert all("budget" in s["reason"] and "B=1024" in s["reason"] for s in result["skipped"])

    result = bench.run_grid(
        bench.GridSpec(
            envs=("CartPole-v1",),
            Bs=(2, 4),
            Ts=(4,),
            methods=("bare",),
            reps=1,
            max_call_seconds=0.0,
        )
    )
    assert [c["B"] for c in result["cells"]] == [2]
    (skip,) = result["skipped"]
    assert skip["B"] == 4 and "max_call_seconds" in skip["reason"]


def test_out_of_memory_is_a_skip_other_errors_raise(monkeypatch) -> None:
    def oom(plan, key):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.0GiB")

    monkeypatch.setattr(measure.JaxPlan, "build", oom)
    spec = bench.GridSpec(envs=("CartPole-v1",), Bs=(2, 4), Ts=(4,), methods=("bare",))
    result = bench.run_grid(spec)
    assert result["cells"] == []
    assert [s["B"] for s in result["skipped"]] == [2, 4]
    assert all("out of memory at B=2" in s["reason"] for s in result["skipped"])

    def broken(plan, key):
        raise ValueError("a real bug")

    monkeypatch.setattr(measure.JaxPlan, "build", broken)
    with pytest.raises(ValueError, match="a real bug"):
        bench.run_grid(spec)


def test_quick_grid_covers_the_overhead_cells() -> None:
    quick = bench.GridSpec.quick()
    assert quick.envs == ("CartPole-v1", "Breakout-MinAtar")
    assert 1024 in quick.Bs and 128 in quick.Ts  # docs/benchmarks.md's overhead table cells
    assert quick.methods == bench.METHODS
    assert bench.GridSpec.quick(reps=2, Bs=[8, 1]).Bs == (1, 8)
    default = bench.GridSpec()
    assert default.Bs[0] == 1 and default.Bs[-1] == 2**16


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"envs": ("NoSuchEnv-v0",)}, "envs"),
        ({"envs": "CartPole-v1"}, "envs"),
        ({"Bs": (0, 4)}, "Bs"),
        ({"Bs": ()}, "Bs"),
        ({"Ts": (1.5,)}, "Ts"),
        ({"Ts": 128}, "Ts"),
        ({"methods": ("bare", "cuda")}, "methods"),
        ({"reps": 0}, "reps"),
        ({"warmup": 0}, "warmup"),
        ({"peer_max_B": 0}, "peer_max_B"),
        ({"min_rep_seconds": -1.0}, "min_rep_seconds"),
        ({"max_call_seconds": math.nan}, "max_call_seconds"),
        ({"memory_budget_bytes": 0}, "memory_budget_bytes"),
        ({"seed": True}, "seed"),
    ],
)
def test_bad_grid_arguments_are_named(kwargs, match) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        bench.GridSpec(**kwargs)


def test_run_grid_rejects_a_non_spec() -> None:
    with pytest.raises(TypeError, match="GridSpec"):
        bench.run_grid({"envs": ["CartPole-v1"]})


def test_program_size_counts_nested_equations_and_fusions() -> None:
    import jax.numpy as jnp

    def body(c, x):
        return c + jnp.sin(x), c * 2.0

    def f(xs):
        return jax.lax.scan(body, jnp.float32(0.0), xs)

    xs = jnp.arange(3.0)
    body_eqns = len(jax.make_jaxpr(body)(jnp.float32(0.0), jnp.float32(1.0)).jaxpr.eqns)
    traced = jax.jit(f).trace(xs)
    hlo = traced.lower().compile().as_text()
    size = measure.program_size(traced.jaxpr, hlo)
    # one scan equation, and the body's own equations inside it
    assert size["jaxpr_eqns"] == 1 + body_eqns and body_eqns >= 3
    assert size["hlo_fusions"] == len(re.findall(r"= \S+ fusion\(", hlo)) >= 1
    assert measure.program_size(traced.jaxpr, "a = f32[] fusion(b), c = f32[] fusion(d)")[
        "hlo_fusions"
    ] == 2  # fmt: skip


def test_compile_parts_times_the_stages_and_sums_the_sizes() -> None:
    import jax.numpy as jnp

    def parts():
        return [
            measure.Part(jax.jit(lambda x: x * 2.0 + 1.0), {}),
            measure.Part(jax.jit(lambda y: jnp.sin(y).sum()), {}),
        ]

    x = np.arange(4.0, dtype=np.float32)
    exes, seconds, size = measure.compile_parts(parts(), (x,))
    assert list(seconds) == [*measure.STAGES, "total"] and all(s > 0 for s in seconds.values())
    assert seconds["total"] == pytest.approx(sum(seconds[s] for s in measure.STAGES))
    np.testing.assert_allclose(measure.call_parts(exes, (x,)), np.sin(2 * x + 1).sum(), rtol=1e-6)
    # The sizes are the parts' own, summed: the same from a fresh trace and compile.
    total, args = {"jaxpr_eqns": 0, "hlo_fusions": 0}, (x,)
    for part in parts():
        traced = part.fn.trace(*args)
        exe = traced.lower().compile()
        for k, v in measure.program_size(traced.jaxpr, exe.as_text()).items():
            total[k] += v
        args = (exe(*args),)
    assert size == total and all(isinstance(v, int) and v > 0 for v in (size["jaxpr_eqns"],))
    with pytest.raises(ValueError, match="parts"):
        measure.compile_parts([], (x,))


def test_an_overlapping_part_compiles_beside_the_next_for_its_abstract_output() -> None:
    """``Part(overlap=True)``: the next part is traced for the abstract output
    (the first part is not run to get it), while XLA compiles the first on a
    worker thread; the same executables, values and sizes as in turn."""
    import jax.numpy as jnp
    from jax.experimental import io_callback

    runs = []

    def first(x):
        io_callback(lambda: runs.append(1), None, ordered=True)
        return x * 2.0 + 1.0

    def parts(overlap):
        return [
            measure.Part(jax.jit(first), {}, overlap=overlap),
            measure.Part(jax.jit(lambda y: jnp.sin(y).sum()), {}),
        ]

    x = np.arange(4.0, dtype=np.float32)
    exes, seconds, size = measure.compile_parts(parts(True), (x,))
    assert runs == []  # compiled for the abstract output: nothing ran
    assert all(seconds[s] > 0 for s in measure.STAGES)
    assert 0 < seconds["total"] <= sum(seconds[s] for s in measure.STAGES) * 1.05 + 0.05
    np.testing.assert_allclose(measure.call_parts(exes, (x,)), np.sin(2 * x + 1).sum(), rtol=1e-6)
    assert runs == [1]
    _, _, size_in_turn = measure.compile_parts(parts(False), (x,))
    assert runs == [1, 1] and size == size_in_turn  # in turn: the first ran to get its output


def test_compare_programs_compiles_fresh_and_runs_interleaved() -> None:
    import jax.numpy as jnp

    built = []

    def build():
        built.append(True)
        x = np.arange(3.0, dtype=np.float32)
        return {
            "double": ([measure.Part(jax.jit(lambda v: v * 2.0), {})], (x,)),
            "sine": ([measure.Part(jax.jit(jnp.sin), {})], (x,)),
        }

    cache = jax.config.jax_enable_compilation_cache
    out = measure.compare_programs(build, reps=3, compile_reps=2)
    # one round more than counted: the first warms the process up
    assert len(built) == 3 and jax.config.jax_enable_compilation_cache == cache
    for key in ("compile_s", "size", "run_s", "outputs"):
        assert list(out[key]) == ["double", "sine"], key  # build()'s order
    for name in ("double", "sine"):
        c = out["compile_s"][name]
        assert len(c["all"]) == 2 and c["total"] == statistics.median(c["all"])
        assert all(c[s] > 0 for s in measure.STAGES)
        assert len(out["run_s"][name]["all"]) == 3
        assert out["run_s"][name]["median"] == statistics.median(out["run_s"][name]["all"])
        assert min(out["size"][name].values()) >= 1
    np.testing.assert_allclose(out["outputs"]["double"], [0.0, 2.0, 4.0])
    np.testing.assert_allclose(out["outputs"]["sine"], np.sin([0.0, 1.0, 2.0]), rtol=1e-6)
    for bad in ({"reps": 0}, {"compile_reps": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            measure.compare_programs(build, **{"reps": 1, "compile_reps": 1, **bad})
    assert len(built) == 3  # rejected before anything was built


def test_compile_summary_and_fresh_compiles() -> None:
    rows = [  # as compile_parts gives them: the total is the stages' sum...
        {"trace": 1.0, "lower": 2.0, "compile": 3.0, "total": 6.0},
        {"trace": 3.0, "lower": 1.0, "compile": 1.0, "total": 5.0},
        {"trace": 2.0, "lower": 0.5, "compile": 10.0, "total": 12.5},
    ]
    summary = measure.compile_summary(rows)
    assert summary == {"trace": 2.0, "lower": 1.0, "compile": 3.0, "total": 6.0,
                       "all": [6.0, 5.0, 12.5]}  # fmt: skip
    # ...or, where a part compiled beside the next, the wall time (less)
    overlapped = [{**row, "total": row["total"] - 1.0} for row in rows]
    assert measure.compile_summary(overlapped)["all"] == [5.0, 4.0, 11.5]
    was = jax.config.jax_enable_compilation_cache
    with pytest.raises(RuntimeError), measure.fresh_compiles():
        assert jax.config.jax_enable_compilation_cache is False
        raise RuntimeError
    assert jax.config.jax_enable_compilation_cache == was


def test_fresh_compiles_take_the_cache_out_after_a_cached_compile(tmp_path) -> None:
    """JAX decides once per process whether it uses its persistent cache; once
    a program was compiled with the cache on (the grid, before ``--training``),
    ``fresh_compiles`` still takes it out: nothing is written (nor read)."""
    from jax.experimental.compilation_cache import compilation_cache

    was = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    compilation_cache.reset_cache()
    try:
        salt = float(os.getpid())  # programs no earlier run has cached
        jax.jit(lambda x: x + salt).lower(1.0).compile()
        entries = len(list(tmp_path.iterdir()))
        assert entries >= 1, "the cache is on outside the block"
        with measure.fresh_compiles():
            jax.jit(lambda x: x * salt - 1.0).lower(1.0).compile()
        assert len(list(tmp_path.iterdir())) == entries
    finally:
        jax.config.update("jax_compilation_cache_dir", was)
        compilation_cache.reset_cache()


def test_compile_row_has_every_column() -> None:
    from jaxsample.bench import report

    header = report.compile_header(9)
    for column in ("program", "trace", "lower", "XLA", "compile", "run", "eqns", "fusions"):
        assert column in header
    stages = {"trace": 0.25, "lower": 0.5, "compile": 4.0, "total": 4.75}
    size = {"jaxpr_eqns": 1969, "hlo_fusions": 552}
    row = report.compile_row("train", 9, stages, 3.5, size, "500")
    assert row.split() == ["train", "0.25s", "0.50s", "4.00s", "4.75s", "3.50s", "1969", "552",
                           "500"]  # fmt: skip
    assert len(row.split("  500")[0]) == len(header.split("  final return")[0])  # aligned


def test_sampler_compile_compares_fresh_compiles_of_collect_and_the_bare_scan(monkeypatch) -> None:
    """``--sampler-compile``'s measurement: the grid's ``random`` and ``bare``
    programs compiled from scratch (``measure.compare_programs``), their
    medians and sizes, the ratio of those medians; a suite that is not
    installed is a skip line, not an error."""
    from jaxsample.envs import suites

    real = suites.unavailable
    monkeypatch.setattr(
        suites, "unavailable", lambda s: "navix is not installed" if s == "navix" else real(s)
    )
    envs = ("CartPole-v1", "navix/Navix-Empty-5x5-v0")
    result = bench.sampler_compile(envs, B=2, T=4, compile_reps=2, reps=2)
    assert result["settings"] == {"B": 2, "T": 4, "compile_reps": 2, "reps": 2}
    assert result["skipped"] == {"navix/Navix-Empty-5x5-v0": "navix is not installed"}
    (cell,) = result["envs"].values()
    compile_s, run_s = cell["compile_s"], cell["run_s"]
    assert list(compile_s) == ["collect", "bare"]
    for name in ("collect", "bare"):
        assert len(compile_s[name]["all"]) == 2 and len(run_s[name]["all"]) == 2
        assert compile_s[name]["total"] == statistics.median(compile_s[name]["all"])
    # collect computes more than the bare scan (keys, finals, TrajInfo)
    assert cell["size"]["collect"]["jaxpr_eqns"] > cell["size"]["bare"]["jaxpr_eqns"] > 0
    ratio = cell["ratios"]["collect/bare"]
    assert ratio["compile"] == compile_s["collect"]["total"] / compile_s["bare"]["total"]
    assert ratio["run"] == run_s["collect"]["median"] / run_s["bare"]["median"]
    table = bench.format_sampler_compile(result)
    assert "(CartPole-v1, B=2, T=4; medians of 2 fresh compiles and 2 runs" in table
    assert f"collect/bare: run {ratio['run']:.2f}x, compile {ratio['compile']:.2f}x" in table
    assert "navix/Navix-Empty-5x5-v0: skipped, navix is not installed" in table
    with pytest.raises(ValueError, match="compile_reps"):
        bench.sampler_compile(envs, compile_reps=0)
    with pytest.raises(TypeError, match="envs must be a sequence of env names"):
        bench.sampler_compile("CartPole-v1")  # a str would be its characters
    compiles = []
    monkeypatch.setattr(scaling, "compare_programs", lambda *a, **k: compiles.append(1))
    with pytest.raises(ValueError, match="'CartPol-v1'"):  # before CartPole-v1 compiles
        bench.sampler_compile(("CartPole-v1", "CartPol-v1"))
    assert compiles == []

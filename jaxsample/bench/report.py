"""Presenting a [`run_grid`][jaxsample.bench.run_grid] result: the terminal
table, a markdown table for the docs, strict JSON and a plot."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from jaxsample.bench.schema import FLOOR, KEY_RATIOS, LABELS, METHODS, floor_of

_COLORS = {
    "bare": "black",
    "random": "tab:blue",
    "pool": "tab:cyan",
    "bare_mlp": "tab:gray",
    "mlp": "tab:orange",
    "gymnasium": "tab:green",
    "envpool": "tab:red",
}


def _si(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def cell_line(cell: dict[str, Any]) -> str:
    """One line of progress: a cell's steps/s and ratios per method."""
    parts = []
    for m, r in cell["methods"].items():
        ratio, best = r["ratio_to_floor"], r["ratio_to_floor_best"]
        parts.append(
            f"{m} {_si(r['steps_per_s']['median'])}"
            + ("" if ratio is None or floor_of(m) == m else f" ({ratio:.2f}x, best {best:.2f}x)")
        )
    return f"{cell['env']} B={cell['B']} T={cell['T']}: " + ", ".join(parts) + " steps/s"


def key_ratios(result: dict[str, Any]) -> list[str]:
    """One line per cell with the ratios that answer a user's question
    (`KEY_RATIOS`): the sampler with gymnax's
    auto-reset and with pooled resets against the bare scan, and the sampler
    with the MLP against the hand-written MLP rollout."""
    lines = []
    for cell in result["cells"]:
        rows = cell["methods"]
        parts = []
        for m in KEY_RATIOS:
            ratio = rows[m]["ratio_to_floor"] if m in rows else None
            if ratio is not None:
                parts.append(f"{m}/{floor_of(m)} {ratio:.2f}x")
        if parts:
            lines.append(f"{cell['env']} B={cell['B']} T={cell['T']}: " + ", ".join(parts))
    return lines


def _header(result: dict[str, Any]) -> str:
    s = result["system"]
    return (
        f"backend {s['backend']} ({s['device_kind']}, {s['device_count']} device(s), 1 used), "
        f"jax {s['jax']}, jaxlib {s['jaxlib']}, gymnax {s['gymnax']}, {s['cpu_count']} CPU(s)"
    )


def format_table(result: dict[str, Any]) -> str:
    """The terminal table: one line per (cell, method), then skips and notes."""
    lines = [
        f"jaxsample bench: {_header(result)}",
        f"{'env':<18} {'B':>6} {'T':>5}  {'method':<10} {'compile s':>9} "
        f"{'steps/s':>9} {'[q25 .. q75]':>19} {'ratio':>6} {'best':>6} {'peak MB':>8}",
    ]
    for cell in result["cells"]:
        for m, r in cell["methods"].items():
            sps = r["steps_per_s"]
            ratio, best = r["ratio_to_floor"], r["ratio_to_floor_best"]
            peak = r["peak_bytes"]
            lines.append(
                f"{cell['env']:<18} {cell['B']:>6} {cell['T']:>5}  {m:<10} "
                f"{r['compile_s']:>9.2f} {_si(sps['median']):>9} "
                f"{'[' + _si(sps['q25']) + ' .. ' + _si(sps['q75']) + ']':>19} "
                f"{'n/a' if ratio is None else f'{ratio:.3f}':>6} "
                f"{'n/a' if best is None else f'{best:.3f}':>6} "
                f"{'n/a' if peak is None else f'{peak / 2**20:.1f}':>8}"
            )
    if result["skipped"]:
        grouped: dict[str, list[str]] = {}
        for s in result["skipped"]:
            grouped.setdefault(s["reason"], []).append(f"{s['env']} B={s['B']} {s['method']}")
        lines.append("skipped:")
        for reason, what in grouped.items():
            shown = ", ".join(what[:4]) + (f" and {len(what) - 4} more" if len(what) > 4 else "")
            lines.append(f"  {reason}: {shown}")
    ratios = key_ratios(result)
    if ratios:
        lines.append("ratios (throughput / its hand-written floor, medians; higher is better):")
        lines.extend(f"  {line}" for line in ratios)
    for note in result["notes"]:
        lines.append(f"note: {note}")
    lines.append(
        "ratio = throughput / its own floor's (mlp: bare_mlp's; the others: bare's), "
        "from the medians of the interleaved "
        "repetitions; best = from the fastest repetition of each (steadier on a busy "
        "machine); compile s of a host peer = env construction + reset"
    )
    return "\n".join(lines)


def markdown_table(result: dict[str, Any], *, best: bool = False) -> str:
    """A README table: one row per cell, median steps/s per method and the
    ratio to the floor in parentheses (with ``best``, also the ratio of the
    fastest repetitions)."""
    methods = [m for m in METHODS if any(m in c["methods"] for c in result["cells"])]
    head = "| env | B | T | " + " | ".join(methods) + " |"
    lines = [head, "|" + "---|" * (3 + len(methods))]
    for cell in result["cells"]:
        vals = []
        for m in methods:
            r = cell["methods"].get(m)
            if r is None:
                vals.append("–")
                continue
            ratio = r["ratio_to_floor"]
            extra = "" if ratio is None or floor_of(m) == m else f" ({ratio:.2f})"
            if best and extra:
                extra = f" ({ratio:.2f}; best {r['ratio_to_floor_best']:.2f})"
            vals.append(_si(r["steps_per_s"]["median"]) + extra)
        lines.append(f"| {cell['env']} | {cell['B']} | {cell['T']} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def write_json(result: Any, path: str | os.PathLike) -> None:
    """Write ``result`` (a benchmark's JSON-ready result) as JSON (strict: no NaN
    or infinity)."""
    with open(path, "w") as f:
        json.dump(result, f, indent=1, allow_nan=False)
        f.write("\n")


def _minor_ratio_label(value: float, _: Any) -> str:
    """Label the minor log ticks 2x and 5x a power of ten (0.2, 0.5, 2, 5, ...)."""
    if value <= 0:
        return ""
    mantissa = value / 10 ** math.floor(math.log10(value))
    return f"{value:g}" if round(mantissa) in (2, 5) else ""


def plot(result: dict[str, Any], path: str | os.PathLike | None = None) -> Any:
    """Per env, steps/s vs B (log-log, one line per method, the band is the
    interquartile range) and throughput relative to the floor vs B.

    Writes a PNG to ``path`` when given; returns the matplotlib ``Figure``
    (built without pyplot, so it never changes the notebook's backend).
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    cells = result["cells"]
    envs = list(dict.fromkeys(c["env"] for c in cells))
    Ts = sorted({c["T"] for c in cells})
    styles = ["-", "--", ":", "-."]
    # constrained: the figure's legend goes outside the panels (below them)
    fig = Figure(figsize=(10, 3.4 * max(1, len(envs)) + 0.6), dpi=80, layout="constrained")
    axes = fig.subplots(max(1, len(envs)), 2, squeeze=False)
    for i, env_name in enumerate(envs):
        ax_s, ax_r = axes[i]
        for m in METHODS:
            for j, T in enumerate(Ts):
                rows = [
                    (c["B"], c["methods"][m])
                    for c in cells
                    if c["env"] == env_name and c["T"] == T and m in c["methods"]
                ]
                if not rows:
                    continue
                Bs = [b for b, _ in rows]
                label = LABELS[m] + (f", T={T}" if len(Ts) > 1 else "")
                style = {"color": _COLORS[m], "ls": styles[j % len(styles)], "marker": "o"}
                ax_s.plot(Bs, [r["steps_per_s"]["median"] for _, r in rows], label=label, **style)
                ax_s.fill_between(
                    Bs,
                    [r["steps_per_s"]["q25"] for _, r in rows],
                    [r["steps_per_s"]["q75"] for _, r in rows],
                    color=_COLORS[m],
                    alpha=0.2,
                )
                with_ratio = [(b, r) for b, r in rows if r["ratio_to_floor"] is not None]
                if floor_of(m) != m and with_ratio:  # a floor is 1 against itself
                    xs = [b for b, _ in with_ratio]
                    ax_r.plot(
                        xs, [r["ratio_to_floor"] for _, r in with_ratio], label=label, **style
                    )
                    ax_r.fill_between(
                        xs,
                        [r["ratio_to_floor_spread"][0] for _, r in with_ratio],
                        [r["ratio_to_floor_spread"][1] for _, r in with_ratio],
                        color=_COLORS[m],
                        alpha=0.2,
                    )
        T_text = ", ".join(str(T) for T in Ts)
        ax_s.set(xscale="log", yscale="log", xlabel="B (environments)", ylabel="steps / s")
        ax_s.set_title(f"{env_name}, T={T_text}", fontsize=10)
        ax_r.axhline(1.0, color=_COLORS[FLOOR], lw=0.8)
        ax_r.set(xscale="log", yscale="log", xlabel="B (environments)")
        ax_r.set_ylabel("throughput / own floor\n(mlp: bare_mlp; others: bare)")
        ax_r.set_title(f"{env_name}: relative to the floor (1 = floor)", fontsize=10)
        ax_r.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax_r.yaxis.set_minor_formatter(FuncFormatter(_minor_ratio_label))
        for ax in (ax_s, ax_r):
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3, which="both")
    # One legend for the figure, below the panels: inside one it hid curves.
    handles = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                handles.setdefault(line.get_label(), line)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=3, fontsize=7)
    fig.suptitle(f"jaxsample bench: {_header(result)}", fontsize=8)
    if path is not None:
        fig.savefig(path)
    return fig


def training_settings(config: Any, *, seeds: int, reps: int, compile_reps: int) -> dict[str, Any]:
    """The settings of an end-to-end training benchmark (a PPO or DQN config)."""
    return {
        "env": config.env_name,
        "seeds": seeds,
        "total_timesteps": config.num_iterations * config.steps_per_iteration,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "reps": reps,
        "compile_reps": compile_reps,
    }


def end_to_end_result(
    settings: dict[str, Any],
    measured: dict[str, Any],
    pairs: list[tuple[str, str]],
    final_return: dict[str, list[float]],
) -> dict[str, Any]:
    """An end-to-end training comparison's result from ``measured``
    (`compare_programs`): its compile and run
    times, sizes, the final returns, and for each pair ``(a, b)`` of program
    names ``ratios["a/b"] = {"run", "compile"}``, ``a``'s median run and
    total compile time over ``b``'s (lower is better)."""
    compile_s, run_s = measured["compile_s"], measured["run_s"]
    ratios = {
        f"{a}/{b}": {
            "run": run_s[a]["median"] / run_s[b]["median"],
            "compile": compile_s[a]["total"] / compile_s[b]["total"],
        }
        for a, b in pairs
    }
    return {
        "settings": settings,
        "compile_s": compile_s,
        "size": measured["size"],
        "run_s": run_s,
        "ratios": ratios,
        "final_return": final_return,
    }


def format_end_to_end(algo: str, result: dict[str, Any]) -> str:
    """`end_to_end_result`'s table, titled with ``algo`` and the settings."""
    s = result["settings"]
    steps = "step" if s["num_steps"] == 1 else "steps"
    return format_programs(
        f"{algo} end to end ({s['env']}, {s['num_envs']} envs x {s['num_steps']} {steps}, "
        f"{s['total_timesteps']:,} steps, {s['seeds']} seed(s); medians of "
        f"{s['compile_reps']} fresh compiles and {s['reps']} runs, interleaved):",
        result,
    )


def format_programs(title: str, result: dict[str, Any], width: int = 14) -> str:
    """``title``, then a row per program of ``result`` (in the order of its
    ``compile_s``: `compile_row`), then its ``ratios``
    (``{"a/b": {"run", "compile"}}``)."""
    lines = [title, compile_header(width)]
    for name, compile_s in result["compile_s"].items():
        final = ", ".join(f"{x:.0f}" for x in result["final_return"].get(name, []))
        run = result["run_s"][name]["median"]
        lines.append(compile_row(name, width, compile_s, run, result["size"][name], final))
    for pair, ratio in result.get("ratios", {}).items():
        lines.append(f"  {pair}: run {ratio['run']:.2f}x, compile {ratio['compile']:.2f}x")
    return "\n".join(lines)


def compile_header(width: int) -> str:
    """The header of a training program's row (`compile_row`)."""
    return (
        f"  {'program':<{width}}{'trace':>7}{'lower':>7}{'XLA':>7}{'compile':>9}{'run':>8}"
        f"{'eqns':>7}{'fusions':>9}  final return"
    )


def compile_row(
    name: str,
    width: int,
    compile_s: dict[str, float],
    run_s: float,
    size: dict[str, int],
    final: str,
) -> str:
    """One program's row: its compile seconds by stage and in all
    (`compile_summary`), its run seconds, its
    size (`program_size`) and its final return."""
    c = compile_s
    return (
        f"  {name:<{width}}{c['trace']:>6.2f}s{c['lower']:>6.2f}s{c['compile']:>6.2f}s"
        f"{c['total']:>8.2f}s{run_s:>7.2f}s{size['jaxpr_eqns']:>7}{size['hlo_fusions']:>9}"
        f"  {final}"
    )

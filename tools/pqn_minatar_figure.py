"""PQN on the four MinAtar games beside our PPO presets and DQN at 1M steps: one figure.

Reads ``tools/preset_results.py``'s JSON lines: PQN's and DQN's from
``docs/presets/pqn.jsonl`` (``--algo pqn`` / ``--algo dqn``), PPO's presets
from ``docs/presets/results.jsonl`` (the latest line of each game's preset on
Python 3.12), and draws each game's training curves (the median over the
seeds of the training return) into ``docs/figures/pqn_minatar.png``; prints
the greedy medians as a Markdown table.

    python tools/pqn_minatar_figure.py
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GAMES = ("Breakout", "Asterix", "SpaceInvaders", "Freeway")


def latest(path: Path, keep) -> dict[str, dict]:
    """The latest line of each env among those ``keep(line)`` accepts."""
    out: dict[str, dict] = {}
    for text in path.read_text().splitlines():
        if text.strip():
            line = json.loads(text)
            if keep(line):
                out[line["env"]] = line
    return out


def median_curve(line: dict) -> tuple[list[int], list[float]]:
    import numpy as np

    returns = np.array(
        [[np.nan if v is None else v for v in seed] for seed in line["curve"]["returns"]]
    )
    with warnings.catch_warnings():  # a bin where no seed's episode ended
        warnings.simplefilter("ignore", RuntimeWarning)
        median = np.nanmedian(returns, axis=0)
    finite = np.isfinite(median)  # Freeway's 2,500-step episodes end in few bins
    return list(np.asarray(line["curve"]["steps"])[finite]), list(median[finite])


def main() -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ours = ROOT / "docs" / "presets" / "pqn.jsonl"
    lines = {
        "PQN": latest(
            ours,
            lambda x: x.get("algo") == "pqn" and x["preset"] and x["python"].startswith("3.12"),
        ),
        "PPO preset": latest(
            ROOT / "docs" / "presets" / "results.jsonl",
            lambda x: x["preset"] and x["python"].startswith("3.12") and "algo" not in x,
        ),
        "DQN": latest(ours, lambda x: x.get("algo") == "dqn"),
    }
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    rows = ["| game | PQN | PPO preset | DQN |", "|---|---|---|---|"]
    for ax, game in zip(axes, GAMES, strict=True):
        env = f"{game}-MinAtar"
        cells = []
        for name, by_env in lines.items():
            line = by_env.get(env)
            if line is None:
                cells.append("-")
                continue
            steps, curve = median_curve(line)
            ax.plot(steps, curve, label=f"{name} (greedy {line['median']:.3g})")
            cells.append(f"{line['median']:.3g} ({', '.join(f'{r:.3g}' for r in line['returns'])})")
        rows.append(f"| {env} | " + " | ".join(cells) + " |")
        ax.set_title(f"{env}, 1M steps")
        ax.set_xlabel("env steps (one seed)")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("training return (median of 4 seeds)")
    fig.tight_layout()
    out = ROOT / "docs" / "figures" / "pqn_minatar.png"
    fig.savefig(out, dpi=90)
    print("\n".join(rows))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

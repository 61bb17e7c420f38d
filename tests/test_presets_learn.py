"""Every preset still learns what the results page says (slow: minutes each).

The gymnax environments: the preset, trained as tools/preset_results.py
measures it (4 seeds in one program, each seed's greedy policy over 164
episodes, the median over seeds), reaches gymnax's published return within
gymnax-blines' step budget (Pendulum-v1: a floor instead; its published
return lies beyond the optimum, see BEYOND_OPTIMUM). MinAtar (no published
return): the preset at the page's budget reaches the plain defaults' worst
seed recorded on the page (docs/presets/results.jsonl) at the same budget.
The presets held to a margin (MARGINS) are also trained on other seeds and
judged on other evaluation episodes, as docs/presets.md's confirmation table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import preset_page  # noqa: E402
import preset_results  # noqa: E402

pytestmark = pytest.mark.slow


#: Published returns that no policy reaches in expectation, and the floor the
#: preset is held to instead, so that a change that breaks learning still
#: fails. Pendulum-v1: the optimum from gymnax's start distribution is about
#: -136.5 (tools/pendulum_optimum.py; docs/presets.md), and the checkpoint behind
#: the published -130 returns -145.6 over 9,840 episodes; the preset's seeds
#: land near -150 (about +-7 over 164 episodes).
BEYOND_OPTIMUM = {"Pendulum-v1": -160.0}


#: Presets held to a margin (issue 52 item 10, issue 53 item 4): the median
#: over seeds at least the first figure and every seed at least the second,
#: on the seeds they were tuned on (0-3) and on others, judged on other
#: evaluation episodes (seeds 4-7, the episodes of seed 1): CartPole-v1 solved
#: (475) on every seed; Acrobot-v1 2 beyond gymnax's -80, every seed at -80;
#: MountainCar-v0 at gymnax's -118, no seed stuck away from the goal.
MARGINS = {
    "CartPole-v1": (475.0, 475.0),
    "Acrobot-v1": (-78.0, -80.0),
    "MountainCar-v0": (-118.0, -150.0),
}


@pytest.mark.parametrize("env", list(preset_results.TARGETS))
def test_the_preset_reaches_the_published_return(env: str) -> None:
    line = preset_results.result_line(env, None, {}, seeds=4, episodes=164)
    published, budget = preset_results.TARGETS[env]
    target = BEYOND_OPTIMUM.get(env, published)
    assert line["steps"] <= budget
    assert line["median"] >= target, (
        f"{env}: median greedy return {line['median']:.1f} (seeds {line['returns']}), "
        f"wanted {target} (published {published})"
    )
    if env in MARGINS:
        assert min(line["returns"]) >= MARGINS[env][1], line["returns"]
        assert line["median"] >= MARGINS[env][0], line["returns"]


@pytest.mark.parametrize("env", list(MARGINS))
def test_the_preset_holds_its_margin_on_other_seeds_and_episodes(env: str) -> None:
    line = preset_results.result_line(env, None, {}, seeds=4, episodes=164, seed=4, eval_seed=1)
    median, each = MARGINS[env]
    assert line["median"] >= median and min(line["returns"]) >= each, (
        f"{env}: seeds 4-7, episodes of seed 1: {line['returns']} (median "
        f"{line['median']:.1f}), wanted a median >= {median} and every seed >= {each}"
    )


def _recorded_defaults(env: str) -> dict:
    """The plain defaults' latest line of ``env`` measured on this Python."""
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    lines = [json.loads(t) for t in (ROOT / preset_results.RESULTS).read_text().splitlines() if t]
    mine = [
        x
        for x in lines
        if x["env"] == env and x["preset"] is None and preset_page.python_of(x) == here
    ]
    assert mine, f"docs/presets/results.jsonl has no plain-defaults line of {env} on {here}"
    return mine[-1]


@pytest.mark.parametrize("env", preset_results.MINATAR)
def test_the_minatar_preset_learns_as_well_as_the_plain_defaults(env: str) -> None:
    """At the page's budget the preset's median reaches the plain defaults'
    worst seed on the page (same Python): the two are level within seed noise
    on Freeway at that budget, so "beats the defaults' median" would be a
    coin flip there; a preset that stops learning scores far below that."""
    defaults = _recorded_defaults(env)
    budget = {"total_timesteps": defaults["config"]["total_timesteps"]}
    line = preset_results.result_line(env, None, budget, seeds=4, episodes=164)
    assert line["steps"] <= budget["total_timesteps"]
    worst = min(defaults["returns"])
    assert line["median"] >= worst, (
        f"{env}: preset {line['median']:.2f} (seeds {line['returns']}) vs the plain "
        f"defaults' worst seed {worst:.2f} at {budget['total_timesteps']:,} steps"
    )

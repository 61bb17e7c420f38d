"""Every preset still learns what the results page says (slow: minutes each).

The gymnax environments: the preset, trained as tools/preset_results.py
measures it (4 seeds in one program, each seed's greedy policy over 164
episodes, the median over seeds), reaches gymnax's published return within
gymnax-blines' step budget. MinAtar (no published return): the preset at the
page's budget beats the plain defaults' median recorded on the page
(docs/presets/results.jsonl) at the same budget.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import preset_results  # noqa: E402

pytestmark = pytest.mark.slow


#: Published returns the presets do not reach yet (docs/presets.md says how far
#: they are): strict, so reaching one fails the test until it is taken off here.
NOT_YET = {"Pendulum-v1": "the best preset found reaches about -145; published: -130"}


@pytest.mark.parametrize(
    "env",
    [
        pytest.param(env, marks=pytest.mark.xfail(strict=True, reason=NOT_YET[env]))
        if env in NOT_YET
        else env
        for env in preset_results.TARGETS
    ],
)
def test_the_preset_reaches_the_published_return(env: str) -> None:
    line = preset_results.result_line(env, None, {}, seeds=4, episodes=164)
    target, budget = preset_results.TARGETS[env]
    assert line["steps"] <= budget
    assert line["median"] >= target, (
        f"{env}: median greedy return {line['median']:.1f} (seeds {line['returns']}), "
        f"published {target}"
    )


def _recorded_defaults(env: str) -> dict:
    lines = [json.loads(t) for t in (ROOT / preset_results.RESULTS).read_text().splitlines() if t]
    mine = [x for x in lines if x["env"] == env and x["preset"] is None]
    assert mine, f"docs/presets/results.jsonl has no plain-defaults line of {env}"
    return mine[-1]


@pytest.mark.parametrize("env", preset_results.MINATAR)
def test_the_minatar_preset_beats_the_plain_defaults(env: str) -> None:
    defaults = _recorded_defaults(env)
    budget = {"total_timesteps": defaults["config"]["total_timesteps"]}
    line = preset_results.result_line(env, None, budget, seeds=4, episodes=164)
    assert line["steps"] <= budget["total_timesteps"]
    assert line["median"] > defaults["median"], (
        f"{env}: preset {line['median']:.2f} (seeds {line['returns']}) vs the plain "
        f"defaults' {defaults['median']:.2f} at {budget['total_timesteps']:,} steps"
    )

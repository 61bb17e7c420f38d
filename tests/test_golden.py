"""The reference trainers compute, bit for bit, what they computed when the
golden results were recorded (tools/golden_results.py: short runs of explicit
configs, one program and a run folder, final parameters and every metric)."""

import importlib.util
import pathlib
import sys

import jax
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools"))
import golden_results

SLOW = {"ippo_mpe_spread", "selfplay_tic_tac_toe"}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in golden_results.CASES],
)
def test_same_as_recorded(name):
    path = golden_results.folder() / f"{name}.npz"
    needs = golden_results.CASES[name][1]
    if needs is not None and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{needs} is not installed")
    if not path.exists():
        pytest.skip(f"no golden results recorded for {path.parent.name}")
    expected = dict(np.load(path))
    assert len(expected) > 10
    with jax.numpy_rank_promotion("allow"):  # JaxMARL's and Pgx's own code broadcasts
        assert golden_results.differences(name, expected) == []

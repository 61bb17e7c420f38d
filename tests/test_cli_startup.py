"""Issue 43 item 1: the command line answers at once. ``import jaxsample``,
``--version``, every ``--help`` and every argument error load none of the
heavy packages (JAX, numpy, flax, gymnax, matplotlib, optax, orbax), checked
through ``sys.modules`` in a fresh process (not a clock); and the names the
parser needs are defined once, in the light layer."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

HEAVY = ("jax", "jaxlib", "numpy", "flax", "gymnax", "matplotlib", "optax", "orbax")

# Runs the command line in this process, then prints what it loaded.
_PROBE = """
import json, sys
argv = json.loads(sys.argv[1])
code = None
if argv is None:
    import jaxsample
else:
    from jaxsample.cli import main
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
roots = sorted({m.split(".")[0] for m in sys.modules})
print(json.dumps({"code": code, "modules": roots}), file=sys.stderr)
"""


def _probe(argv: list[str] | None, tmp_path) -> tuple[int | None, set[str], str, str]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv)],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # a train that ran by mistake would write here
        timeout=120,
    )
    *lines, last = out.stderr.strip().splitlines()
    report = json.loads(last)
    return report["code"], set(report["modules"]), out.stdout, "\n".join(lines)


def test_a_bare_import_loads_no_heavy_package(tmp_path) -> None:
    _, modules, _, _ = _probe(None, tmp_path)
    assert "jaxsample" in modules
    assert modules.isdisjoint(HEAVY), sorted(modules & set(HEAVY))


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["--version"], 0, "jaxsample 0."),
        (["--help"], 0, "usage: jaxsample"),
        (["train", "--help"], 0, "PPOConfig fields"),
        (["train", "--algo", "dqn", "--help"], 0, "DQNConfig fields"),
        (["train", "--env", "Breakout-MinAtar", "--help"], 0, "defaults: preset Breakout-MinAtar"),
        (["eval", "--help"], 0, "--checkpoint"),
        (["collect", "--help"], 0, "--reset-mode"),
        (["bench", "--help"], 0, "--methods"),
        (["envs", "--help"], 0, "usage: jaxsample envs"),
        (["train", "--num-envs", "x"], 2, "--num-envs 'x': expected int"),
        (["train", "--nmu-envs", "8"], 2, "did you mean --num-envs?"),
        (["train", "--lr", "0"], 2, "--lr must be in (0.0, inf]"),
        (["train", "--algo", "dqn", "--buffer-capacity", "0"], 2, "--buffer-capacity must be"),
        (["train", "--algo", "nope"], 2, "invalid choice"),
        (["train", "--config", "missing.toml"], 2, "no such file"),
        (["eval", "--checkpoint", "x", "--episodes", "0"], 2, "--episodes must be >= 1"),
        (["collect", "--batches", "0"], 2, "--batches must be >= 1"),
        (["train", "--checkpoint-every", "10"], 2, "--checkpoint-every needs --checkpoint-dir"),
        (
            ["train", "--checkpoint-dir", "r", "--checkpoint-every", "-1"],
            2,
            "--checkpoint-every must be >= 0 seconds, got -1.0",
        ),
        (["bench", "--methods", "nope"], 2, "invalid choice"),
        (["frobnicate"], 2, "invalid choice"),
    ],
)
def test_help_version_and_argument_errors_load_no_heavy_package(argv, code, says, tmp_path) -> None:
    got, modules, stdout, stderr = _probe(argv, tmp_path)
    assert got == code, (stdout, stderr)
    assert says in stdout + stderr
    assert modules.isdisjoint(HEAVY), sorted(modules & set(HEAVY))
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_the_heavy_modules_take_the_light_definitions() -> None:
    """One definition of each name the parser and the configs need, in the
    light layer, which the heavy module imports (no copies held together by a
    test); the trainers' ``HParams`` name the fields of their config's
    ``HPARAMS``."""
    from jaxsample import _checks, bench, replay
    from jaxsample.algos import configs, registry
    from jaxsample.bench import schema

    assert bench.METHODS is schema.METHODS
    assert replay.MAX_CAPACITY is _checks.MAX_REPLAY_CAPACITY
    with pytest.raises(ValueError, match="buffer_capacity must be <="):
        configs.DQNConfig(buffer_capacity=replay.MAX_CAPACITY + 1)
    for algorithm in registry.ALGORITHMS.values():
        hparams = algorithm.module().HParams
        assert algorithm.hparams_fields is algorithm.config_type.HPARAMS
        assert tuple(f.name for f in dataclasses.fields(hparams)) == algorithm.hparams_fields


def test_numpy_scalars_still_pass_the_config_checks() -> None:
    import numpy as np

    from jaxsample.algos.configs import PPOConfig

    config = PPOConfig(num_envs=np.int64(8), lr=np.float32(1e-3), hidden_sizes=[np.int32(32)])
    assert config.hidden_sizes == (32,) and config.num_envs == 8
    with pytest.raises(TypeError, match="num_envs must be an int"):
        PPOConfig(num_envs=np.float64(8.0))

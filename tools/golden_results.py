"""Record (or check) the golden results of the reference trainers.

Short runs (20 iterations, 2 seeds under one vmap) of explicit configs, not
presets (which other work retunes): feedforward PPO on CartPole-v1, recurrent
PPO on velocity-masked CartPole, IPPO on MPE spread, self-play PPO on Pgx's
tic-tac-toe (its evaluations against a random opponent included) and DQN on
CartPole-v1. Each is trained through ``jaxsample.runs.train`` (one program, no
folder) and through a run folder (chunks and checkpoints); the final
parameters and every per-iteration metric are kept in
``tests/golden/jax-<version>/<case>.npz``. ``tests/test_golden.py`` trains
the same cases and asks for the same arrays, bit for bit: a refactor of the
trainers or of the run loop must not change what a seed computes.

    python tools/golden_results.py            # record the cases this JAX has
    python tools/golden_results.py --check    # compare with the recorded ones
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import pathlib
import sys
import tempfile

import jax
import numpy as np

from jaxsample import runs
from jaxsample.algos.configs import MASKED_CARTPOLE_RECURRENT, DQNConfig, PPOConfig

ROOT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "golden"
ITERATIONS = 20


def _ppo(**fields: object) -> PPOConfig:
    steps = int(fields["num_envs"]) * int(fields["num_steps"]) * ITERATIONS
    return PPOConfig(total_timesteps=steps, **fields)


#: name -> (config, the package its env suite needs, or None)
CASES = {
    "ppo_cartpole": (_ppo(num_envs=8, num_steps=32), None),
    "ppo_rnn_masked_cartpole": (
        dataclasses.replace(
            MASKED_CARTPOLE_RECURRENT,
            num_envs=8,
            num_steps=16,
            num_minibatches=2,
            update_epochs=2,
            total_timesteps=8 * 16 * ITERATIONS,
        ),
        None,
    ),
    "ippo_mpe_spread": (
        _ppo(
            env_name="jaxmarl/MPE_simple_spread_v3",
            num_envs=4,
            num_steps=16,
            num_minibatches=2,
            update_epochs=2,
        ),
        "jaxmarl",
    ),
    "selfplay_tic_tac_toe": (
        _ppo(
            env_name="pgx/tic_tac_toe",
            num_envs=8,
            num_steps=16,
            num_minibatches=2,
            update_epochs=2,
            eval_games=16,
            eval_every=5,
        ),
        "pgx",
    ),
    "dqn_cartpole": (
        DQNConfig(
            num_envs=4,
            num_steps=8,
            total_timesteps=4 * 8 * ITERATIONS,
            buffer_capacity=64,
            batch_size=32,
            learning_starts=64,
            target_update_interval=64,
        ),
        None,
    ),
}


def available(name: str) -> bool:
    """Whether this Python has what case ``name`` needs."""
    needs = CASES[name][1]
    return needs is None or importlib.util.find_spec(needs) is not None


def folder() -> pathlib.Path:
    """Where this JAX's golden results are."""
    return ROOT / f"jax-{jax.__version__}"


def results(name: str) -> dict[str, np.ndarray]:
    """Case ``name``'s arrays: ``one/...`` from one program, ``chunks/...`` from a
    run folder (``params/<path>`` and ``metrics/<name>``, ``[R, ...]``)."""
    config = CASES[name][0]
    out: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for how, where in (("one", None), ("chunks", f"{tmp}/run")):
            result = runs.train(config, seeds=2, folder=where, chunks=4, progress=False, say=None)
            params = result.state.params
            for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
                out[f"{how}/params{jax.tree_util.keystr(path)}"] = np.asarray(leaf)
            for key, value in result.training.metrics.items():
                out[f"{how}/metrics/{key}"] = np.asarray(value)
    return out


def differences(name: str, expected: dict[str, np.ndarray]) -> list[str]:
    """What differs between case ``name`` trained now and ``expected``."""
    got = results(name)
    problems = []
    for key in sorted(set(got) | set(expected)):
        if key not in got or key not in expected:
            problems.append(f"{key}: only in {'expected' if key in expected else 'now'}")
        elif not np.array_equal(got[key], expected[key], equal_nan=True):
            problems.append(f"{key}: differs")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of recording")
    parser.add_argument("cases", nargs="*", default=list(CASES), help="the cases (default: all)")
    args = parser.parse_args()
    status = 0
    for name in args.cases:
        if not available(name):
            print(f"{name}: skipped ({CASES[name][1]} not installed)")
            continue
        path = folder() / f"{name}.npz"
        if args.check:
            problems = differences(name, dict(np.load(path)))
            print(f"{name}: {'same' if not problems else '; '.join(problems[:5])}")
            status |= bool(problems)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(path, **results(name))
            print(f"{name}: wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())

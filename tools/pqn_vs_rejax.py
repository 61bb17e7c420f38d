"""PQN on CartPole-v1 beside rejax 0.1.3's, whole commands in fresh processes.

The wall time of the whole documented command (Python's start, imports,
compile and training; the greedy evaluation after it not), ours and rejax's
with its own config, in alternated fresh processes (one of each row per
round, so a shared machine's load falls on every row alike); then each run's
greedy return (not timed). Rows:

* ``ours``: ``jaxsample train --algo pqn --seeds 4 --checkpoint-dir D`` (the
  ``CartPole-v1:pqn`` preset of ``jaxsample/algos/presets.toml``), JAX's
  compilation cache as the command keeps it (warm after its first process);
* ``ours-cold``: the same with ``--no-compile-cache`` (every process compiles);
* ``ours-rejax-hp``: ours with rejax's hyperparameters (``--set`` below);
* ``rejax``: rejax 0.1.3's PQN with its ``configs/gymnax/cartpole.yaml``
  (keraJLi/rejax at 4954fbf6a765ca5fe17b3037fc20a6f217291271), 4 seeds under
  one ``jax.vmap``, its in-training evaluation (128 episodes every 16,384
  steps) included as its config has it; run by the Python of a venv of its
  own (``--rejax-python``: rejax 0.1.3 needs gymnax < 1.0).

Ours is evaluated greedily on 164 episodes per seed (``runs.load(D).evaluate``);
rejax by its last in-training evaluation (128 episodes, epsilon 0.005). Each
row also keeps each process's CPU seconds (user and system, every thread:
less sensitive to the machine's load than the wall time) and, beside rejax,
each round's wall time over rejax's in that round (``wall_vs_rejax``) and
their median.

    python tools/pqn_vs_rejax.py --rejax-python /work/peers/rejax/bin/python \\
        --rounds 3 --out docs/presets/pqn_vs_rejax.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

#: rejax's configs/gymnax/cartpole.yaml, its ``pqn`` entry.
REJAX_CONFIG = {
    "env": "CartPole-v1", "num_envs": 16, "num_steps": 128, "num_minibatches": 16,
    "max_grad_norm": 10, "learning_rate": 0.0003, "num_epochs": 5, "total_timesteps": 524288,
    "eval_freq": 16384, "eps_start": 1, "eps_end": 0.05, "exploration_fraction": 0.5,
    "gamma": 0.99, "td_lambda": 0.9, "normalize_observations": False,
}  # fmt: skip

#: rejax's hyperparameters as PQNConfig fields (rejax: 64 x 64 layer-normalised,
#: Adam at a constant rate, gradients clipped per element at 10; here clipped
#: by their global norm).
REJAX_AS_OURS = {
    "num_envs": 16, "num_steps": 128, "num_minibatches": 16, "update_epochs": 5,
    "total_timesteps": 524288, "lr": 3e-4, "anneal_lr": False, "optimizer": "adam",
    "q_lambda": 0.9, "epsilon_final": 0.05, "exploration_fraction": 0.5, "reward_scale": 1.0,
    "hidden_sizes": "64,64",
}  # fmt: skip

#: The rows, in the order each round runs them.
ROWS = ("ours", "ours-cold", "ours-rejax-hp", "rejax")

REJAX_SCRIPT = """
import json, sys, jax, numpy as np
from rejax import PQN
algo = PQN.create(**json.loads(sys.argv[1]))
keys = jax.random.split(jax.random.key(0), 4)
train = jax.jit(jax.vmap(PQN.train, in_axes=(None, 0)))
ts, (lengths, returns) = train(algo, keys)
jax.block_until_ready(returns)
print(json.dumps({"returns": np.asarray(returns)[:, -1].mean(axis=-1).tolist()}))
"""


def ours_command(folder: str, cold: bool, rejax_hp: bool) -> list[str]:
    cmd = [sys.executable, "-m", "jaxsample", "train", "--algo", "pqn", "--seeds", "4",
           "--checkpoint-dir", folder, "--csv", folder + ".csv"]  # fmt: skip
    if cold:
        cmd.append("--no-compile-cache")
    if rejax_hp:
        for name, value in REJAX_AS_OURS.items():
            flag = "--" + name.replace("_", "-")
            cmd += [flag, str(value).lower() if isinstance(value, bool) else str(value)]
    return cmd


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """``(wall seconds, CPU seconds (user + system, all threads), stdout)`` of
    ``cmd`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode:
        raise RuntimeError(f"{cmd[:4]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds, cpu, done.stdout


def greedy_returns(folder: str) -> list[float]:
    from jaxsample import runs

    return [r["return_mean"] for r in runs.load(folder).evaluate(episodes=164, policy="greedy")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rejax-python", default="/work/peers/rejax/bin/python")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--out", default=None, help="a JSON file for the results")
    args = parser.parse_args(argv)
    rows = args.rows.split(",")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if unknown := [r for r in rows if r not in ROWS]:
        parser.error(f"--rows: {', '.join(unknown)} not among {','.join(ROWS)}")
    if "rejax" in rows and not os.path.exists(args.rejax_python):
        print(f"no rejax venv at {args.rejax_python}: rejax skipped", file=sys.stderr)
        rows.remove("rejax")
    results: dict[str, dict[str, Any]] = {r: {"wall_s": [], "cpu_s": [], "returns": []}
                                          for r in rows}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="pqn_vs_rejax_") as scratch:
        for n in range(args.rounds):
            for row in rows:  # alternated: one process of each per round
                if row == "rejax":
                    cmd = [args.rejax_python, "-c", REJAX_SCRIPT, json.dumps(REJAX_CONFIG)]
                    seconds, cpu, out = timed(cmd)
                    returns = json.loads(out.strip().splitlines()[-1])["returns"]
                else:
                    folder = os.path.join(scratch, f"{row}-{n}")
                    seconds, cpu, _ = timed(ours_command(folder, row == "ours-cold",
                                                         row == "ours-rejax-hp"))  # fmt: skip
                    returns = greedy_returns(folder)
                results[row]["wall_s"].append(round(seconds, 1))
                results[row]["cpu_s"].append(round(cpu, 1))
                results[row]["returns"].append(returns)
                print(f"round {n} {row}: {seconds:.1f} s (CPU {cpu:.1f} s), returns {returns}",
                      flush=True)  # fmt: skip
    for row, r in results.items():
        r["median_wall_s"] = statistics.median(r["wall_s"])
        r["median_cpu_s"] = statistics.median(r["cpu_s"])
        r["median_return"] = statistics.median(x for run in r["returns"] for x in run)
        line = f"{row}: median wall {r['median_wall_s']} s over {args.rounds} rounds"
        if "rejax" in results and row != "rejax":  # each round's wall over rejax's that round
            pairs = zip(r["wall_s"], results["rejax"]["wall_s"], strict=True)
            r["wall_vs_rejax"] = [round(w / x, 2) for w, x in pairs]
            r["median_wall_vs_rejax"] = statistics.median(r["wall_vs_rejax"])
            line += f", {r['wall_vs_rejax']} of rejax's (median {r['median_wall_vs_rejax']})"
        print(f"{line}, median return {r['median_return']}")
    if args.out:
        import dataclasses

        import jax

        from jaxsample.algos import presets

        config = dataclasses.asdict(presets.get("CartPole-v1:pqn").config())
        data = {
            "rounds": args.rounds, "cpus": len(os.sched_getaffinity(0)), "jax": jax.__version__,
            "python": sys.version.split()[0], "ours_preset": config, "rejax_config": REJAX_CONFIG,
            "rows": results,
        }  # fmt: skip
        from jaxsample.runs.files import write_json

        write_json(args.out, data)  # beside, then renamed into place
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Our SAC/TD3 presets beside rejax 0.1.3's own runs, whole processes, alternated.

Issue 51 item 6: each round runs, in fresh processes one after the other,

* ``ours``: the documented command, ``jaxsample train --env ENV --algo ALGO
  --seeds 4`` (the preset; compile included, cold: ``--no-compile-cache``;
  the greedy evaluation is not part of it: the same seeds give the same state
  bit for bit with a run folder, so ``tools/preset_results.py --algo ALGO``
  measures the return);
* ``ours_warm``: the same with JAX's compilation cache (on by default; warm
  after the first run);
* ``ours_rejax_hp``: the same command with rejax's workload (1 env, one
  gradient step per env step, its Polyak step and buffer), the algorithm's
  speed apart from the workload;
* ``rejax``: rejax's ``ALGO.create(**config)`` from its own
  ``configs/gymnax/<name>.yaml``, ``jax.jit(jax.vmap(algo.train))`` over 4
  seeds (its own evaluation every ``eval_freq`` steps included, as a user runs
  it), in rejax's venv (``--rejax-python``: rejax 0.1.3, gymnax < 1.0); it
  prints its compile and run times and its last evaluation's mean return per
  seed (rejax's ``act``: SAC samples its actions).

The wall times are of the whole processes (imports included), each with its
modules' bytecode cached as a normal install has it: rejax's venv holds its
``.pyc`` files; where ``PYTHONDONTWRITEBYTECODE`` is set (so a venv installed
under it has none, and every process would compile gymnax's, scipy's and
pandas' sources again: ~15 s on this machine), the processes write and read
theirs under ``--pycache`` instead, filled by an untimed import first. One JSON line
per process is appended to ``--out``; the medians over ``--rounds`` rounds are
printed. Usage::

    python tools/rejax_side_by_side.py --algo sac --rejax-python /work/peers/rejax/bin/python \\
        --rejax-config ../rejax/configs/gymnax/pendulum.yaml --rounds 3
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

OUT = os.path.join("docs", "presets", "rejax_side_by_side.jsonl")

#: rejax's workload on our trainer (its pendulum.yaml's: 1 env, 1 gradient
#: step per env step, its polyak and buffer; TD3 its 10k steps), by algorithm.
REJAX_WORKLOAD = {
    "sac": ["--num-envs", "1", "--gradient-steps", "1", "--tau", "0.02",
            "--buffer-capacity", "10000"],
    "td3": ["--num-envs", "1", "--gradient-steps", "1", "--buffer-capacity", "10000",
            "--total-steps", "10000"],
}  # fmt: skip

_REJAX = """
import json, sys, time
t0 = time.perf_counter()
import jax, yaml
import numpy as np
from rejax import get_algo
algo_name, path, seeds = sys.argv[1], sys.argv[2], int(sys.argv[3])
config = yaml.safe_load(open(path))[algo_name]
algo = get_algo(algo_name).create(**config)
keys = jax.random.split(jax.random.PRNGKey(0), seeds)
t1 = time.perf_counter()
train = jax.jit(jax.vmap(algo.train)).lower(keys).compile()
t2 = time.perf_counter()
state, (lengths, returns) = train(keys)
jax.block_until_ready(returns)
t3 = time.perf_counter()
final = np.asarray(returns)[:, -1].mean(axis=-1)  # [seeds]: the last evaluation's mean
print(json.dumps({"compile_s": t2 - t1, "run_s": t3 - t2, "setup_s": t1 - t0,
                  "returns": [float(r) for r in final], "median": float(np.median(final)),
                  "steps": int(config["total_timesteps"])}))
"""


def _env(pycache: str) -> dict[str, str]:
    """The processes' environment: bytecode cached under ``pycache``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": pycache}


def _ours(env: str, algo: str, seeds: int, extra: list[str], pycache: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="side_by_side_") as d:
        json_path = os.path.join(d, "out.json")
        cmd = [sys.executable, "-m", "jaxsample", "train", "--env", env, "--algo", algo,
               "--seeds", str(seeds), "--json", json_path, "--csv", os.path.join(d, "t.csv"),
               *extra]  # fmt: skip
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=_env(pycache))
        if done.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        wall = time.perf_counter() - start
        with open(json_path) as f:
            data = json.load(f)
    summary = data.get("summary", data)
    return {"command": " ".join([*cmd[2:10], *extra]), "wall_s": wall,
            "compile_s": summary.get("compile_seconds"), "run_s": summary.get("wall_seconds"),
            "steps": summary.get("total_steps")}  # fmt: skip


def _rejax(python: str, algo: str, config: str, seeds: int, pycache: str) -> dict:
    start = time.perf_counter()
    out = subprocess.run([python, "-c", _REJAX, algo, config, str(seeds)], check=True,
                         capture_output=True, text=True, env=_env(pycache))  # fmt: skip
    wall = time.perf_counter() - start
    return {"wall_s": wall, **json.loads(out.stdout.strip().splitlines()[-1])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algo", choices=("sac", "td3"), default="sac")
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--rejax-python", required=True)
    parser.add_argument("--rejax-config", required=True, help="rejax's configs/gymnax/*.yaml")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--pycache", default=os.path.expanduser("~/.cache/jaxsample/pycache"),
                        help="where the processes cache their bytecode")  # fmt: skip
    args = parser.parse_args(argv)
    warm = f"import jaxsample.algos.{args.algo}, jaxsample.runs.run, jaxsample.cli"
    subprocess.run([sys.executable, "-c", warm], check=True, env=_env(args.pycache))
    subprocess.run([args.rejax_python, "-c", "import jax, rejax, yaml"], check=True,
                   env=_env(args.pycache))  # fmt: skip
    pyc = args.pycache
    runs = {
        "ours": lambda: _ours(args.env, args.algo, args.seeds, ["--no-compile-cache"], pyc),
        "ours_warm": lambda: _ours(args.env, args.algo, args.seeds, [], pyc),
        "ours_rejax_hp": lambda: _ours(
            args.env, args.algo, args.seeds, ["--no-compile-cache", *REJAX_WORKLOAD[args.algo]], pyc
        ),
        "rejax": lambda: _rejax(args.rejax_python, args.algo, args.rejax_config, args.seeds, pyc),
    }
    walls: dict[str, list[float]] = {name: [] for name in runs}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    for r in range(args.rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))  # alternated
        for name in order:
            now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            line = {"algo": args.algo, "env": args.env, "who": name, "round": r,
                    "seeds": args.seeds, **runs[name](), "cpus": len(os.sched_getaffinity(0)),
                    "date": now}  # fmt: skip
            walls[name].append(line["wall_s"])
            with open(args.out, "a") as f:
                f.write(json.dumps(line) + "\n")
            print(json.dumps(line), flush=True)
    medians = {name: round(statistics.median(w), 1) for name, w in walls.items()}
    medians["ours / rejax"] = round(medians["ours"] / medians["rejax"], 2)
    print(json.dumps({"median_wall_s": medians}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

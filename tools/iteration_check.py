"""One PPO preset's iteration: a digest of its jaxpr and its run time.

Two checkouts whose digests agree compile the same iteration program, so its
run time per step is the same (what a change that touches only the start of
a run must keep); the time, the median of ``REPS`` runs of a compiled chunk
of ``N`` iterations (one seed), says it on this machine.

    PYTHONPATH=CHECKOUT python tools/iteration_check.py ENV N REPS [FIELD=VALUE ...]
    # e.g. the same config in two checkouts:
    PYTHONPATH=. python tools/iteration_check.py CartPole-v1 26 15 "hidden_sizes=(64,64)"

Prints one JSON line: ``env``, ``digest`` (sha256 of the chunk's jaxpr text,
object addresses removed), ``per_iteration_ms``.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import re
import sys
import time

import jax
import numpy as np

from jaxsample.algos import presets
from jaxsample.runs.run import build_trainer


def main(argv: list[str]) -> None:
    env, n, reps = argv[0], int(argv[1]), int(argv[2])
    config, _ = presets.resolve(preset=env)
    fields = dict(kv.split("=", 1) for kv in argv[3:])
    config = dataclasses.replace(config, **{k: ast.literal_eval(v) for k, v in fields.items()})
    trainer = build_trainer(config)
    state = jax.jit(trainer.init)(jax.random.key(0))

    def chunk(s):
        return jax.lax.scan(lambda c, _: trainer.iteration(c), s, None, length=n)

    text = re.sub(r"0x[0-9a-f]+", "", str(jax.make_jaxpr(chunk)(state)))
    run = jax.jit(chunk)
    state, _ = jax.block_until_ready(run(state))
    seconds = []
    for _ in range(reps):
        t = time.perf_counter()
        state, _ = jax.block_until_ready(run(state))
        seconds.append(time.perf_counter() - t)
    print(json.dumps({
        "env": env, "digest": hashlib.sha256(text.encode()).hexdigest()[:16],
        "per_iteration_ms": round(1e3 * float(np.median(seconds)) / n, 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])

"""Training runs that survive the real world, from a notebook or the command line.

```python
from jaxsample import runs
from jaxsample.algos.configs import PPOConfig

result = runs.train(preset="CartPole-v1", seeds=4, folder="runs/cp",  # jaxsample train
                    json="cp.json", plot="cp.png")                    # --env CartPole-v1
plain = runs.train(PPOConfig(env_name="CartPole-v1"))   # exactly this config: no preset
run = runs.load("runs/cp")               # config, parameters, agent, evaluator
```

A run owns its folder (one writer at a time: `FolderLock`), its settings,
checkpoints and resume (`RunFolder`), its outputs (written beside and renamed
into place: `jaxsample.runs.files`) and its signals (`StopSignals`: ``SIGINT``,
``SIGTERM`` and a notebook's interrupt stop it and keep what it completed).
``jaxsample train`` and ``jaxsample eval`` parse their flags and call `train`
and `load`. Under `train` is the run loop (``runs.loop.run_training``: a
trainer's seeds vmapped, through the Trainer protocol only), its two program
strategies (``runs.programs``: one program, or resumable chunks), its report
(``runs.report``) and the program store (``runs.program_store``). A loaded
run draws its greedy episodes (``runs.video``: GIF, SVG or HTML). The runs
guide (``docs/guides/runs.md``) has the recipes for SLURM and Colab.

Importing this package is cheap (its names load on first use), so the command
line can install its signal handlers before JAX is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "FolderBusy",
    "FolderLock",
    "FolderMismatch",
    "LoadedRun",
    "RunError",
    "RunFolder",
    "RunNotFound",
    "RunResult",
    "StopSignals",
    "WriteFailed",
    "load",
    "train",
]

_WHERE = {
    "FolderBusy": "errors",
    "FolderMismatch": "errors",
    "RunError": "errors",
    "RunNotFound": "errors",
    "WriteFailed": "errors",
    "FolderLock": "lock",
    "RunFolder": "folder",
    "StopSignals": "signals",
    "LoadedRun": "loaded",
    "load": "loaded",
    "RunResult": "run",
    "train": "run",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"jaxsample.runs.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'jaxsample.runs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)

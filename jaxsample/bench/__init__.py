"""Benchmarks of jaxsample, out of the package root.

``jaxsample bench`` (the CLI) runs the grid; ``from jaxsample import bench``
gives its Python interface (the names below). The modules:

* `measure` — the hand-written floor
  ([`bare_rollout`][jaxsample.bench.bare_rollout]), program builders, the one timing helper every
  benchmark uses (`interleave`: repetitions
  interleaved method by method, the order reversed every other one), memory;
* `grid` — [`GridSpec`][jaxsample.bench.GridSpec], [`run_grid`][jaxsample.bench.run_grid] and
  [`overhead`][jaxsample.bench.overhead] (the sampler against the floor);
* `peers` — the gymnasium / envpool host programs;
* `schema` — method names and `RESULT_SCHEMA`;
* `report` — [`format_table`][jaxsample.bench.format_table],
  [`markdown_table`][jaxsample.bench.markdown_table], [`write_json`][jaxsample.bench.write_json],
  [`plot`][jaxsample.bench.plot];
* `system` — [`system_info`][jaxsample.bench.system_info];
* `scaling` — [`sampler_compile`][jaxsample.bench.sampler_compile],
  [`compile_scaling`][jaxsample.bench.compile_scaling],
  [`evaluator_scaling`][jaxsample.bench.evaluator_scaling].

More benchmarks are runners, not imported here (they jit; the driver and
device ones take ``--host-devices N`` to fabricate CPU devices, which restarts
the process with them, and never fabricate any unasked:
`jaxsample.bench.device_requests`):

* ``python -m jaxsample.bench.host`` — the host sampler against a plain loop;
* ``python -m jaxsample.bench.driver`` — the actor/learner driver;
* ``python -m jaxsample.bench.devices`` — a sharded sampler against the
  device count;
* `jaxsample.bench.ppo` — PPO with jaxsample against a hand-written
  rollout (``ppo_overhead``; ``jaxsample bench --ppo-overhead``);
* `jaxsample.bench.training` and `jaxsample.bench.dqn_training` —
  the train command's PPO and DQN programs against ``reference_run``'s (and,
  for PPO, a PureJaxRL-equivalent): ``jaxsample bench --training`` and
  ``--dqn-training``.

Every figure of a PPO or DQN program comes with its compile split into
tracing, lowering and XLA's compile, its run time and its size (jaxpr
equations, HLO fusions: `compile_parts`,
`program_size`), which do not move with the
machine's load.

Results and their discussion: ``docs/benchmarks.md``.

The names load on first use (a module ``__getattr__``), as the package
root's do: `schema` (the method names, ``jaxsample bench --methods``'
choices) imports no JAX, so the command line's parser takes them from it
and ``--help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the public names, for type checkers and readers
    from jaxsample.bench.grid import GridSpec, overhead, run_grid
    from jaxsample.bench.measure import DEFAULT_MIN_REP_SECONDS, bare_rollout
    from jaxsample.bench.peers import PEER_ENVS
    from jaxsample.bench.report import format_table, markdown_table, plot, write_json
    from jaxsample.bench.scaling import (
        SAMPLER_COMPILE_ENVS,
        compile_scaling,
        evaluator_scaling,
        format_sampler_compile,
        sampler_compile,
    )
    from jaxsample.bench.schema import (
        FLOOR,
        JAX_METHODS,
        LABELS,
        METHODS,
        PEER_METHODS,
        RESULT_SCHEMA,
        SCHEMA_VERSION,
    )
    from jaxsample.bench.system import system_info

_NAMES = {
    "jaxsample.bench.grid": "GridSpec overhead run_grid",
    "jaxsample.bench.measure": "DEFAULT_MIN_REP_SECONDS bare_rollout",
    "jaxsample.bench.peers": "PEER_ENVS",
    "jaxsample.bench.report": "format_table markdown_table plot write_json",
    "jaxsample.bench.scaling": "SAMPLER_COMPILE_ENVS compile_scaling evaluator_scaling "
    "format_sampler_compile sampler_compile",
    "jaxsample.bench.schema": "FLOOR JAX_METHODS LABELS METHODS PEER_METHODS RESULT_SCHEMA "
    "SCHEMA_VERSION",
    "jaxsample.bench.system": "system_info",
}
#: Where each public name is defined: it is imported on first use.
_WHERE = {name: module for module, names in _NAMES.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'jaxsample.bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "DEFAULT_MIN_REP_SECONDS",
    "FLOOR",
    "JAX_METHODS",
    "LABELS",
    "METHODS",
    "PEER_ENVS",
    "PEER_METHODS",
    "RESULT_SCHEMA",
    "SAMPLER_COMPILE_ENVS",
    "SCHEMA_VERSION",
    "GridSpec",
    "bare_rollout",
    "compile_scaling",
    "evaluator_scaling",
    "format_sampler_compile",
    "format_table",
    "markdown_table",
    "overhead",
    "plot",
    "run_grid",
    "sampler_compile",
    "system_info",
    "write_json",
]

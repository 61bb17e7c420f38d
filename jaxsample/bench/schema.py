"""The result's vocabulary and layout: the method names and the JSON Schema of
[`run_grid`][jaxsample.bench.run_grid]'s result."""

from __future__ import annotations

from typing import Any

#: Version of the result's layout (`RESULT_SCHEMA`).
SCHEMA_VERSION = 1
#: The JAX methods, compiled on the default device.
JAX_METHODS = ("bare", "random", "pool", "bare_mlp", "mlp")
#: The host peers, imported at run time when installed.
PEER_METHODS = ("gymnasium", "envpool")
#: Every method, in display order.
METHODS = JAX_METHODS + PEER_METHODS
#: The method the ratios are relative to.
FLOOR = "bare"
#: The pool of the ``"pool"`` method: ``reset_pool`` (at most the block).
POOL_SIZE = 8
#: The methods whose ratio to their own floor answers a user's question
#: (`key_ratios`).
KEY_RATIOS = ("random", "pool", "mlp")
#: The floor each method's ``ratio_to_floor`` is relative to: its own
#: hand-written floor (a learning agent's: ``bare_mlp``), else ``bare``.
OWN_FLOOR = {"mlp": "bare_mlp", "bare_mlp": "bare_mlp"}


def floor_of(method: str) -> str:
    """The method ``method``'s ratios are relative to (`OWN_FLOOR`)."""
    return OWN_FLOOR.get(method, FLOOR)


#: Display names.
LABELS = {
    "bare": "bare scan(vmap(env.step))",
    "random": "jaxsample collect, random agent",
    "pool": "jaxsample collect, random agent, pooled resets",
    "bare_mlp": "hand-written scan(vmap(MLP + env.step))",
    "mlp": "jaxsample collect, MLP actor-critic",
    "gymnasium": "gymnasium SyncVectorEnv (numpy)",
    "envpool": "envpool (C++)",
}

_NUM = {"type": "number"}
_NUM_OR_NULL = {"type": ["number", "null"]}
_INT_OR_NULL = {"type": ["integer", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}
#: A cell's place in the grid (also that of a skip).
_WHERE = {
    "env": {"type": "string"},
    "B": {"type": "integer", "minimum": 1},
    "T": {"type": "integer", "minimum": 1},
}
_QUARTILES = {
    "type": "object",
    "required": ["median", "q25", "q75"],
    "properties": {
        "median": _NUM,
        "q25": _NUM,
        "q75": _NUM,
        "min": _NUM,
        "max": _NUM,
        "best": _NUM,
    },
}

#: JSON Schema (draft 2020-12) of [`run_grid`][jaxsample.bench.run_grid]'s result.
RESULT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "jaxsample bench result",
    "type": "object",
    "required": ["schema_version", "system", "settings", "cells", "skipped", "notes", "wall_s"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "system": {
            "type": "object",
            "required": [
                "backend",
                "device_kind",
                "device_count",
                "devices_used",
                "device_memory_bytes",
                "jax",
                "jaxlib",
                "gymnax",
                "jaxsample",
                "cpu_count",
                "host_memory_bytes",
            ],
            "properties": {
                "backend": {"type": "string"},
                "device_kind": {"type": "string"},
                "device_count": {"type": "integer", "minimum": 1},
                "devices_used": {"const": 1},
                "device_memory_bytes": _INT_OR_NULL,
                "jax": {"type": "string"},
                "jaxlib": _STR_OR_NULL,
                "gymnax": _STR_OR_NULL,
                "jaxsample": {"type": "string"},
                "gymnasium": _STR_OR_NULL,
                "envpool": _STR_OR_NULL,
                "cpu_count": _INT_OR_NULL,
                "cpu_affinity": _INT_OR_NULL,
                "cpu_model": _STR_OR_NULL,
                "host_memory_bytes": _INT_OR_NULL,
            },
        },
        "settings": {
            "type": "object",
            "required": ["envs", "Bs", "Ts", "methods", "reps", "warmup", "floor"],
            "properties": {
                "envs": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "Bs": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "Ts": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "methods": {"type": "array", "items": {"enum": list(METHODS)}},
                "reps": {"type": "integer", "minimum": 1},
                "warmup": {"type": "integer", "minimum": 1},
                "peer_max_B": {"type": "integer", "minimum": 1},
                "min_rep_seconds": _NUM,
                "max_call_seconds": _NUM_OR_NULL,
                "memory_budget_bytes": _INT_OR_NULL,
                "seed": {"type": "integer"},
                "floor": {"const": FLOOR},
            },
        },
        "cells": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["env", "B", "T", "steps_per_call", "methods"],
                "properties": {
                    **_WHERE,
                    "steps_per_call": {"type": "integer", "minimum": 1},
                    "methods": {
                        "type": "object",
                        "minProperties": 1,
                        "propertyNames": {"enum": list(METHODS)},
                        "additionalProperties": {
                            "type": "object",
                            "required": [
                                "host",
                                "compile_s",
                                "calls_per_rep",
                                "run_s",
                                "times_s",
                                "steps_per_s",
                                "ratio_to_floor",
                                "ratio_to_floor_spread",
                                "ratio_to_floor_best",
                                "peak_bytes",
                                "output_bytes",
                            ],
                            "properties": {
                                "host": {"type": "boolean"},
                                "compile_s": {"type": "number", "minimum": 0},
                                "calls_per_rep": {"type": "integer", "minimum": 1},
                                "run_s": {
                                    **_QUARTILES,
                                    "required": ["median", "q25", "q75", "min", "max"],
                                },
                                "times_s": {"type": "array", "items": _NUM, "minItems": 1},
                                "steps_per_s": {
                                    **_QUARTILES,
                                    "required": ["median", "q25", "q75", "best"],
                                },
                                "floor": {"enum": [FLOOR, *OWN_FLOOR.values()]},
                                "ratio_to_floor": _NUM_OR_NULL,
                                "ratio_to_floor_spread": {
                                    "oneOf": [
                                        {"type": "null"},
                                        {
                                            "type": "array",
                                            "items": _NUM,
                                            "minItems": 2,
                                            "maxItems": 2,
                                        },
                                    ]
                                },
                                "ratio_to_floor_best": _NUM_OR_NULL,
                                "peak_bytes": _INT_OR_NULL,
                                "output_bytes": _INT_OR_NULL,
                            },
                        },
                    },
                },
            },
        },
        "skipped": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["env", "B", "T", "method", "reason"],
                "properties": {
                    **_WHERE,
                    "method": {"enum": list(METHODS)},
                    "reason": {"type": "string"},
                },
            },
        },
        "notes": {"type": "array", "items": {"type": "string"}},
        "wall_s": {"type": "number", "minimum": 0},
        "compile_scaling": {
            "type": "object",
            "required": ["env", "B", "compile_s"],
            "properties": {
                "env": {"type": "string"},
                "B": {"type": "integer"},
                "compile_s": {"type": "object", "additionalProperties": _NUM},
            },
        },
    },
}

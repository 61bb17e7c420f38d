"""Which of its inputs a function's outputs depend on, read from its jaxpr.

The sampler asks it once per trace whether the agent reads its previous action
and reward (`jaxsample.core.step.EnvStepper.reads_previous`): an agent
that does not (a feed-forward policy, the random agent) gets no
``prev_action``/``prev_reward`` carried through the batch's scan.

The analysis is conservative: an equation with any live output makes all of
its inputs live, except for the calls it can see into (``jit`` and
``closed_call``, whose inner jaxpr it reads the same way), and an equation
with an effect (a callback, a print) is always live. It can say "read" of an
input that is not; never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.extend import core as jex

__all__ = ["reads_inputs"]

_CALLS = ("jit", "pjit", "closed_call")  # "pjit": older JAX's name of jit


def _live_inputs(jaxpr: Any, live_outputs: Sequence[bool]) -> list[bool]:
    """Per input variable of ``jaxpr`` (a ``Jaxpr``): whether an output marked
    in ``live_outputs`` depends on it (conservatively)."""
    outs = zip(jaxpr.outvars, live_outputs, strict=True)
    live = {v for v, on in outs if on and isinstance(v, jex.Var)}  # not a constant output
    for eqn in reversed(jaxpr.eqns):
        outs = [v in live for v in eqn.outvars]
        if not (any(outs) or eqn.effects):
            continue
        inner = eqn.params.get("jaxpr") if eqn.primitive.name in _CALLS else None
        if (
            not eqn.effects
            and isinstance(inner, jex.ClosedJaxpr)
            and len(inner.jaxpr.invars) == len(eqn.invars)
        ):
            reads = _live_inputs(inner.jaxpr, outs)
        else:
            reads = [True] * len(eqn.invars)
        read = zip(eqn.invars, reads, strict=True)
        live.update(v for v, r in read if r and isinstance(v, jex.Var))
    return [v in live for v in jaxpr.invars]


def reads_inputs(fn: Callable[..., Any], args: Sequence[Any], which: Sequence[int]) -> bool:
    """Whether ``fn(*args)``'s outputs may depend on any leaf of the arguments
    at positions ``which``.

    Args:
      fn: a function of JAX values (traced once, abstractly; nothing runs).
      args: its arguments, pytrees of arrays or ``jax.ShapeDtypeStruct``.
      which: positions in ``args`` to ask about.
    """
    closed = jax.make_jaxpr(fn)(*args)
    live = _live_inputs(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
    counts = [len(jax.tree.leaves(a)) for a in args]
    starts = [sum(counts[:i]) for i in range(len(args))]
    return any(any(live[starts[i] : starts[i] + counts[i]]) for i in which)

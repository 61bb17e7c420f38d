"""Experience replayers (ALF's ``exp_replayer``) as pure functions.

Four factories, all built from ``sampler.examples`` (one step of
[`Samples`][jaxsample.types.Samples], leaves ``jax.ShapeDtypeStruct``), each
composed from the per-env rings of `jaxsample.replay.ring`:

* [`uniform`][jaxsample.replay.uniform.uniform] keeps a ring of ``capacity``
  steps per env and samples contiguous sequences uniformly over (env, start
  position) pairs.
* [`cycle_one_time`][jaxsample.replay.cycle_one_time] is that ring with
  ``unroll_length + 1`` steps: ``replay_all`` returns the latest unroll
  preceded by the last step of the previous one, so consecutive windows
  overlap by exactly one step and the last step of every unroll, whose value
  target needs the next step, is trained as the first step of the next window
  (ALF's reason for it).
* [`one_time`][jaxsample.replay.one_time.one_time] is that ring with ``T``
  steps, plus the batch's initial agent state and bootstrap value:
  ``replay_all`` returns the latest unroll, so every step is used once
  (on-policy learners).
* [`prioritized`][jaxsample.replay.prioritized.prioritized] is the uniform
  ring plus a priority per step (rlpyt's prioritized replay): sequences drawn
  by priority, importance weights, ``update_priorities``.

``add`` can write some envs only (ALF's ``env_ids``: ``env_ids=`` or
``env_mask=``); every ring keeps its own position.
[`prefill`][jaxsample.replay.prefill.prefill] collects random-policy steps
into a replayer before learning (ALF's ``initial_collect_steps``).

Each factory validates its arguments eagerly and returns a frozen
[`Replayer`][jaxsample.replay.Replayer] of pure, jittable functions (callers
jit; donate the state to ``add`` so the write happens in place)::

    rep = js.replay.uniform(sampler.examples, B, capacity=10_000)
    add = jax.jit(rep.add, donate_argnums=0)
    sample = jax.jit(rep.sample, static_argnums=(2, 3))
    buf = rep.init()
    buf = add(buf, batch)                       # O(T * B), in place
    seq, info = sample(buf, key, 256, 8)        # Samples [8, 256, ...]

Storage layout: every stored leaf is ``[B, capacity, ...]``, one ring per env,
all advancing together. Outputs are time-major ``Samples`` whose leaves are
``[L, N, ...]`` (sequence length, number of sequences), with ``env.final_store``
the dense true next observation (read it as ``samples.env.final_observation``,
as for a collected batch). What is stored is the batch's ``final_observation``:
with the sampler's default sparse store it is zeros on terminated steps (never
bootstrapped from); build the sampler with ``final_observation="dense"`` to
keep those too.

Modules: `types` (``ReplayState``, ``ReplayInfo``,
``Replayer``), `steps` (the stored spec and the checks of
a batch), `ring` (ring read/write helpers and the ring
replayer), one module per factory (``uniform``, ``cycle``, ``one_time``,
``prioritized``) and `prefill`.
"""

from jaxsample.replay.cycle import cycle_one_time
from jaxsample.replay.one_time import one_time
from jaxsample.replay.prefill import prefill
from jaxsample.replay.prioritized import prioritized
from jaxsample.replay.types import (
    MAX_CAPACITY,
    PrioritizedInfo,
    PrioritizedReplayer,
    Replayer,
    ReplayInfo,
    ReplayState,
)
from jaxsample.replay.uniform import uniform

__all__ = [
    "MAX_CAPACITY",
    "PrioritizedInfo",
    "PrioritizedReplayer",
    "ReplayInfo",
    "ReplayState",
    "Replayer",
    "cycle_one_time",
    "one_time",
    "prefill",
    "prioritized",
    "uniform",
]

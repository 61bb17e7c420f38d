"""The rollout core, shared by the JAX sampler, the host sampler and the evaluator.

Modules (one concept each; see docs/design.md for the module map):

* `keys`: the key schedules (per-env keys, epochs).
* [`options`][jaxsample.core.options]: the samplers' shared options, checked.
* `specs`: env/agent specs, derived and checked at build
  time; ``examples``; the final-observation store's bound.
* `step`: the per-env step (agent, env, resets).
* `modes`: the reset modes, one strategy chosen at build time.
* `assemble`: ``[T, B]`` step outputs -> ``Batch``.
* `rollout`: the JAX sampler (``Sampler``,
  ``SamplerState``), built by [`jaxsample.make_sampler`][jaxsample.sampler.make_sampler].

Nothing here imports [`jaxsample.sampler`][jaxsample.sampler],
[`jaxsample.distributed`][jaxsample.distributed],
[`jaxsample.evaluation`][jaxsample.evaluation] or [`jaxsample.host`][jaxsample.host]: they import
the core.
"""

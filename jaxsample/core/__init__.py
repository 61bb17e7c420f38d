"""The rollout core, shared by the JAX sampler, the host sampler and the evaluator.

Modules (one concept each; see docs/design.md for the module map):

* :mod:`~jaxsample.core.keys`: the key schedules (per-env keys, epochs).
* :mod:`~jaxsample.core.options`: the samplers' shared options, checked.
* :mod:`~jaxsample.core.specs`: env/agent specs, derived and checked at build
  time; ``examples``; the final-observation store's bound.
* :mod:`~jaxsample.core.step`: the per-env step (agent, env, resets).
* :mod:`~jaxsample.core.assemble`: ``[T, B]`` step outputs -> ``Batch``.
* :mod:`~jaxsample.core.rollout`: the JAX sampler (``Sampler``,
  ``SamplerState``), built by :func:`jaxsample.make_sampler`.

Nothing here imports :mod:`jaxsample.sampler`, :mod:`jaxsample.distributed`,
:mod:`jaxsample.evaluation` or :mod:`jaxsample.host`: they import the core.
"""

"""End-to-end jitted training built on the sampler (import explicitly:
``from jaxsample.algos import ppo``).

* :mod:`~jaxsample.algos.ppo`, :mod:`~jaxsample.algos.dqn`: the reference
  trainers (frozen objects of pure functions);
* :mod:`~jaxsample.algos.configs`: their static configurations;
* :mod:`~jaxsample.algos.returns`: value targets that bootstrap through
  truncation (``gae``, ``final_values``, ``td_target``);
* :mod:`~jaxsample.algos.common`: what the two trainers share;
* :mod:`~jaxsample.algos.drivers`: their actor/learner adapters for
  :mod:`jaxsample.driver`;
* :mod:`~jaxsample.algos.runner`: runs a trainer in compiled chunks with
  progress, summary, JSON and PNG (``jaxsample train``).
"""

from jaxsample.algos import common, configs, dqn, drivers, ppo, returns, runner

__all__ = ["common", "configs", "dqn", "drivers", "ppo", "returns", "runner"]

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
* :mod:`~jaxsample.algos.runner`: runs a trainer as one program or in
  compiled chunks, with progress (``jaxsample train``);
  :mod:`~jaxsample.algos.report` its summary table, JSON and PNG;
  :mod:`~jaxsample.algos.program_store` keeps the one program's traced parts
  between processes.
"""

from jaxsample.algos import (
    common,
    configs,
    dqn,
    drivers,
    ppo,
    program_store,
    report,
    returns,
    runner,
)

__all__ = [
    "common",
    "configs",
    "dqn",
    "drivers",
    "ppo",
    "program_store",
    "report",
    "returns",
    "runner",
]

"""End-to-end jitted training loops built on jaxsample's public API."""

from jaxsample.algos import dqn, ppo

__all__ = ["dqn", "ppo"]

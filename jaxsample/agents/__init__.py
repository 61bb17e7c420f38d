"""Agents following the unbatched protocol of :class:`jaxsample.agents.Agent`."""

from jaxsample.agents.base import Agent, RandomAgent, action_spec, null_action

__all__ = ["Agent", "RandomAgent", "action_spec", "null_action"]

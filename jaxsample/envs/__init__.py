"""Environment wrappers for gymnax environments (e.g. POMDPs by observation masking)."""

from jaxsample.envs.wrappers import VELOCITY_INDICES, MaskObservation, mask_velocity

__all__ = ["VELOCITY_INDICES", "MaskObservation", "mask_velocity"]

"""Host (non-JAX) environments through jaxsample's sampler API.

* [`make_host_sampler`][jaxsample.host.make_host_sampler]: the ``init`` / ``collect`` / ``examples``
  contract
  and the [`Batch`][jaxsample.types.Batch] layout of
  [`jaxsample.make_sampler`][jaxsample.sampler.make_sampler],
  for a ``gymnasium.vector.VectorEnv`` (any autoreset mode) or an envpool pool.
  The agent step is compiled and runs on the device; the env steps on the host.
* [`make_bridge`][jaxsample.host.make_bridge]: a host vector env callable from inside ``jax.jit``
  (an
  ordered ``io_callback`` per step), for a ``lax.scan`` rollout that must drive
  it.

gymnasium (>= 1.1) and envpool are optional (``pip install 'jaxsample[host]'``,
``pip install 'jaxsample[envpool]'``); this package imports without them and its
functions raise an ``ImportError`` naming the extra when they are missing.
"""

from jaxsample.host.bridge import BridgeStep, HostEnvBridge, make_bridge
from jaxsample.host.envs import (
    env_seeds,
    envpool_factory,
    gymnasium_factory,
    gymnax_space,
    require_envpool,
    require_gymnasium,
)
from jaxsample.host.sampler import HostSampler, HostSamplerState, make_host_sampler

__all__ = [
    "BridgeStep",
    "HostEnvBridge",
    "HostSampler",
    "HostSamplerState",
    "env_seeds",
    "envpool_factory",
    "gymnasium_factory",
    "gymnax_space",
    "make_bridge",
    "make_host_sampler",
    "require_envpool",
    "require_gymnasium",
]

"""Parameter initializers that are safe to ``vmap`` on every supported jaxlib.

`orthogonal` is flax's orthogonal initializer drawn one key at a time
under ``vmap`` (``jax.custom_batching.sequential_vmap``). Its values are
bit-identical to flax's; what changes is that a batch of seeds (``jax.vmap(
agent.init)``, as the trainers do for ``--seeds``) runs as a loop of unbatched
QR factorizations instead of one batched LAPACK call. jaxlib 0.10.0-0.11.0
split batched LAPACK calls across XLA's CPU thread pool and could deadlock
when several ran at once (docs/design.md, "Supported JAX"); the loop never
takes that path, and on other jaxlibs costs nothing measurable (an init runs
once per training run).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.custom_batching import sequential_vmap


def orthogonal(scale: float = 1.0) -> Any:
    """Flax's ``nn.initializers.orthogonal(scale)``, batched as a loop.

    Args:
      scale: the matrix's scale (CleanRL's PPO: ``sqrt(2)`` hidden layers,
        ``0.01`` policy head, ``1.0`` value head).

    Returns:
      An initializer ``(key, shape, dtype) -> array`` of ``shape``.
    """
    base = nn.initializers.orthogonal(scale)

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        @sequential_vmap
        def draw(k: jax.Array) -> jax.Array:
            return base(k, shape, dtype)

        return draw(key)

    return init

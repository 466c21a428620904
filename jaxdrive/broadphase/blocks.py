"""Block sizes of the loops that visit only the used part of a capacity-sized array (tiles, contact triples, LK's
near segments): a loop step per block, stopping after the last used entry.

On CPU small blocks keep the waste after the last used entry small (a step costs microseconds); an accelerator pays a
few kernel launches per step, so there a block is larger and a batch takes a handful of steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int

ACCELERATOR_FACTOR = 32  # an accelerator's block is this many CPU blocks


def block_size(cpu: int, capacity: int) -> int:
    """Entries per loop step: ``cpu`` on the CPU backend, ``ACCELERATOR_FACTOR`` x ``cpu`` elsewhere; never more than
    ``capacity`` (read when the program is traced, from the default backend)."""
    size = cpu if jax.default_backend() == "cpu" else cpu * ACCELERATOR_FACTOR
    return max(1, min(size, capacity))


def covering(used: Bool[Array, "*b n"], block: int) -> Int[Array, ""]:
    """Blocks of ``block`` entries, from the first, that hold every used entry of every row of ``used`` (the
    largest over its leading axes): the trip count of a loop over the used part."""
    n = used.shape[-1]
    last = jnp.max(jnp.where(used, jnp.arange(1, n + 1, dtype=jnp.int32), 0))  # one past the last used entry
    return -(-last // block)

"""Block sizes of the loops that visit only the used part of a capacity-sized array (tiles, contact triples, LK's
near segments): a loop step per block, stopping after the last used entry.

On CPU small blocks keep the waste after the last used entry small (a step costs microseconds). On an accelerator a
step costs several kernel launches and, on a GPU, a host round trip for the loop's condition: a profile of the H200
step (K = 4,096 x 64 scenes, docs/scoring-at-scale.md) counted ~630 steps (276 over the lane tiles alone, blocks of
16,384) and ~12 ms of its 59 ms between kernels. There a block is large enough that a loop over the whole capacity
takes at most ``ACCELERATOR_TRIPS`` steps (the same results: a loop's sums and minima do not depend on its blocks).
Measured on the H200 at 262,144 proposals: 8 steps 5.15 M proposals/s (from 4.22 M), 2 steps 4.18 M (a last step
scores up to half a capacity of unused entries), 1 step 4.67 M.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int

ACCELERATOR_FACTOR = 32  # an accelerator's block is at least this many CPU blocks
ACCELERATOR_TRIPS = 8  # and at least 1 / this of the capacity: a loop takes at most this many steps


def on_cpu() -> bool:
    """Whether the programs being traced are for the CPU backend (read when a program is traced)."""
    return jax.default_backend() == "cpu"


def block_size(cpu: int, capacity: int) -> int:
    """Entries per loop step: ``cpu`` on the CPU backend; elsewhere ``ACCELERATOR_FACTOR`` x ``cpu`` or
    ``capacity / ACCELERATOR_TRIPS``, whichever is larger; never more than ``capacity``."""
    size = cpu if on_cpu() else max(cpu * ACCELERATOR_FACTOR, -(-capacity // ACCELERATOR_TRIPS))
    return max(1, min(size, capacity))


def search_method() -> str:
    """``jnp.searchsorted``'s method for the broad phase's long sorted arrays: a loop of gathers on CPU ("scan"), the
    same steps unrolled elsewhere ("scan_unrolled": no per-step loop condition; identical indices)."""
    return "scan" if on_cpu() else "scan_unrolled"


def covering(used: Bool[Array, "*b n"], block: int) -> Int[Array, ""]:
    """Blocks of ``block`` entries, from the first, that hold every used entry of every row of ``used`` (the
    largest over its leading axes): the trip count of a loop over the used part."""
    n = used.shape[-1]
    last = jnp.max(jnp.where(used, jnp.arange(1, n + 1, dtype=jnp.int32), 0))  # one past the last used entry
    return -(-last // block)

"""Reductions over sorted segments: the broad phase's per-pair sums over tiles, per-slot sums over pairs, and the
contact rules' minima over each (proposal, agent) run and each proposal's triples.

``jax.ops.segment_sum`` / ``segment_min`` are scatters. On CPU that is a cheap serial loop. On a GPU XLA emits one
atomic operation per element, and here the ids are sorted, so neighbouring threads update the same few addresses:
the H200 profile of a 262,144-proposal step (``docs/scoring-at-scale.md``) spent 15.4 of its 49 ms in the two tile
loops' fused crossing-test + scatter-add kernels (179 M adds into [pairs, 84] for the drivable areas alone) and
~6 ms more in single capacity-sized scatters.

``JAXDRIVE_SEGMENTS`` (read when a program is traced) picks the implementation:

* ``scatter`` (the default everywhere): ``jax.ops.segment_sum`` / ``segment_min``.
* ``scan``: no scatter. Sums: an inclusive prefix sum along the sorted axis (``jnp.cumsum``), read at each
  segment's bounds (``jnp.searchsorted`` of the ids) and differenced. Integer sums in int32: a prefix may wrap
  around, but the difference of two wrapped prefixes is still the segment's sum whenever that fits in int32
  (two's-complement arithmetic is modulo 2**32), so the result is the scatter's exactly. Minima: a segmented
  running minimum (``jax.lax.associative_scan``, restarting where the id changes) read at each segment's last
  entry; exact for any dtype.
  Not yet measured on a GPU (none was lent since it was written), hence not the default there;
  ``benchmarks/device_check.sh`` times both.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int

from jaxdrive.broadphase.blocks import search_method
from jaxdrive.errors import UserInputError

IMPLEMENTATIONS = ("scatter", "scan")


def implementation() -> str:
    """The sorted segment reductions ``JAXDRIVE_SEGMENTS`` names (module docstring), "scatter" when unset."""
    impl = os.environ.get("JAXDRIVE_SEGMENTS", "scatter")
    if impl not in IMPLEMENTATIONS:
        raise UserInputError(f"JAXDRIVE_SEGMENTS: expected one of {IMPLEMENTATIONS}, got {impl!r}")
    return impl


def _bounds(ids: Int[Array, "P"], num_segments: int) -> Int[Array, "S1"]:
    """Segment s is entries [bounds[s], bounds[s + 1]) of the sorted ``ids`` (S + 1 bounds)."""
    return jnp.searchsorted(ids, jnp.arange(num_segments + 1, dtype=ids.dtype), side="left", method=search_method())


def sorted_segment_sum(x: Int[Array, "P *n"], ids: Int[Array, "P"], num_segments: int) -> Int[Array, "S *n"]:
    """``jax.ops.segment_sum(x, ids, num_segments)`` for integer ``x`` and ``ids`` sorted ascending (entries whose
    id is outside [0, num_segments) count nowhere), by ``implementation()``."""
    if implementation() == "scatter":
        return jax.ops.segment_sum(x, ids, num_segments=num_segments, indices_are_sorted=True)
    bounds = _bounds(ids, num_segments)
    before = jnp.concatenate([jnp.zeros((1,) + x.shape[1:], x.dtype), jnp.cumsum(x, axis=0, dtype=x.dtype)])
    return before[bounds[1:]] - before[bounds[:-1]]


def sorted_segment_min(x: Array, ids: Int[Array, "P"], num_segments: int) -> Array:
    """``jax.ops.segment_min(x, ids, num_segments)`` (an empty segment's minimum is the dtype's largest value) for
    [P] ``x`` and ``ids`` sorted ascending, by ``implementation()``."""
    if implementation() == "scatter":
        return jax.ops.segment_min(x, ids, num_segments=num_segments, indices_are_sorted=True)

    def combine(a, b):  # (starts a segment, running minimum); b's entries come after a's
        return a[0] | b[0], jnp.where(b[0], b[1], jnp.minimum(a[1], b[1]))

    starts = jnp.concatenate([jnp.ones((1,), bool), ids[1:] != ids[:-1]])
    _, running = jax.lax.associative_scan(combine, (starts, x))
    bounds = _bounds(ids, num_segments)
    largest = jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).max
    return jnp.where(bounds[1:] > bounds[:-1], running[jnp.maximum(bounds[1:] - 1, 0)], jnp.asarray(largest, x.dtype))

"""Point-in-polygon and box-polygon contact on packed edge lists (``jaxdrive.broadphase.PackedPolygons``).

The same per-edge predicates as ``jaxdrive.geometry.point_in_polygon`` and ``box_intersects_polygon`` (identical
float expressions, so identical decisions), evaluated on one flat list of the edges of M polygons instead of M
padded rings; per-polygon counts come from a prefix sum over the edge axis cut at the slot offsets. One proposal per
call; batch with ``jax.vmap``. Padded edges (zero length at ``FAR``) and empty slots never count.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.geometry import _cross, point_in_box, segments_intersect

ON_WEIGHT = 4096.0  # > any edge count per proposal; ON_WEIGHT * E stays far below 2**24


def slot_sums(x: Float[Array, "*n E"], offsets: Int[Array, "M+1"]) -> Float[Array, "*n M"]:
    """Sum of ``x`` over each slot's edge range offsets[m]:offsets[m+1].

    A matmul with the edge-to-slot one-hot matrix; exact while the sums stay below 2**24 (small integers here).
    """
    e = jnp.arange(x.shape[-1])[:, None]
    onehot = ((e >= offsets[None, :-1]) & (e < offsets[None, 1:])).astype(jnp.float32)  # [E, M]
    return jnp.matmul(x.astype(jnp.float32), onehot, precision=jax.lax.Precision.HIGHEST)


def points_in_packed(points: Float[Array, "N 2"], start: Float[Array, "E 2"], end: Float[Array, "E 2"],
                     offsets: Int[Array, "M+1"], valid: Bool[Array, "M"]) -> Bool[Array, "M N"]:
    """Strict point-in-polygon (even-odd crossings, boundary outside) of every point in every packed polygon."""
    if start.shape[0] >= ON_WEIGHT:
        raise ValueError(f"points_in_packed: expected fewer than {int(ON_WEIGHT)} edges, got {start.shape[0]}")
    a, b = start[None], end[None]  # [1, E, 2]
    p = points[:, None, :]  # [N, 1, 2]
    c = _cross(b - a, p - a)  # [N, E]
    straddles = (a[..., 1] > p[..., 1]) != (b[..., 1] > p[..., 1])
    crossing = straddles & (c * jnp.sign(b[..., 1] - a[..., 1]) > 0)
    within = jnp.all((jnp.minimum(a, b) <= p) & (p <= jnp.maximum(a, b)), axis=-1)
    on = (c == 0) & within
    # One matmul for both counts: crossings stay below ON_WEIGHT (E < ON_WEIGHT edges), boundary hits above it.
    counts = slot_sums(crossing.astype(jnp.float32) + ON_WEIGHT * on.astype(jnp.float32), offsets)  # [N, M]
    inside = (jnp.mod(counts, 2.0) == 1.0) & (counts < ON_WEIGHT)
    return (inside & valid).T


def boxes_touch_packed(boxes: Float[Array, "T 4 2"], start: Float[Array, "E 2"], end: Float[Array, "E 2"],
                       offsets: Int[Array, "M+1"], first: Float[Array, "M 2"],
                       valid: Bool[Array, "M"]) -> Bool[Array, "T M"]:
    """Closed box-polygon intersection of every box with every packed polygon (``box_intersects_polygon``)."""
    ba, bb = boxes, jnp.roll(boxes, -1, axis=-2)  # box edges [T, 4, 2]
    pair = jax.vmap(jax.vmap(jax.vmap(segments_intersect, in_axes=(None, None, 0, 0)), in_axes=(0, 0, None, None)),
                    in_axes=(0, 0, None, None))
    edge_hit = jnp.any(pair(ba, bb, start, end), axis=1)  # [T, E]
    hit = slot_sums(edge_hit, offsets) > 0  # [T, M]
    corner_in = points_in_packed(boxes[:, 0], start, end, offsets, valid).T  # [T, M]
    vertex_in = jax.vmap(jax.vmap(point_in_box, in_axes=(0, None)), in_axes=(None, 0))(first, boxes)  # [T, M]
    return (hit | corner_in | vertex_in) & valid

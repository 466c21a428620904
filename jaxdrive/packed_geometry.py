"""Point-in-polygon and box-polygon contact on the broad phase's edge lists (``jaxdrive.broadphase``).

The same per-edge predicates as ``jaxdrive.geometry.point_in_polygon`` and ``box_intersects_polygon`` (identical
float expressions, so identical decisions), evaluated on one flat list of the edges of M polygons instead of M
padded rings; per-polygon counts come from a prefix sum over the edge axis cut at the slot offsets. One proposal per
call; batch with ``jax.vmap``. Padded edges (zero length at ``FAR``) and empty slots never count.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.broadphase import EdgeTiles
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


def points_in_tiles(points: Float[Array, "K N 2"], tiles: EdgeTiles) -> Bool[Array, "K M N"]:
    """Strict point-in-polygon of each proposal's points in each of its kept polygons, from one scene's ``EdgeTiles``.

    Every tile tests its owner's N points against its 8 edges (the ``points_in_packed`` predicates, coordinates
    split by axis so the test vectorises over points); the per-tile crossing / boundary counts are summed per
    (proposal, slot) with a sorted segment sum.
    """
    k, n = points.shape[:2]
    m = tiles.valid.shape[-1]
    px = points[..., 0][tiles.owner][:, :, None]  # [NT, N, 1]
    py = points[..., 1][tiles.owner][:, :, None]
    ax, ay = tiles.start[:, None, :, 0], tiles.start[:, None, :, 1]  # [NT, 1, TILE]
    bx, by = tiles.end[:, None, :, 0], tiles.end[:, None, :, 1]
    c = (bx - ax) * (py - ay) - (by - ay) * (px - ax)  # _cross(b - a, p - a)
    straddles = (ay > py) != (by > py)
    crossing = straddles & (c * jnp.sign(by - ay) > 0)
    within = ((jnp.minimum(ax, bx) <= px) & (px <= jnp.maximum(ax, bx)) & (jnp.minimum(ay, by) <= py)
              & (py <= jnp.maximum(ay, by)))
    on = (c == 0) & within
    per_tile = jnp.sum(crossing.astype(jnp.int32) + int(ON_WEIGHT) * on.astype(jnp.int32), axis=-1)  # [NT, N]
    counts = jax.ops.segment_sum(per_tile, tiles.owner * (m + 1) + tiles.slot, num_segments=k * (m + 1),
                                 indices_are_sorted=True).reshape(k, m + 1, n)[:, :m]
    return (counts % 2 == 1) & (counts < int(ON_WEIGHT)) & tiles.valid[..., None]


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

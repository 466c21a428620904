"""Point-in-polygon and box-polygon contact on the broad phase's edge tiles (``jaxdrive.broadphase.EdgeTiles``).

The same per-edge predicates as ``jaxdrive.geometry.point_in_polygon`` and ``box_intersects_polygon`` (the same float
expressions), evaluated tile by tile on the edges of the polygons each proposal kept instead of on every padded ring;
per-polygon counts come from a sorted segment sum over the tiles. All proposals of a batch at once (flat tiles,
owner = proposal index). Padded edges (zero length at ``FAR``) and empty slots never count."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.broadphase import EdgeTiles
from jaxdrive.geometry import point_in_box, segments_intersect

ON_WEIGHT = 4096  # > any polygon's edge count: boundary hits and crossings share one integer sum


def _tile_sums(per_tile: Int[Array, "NT *n"], tiles: EdgeTiles, num_proposals: int) -> Int[Array, "K M *n"]:
    """Per-tile counts summed per (proposal, slot) (tiles are sorted by owner * (M + 1) + slot)."""
    m = tiles.valid.shape[-1]
    sums = jax.ops.segment_sum(per_tile, tiles.owner * (m + 1) + tiles.slot, num_segments=num_proposals * (m + 1),
                               indices_are_sorted=True)
    return sums.reshape((num_proposals, m + 1) + per_tile.shape[1:])[:, :m]


def points_in_tiles(points: Float[Array, "K N 2"], tiles: EdgeTiles) -> Bool[Array, "K M N"]:
    """Strict point-in-polygon (even-odd crossings, boundary outside) of each proposal's points in each of its kept
    polygons, from flat ``EdgeTiles`` (owner = proposal index < K).

    Every tile tests its owner's N points against its 8 edges with ``jaxdrive.geometry.point_in_polygon``'s per-edge
    predicates (coordinates split by axis so the test vectorises over points); the per-tile crossing / boundary
    counts are summed per (proposal, slot).
    """
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
    per_tile = jnp.sum(crossing.astype(jnp.int32) + ON_WEIGHT * on.astype(jnp.int32), axis=-1)  # [NT, N]
    counts = _tile_sums(per_tile, tiles, points.shape[0])
    return (counts % 2 == 1) & (counts < ON_WEIGHT) & tiles.valid[..., None]


def boxes_touch_tiles(boxes: Float[Array, "K T 4 2"], tiles: EdgeTiles,
                      first: Float[Array, "K M 2"]) -> Bool[Array, "K M T"]:
    """Closed box-polygon intersection (``jaxdrive.geometry.box_intersects_polygon``) of each proposal's boxes with
    each of its kept polygons, from flat ``EdgeTiles``: a box edge meets a polygon edge, the box's first corner is
    inside the polygon, or the polygon's first vertex ``first`` is in the box.
    """
    box = boxes[tiles.owner]  # [NT, T, 4, 2]
    ba, bb = box, jnp.roll(box, -1, axis=-2)  # box edges
    pair = jax.vmap(jax.vmap(segments_intersect, in_axes=(None, None, 0, 0)), in_axes=(0, 0, None, None))  # [4, E]
    per_step = jax.vmap(pair, in_axes=(0, 0, None, None))  # [T, 4, E]
    edge_hit = jax.vmap(per_step)(ba, bb, tiles.start, tiles.end)  # [NT, T, 4, TILE]
    hit = _tile_sums(jnp.any(edge_hit, axis=(2, 3)).astype(jnp.int32), tiles, boxes.shape[0]) > 0  # [K, M, T]
    corner_in = points_in_tiles(boxes[:, :, 0], tiles)  # [K, M, T]
    vertex_in = jax.vmap(jax.vmap(jax.vmap(point_in_box, in_axes=(None, 0)), in_axes=(0, None)))(first, boxes)
    return (hit | corner_in | vertex_in) & tiles.valid[..., None]

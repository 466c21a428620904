"""Point-in-polygon and box-polygon contact on the broad phase's edge tiles (``jaxdrive.broadphase.EdgeTiles``).

The same per-edge predicates as ``jaxdrive.geometry.point_in_polygon`` and ``box_intersects_polygon`` (the same float
expressions), evaluated tile by tile on the edges each (proposal, chunk of steps, polygon) kept instead of on every
padded ring; per-pair counts come from a sorted segment sum over the tiles. All proposals of a tile group (one
device's scenes) at once. Padded edges (zero length at ``FAR``) and padding pairs never count."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.broadphase.host import EdgeTiles
from jaxdrive.geometry import point_in_box, segments_intersect
from jaxdrive.kernels.tile_crossings import ON_WEIGHT, tile_counts



def slot_sums(x: Int[Array, "P *n"], tiles: EdgeTiles, num_slots: int) -> Int[Array, "S *n"]:
    """Per-pair values summed per (proposal, chunk) slot (pairs are sorted by slot)."""
    return jax.ops.segment_sum(x, tiles.pair_slot, num_segments=num_slots, indices_are_sorted=True)


def _tile_sums(per_tile: Int[Array, "NT *n"], tiles: EdgeTiles) -> Int[Array, "P *n"]:
    """Per-tile counts summed per pair (tiles are sorted by pair)."""
    return jax.ops.segment_sum(per_tile, tiles.tile_pair, num_segments=tiles.pair_slot.shape[0],
                               indices_are_sorted=True)


def points_in_tiles(points: Float[Array, "S N 2"], tiles: EdgeTiles) -> Bool[Array, "P N"]:
    """Strict point-in-polygon (even-odd crossings, boundary outside) of each pair's slot's N points in the pair's
    polygon, from one group's flat ``EdgeTiles`` (pair_slot = (proposal, chunk) slot < S).

    Every tile tests its slot's points against its 8 edges with ``jaxdrive.geometry.point_in_polygon``'s per-edge
    predicates (``kernels.tile_crossings``: coordinates split by axis so the test vectorises over points); the
    per-tile crossing / boundary counts are summed per pair. The edges a pair dropped (``broadphase.host._edge_units``)
    count nothing at its points, so the counts are the whole ring's.
    """
    slot = tiles.pair_slot[tiles.tile_pair]  # [NT]
    a, b = tiles.start, tiles.end  # [NT, TILE, 2]
    per_tile = tile_counts(points[..., 0][slot], points[..., 1][slot], a[..., 0], a[..., 1], b[..., 0],
                           b[..., 1])  # [NT, N]
    counts = _tile_sums(per_tile, tiles)
    return (counts % 2 == 1) & (counts < ON_WEIGHT) & (tiles.pair_poly >= 0)[:, None]


def boxes_touch_tiles(boxes: Float[Array, "S L 4 2"], tiles: EdgeTiles,
                      first: Float[Array, "P 2"]) -> Bool[Array, "P L"]:
    """Closed box-polygon intersection (``jaxdrive.geometry.box_intersects_polygon``) of each pair's slot's boxes
    with the pair's polygon, from one group's flat ``EdgeTiles``: a box edge meets a (kept) polygon edge, the box's
    first corner is inside the polygon, or the polygon's first vertex ``first`` is in the box.
    """
    box = boxes[tiles.pair_slot[tiles.tile_pair]]  # [NT, L, 4, 2]
    ba, bb = box, jnp.roll(box, -1, axis=-2)  # box edges
    pair = jax.vmap(jax.vmap(segments_intersect, in_axes=(None, None, 0, 0)), in_axes=(0, 0, None, None))  # [4, E]
    per_step = jax.vmap(pair, in_axes=(0, 0, None, None))  # [L, 4, E]
    edge_hit = jax.vmap(per_step)(ba, bb, tiles.start, tiles.end)  # [NT, L, 4, TILE]
    hit = _tile_sums(jnp.any(edge_hit, axis=(2, 3)).astype(jnp.int32), tiles) > 0  # [P, L]
    corner_in = points_in_tiles(boxes[:, :, 0], tiles)  # [P, L]
    own = boxes[tiles.pair_slot]  # [P, L, 4, 2]
    vertex_in = jax.vmap(jax.vmap(point_in_box, in_axes=(None, 0)))(first, own)  # [P, L]
    return (hit | corner_in | vertex_in) & (tiles.pair_poly >= 0)[:, None]

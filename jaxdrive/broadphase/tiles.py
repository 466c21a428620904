"""Point-in-polygon and box-polygon contact on the broad phase's edge tiles (``jaxdrive.broadphase.EdgeTiles``).

The same per-edge predicates as ``jaxdrive.geometry.point_in_polygon`` and ``box_intersects_polygon`` (the same float
expressions), evaluated tile by tile on the edges each (proposal, chunk of steps, polygon) kept instead of on every
padded ring; per-pair counts are integer sums over the tiles. All proposals of a tile group (one device's scenes) at
once. Padded edges (zero length at ``FAR``) and padding pairs never count.

The tiles are visited in blocks (``TILE_BLOCK`` on CPU, ``broadphase.blocks``) by a loop that stops after the last
used tile (``used_blocks``), so the sums cost what the scenes use, not what the capacities allow. The packing that
builds the tiles (``broadphase.device``) works on whole capacity-sized arrays, so generous capacities still cost
time there (``docs/scoring-at-scale.md``: ``jaxdrive.score``'s defaults 1.4-1.7x the step time of capacities fixed
from the batch's needs).
Integer sums: the order changes nothing.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.broadphase.blocks import block_size, covering
from jaxdrive.broadphase.host import EdgeTiles
from jaxdrive.broadphase.segments import implementation, sorted_segment_sum
from jaxdrive.geometry import point_in_box, segments_intersect
from jaxdrive.kernels.tile_crossings import ON_WEIGHT, tile_counts
from jaxdrive.scene import FAR

TILE_BLOCK = 512  # tiles per loop step over a group's used tiles (CPU; see ``broadphase.blocks``)


def slot_sums(x: Int[Array, "P *n"], tiles: EdgeTiles, num_slots: int) -> Int[Array, "S *n"]:
    """Per-pair values summed per (proposal, chunk) slot (pairs are sorted by slot)."""
    return sorted_segment_sum(x, tiles.pair_slot, num_slots)


def _block(tiles: EdgeTiles) -> int:
    return block_size(TILE_BLOCK, tiles.tile_pair.shape[-1])


def used_blocks(tiles: EdgeTiles) -> Int[Array, ""]:
    """Blocks of ``TILE_BLOCK`` tiles (from the first) that hold every used tile of ``tiles``, the largest over
    its leading axes (one group's flat tiles [NT], or groups [G, NT]).

    A used tile's first edge starts at a real vertex; an unused tile's edges all sit at ``FAR`` (a real vertex
    at exactly (``FAR``, ``FAR``) metres from the ego would be taken for padding)."""
    return covering(jnp.any(tiles.start != FAR, axis=(-2, -1)), _block(tiles))


def _sum_used_tiles(per_tile: Callable, tiles: EdgeTiles, blocks: Int[Array, ""] | None,
                    shape: tuple[int, ...]) -> Int[Array, "P *n"]:
    """sum over the tiles of each pair of ``per_tile(tile indices [TB]) -> [TB, *shape]``, [P, *shape], visiting
    only the first ``blocks`` blocks of tiles (``used_blocks`` when None).

    With ``broadphase.segments``' scatter sums each block is added into the pairs' sums as it is computed; with its
    scans (prefix sums) the blocks fill a per-tile table ([NT, *shape], zeros past the last block) that is summed
    per pair once, after the loop (tiles are sorted by pair)."""
    block = _block(tiles)
    nt, npair = tiles.tile_pair.shape[0], tiles.pair_slot.shape[0]
    blocks = used_blocks(tiles) if blocks is None else blocks
    pair = jnp.pad(tiles.tile_pair, (0, -nt % block), constant_values=npair - 1)
    scatter = implementation() == "scatter"

    def body(i, acc):
        j = i * block + jnp.arange(block, dtype=jnp.int32)
        values = per_tile(jnp.minimum(j, nt - 1))  # a block's tail past NT repeats the last (unused) tile
        values = jnp.where((j < nt).reshape((block,) + (1,) * len(shape)), values, 0)
        if not scatter:
            return jax.lax.dynamic_update_slice_in_dim(acc, values, i * block, 0)
        return acc.at[jax.lax.dynamic_slice_in_dim(pair, i * block, block)].add(values, indices_are_sorted=True)

    if scatter:
        return jax.lax.fori_loop(0, blocks, body, jnp.zeros((npair,) + shape, jnp.int32))
    table = jax.lax.fori_loop(0, blocks, body, jnp.zeros(pair.shape + shape, jnp.int32))
    return sorted_segment_sum(table, pair, npair)


def points_in_tiles(points: Float[Array, "S N 2"], tiles: EdgeTiles,
                    blocks: Int[Array, ""] | None = None) -> Bool[Array, "P N"]:
    """Strict point-in-polygon (even-odd crossings, boundary outside) of each pair's slot's N points in the pair's
    polygon, from one group's flat ``EdgeTiles`` (pair_slot = (proposal, chunk) slot < S).

    Every tile tests its slot's points against its 8 edges with ``jaxdrive.geometry.point_in_polygon``'s per-edge
    predicates (``kernels.tile_crossings``: coordinates split by axis so the test vectorises over points); the
    per-tile crossing / boundary counts are summed per pair. The edges a pair dropped (``broadphase.host._edge_units``)
    count nothing at its points, so the counts are the whole ring's. ``blocks``: ``used_blocks(tiles)`` (or more),
    computed here when None (pass it from outside a ``vmap`` over groups, so the loop's bound is not batched).
    """
    def per_tile(j):
        slot = tiles.pair_slot[tiles.tile_pair[j]]
        a, b = tiles.start[j], tiles.end[j]  # [TB, TILE, 2]
        return tile_counts(points[..., 0][slot], points[..., 1][slot], a[..., 0], a[..., 1], b[..., 0], b[..., 1])

    counts = _sum_used_tiles(per_tile, tiles, blocks, points.shape[1:2])
    return (counts % 2 == 1) & (counts < ON_WEIGHT) & (tiles.pair_poly >= 0)[:, None]


def boxes_touch_tiles(boxes: Float[Array, "S L 4 2"], tiles: EdgeTiles, first: Float[Array, "P 2"],
                      blocks: Int[Array, ""] | None = None) -> Bool[Array, "P L"]:
    """Closed box-polygon intersection (``jaxdrive.geometry.box_intersects_polygon``) of each pair's slot's boxes
    with the pair's polygon, from one group's flat ``EdgeTiles``: a box edge meets a (kept) polygon edge, the box's
    first corner is inside the polygon, or the polygon's first vertex ``first`` is in the box. ``blocks`` as in
    ``points_in_tiles``.
    """
    pair = jax.vmap(jax.vmap(segments_intersect, in_axes=(None, None, 0, 0)), in_axes=(0, 0, None, None))  # [4, E]
    per_step = jax.vmap(pair, in_axes=(0, 0, None, None))  # [L, 4, E]

    def per_tile(j):
        box = boxes[tiles.pair_slot[tiles.tile_pair[j]]]  # [TB, L, 4, 2]
        edge_hit = jax.vmap(per_step)(box, jnp.roll(box, -1, axis=-2), tiles.start[j], tiles.end[j])  # [TB, L, 4, 8]
        return jnp.any(edge_hit, axis=(2, 3)).astype(jnp.int32)

    hit = _sum_used_tiles(per_tile, tiles, blocks, boxes.shape[1:2]) > 0  # [P, L]
    corner_in = points_in_tiles(boxes[:, :, 0], tiles, blocks)  # [P, L]
    own = boxes[tiles.pair_slot]  # [P, L, 4, 2]
    vertex_in = jax.vmap(jax.vmap(point_in_box, in_axes=(None, 0)))(first, own)  # [P, L]
    return (hit | corner_in | vertex_in) & (tiles.pair_poly >= 0)[:, None]

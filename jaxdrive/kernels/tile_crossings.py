"""The broad phase's hottest loop as a Pallas kernel, with its jnp twin (the CPU path).

``tile_counts(px, py, ax, ay, bx, by)``: for every edge tile (8 edges a -> b of one polygon) and each of its owner's
N points p, the even-odd crossing count of a ray from p towards +x plus ``ON_WEIGHT`` x the number of edges p lies on
(``jaxdrive.geometry.point_in_polygon``'s per-edge predicates, the same float expressions), summed over the tile's
edges: int32 [NT, N]. ``jaxdrive.broadphase.tiles.points_in_tiles`` sums these per (proposal, polygon) pair.

* ``tile_counts_jnp``: the jnp twin; what runs by default (XLA fuses it with the point gather).
* ``tile_counts_pallas``: a grid over blocks of ``BLOCK_TILES`` tiles, the 8 edges unrolled, points padded to a
  multiple of 128 lanes. Opt in with ``JAXDRIVE_KERNELS=pallas`` (read when a scorer is traced) on a GPU; on CPU it
  only runs with ``interpret=True`` (tests compare it to the twin bit for bit). Not measured on an accelerator yet:
  no GPU was available while it was written, so it is not the default anywhere.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxdrive.errors import UserInputError

ON_WEIGHT = 4096  # > any polygon's edge count: boundary hits and crossings share one integer sum
BLOCK_TILES = 16
LANES = 128


def _edge_terms(px, py, ax, ay, bx, by):
    """crossing + ON_WEIGHT * on for points (px, py) against one edge per broadcast element (int32)."""
    c = (bx - ax) * (py - ay) - (by - ay) * (px - ax)  # _cross(b - a, p - a)
    straddles = (ay > py) != (by > py)
    crossing = straddles & (c * jnp.sign(by - ay) > 0)
    within = ((jnp.minimum(ax, bx) <= px) & (px <= jnp.maximum(ax, bx)) & (jnp.minimum(ay, by) <= py)
              & (py <= jnp.maximum(ay, by)))
    on = (c == 0) & within
    return crossing.astype(jnp.int32) + ON_WEIGHT * on.astype(jnp.int32)


def tile_counts_jnp(px: Float[Array, "NT N"], py: Float[Array, "NT N"], ax: Float[Array, "NT E"],
                    ay: Float[Array, "NT E"], bx: Float[Array, "NT E"], by: Float[Array, "NT E"]) -> Int[Array, "NT N"]:
    """Per-tile crossing / boundary counts (module docstring), vectorised over points."""
    edge = lambda v: v[:, None, :]  # [NT, 1, E]
    terms = _edge_terms(px[:, :, None], py[:, :, None], edge(ax), edge(ay), edge(bx), edge(by))  # [NT, N, E]
    return jnp.sum(terms, axis=-1)


def _kernel(px_ref, py_ref, ax_ref, ay_ref, bx_ref, by_ref, out_ref):
    px, py = px_ref[...], py_ref[...]  # [BT, Np]
    acc = jnp.zeros(px.shape, jnp.int32)
    for e in range(ax_ref.shape[1]):  # the tile's edges, unrolled
        col = lambda ref: ref[:, e:e + 1]  # [BT, 1]
        acc = acc + _edge_terms(px, py, col(ax_ref), col(ay_ref), col(bx_ref), col(by_ref))
    out_ref[...] = acc


@functools.partial(jax.jit, static_argnames=("interpret",))
def tile_counts_pallas(px: Float[Array, "NT N"], py: Float[Array, "NT N"], ax: Float[Array, "NT E"],
                       ay: Float[Array, "NT E"], bx: Float[Array, "NT E"], by: Float[Array, "NT E"],
                       interpret: bool = False) -> Int[Array, "NT N"]:
    """``tile_counts_jnp`` as a Pallas kernel (``interpret=True`` on CPU). Padded tiles / points are dropped."""
    from jax.experimental import pallas as pl

    nt, n = px.shape
    edges = ax.shape[1]
    pad_t, pad_n = -nt % BLOCK_TILES, -n % LANES
    points = lambda v: jnp.pad(v, ((0, pad_t), (0, pad_n)))
    tiles = lambda v: jnp.pad(v, ((0, pad_t), (0, 0)))
    rows = nt + pad_t
    point_block = pl.BlockSpec((BLOCK_TILES, n + pad_n), lambda i: (i, 0))
    edge_block = pl.BlockSpec((BLOCK_TILES, edges), lambda i: (i, 0))
    out = pl.pallas_call(
        _kernel, out_shape=jax.ShapeDtypeStruct((rows, n + pad_n), jnp.int32), grid=(rows // BLOCK_TILES,),
        in_specs=[point_block, point_block, edge_block, edge_block, edge_block, edge_block], out_specs=point_block,
        interpret=interpret)(points(px), points(py), tiles(ax), tiles(ay), tiles(bx), tiles(by))
    return out[:nt, :n]


def tile_counts(px, py, ax, ay, bx, by) -> Int[Array, "NT N"]:
    """The per-tile counts by the implementation ``JAXDRIVE_KERNELS`` names ("jnp", the default, or "pallas")."""
    impl = os.environ.get("JAXDRIVE_KERNELS", "jnp")
    if impl == "jnp":
        return tile_counts_jnp(px, py, ax, ay, bx, by)
    if impl == "pallas":
        return tile_counts_pallas(px, py, ax, ay, bx, by)
    raise UserInputError(f"JAXDRIVE_KERNELS: expected 'jnp' or 'pallas', got {impl!r}")

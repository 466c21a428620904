"""LK — Lane Keeping (spec ``epdms.md`` §3.7).

Walk the steps with a counter: a step whose ego centre is inside an intersection is skipped (the counter is neither
incremented nor reset); otherwise the counter grows while the centre is more than 0.5 m from the route centreline
polyline and resets to 0 when it is not. LK = 0 once the counter reaches 20 (2.0 s), else 1.

The distance is the minimum over the polyline's segments (shapely ``Point.distance(LineString)``). With a broad-phase
``PackedMap`` only the segments within reach of each proposal (``PackedMap.near_segments``) are measured: the same
minimum wherever it is <= 0.5 m (up to XLA's fusion-dependent float32 rounding, < 1e-5 m), ``inf`` where no segment
is within reach, so the "more than 0.5 m" flags equal the whole polyline's (tested on fixtures and synthetic scenes).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.broadphase import PackedMap
from jaxdrive.broadphase.blocks import block_size, covering, on_cpu
from jaxdrive.constants import LK_DEVIATION_M
from jaxdrive.geometry import segments_distance2
from jaxdrive.rules.areas import EgoAreas, ego_centers, first_step
from jaxdrive.scene import Scene

DEVIATION_M = LK_DEVIATION_M  # the broad phase keeps every segment within this of a proposal
RUN_STEPS = 20  # ceil(2.0 s / 0.1 s)


NEAR_BLOCK = 16  # near segments per loop step over a packed map's used ones (CPU; see ``broadphase.blocks``)


def _min_distance2(c: Float[Array, "K T 2"], a: Float[Array, "K S 2"], b: Float[Array, "K S 2"],
                   valid: Bool[Array, "K S"]) -> Float[Array, "K T"]:
    """Smallest squared distance from each proposal's points to its valid segments (``inf`` if none)."""
    seg = lambda v: v[:, None, :]  # [K, 1, S]
    d2 = segments_distance2(c[..., 0, None], c[..., 1, None], seg(a[..., 0]), seg(a[..., 1]), seg(b[..., 0]),
                            seg(b[..., 1]))  # [K, T, S]
    return jnp.min(jnp.where(valid[:, None, :], d2, jnp.inf), axis=-1, initial=jnp.inf)


def centerline_deviation(scene: Scene, states: Float[Array, "K T 11"]) -> Float[Array, "K T"]:
    """Distance (m) of the ego centre to the route centreline polyline (``inf`` beyond a packed map's reach).

    A packed map's near segments (compacted per proposal, -1 after) are visited in blocks of ``NEAR_BLOCK`` up to
    the largest count among the K proposals, so unused capacity costs no time (a minimum: the order changes nothing).
    """
    c = ego_centers(states)
    line = scene.map.centerline  # [C, 2]
    if not isinstance(scene.map, PackedMap):  # every segment
        return jnp.sqrt(_min_distance2(c, line[None, :-1], line[None, 1:], jnp.ones((1, line.shape[0] - 1), bool)))
    idx = scene.map.near_segments  # [K, S]
    size = idx.shape[-1]
    block = block_size(NEAR_BLOCK, size)
    idx = jnp.pad(idx, ((0, 0), (0, -size % block)), constant_values=-1)
    blocks = covering(idx >= 0, block)

    def body(i, low):
        part = jax.lax.dynamic_slice_in_dim(idx, i * block, block, axis=1)  # [K, block]
        j = jnp.maximum(part, 0)
        return jnp.minimum(low, _min_distance2(c, line[j], line[j + 1], part >= 0))

    return jnp.sqrt(jax.lax.fori_loop(0, blocks, body, jnp.full(c.shape[:2], jnp.inf, c.dtype)))


def lane_keeping(scene: Scene, states: Float[Array, "K T 11"],
                 areas: EgoAreas) -> tuple[Float[Array, "K"], Int[Array, "K"]]:
    """LK per proposal ({0, 1}, float32) and the step at which the run reaches 20 (-1 if never)."""
    exceed = centerline_deviation(scene, states) > DEVIATION_M
    skip = areas.center_in_intersection

    def step(count, inputs):
        e, s = inputs
        count = jnp.where(s, count, jnp.where(e, count + 1, 0))
        return count, count

    # unrolled off the CPU: T small steps, no loop condition per step (blocks.py)
    _, counts = jax.lax.scan(step, jnp.zeros(exceed.shape[0], jnp.int32), (exceed.T, skip.T), unroll=not on_cpu())
    first = first_step(counts.T >= RUN_STEPS)
    return jnp.where(first < 0, 1.0, 0.0).astype(jnp.float32), first

"""LK — Lane Keeping (spec ``epdms.md`` §3.7).

Walk the steps with a counter: a step whose ego centre is inside an intersection is skipped (the counter is neither
incremented nor reset); otherwise the counter grows while the centre is more than 0.5 m from the route centreline
polyline and resets to 0 when it is not. LK = 0 once the counter reaches 20 (2.0 s), else 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxdrive.geometry import polyline_distance
from jaxdrive.rules.areas import EgoAreas, ego_centers, first_step
from jaxdrive.scene import Scene

DEVIATION_M = 0.5
RUN_STEPS = 20  # ceil(2.0 s / 0.1 s)


def centerline_deviation(scene: Scene, states: Float[Array, "K T 11"]) -> Float[Array, "K T"]:
    """Distance (m) of the ego centre to the route centreline polyline."""
    c = ego_centers(states)
    return jax.vmap(jax.vmap(polyline_distance, in_axes=(0, None)), in_axes=(0, None))(c, scene.map.centerline)


def lane_keeping(scene: Scene, states: Float[Array, "K T 11"],
                 areas: EgoAreas) -> tuple[Float[Array, "K"], Int[Array, "K"]]:
    """LK per proposal ({0, 1}, float32) and the step at which the run reaches 20 (-1 if never)."""
    exceed = centerline_deviation(scene, states) > DEVIATION_M
    skip = areas.center_in_intersection

    def step(count, inputs):
        e, s = inputs
        count = jnp.where(s, count, jnp.where(e, count + 1, 0))
        return count, count

    _, counts = jax.lax.scan(step, jnp.zeros(exceed.shape[0], jnp.int32), (exceed.T, skip.T))
    first = first_step(counts.T >= RUN_STEPS)
    return jnp.where(first < 0, 1.0, 0.0).astype(jnp.float32), first

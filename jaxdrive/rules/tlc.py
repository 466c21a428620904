"""TLC — Traffic Light Compliance (spec ``epdms.md`` §3.4).

TLC = 0 if at some step t the ego box intersects (closed: touching counts) an on-route lane/connector polygon whose
light status at t is red. No exemption for standing on the connector at t = 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.broadphase import PackedMap
from jaxdrive.geometry import box_intersects_polygon
from jaxdrive.packed_geometry import boxes_touch_packed
from jaxdrive.rules.areas import EgoAreas, ego_boxes, first_step
from jaxdrive.scene import Scene


def red_light_contacts(scene: Scene, states: Float[Array, "K T 11"]) -> Bool[Array, "K T"]:
    """Whether the ego box at step t touches a red on-route connector at t.

    With a ``PackedMap`` (``jaxdrive.broadphase``) only the packed red on-route lanes near each proposal are tested.
    """
    if isinstance(scene.map, PackedMap):
        red = scene.map.red_lanes

        def one(boxes, start, end, offsets, first, valid, light):
            hit = boxes_touch_packed(boxes, start, end, offsets, first, valid)  # [T, Mr]
            return jnp.any(hit & light.T, axis=-1)

        return jax.vmap(one)(ego_boxes(states), red.start, red.end, red.offsets, red.first, red.valid, scene.map.red)
    lanes = scene.map.lanes
    boxes = ego_boxes(states)  # [K, T, 4, 2]
    hit = jax.vmap(jax.vmap(jax.vmap(box_intersects_polygon, in_axes=(None, 0)), in_axes=(0, None)),
                   in_axes=(0, None))(boxes, lanes.vertices)  # [K, T, L]
    red = (lanes.valid & scene.map.lane_on_route)[:, None] & scene.map.lane_red  # [L, T]
    return jnp.any(hit & red.T[None], axis=-1)


def traffic_light_compliance(scene: Scene, states: Float[Array, "K T 11"],
                             areas: EgoAreas) -> tuple[Float[Array, "K"], Int[Array, "K"]]:
    """TLC per proposal ({0, 1}, float32) and the first step on a red on-route connector (-1 if none)."""
    del areas
    step = first_step(red_light_contacts(scene, states))
    return jnp.where(step < 0, 1.0, 0.0).astype(jnp.float32), step

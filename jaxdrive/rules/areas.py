"""Ego-area flags per (proposal, step): NAVSIM's ``PDMScorer._calculate_ego_area`` (spec ``epdms.md`` §2.6).

All point tests are *strict* point-in-polygon (``shapely.vectorized.contains`` / ``within``: a point on a polygon
boundary is outside). Invalid (padded) polygons never count. One scene per call; batch with ``jax.vmap``.

* ``multiple_lanes``: more than one lane/connector polygon contains at least one ego corner, and no single
  lane/connector polygon contains all four corners.
* ``non_drivable``: some ego corner lies in no drivable polygon (every map area: roadblock, intersection, carpark,
  drivable area).
* ``oncoming``: the ego box centre lies in no on-route lane/connector polygon.
* ``center_in_intersection`` / ``rear_axle_in_intersection``: the centre / rear axle lies strictly inside an
  intersection polygon (DDC and LK use the centre, TTC the rear axle).

``map`` is either the scene's map (polygon leaves [P, ...], shared by all proposals) or a per-proposal culled map from
``jaxdrive.broadphase.cull_map`` (polygon leaves [K, P', ...]); ``per_proposal`` maps a kernel over the latter.

``first_step`` turns per-step violation flags into the first violating step (-1 if none), the convention of every
rule kernel's second output.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.geometry import ego_center, ego_corners, point_in_polygon
from jaxdrive.scene import AreaKind, MapData


@struct.dataclass
class EgoAreas:
    """Per (proposal, step) area flags, each Bool [K, T]."""

    multiple_lanes: Bool[Array, "K T"]
    non_drivable: Bool[Array, "K T"]
    oncoming: Bool[Array, "K T"]
    center_in_intersection: Bool[Array, "K T"]
    rear_axle_in_intersection: Bool[Array, "K T"]


def ego_boxes(states: Float[Array, "K T 11"]) -> Float[Array, "K T 4 2"]:
    """Ego footprints [FL, RL, RR, FR] (m) of rear-axle states."""
    return jax.vmap(jax.vmap(ego_corners))(states)


def ego_centers(states: Float[Array, "K T 11"]) -> Float[Array, "K T 2"]:
    """Ego box centres (m): rear axle + 1.461 m along the heading."""
    return jax.vmap(jax.vmap(ego_center))(states)


def first_step(flags: Bool[Array, "K T"]) -> Int[Array, "K"]:
    """Index of the first True step per row, -1 if none (int32)."""
    hit = jnp.any(flags, axis=-1)
    return jnp.where(hit, jnp.argmax(flags, axis=-1), -1).astype(jnp.int32)


def _inside(points: Float[Array, "*n 2"], vertices: Float[Array, "P V 2"],
            valid: Bool[Array, "P"]) -> Bool[Array, "P *n"]:
    """Strict point-in-polygon of every point in every valid polygon."""
    flat = points.reshape(-1, 2)
    per_poly = jax.vmap(jax.vmap(point_in_polygon, in_axes=(0, None)), in_axes=(None, 0))(flat, vertices)
    per_poly = per_poly & valid[:, None]
    return per_poly.reshape((vertices.shape[0],) + points.shape[:-1])


PER_PROPOSAL_AXES = MapData(areas=0, area_kind=0, lanes=0, lane_kind=0, lane_on_route=0, lane_red=0,
                            centerline=None, centerline_valid=None)


def is_per_proposal(map: MapData) -> bool:
    """Whether ``map`` carries a leading proposal axis on its polygon leaves (``jaxdrive.broadphase``)."""
    return map.area_kind.ndim == 2


def per_proposal(fn, map: MapData, states: Float[Array, "K T 11"]):
    """``fn(map_k, states[k:k+1])`` for every proposal k of a per-proposal map, outputs' size-1 K axis dropped."""
    out = jax.vmap(lambda m, s: fn(m, s[None]), in_axes=(PER_PROPOSAL_AXES, 0))(map, states)
    return jax.tree.map(lambda x: x[:, 0], out)


def ego_areas(map: MapData, states: Float[Array, "K T 11"]) -> EgoAreas:
    """Area flags of K proposals over T steps in one scene (``map`` unbatched or per-proposal, ego-centred float32)."""
    if is_per_proposal(map):
        return per_proposal(ego_areas, map, states)
    corners = ego_boxes(states)  # [K, T, 4, 2]
    centers = ego_centers(states)  # [K, T, 2]
    rear = states[..., :2]  # [K, T, 2]

    lanes = map.lanes
    lane_corner = _inside(corners, lanes.vertices, lanes.valid)  # [L, K, T, 4]
    lanes_touched = jnp.sum(jnp.any(lane_corner, axis=-1), axis=0)  # [K, T]
    one_lane_holds_all = jnp.any(jnp.all(lane_corner, axis=-1), axis=0)
    multiple_lanes = (lanes_touched > 1) & ~one_lane_holds_all

    areas = map.areas
    area_corner = _inside(corners, areas.vertices, areas.valid)  # [A, K, T, 4]
    non_drivable = ~jnp.all(jnp.any(area_corner, axis=0), axis=-1)

    route_lanes = lanes.valid & map.lane_on_route
    oncoming = ~jnp.any(_inside(centers, lanes.vertices, route_lanes), axis=0)

    junction = areas.valid & (map.area_kind == AreaKind.INTERSECTION)
    center_in_intersection = jnp.any(_inside(centers, areas.vertices, junction), axis=0)
    rear_axle_in_intersection = jnp.any(_inside(rear, areas.vertices, junction), axis=0)
    return EgoAreas(multiple_lanes=multiple_lanes, non_drivable=non_drivable, oncoming=oncoming,
                    center_in_intersection=center_in_intersection,
                    rear_axle_in_intersection=rear_axle_in_intersection)

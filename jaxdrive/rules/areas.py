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
* ``red_light``: the ego box touches (closed intersection) an on-route lane/connector polygon whose light is red at
  that step (TLC, spec §3.4).

``ego_areas`` takes one scene's ``MapData`` (polygons shared by all proposals); ``batch_ego_areas`` takes a batch's
``MapData`` or the broad phase's ``PackedMap`` (``jaxdrive.broadphase.pack_batch``: per proposal only the polygons it
can touch, cut into batch-wide edge tiles; identical flags, far less work).

``first_step`` turns per-step violation flags into the first violating step (-1 if none), the convention of every
rule kernel's second output.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxdrive import pytree as struct
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.broadphase import MAP_CHUNK_STEPS, PackedMap, group_rows
from jaxdrive.errors import UserInputError
from jaxdrive.geometry import box_intersects_polygon, ego_center, ego_corners, heading_unit, point_in_polygon
from jaxdrive.broadphase.tiles import boxes_touch_tiles, points_in_tiles, slot_sums, used_blocks
from jaxdrive.materialize import materialize
from jaxdrive.scene import AreaKind, MapData


@struct.dataclass
class EgoAreas:
    """Per (proposal, step) area flags, each Bool [K, T]."""

    multiple_lanes: Bool[Array, "K T"]
    non_drivable: Bool[Array, "K T"]
    oncoming: Bool[Array, "K T"]
    center_in_intersection: Bool[Array, "K T"]
    rear_axle_in_intersection: Bool[Array, "K T"]
    red_light: Bool[Array, "K T"]


def ego_units(states: Float[Array, "K T 11"]) -> Float[Array, "K T 2"]:
    """Unit vectors (cos, sin) of the states' headings, computed once (``jaxdrive.materialize``): every box and
    centre of the same states is built from them."""
    return materialize(heading_unit(states[..., 2]))


def ego_boxes(states: Float[Array, "K T 11"], units: Float[Array, "K T 2"] | None = None) -> Float[Array, "K T 4 2"]:
    """Ego footprints [FL, RL, RR, FR] (m) of rear-axle states (``units``: their ``ego_units`` if computed)."""
    units = ego_units(states) if units is None else units
    return jax.vmap(jax.vmap(ego_corners))(states, units)


def ego_centers(states: Float[Array, "K T 11"], units: Float[Array, "K T 2"] | None = None) -> Float[Array, "K T 2"]:
    """Ego box centres (m): rear axle + 1.461 m along the heading (``units`` as in ``ego_boxes``)."""
    units = ego_units(states) if units is None else units
    return jax.vmap(jax.vmap(ego_center))(states, units)


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


def _flags(lane_corner: Bool[Array, "L *k T 4"], area_corner: Bool[Array, "A *k T 4"],
           route_center: Bool[Array, "L *k T"], junction_center: Bool[Array, "A *k T"],
           junction_rear: Bool[Array, "A *k T"], red_contact: Bool[Array, "R *k T"]) -> EgoAreas:
    """Area flags from strict containment tables (invalid / irrelevant polygons already False)."""
    lanes_touched = jnp.sum(jnp.any(lane_corner, axis=-1), axis=0)
    one_lane_holds_all = jnp.any(jnp.all(lane_corner, axis=-1), axis=0)
    return EgoAreas(multiple_lanes=(lanes_touched > 1) & ~one_lane_holds_all,
                    non_drivable=~jnp.all(jnp.any(area_corner, axis=0), axis=-1),
                    oncoming=~jnp.any(route_center, axis=0),
                    center_in_intersection=jnp.any(junction_center, axis=0),
                    rear_axle_in_intersection=jnp.any(junction_rear, axis=0),
                    red_light=jnp.any(red_contact, axis=0))


def _packed_areas(map: PackedMap, states: Float[Array, "K T 11"], blocks: tuple[Int[Array, ""], ...]) -> EgoAreas:
    """Area flags of one tile group's K proposals from its flat packed map (pairs in (proposal, chunk) slots);
    ``blocks``: ``used_blocks`` of its areas, lanes and red lanes (the largest over the groups)."""
    k, t = states.shape[:2]
    size = MAP_CHUNK_STEPS
    steps = -(-t // size) * size
    padded = jnp.pad(states, ((0, 0), (0, steps - t), (0, 0)))  # padded steps' flags are dropped below
    slots = lambda x: x.reshape((-1, size) + x.shape[2:])  # [K, steps, ...] -> [K * C, L, ...]
    units = ego_units(padded)
    boxes = slots(ego_boxes(padded, units))  # [S, L, 4, 2]
    corners = boxes.reshape(-1, 4 * size, 2)
    centers = slots(ego_centers(padded, units))
    area_blocks, lane_blocks, red_blocks = blocks
    lane_in = points_in_tiles(jnp.concatenate([corners, centers], axis=1), map.lanes, lane_blocks)  # [Pl, 5L]
    area_in = points_in_tiles(jnp.concatenate([corners, centers, slots(padded[..., :2])], axis=1), map.areas,
                              area_blocks)  # [Pa, 6L]
    red = boxes_touch_tiles(boxes, map.red_lanes, map.red_first, red_blocks) & map.red  # [Pr, L]
    n = 4 * size
    lane_corner, area_corner = lane_in[:, :n].reshape(-1, size, 4), area_in[:, :n].reshape(-1, size, 4)
    num = boxes.shape[0]
    per = lambda x, tiles: slot_sums(x.astype(jnp.int32), tiles, num)  # over each slot's pairs -> [S, L, ...]
    junction = map.junction[:, None]
    flags = EgoAreas(
        multiple_lanes=(per(jnp.any(lane_corner, -1), map.lanes) > 1) & ~(per(jnp.all(lane_corner, -1), map.lanes) > 0),
        non_drivable=~jnp.all(per(area_corner, map.areas) > 0, axis=-1),
        oncoming=~(per(lane_in[:, n:] & map.lane_on_route[:, None], map.lanes) > 0),
        center_in_intersection=per(area_in[:, n:n + size] & junction, map.areas) > 0,
        rear_axle_in_intersection=per(area_in[:, n + size:] & junction, map.areas) > 0,
        red_light=per(red, map.red_lanes) > 0)
    return jax.tree_util.tree_map(lambda x: x.reshape(k, steps)[:, :t], flags)


def ego_areas(map: MapData, states: Float[Array, "K T 11"]) -> EgoAreas:
    """Area flags of K proposals over T steps in one scene (ego-centred float32) from its ``MapData``.

    A broad-phase ``PackedMap`` is a batch-level structure: use ``batch_ego_areas``.
    """
    if isinstance(map, PackedMap):
        raise UserInputError("ego_areas: a PackedMap (jaxdrive.broadphase) holds the whole batch's edge tiles; "
                         "compute its flags with batch_ego_areas(map, states[B, K, T, 11])")
    units = ego_units(states)
    corners = ego_boxes(states, units)  # [K, T, 4, 2]
    centers = ego_centers(states, units)  # [K, T, 2]
    rear = states[..., :2]  # [K, T, 2]
    lanes, areas = map.lanes, map.areas
    route_lanes = lanes.valid & map.lane_on_route
    junction = areas.valid & (map.area_kind == AreaKind.INTERSECTION)
    touch = jax.vmap(jax.vmap(jax.vmap(box_intersects_polygon, in_axes=(0, None)), in_axes=(0, None)),
                     in_axes=(None, 0))(corners, lanes.vertices)  # [L, K, T]
    red = touch & (route_lanes[:, None] & map.lane_red)[:, None, :]  # light red at step t
    return _flags(_inside(corners, lanes.vertices, lanes.valid), _inside(corners, areas.vertices, areas.valid),
                  _inside(centers, lanes.vertices, route_lanes), _inside(centers, areas.vertices, junction),
                  _inside(rear, areas.vertices, junction), red)


def batch_ego_areas(map: MapData | PackedMap, states: Float[Array, "B K T 11"]) -> EgoAreas:
    """Area flags [B, K, T] of a batch: ``ego_areas`` per scene of a ``MapData[B]``, or, for the broad phase's
    ``PackedMap[B]`` (``jaxdrive.broadphase.pack_batch`` on the same states), all proposals at once over the
    batch's edge tiles. Both give identical flags.
    """
    if not isinstance(map, PackedMap):
        return jax.vmap(ego_areas)(map, states)
    b, k = states.shape[:2]
    if map.near_segments.shape[:2] != (b, k):
        raise UserInputError(f"batch_ego_areas: a PackedMap packed for {map.near_segments.shape[:2]} (scenes, proposals) "
                         f"was given states of {states.shape[:2]}; pack the map for these states (jaxdrive.broadphase)")
    grouped = lambda x: jax.tree_util.tree_map(lambda leaf: group_rows(leaf, map.lanes.groups), x)
    by_group = map.replace(areas=grouped(map.areas), lanes=grouped(map.lanes), red_lanes=grouped(map.red_lanes),
                           junction=grouped(map.junction), lane_on_route=grouped(map.lane_on_route),
                           red_first=grouped(map.red_first), red=grouped(map.red))
    axes = PackedMap(areas=0, junction=0, lanes=0, lane_on_route=0, red_lanes=0, red_first=0, red=0, centerline=None,
                     centerline_valid=None, near_segments=None)
    blocks = tuple(used_blocks(t) for t in (by_group.areas, by_group.lanes, by_group.red_lanes))  # not batched
    areas = jax.vmap(_packed_areas, in_axes=(axes, 0, None))(by_group, grouped(states), blocks)  # per group
    return jax.tree_util.tree_map(lambda x: x.reshape((b, k) + x.shape[2:]), areas)

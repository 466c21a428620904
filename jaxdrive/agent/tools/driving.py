"""The BEV driving tools (paper appendix A.3: detection, ego state, forecasting, occupancy and map queries) over a
``ToolContext`` (ego BEV frame: x right, y forward, metres; semantics of the Agent-Driver library, eval-protocols §F).

Array work is jnp: points in oriented agent boxes (occupancy), points in map polygons (drivable, lane, crosswalk
queries and the lateral scans of the shoulder / divider tools), each a kernel for one point vmapped over the batch.
Locations outside the map's bounding box are reported as ``None`` ("unknown"), not as drivable / free.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from jaxdrive.agent.tools.context import ToolContext
from jaxdrive.agent.tools.registry import Tool, ToolError
from jaxdrive.geometry import box_corners, point_in_box, point_in_polygon, segments_distance2

FUTURE_STEPS = tuple(range(5, 31, 5))  # 0.5 .. 3.0 s at 0.1 s steps (6 waypoints, as Agent-Driver's traj[:6])
OCC_TIMESTEPS = 5  # t in {0..4} = 0, 0.5, 1, 1.5, 2 s
SCAN_STEP, SCAN_MAX = 0.1, 30.0  # lateral scans of the shoulder / divider tools (m)
LINE_TOL = 0.5  # m: distance at which a location is "on" a lane divider / road boundary

_LOC = {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}
LOCATIONS = {"type": "array", "items": _LOC, "minItems": 1, "maxItems": 64}
RANGE = {"type": "object", "additionalProperties": False, "required": ["x_start", "x_end", "y_start", "y_end"],
         "properties": {k: {"type": "number"} for k in ("x_start", "x_end", "y_start", "y_end")}}
NO_ARGS = {"type": "object", "additionalProperties": False, "properties": {}}


# ----------------------------------------------------------------------------------------------------------------------
# jnp kernels
# ----------------------------------------------------------------------------------------------------------------------


def pack_polygons(polys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(verts [P, V, 2] float32, valid [P]) with padded vertices repeating the first (degenerate edges)."""
    p = max(1, len(polys))
    v = max([len(x) for x in polys] + [3])
    out = np.full((p, v, 2), 1.0e6, np.float32)
    for i, poly in enumerate(polys):
        out[i, : len(poly)] = poly
        out[i, len(poly):] = poly[0]
    return out, np.arange(p) < len(polys)


def _inside_each(p: Float[Array, "2"], verts: Float[Array, "P V 2"], valid: Bool[Array, "P"]) -> Bool[Array, "P"]:
    return jax.vmap(point_in_polygon, in_axes=(None, 0))(p, verts) & valid


@jax.jit
def points_in_polygons(points: Float[Array, "M 2"], verts: Float[Array, "P V 2"],
                       valid: Bool[Array, "P"]) -> Bool[Array, "M P"]:
    """[M, P]: point m strictly inside polygon p."""
    return jax.vmap(_inside_each, in_axes=(0, None, None))(points, verts, valid)


def _dist_each(p: Float[Array, "2"], verts: Float[Array, "P V 2"]) -> Float[Array, "P"]:
    a, b = verts, jnp.roll(verts, -1, axis=1)
    d2 = segments_distance2(p[0], p[1], a[..., 0], a[..., 1], b[..., 0], b[..., 1])
    return jnp.sqrt(jnp.min(d2, axis=-1))


@jax.jit
def distance_to_rings(points: Float[Array, "M 2"], verts: Float[Array, "P V 2"]) -> Float[Array, "M P"]:
    """[M, P]: distance (m) from point m to the boundary ring of polygon p."""
    return jax.vmap(_dist_each, in_axes=(0, None))(points, verts)


def _occupied_one(p, centers, headings, length, width, present):
    boxes = jax.vmap(box_corners)(centers, headings + jnp.pi / 2, length, width)  # heading 0 = +y in the BEV frame
    return jnp.any(jax.vmap(point_in_box, in_axes=(None, 0))(p, boxes) & present)


@jax.jit
def occupied(points: Float[Array, "M 2"], centers: Float[Array, "N 2"], headings: Float[Array, "N"],
             length: Float[Array, "N"], width: Float[Array, "N"], present: Bool[Array, "N"]) -> Bool[Array, "M"]:
    """[M]: point m inside (or on) the oriented box of any present object."""
    return jax.vmap(_occupied_one, in_axes=(0, None, None, None, None, None))(points, centers, headings, length, width,
                                                                                present)


@jax.jit
def in_rect(xy: Float[Array, "N 2"], present: Bool[Array, "N"], x0, x1, y0, y1) -> Bool[Array, "N"]:
    """[N]: present objects whose centre lies in the closed rectangle [x0, x1] x [y0, y1]."""
    return present & (xy[:, 0] >= x0) & (xy[:, 0] <= x1) & (xy[:, 1] >= y0) & (xy[:, 1] <= y1)


# ----------------------------------------------------------------------------------------------------------------------
# detection
# ----------------------------------------------------------------------------------------------------------------------


def _describe(ctx: ToolContext, i: int) -> dict:
    o = ctx.objects
    x, y = o.xy[i, 0]
    return {"object_type": o.labels[i], "object_id": o.ids[i], "position": [round(float(x), 2), round(float(y), 2)],
            "size": [round(float(o.size[i, 1]), 2), round(float(o.size[i, 0]), 2)]}  # (width, length) as Agent-Driver


def _select(ctx: ToolContext, mask: np.ndarray) -> list[dict]:
    idx = np.flatnonzero(mask)
    order = idx[np.argsort(np.hypot(*ctx.objects.xy[idx, 0].T), kind="stable")] if idx.size else idx
    return [_describe(ctx, int(i)) for i in order]


def _now(ctx: ToolContext) -> tuple[np.ndarray, np.ndarray]:
    o = ctx.objects
    return o.xy[:, 0], o.present[:, 0]


def leading_object(ctx: ToolContext):
    """Nearest object with |x| < 3 and 0 <= y < 10 (same lane, within 10 m ahead), or None."""
    xy, pres = _now(ctx)
    mask = pres & (np.abs(xy[:, 0]) < 3.0) & (xy[:, 1] >= 0.0) & (xy[:, 1] < 10.0)
    if not mask.any():
        return None
    idx = np.flatnonzero(mask)
    return _describe(ctx, int(idx[np.argmin(xy[idx, 1])]))


def surrounding_objects(ctx: ToolContext):
    """Objects with |x| < 20 and |y| < 20 (nearest first); empty list when there are none."""
    xy, pres = _now(ctx)
    return _select(ctx, pres & (np.abs(xy[:, 0]) < 20.0) & (np.abs(xy[:, 1]) < 20.0))


def front_objects(ctx: ToolContext):
    """Objects with |x| < 5 and 0 <= y < 20 (nearest first)."""
    xy, pres = _now(ctx)
    return _select(ctx, pres & (np.abs(xy[:, 0]) < 5.0) & (xy[:, 1] >= 0.0) & (xy[:, 1] < 20.0))


def _rect(x_start, x_end, y_start, y_end):
    if x_start > x_end or y_start > y_end:
        raise ToolError(f"empty range: need x_start <= x_end and y_start <= y_end, got x [{x_start}, {x_end}], "
                        f"y [{y_start}, {y_end}]")
    return x_start, x_end, y_start, y_end


def objects_in_range(ctx: ToolContext, x_start, x_end, y_start, y_end):
    """Objects whose centre lies in the closed rectangle [x_start, x_end] x [y_start, y_end]."""
    xy, pres = _now(ctx)
    if not len(pres):
        _rect(x_start, x_end, y_start, y_end)
        return []
    return _select(ctx, np.asarray(in_rect(jnp.asarray(xy, jnp.float32), pres, *_rect(x_start, x_end, y_start, y_end))))


# ----------------------------------------------------------------------------------------------------------------------
# ego state and forecasting
# ----------------------------------------------------------------------------------------------------------------------


def ego_states(ctx: ToolContext):
    e = ctx.ego
    r = lambda v: [round(float(a), 3) for a in v]  # noqa: E731
    return {"velocity": r(e["velocity"]), "speed": round(e["speed"], 3), "acceleration": r(e["acceleration"]),
            "heading_angular_velocity": round(e["angular_velocity"], 4),
            "steering_angle": round(e["steering_angle"], 4),
            "can_bus_position": r(e["position_global"]), "heading_global": round(e["heading_global"], 4),
            "history": [r(p) for p in e["history"]], "history_times_s": [-1.5, -1.0, -0.5, 0.0],
            "mission_goal": ctx.mission}


def _future(ctx: ToolContext, i: int) -> dict:
    o = ctx.objects
    pts = [[round(float(o.xy[i, s, 0]), 2), round(float(o.xy[i, s, 1]), 2)] if o.present[i, s] else None
           for s in FUTURE_STEPS]
    return {"object_id": o.ids[i], "object_type": o.labels[i], "times_s": [s / 10 for s in FUTURE_STEPS],
            "waypoints": pts}


def future_for_objects(ctx: ToolContext, object_ids):
    pos = {oid: i for i, oid in enumerate(ctx.objects.ids)}
    unknown = [o for o in object_ids if o not in pos]
    if unknown:
        raise ToolError(f"unknown object id(s) {unknown}; ids come from a detection call")
    return [_future(ctx, pos[o]) for o in dict.fromkeys(object_ids)]


def future_in_range(ctx: ToolContext, x_start, x_end, y_start, y_end):
    found = objects_in_range(ctx, x_start, x_end, y_start, y_end)
    pos = {oid: i for i, oid in enumerate(ctx.objects.ids)}
    return [_future(ctx, pos[d["object_id"]]) for d in found]


def occupancy(ctx: ToolContext, locations, timestep):
    """Per location: True / False (inside an object's box at t = 0.5 * timestep s), None outside the map."""
    o = ctx.objects
    s = 5 * timestep
    pts = np.asarray(locations, np.float32)
    if len(o.ids):
        occ = np.asarray(occupied(pts, o.xy[:, s].astype(np.float32), o.heading[:, s].astype(np.float32),
                                  o.size[:, 0].astype(np.float32), o.size[:, 1].astype(np.float32), o.present[:, s]))
    else:
        occ = np.zeros(len(pts), bool)
    return [{"location": list(map(float, p)), "occupied": bool(v) if ctx.in_map(p) else None}
            for p, v in zip(locations, occ)]


# ----------------------------------------------------------------------------------------------------------------------
# map queries
# ----------------------------------------------------------------------------------------------------------------------


def _drivable(ctx: ToolContext, pts: np.ndarray) -> np.ndarray:
    verts, valid = pack_polygons(ctx.areas)
    return np.asarray(points_in_polygons(np.asarray(pts, np.float32), verts, valid)).any(axis=1)


def drivable(ctx: ToolContext, locations):
    inside = _drivable(ctx, np.asarray(locations))
    return [{"location": list(map(float, p)), "drivable": bool(v) if ctx.in_map(p) else None}
            for p, v in zip(locations, inside)]


def lane_category(ctx: ToolContext, locations):
    """Per location, the lane elements there: "divider" (within 0.5 m of the shared edge of two lanes), "boundary"
    (within 0.5 m of the drivable area's edge: drivable and non-drivable ground both within 0.5 m), "ped_crossing"
    (inside a crosswalk); [] if none, None outside the map."""
    pts = np.asarray(locations, np.float32)
    cats: list[list[str]] = [[] for _ in locations]
    if ctx.lanes:
        lv, _ = pack_polygons(ctx.lanes)
        near = np.asarray(distance_to_rings(pts, lv)) <= LINE_TOL
        for i in np.flatnonzero(near.sum(axis=1) >= 2):
            cats[i].append("divider")
    a = np.linspace(0, 2 * math.pi, 12, endpoint=False)
    ring = LINE_TOL * np.stack([np.cos(a), np.sin(a)], axis=1)
    probes = (pts[:, None, :] + ring[None]).reshape(-1, 2)
    d = _drivable(ctx, np.concatenate([pts, probes])).astype(bool)
    around = np.concatenate([d[: len(pts), None], d[len(pts):].reshape(len(pts), -1)], axis=1)
    for i in np.flatnonzero(around.any(axis=1) & ~around.all(axis=1)):
        cats[i].append("boundary")
    if ctx.crosswalks:
        cv, valid = pack_polygons(ctx.crosswalks)
        for i in np.flatnonzero(np.asarray(points_in_polygons(pts, cv, valid)).any(axis=1)):
            cats[i].append("ped_crossing")
    return [{"location": list(map(float, p)), "categories": c if ctx.in_map(p) else None}
            for p, c in zip(locations, cats)]


def _scan(inside_fn) -> tuple[float | None, float | None]:
    """Distances (m) to the first point left / right of the ego (lateral line through the origin) where
    ``inside_fn(points)`` turns False; None when it stays True for ``SCAN_MAX`` metres."""
    offs = np.arange(SCAN_STEP, SCAN_MAX + 1e-9, SCAN_STEP, dtype=np.float32)
    pts = np.concatenate([np.stack([-offs, np.zeros_like(offs)], 1), np.stack([offs, np.zeros_like(offs)], 1)])
    inside = inside_fn(pts)
    out = []
    for side in (inside[: len(offs)], inside[len(offs):]):
        first = np.flatnonzero(~side)
        out.append(round(float(offs[first[0]]), 2) if first.size else None)
    return out[0], out[1]


def current_shoulder(ctx: ToolContext):
    """Distance from the ego (rear axle) to the edge of the drivable area on its left and right (lateral scan)."""
    if not _drivable(ctx, np.zeros((1, 2)))[0]:
        raise ToolError("the ego is not on drivable ground; no shoulder distance")
    left, right = _scan(lambda p: _drivable(ctx, p))
    return {"left_shoulder_m": left, "right_shoulder_m": right}


def _ego_lane(ctx: ToolContext) -> int | None:
    if not ctx.lanes:
        return None
    lv, valid = pack_polygons(ctx.lanes)
    inside = np.flatnonzero(np.asarray(points_in_polygons(np.zeros((1, 2), np.float32), lv, valid))[0])
    if not inside.size:
        return None
    on_route = [i for i in inside if ctx.lane_on_route[i]]
    return int((on_route or list(inside))[0])


def current_lane_divider(ctx: ToolContext):
    """Distance from the ego (rear axle) to the left and right edge of the lane it is in (lateral scan)."""
    lane = _ego_lane(ctx)
    if lane is None:
        raise ToolError("the ego is not inside any lane; no lane divider distance")
    lv, valid = pack_polygons([ctx.lanes[lane]])
    left, right = _scan(lambda p: np.asarray(points_in_polygons(np.asarray(p, np.float32), lv, valid))[:, 0])
    return {"left_divider_m": left, "right_divider_m": right}


def nearest_crossing(ctx: ToolContext):
    """The nearest pedestrian crossing ahead (centroid y >= 0): its centroid and distance, or None."""
    best = None
    for cw in ctx.crosswalks:
        c = cw.mean(axis=0)
        if c[1] < 0:
            continue
        d = float(np.hypot(*c))
        if best is None or d < best["distance_m"]:
            best = {"location": [round(float(c[0]), 2), round(float(c[1]), 2)], "distance_m": round(d, 2)}
    return best


TOOLS = [
    Tool("get_leading_object_detection", "The leading object in the ego lane within 10 m ahead (|x| < 3 m, "
         "0 <= y < 10 m): id, type, position (x right, y forward, m), size; null if none.", NO_ARGS, leading_object),
    Tool("get_surrounding_object_detections", "Objects within |x| < 20 m and |y| < 20 m of the ego.", NO_ARGS,
         surrounding_objects),
    Tool("get_front_object_detections", "Objects in front of the ego: |x| < 5 m, 0 <= y < 20 m.", NO_ARGS,
         front_objects),
    Tool("get_object_detections_in_range", "Objects whose centre lies in [x_start, x_end] x [y_start, y_end] (m).",
         RANGE, objects_in_range),
    Tool("get_ego_states", "Ego velocity, speed, acceleration, heading angular velocity, steering angle, position, "
         "last 1.5 s of trajectory, mission goal (LEFT/RIGHT/FORWARD).", NO_ARGS, ego_states),
    Tool("get_future_trajectories_for_specific_objects", "Future waypoints (0.5 .. 3 s) of objects by id (ids from a "
         "detection call).", {"type": "object", "additionalProperties": False, "required": ["object_ids"],
                              "properties": {"object_ids": {"type": "array", "items": {"type": "string"},
                                                            "minItems": 1, "maxItems": 16}}}, future_for_objects),
    Tool("get_future_trajectories_in_range", "Future waypoints (0.5 .. 3 s) of objects whose centre lies in the range.",
         RANGE, future_in_range),
    Tool("get_occupancy_at_locations_for_timestep", "Whether each (x, y) location is occupied at timestep t in "
         "{0..4} (0, 0.5, 1, 1.5, 2 s); null outside the map.",
         {"type": "object", "additionalProperties": False, "required": ["locations", "timestep"],
          "properties": {"locations": LOCATIONS, "timestep": {"type": "integer", "minimum": 0, "maximum": 4}}},
         occupancy),
    Tool("get_drivable_at_locations", "Whether each (x, y) location is drivable; null outside the map.",
         {"type": "object", "additionalProperties": False, "required": ["locations"],
          "properties": {"locations": LOCATIONS}}, drivable),
    Tool("get_lane_category_at_locations", "Lane elements at each (x, y): any of divider, ped_crossing, boundary.",
         {"type": "object", "additionalProperties": False, "required": ["locations"],
          "properties": {"locations": LOCATIONS}}, lane_category),
    Tool("get_current_shoulder", "Distance (m) from the ego to the left and right road shoulder.", NO_ARGS,
         current_shoulder),
    Tool("get_current_lane_divider", "Distance (m) from the ego to the left and right lane divider.", NO_ARGS,
         current_lane_divider),
    Tool("get_nearest_pedestrian_crossing", "The nearest pedestrian crossing ahead: location and distance, or null.",
         NO_ARGS, nearest_crossing),
]

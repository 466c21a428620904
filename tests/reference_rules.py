"""Slow, obviously-correct reference of the map-based EPDMS rules (area flags, DAC, DDC, TLC, LK, raw progress).

Written the way the rules read in ``shared/spec/epdms.md`` (§2.6, §3.2-3.5, §3.7): float64 numpy in the scene's global
frame, shapely for every geometric predicate (``contains_xy`` = strict interior, ``intersects`` = closed,
``LineString.project`` / ``distance``), and plain Python loops over proposals and steps for the rule logic. Only the
predicate evaluation is vectorised (one shapely call per polygon over all points of the scene); every decision is taken
per (proposal, step) below. Used by ``tests/test_rules_map.py`` to property-test the jnp kernels.
"""

from __future__ import annotations

import math

import numpy as np
import shapely
from shapely.geometry import LineString, Point, Polygon

from jaxdrive.scene import AreaKind, HostScene

HALF_LENGTH, HALF_WIDTH, REAR_TO_CENTER = 2.588, 1.1485, 1.461


def ego_center_and_corners(state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centre (2,) and corners [FL, RL, RR, FR] (4, 2) of a rear-axle state (Pacifica)."""
    x, y, h = float(state[0]), float(state[1]), float(state[2])
    u = np.array([math.cos(h), math.sin(h)])
    n = np.array([-u[1], u[0]])
    c = np.array([x, y]) + REAR_TO_CENTER * u
    corners = np.stack([c + HALF_LENGTH * u + HALF_WIDTH * n, c - HALF_LENGTH * u + HALF_WIDTH * n,
                        c - HALF_LENGTH * u - HALF_WIDTH * n, c + HALF_LENGTH * u - HALF_WIDTH * n])
    return c, corners


def _contains(polygon: Polygon, points: np.ndarray) -> np.ndarray:
    """Strict interior test of many points (shapely ``contains_xy``); result has the points' leading shape."""
    flat = points.reshape(-1, 2)
    return shapely.contains_xy(polygon, flat[:, 0], flat[:, 1]).reshape(points.shape[:-1])


def reference_rules(scene: HostScene) -> dict[str, np.ndarray]:
    """All map-based rule outputs of one host scene.

    Returns a dict of numpy arrays: the area flags ``multiple_lanes``, ``non_drivable``, ``oncoming``,
    ``center_in_intersection``, ``rear_axle_in_intersection`` (bool [K, T]); ``dac``, ``ddc``, ``tlc``, ``lk`` (float [K])
    with ``*_step`` (int [K], first violating step or -1, same conventions as the kernels); ``raw_progress`` (m, [K]);
    ``deviation`` (m, [K, T]: centre to centreline distance) and ``ddc_window`` (m, [K, T]).
    """
    states = np.asarray(scene.proposal_states, np.float64)
    num_k, num_t = states.shape[:2]
    centers = np.zeros((num_k, num_t, 2))
    corners = np.zeros((num_k, num_t, 4, 2))
    for k in range(num_k):
        for t in range(num_t):
            centers[k, t], corners[k, t] = ego_center_and_corners(states[k, t])
    rear = states[..., :2]

    lane_polys = [Polygon(lane.polygon) for lane in scene.lanes]
    area_polys = [Polygon(area.polygon) for area in scene.areas]
    for p in lane_polys + area_polys:
        shapely.prepare(p)
    def table(polys, points, tail):  # [P, K, T, *tail] strict containment, all False when there are no polygons
        if not polys:
            return np.zeros((0, num_k, num_t) + tail, bool)
        return np.stack([_contains(p, points) for p in polys])

    junctions = [p for p, a in zip(area_polys, scene.areas) if a.kind == AreaKind.INTERSECTION]
    lane_corner = table(lane_polys, corners, (4,))
    route_center = table([p for p, lane in zip(lane_polys, scene.lanes) if lane.on_route], centers, ())
    area_corner = table(area_polys, corners, (4,))
    junction_center = table(junctions, centers, ())
    junction_rear = table(junctions, rear, ())

    flags = {name: np.zeros((num_k, num_t), bool) for name in
             ("multiple_lanes", "non_drivable", "oncoming", "center_in_intersection", "rear_axle_in_intersection")}
    for k in range(num_k):
        for t in range(num_t):
            lanes_here = lane_corner[:, k, t]  # [L, 4]
            touched = int(lanes_here.any(axis=1).sum())
            holds_all = bool(lanes_here.all(axis=1).any())
            flags["multiple_lanes"][k, t] = touched > 1 and not holds_all
            flags["non_drivable"][k, t] = not all(area_corner[:, k, t, j].any() for j in range(4))
            flags["oncoming"][k, t] = not route_center[:, k, t].any()
            flags["center_in_intersection"][k, t] = bool(junction_center[:, k, t].any())
            flags["rear_axle_in_intersection"][k, t] = bool(junction_rear[:, k, t].any())

    # TLC: box at t intersects (closed) an on-route lane whose light is red at t.
    boxes = shapely.polygons(corners.reshape(-1, 4, 2)).reshape(num_k, num_t)
    red_contact = np.zeros((num_k, num_t), bool)
    for lane, poly in zip(scene.lanes, lane_polys):
        status = scene.traffic_lights.get(lane.id)
        if status is None or not lane.on_route:
            continue
        touches = shapely.intersects(boxes, poly)
        for k in range(num_k):
            for t in range(num_t):
                if status[t] == "R" and touches[k, t]:
                    red_contact[k, t] = True

    line = LineString(scene.centerline[:, :2])
    deviation = shapely.distance(shapely.points(centers.reshape(-1, 2)), line).reshape(num_k, num_t)

    out = {name: v for name, v in flags.items()}
    for name in ("dac", "ddc", "tlc", "lk", "raw_progress"):
        out[name] = np.ones(num_k)
    for name in ("dac_step", "ddc_step", "tlc_step", "lk_step"):
        out[name] = np.full(num_k, -1)
    out["ddc_window"] = np.zeros((num_k, num_t))
    for k in range(num_k):
        # DAC
        for t in range(num_t):
            if flags["non_drivable"][k, t]:
                out["dac"][k], out["dac_step"][k] = 0.0, t
                break
        # DDC: masked centre displacements, window of the 11 entries t-10 .. t.
        d = [0.0]
        for t in range(1, num_t):
            d.append(float(np.hypot(*(centers[k, t] - centers[k, t - 1]))))
        for t in range(num_t):
            if not flags["oncoming"][k, t] or flags["center_in_intersection"][k, t]:
                d[t] = 0.0
        windows = [sum(d[max(0, t - 10): t + 1]) for t in range(num_t)]
        out["ddc_window"][k] = windows
        worst = max(windows)
        out["ddc"][k] = 1.0 if worst < 2.0 else (0.5 if worst < 6.0 else 0.0)
        out["ddc_step"][k] = next((t for t, w in enumerate(windows) if w >= 2.0), -1)
        # TLC
        for t in range(num_t):
            if red_contact[k, t]:
                out["tlc"][k], out["tlc_step"][k] = 0.0, t
                break
        # LK: intersection steps neither count nor reset.
        count = 0
        for t in range(num_t):
            if flags["center_in_intersection"][k, t]:
                continue
            count = count + 1 if deviation[k, t] > 0.5 else 0
            if count >= 20:
                out["lk"][k], out["lk_step"][k] = 0.0, t
                break
        # Raw progress of the box centre along the centreline.
        start = line.project(Point(centers[k, 0]))
        end = line.project(Point(centers[k, -1]))
        out["raw_progress"][k] = max(0.0, end - start)
    out["deviation"] = deviation
    return out

"""Slow, obviously-correct references for NC, TTC, HC and EC (test helper, not a test module).

Written straight from ``shared/spec/epdms.md`` §3.1, §3.6, §3.8, §3.9, in float64 numpy on a ``HostScene``:

* comfort: ``scipy.signal.savgol_filter`` called exactly as NAVSIM's ``pdm_comfort_metrics`` calls it;
* NC / TTC: per proposal, per step, per object Python loops with shapely polygons and the literal ignore-set
  algorithm (no closed form). The ego-area flags they need (multiple lanes, non-drivable, rear axle in intersection)
  are recomputed here with ``shapely.contains_xy`` (strict interior, like ``shapely.vectorized.contains``).
"""

from __future__ import annotations

import math

import numpy as np
import shapely
from scipy.signal import savgol_filter
from shapely.geometry import LineString, Polygon

from jaxdrive.scene import AreaKind, HostScene, StateIndex as S

R_AXLE = 1.461
HALF_L, HALF_W = 2.588, 1.1485

# ----------------------------------------------------------------------------------------------------------------------
# Comfort (NAVSIM pdm_comfort_metrics, float64)
# ----------------------------------------------------------------------------------------------------------------------


def _times(n: int) -> np.ndarray:
    return np.arange(n) * 0.1


def _deriv(y, n_time, window, order, deriv):
    dx = np.diff(_times(n_time)).mean()
    return savgol_filter(y, polyorder=order, window_length=min(window, n_time), deriv=deriv, delta=dx, axis=-1)


def _accel(states, kind):
    n_time = states.shape[-2]
    if kind == "x":
        a = states[..., S.ACCELERATION_X] + R_AXLE * (states[..., S.ANGULAR_VELOCITY] ** 2
                                                       + states[..., S.ANGULAR_ACCELERATION])
    elif kind == "y":
        a = states[..., S.ACCELERATION_Y]
    else:
        a = np.hypot(states[..., S.ACCELERATION_X], states[..., S.ACCELERATION_Y])
    return np.round(savgol_filter(a, polyorder=2, window_length=min(8, n_time), axis=-1), 8)


def _jerk(states, kind):
    return np.round(_deriv(_accel(states, kind), states.shape[-2], 15, 2, 1), 8)


def _unwrap(h):
    adj = np.zeros_like(h)
    adj[..., 1:] = np.cumsum(np.round(np.diff(h, axis=-1) / (2 * np.pi)), axis=-1)
    return h - 2 * np.pi * adj


def _yaw(states, deriv, order):
    return np.round(_deriv(_unwrap(states[..., S.HEADING]), states.shape[-2], 5, order, deriv), 8)


def comfort_signals(seq: np.ndarray) -> dict:
    """HC's six filtered signals of a [K, T, 11] float64 sequence."""
    return {"lon_acceleration": _accel(seq, "x"), "lat_acceleration": _accel(seq, "y"),
            "jerk_magnitude": _jerk(seq, "magnitude"), "lon_jerk": _jerk(seq, "x"),
            "yaw_acceleration": _yaw(seq, 2, 3), "yaw_rate": _yaw(seq, 1, 2)}


def history_comfort_ref(history14: np.ndarray, states: np.ndarray) -> np.ndarray:
    """[K, 6] bool HC checks (order lon_acc, lat_acc, jerk, lon_jerk, yaw_acc, yaw_rate), strict bounds."""
    seq = np.concatenate([np.broadcast_to(history14, (states.shape[0],) + history14.shape), states], axis=1)
    sig = comfort_signals(seq)
    within = lambda x, lo, hi: np.all((x > lo) & (x < hi), axis=-1)
    return np.stack([within(sig["lon_acceleration"], -4.05, 2.40), within(sig["lat_acceleration"], -4.89, 4.89),
                     within(sig["jerk_magnitude"], -8.37, 8.37), within(sig["lon_jerk"], -4.13, 4.13),
                     within(sig["yaw_acceleration"], -1.93, 1.93), within(sig["yaw_rate"], -0.95, 0.95)], axis=-1)


def extended_comfort_rms_ref(states: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """[K, 4] RMS differences of (acc, jerk, yaw rate, yaw acc) between states[:, :36] and previous[:, 5:]."""
    def feats(s):
        return [_accel(s, "magnitude"), _jerk(s, "magnitude"), _yaw(s, 1, 2), _yaw(s, 2, 2)]

    a, b = feats(states[:, :36]), feats(previous[:, 5:41])
    return np.stack([np.sqrt(np.mean((x - y) ** 2, axis=-1)) for x, y in zip(a, b)], axis=-1)


def extended_comfort_ref(states: np.ndarray, previous: np.ndarray) -> np.ndarray:
    rms = extended_comfort_rms_ref(states, previous)
    return np.all(rms <= np.array([0.7, 0.5, 0.1, 0.1]), axis=-1).astype(float)


# ----------------------------------------------------------------------------------------------------------------------
# NC / TTC: literal ignore-set loops (spec §3.1, §3.6) with shapely
# ----------------------------------------------------------------------------------------------------------------------

AGENT_TYPES = {0, 1, 2}  # vehicle, pedestrian, bicycle


def ego_coords(state) -> np.ndarray:
    """Ego corners [FL, RL, RR, FR] of rear-axle states [..., 11] -> [..., 4, 2]."""
    state = np.asarray(state, float)
    h = state[..., 2]
    return _box_coords(state[..., 0] + R_AXLE * np.cos(h), state[..., 1] + R_AXLE * np.sin(h), h, 2 * HALF_L,
                       2 * HALF_W)


def _box_coords(x, y, h, length, width) -> np.ndarray:
    """Corners [FL, RL, RR, FR] of boxes centred at (x, y) with heading h (scalars or [n] arrays) -> [..., 4, 2]."""
    x, y, h = np.asarray(x, float), np.asarray(y, float), np.asarray(h, float)
    u = np.stack([np.cos(h), np.sin(h)], axis=-1)
    n = np.stack([-np.sin(h), np.cos(h)], axis=-1)
    c = np.stack([x, y], axis=-1)
    hl, hw = (length / 2)[..., None] if np.ndim(length) else length / 2, width / 2
    return np.stack([c + hl * u + hw * n, c - hl * u + hw * n, c - hl * u - hw * n, c + hl * u - hw * n], axis=-2)


def _angle(ego_xy, ego_heading, point) -> float:
    d = np.asarray(point, float) - np.asarray(ego_xy, float)
    norm = np.hypot(*d)
    if norm == 0:
        return float("nan")
    return math.acos(np.clip((math.cos(ego_heading) * d[0] + math.sin(ego_heading) * d[1]) / norm, -1.0, 1.0))


def _cache(scene: HostScene) -> dict:
    """Per-scene shapely objects, built once (the reference is called many times per scene)."""
    cache = scene.__dict__.get("_reference_cache")
    if cache is None:
        cache = {
            "lanes": [Polygon(l.polygon) for l in scene.lanes],
            "areas": [Polygon(a.polygon) for a in scene.areas],
            "junctions": [Polygon(a.polygon) for a in scene.areas if a.kind == AreaKind.INTERSECTION],
            "frames": [[] for _ in range(scene.proposal_states.shape[1])],
        }
        for i, ag in enumerate(scene.agents):
            rows = [t for t in range(ag.track.shape[0]) if not np.any(np.isnan(ag.track[t]))]
            tr = ag.track[rows]
            polys = shapely.polygons(_box_coords(tr[:, 0], tr[:, 1], tr[:, 2], ag.length, ag.width))
            for t, poly in zip(rows, polys):
                cache["frames"][t].append((i, poly, ag.track[t, :2]))
        scene.__dict__["_reference_cache"] = cache
    return cache


def area_flags(scene: HostScene, state) -> tuple[bool, bool, bool]:
    """(multiple_lanes, non_drivable, rear axle in an intersection) of one ego state (strict containment)."""
    c = _cache(scene)
    corners = ego_coords(state)
    in_lane = [shapely.contains_xy(p, corners[:, 0], corners[:, 1]) for p in c["lanes"]]
    touched = sum(bool(np.any(x)) for x in in_lane)
    multiple = touched > 1 and not any(bool(np.all(x)) for x in in_lane)
    covered = np.zeros(4, bool)
    for p in c["areas"]:
        covered |= shapely.contains_xy(p, corners[:, 0], corners[:, 1])
    junction = any(shapely.contains_xy(p, state[0], state[1]) for p in c["junctions"])
    return multiple, not bool(np.all(covered)), bool(junction)


def _objects(scene: HostScene, frame: int):
    """(index, polygon, centroid) of the objects present at ``frame``."""
    return _cache(scene)["frames"][frame]


def _first_appearance_stopped(agent) -> bool:
    if int(agent.type) not in AGENT_TYPES:
        return True
    first = next(r for r in agent.track if not np.any(np.isnan(r)))
    return bool(np.hypot(first[3], first[4]) <= 0.05)


def nc_ref(scene: HostScene, states: np.ndarray) -> tuple[float, int]:
    """NC of one proposal ([41, 11] global) and the first at-fault step (-1), by NAVSIM's loop."""
    ignore, nc, first = set(), 1.0, -1
    corners = ego_coords(states)
    egos = shapely.polygons(corners)
    for t in range(states.shape[0]):
        ego = egos[t]
        flags = None
        for i, poly, centroid in _objects(scene, t):
            if i in ignore or not ego.intersects(poly):
                continue
            agent = scene.agents[i]
            speed = math.hypot(states[t, S.VELOCITY_X], states[t, S.VELOCITY_Y])
            coords = corners[t]
            if speed <= 0.05:
                kind = "stopped_ego"
            elif _first_appearance_stopped(agent):
                kind = "stopped_track"
            elif _angle(states[t, :2], states[t, 2], centroid) > math.radians(150):
                kind = "active_rear"
            elif LineString([coords[0], coords[3]]).intersects(poly):
                kind = "active_front"
            else:
                kind = "active_lateral"
            if kind == "active_lateral" and flags is None:
                flags = area_flags(scene, states[t])
            fault = kind in ("active_front", "stopped_track") or (kind == "active_lateral" and (flags[0] or flags[1]))
            if fault:
                nc = min(nc, 0.0 if int(agent.type) in AGENT_TYPES else 0.5)
                first = t if first < 0 else first
            else:
                ignore.add(i)
    return nc, first


def ttc_ref(scene: HostScene, states: np.ndarray) -> tuple[float, int]:
    """TTC of one proposal ([41, 11] global) and the first violating ego step (-1), by NAVSIM's loop."""
    ignore = set()
    for t in range(32):
        speed = math.hypot(states[t, S.VELOCITY_X], states[t, S.VELOCITY_Y])
        h = states[t, S.HEADING]
        corners = ego_coords(states[t])
        flags = None
        shifts = [speed * 0.1 * s * np.array([math.cos(h), math.sin(h)]) for s in (0, 3, 6, 9)]
        projections = shapely.polygons(np.stack([corners + d for d in shifts]))
        for s, projected in zip((0, 3, 6, 9), projections):
            for i, poly, centroid in _objects(scene, t + s):
                if i in ignore or not projected.intersects(poly):
                    continue
                if speed < 5e-3:
                    continue
                if flags is None:
                    flags = area_flags(scene, states[t])
                angle = _angle(states[t, :2], h, centroid)
                ahead = angle < math.radians(30)
                behind = angle > math.radians(150)
                if ahead or ((flags[0] or flags[1] or flags[2]) and not behind):
                    return 0.0, t
                ignore.add(i)
    return 1.0, -1

"""Agents and static objects of a synthetic scene (local frame): leads (cruising, braking, slow, stopped), blockers
intruding into the ego lane (parked cars, cone rows, barriers), oncoming, adjacent, cutting-in and following vehicles,
crossing pedestrians, bicycles, junction cross traffic and queues, and roadside clutter.

Tracks are (41, 5) rows ``x, y, heading, vx, vy`` of the box centre with global-frame velocity; NaN rows = absent.
No agent present at t = 0 overlaps the ego box (checked conservatively with bounding circles), nor another agent.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxdrive.data.synthetic_motion import (FRONT_LENGTH, REAR_AXLE_TO_CENTER, Paths, offset_paths, sample_paths,
                                            smoothstep)
from jaxdrive.data.synthetic_roads import RoadMap
from jaxdrive.scene import DT, NUM_STEPS, Agent, AgentType

EGO_HALF_DIAG = math.hypot(5.176 / 2, 2.297 / 2)
_T = np.arange(NUM_STEPS) * DT


@dataclasses.dataclass
class Lead:
    """A vehicle ahead in the ego lane, for the IDM of the proposals: rear-bumper arc length from the ego rear axle
    along the route (41,) and speed (41,)."""

    rear_u: np.ndarray
    v: np.ndarray


@dataclasses.dataclass
class Actors:
    agents: list[Agent]
    lead: Lead | None = None
    blocker_u: float | None = None  # arc length (from the ego rear axle) of an object blocking part of the ego lane
    blocker_side: float = -1.0  # +1: it intrudes from the left, -1: from the right


def speed_profile(v0: float, accel: float = 0.0, t_start: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Arc length and speed (41,) for constant speed ``v0`` then constant ``accel`` from ``t_start`` (stops at 0)."""
    fine = np.arange(0.0, 4.0 + 1e-9, 0.01)
    v = np.maximum(v0 + accel * np.maximum(fine - t_start, 0.0), 0.0)
    s = np.concatenate([[0.0], np.cumsum(0.5 * (v[1:] + v[:-1]) * 0.01)])
    return s[::10].copy(), v[::10].copy()


def track_on_path(paths: Paths, sigma: np.ndarray, v: np.ndarray, lateral: float = 0.0) -> np.ndarray:
    """(41, 5) track of a box centre moving along one path row at arc lengths ``sigma``, shifted ``lateral`` m left."""
    x, y, h, _ = sample_paths(paths, sigma[None])
    x, y, h = x[0], y[0], h[0]
    x = x - lateral * np.sin(h)
    y = y + lateral * np.cos(h)
    return np.stack([x, y, h, v * np.cos(h), v * np.sin(h)], axis=-1)


def _ego_box_centre(road: RoadMap) -> np.ndarray:
    p = road.route.xy[0, road.ego_index]
    h = road.route.heading[0, road.ego_index]
    return p + REAR_AXLE_TO_CENTER * np.array([math.cos(h), math.sin(h)])


class _Builder:
    def __init__(self, road: RoadMap, rng: np.random.Generator, max_agents: int):
        self.road, self.rng, self.max_agents = road, rng, max_agents
        self.agents: list[Agent] = []
        self.circles = [(_ego_box_centre(road), EGO_HALF_DIAG)]

    def add(self, prefix: str, atype: AgentType, size: tuple[float, float, float], track: np.ndarray, role: str,
            may_flicker: bool = False) -> bool:
        if len(self.agents) >= self.max_agents:
            return False
        length, width, height = size
        radius = 0.5 * math.hypot(length, width)
        track = track.copy()
        if may_flicker and self.rng.random() < 0.15:
            cut = int(self.rng.integers(8, 30))
            if self.rng.random() < 0.5:
                track[:cut] = np.nan
                role += "+appears"
            else:
                track[NUM_STEPS - cut:] = np.nan
                role += "+disappears"
        if not np.isnan(track[0, 0]):
            c = track[0, :2]
            if any(np.linalg.norm(c - o) < radius + r + 0.3 for o, r in self.circles):
                return False
            self.circles.append((c, radius))
        self.agents.append(Agent(id=f"{prefix}{len(self.agents)}", type=atype, length=length, width=width,
                                 height=height, track=track, role=role))
        return True

    def vehicle_size(self) -> tuple[float, float, float]:
        rng = self.rng
        if rng.random() < 0.1:
            return rng.uniform(8.0, 11.0), rng.uniform(2.4, 2.6), 3.2
        return rng.uniform(4.2, 5.3), rng.uniform(1.7, 2.05), rng.uniform(1.4, 1.9)

    def static(self, paths: Paths, sigma: float, lateral: float) -> np.ndarray:
        return track_on_path(paths, np.full(NUM_STEPS, sigma), np.zeros(NUM_STEPS), lateral)


def build_actors(road: RoadMap, rng: np.random.Generator, v0: float, prof) -> Actors:
    b = _Builder(road, rng, prof.max_agents)
    actors = _junction_actors(b, v0, prof) if road.layout == "intersection" else _road_actors(b, v0, prof)
    if prof.background_vehicles:  # only then: other profiles keep their random streams (and scenes) unchanged
        _background_traffic(b, prof.background_vehicles)
    return actors


def _background_traffic(b: _Builder, count: int) -> None:
    """Up to ``count`` more vehicles anywhere along the lane paths (moving or stopped; overlaps at t=0 refused)."""
    rng = b.rng
    for _ in range(count):
        lp = b.road.lane_paths[int(rng.integers(len(b.road.lane_paths)))]
        sigma = lp.paths.sigma[0]
        start = rng.uniform(sigma[0] + 5.0, max(sigma[-1] - 40.0, sigma[0] + 6.0))
        s, v = speed_profile(rng.uniform(4.0, 14.0) if rng.random() < 0.75 else 0.0)
        b.add("veh", AgentType.VEHICLE, b.vehicle_size(), track_on_path(lp.paths, start + s, v), "background",
              may_flicker=True)


def _lead(b: _Builder, gap: float, role: str, speed: float, accel=0.0, t_start=0.0) -> Lead | None:
    road = b.road
    size = b.vehicle_size()
    centre_u = FRONT_LENGTH + gap + 0.5 * size[0]
    s, v = speed_profile(speed, accel, t_start)
    if not b.add("veh", AgentType.VEHICLE, size, track_on_path(road.route, road.ego_sigma + centre_u + s, v), role):
        return None
    return Lead(rear_u=centre_u + s - 0.5 * size[0], v=v)


def _road_actors(b: _Builder, v0: float, prof) -> Actors:
    road, rng = b.road, b.rng
    w = road.lane_width
    out = Actors(agents=b.agents)
    lead_gap = math.inf
    if rng.random() < prof.p_lead:
        role = str(rng.choice(["lead", "lead_brake", "lead_slow", "lead_stopped"], p=[0.35, 0.3, 0.2, 0.15]))
        gap = rng.uniform(6.0, 40.0)
        if role == "lead":
            out.lead = _lead(b, gap, role, v0 * rng.uniform(0.7, 1.1))
        elif role == "lead_brake":
            out.lead = _lead(b, gap, role, v0 * rng.uniform(0.9, 1.1), -rng.uniform(3.0, 6.0),
                             rng.uniform(0.2, 1.5))
        elif role == "lead_slow":
            out.lead = _lead(b, gap, role, rng.uniform(1.0, 5.0))
        else:
            out.lead = _lead(b, gap + 5.0, role, 0.0)
        if out.lead is not None:
            lead_gap = float(out.lead.rear_u[0])
    if rng.random() < prof.p_blocker:
        u = rng.uniform(12.0, 40.0)
        if u + 6.0 < lead_gap:
            side = -1.0 if (rng.random() < 0.8 or road.left_edge < w) else 1.0
            intrude = rng.uniform(0.4, 1.3)
            kind = str(rng.choice(["parked_in_lane", "cone", "barrier"], p=[0.5, 0.3, 0.2]))
            ok = False
            if kind == "parked_in_lane":
                size = b.vehicle_size()
                lat = side * (0.5 * w + 0.5 * size[1] - intrude)
                ok = b.add("veh", AgentType.VEHICLE, size, b.static(road.route, road.ego_sigma + u, lat), kind)
            else:
                n = int(rng.integers(3, 6)) if kind == "cone" else int(rng.integers(1, 3))
                for k in range(n):
                    f = k / max(n - 1, 1)
                    lat = side * (0.5 * w + 0.3 - (intrude + 0.3) * f)
                    size = (0.4, 0.4, 0.7) if kind == "cone" else (rng.uniform(1.5, 2.5), 0.5, 0.9)
                    atype = AgentType.TRAFFIC_CONE if kind == "cone" else AgentType.BARRIER
                    ok |= b.add(kind[:3], atype, size, b.static(road.route, road.ego_sigma + u + 2.5 * k, lat), kind)
            if ok:
                out.blocker_u, out.blocker_side = u, side
    opp = [lp for lp in road.lane_paths if lp.direction == "opposite"]
    for _ in range(int(rng.integers(0, prof.max_oncoming + 1)) if opp else 0):
        lp = opp[int(rng.integers(len(opp)))]
        s, v = speed_profile(rng.uniform(6.0, 15.0))
        b.add("veh", AgentType.VEHICLE, b.vehicle_size(),
              track_on_path(lp.paths, lp.ego_sigma - rng.uniform(15.0, 90.0) + s, v), "oncoming", may_flicker=True)
    same = [lp for lp in road.lane_paths if lp.direction == "same" and not lp.is_route]
    for _ in range(int(rng.integers(0, prof.max_adjacent + 1)) if same else 0):
        lp = same[int(rng.integers(len(same)))]
        s, v = speed_profile(v0 * rng.uniform(0.7, 1.2))
        b.add("veh", AgentType.VEHICLE, b.vehicle_size(),
              track_on_path(lp.paths, lp.ego_sigma + rng.uniform(-25.0, 45.0) + s, v), "adjacent", may_flicker=True)
    if same and rng.random() < prof.p_cut_in:
        lp = same[int(rng.integers(len(same)))]
        speed = max(v0 * rng.uniform(0.7, 1.0), 3.0)
        s, v = speed_profile(speed)
        start = lp.ego_sigma + rng.uniform(6.0, 20.0)
        t_lc = rng.uniform(0.0, 1.5)
        # offset towards the ego lane: the ego lane centre seen from the neighbour lane
        to_ego = -_lane_offset(road, lp)
        u = lp.paths.sigma[0]
        d = to_ego * smoothstep((u - start - speed * t_lc) / max(speed * rng.uniform(2.0, 3.0), 8.0))
        b.add("veh", AgentType.VEHICLE, b.vehicle_size(), track_on_path(offset_paths(lp.paths, d[None]), start + s, v),
              "cut_in")
    if rng.random() < prof.p_pedestrian:
        u = rng.uniform(12.0, 45.0)
        speed = rng.uniform(1.0, 1.6)
        right, left = road.right_edge - 1.0, road.left_edge + 1.0
        lat0, lat1 = (right, left) if rng.random() < 0.5 else (left, right)
        lat = lat0 + np.sign(lat1 - lat0) * np.minimum(speed * _T, abs(lat1 - lat0))
        base = b.static(road.route, road.ego_sigma + u, 0.0)
        track = _walk(base, lat, speed * np.sign(lat1 - lat0) * (speed * _T < abs(lat1 - lat0)))
        b.add("ped", AgentType.PEDESTRIAN, (rng.uniform(0.5, 0.8), rng.uniform(0.5, 0.8), 1.7), track,
              "pedestrian_crossing", may_flicker=True)
    if rng.random() < prof.p_follower:
        size = b.vehicle_size()
        s, v = speed_profile(v0 * rng.uniform(0.9, 1.15))
        centre = -(5.176 - FRONT_LENGTH) - rng.uniform(5.0, 20.0) - 0.5 * size[0]
        b.add("veh", AgentType.VEHICLE, size, track_on_path(road.route, road.ego_sigma + centre + s, v), "follower",
              may_flicker=True)
    shoulder = road.right_edge < -0.5 * w - 1.0
    if shoulder and rng.random() < prof.p_bicycle:
        s, v = speed_profile(rng.uniform(3.5, 6.0))
        b.add("bic", AgentType.BICYCLE, (1.8, 0.6, 1.7),
              track_on_path(road.route, road.ego_sigma + rng.uniform(5.0, 40.0) + s, v, road.right_edge + 0.8),
              "bicycle")
    if shoulder and rng.random() < 0.3:
        size = b.vehicle_size()
        b.add("veh", AgentType.VEHICLE, size, b.static(road.route, road.ego_sigma + rng.uniform(10.0, 60.0),
                                                     road.right_edge + 0.5 * size[1] + 0.1), "parked_roadside")
    for _ in range(int(rng.integers(0, 3))):
        _clutter(b, rng.uniform(5.0, 60.0))
    return out


def _lane_offset(road: RoadMap, lp) -> float:
    """Left offset of a same-direction lane's centre relative to the ego lane (abreast of the ego)."""
    i = road.ego_index
    d = lp.paths.xy[0, i] - road.route.xy[0, i]
    h = road.route.heading[0, i]
    return float(-d[0] * math.sin(h) + d[1] * math.cos(h))


def _walk(base: np.ndarray, lateral: np.ndarray, lat_speed: np.ndarray) -> np.ndarray:
    """A pedestrian walking across a road: ``base`` is a static track on the route (41, 5); lateral offsets (41,)."""
    h = base[:, 2]
    n = np.stack([-np.sin(h), np.cos(h)], axis=-1)
    xy = base[:, :2] + lateral[:, None] * n
    vel = lat_speed[:, None] * n
    heading = np.arctan2(n[:, 1], n[:, 0]) + np.where(lateral[-1] >= lateral[0], 0.0, math.pi)
    return np.concatenate([xy, heading[:, None], vel], axis=-1)


def _clutter(b: _Builder, u: float) -> None:
    road, rng = b.road, b.rng
    kind = str(rng.choice(["czone_sign", "generic_object", "traffic_cone", "barrier"]))
    atype = AgentType[kind.upper()]
    size = (1.0, 0.6, 0.9) if kind in ("czone_sign", "generic_object") else (0.45, 0.45, 0.7)
    side = road.right_edge - 0.7 if rng.random() < 0.7 else road.left_edge + 0.7
    b.add(kind[:3], atype, size, b.static(road.route, road.ego_sigma + u, side), "static_random")


def _junction_actors(b: _Builder, v0: float, prof) -> Actors:
    road, rng = b.road, b.rng
    out = Actors(agents=b.agents)
    red_now = road.route_light[0] in "RY"
    stop_gap = road.stop_u - FRONT_LENGTH
    if rng.random() < prof.p_lead:
        if red_now and stop_gap > 12.0:
            size = b.vehicle_size()
            gap = stop_gap - 1.0 - size[0]
            s, v = speed_profile(0.0)
            centre_u = FRONT_LENGTH + gap + 0.5 * size[0]
            if b.add("veh", AgentType.VEHICLE, size, track_on_path(road.route, road.ego_sigma + centre_u + s, v),
                     "lead_waiting"):
                out.lead = Lead(rear_u=centre_u + s - 0.5 * size[0], v=v)
        elif not red_now:
            out.lead = _lead(b, rng.uniform(6.0, 30.0), "lead", max(v0 * rng.uniform(0.8, 1.2), 4.0))
    cross_green = road.route_light.translate(str.maketrans({"G": "R", "Y": "R", "R": "G"}))[0] == "G"
    others = [lp for lp in road.lane_paths if lp.direction in ("cross", "opposite")]
    rng.shuffle(others)
    for lp in others[: int(rng.integers(1, prof.max_cross + 1))]:
        size = b.vehicle_size()
        moving = cross_green if lp.direction == "cross" else not red_now
        role = ("cross_traffic" if moving else "cross_waiting") if lp.direction == "cross" else (
            "oncoming" if moving else "oncoming_waiting")
        if moving:
            s, v = speed_profile(rng.uniform(5.0, 11.0))
            start = lp.mouth_sigma - rng.uniform(-10.0, 35.0)
        else:
            s, v = speed_profile(0.0)
            start = lp.mouth_sigma - 1.0 - 0.5 * size[0] - rng.integers(0, 2) * (size[0] + 2.5)
        b.add("veh", AgentType.VEHICLE, size, track_on_path(lp.paths, start + s, v), role, may_flicker=moving)
    for p0, p1, length in road.crossings:
        if rng.random() < prof.p_pedestrian:
            if rng.random() < 0.5:
                p0, p1 = p1, p0
            speed = rng.uniform(1.1, 1.6)
            d = (p1 - p0) / length
            f = rng.uniform(0.0, 0.7) * length
            dist = np.minimum(f + speed * _T, length)
            xy = p0 + dist[:, None] * d
            moving = (f + speed * _T < length)[:, None]
            track = np.concatenate([xy, np.full((NUM_STEPS, 1), math.atan2(d[1], d[0])), moving * speed * d], axis=1)
            b.add("ped", AgentType.PEDESTRIAN, (0.6, 0.6, 1.7), track, "pedestrian_crosswalk")
    if rng.random() < 0.4:
        _clutter(b, rng.uniform(3.0, max(road.stop_u - 6.0, 4.0)))
    return out

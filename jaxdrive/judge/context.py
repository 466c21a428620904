"""What a judge needs to know of a scene's context and a plan's manoeuvre, read from the scene itself (host, numpy).

A rule score says *that* a plan brakes hard or leaves its lane; whether that is reasonable depends on what the scene
gives as a cause (DriveJudge's question): a lead vehicle braking, a stopped object blocking the lane, a pedestrian
walking toward the road, a vehicle cutting in, a light turning red; and on what the plan does over time (a hard
acceleration, a slow drift, a jittering path, leaving the route). None of it is in the rule scores and little is
visible in a 64-pixel image at t = 0, so this module states it, from nothing but what a real log has: the map, the
route, the lights over time and every agent's track over the 4 s horizon. It never reads names, families, roles or
generator tags (``tests/test_judge_context.py`` checks that).

Everything is in the route frame of ``prompt.route_frame``: metres along the route centre line from the ego (``s``)
and signed offset from it (``lat``, + left), so a curved road reads like a straight one. An object is *in the ego
lane* when its footprint comes within ``LANE_HALF_WIDTH`` m of the centre line.

Two readers: ``describe_context`` (the judge's text, ``prompt.describe_scene``) and ``context_features`` (the same
facts as numbers, for the non-VLM baseline and for analysis). Units: m, s, m/s, m/s^2.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from matplotlib.path import Path as PolygonPath

from jaxdrive.judge.prompt import route_frame
from jaxdrive.scene import AgentType, HostScene, LaneKind, StateIndex

DT = 0.1  # s between states
LANE_HALF_WIDTH = 1.6  # m: an object whose footprint comes this close to the centre line is in the ego lane
STOPPED = 0.3  # m/s: slower than this over the whole horizon is a stopped object
AHEAD = 80.0  # m along the route: the range of the objects that are context
EGO_FRONT = 4.049  # m from the rear axle to the front bumper (NAVSIM's Pacifica)
NONE = 99.0  # the value of a distance / time feature when there is no such object (finite for trees and text)


@dataclasses.dataclass(frozen=True)
class Track:
    """One agent in the route frame over the horizon: ``s``, ``lat``, ``speed``, ``v_along`` [41] (NaN = absent)."""

    kind: AgentType
    length: float
    width: float
    s: np.ndarray
    lat: np.ndarray
    speed: np.ndarray
    v_along: np.ndarray

    @property
    def in_lane(self) -> np.ndarray:
        return np.abs(self.lat) - 0.5 * self.width < LANE_HALF_WIDTH


def tracks(scene: HostScene) -> list[Track]:
    """Every agent of ``scene`` in the route frame."""
    out = []
    for a in scene.agents:
        xy, ok = a.track[:, :2], ~np.isnan(a.track[:, 0])
        s, lat, heading = (np.full(len(xy), np.nan) for _ in range(3))
        if ok.any():
            s[ok], lat[ok], heading[ok] = route_frame(scene, xy[ok])
        vx, vy = a.track[:, 3], a.track[:, 4]
        out.append(Track(AgentType(a.type), float(a.length), float(a.width), s, lat, np.hypot(vx, vy),
                         vx * np.cos(heading) + vy * np.sin(heading)))
    return out


def _route_lights(scene: HostScene) -> tuple[np.ndarray, np.ndarray]:
    """(red [41], green [41]): some / a route lane connector shows red / green at each step."""
    route_lc = {l.id for l in scene.lanes if l.on_route and l.kind == LaneKind.LANE_CONNECTOR}
    series = [s for lid, s in scene.traffic_lights.items() if lid in route_lc]
    steps = scene.proposal_states.shape[1]
    red = np.array([[c == "R" for c in s[:steps]] for s in series]).any(0) if series else np.zeros(steps, bool)
    green = np.array([[c == "G" for c in s[:steps]] for s in series]).any(0) if series else np.zeros(steps, bool)
    return red, green


def _stop_line(scene: HostScene) -> float:
    """m along the route to the start of its first lane connector ahead (where a light stops the ego), or NONE."""
    best = math.inf
    for lane in scene.lanes:
        if lane.on_route and lane.kind == LaneKind.LANE_CONNECTOR:
            s, lat, _ = route_frame(scene, lane.polygon)
            near = (np.abs(lat) < 3.0) & (s > -2.0)
            if near.any():
                best = min(best, float(s[near].min()))
    return best if math.isfinite(best) else NONE


@dataclasses.dataclass(frozen=True)
class SceneFacts:
    """The context of one scene (independent of the plan). Distances along the route (m), NONE when absent."""

    speed: float  # ego speed now
    accel: float  # ego acceleration now
    lead_gap: float  # front of the nearest vehicle in the ego lane ahead now: gap from the ego's front bumper
    lead_speed: float  # its speed now (NaN without a lead)
    lead_end_speed: float  # its speed at the end of the horizon
    lead_min_accel: float  # its strongest deceleration (m/s^2, <= 0)
    blocker: float  # gap to the nearest object in the ego lane ahead that stays stopped the whole horizon
    blocker_lat: float  # its offset from the centre line (+ left)
    cut_in: float  # where a vehicle from outside the ego lane enters it ahead, NONE if none does
    pedestrian: float  # nearest pedestrian ahead that walks toward the road or is on it, NONE if none
    pedestrian_lat: float  # its closest offset from the centre line over the horizon
    red_now: bool
    red_later: bool  # the route light turns red within the horizon
    green_later: bool  # the route light turns from red to green within the horizon
    stop_line: float  # start of the route's next lane connector (a light's stop line)


def scene_facts(scene: HostScene, agents: list[Track] | None = None) -> SceneFacts:
    agents = tracks(scene) if agents is None else agents
    now = scene.history_states[-1]
    vehicles = [a for a in agents if a.kind != AgentType.PEDESTRIAN]
    lead, lead_gap = None, NONE
    for a in vehicles:
        if a.in_lane[0] and 0.0 < a.s[0] < AHEAD and a.s[0] - 0.5 * a.length - EGO_FRONT < lead_gap:
            lead, lead_gap = a, float(a.s[0] - 0.5 * a.length - EGO_FRONT)
    if lead is not None:
        v = lead.v_along
        ok = np.isfinite(v)
        acc = np.diff(v) / DT
        lead_speed, lead_end = float(v[0]), float(v[ok][-1])
        lead_min_acc = float(min(0.0, np.nanmin(acc))) if np.isfinite(acc).any() else 0.0
    else:
        lead_speed = lead_end = math.nan
        lead_min_acc = 0.0
    blockers = [a for a in vehicles if a.in_lane[0] and 0.0 < a.s[0] < AHEAD and np.nanmax(a.speed) < STOPPED]
    blocker = min(blockers, key=lambda a: a.s[0], default=None)
    cut_in = NONE
    for a in vehicles:
        if np.isfinite(a.lat[0]) and not a.in_lane[0]:
            enters = a.in_lane & (a.s > -2.0) & (a.s < AHEAD)
            if enters.any():
                cut_in = min(cut_in, float(a.s[np.argmax(enters)]))
    ped, ped_lat = NONE, NONE
    for a in agents:
        ok = np.isfinite(a.lat)
        if a.kind != AgentType.PEDESTRIAN or not ok.any():
            continue
        s, lat = a.s[ok], np.abs(a.lat[ok])
        closest = int(np.argmin(lat))
        approaches = lat[0] - lat[closest] > 0.4 and lat[closest] < 7.0
        if (approaches or lat[closest] < 2.5) and -3.0 < s[closest] < AHEAD and s[closest] < ped:
            ped, ped_lat = float(s[closest]), float(lat[closest])
    red, green = _route_lights(scene)
    return SceneFacts(
        speed=float(now[StateIndex.VELOCITY_X]), accel=float(now[StateIndex.ACCELERATION_X]),
        lead_gap=lead_gap, lead_speed=lead_speed, lead_end_speed=lead_end, lead_min_accel=lead_min_acc,
        blocker=float(blocker.s[0] - 0.5 * blocker.length - EGO_FRONT) if blocker is not None else NONE,
        blocker_lat=float(blocker.lat[0]) if blocker is not None else 0.0,
        cut_in=cut_in, pedestrian=ped, pedestrian_lat=ped_lat,
        red_now=bool(red[0]), red_later=bool(~red[0] & red.any()), green_later=bool(red[0] & ~red[-1]),
        stop_line=_stop_line(scene))


@dataclasses.dataclass(frozen=True)
class PlanFacts:
    """What one plan does over the horizon, in the route frame."""

    speeds: tuple  # m/s at 1, 2, 3, 4 s
    min_accel: float  # strongest braking (<= 0)
    max_accel: float  # strongest acceleration (>= 0)
    max_jerk: float  # largest |d accel / dt| (m/s^3)
    offsets: tuple  # lateral offset from the centre line at 1, 2, 3, 4 s (m, + left)
    max_left: float  # farthest left of the centre line (>= 0)
    max_right: float  # farthest right (>= 0)
    weaves: int  # reversals of the lateral motion (a jittering or swerving path)
    heading_error: float  # largest |heading - route heading| (rad)
    distance: float  # m along the route at the end
    stops_at: float  # s when the speed first falls below 0.5 m/s, NONE if it never does
    off_route: int  # of the plan's 9 half-second points, how many lie on lanes off the route and on no route lane
    lead_gap_min: float  # smallest gap between the plan's front and the lane's nearest vehicle ahead over time


def plan_facts(scene: HostScene, k: int, agents: list[Track] | None = None, lanes: tuple | None = None) -> PlanFacts:
    agents = tracks(scene) if agents is None else agents
    route_polys, other_polys = _lane_polygons(scene) if lanes is None else lanes
    plan = scene.proposal_states[k]
    s, lat, heading = route_frame(scene, plan[:, :2])
    v, ax = plan[:, StateIndex.VELOCITY_X], plan[:, StateIndex.ACCELERATION_X]
    lat_v = np.diff(lat) / DT
    moving = np.sign(lat_v[np.abs(lat_v) > 0.05])
    err = np.angle(np.exp(1j * (plan[:, StateIndex.HEADING] - heading)))
    pts = plan[::5, :2]
    on_route = np.zeros(len(pts), bool)
    off = np.zeros(len(pts), bool)
    for poly in route_polys:
        on_route |= poly.contains_points(pts)
    for poly in other_polys:
        off |= poly.contains_points(pts)
    gap = np.full(len(s), NONE)
    for a in agents:
        if a.kind == AgentType.PEDESTRIAN:
            continue
        ahead = a.in_lane & (a.s > s)
        gap = np.where(ahead, np.minimum(gap, a.s - 0.5 * a.length - (s + EGO_FRONT)), gap)
    slow = v < 0.5
    idx = (10, 20, 30, 40)
    return PlanFacts(speeds=tuple(float(v[i]) for i in idx), min_accel=float(min(0.0, ax.min())),
                     max_accel=float(max(0.0, ax.max())), max_jerk=float(np.abs(np.diff(ax) / DT).max()),
                     offsets=tuple(float(lat[i]) for i in idx), max_left=float(max(0.0, lat.max())),
                     max_right=float(max(0.0, -lat.min())),
                     weaves=int((np.diff(moving) != 0).sum()) if len(moving) > 1 else 0,
                     heading_error=float(np.abs(err).max()), distance=float(s[-1]),
                     stops_at=float(np.argmax(slow) * DT) if slow.any() else NONE,
                     off_route=int((off & ~on_route).sum()), lead_gap_min=float(gap.min()))


def _lane_polygons(scene: HostScene) -> tuple[list, list]:
    return ([PolygonPath(l.polygon) for l in scene.lanes if l.on_route],
            [PolygonPath(l.polygon) for l in scene.lanes if not l.on_route])


def all_facts(scene: HostScene) -> tuple[SceneFacts, list[PlanFacts]]:
    """The scene's facts and every proposal's, computing the agents' tracks and lane polygons once."""
    agents, lanes = tracks(scene), _lane_polygons(scene)
    return scene_facts(scene, agents), [plan_facts(scene, k, agents, lanes) for k in range(scene.num_proposals)]


def _flat(facts) -> dict[str, float]:
    out = {}
    for f in dataclasses.fields(facts):
        value = getattr(facts, f.name)
        if isinstance(value, tuple):
            out.update({f"{f.name}_{i + 1}s": float(x) for i, x in enumerate(value)})
        else:
            out[f.name] = float(value)
    return out


def context_features(scene: HostScene) -> tuple[list[str], np.ndarray]:
    """(names, [K, F] float64): the facts of ``describe_context`` as numbers, one row per proposal (scene facts
    prefixed ``scene_``, plan facts ``plan_``). NaN only for a lead's speeds when there is no lead."""
    sf, plans = all_facts(scene)
    head = {f"scene_{k}": v for k, v in _flat(sf).items()}
    rows = [{**head, **{f"plan_{k}": v for k, v in _flat(p).items()}} for p in plans]
    names = list(rows[0])
    return names, np.array([[r[n] for n in names] for r in rows], np.float64)


def _dist(x: float) -> str:
    return f"{x:.0f} m"


# Qualitative cues at fixed physical thresholds (none fitted to labels): NAVSIM's history-comfort bounds for the
# plan's longitudinal acceleration, deceleration and jerk (PDM's comfort metric), and round kinematic limits for the rest.
HARD_BRAKE = -4.05  # m/s^2, NAVSIM's max longitudinal deceleration
HARD_ACCEL = 2.40  # m/s^2, NAVSIM's max longitudinal acceleration
JERKY = 4.13  # m/s^3, NAVSIM's max longitudinal jerk
LEAD_BRAKES = -2.0  # m/s^2: the lead decelerates noticeably
LEAVES_LANE = 1.0  # m off the centre line: the plan's footprint reaches into the next lane
CHANGES_LANE = 2.5  # m off the centre line at the end: the plan ends in another lane
CLOSE_GAP = 5.0  # m between the plan's front and the lead's rear
NEAR = 30.0  # m ahead: an object near enough to act on within the 4 s horizon at urban speeds


def cues(sf: SceneFacts, pf: PlanFacts) -> list[str]:
    """Short words for what the plan does and what in the scene could cause it (thresholds above)."""
    plan = []
    if pf.min_accel < HARD_BRAKE:
        plan.append("brakes hard")
    if pf.max_accel > HARD_ACCEL:
        plan.append("accelerates hard")
    if pf.max_jerk > JERKY:
        plan.append("jerky")
    if pf.stops_at < NONE:
        plan.append("stops")
    if pf.weaves >= 2:
        plan.append("weaves")
    end = pf.offsets[-1]
    if abs(end) > CHANGES_LANE:
        plan.append(f"ends in the lane {'left' if end > 0 else 'right'}")
    elif max(pf.max_left, pf.max_right) > LEAVES_LANE:
        plan.append(f"leaves its lane {'left' if pf.max_left >= pf.max_right else 'right'}")
    if pf.off_route:
        plan.append("leaves the route")
    if pf.lead_gap_min < CLOSE_GAP:
        plan.append("closes on the lead")
    scene = []
    if sf.blocker < NEAR:
        scene.append("lane blocked near")
    elif sf.blocker < NONE:
        scene.append("lane blocked far")
    if sf.lead_gap < NONE and sf.lead_min_accel < LEAD_BRAKES:
        scene.append("lead brakes")
    if sf.cut_in < NONE:
        scene.append("cut-in")
    if sf.pedestrian < NONE:
        scene.append("pedestrian near the road" if sf.pedestrian < NEAR else "pedestrian far")
    if sf.red_now or sf.red_later:
        scene.append("red light")
    return [", ".join(plan) or "steady", ", ".join(scene) or "no cause"]


def describe_facts(sf: SceneFacts, pf: PlanFacts) -> str:
    """The context and the plan's manoeuvre in words, e.g. ``Lead 21 m ahead at 5.1 m/s, slows to 0.4 m/s (-3.4
    m/s2). Stopped object in lane 35 m ahead 1.1 m left. ... Cues: plan brakes hard, stops; scene lead brakes.``
    (the numbers, then ``cues``)."""
    parts = []
    if sf.lead_gap < NONE:
        lead = f"Lead {_dist(sf.lead_gap)} ahead at {sf.lead_speed:.1f} m/s"
        if sf.lead_min_accel < -1.0:
            lead += f", slows to {sf.lead_end_speed:.1f} m/s ({sf.lead_min_accel:.1f} m/s2)"
        parts.append(lead + ".")
    else:
        parts.append("No lead.")
    if sf.blocker < NONE:
        parts.append(f"Stopped object in lane {_dist(sf.blocker)} ahead "
                     f"{abs(sf.blocker_lat):.1f} m {'left' if sf.blocker_lat > 0 else 'right'}.")
    if sf.cut_in < NONE:
        parts.append(f"A vehicle cuts in {_dist(sf.cut_in)} ahead.")
    if sf.pedestrian < NONE:
        parts.append(f"Pedestrian {_dist(sf.pedestrian)} ahead comes to {sf.pedestrian_lat:.1f} m of the lane centre.")
    if sf.red_later or sf.green_later:
        parts.append(f"The light turns {'red' if sf.red_later else 'green'} within 4 s.")
    if sf.stop_line < NONE:
        parts.append(f"Stop line {_dist(sf.stop_line)} ahead.")
    parts.append("Plan speed " + " ".join(f"{x:.0f}" for x in pf.speeds) + " m/s at 1-4 s, "
                 f"accel {pf.min_accel:.1f} to {pf.max_accel:.1f} m/s2, jerk {pf.max_jerk:.0f}, offset "
                 + " ".join(f"{x:.1f}" for x in pf.offsets) + f" m, weaves {pf.weaves}, "
                 + (f"stops at {pf.stops_at:.1f} s, " if pf.stops_at < NONE else "")
                 + (f"off route {pf.off_route}, " if pf.off_route else "")
                 + (f"lead gap {pf.lead_gap_min:.0f} m." if pf.lead_gap_min < NONE else "no lead gap."))
    plan, scene = cues(sf, pf)
    parts.append(f"Cues: plan {plan}; scene {scene}.")
    return " ".join(parts)


def describe_context(scene: HostScene, k: int) -> str:
    """``describe_facts`` of proposal ``k`` of ``scene``."""
    agents, lanes = tracks(scene), _lane_polygons(scene)
    return describe_facts(scene_facts(scene, agents), plan_facts(scene, k, agents, lanes))

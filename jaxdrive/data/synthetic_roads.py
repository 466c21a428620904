"""Road maps for the synthetic generator: multi-lane roads (straight, arc, S-curve) and 3/4-arm junctions.

Everything is built in a local frame (right-hand traffic, the ego drives roughly along +x) and moved to the global
frame later by ``synthetic.py``. Conventions mirror the ``epdms-scene/1`` fixtures (``shared/spec/scene-json.md`` §4):
adjacent lanes share bit-identical boundary vertices (every boundary at lateral offset ``o`` is computed by one
expression from the same reference samples), roadblocks contain their lanes (plus an optional shoulder), junction
``intersection`` polygons contain the lane connectors, and on-route flags cover all lanes of the route's roadblocks in
the travel direction plus every connector of the route's roadblock connector.

Lateral offsets are "left-positive" (metres along the left normal of the travel direction).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxdrive.data.synthetic_motion import Paths, integrate_curvature, polyline_paths, smoothstep
from jaxdrive.errors import UserInputError
from jaxdrive.scene import Area, AreaKind, Lane, LaneKind, NUM_STEPS

DS = 0.5  # m, spacing of dense paths
CHORD_TOL = 0.015  # m, max chord error of polygon boundaries


class LanePath:
    """A line an agent can follow, built on first use: a dense path, its travel direction relative to the ego
    ("same" | "opposite" | "cross"), and where the ego is abreast of it: a sample index (roads) or, at junctions, the
    ego's distance to the stop line measured back from ``mouth_sigma`` (where the path enters the junction)."""

    def __init__(self, build, direction: str, name: str, ego_index: int | None = None,
                 mouth_sigma: float = math.nan, ego_to_mouth: float = math.nan, is_route: bool = False):
        self._build, self._paths = build, None
        self.direction, self.name, self.is_route = direction, name, is_route
        self.ego_index, self.mouth_sigma, self.ego_to_mouth = ego_index, mouth_sigma, ego_to_mouth

    @property
    def paths(self) -> Paths:
        if self._paths is None:
            self._paths = self._build()
        return self._paths

    @property
    def ego_sigma(self) -> float:
        if self.ego_index is not None:
            return float(self.paths.sigma[0, self.ego_index])
        return self.mouth_sigma - self.ego_to_mouth


@dataclasses.dataclass
class RoadMap:
    """A map plus the facts the actor and proposal builders need (local frame).

    route: the ego lane's centre continued along the route (dense, one row); ``ego_index`` is the ego rear axle at t=0.
    same_dir: lateral offsets of neighbouring same-direction lane centres, relative to the ego lane centre.
    opposite: offsets of opposite-direction lane centres. left_edge / right_edge: offsets of the outer drivable edges
    (left_edge spans the opposite carriageway if there is one). carpark: (offset of its centre, u_start, u_end) along
    the route or None. stop_u: arc length from the ego rear axle to the route's stop line (junctions) or None.
    route_light: the route connectors' 41-char status or None. others: alternative routes from the ego lane
    (junctions: other connectors), each with the same ``ego_index``.
    """

    layout: str
    areas: list[Area]
    lanes: list[Lane]
    lights: dict[str, str]
    route: Paths
    ego_index: int
    lane_width: float
    same_dir: list[float]
    opposite: list[float]
    left_edge: float
    right_edge: float
    lane_paths: list[LanePath]
    tags: list[str]
    carpark: tuple[float, float, float] | None = None
    stop_u: float | None = None
    route_light: str | None = None
    others: dict[str, Paths] = dataclasses.field(default_factory=dict)
    crossings: list[tuple[np.ndarray, np.ndarray, float]] = dataclasses.field(default_factory=list)

    @property
    def ego_sigma(self) -> float:
        return float(self.route.sigma[0, self.ego_index])

    @property
    def route_u(self) -> np.ndarray:
        """(U,) arc length along the route measured from the ego rear axle at t = 0."""
        return self.route.sigma[0] - self.ego_sigma


# ----------------------------------------------------------------------------------------------------------------------
# Linear roads
# ----------------------------------------------------------------------------------------------------------------------


def _curvature_profile(rng, s: np.ndarray, s_ego: float, kind: str, r_min: float) -> tuple[np.ndarray, str]:
    if kind == "straight":
        return np.zeros_like(s), "straight"
    radius = r_min * math.exp(rng.uniform(0.0, math.log(max(400.0 / r_min, 1.0001))))
    k0 = rng.choice([-1.0, 1.0]) / radius
    if kind == "arc":
        turn = rng.uniform(0.5, 2.0)  # total heading change, rad
        length = turn / abs(k0)
        start = s_ego + rng.uniform(-50.0, 40.0)
        ramp = 12.0
        prof = smoothstep((s - start) / ramp) - smoothstep((s - start - length) / ramp)
        return k0 * prof, "curve:arc"
    period = rng.uniform(90.0, 180.0)
    k0 = math.copysign(min(abs(k0), 1.4 * math.pi / period), k0)
    phase = rng.uniform(0, 2 * math.pi)
    return k0 * np.sin(2 * math.pi * s / period + phase), "curve:s_curve"


def _strip(ref_xy: np.ndarray, normal: np.ndarray, idx: np.ndarray, o_a: float, o_b: float) -> np.ndarray:
    """Polygon between lateral offsets o_a and o_b over reference samples ``idx`` (open ring)."""
    a = ref_xy[idx] + o_a * normal[idx]
    b = ref_xy[idx] + o_b * normal[idx]
    return np.concatenate([a, b[::-1]])


def build_linear(rng: np.random.Generator, prof) -> RoadMap:
    """A multi-lane road with optional opposite carriageway, median, shoulder and carpark."""
    w = rng.uniform(3.1, 3.8)
    nf = int(rng.choice(prof.forward_lanes))
    no = int(rng.choice(prof.opposite_lanes))
    median = rng.uniform(1.0, 4.0) if (no > 0 and rng.random() < prof.p_median) else 0.0
    shoulder = rng.uniform(1.5, 3.0) if rng.random() < prof.p_shoulder else 0.0
    e = int(rng.integers(nf))
    has_carpark = rng.random() < prof.p_carpark
    depth = rng.uniform(12.0, 22.0) if has_carpark else 0.0

    s_ego = rng.uniform(60.0, 75.0)
    length = s_ego + 230.0
    s = np.arange(0.0, length + 0.5 * DS, DS)
    kind = rng.choice(["straight", "arc", "s_curve"], p=prof.road_kinds)
    half_m = 0.5 * median
    f_edges = [-(half_m + i * w) for i in range(nf + 1)]  # forward lane boundaries (left-positive), 0 = inner
    o_edges = [half_m + j * w for j in range(no + 1)]
    rb_right = f_edges[nf] - shoulder
    max_off = max(-rb_right + depth, o_edges[no])
    kappa, curve_tag = _curvature_profile(rng, s, s_ego, kind, max(prof.r_min, 2.5 * max_off))
    ref_xy, ref_h = integrate_curvature(kappa, DS, (0.0, 0.0, 0.0))
    normal = np.stack([-np.sin(ref_h), np.cos(ref_h)], axis=-1)

    k_eff = float(np.max(np.abs(kappa)))
    k_eff = k_eff / max(1e-3, 1.0 - k_eff * max_off)
    step = 20 if k_eff < 1e-6 else int(np.clip(math.sqrt(8 * CHORD_TOL / k_eff) / DS, 2, 20))
    idx = np.arange(0, s.shape[0], step)
    if idx[-1] != s.shape[0] - 1:
        idx = np.append(idx, s.shape[0] - 1)
    n_seg = prof.road_segments or max(4, math.ceil(idx.shape[0] / 36))
    cuts = np.linspace(0, idx.shape[0] - 1, n_seg + 1).round().astype(int)

    areas, lanes = [], []
    for g in range(n_seg):
        sub = idx[cuts[g]:cuts[g + 1] + 1]
        areas.append(Area(f"rb{g}f", AreaKind.ROADBLOCK, _strip(ref_xy, normal, sub, f_edges[0], rb_right)))
        for i in range(nf):
            lanes.append(Lane(f"ln{g}f{i}", LaneKind.LANE, True, f"rb{g}f",
                              _strip(ref_xy, normal, sub, f_edges[i], f_edges[i + 1])))
        if no:
            areas.append(Area(f"rb{g}o", AreaKind.ROADBLOCK, _strip(ref_xy, normal, sub, o_edges[0], o_edges[no])))
            for j in range(no):
                lanes.append(Lane(f"ln{g}o{j}", LaneKind.LANE, False, f"rb{g}o",
                                  _strip(ref_xy, normal, sub, o_edges[j], o_edges[j + 1])))

    i_ego = int(round(s_ego / DS))
    centre = [0.5 * (f_edges[i] + f_edges[i + 1]) for i in range(nf)]
    opp_centre = [0.5 * (o_edges[j] + o_edges[j + 1]) for j in range(no)]
    c_e = centre[e]
    route = polyline_paths((ref_xy + c_e * normal)[None])
    lane_paths = []
    for i, c in enumerate(centre):
        build = (lambda: route) if i == e else (lambda c=c: polyline_paths((ref_xy + c * normal)[None]))
        lane_paths.append(LanePath(build, "same", f"f{i}", ego_index=i_ego, is_route=i == e))
    for j, c in enumerate(opp_centre):
        lane_paths.append(LanePath(lambda c=c: polyline_paths((ref_xy + c * normal)[::-1][None]), "opposite", f"o{j}",
                                   ego_index=s.shape[0] - 1 - i_ego))

    tags = [curve_tag, f"lanes:{nf}+{no}", f"ego_lane:{e}"]
    carpark = None
    if has_carpark:
        a = int(round((s_ego + rng.uniform(10.0, 45.0)) / DS))
        b = min(a + int(round(rng.uniform(25.0, 45.0) / DS)), s.shape[0] - 1)
        sub = np.arange(a, b + 1, step)
        if sub[-1] != b:
            sub = np.append(sub, b)
        areas.append(Area("cp0", AreaKind.CARPARK, _strip(ref_xy, normal, sub, rb_right + 0.3, rb_right - depth)))
        u = route.sigma[0] - route.sigma[0, i_ego]
        carpark = (rb_right - 0.5 * depth - c_e, float(u[a]), float(u[b]))
        tags.append("carpark")
    if median:
        tags.append("median")
    if shoulder:
        tags.append("shoulder")
    return RoadMap(
        layout="curved" if kind != "straight" else "straight", areas=areas, lanes=lanes, lights={}, route=route,
        ego_index=i_ego, lane_width=w, same_dir=[c - c_e for i, c in enumerate(centre) if i != e],
        opposite=[c - c_e for c in opp_centre], left_edge=(o_edges[no] if no else f_edges[0]) - c_e,
        right_edge=rb_right - c_e, lane_paths=lane_paths, tags=tags, carpark=carpark)


# ----------------------------------------------------------------------------------------------------------------------
# Junctions
# ----------------------------------------------------------------------------------------------------------------------


def _unit(angle: float) -> np.ndarray:
    return np.array([math.cos(angle), math.sin(angle)])


def _right_of(heading: float) -> np.ndarray:
    return np.round(np.array([math.sin(heading), -math.cos(heading)]), 12)  # exact for the right-angle arms


def _quintic(p0, h0, p1, h1, n: int) -> np.ndarray:
    """Quintic Hermite from pose (p0, h0) to (p1, h1): tangent-continuous with zero curvature at both ends."""
    t = np.linspace(0.0, 1.0, n)[:, None]
    t3, t4, t5 = t ** 3, t ** 4, t ** 5
    mag = 0.65 * (np.linalg.norm(p1 - p0) * math.sqrt(2.0))
    tan0, tan1 = mag * _unit(h0), mag * _unit(h1)
    return ((1 - 10 * t3 + 15 * t4 - 6 * t5) * p0 + (t - 6 * t3 + 8 * t4 - 3 * t5) * tan0
            + (-4 * t3 + 7 * t4 - 3 * t5) * tan1 + (10 * t3 - 15 * t4 + 6 * t5) * p1)


def _resample(points: np.ndarray, spacing: float) -> np.ndarray:
    seg = np.linalg.norm(np.diff(points, axis=0), axis=-1)
    keep = np.concatenate([[True], seg > 1e-9])
    points, arc = points[keep], np.concatenate([[0.0], np.cumsum(seg[seg > 1e-9])])
    q = np.arange(0.0, arc[-1] + 1e-9, spacing)
    return np.stack([np.interp(q, arc, points[:, 0]), np.interp(q, arc, points[:, 1])], axis=-1)


def light_status(phase: str, change: int) -> str:
    """41-char light string of a phase; ``change`` (a multiple of 5) is the step where it switches."""
    if phase == "green":
        return "G" * NUM_STEPS
    if phase == "red":
        return "R" * NUM_STEPS
    if phase == "yellow_to_red":
        return "Y" * change + "R" * (NUM_STEPS - change)
    if phase == "red_to_green":
        return "R" * change + "G" * (NUM_STEPS - change)
    raise UserInputError(f"unknown light phase {phase!r}")


_CROSS = str.maketrans({"G": "R", "Y": "R", "R": "G"})


@dataclasses.dataclass
class _Arm:
    index: int  # 0 W, 1 S, 2 E, 3 N (counter-clockwise)
    exists: bool
    out_dir: np.ndarray  # unit vector away from the junction
    mouth: float  # distance of the arm's mouth (where its roadblocks start) from the junction centre
    length: float
    n_in: int
    n_out: int

    @property
    def h_in(self) -> float:
        return math.atan2(-self.out_dir[1], -self.out_dir[0])

    @property
    def h_out(self) -> float:
        return math.atan2(self.out_dir[1], self.out_dir[0])

    def lateral(self, inbound: bool, offset: float, dist: float) -> np.ndarray:
        """Point ``offset`` m to the right of the arm axis (for the given direction), ``dist`` m from the centre."""
        right = _right_of(self.h_in if inbound else self.h_out)
        return self.out_dir * dist + right * offset


class Junction:
    """A right-angle 3/4-arm junction with equal lane width ``w`` on both roads, centred at the origin."""

    def __init__(self, rng: np.random.Generator, prof, ego_back: float):
        self.w = w = rng.uniform(3.2, 3.7)
        self.r = r = rng.uniform(6.0, 10.0)  # corner radius / setback of the arm mouths
        nf, no = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        ncn, ncs = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        missing = None if rng.random() < prof.p_four_arm else int(rng.choice([1, 2, 3]))
        lens = [ego_back, rng.uniform(50, 70), 170.0, rng.uniform(50, 70)]
        counts = [(nf, no), (ncn, ncs), (no, nf), (ncs, ncn)]  # (in, out) lanes per arm
        mouths = [ncs * w + r, nf * w + r, ncn * w + r, no * w + r]
        out_dirs = [np.array(d, np.float64) for d in ((-1, 0), (0, -1), (1, 0), (0, 1))]  # exact: shared vertices
        self.arms = [_Arm(a, a != missing, out_dirs[a], mouths[a], lens[a], *counts[a]) for a in range(4)]

    def lane_point(self, a: int, inbound: bool, i: int, dist: float) -> np.ndarray:
        return self.arms[a].lateral(inbound, (i + 0.5) * self.w, dist)

    def turn(self, a: int, b: int) -> str:
        d = (b - a) % 4
        return {2: "straight", 1: "left", 3: "right"}[d]

    def connector_pairs(self, a: int, b: int) -> list[tuple[int, int]]:
        """(in-lane, out-lane) pairs of the connectors from arm a to arm b."""
        ai, bo = self.arms[a], self.arms[b]
        kind = self.turn(a, b)
        if kind == "straight":
            return [(i, i) for i in range(min(ai.n_in, bo.n_out))]
        if kind == "right":
            return [(ai.n_in - 1, bo.n_out - 1)]
        return [(0, 0)]

    def connector_curve(self, a: int, i: int, b: int, j: int, n: int = 14) -> np.ndarray:
        p0 = self.lane_point(a, True, i, self.arms[a].mouth)
        p1 = self.lane_point(b, False, j, self.arms[b].mouth)
        if self.turn(a, b) == "straight":
            return np.stack([p0, p1])
        return _quintic(p0, self.arms[a].h_in, p1, self.arms[b].h_out, n)

    def path(self, a: int, i: int, b: int, j: int) -> Paths:
        """Dense centre path: inbound lane i of arm a, the connector, outbound lane j of arm b."""
        arm_a, arm_b = self.arms[a], self.arms[b]
        start = self.lane_point(a, True, i, arm_a.mouth + arm_a.length)
        end = self.lane_point(b, False, j, arm_b.mouth + arm_b.length)
        pts = np.concatenate([start[None], self.connector_curve(a, i, b, j, n=60), end[None]])
        return polyline_paths(_resample(pts, DS)[None])

    def polygon(self) -> np.ndarray:
        """The intersection polygon: both road bands plus concave corner fillets between existing arms."""
        w, r, notch = self.w, self.r, 0.5
        pts = []
        for a in range(4):
            arm, nxt = self.arms[a], self.arms[(a + 1) % 4]
            dist = arm.mouth if arm.exists else arm.mouth - r
            pts.append(arm.lateral(False, arm.n_out * w, dist))
            p_in = arm.lateral(True, arm.n_in * w, dist)
            pts.append(p_in)
            if arm.exists and nxt.exists:
                q = nxt.lateral(False, nxt.n_out * w, nxt.mouth)
                centre = p_in + nxt.out_dir * r
                pts.append(p_in + nxt.out_dir * notch)
                a0 = math.atan2(*(-nxt.out_dir)[::-1])
                a1 = math.atan2(*(-arm.out_dir)[::-1])
                sweep = (a1 - a0 + math.pi) % (2 * math.pi) - math.pi
                for f in np.linspace(0.0, 1.0, 8)[1:-1]:
                    pts.append(centre + (r - notch) * _unit(a0 + f * sweep))
                pts.append(q + arm.out_dir * notch)
        return np.array(pts)

    def strip(self, a: int, inbound: bool, lo: float, hi: float, d0: float, d1: float) -> np.ndarray:
        arm = self.arms[a]
        return np.array([arm.lateral(inbound, lo, d0), arm.lateral(inbound, hi, d0),
                         arm.lateral(inbound, hi, d1), arm.lateral(inbound, lo, d1)])


def build_junction(rng: np.random.Generator, prof) -> RoadMap:
    """A junction scene: the ego approaches from the west arm; route straight, left or right, lights on connectors."""
    d_stop = rng.uniform(-2.0, 0.0) if rng.random() < 0.1 else rng.uniform(3.0, 40.0)
    ego_back = d_stop + 4.049 + 75.0
    jn = Junction(rng, prof, ego_back)
    w = jn.w
    options = [b for b in (1, 2, 3) if jn.arms[b].exists]
    b_route = int(rng.choice(options))
    kind = jn.turn(0, b_route)
    pairs = jn.connector_pairs(0, b_route)
    e, j_out = pairs[int(rng.integers(len(pairs)))]

    areas, lanes = [], []
    for arm in jn.arms:
        if not arm.exists:
            continue
        a = arm.index
        if prof.arm_segments:
            splits = list(np.linspace(0.0, arm.length, prof.arm_segments + 1))
        else:
            splits = [0.0, arm.length] if arm.length < 100 else [0.0, rng.uniform(35.0, 60.0), arm.length]
        for g in range(len(splits) - 1):
            d0, d1 = arm.mouth + splits[g], arm.mouth + splits[g + 1]
            for inbound, n, tag in ((True, arm.n_in, "in"), (False, arm.n_out, "out")):
                rb = f"rb{a}_{g}_{tag}"
                areas.append(Area(rb, AreaKind.ROADBLOCK, jn.strip(a, inbound, 0.0, n * w, d0, d1)))
                for i in range(n):
                    on = (a == 0 and inbound) or (a == b_route and not inbound)
                    lanes.append(Lane(f"ln{a}_{g}_{tag}{i}", LaneKind.LANE, on, rb,
                                      jn.strip(a, inbound, i * w, (i + 1) * w, d0, d1)))
    areas.append(Area("int0", AreaKind.INTERSECTION, jn.polygon()))

    phase = str(rng.choice(["green", "red", "yellow_to_red", "red_to_green"], p=prof.light_phases))
    change = 5 * int(rng.integers(1, 8))
    ego_axis = light_status(phase, change)
    lights = {}
    for a in range(4):
        for b in range(4):
            if a == b or not (jn.arms[a].exists and jn.arms[b].exists):
                continue
            for i, j in jn.connector_pairs(a, b):
                cid = f"lc{a}{b}_{i}{j}"
                curve = jn.connector_curve(a, i, b, j)
                left = curve + 0.5 * w * _normals(curve)
                right = curve - 0.5 * w * _normals(curve)
                lanes.append(Lane(cid, LaneKind.LANE_CONNECTOR, a == 0 and b == b_route, f"rbc{a}{b}",
                                  np.concatenate([right, left[::-1]])))
                status = ego_axis if a % 2 == 0 else ego_axis.translate(_CROSS)
                if a == 2 and jn.turn(a, b) == "left" and rng.random() < 0.5:
                    status = "R" * NUM_STEPS  # protected-left arrow: an off-route red distractor
                lights[cid] = status

    route = jn.path(0, e, b_route, j_out)
    i_ego = int(round((jn.arms[0].length - d_stop - 4.049) / DS))
    ego_sigma = float(route.sigma[0, i_ego])
    lane_paths = []
    for a in range(4):
        for b in range(4):
            if a == b or not (jn.arms[a].exists and jn.arms[b].exists):
                continue
            for i, j in jn.connector_pairs(a, b):
                is_route = (a, i, b, j) == (0, e, b_route, j_out)
                build = (lambda: route) if is_route else (lambda a=a, i=i, b=b, j=j: jn.path(a, i, b, j))
                direction = "same" if a == 0 else ("opposite" if a == 2 else "cross")
                lane_paths.append(LanePath(build, direction, f"{a}{i}>{b}{j}", mouth_sigma=float(jn.arms[a].length),
                                           ego_to_mouth=float(jn.arms[0].length - ego_sigma), is_route=is_route))
    others = {}
    for b in options:
        for i, j in jn.connector_pairs(0, b):
            if i == e and b != b_route:
                others[f"turn_{jn.turn(0, b)}"] = jn.path(0, i, b, j)

    same_dir = [(e - i) * w for i in range(jn.arms[0].n_in) if i != e]
    opposite = [(e + 0.5 + j + 0.5) * w for j in range(jn.arms[0].n_out)]
    crossings = []
    for b in (2, b_route):  # crosswalk just behind the mouth of the far arm and of the route's exit arm
        arm = jn.arms[b]
        if arm.exists:
            dist = arm.mouth + 3.0
            p0 = arm.lateral(True, arm.n_in * w + 1.5, dist)
            p1 = arm.lateral(False, arm.n_out * w + 1.5, dist)
            crossings.append((p0, p1, float(np.linalg.norm(p1 - p0))))
    tags = [f"junction:{4 if all(a.exists for a in jn.arms) else 3}arm", f"route:{kind}", f"d_stop:{d_stop:.0f}",
            f"light:{phase}", f"lanes:{jn.arms[0].n_in}+{jn.arms[0].n_out}", f"ego_lane:{e}"]
    return RoadMap(
        layout="intersection", areas=areas, lanes=lanes, lights=lights, route=route, ego_index=i_ego, lane_width=w,
        same_dir=same_dir, opposite=opposite, left_edge=(e + 0.5 + jn.arms[0].n_out) * w,
        right_edge=-(jn.arms[0].n_in - e - 0.5) * w, lane_paths=lane_paths, tags=tags,
        stop_u=d_stop + 4.049, route_light=ego_axis, others=others, crossings=crossings)


def _normals(curve: np.ndarray) -> np.ndarray:
    d = np.gradient(curve, axis=0)
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    return np.stack([-d[:, 1], d[:, 0]], axis=-1)

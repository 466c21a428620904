"""Scene-level short-term memory (paper Sec. 3.2, appendix A.1): a scene graph from two adjacent timestamps.

Nodes: the ego, traffic participants within ``RADIUS`` (sector, distance band, motion state, risk) and road elements
(ego lane, adjacent lanes, crosswalk ahead, shoulder). Relations: spatial (``ahead_of`` / ``behind`` / ``left_of`` /
``right_of`` the ego, ``in_ego_lane``), temporal (``approaching`` / ``receding`` between the two timestamps) and
interaction (``following`` the ego's path, ``oncoming``, ``crossing``, ``cutting_in``). ``serialise`` writes it as a
few compact lines for the prompt.

Frames are read from a ``ToolContext`` (ego BEV frame, x right, y forward): the current frame is t = 0; the previous
one is t = -0.5 s, with the ego from its logged history and the objects back-extrapolated at constant velocity (the
scene format logs no object history).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxdrive.agent.tools.context import ToolContext

RADIUS = 50.0  # m
DT = 0.5  # s between the two timestamps
BANDS = ((10.0, "near"), (30.0, "mid"), (math.inf, "far"))
SECTORS = ("front", "front-left", "left", "rear-left", "rear", "rear-right", "right", "front-right")


@dataclasses.dataclass
class Node:
    id: str
    type: str
    sector: str
    band: str
    distance: float
    speed: float
    motion: str  # stopped | same-dir | oncoming | crossing (+ accelerating / braking)
    risk: str  # high | medium | low
    relations: list[str]


@dataclasses.dataclass
class SceneGraph:
    ego: dict
    nodes: list[Node]
    road: dict

    def serialise(self) -> str:
        e = self.ego
        lines = [f"ego: v={e['speed']:.1f}m/s a={e['accel']:+.1f}m/s2 {e['motion']} goal={e['goal']}"]
        for n in self.nodes:
            lines.append(f"{n.id} {n.type}: {n.sector} {n.band} {n.distance:.1f}m {n.motion} {n.speed:.1f}m/s "
                         f"risk={n.risk}" + (f" [{', '.join(n.relations)}]" if n.relations else ""))
        r = self.road
        lines.append(f"road: lanes left={r['lanes_left']} right={r['lanes_right']}"
                     + (f" crosswalk ahead {r['crosswalk_m']:.0f}m" if r["crosswalk_m"] is not None else "")
                     + (f" shoulder L{r['shoulder'][0]} R{r['shoulder'][1]}" if r["shoulder"] else ""))
        risky = [n for n in self.nodes if n.risk == "high"]
        lines.append("risk: " + (", ".join(f"high ({n.type} {n.id} {n.sector} {n.distance:.0f}m)" for n in risky)
                                 if risky else "none high"))
        return "\n".join(lines)


def _sector(x: float, y: float) -> str:
    bearing = math.degrees(math.atan2(-x, y))  # 0 = ahead, positive = to the left
    return SECTORS[int(((bearing + 22.5) % 360) // 45)]


def _band(d: float) -> str:
    return next(name for lim, name in BANDS if d < lim)


def build(ctx: ToolContext) -> SceneGraph:
    """The scene graph of ``ctx`` from t = -0.5 s and t = 0 (see the module docstring)."""
    o = ctx.objects
    v_ego = np.array(ctx.ego["velocity"])
    hist = ctx.ego["history"]
    speed_prev = float(np.linalg.norm(hist[-1] - hist[-2]) / DT)
    accel = (ctx.ego["speed"] - speed_prev) / DT
    ego_motion = "stopped" if ctx.ego["speed"] < 0.5 else "braking" if accel < -1.0 else \
        "accelerating" if accel > 1.0 else "cruising"
    nodes = []
    for i in np.flatnonzero(o.present[:, 0]):
        p = o.xy[i, 0]
        d = float(np.hypot(*p))
        if d > RADIUS:
            continue
        if o.present[i, 1]:
            vel = (o.xy[i, 1] - o.xy[i, 0]) / 0.1
        else:
            vel = np.zeros(2)
        speed = float(np.hypot(*vel))
        prev = p - vel * DT
        rel_prev = prev - (hist[-2] if len(hist) > 1 else np.zeros(2))
        approaching = float(np.hypot(*rel_prev)) - d
        rel_heading = abs(math.degrees(o.heading[i, 0]))
        motion = "stopped" if speed < 0.5 else "same-dir" if rel_heading < 30 else "oncoming" if rel_heading > 150 \
            else "crossing"
        relations = ["ahead_of_ego" if p[1] > 0 else "behind_ego", "left_of_ego" if p[0] < -1.0 else
                     "right_of_ego" if p[0] > 1.0 else "in_ego_lane"]
        if approaching > 0.2:
            relations.append("approaching")
        elif approaching < -0.2:
            relations.append("receding")
        if abs(p[0]) < 2.0 and p[1] > 0 and motion in ("same-dir", "stopped"):
            relations.append("following_path")  # the ego follows it
        if motion == "crossing":
            relations.append("crossing_path")
        lateral_closing = abs(prev[0]) - abs(p[0])
        if 1.5 < abs(p[0]) < 4.0 and lateral_closing > 0.1 and p[1] > -2:
            relations.append("cutting_in")
        closing = float(v_ego[1] - vel[1]) if p[1] > 0 else 0.0
        ttc = (p[1] - o.size[i, 0] / 2) / closing if closing > 0.1 else math.inf
        in_path = abs(p[0]) < 2.5 and p[1] > 0
        risk = "high" if (in_path and (ttc < 3.0 or d < 6.0)) or ("cutting_in" in relations and d < 10) else \
            "medium" if (in_path and ttc < 6.0) or d < 10.0 else "low"
        nodes.append(Node(o.ids[i], o.labels[i], _sector(*p), _band(d), round(d, 1), round(speed, 1), motion, risk,
                          relations))
    nodes.sort(key=lambda n: n.distance)
    from jaxdrive.agent.tools import driving  # the map tools give the road elements

    left = right = 0
    if ctx.lanes:  # lanes crossing the lateral line through the ego, left / right of the ego's position
        xs = np.arange(-20.0, 20.01, 0.25, dtype=np.float32)
        verts, valid = driving.pack_polygons(ctx.lanes)
        inside = np.asarray(driving.points_in_polygons(np.stack([xs, np.zeros_like(xs)], 1), verts, valid))
        for k in np.flatnonzero(inside.any(axis=0)):
            cx = float(xs[inside[:, k]].mean())
            left, right = left + (cx < -1.75), right + (cx > 1.75)
    cw = driving.nearest_crossing(ctx)
    try:
        sh = driving.current_shoulder(ctx)
        shoulder = (sh["left_shoulder_m"], sh["right_shoulder_m"])
    except Exception:  # noqa: BLE001 - the ego off the drivable area: no shoulder node
        shoulder = None
    road = {"lanes_left": left, "lanes_right": right, "crosswalk_m": cw["distance_m"] if cw else None,
            "shoulder": shoulder}
    ego = {"speed": ctx.ego["speed"], "accel": accel, "motion": ego_motion, "goal": ctx.mission}
    return SceneGraph(ego, nodes, road)

"""What the driving tools see: a scene moved into the ego BEV frame, plus optional annotations.

Ego BEV frame (the convention of the public tool library the paper's tools descend from, Agent-Driver): origin at the
ego rear axle at t = 0, **x to the right, y forward**, z up, metres. Agent tracks (41 steps at 0.1 s) and map polygons
are transformed once (float64 on the host) into this frame.

Annotations (all optional, a dict):
  * ``crosswalks``: list of polygons [[x, y], ...] in the scene's global frame (the scene format has no crosswalk
    layer; the generator's junction pedestrians walk across the arms, and hand-built scenes add them here);
  * ``cameras``: {name: {"K": 3x3, "ego_to_camera": 4x4 (ego BEV frame -> camera frame x right, y down, z forward),
    "width": px, "height": px}}; default: a six-camera nuScenes-like rig (``default_rig``).
  * ``mission``: "LEFT" | "RIGHT" | "FORWARD" (default: from the route centreline, ``mission_goal``).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.scene import AgentType, HostScene, LaneKind, NUM_STEPS, StateIndex

LABELS = {t: t.name.lower() for t in AgentType}
MAP_MARGIN = 10.0  # m: the mapped area is the bounding box of the map polygons grown by this margin


@dataclasses.dataclass(frozen=True)
class Camera:
    name: str
    K: np.ndarray  # 3x3 intrinsics
    ego_to_camera: np.ndarray  # 4x4: ego BEV frame (x right, y forward, z up) -> camera (x right, y down, z forward)
    width: int
    height: int


def _yaw_camera(name: str, yaw_deg: float, height: float = 1.5, size=(1600, 900), f: float = 1266.0) -> Camera:
    """A camera at (0, 0, height) looking along the BEV direction rotated ``yaw_deg`` to the left of forward."""
    a = math.radians(yaw_deg)
    fwd = np.array([-math.sin(a), math.cos(a), 0.0])  # BEV: +x right, +y forward; yaw to the left
    right = np.array([math.cos(a), math.sin(a), 0.0])
    down = np.array([0.0, 0.0, -1.0])
    r = np.stack([right, down, fwd])  # rows: camera axes in ego coordinates
    t = -r @ np.array([0.0, 0.0, height])
    m = np.eye(4)
    m[:3, :3], m[:3, 3] = r, t
    k = np.array([[f, 0, size[0] / 2], [0, f, size[1] / 2], [0, 0, 1.0]])
    return Camera(name, k, m, size[0], size[1])


def default_rig() -> dict[str, Camera]:
    """Six cameras like nuScenes' (front, front +-55 deg, back, back +-110 deg), 1600 x 900, f = 1266 px."""
    spec = {"CAM_FRONT": 0.0, "CAM_FRONT_LEFT": 55.0, "CAM_FRONT_RIGHT": -55.0, "CAM_BACK": 180.0,
            "CAM_BACK_LEFT": 110.0, "CAM_BACK_RIGHT": -110.0}
    return {n: _yaw_camera(n, y) for n, y in spec.items()}


@dataclasses.dataclass
class SceneObjects:
    """Agents in the ego BEV frame. ids [N]; labels [N]; xy [N, T, 2]; heading [N, T] (radians, 0 = +y forward,
    positive to the left); present [N, T]; size [N, 3] (length, width, height)."""

    ids: list[str]
    labels: list[str]
    types: np.ndarray
    xy: np.ndarray
    heading: np.ndarray
    present: np.ndarray
    size: np.ndarray


@dataclasses.dataclass
class ToolContext:
    """The scene as the tools query it (ego BEV frame). Build with ``ToolContext.from_scene``."""

    scene_id: str
    objects: SceneObjects
    areas: list[np.ndarray]  # drivable polygons [n, 2]
    lanes: list[np.ndarray]  # lane polygons (kind LANE) [n, 2]
    lane_on_route: list[bool]
    crosswalks: list[np.ndarray]
    cameras: dict[str, Camera]
    ego: dict  # ego kinematics at t = 0 and the history (ego frame)
    extent: tuple[float, float, float, float]  # mapped area (x0, x1, y0, y1) in the ego frame (MAP_MARGIN included)
    mission: str
    detector: object = None  # vision.Detector2D; the annotation-backed one when None
    depth_model: object = None  # vision.DepthEstimator; the annotation-backed one when None

    @staticmethod
    def from_scene(scene: HostScene, annotations: dict | None = None) -> "ToolContext":
        ann = dict(annotations or {})
        unknown = set(ann) - {"crosswalks", "cameras", "mission"}
        if unknown:
            raise UserInputError(f"annotations: unknown key(s) {sorted(unknown)} (known: crosswalks, cameras, mission)")
        ego_state = scene.history_states[-1]
        origin, h = ego_state[:2].astype(np.float64), float(ego_state[StateIndex.HEADING])
        c, s = math.cos(h), math.sin(h)

        def to_ego(p):
            d = np.asarray(p, np.float64)[..., :2] - origin
            fwd = d[..., 0] * c + d[..., 1] * s
            left = -d[..., 0] * s + d[..., 1] * c
            return np.stack([-left, fwd], axis=-1)

        n = len(scene.agents)
        xy = np.zeros((n, NUM_STEPS, 2))
        hd = np.zeros((n, NUM_STEPS))
        present = np.zeros((n, NUM_STEPS), bool)
        for i, a in enumerate(scene.agents):
            ok = ~np.any(np.isnan(a.track), axis=1)
            present[i] = ok
            xy[i, ok] = to_ego(a.track[ok, :2])
            hd[i, ok] = np.mod(a.track[ok, 2] - h + math.pi, 2 * math.pi) - math.pi
        objects = SceneObjects([a.id for a in scene.agents], [LABELS[a.type] for a in scene.agents],
                               np.array([int(a.type) for a in scene.agents], np.int32), xy, hd, present,
                               np.array([[a.length, a.width, a.height] for a in scene.agents]).reshape(n, 3))
        areas = [to_ego(a.polygon) for a in scene.areas]
        lanes = [to_ego(l.polygon) for l in scene.lanes if l.kind == LaneKind.LANE]
        on_route = [l.on_route for l in scene.lanes if l.kind == LaneKind.LANE]
        crosswalks = [to_ego(np.asarray(p, np.float64)) for p in ann.get("crosswalks", [])]
        allpts = np.concatenate(areas + lanes)
        lo, hi = allpts.min(axis=0) - MAP_MARGIN, allpts.max(axis=0) + MAP_MARGIN
        extent = (float(lo[0]), float(hi[0]), float(lo[1]), float(hi[1]))
        cams = default_rig()
        if "cameras" in ann:
            cams = {k: Camera(k, np.asarray(v["K"], np.float64), np.asarray(v["ego_to_camera"], np.float64),
                              int(v["width"]), int(v["height"])) for k, v in ann["cameras"].items()}
        hist = scene.history_states
        ego = {
            "speed": float(math.hypot(ego_state[StateIndex.VELOCITY_X], ego_state[StateIndex.VELOCITY_Y])),
            "velocity": (float(-ego_state[StateIndex.VELOCITY_Y]), float(ego_state[StateIndex.VELOCITY_X])),
            "acceleration": (float(-ego_state[StateIndex.ACCELERATION_Y]), float(ego_state[StateIndex.ACCELERATION_X])),
            "angular_velocity": float(ego_state[StateIndex.ANGULAR_VELOCITY]),
            "steering_angle": float(ego_state[StateIndex.STEERING_ANGLE]),
            "position_global": (float(origin[0]), float(origin[1])),
            "heading_global": h,
            "history": to_ego(hist[:, :2]),
        }
        mission = ann.get("mission") or mission_goal(to_ego(scene.centerline[:, :2]))
        if mission not in ("LEFT", "RIGHT", "FORWARD"):
            raise UserInputError(f"annotations.mission: expected LEFT, RIGHT or FORWARD, got {mission!r}")
        return ToolContext(scene.id, objects, areas, lanes, on_route, crosswalks, cams, ego, extent, mission)

    def in_map(self, p) -> bool:
        x0, x1, y0, y1 = self.extent
        return x0 <= p[0] <= x1 and y0 <= p[1] <= y1


def mission_goal(centerline_ego: np.ndarray, ahead: float = 40.0, lateral: float = 4.0) -> str:
    """LEFT / RIGHT / FORWARD from the route centreline (ego frame): its lateral offset ``ahead`` metres of arc length
    beyond the point nearest the ego (or at its end), compared with ``lateral``."""
    p = centerline_ego
    i0 = int(np.argmin(np.linalg.norm(p, axis=1)))
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(p[i0:], axis=0), axis=1))])
    j = i0 + int(np.searchsorted(arc, ahead).clip(0, len(arc) - 1))
    x = float(p[j, 0] - p[i0, 0])
    return "LEFT" if x < -lateral else "RIGHT" if x > lateral else "FORWARD"

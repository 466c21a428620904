"""Scene data model: host scenes (ragged, float64, global frame) and padded device pytrees (float32, ego-centred).

Two representations:

* ``HostScene`` — one scene as read from a file or made by the generator: numpy float64 arrays in the global frame,
  ragged lists of polygons and agents. It round-trips losslessly through the ``epdms-scene/1`` JSON format.
* ``Scene`` / ``Proposals`` — flax.struct pytrees of fixed padded shapes, structure-of-arrays with one validity mask per
  ragged axis, re-centred on the ego rear axle at t = 0 (subtraction in float64 on the host, float32 afterwards). Batches
  of scenes are the same pytrees with leading dims; one compile serves every batch of one ``PadSpec``.

Padding conventions (the kernels rely on them, so masks are not needed inside the geometry loops):

* a polygon's padded vertices repeat its first vertex, so the extra edges are degenerate (zero length);
* padded polygons have every vertex at ``FAR`` (far outside the scene), and ``valid = False``;
* the centreline's padded points repeat its last point (zero-length segments add no arc length);
* padded agents are absent at every step and their boxes sit at ``FAR``.

State layout: NAVSIM's ``StateIndex`` (``StateIndex`` below), all ego states at the rear axle. Units SI, radians.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Sequence

import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Float, Int

NUM_STEPS = 41  # 0.0 .. 4.0 s at 0.1 s
DT = 0.1
STATE_DIM = 11
NUM_HISTORY = 4  # logged states at -1.5, -1.0, -0.5, 0.0 s
NUM_HISTORY_PADDED = 14  # interpolated states at -1.5 .. -0.2 s used by history comfort
HISTORY_TIMES = (-1.5, -1.0, -0.5, 0.0)
FAR = 1.0e6  # coordinate of padding geometry (metres, in the ego-centred frame)


class StateIndex(enum.IntEnum):
    """NAVSIM ``StateIndex``: 11 fields of a rear-axle ego state."""

    X = 0
    Y = 1
    HEADING = 2
    VELOCITY_X = 3
    VELOCITY_Y = 4
    ACCELERATION_X = 5
    ACCELERATION_Y = 6
    STEERING_ANGLE = 7
    STEERING_RATE = 8
    ANGULAR_VELOCITY = 9
    ANGULAR_ACCELERATION = 10


STATE_FIELDS = tuple(f.name.lower() for f in StateIndex)


class AgentType(enum.IntEnum):
    """Object classes. The first three are nuPlan ``Agent`` types (collision penalty 0), the rest static (0.5)."""

    VEHICLE = 0
    PEDESTRIAN = 1
    BICYCLE = 2
    TRAFFIC_CONE = 3
    BARRIER = 4
    CZONE_SIGN = 5
    GENERIC_OBJECT = 6

    @property
    def is_agent(self) -> bool:
        return self.value <= AgentType.BICYCLE.value


class AreaKind(enum.IntEnum):
    """Drivable-area polygon layers (NAVSIM's ROADBLOCK, INTERSECTION, CARPARK_AREA, DRIVABLE_AREA)."""

    ROADBLOCK = 0
    INTERSECTION = 1
    CARPARK = 2
    DRIVABLE_AREA = 3


class LaneKind(enum.IntEnum):
    LANE = 0
    LANE_CONNECTOR = 1


class SceneValidationError(ValueError):
    """A scene (or batch) does not satisfy the data model; the message names the field, what was expected and got."""


def _fail(scene_id: str, field: str, expected: str, got: Any) -> None:
    raise SceneValidationError(f"scene {scene_id!r}: field {field!r}: expected {expected}, got {got}")


# ----------------------------------------------------------------------------------------------------------------------
# Host representation
# ----------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Area:
    id: str
    kind: AreaKind
    polygon: np.ndarray  # (n, 2) float64, open ring


@dataclasses.dataclass
class Lane:
    id: str
    kind: LaneKind
    on_route: bool
    parent_id: str
    polygon: np.ndarray  # (n, 2) float64, open ring


@dataclasses.dataclass
class Agent:
    id: str
    type: AgentType
    length: float
    width: float
    height: float
    track: np.ndarray  # (41, 5) float64: x, y, heading, vx, vy of the box centre (global); NaN rows = absent
    role: str = ""


@dataclasses.dataclass
class HostScene:
    """One scene, global frame, float64, ragged. See ``shared/spec/scene-json.md`` for the meaning of every field."""

    id: str
    history_states: np.ndarray  # (4, 11) rear-axle states at HISTORY_TIMES
    areas: list[Area]
    lanes: list[Lane]
    centerline: np.ndarray  # (C, 3) x, y, heading
    traffic_lights: dict[str, str]  # lane-connector id -> 41-char status string (G/Y/R/U)
    agents: list[Agent]
    proposal_states: np.ndarray  # (K, 41, 11)
    proposal_names: list[str]
    proposal_families: list[str]
    previous_states: np.ndarray | None = None  # (K, 41, 11): same proposals planned 0.5 s earlier (t = -0.5 .. 3.5 s)
    previous_kinds: list[str] | None = None
    human_states: np.ndarray | None = None  # (41, 11) logged human future, optional
    generator: dict = dataclasses.field(default_factory=dict)
    expected: dict | None = None
    extra: dict = dataclasses.field(default_factory=dict)  # unknown top-level keys, kept for lossless round trips

    @property
    def num_proposals(self) -> int:
        return int(self.proposal_states.shape[0])

    @property
    def origin(self) -> np.ndarray:
        """Ego rear axle at t = 0 (global, float64): the point every padded scene is re-centred on."""
        return np.asarray(self.history_states[-1, :2], np.float64)

    def route_lane_ids(self) -> list[str]:
        return [lane.id for lane in self.lanes if lane.on_route]


def _check_finite(scene_id: str, field: str, arr: np.ndarray) -> None:
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0].tolist()
        _fail(scene_id, field, "finite values", f"{arr[tuple(bad)]} at index {bad}")


def _check_shape(scene_id: str, field: str, arr: Any, shape: tuple) -> None:
    got = getattr(arr, "shape", None)
    ok = got is not None and len(got) == len(shape) and all(s is None or s == g for s, g in zip(shape, got))
    if not ok:
        want = "(" + ", ".join("K" if s is None else str(s) for s in shape) + ")"
        _fail(scene_id, field, f"an array of shape {want}", f"shape {got}")


def _polygon_area(poly: np.ndarray) -> float:
    x, y = poly[:, 0], poly[:, 1]
    return 0.5 * float(np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y))


def _check_polygon(scene_id: str, field: str, poly: np.ndarray) -> None:
    if poly.ndim != 2 or poly.shape[1] != 2:
        _fail(scene_id, field, "a polygon of shape (n, 2)", f"shape {poly.shape}")
    if poly.shape[0] < 3:
        _fail(scene_id, field, "a polygon with at least 3 vertices", f"{poly.shape[0]} vertices")
    _check_finite(scene_id, field, poly)
    scale = max(1.0, float(np.ptp(poly, axis=0).max()) ** 2)
    if abs(_polygon_area(poly - poly[0])) <= 1e-9 * scale:
        _fail(scene_id, field, "a polygon of non-zero area", "a degenerate (zero-area) polygon")


def validate_host_scene(scene: HostScene) -> HostScene:
    """Check every field of ``scene``; raise ``SceneValidationError`` naming the first bad field. Returns the scene."""
    sid = scene.id
    if not isinstance(sid, str) or not sid:
        _fail(str(sid), "id", "a non-empty string", repr(sid))
    _check_shape(sid, "ego.history.states", scene.history_states, (NUM_HISTORY, STATE_DIM))
    _check_finite(sid, "ego.history.states", scene.history_states)
    _check_shape(sid, "proposals[*].states", scene.proposal_states, (None, NUM_STEPS, STATE_DIM))
    k = scene.proposal_states.shape[0]  # 0 is valid: proposals may come from elsewhere (pad_scene needs >= 1)
    _check_finite(sid, "proposals[*].states", scene.proposal_states)
    headings = scene.proposal_states[..., StateIndex.HEADING]
    if np.any(np.abs(headings) > math.pi + 1e-3):
        _fail(sid, "proposals[*].states[:, heading]", "headings in (-pi, pi]", f"max |heading| {np.abs(headings).max():.4f}")
    for name, seq in (("proposals[*].name", scene.proposal_names), ("proposals[*].family", scene.proposal_families)):
        if len(seq) != k:
            _fail(sid, name, f"{k} entries (one per proposal)", f"{len(seq)}")
    if len(set(scene.proposal_names)) != k:
        _fail(sid, "proposals[*].name", "unique names", "duplicates")
    if scene.previous_states is not None:
        _check_shape(sid, "proposals[*].previous_plan", scene.previous_states, (k, NUM_STEPS, STATE_DIM))
        _check_finite(sid, "proposals[*].previous_plan", scene.previous_states)
    if scene.human_states is not None:
        _check_shape(sid, "human.states", scene.human_states, (NUM_STEPS, STATE_DIM))
        _check_finite(sid, "human.states", scene.human_states)
    if not scene.areas:
        _fail(sid, "map.drivable_areas", "at least one drivable polygon", "an empty list")
    for i, area in enumerate(scene.areas):
        _check_polygon(sid, f"map.drivable_areas[{i}].polygon", area.polygon)
    lane_ids = set()
    for i, lane in enumerate(scene.lanes):
        _check_polygon(sid, f"map.lanes[{i}].polygon", lane.polygon)
        if lane.id in lane_ids:
            _fail(sid, f"map.lanes[{i}].id", "unique lane ids", f"duplicate {lane.id!r}")
        lane_ids.add(lane.id)
    _check_shape(sid, "route.centerline", scene.centerline, (None, 3))
    if scene.centerline.shape[0] < 2:
        _fail(sid, "route.centerline", "at least 2 points", f"{scene.centerline.shape[0]}")
    _check_finite(sid, "route.centerline", scene.centerline)
    for lc_id, status in scene.traffic_lights.items():
        if lc_id not in lane_ids:
            _fail(sid, f"traffic_lights[{lc_id!r}]", "the id of a lane connector in map.lanes", "an unknown id")
        if len(status) != NUM_STEPS or set(status) - set("GYRU"):
            _fail(sid, f"traffic_lights[{lc_id!r}].status", f"{NUM_STEPS} characters from G/Y/R/U", repr(status))
    for i, agent in enumerate(scene.agents):
        _check_shape(sid, f"agents[{i}].track", agent.track, (NUM_STEPS, 5))
        present = ~np.any(np.isnan(agent.track), axis=1)
        _check_finite(sid, f"agents[{i}].track (present rows)", agent.track[present])
        if not (agent.length > 0 and agent.width > 0 and math.isfinite(agent.length) and math.isfinite(agent.width)):
            _fail(sid, f"agents[{i}].length/width", "positive finite box size", f"{agent.length} x {agent.width}")
    return scene


# ----------------------------------------------------------------------------------------------------------------------
# History interpolation (spec/scene-json.md §3.3, epdms.md §3.8)
# ----------------------------------------------------------------------------------------------------------------------


def wrap_angle(a):
    """Wrap to (-pi, pi] (numpy or jnp)."""
    xp = jnp if isinstance(a, jnp.ndarray) else np
    w = xp.mod(a + math.pi, 2 * math.pi) - math.pi
    return xp.where(w == -math.pi, math.pi, w)


def pad_history(history_states: np.ndarray) -> np.ndarray:
    """NAVSIM's 14 interpolated history states at -1.5 .. -0.2 s from the 4 logged ones (float64, global frame).

    Position, velocity, acceleration and steering angle interpolate linearly in time; heading linearly after unwrap,
    then wrapped; steering rate, angular velocity and angular acceleration are 0 (nuPlan does not carry them).
    Query times are whole microseconds, like nuPlan's.
    """
    knots_us = np.array([int(t * 1e6) for t in HISTORY_TIMES], np.int64)
    start, end = knots_us[0], knots_us[-1]
    query_us = np.arange(start, end, 100_000)[:-1]  # -1.5 .. -0.1 s, last one dropped (NAVSIM quirk)
    out = np.zeros((query_us.shape[0], STATE_DIM), np.float64)
    linear = [StateIndex.X, StateIndex.Y, StateIndex.VELOCITY_X, StateIndex.VELOCITY_Y, StateIndex.ACCELERATION_X,
              StateIndex.ACCELERATION_Y, StateIndex.STEERING_ANGLE]
    for f in linear:
        out[:, f] = np.interp(query_us, knots_us, history_states[:, f])
    heading = np.unwrap(history_states[:, StateIndex.HEADING])
    out[:, StateIndex.HEADING] = wrap_angle(np.interp(query_us, knots_us, heading))
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Device pytrees
# ----------------------------------------------------------------------------------------------------------------------


@struct.dataclass
class Polygons:
    """A padded set of simple polygons (open rings; padded vertices repeat the first vertex)."""

    vertices: Float[Array, "*b P V 2"]
    vertex_valid: Bool[Array, "*b P V"]
    valid: Bool[Array, "*b P"]


@struct.dataclass
class MapData:
    areas: Polygons  # drivable polygons (roadblocks, intersections, carparks, drivable areas)
    area_kind: Int[Array, "*b A"]  # AreaKind
    lanes: Polygons  # lanes and lane connectors
    lane_kind: Int[Array, "*b L"]  # LaneKind
    lane_on_route: Bool[Array, "*b L"]
    lane_red: Bool[Array, "*b L T"]  # light status 'R' at step t (any lane; TLC keeps on-route ones)
    centerline: Float[Array, "*b C 2"]  # route centreline; padded points repeat the last one
    centerline_valid: Bool[Array, "*b C"]


@struct.dataclass
class Agents:
    center: Float[Array, "*b N T 2"]  # box centre
    heading: Float[Array, "*b N T"]
    velocity: Float[Array, "*b N T 2"]  # global frame
    length: Float[Array, "*b N"]
    width: Float[Array, "*b N"]
    type: Int[Array, "*b N"]  # AgentType
    present: Bool[Array, "*b N T"]
    valid: Bool[Array, "*b N"]


@struct.dataclass
class Scene:
    """Everything but the proposals, ego-centred float32. ``*b`` are batch dims."""

    history: Float[Array, "*b 4 11"]  # logged history states
    history_padded: Float[Array, "*b 14 11"]  # NAVSIM's interpolated history (HC input)
    map: MapData
    agents: Agents
    human: Float[Array, "*b T 11"]  # logged human future (zeros if absent)
    has_human: Bool[Array, "*b"]


@struct.dataclass
class Proposals:
    """K candidate ego trajectories of a scene (rear-axle states, ego-centred float32)."""

    states: Float[Array, "*b K T 11"]
    previous: Float[Array, "*b K T 11"]  # same proposal planned 0.5 s earlier (t = -0.5 .. 3.5 s), zeros if absent
    has_previous: Bool[Array, "*b K"]
    valid: Bool[Array, "*b K"]


@dataclasses.dataclass(frozen=True)
class PadSpec:
    """Fixed padded sizes of a batch. One ``PadSpec`` = one compiled shape."""

    proposals: int = 16
    agents: int = 32
    areas: int = 24
    area_vertices: int = 96
    lanes: int = 64
    lane_vertices: int = 96
    centerline: int = 512

    @staticmethod
    def fit(scenes: Sequence[HostScene], multiple: int = 8) -> "PadSpec":
        """The smallest spec holding every scene, each size rounded up to a multiple of ``multiple``."""

        def up(n: int) -> int:
            return max(multiple, -(-n // multiple) * multiple)

        return PadSpec(
            proposals=up(max(s.num_proposals for s in scenes)),
            agents=up(max(len(s.agents) for s in scenes)),
            areas=up(max(len(s.areas) for s in scenes)),
            area_vertices=up(max(len(a.polygon) for s in scenes for a in s.areas)),
            lanes=up(max([len(s.lanes) for s in scenes] + [1])),
            lane_vertices=up(max([len(l.polygon) for s in scenes for l in s.lanes] + [3])),
            centerline=up(max(s.centerline.shape[0] for s in scenes)),
        )

    def check(self, scene: HostScene) -> None:
        sizes = {
            "proposals": scene.num_proposals,
            "agents": len(scene.agents),
            "areas": len(scene.areas),
            "area_vertices": max(len(a.polygon) for a in scene.areas),
            "lanes": len(scene.lanes),
            "lane_vertices": max([len(l.polygon) for l in scene.lanes] + [0]),
            "centerline": scene.centerline.shape[0],
        }
        for name, n in sizes.items():
            if n > getattr(self, name):
                _fail(scene.id, name, f"at most {getattr(self, name)} (PadSpec.{name})", n)


@dataclasses.dataclass
class BatchInfo:
    """Host-side facts about a padded batch that do not go to the device."""

    scene_ids: list[str]
    origins: np.ndarray  # (B, 2) float64 global position of each scene's ego-centred frame
    num_proposals: np.ndarray  # (B,) real proposals per scene
    proposal_names: list[list[str]]


def _pad_polygons(polys: Sequence[np.ndarray], count: int, verts: int, origin: np.ndarray):
    v = np.full((count, verts, 2), FAR, np.float64)
    vm = np.zeros((count, verts), bool)
    valid = np.zeros((count,), bool)
    for i, p in enumerate(polys):
        n = len(p)
        local = np.asarray(p, np.float64) - origin
        v[i, :n] = local
        v[i, n:] = local[0]
        vm[i, :n] = True
        valid[i] = True
    return v, vm, valid


def _to_local_states(states: np.ndarray, origin: np.ndarray) -> np.ndarray:
    out = np.array(states, np.float64, copy=True)
    out[..., :2] -= origin
    return out


def pad_scene(scene: HostScene, spec: PadSpec) -> tuple[dict, dict]:
    """Numpy (float32 / bool / int32) leaves of one padded ``Scene`` and ``Proposals``, re-centred on ``scene.origin``."""
    if scene.num_proposals < 1:
        _fail(scene.id, "proposals", "at least one proposal to score (give proposals from elsewhere, e.g. --proposals)",
              "none")
    spec.check(scene)
    o = scene.origin
    f32 = np.float32
    av, avm, avalid = _pad_polygons([a.polygon for a in scene.areas], spec.areas, spec.area_vertices, o)
    akind = np.zeros((spec.areas,), np.int32)
    akind[: len(scene.areas)] = [int(a.kind) for a in scene.areas]
    lv, lvm, lvalid = _pad_polygons([l.polygon for l in scene.lanes], spec.lanes, spec.lane_vertices, o)
    lkind = np.zeros((spec.lanes,), np.int32)
    lroute = np.zeros((spec.lanes,), bool)
    lred = np.zeros((spec.lanes, NUM_STEPS), bool)
    for i, lane in enumerate(scene.lanes):
        lkind[i] = int(lane.kind)
        lroute[i] = lane.on_route
        status = scene.traffic_lights.get(lane.id)
        if status is not None:
            lred[i] = np.frombuffer(status.encode(), np.uint8) == ord("R")
    c = scene.centerline.shape[0]
    cl = np.empty((spec.centerline, 2), np.float64)
    cl[:c] = scene.centerline[:, :2] - o
    cl[c:] = cl[c - 1]
    clm = np.arange(spec.centerline) < c

    n = spec.agents
    center = np.full((n, NUM_STEPS, 2), FAR, np.float64)
    heading = np.zeros((n, NUM_STEPS), np.float64)
    velocity = np.zeros((n, NUM_STEPS, 2), np.float64)
    length = np.ones((n,), np.float64)
    width = np.ones((n,), np.float64)
    atype = np.zeros((n,), np.int32)
    present = np.zeros((n, NUM_STEPS), bool)
    avalid_ = np.zeros((n,), bool)
    for i, ag in enumerate(scene.agents):
        pres = ~np.any(np.isnan(ag.track), axis=1)
        present[i] = pres
        center[i, pres] = ag.track[pres, :2] - o
        heading[i, pres] = ag.track[pres, 2]
        velocity[i, pres] = ag.track[pres, 3:5]
        length[i], width[i], atype[i], avalid_[i] = ag.length, ag.width, int(ag.type), True

    k = scene.num_proposals
    states = np.zeros((spec.proposals, NUM_STEPS, STATE_DIM), np.float64)
    states[:k] = _to_local_states(scene.proposal_states, o)
    states[k:] = states[0]  # padded proposals copy proposal 0 (finite, masked out by `valid`)
    previous = np.zeros_like(states)
    has_prev = np.zeros((spec.proposals,), bool)
    if scene.previous_states is not None:
        previous[:k] = _to_local_states(scene.previous_states, o)
        has_prev[:k] = True
    human = np.zeros((NUM_STEPS, STATE_DIM), np.float64)
    if scene.human_states is not None:
        human = _to_local_states(scene.human_states, o)

    scene_leaves = dict(
        history=_to_local_states(scene.history_states, o).astype(f32),
        history_padded=_to_local_states(pad_history(scene.history_states), o).astype(f32),
        map=dict(
            areas=dict(vertices=av.astype(f32), vertex_valid=avm, valid=avalid),
            area_kind=akind,
            lanes=dict(vertices=lv.astype(f32), vertex_valid=lvm, valid=lvalid),
            lane_kind=lkind,
            lane_on_route=lroute,
            lane_red=lred,
            centerline=cl.astype(f32),
            centerline_valid=clm,
        ),
        agents=dict(center=center.astype(f32), heading=heading.astype(f32), velocity=velocity.astype(f32),
                    length=length.astype(f32), width=width.astype(f32), type=atype, present=present, valid=avalid_),
        human=human.astype(f32),
        has_human=np.asarray(scene.human_states is not None),
    )
    prop_leaves = dict(states=states.astype(f32), previous=previous.astype(f32), has_previous=has_prev,
                       valid=np.arange(spec.proposals) < k)
    return scene_leaves, prop_leaves


def _build(tree: dict) -> Scene:
    m = tree["map"]
    return Scene(
        history=tree["history"], history_padded=tree["history_padded"],
        map=MapData(areas=Polygons(**m["areas"]), area_kind=m["area_kind"], lanes=Polygons(**m["lanes"]),
                    lane_kind=m["lane_kind"], lane_on_route=m["lane_on_route"], lane_red=m["lane_red"],
                    centerline=m["centerline"], centerline_valid=m["centerline_valid"]),
        agents=Agents(**tree["agents"]), human=tree["human"], has_human=tree["has_human"],
    )


def batch_scenes(scenes: Sequence[HostScene], spec: PadSpec | None = None,
                 validate: bool = True) -> tuple[Scene, Proposals, BatchInfo]:
    """Pad and stack host scenes into one batch: ``Scene[B]``, ``Proposals[B, K]`` (numpy leaves) and ``BatchInfo``."""
    import jax

    if not scenes:
        raise SceneValidationError("batch_scenes: expected at least one scene, got an empty list")
    if validate:
        for s in scenes:
            validate_host_scene(s)
    spec = spec or PadSpec.fit(scenes)
    parts = [pad_scene(s, spec) for s in scenes]
    stacked_scene = jax.tree.map(lambda *xs: np.stack(xs), *[p[0] for p in parts])
    stacked_props = jax.tree.map(lambda *xs: np.stack(xs), *[p[1] for p in parts])
    info = BatchInfo(
        scene_ids=[s.id for s in scenes],
        origins=np.stack([s.origin for s in scenes]),
        num_proposals=np.array([s.num_proposals for s in scenes]),
        proposal_names=[list(s.proposal_names) for s in scenes],
    )
    return _build(stacked_scene), Proposals(**stacked_props), info


def validate_batch(scene: Scene, proposals: Proposals) -> None:
    """Host-side check of a padded batch built outside ``batch_scenes`` (shapes consistent, values finite)."""
    states = np.asarray(proposals.states)
    if states.ndim < 3 or states.shape[-2:] != (NUM_STEPS, STATE_DIM):
        raise SceneValidationError(f"proposals.states: expected shape (..., K, {NUM_STEPS}, {STATE_DIM}), got {states.shape}")
    batch = states.shape[:-3]
    hist = np.asarray(scene.history_padded)
    if hist.shape != batch + (NUM_HISTORY_PADDED, STATE_DIM):
        raise SceneValidationError(
            f"scene.history_padded: expected shape {batch + (NUM_HISTORY_PADDED, STATE_DIM)} to match proposals batch "
            f"dims {batch}, got {hist.shape}")
    if np.asarray(proposals.valid).shape != states.shape[:-2]:
        raise SceneValidationError(
            f"proposals.valid: expected shape {states.shape[:-2]} (one flag per proposal), got {np.asarray(proposals.valid).shape}")
    for name, arr in (("proposals.states", states), ("scene.agents.center", np.asarray(scene.agents.center)),
                      ("scene.map.areas.vertices", np.asarray(scene.map.areas.vertices))):
        if not np.all(np.isfinite(arr)):
            raise SceneValidationError(f"{name}: expected finite values, got NaN/inf")

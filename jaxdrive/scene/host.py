"""Host scenes: one scene as read from a file or made by the generator (numpy float64, global frame, ragged lists of
polygons and agents), its enums and state layout, validation with errors naming the field, and NAVSIM's history
interpolation. Round-trips losslessly through the ``epdms-scene/1`` JSON format (``jaxdrive.data.scene_json``).
Import these names from ``jaxdrive.scene``."""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxdrive.constants import DT, NUM_STEPS  # noqa: F401  (0.0 .. 4.0 s at 0.1 s; re-exported)
from jaxdrive.errors import UserInputError
from jaxdrive.json_values import is_finite_number

STATE_DIM = 11
NUM_HISTORY = 4  # logged states at -1.5, -1.0, -0.5, 0.0 s
NUM_HISTORY_PADDED = 14  # interpolated states at -1.5 .. -0.2 s used by history comfort
HISTORY_TIMES = (-1.5, -1.0, -0.5, 0.0)


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


HEADING_SLACK = 1e-3  # rad a stored heading may exceed pi by (rounding of a wrapped angle) before it is refused


class SceneValidationError(UserInputError):
    """A scene (or batch) does not satisfy the data model; the message names the field, what was expected and got."""


# Valid ranges of a scene's numbers (docs/scene-format.md, "Valid ranges"), checked on the host in float64 before
# anything is cast to float32. Generous physical bounds: they refuse unit mistakes, garbage and values that overflow
# or lose centimetres in float32, never a real driving scene.
MAX_ABS_COORD = 1e8  # m: |x|, |y| of anything (UTM coordinates are < 1e7)
MAX_FROM_EGO = 1e5  # m: |x - x0|, |y - y0| from the ego's rear axle at t = 0 (float32 resolves < 1 cm there)
MAX_SPEED = 100.0  # m/s: ego velocity_x / velocity_y, agents' vx / vy
MAX_ACCELERATION = 1000.0  # m/s^2: ego acceleration_x / acceleration_y
MAX_STEERING_ANGLE = math.pi / 2  # rad: atan(wheel_base * curvature)
MAX_RATE = 100.0  # rad/s: steering_rate, angular_velocity
MAX_ANGULAR_ACCELERATION = 1000.0  # rad/s^2
MAX_OBJECT_SIZE = 100.0  # m: an agent's length and width (> 0) and height (>= 0)
# a proposal's states[0] is the ego's current state (ego.history.states[-1]); the hand-made sanity fixtures place it
# up to 42.6 m and 1.05 rad away from their history (shared/fixtures/epdms/sanity), so this is the tolerance
START_TOLERANCE_M = 50.0
START_TOLERANCE_RAD = math.pi / 2
#: per state field (StateIndex order): the largest |value| accepted; x and y are bounded by MAX_ABS_COORD and
#: MAX_FROM_EGO
STATE_BOUNDS = np.array([MAX_ABS_COORD, MAX_ABS_COORD, math.pi + HEADING_SLACK, MAX_SPEED, MAX_SPEED, MAX_ACCELERATION,
                         MAX_ACCELERATION, MAX_STEERING_ANGLE + 1e-3, MAX_RATE, MAX_RATE, MAX_ANGULAR_ACCELERATION])
_STATE_UNITS = ("m", "m", "rad", "m/s", "m/s", "m/s^2", "m/s^2", "rad", "rad/s", "rad/s", "rad/s^2")


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

    @property
    def filters_human(self) -> bool:
        """Whether NAVSIM's human penalty filter applies to this scene: it has a logged human trajectory and is an
        ORIGINAL scene (``generator.scene_type`` 0, a converted metric cache's; NAVSIM and GTRS never filter the
        synthetic second-stage scenes)."""
        return self.human_states is not None and self.generator.get("scene_type", 0) == 0

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
        _fail(scene_id, field, f"an array of shape {want}", _described_shape(arr))


def _described_shape(arr: Any) -> str:
    """``arr``'s shape for an error message, or what it is when it is not an array (a nested list, None)."""
    got = getattr(arr, "shape", None)
    return f"shape {got}" if got is not None else f"a {type(arr).__name__}, not a numpy array"


def _check_kind(scene_id: str, field: str, value: Any, kinds: type[enum.IntEnum]) -> None:
    """``value`` a member of ``kinds`` (or its integer value): a name such as "roadblock" is the JSON's spelling."""
    if type(value) is kinds:  # what the readers and the generator give
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value not in kinds._value2member_map_:
        members = ", ".join(f"{kinds.__name__}.{k.name}" for k in kinds)
        _fail(scene_id, field, f"one of {members} (jaxdrive.scene.{kinds.__name__})", repr(value))


def _polygon_area(poly: np.ndarray) -> float:
    x, y = poly[:, 0], poly[:, 1]
    return 0.5 * float(np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y))


def _check_polygon(scene_id: str, field: str, poly: np.ndarray) -> None:
    if not isinstance(poly, np.ndarray) or poly.ndim != 2 or poly.shape[1] != 2:
        _fail(scene_id, field, "a polygon: an array of shape (n, 2)", _described_shape(poly))
    if poly.shape[0] < 3:
        _fail(scene_id, field, "a polygon with at least 3 vertices", f"{poly.shape[0]} vertices")
    _check_finite(scene_id, field, poly)
    if np.any(np.abs(poly) > MAX_ABS_COORD):  # (the area test below would overflow)
        row, col = np.argwhere(np.abs(poly) > MAX_ABS_COORD)[0]
        _fail(scene_id, f"{field}[{row}][{col}] ({'xy'[col]})", f"|{'xy'[col]}| <= {MAX_ABS_COORD:g} m",
              repr(float(poly[row, col])))
    scale = max(1.0, float(np.ptp(poly, axis=0).max()) ** 2)
    if abs(_polygon_area(poly - poly[0])) <= 1e-9 * scale:
        _fail(scene_id, field, "a polygon of non-zero area", "a degenerate (zero-area) polygon")


def concat_rows(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ragged (n_i, d) arrays (e.g. polygons) as one (sum n_i, d) float64 array, the sizes n_i and each one's first
    row index."""
    sizes = np.array([len(a) for a in arrays])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    return np.concatenate([np.asarray(a, np.float64) for a in arrays]), sizes, starts


def _polygons_maybe_bad(polys: list[np.ndarray]) -> np.ndarray:
    """(P,) bool: the polygons ``_check_polygon`` must look at one by one. All ragged (n_i, 2) polygons are checked in
    one pass: shape, finiteness and the shoelace area against twice the degeneracy threshold (a summation order that
    differs from ``_polygon_area``'s cannot move an area across that margin), so a polygon not flagged passes
    ``_check_polygon``; a flagged one may pass too (the per-polygon check decides)."""
    if not polys:
        return np.zeros(0, bool)
    if not all(isinstance(p, np.ndarray) and p.ndim == 2 and p.shape[1] == 2 and p.shape[0] >= 3 for p in polys):
        return np.ones(len(polys), bool)
    pts, sizes, starts = concat_rows(polys)
    finite = np.logical_and.reduceat(np.isfinite(pts).all(axis=1), starts)
    nxt = np.arange(1, pts.shape[0] + 1)
    nxt[starts + sizes - 1] = starts
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite polygons are flagged by `finite`
        rel = pts - np.repeat(pts[starts], sizes, axis=0)
        x, y = rel[:, 0], rel[:, 1]
        area = 0.5 * np.add.reduceat(x * y[nxt] - x[nxt] * y, starts)
        span = (np.maximum.reduceat(pts, starts) - np.minimum.reduceat(pts, starts)).max(axis=1)
        return ~finite | ~(np.abs(area) > 2e-9 * np.maximum(1.0, span ** 2))


def _check_states_range(scene_id: str, field, states: np.ndarray, origin: np.ndarray) -> None:
    """States [..., 11] (finite, checked before) within ``STATE_BOUNDS`` and, for x / y, within ``MAX_FROM_EGO`` of
    ``origin``; the error names the first bad entry (``field(index)``, e.g. "proposals[3].states[0]", then the
    state field's index and name) and its value."""
    states = np.asarray(states, np.float64)
    bad = ~(np.abs(states) <= STATE_BOUNDS)
    if not bad.any():  # then (the origin itself in range) the distance from the ego
        bad[..., :2] = ~(np.abs(states[..., :2] - origin) <= MAX_FROM_EGO)
        if not bad.any():
            return
    idx = tuple(np.argwhere(bad)[0])
    j = idx[-1]
    value = states[idx]
    if j < 2:
        want = (f"|{STATE_FIELDS[j]}| <= {MAX_ABS_COORD:g} m and within {MAX_FROM_EGO:g} m of the ego's current "
                f"position ({origin[j]:.6g})")
    else:
        want = f"|{STATE_FIELDS[j]}| <= {STATE_BOUNDS[j]:.6g} {_STATE_UNITS[j]}"
    _fail(scene_id, f"{field(idx[:-1])}[{j}] ({STATE_FIELDS[j]})", want, repr(float(value)))


def _check_points_range(scene_id: str, fields: list[str], arrays: list[np.ndarray], origin: np.ndarray) -> None:
    """Ragged point arrays [n_i, >= 2] (polygons, a centreline, agent tracks; NaN rows = absent, skipped): x / y within
    ``MAX_ABS_COORD`` and ``MAX_FROM_EGO`` of ``origin``; the error names ``fields[i]``, the row and the value."""
    if not arrays:
        return
    pts = np.concatenate([np.asarray(a, np.float64)[:, :2] for a in arrays])
    with np.errstate(invalid="ignore"):
        bad = (np.abs(pts) > MAX_ABS_COORD) | (np.abs(pts - origin) > MAX_FROM_EGO)
    if not bad.any():
        return
    row, col = np.argwhere(bad)[0]
    ends = np.cumsum([len(a) for a in arrays])
    i = int(np.searchsorted(ends, row, side="right"))
    k = int(row - (ends[i - 1] if i else 0))
    _fail(scene_id, f"{fields[i]}[{k}][{col}] ({'xy'[col]})",
          f"|{'xy'[col]}| <= {MAX_ABS_COORD:g} m and within {MAX_FROM_EGO:g} m of the ego's current position "
          f"({origin[col]:.6g})", repr(float(pts[row, col])))


def start_offsets(scene: HostScene) -> tuple[np.ndarray, np.ndarray]:
    """Per proposal (K,): the distance (m) and the heading difference (rad, wrapped) of its ``states[0]`` from the
    ego's current state ``history_states[-1]``."""
    first = np.asarray(scene.proposal_states, np.float64)[:, 0]
    now = np.asarray(scene.history_states, np.float64)[-1]
    dist = np.hypot(first[:, 0] - now[0], first[:, 1] - now[1])
    dh = np.abs(wrap_angle(first[:, 2] - now[2]))
    return dist, dh


def start_offset_problem(scene: HostScene) -> str | None:
    """None when every proposal starts at the ego's current state (within ``START_TOLERANCE_M`` and
    ``START_TOLERANCE_RAD``), else a sentence naming the first proposal that does not and how far it is."""
    if scene.num_proposals == 0:
        return None
    dist, dh = start_offsets(scene)
    far = (dist > START_TOLERANCE_M) | (dh > START_TOLERANCE_RAD)
    if not far.any():
        return None
    k = int(np.argmax(far))
    name = scene.proposal_names[k] if k < len(scene.proposal_names) else ""
    return (f"field 'proposals[{k}].states[0]' ({name!r}): expected the ego's current state (ego.history.states[-1]) "
            f"within {START_TOLERANCE_M:g} m and {START_TOLERANCE_RAD:.4g} rad, got {dist[k]:.6g} m and {dh[k]:.4g} "
            f"rad away ({int(far.sum())} of {len(far)} proposals)")


def _check_agent(scene_id: str, i: int, agent: Agent) -> None:
    """One agent's track (41 rows of 5 numbers or all-NaN absent rows, headings in range) and box size."""
    _check_shape(scene_id, f"agents[{i}].track", agent.track, (NUM_STEPS, 5))
    nan = np.isnan(agent.track)
    partial = nan.any(axis=1) & ~nan.all(axis=1)
    if partial.any():
        t = int(np.argmax(partial))
        _fail(scene_id, f"agents[{i}].track[{t}]", "5 numbers (x, y, heading, vx, vy) or null (absent)",
              f"a row with NaN in it {agent.track[t].tolist()}")
    present = ~nan.any(axis=1)
    _check_finite(scene_id, f"agents[{i}].track (present rows)", agent.track[present])
    if np.any(np.abs(agent.track[present, 2]) > math.pi + HEADING_SLACK):
        _fail(scene_id, f"agents[{i}].track[:, heading]", "headings in (-pi, pi]",
              f"max |heading| {np.abs(agent.track[present, 2]).max():.4f}")
    speed = np.abs(agent.track[present, 3:5])
    if np.any(speed > MAX_SPEED):
        t, j = np.argwhere(speed > MAX_SPEED)[0]
        _fail(scene_id, f"agents[{i}].track[{int(np.flatnonzero(present)[t])}][{3 + j}] ({('vx', 'vy')[j]})",
              f"|{('vx', 'vy')[j]}| <= {MAX_SPEED:g} m/s", repr(float(agent.track[present, 3 + j][t])))
    size = np.array([agent.length, agent.width], dtype=object)
    if not all(is_finite_number(v, numpy_scalars=True) and v > 0 for v in size):
        _fail(scene_id, f"agents[{i}].length/width", "positive finite box size", f"{agent.length} x {agent.width}")
    for name, v, low in (("length", agent.length, 0.0), ("width", agent.width, 0.0), ("height", agent.height, None)):
        if not is_finite_number(v, numpy_scalars=True) or not ((v > low) if low is not None else (v >= 0.0)) \
                or v > MAX_OBJECT_SIZE:
            want = f"0 {'<' if low is not None else '<='} {name} <= {MAX_OBJECT_SIZE:g} m"
            _fail(scene_id, f"agents[{i}].{name}", want, repr(v))


def _agents_maybe_bad(agents: list[Agent]) -> np.ndarray:
    """(A,) bool: the agents ``_check_agent`` must look at one by one (all of them checked in one pass: an agent not
    flagged passes ``_check_agent``)."""
    if not agents:
        return np.zeros(0, bool)
    if not all(getattr(a.track, "shape", None) == (NUM_STEPS, 5) for a in agents):
        return np.ones(len(agents), bool)
    tracks = np.stack([a.track for a in agents])
    nan = np.isnan(tracks)
    absent = nan.all(axis=2)
    infinite = np.isinf(tracks).any(axis=2)
    with np.errstate(invalid="ignore"):
        bad_rows = ((nan.any(axis=2) & ~absent) | infinite | (np.abs(tracks[..., 2]) > math.pi + HEADING_SLACK)
                    | (np.abs(tracks[..., 3:5]) > MAX_SPEED).any(axis=2))
    try:
        size = np.array([[a.length, a.width, a.height] for a in agents], np.float64)
    except (OverflowError, TypeError, ValueError):  # an int beyond float64, a non-number: _check_agent names it
        return np.ones(len(agents), bool)
    ok_size = (np.isfinite(size).all(axis=1) & (size[:, :2] > 0).all(axis=1) & (size[:, 2] >= 0)
               & (size <= MAX_OBJECT_SIZE).all(axis=1))
    return bad_rows.any(axis=1) | ~ok_size


def validate_host_scene(scene: HostScene, allow_offset_start: bool = False) -> HostScene:
    """Check every field of ``scene``: shapes, finiteness, the valid ranges of its numbers (``STATE_BOUNDS``,
    ``MAX_FROM_EGO``, ...; in float64), ids, polygons, and that every proposal starts at the ego's current state
    (``start_offset_problem``; not with ``allow_offset_start``). Raises ``SceneValidationError`` naming the first bad
    field, its index and value. Returns the scene."""
    sid = scene.id
    if not isinstance(sid, str) or not sid:
        _fail(str(sid), "id", "a non-empty string", repr(sid))
    _check_shape(sid, "ego.history.states", scene.history_states, (NUM_HISTORY, STATE_DIM))
    _check_finite(sid, "ego.history.states", scene.history_states)
    origin = np.asarray(scene.history_states[-1, :2], np.float64)
    _check_states_range(sid, lambda i: f"ego.history.states[{i[0]}]", scene.history_states, origin)
    _check_shape(sid, "proposals[*].states", scene.proposal_states, (None, NUM_STEPS, STATE_DIM))
    k = scene.proposal_states.shape[0]  # 0 is valid: proposals may come from elsewhere (pad_scene needs >= 1)
    _check_finite(sid, "proposals[*].states", scene.proposal_states)
    headings = scene.proposal_states[..., StateIndex.HEADING]
    if np.any(np.abs(headings) > math.pi + HEADING_SLACK):
        _fail(sid, "proposals[*].states[:, heading]", "headings in (-pi, pi]", f"max |heading| {np.abs(headings).max():.4f}")
    _check_states_range(sid, lambda i: f"proposals[{i[0]}].states[{i[1]}]", scene.proposal_states, origin)
    for name, seq in (("proposals[*].name", scene.proposal_names), ("proposals[*].family", scene.proposal_families)):
        if len(seq) != k:
            _fail(sid, name, f"{k} entries (one per proposal)", f"{len(seq)}")
    if len(set(scene.proposal_names)) != k:
        _fail(sid, "proposals[*].name", "unique names", "duplicates")
    if scene.previous_states is not None:
        _check_shape(sid, "proposals[*].previous_plan", scene.previous_states, (k, NUM_STEPS, STATE_DIM))
        _check_finite(sid, "proposals[*].previous_plan", scene.previous_states)
        _check_states_range(sid, lambda i: f"proposals[{i[0]}].previous_plan[{i[1]}]", scene.previous_states, origin)
    if scene.human_states is not None:
        _check_shape(sid, "human.states", scene.human_states, (NUM_STEPS, STATE_DIM))
        _check_finite(sid, "human.states", scene.human_states)
        _check_states_range(sid, lambda i: f"human.states[{i[0]}]", scene.human_states, origin)
    if not allow_offset_start:
        problem = start_offset_problem(scene)
        if problem:
            raise SceneValidationError(f"scene {sid!r}: {problem}; score it anyway with --allow-offset-start")
    if not scene.areas:
        _fail(sid, "map.drivable_areas", "at least one drivable polygon", "an empty list")
    area_ids = set()
    suspect = _polygons_maybe_bad([area.polygon for area in scene.areas])
    for i, area in enumerate(scene.areas):
        if suspect[i]:
            _check_polygon(sid, f"map.drivable_areas[{i}].polygon", area.polygon)
        _check_kind(sid, f"map.drivable_areas[{i}].kind", area.kind, AreaKind)
        if area.id in area_ids:
            _fail(sid, f"map.drivable_areas[{i}].id", "unique area ids", f"duplicate {area.id!r}")
        area_ids.add(area.id)
    lane_ids = set()
    suspect = _polygons_maybe_bad([lane.polygon for lane in scene.lanes])
    for i, lane in enumerate(scene.lanes):
        if suspect[i]:
            _check_polygon(sid, f"map.lanes[{i}].polygon", lane.polygon)
        _check_kind(sid, f"map.lanes[{i}].kind", lane.kind, LaneKind)
        if lane.id in lane_ids:
            _fail(sid, f"map.lanes[{i}].id", "unique lane ids", f"duplicate {lane.id!r}")
        lane_ids.add(lane.id)
    _check_shape(sid, "route.centerline", scene.centerline, (None, 3))
    if scene.centerline.shape[0] < 2:
        _fail(sid, "route.centerline", "at least 2 points", f"{scene.centerline.shape[0]}")
    _check_finite(sid, "route.centerline", scene.centerline)
    if np.any(np.abs(scene.centerline[:, 2]) > math.pi + HEADING_SLACK):
        row = int(np.argmax(np.abs(scene.centerline[:, 2]) > math.pi + HEADING_SLACK))
        _fail(sid, f"route.centerline[{row}][2] (heading)", "headings in (-pi, pi]", repr(scene.centerline[row, 2]))
    _check_points_range(sid, [f"map.drivable_areas[{i}].polygon" for i in range(len(scene.areas))]
                        + [f"map.lanes[{i}].polygon" for i in range(len(scene.lanes))] + ["route.centerline"],
                        [a.polygon for a in scene.areas] + [lane.polygon for lane in scene.lanes] + [scene.centerline],
                        origin)
    connectors = {lane.id for lane in scene.lanes if lane.kind == LaneKind.LANE_CONNECTOR}
    for lc_id, status in scene.traffic_lights.items():
        if lc_id not in connectors:
            got = ("the id of a lane (not a connector)" if lc_id in lane_ids else
                   "the id of a drivable area" if lc_id in area_ids else "an unknown id")
            _fail(sid, f"traffic_lights[{lc_id!r}]", "the id of a lane connector in map.lanes", got)
        if len(status) != NUM_STEPS or set(status) - set("GYRU"):
            _fail(sid, f"traffic_lights[{lc_id!r}].status", f"{NUM_STEPS} characters from G/Y/R/U", repr(status))
    agent_ids = set()
    suspect = _agents_maybe_bad(scene.agents)
    for i, agent in enumerate(scene.agents):
        if agent.id in agent_ids:
            _fail(sid, f"agents[{i}].id", "unique agent ids", f"duplicate {agent.id!r}")
        agent_ids.add(agent.id)
        if suspect[i]:
            _check_agent(sid, i, agent)
        _check_kind(sid, f"agents[{i}].type", agent.type, AgentType)
    _check_points_range(sid, [f"agents[{i}].track" for i in range(len(scene.agents))],
                        [a.track for a in scene.agents], origin)
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

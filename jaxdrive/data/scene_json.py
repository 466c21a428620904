"""Read and write ``epdms-scene/1`` JSON files (``shared/spec/scene-json.md``) as ``HostScene``s.

Reading is strict: a missing key, a wrong type or an unknown enum value raises ``SceneFileError`` naming the file and
the offending key path. Unknown top-level keys are kept in ``HostScene.extra`` so a read-write round trip is lossless.
"""

from __future__ import annotations

import collections
import json
import os
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import orjson

from jaxdrive import atomic
from jaxdrive import constants as C

from jaxdrive.errors import UserInputError
from jaxdrive.scene import (NUM_STEPS, STATE_DIM, STATE_FIELDS, Agent, AgentType, Area, AreaKind, HostScene, Lane,
                            LaneKind, SceneValidationError, validate_host_scene)

FORMAT = "epdms-scene/1"
_KNOWN_KEYS = {"format", "id", "units", "generator", "time", "ego", "map", "route", "traffic_lights", "agents",
               "agent_track_fields", "proposals", "expected", "human"}
_VEHICLE = {"length": C.EGO_LENGTH, "width": C.EGO_WIDTH, "height": C.EGO_HEIGHT, "front_length": C.EGO_FRONT_LENGTH,
            "rear_length": C.EGO_REAR_LENGTH,
            "wheel_base": C.EGO_WHEEL_BASE, "rear_axle_to_center": C.EGO_REAR_AXLE_TO_CENTER}
_TRACK_FIELDS = ["x", "y", "heading", "velocity_x", "velocity_y"]


class SceneFileError(UserInputError):
    """A scene file is malformed. The message names the file and the key path."""


class _Reader:
    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, msg: str):
        raise SceneFileError(f"{self.source}: key {path!r}: {msg}")

    def get(self, obj: Any, key: str, path: str, typ=None):
        if not isinstance(obj, dict):
            self.fail(path, f"expected an object, got {type(obj).__name__}")
        if key not in obj:
            self.fail(f"{path}.{key}" if path else key, "missing")
        val = obj[key]
        numeric = typ is not None and bool not in (typ if isinstance(typ, tuple) else (typ,))
        if numeric and isinstance(val, bool):  # bool is an int subclass: true is not a length
            self.fail(f"{path}.{key}" if path else key, "expected a number, got a boolean")
        if typ is not None and not isinstance(val, typ):
            names = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
            self.fail(f"{path}.{key}" if path else key, f"expected {names}, got {type(val).__name__}")
        return val

    def number(self, obj: Any, key: str, path: str) -> float:
        """The JSON number ``obj[key]`` as a float; an integer beyond float64 (400 digits) is an error, not inf."""
        val = self.get(obj, key, path, (int, float))
        try:
            return float(val)
        except OverflowError:
            self.fail(f"{path}.{key}", "expected a number within the float64 range, got an integer of "
                                       f"{len(str(abs(val)))} digits")

    def array(self, val: Any, path: str, shape: tuple, allow_null_rows: bool = False) -> np.ndarray:
        if allow_null_rows and isinstance(val, list):
            width = shape[-1]
            val = [[np.nan] * width if row is None else row for row in val]
        if _holds_bool(val, len(shape)):
            self.fail(path, f"expected numbers of shape {shape}, got a boolean among them")
        try:
            arr = np.asarray(val, dtype=np.float64)
        except (TypeError, ValueError, OverflowError) as e:  # OverflowError: an integer beyond float64
            self.fail(path, f"expected numbers of shape {shape}, got non-numeric data ({e})")
        if arr.ndim != len(shape) or any(s is not None and s != g for s, g in zip(shape, arr.shape)):
            want = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ")"
            self.fail(path, f"expected shape {want}, got {arr.shape}")
        return arr

    def arrays(self, vals: list, path_of: Callable[[int], str], shape: tuple,
               allow_null_rows: bool = False) -> list[np.ndarray]:
        """``array`` of each of ``vals`` (``shape[0]`` may be None: lengths may differ), converted in one go when all
        of them are well formed; otherwise one by one, so the error names the first bad one (``path_of(i)``)."""
        if vals and all(type(v) is list for v in vals):
            if allow_null_rows:
                nan_row = [np.nan] * shape[-1]
                vals = [[nan_row if row is None else row for row in v] for v in vals]
            sizes = [len(v) for v in vals]
            rows = list(chain.from_iterable(vals))
            flat = None
            if rows and not _holds_bool(rows, len(shape)):
                try:
                    flat = np.asarray(rows, dtype=np.float64)
                except (TypeError, ValueError, OverflowError):
                    pass
            if (flat is not None and flat.ndim == len(shape) and flat.shape[1:] == tuple(shape[1:])
                    and (shape[0] is None or all(n == shape[0] for n in sizes))):
                return np.split(flat, np.cumsum(sizes)[:-1])
        return [self.array(v, path_of(i), shape, allow_null_rows) for i, v in enumerate(vals)]

    def enum(self, enum_cls, val: Any, path: str):
        if not isinstance(val, str) or val.upper() not in enum_cls.__members__:
            allowed = ", ".join(m.lower() for m in enum_cls.__members__)
            self.fail(path, f"expected one of {allowed}, got {val!r}")
        return enum_cls[val.upper()]


def _holds_bool(val: Any, depth: int) -> bool:
    """Whether a nested list holds a JSON boolean (numpy would read true as 1.0). ``depth``: the nesting expected of
    a numeric array (2 for rows of numbers); at that depth one pass over the element types decides, anything else
    (deeper lists, strings, nulls) takes the element-by-element walk."""
    items = val
    try:
        for _ in range(depth - 1):
            items = chain.from_iterable(items)
        types = set(map(type, items))
    except TypeError:  # not nested as expected: numpy's conversion names the problem, the walk the booleans
        return _walk_holds_bool(val)
    if bool in types:
        return True
    return not types <= {float, int} and _walk_holds_bool(val)


def _walk_holds_bool(val: Any) -> bool:
    stack = [val]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, bool):
            return True
    return False


_AREA_KINDS = {"roadblock": AreaKind.ROADBLOCK, "intersection": AreaKind.INTERSECTION, "carpark": AreaKind.CARPARK,
               "drivable_area": AreaKind.DRIVABLE_AREA}


#: the time grid every scene uses (jaxdrive reads no other): where a file states its times, they must be these
_TIMES = {"time.dt": 0.1, "time.num_future_steps": NUM_STEPS - 1, "time.history_times": [-1.5, -1.0, -0.5, 0.0],
          "time.previous_plan_start": -0.5, "ego.history.times": [-1.5, -1.0, -0.5, 0.0]}
TIME_TOLERANCE = 1e-6  # s


def _check_times(r: "_Reader", d: dict) -> None:
    """The optional time fields (``_TIMES``), where given, state the grid jaxdrive scores on (a file written on
    another grid would be scored as if it were on this one)."""
    for path, want in _TIMES.items():
        obj = d
        for key in path.split("."):
            obj = obj.get(key) if isinstance(obj, dict) else None
        if obj is None:
            continue
        try:
            got = np.asarray(obj, np.float64)
            ok = got.shape == np.shape(want) and bool(np.all(np.abs(got - np.asarray(want)) <= TIME_TOLERANCE))
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            r.fail(path, f"expected {want} (jaxdrive's time grid: {NUM_STEPS} states at 0.1 s, history at -1.5, -1.0, "
                         f"-0.5, 0.0 s), got {obj!r}")


def scene_from_dict(d: dict, source: str = "<dict>", validate: bool = True,
                    allow_offset_start: bool = False) -> HostScene:
    """Parse one scene dict; ``source`` names it in errors. ``allow_offset_start``: proposals need not start at the
    ego's current state (``jaxdrive.scene.host.start_offset_problem``)."""
    r = _Reader(source)
    if not isinstance(d, dict):
        raise SceneFileError(f"{source}: expected a JSON object at top level, got {type(d).__name__}")
    fmt = r.get(d, "format", "", str)
    if fmt != FORMAT:
        r.fail("format", f"expected {FORMAT!r}, got {fmt!r}")
    sid = r.get(d, "id", "", str)
    ego = r.get(d, "ego", "", dict)
    fields = ego.get("state_fields")
    if fields is not None and list(fields) != list(STATE_FIELDS):
        r.fail("ego.state_fields", f"expected {list(STATE_FIELDS)}, got {fields}")
    _check_times(r, d)
    hist = r.get(ego, "history", "ego", dict)
    history = r.array(r.get(hist, "states", "ego.history"), "ego.history.states", (4, STATE_DIM))

    mp = r.get(d, "map", "", dict)
    areas = []
    area_items = r.get(mp, "drivable_areas", "map", list)
    area_polys = r.arrays([r.get(a, "polygon", f"map.drivable_areas[{i}]") for i, a in enumerate(area_items)],
                          lambda i: f"map.drivable_areas[{i}].polygon", (None, 2))
    for i, (a, polygon) in enumerate(zip(area_items, area_polys)):
        p = f"map.drivable_areas[{i}]"
        kind = r.get(a, "kind", p, str)
        if kind not in _AREA_KINDS:
            r.fail(f"{p}.kind", f"expected one of {sorted(_AREA_KINDS)}, got {kind!r}")
        areas.append(Area(id=r.get(a, "id", p, str), kind=_AREA_KINDS[kind], polygon=polygon))
    lanes = []
    lane_items = r.get(mp, "lanes", "map", list)
    lane_polys = r.arrays([r.get(lane, "polygon", f"map.lanes[{i}]") for i, lane in enumerate(lane_items)],
                          lambda i: f"map.lanes[{i}].polygon", (None, 2))
    for i, (lane, polygon) in enumerate(zip(lane_items, lane_polys)):
        p = f"map.lanes[{i}]"
        lanes.append(Lane(id=r.get(lane, "id", p, str), kind=r.enum(LaneKind, r.get(lane, "kind", p), f"{p}.kind"),
                          on_route=bool(r.get(lane, "on_route", p, bool)), parent_id=str(lane.get("parent_id", "")),
                          polygon=polygon))
    route = r.get(d, "route", "", dict)
    centerline = r.array(r.get(route, "centerline", "route"), "route.centerline", (None, 3))
    lane_ids = r.get(route, "lane_ids", "route", list)
    repeated = [(i, n) for i, n in collections.Counter(map(str, lane_ids)).items() if n > 1]
    if repeated:
        r.fail("route.lane_ids", f"expected each lane id once, got {repeated[0][0]!r} {repeated[0][1]} times")
    on_route = {lane.id for lane in lanes if lane.on_route}  # a lane id given twice in map.lanes: validation names it
    if set(lane_ids) != on_route:
        r.fail("route.lane_ids", f"expected exactly the lanes with on_route=true {sorted(on_route)}, got {sorted(lane_ids)}")

    lights: dict[str, str] = {}
    for i, tl in enumerate(r.get(d, "traffic_lights", "", list)):
        p = f"traffic_lights[{i}]"
        lc_id = r.get(tl, "lane_connector_id", p, str)
        if lc_id in lights:  # a dict would keep the last status silently
            r.fail(f"{p}.lane_connector_id", f"expected one entry per lane connector, got {lc_id!r} again "
                                             f"(traffic_lights[{list(lights).index(lc_id)}])")
        lights[lc_id] = r.get(tl, "status", p, str)

    agents = []
    agent_items = r.get(d, "agents", "", list)
    tracks = r.arrays([r.get(a, "track", f"agents[{i}]", list) for i, a in enumerate(agent_items)],
                      lambda i: f"agents[{i}].track", (NUM_STEPS, 5), allow_null_rows=True)
    for i, (a, track) in enumerate(zip(agent_items, tracks)):
        p = f"agents[{i}]"
        agents.append(Agent(
            id=r.get(a, "id", p, str), type=r.enum(AgentType, r.get(a, "type", p), f"{p}.type"),
            length=r.number(a, "length", p), width=r.number(a, "width", p),
            height=r.number(a, "height", p) if "height" in a else 0.0, role=str(a.get("role", "")),
            track=track))

    props = r.get(d, "proposals", "", list)  # may be empty: proposals can come from elsewhere
    names = [r.get(pr, "name", f"proposals[{i}]", str) for i, pr in enumerate(props)]
    fams = [str(pr.get("family", "")) for pr in props]
    states = r.arrays([r.get(pr, "states", f"proposals[{i}]") for i, pr in enumerate(props)],
                      lambda i: f"proposals[{i}].states", (NUM_STEPS, STATE_DIM))
    with_prev = [i for i, pr in enumerate(props) if "previous_plan" in pr]
    if with_prev and len(with_prev) != len(props):
        r.fail("proposals[*].previous_plan", f"expected on all {len(props)} proposals or none, got {len(with_prev)}")
    prevs = r.arrays([pr["previous_plan"] for pr in props] if with_prev else [],
                     lambda i: f"proposals[{i}].previous_plan", (NUM_STEPS, STATE_DIM))
    kinds = [str(pr.get("previous_plan_kind", "")) for pr in props]
    human = None
    if "human" in d:
        human = r.array(r.get(r.get(d, "human", "", dict), "states", "human"), "human.states", (NUM_STEPS, STATE_DIM))

    scene = HostScene(
        id=sid, history_states=history, areas=areas, lanes=lanes, centerline=centerline, traffic_lights=lights,
        agents=agents, proposal_states=np.stack(states) if states else np.zeros((0, NUM_STEPS, STATE_DIM)),
        proposal_names=names, proposal_families=fams,
        previous_states=np.stack(prevs) if prevs else None, previous_kinds=kinds if prevs else None,
        human_states=human, generator=dict(d.get("generator", {})), expected=d.get("expected"),
        extra={k: v for k, v in d.items() if k not in _KNOWN_KEYS},
    )
    if validate:
        try:
            validate_host_scene(scene, allow_offset_start=allow_offset_start)
        except SceneValidationError as e:
            raise SceneFileError(f"{source}: {e}") from None
    return scene


def _rows(arr: np.ndarray) -> list:
    return np.round(np.asarray(arr, np.float64), 6).tolist()


def scene_to_dict(scene: HostScene) -> dict:
    """The ``epdms-scene/1`` dict of a host scene (inverse of ``scene_from_dict``)."""
    d: dict[str, Any] = {
        "format": FORMAT,
        "id": scene.id,
        "units": "SI: m, s, m/s, m/s^2, rad, rad/s, rad/s^2",
        "generator": scene.generator,
        "time": {"dt": 0.1, "num_future_steps": NUM_STEPS - 1, "history_times": [-1.5, -1.0, -0.5, 0.0],
                 "previous_plan_start": -0.5},
        "ego": {"vehicle": dict(_VEHICLE), "reference_point": "rear_axle", "state_fields": list(STATE_FIELDS),
                "history": {"times": [-1.5, -1.0, -0.5, 0.0], "states": _rows(scene.history_states)}},
        "map": {
            "drivable_areas": [{"id": a.id, "kind": a.kind.name.lower(), "polygon": _rows(a.polygon)} for a in scene.areas],
            "lanes": [{"id": l.id, "kind": l.kind.name.lower(), "on_route": bool(l.on_route), "parent_id": l.parent_id,
                       "polygon": _rows(l.polygon)} for l in scene.lanes],
        },
        "route": {"lane_ids": scene.route_lane_ids(), "centerline": _rows(scene.centerline)},
        "traffic_lights": [{"lane_connector_id": k, "status": v} for k, v in scene.traffic_lights.items()],
        "agents": [
            {"id": a.id, "type": a.type.name.lower(), "length": a.length, "width": a.width, "height": a.height,
             "role": a.role,
             "track": [None if np.any(np.isnan(row)) else np.round(row, 6).tolist() for row in a.track]}
            for a in scene.agents],
        "agent_track_fields": list(_TRACK_FIELDS),
        "proposals": [],
    }
    for i in range(scene.num_proposals):
        p = {"name": scene.proposal_names[i], "family": scene.proposal_families[i],
             "states": _rows(scene.proposal_states[i])}
        if scene.previous_states is not None:
            p["previous_plan"] = _rows(scene.previous_states[i])
            p["previous_plan_kind"] = (scene.previous_kinds or [""] * scene.num_proposals)[i]
        d["proposals"].append(p)
    if scene.human_states is not None:
        d["human"] = {"states": _rows(scene.human_states)}
    if scene.expected is not None:
        d["expected"] = scene.expected
    d.update(scene.extra)
    return d


def _parse_json(data: bytes, path: Path) -> Any:
    """orjson's parse (the same values as the stdlib's, ~1 ms faster per 200 KB scene, most of it numbers); what it
    refuses (the NaN / Infinity literals Python's json writes, other encodings, invalid JSON) goes to the stdlib,
    which accepts the first two and names the error of the last."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SceneFileError(f"{path}: not valid JSON ({e})") from None


def read_scene(path: str | os.PathLike, validate: bool = True, allow_offset_start: bool = False) -> HostScene:
    """Read one scene file. Raises ``SceneFileError`` naming the file (and key) on any problem (``validate``: every
    field checked, ranges included; ``allow_offset_start``: proposals may start away from the ego's current state)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SceneFileError(f"{path}: cannot read ({e.strerror})") from None
    return scene_from_dict(_parse_json(data, path), source=str(path), validate=validate,
                           allow_offset_start=allow_offset_start)


def write_scene(scene: HostScene, path: str | os.PathLike) -> None:
    """Write atomically (temp file + rename)."""
    atomic.write_text(path, json.dumps(scene_to_dict(scene), separators=(",", ":")))


#: JSON files that sit beside scene files but are not scenes (a fixture folder's index)
NOT_SCENE_FILES = ("index.json",)


#: files that mark a folder whose JSON files are not scenes: a scene store (``jaxdrive.data.store.STORE_META``), a
#: scoring run (its manifest and errors file side by side)
NOT_SCENE_FOLDER_MARKS = (("jaxdrive_store.json",), ("manifest.json", "errors.jsonl"))


def not_scene_files(directory: str | os.PathLike) -> list[Path]:
    """The ``*.json`` files under ``directory`` known not to be scenes: ``index.json`` files, and the files of scene
    store and scoring run folders (``NOT_SCENE_FOLDER_MARKS``) and of the folders below them."""
    directory = Path(directory)
    marked = {f.parent for marks in NOT_SCENE_FOLDER_MARKS for f in directory.rglob(marks[0])
              if all((f.parent / m).is_file() for m in marks)}
    return sorted(p for p in directory.rglob("*.json") if p.is_file() and (
        p.name in NOT_SCENE_FILES or any(folder in marked for folder in (p.parent, *p.parent.parents))))


def scene_files(directory: str | os.PathLike) -> list[Path]:
    """Scene JSON files of a directory and its subfolders, sorted by relative path (``not_scene_files`` excluded)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise SceneFileError(f"{directory}: not a directory")
    skip = set(not_scene_files(directory))
    return sorted((p for p in directory.rglob("*.json") if p.is_file() and p not in skip),
                  key=lambda p: p.relative_to(directory).parts)


def iter_scene_dir(directory: str | os.PathLike, on_error=None) -> Iterator[HostScene]:
    """Yield the scenes of a directory. A bad file raises, or if ``on_error(path, exc)`` is given, is reported and skipped."""
    for path in scene_files(directory):
        try:
            yield read_scene(path)
        except SceneFileError as e:
            if on_error is None:
                raise
            on_error(path, e)

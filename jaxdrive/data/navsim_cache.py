"""NAVSIM metric caches -> ``HostScene``s, read with a restricted unpickler (no NAVSIM / nuPlan install, no code run).

A metric cache is one lzma-compressed pickle per scene token of NAVSIM's ``MetricCache`` dataclass
(``navsim/planning/metric_caching/metric_cache.py``). A plain ``pickle.load`` would import and call whatever the file
names; ``CacheUnpickler`` instead resolves only the 32 globals NAVSIM's caches contain (``ALLOWED``, plus the numpy 1.x
spellings of the numpy ones) and refuses anything else with ``UnsafeCacheError`` naming the global. The NAVSIM / nuPlan
classes become plain ``Record``s that keep the pickled state as attributes (or constructor arguments as ``args``);
numpy arrays and scalars are rebuilt by numpy, polygons by ``shapely.from_wkb``, paths as ``PurePosixPath``.

``cache_to_scene`` maps a loaded cache to an ``epdms-scene/1`` scene (``shared/fixtures/navsim_cache/README.md``,
"Reading the scene back"):

* map: every polygon of ``drivable_area_map`` with its layer (ROADBLOCK / INTERSECTION / CARPARK_AREA / DRIVABLE_AREA
  -> drivable areas; LANE / LANE_CONNECTOR -> lanes, ``on_route`` = id in ``route_lane_ids``); parent ids are not in a
  cache (empty);
* route: ``route_lane_ids`` and the ``centerline`` PDMPath (x, y, heading);
* lights: the on-route red-light tokens of ``observation._occupancy_maps_tl`` per step ('R'); a cache keeps nothing
  else, so other steps are 'U' (unknown, which no metric reads); a red light on a connector beyond the cached map
  (NAVSIM's map covers 100 m around the ego, its lights the whole route) adds that connector, with the light's
  polygon, on route;
* agents: the 41 frames ``current_tracked_objects + future_tracked_objects`` (box centre, heading, global velocity,
  type, box size; static objects get velocity 0), in the order the frames list them;
* ego history: ``past_human_trajectory`` (4 rear-axle states at -1.5 .. 0 s);
* human: ``human_trajectory`` (8 poses at 2 Hz, ego frame) simulated with NAVSIM's LQR tracker + bicycle from the ego
  state (``jaxdrive.sim.simulate_trajectories``), the states NAVSIM's human penalty filter scores; absent if the cache
  has none;
* reference (top-level ``reference`` key): PDM-Closed's ``trajectory`` poses at 0.1 s (``poses`` [51, 3], global) and
  the 41 states NAVSIM scores as its row 0 (``states`` [41, 11]: the poses tracked from the ego state);
* proposals: none (they come from elsewhere: ``--proposals``, a vocabulary, an agent's predictions).
"""

from __future__ import annotations

import io
import lzma
import math
import os
import pickle
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.scene import (NUM_STEPS, STATE_DIM, Agent, AgentType, Area, AreaKind, HostScene, Lane, LaneKind,
                            SceneValidationError, StateIndex, validate_host_scene)

CACHE_FILE = "metric_cache.pkl"

# The 32 globals of NAVSIM's metric caches (fixtures README, "Pickled globals").
_RECORDS = (
    "navsim.common.dataclasses.Trajectory",
    "navsim.common.enums.SceneFrameType",
    "navsim.planning.metric_caching.metric_cache.MapParameters",
    "navsim.planning.metric_caching.metric_cache.MetricCache",
    "navsim.planning.simulation.planner.pdm_planner.observation.pdm_observation.PDMObservation",
    "navsim.planning.simulation.planner.pdm_planner.observation.pdm_occupancy_map.PDMDrivableMap",
    "navsim.planning.simulation.planner.pdm_planner.observation.pdm_occupancy_map.PDMOccupancyMap",
    "navsim.planning.simulation.planner.pdm_planner.utils.pdm_path.PDMPath",
    "nuplan.common.actor_state.agent.Agent",
    "nuplan.common.actor_state.car_footprint.CarFootprint",
    "nuplan.common.actor_state.dynamic_car_state.DynamicCarState",
    "nuplan.common.actor_state.ego_state.EgoState",
    "nuplan.common.actor_state.oriented_box.OrientedBox",
    "nuplan.common.actor_state.scene_object.SceneObjectMetadata",
    "nuplan.common.actor_state.state_representation.StateSE2",
    "nuplan.common.actor_state.state_representation.StateVector2D",
    "nuplan.common.actor_state.state_representation.TimePoint",
    "nuplan.common.actor_state.static_object.StaticObject",
    "nuplan.common.actor_state.tracked_objects.TrackedObjects",
    "nuplan.common.actor_state.tracked_objects_types.TrackedObjectType",
    "nuplan.common.actor_state.vehicle_parameters.VehicleParameters",
    "nuplan.common.maps.maps_datatypes.SemanticMapLayer",
    "nuplan.planning.simulation.observation.observation_type.DetectionsTracks",
    "nuplan.planning.simulation.trajectory.interpolated_trajectory.InterpolatedTrajectory",
    "nuplan.planning.simulation.trajectory.trajectory_sampling.TrajectorySampling",
)


def _numpy_globals() -> dict[str, Any]:
    from numpy._core import multiarray, numeric

    table = {"numpy.dtype": np.dtype, "numpy.ndarray": np.ndarray}
    for prefix in ("numpy._core", "numpy.core"):  # numpy 2.x and 1.x spellings (NAVSIM pins numpy 1.23)
        table[f"{prefix}.multiarray._reconstruct"] = multiarray._reconstruct
        table[f"{prefix}.multiarray.scalar"] = multiarray.scalar
        table[f"{prefix}.numeric._frombuffer"] = numeric._frombuffer
    return table


def _from_wkb(data: bytes):
    import shapely

    if not isinstance(data, (bytes, bytearray)):
        raise UnsafeCacheError(f"shapely.io.from_wkb: expected WKB bytes, got {type(data).__name__}")
    return shapely.from_wkb(bytes(data))


class CacheFileError(UserInputError):
    """A metric-cache file cannot be read or does not hold what a MetricCache holds; the message names the file."""


class UnsafeCacheError(CacheFileError, pickle.UnpicklingError):
    """A cache names a global outside the allowed list (or misuses an allowed one); nothing from it was run. A
    ``CacheFileError`` (a user's input refused: exit 2 naming the file), as a garbled global name is one too."""


class Record:
    """A NAVSIM / nuPlan object as plain data: pickled state as attributes, constructor arguments as ``args``."""

    qualname = "?"

    def __init__(self, *args):
        self.args = args

    def __repr__(self) -> str:
        return f"<{self.qualname} {sorted(vars(self))}>"


def _record_class(qualname: str) -> type:
    return type(qualname.rsplit(".", 1)[1], (Record,), {"qualname": qualname})


_RECORD_CLASSES = {name: _record_class(name) for name in _RECORDS}
ALLOWED: dict[str, Any] = {**_RECORD_CLASSES, **_numpy_globals(), "pathlib.PosixPath": PurePosixPath,
                           "shapely.io.from_wkb": _from_wkb}


class CacheUnpickler(pickle.Unpickler):
    """Unpickler that resolves only ``ALLOWED`` globals; any other raises ``UnsafeCacheError`` with the name."""

    def find_class(self, module: str, name: str):
        key = f"{module}.{name}"
        if key not in ALLOWED:
            raise UnsafeCacheError(f"refused global {key!r}: not one of the classes a NAVSIM metric cache holds")
        return ALLOWED[key]




def load_cache(path: str | os.PathLike) -> Record:
    """Read one ``metric_cache.pkl`` (lzma pickle) with ``CacheUnpickler``; returns the ``MetricCache`` record."""
    path = Path(path)
    try:
        with lzma.open(path, "rb") as f:
            data = f.read()
    except (OSError, lzma.LZMAError, EOFError) as e:  # EOFError: an empty or truncated file (an interrupted cache job)
        raise CacheFileError(f"{path}: cannot read an lzma-compressed metric cache ({e})") from None
    try:
        obj = CacheUnpickler(io.BytesIO(data)).load()
    except UnsafeCacheError as e:
        raise UnsafeCacheError(f"{path}: {e}") from None
    except Exception as e:  # truncated / malformed pickle
        raise CacheFileError(f"{path}: not a readable metric cache pickle ({type(e).__name__}: {e})") from None
    if getattr(obj, "qualname", "").rsplit(".", 1)[-1] != "MetricCache":
        raise CacheFileError(f"{path}: expected a pickled MetricCache, got {type(obj).__name__}")
    return obj


def find_caches(directory: str | os.PathLike) -> list[tuple[str, Path]]:
    """(token, path) of every ``metric_cache.pkl`` under ``directory`` (token = parent folder name), sorted by token.

    Caches are found by walking the tree: NAVSIM's metadata CSVs hold paths of the machine that wrote them.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CacheFileError(f"{directory}: not a directory")
    found = {}
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        if CACHE_FILE in files:
            path = Path(root) / CACHE_FILE
            token = path.parent.name
            if token in found:
                raise CacheFileError(f"{directory}: token {token!r} appears twice ({found[token]} and {path})")
            found[token] = path
    return sorted(found.items())


# ----------------------------------------------------------------------------------------------------------------------
# Record -> HostScene
# ----------------------------------------------------------------------------------------------------------------------

# nuPlan's SemanticMapLayer values
_LAYER_AREA = {17: AreaKind.ROADBLOCK, 1: AreaKind.INTERSECTION, 15: AreaKind.CARPARK, 5: AreaKind.DRIVABLE_AREA}
_LAYER_LANE = {0: LaneKind.LANE, 11: LaneKind.LANE_CONNECTOR}
_AREA_PREFIX = {AreaKind.ROADBLOCK: "roadblock", AreaKind.INTERSECTION: "intersection", AreaKind.CARPARK: "carpark",
                AreaKind.DRIVABLE_AREA: "drivable_area"}
RED_LIGHT_PREFIX = "red_light_"


def _attr(obj: Any, name: str, where: str):
    try:
        return getattr(obj, name)
    except AttributeError:
        raise CacheFileError(f"{where}: expected field {name!r} on {getattr(obj, 'qualname', type(obj).__name__)}") from None


def _enum_value(rec: Any, where: str) -> int:
    args = getattr(rec, "args", None)
    if not args or not isinstance(args[0], (int, np.integer)):
        raise CacheFileError(f"{where}: expected an enum record with an int value, got {rec!r}")
    return int(args[0])


def _se2(rec: Any) -> tuple[float, float, float]:
    return float(rec.x), float(rec.y), float(rec.heading)


def _vec(rec: Any) -> tuple[float, float]:
    return float(rec._x), float(rec._y)


def _rear_axle(ego: Any) -> tuple[float, float, float]:
    """Rear-axle pose of an EgoState record: nuPlan's cached ``CarFootprint.rear_axle``, else derived from the centre."""
    fp = ego._car_footprint
    cached = getattr(fp, "rear_axle", None)
    if cached is not None:
        return _se2(cached)
    x, y, h = _se2(fp._center)
    vp = fp._vehicle_parameters.args  # width, front_length, rear_length, cog, wheel_base, name, type, height
    d = (vp[1] + vp[2]) / 2.0 - vp[2]
    return x - d * math.cos(h), y - d * math.sin(h), h


def ego_state_array(ego: Any) -> np.ndarray:
    """An EgoState record as an 11-field rear-axle state (``StateIndex`` layout, global frame)."""
    dyn = ego._dynamic_car_state
    out = np.zeros(STATE_DIM, np.float64)
    out[[StateIndex.X, StateIndex.Y, StateIndex.HEADING]] = _rear_axle(ego)
    out[[StateIndex.VELOCITY_X, StateIndex.VELOCITY_Y]] = _vec(dyn._rear_axle_velocity_2d)
    out[[StateIndex.ACCELERATION_X, StateIndex.ACCELERATION_Y]] = _vec(dyn._rear_axle_acceleration_2d)
    out[StateIndex.STEERING_ANGLE] = float(ego._tire_steering_angle)
    out[StateIndex.STEERING_RATE] = float(dyn._tire_steering_rate)
    out[StateIndex.ANGULAR_VELOCITY] = float(dyn._angular_velocity)
    out[StateIndex.ANGULAR_ACCELERATION] = float(dyn._angular_acceleration)
    return out


def _trajectory_states(traj: Any, where: str) -> list:
    args = getattr(traj, "args", None)
    if not args or not isinstance(args[0], list):
        raise CacheFileError(f"{where}: expected an InterpolatedTrajectory of EgoStates")
    return args[0]


def _ring(polygon) -> np.ndarray:
    """Exterior ring of a shapely polygon without its closing vertex (float64 [n, 2])."""
    ring = np.asarray(polygon.exterior.coords, np.float64)[:, :2]
    return ring[:-1] if len(ring) > 1 and np.array_equal(ring[0], ring[-1]) else ring


def _map(cache: Any, where: str) -> tuple[list[Area], list[Lane]]:
    dam = _attr(cache, "drivable_area_map", where)
    tokens, layers, geometries = dam.args[0], dam.args[1], dam.args[2]
    on_route = set(_attr(cache, "route_lane_ids", where))
    areas, lanes = [], []
    for token, layer, geom in zip(tokens, layers, list(geometries)):
        value = _enum_value(layer, f"{where}: drivable_area_map layer of {token!r}")
        if value in _LAYER_AREA:
            areas.append(Area(id=str(token), kind=_LAYER_AREA[value], polygon=_ring(geom)))
        elif value in _LAYER_LANE:
            lanes.append(Lane(id=str(token), kind=_LAYER_LANE[value], on_route=str(token) in on_route, parent_id="",
                              polygon=_ring(geom)))
        else:
            raise CacheFileError(f"{where}: drivable_area_map polygon {token!r} has SemanticMapLayer {value}, expected "
                                 "ROADBLOCK, INTERSECTION, CARPARK_AREA, DRIVABLE_AREA, LANE or LANE_CONNECTOR")
    return areas, lanes


def _objects(frame: Any) -> list:
    return list(frame.tracked_objects.tracked_objects)


def _agents(cache: Any, where: str) -> list[Agent]:
    """Agents of the 41 frames, ordered so every frame's listing order is kept (stable topological merge)."""
    frames = list(_attr(cache, "current_tracked_objects", where)) + list(_attr(cache, "future_tracked_objects", where))
    if len(frames) != NUM_STEPS:
        raise CacheFileError(f"{where}: expected {NUM_STEPS} frames (current + future tracked objects), got {len(frames)}")
    tracks: dict[str, np.ndarray] = {}
    first: dict[str, Any] = {}
    after: dict[str, set] = {}
    for k, frame in enumerate(frames):
        previous = None
        for obj in _objects(frame):
            tid = str(obj._metadata.track_token)
            if tid not in tracks:
                tracks[tid] = np.full((NUM_STEPS, 5), np.nan)
                first[tid] = obj
                after[tid] = set()
            x, y, h = _se2(obj._box._center)
            vx, vy = _vec(obj._velocity) if hasattr(obj, "_velocity") else (0.0, 0.0)
            tracks[tid][k] = (x, y, h, vx, vy)
            if previous is not None:
                after[tid].add(previous)
            previous = tid
    order, placed = [], set()
    pending = list(tracks)  # first-appearance order breaks ties
    while pending:
        for tid in pending:
            if after[tid] <= placed:
                break
        else:  # inconsistent orders across frames: fall back to first appearance
            tid = pending[0]
        order.append(tid)
        placed.add(tid)
        pending.remove(tid)
    out = []
    for tid in order:
        obj = first[tid]
        box = obj._box
        type_value = _enum_value(obj._tracked_object_type, f"{where}: object {tid!r} type")
        if not 0 <= type_value <= AgentType.GENERIC_OBJECT:
            raise CacheFileError(f"{where}: object {tid!r} has TrackedObjectType {type_value}, expected 0..6")
        out.append(Agent(id=tid, type=AgentType(type_value), length=float(box._length), width=float(box._width),
                         height=float(box._height), track=tracks[tid]))
    return out


def _red_lights(cache: Any, lanes: list[Lane], where: str) -> tuple[dict[str, str], list[Lane]]:
    """On-route red lights per step (connector id -> 41-char status) and the connectors they name that the drivable
    map lacks, as on-route lanes with the red light's polygon.

    NAVSIM's red lights cover every connector of the whole route (``MetricCacheProcessor._load_route_dicts``), but its
    drivable map holds only the roadblocks within 100 m of the ego (``PDMDrivableMap.from_simulation``): a red light
    further along the route names a connector the map lacks. NAVSIM's scorer still sees it (its geometry is in the
    observation), so it is kept, as a connector of its own."""
    obs = _attr(cache, "observation", where)
    per_step = list(_attr(obs, "_occupancy_maps_tl", f"{where}: observation"))
    if len(per_step) != NUM_STEPS:
        raise CacheFileError(f"{where}: observation._occupancy_maps_tl: expected {NUM_STEPS} steps, got {len(per_step)}")
    known = {lane.id: lane.kind for lane in lanes}
    status: dict[str, list[str]] = {}
    outside: dict[str, Lane] = {}
    for k, entry in enumerate(per_step):
        tokens, geometries = entry[:2] if isinstance(entry, tuple) else entry.args[:2]
        for token, geom in zip(tokens, list(geometries)):
            lc = str(token)[len(RED_LIGHT_PREFIX):] if str(token).startswith(RED_LIGHT_PREFIX) else str(token)
            if lc in known and known[lc] != LaneKind.LANE_CONNECTOR:
                raise CacheFileError(f"{where}: red light {token!r} at step {k} names a lane, not a connector")
            if lc not in known and lc not in outside:
                outside[lc] = Lane(id=lc, kind=LaneKind.LANE_CONNECTOR, on_route=True, parent_id="",
                                   polygon=_ring(geom))
            status.setdefault(lc, ["U"] * NUM_STEPS)[k] = "R"
    return {lc: "".join(s) for lc, s in status.items()}, list(outside.values())


def _reference(cache: Any, ego: np.ndarray, where: str) -> dict | None:
    """PDM-Closed's cached plan: poses at 0.1 s and NAVSIM's re-simulation of their first 41 (its scored row 0)."""
    traj = getattr(cache, "trajectory", None)
    if traj is None:
        return None
    from jaxdrive.sim.reference import track_poses

    t0 = int(_attr(cache, "timepoint", where).time_us)
    states = _trajectory_states(traj, f"{where}: trajectory")
    times = np.array([(int(s._time_point.time_us) - t0) / 1e6 for s in states])
    poses = np.array([_rear_axle(s) for s in states], np.float64)
    grid = np.round(np.arange(NUM_STEPS) * 0.1, 6)
    if len(times) < NUM_STEPS or not np.allclose(times[:NUM_STEPS], grid, atol=1e-6):
        raise CacheFileError(f"{where}: trajectory: expected PDM-Closed poses every 0.1 s from t0, got times "
                             f"{times[:5].tolist()}...")
    simulated = track_poses(ego[None], poses[None, :NUM_STEPS])[0]
    return {"name": "pdm_closed", "times": times.round(6).tolist(), "poses": np.round(poses, 6).tolist(),
            "states": np.round(simulated, 6).tolist()}


def _human(cache: Any, ego: np.ndarray, where: str) -> np.ndarray | None:
    traj = getattr(cache, "human_trajectory", None)
    if traj is None:
        return None
    from jaxdrive.sim import simulate_trajectories

    poses = np.asarray(_attr(traj, "poses", f"{where}: human_trajectory"), np.float64)
    if poses.shape != (8, 3):
        raise CacheFileError(f"{where}: human_trajectory.poses: expected shape (8, 3), got {poses.shape}")
    return simulate_trajectories(ego, poses)


def cache_to_scene(cache: Any, token: str, source: str = "<cache>") -> HostScene:
    """The ``HostScene`` (no proposals) of a ``MetricCache`` record. ``source`` names the file in errors."""
    where = f"{source}"
    try:
        areas, lanes = _map(cache, where)
        t0 = int(_attr(cache, "timepoint", where).time_us)
        past = _trajectory_states(_attr(cache, "past_human_trajectory", where), f"{where}: past_human_trajectory")
        if len(past) != 4:
            raise CacheFileError(f"{where}: past_human_trajectory: expected 4 EgoStates, got {len(past)}")
        history = np.stack([ego_state_array(s) for s in past])
        ego = ego_state_array(_attr(cache, "ego_state", where))
        centerline = np.array([_se2(p) for p in _attr(cache, "centerline", where).args[0]], np.float64)
        lights, light_lanes = _red_lights(cache, lanes, where)
        scene = HostScene(
            id=token, history_states=history, areas=areas, lanes=lanes + light_lanes, centerline=centerline,
            traffic_lights=lights, agents=_agents(cache, where),
            proposal_states=np.zeros((0, NUM_STEPS, STATE_DIM)), proposal_names=[], proposal_families=[],
            human_states=_human(cache, ego, where),
            generator={"source": "navsim_metric_cache", "log_name": str(getattr(cache, "log_name", "")),
                       "scene_type": _enum_value(cache.scene_type, where) if getattr(cache, "scene_type", None) else 0,
                       "timepoint_us": t0},
        )
        reference = _reference(cache, ego, where)
    except CacheFileError:
        raise
    except (AttributeError, IndexError, TypeError, ValueError) as e:
        raise CacheFileError(f"{where}: unexpected MetricCache structure ({type(e).__name__}: {e})") from None
    if reference is not None:
        scene.extra["reference"] = reference
    if light_lanes:
        scene.generator["red_light_connectors_outside_map"] = [lane.id for lane in light_lanes]
    try:  # the ranges of docs/scene-format.md: a garbled number (e.g. a speed of 1e300 m/s) was converted silently
        validate_host_scene(scene)
    except SceneValidationError as e:
        raise CacheFileError(f"{where}: {e}") from None
    return scene


def read_cache_scene(path: str | os.PathLike, token: str | None = None) -> HostScene:
    """Load and convert one cache file; the token defaults to its parent folder's name."""
    path = Path(path)
    return cache_to_scene(load_cache(path), token or path.parent.name, str(path))


# ----------------------------------------------------------------------------------------------------------------------
# CLI: jaxdrive scenes from-navsim CACHE_DIR --out DIR [--store | --resume]
# ----------------------------------------------------------------------------------------------------------------------


def add_from_navsim_parser(scenes_sub) -> None:
    """Register ``jaxdrive scenes from-navsim`` on the ``scenes`` subcommand's subparsers."""
    p = scenes_sub.add_parser("from-navsim", help="convert NAVSIM metric caches (metric_cache.pkl, found by walking "
                              "CACHE_DIR) into epdms-scene/1 JSON files, one per token, without proposals")
    p.add_argument("cache_dir", type=Path, help="NAVSIM metric-cache directory (walked for metric_cache.pkl)")
    p.add_argument("--out", type=Path, required=True, help="output directory for <token>.json (with --store: the "
                   "scene store to create)")
    p.add_argument("--store", action="store_true", help="write one binary scene store (jaxdrive.data.store) to --out "
                   "instead of JSON files")
    p.add_argument("--resume", action="store_true", help="continue an interrupted conversion: skip the caches whose "
                   "<token>.json in --out is not older than the cache file (not with --store)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_from_navsim)


def run_from_navsim(args) -> int:
    """Exit 0: all converted; 2: CACHE_DIR unusable or holds no cache; 3: some caches refused/unreadable (named);
    130: interrupted (the scene files written so far are kept; ``--resume`` continues)."""
    import sys

    from tqdm.auto import tqdm

    from jaxdrive.cli import EXIT_INTERRUPTED
    from jaxdrive.data.scene_json import write_scene

    if args.resume and args.store:
        raise UserInputError("--resume: not with --store (the store is written whole at the end, so an interrupted --store "
                         "run leaves nothing to continue); run the same command without --resume")
    try:
        caches = find_caches(args.cache_dir)
    except CacheFileError as e:
        raise UserInputError(f"CACHE_DIR: {e}") from None
    if not caches:
        raise UserInputError(f"CACHE_DIR {args.cache_dir}: no {CACHE_FILE} found under it")
    if args.store:
        from jaxdrive.data.store import is_store, write_store

        if is_store(args.out):
            raise UserInputError(f"--out {args.out}: already holds a scene store; choose another directory")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserInputError(f"--out {args.out}: cannot create the directory ({e.strerror})") from None
    done = converted_tokens(caches, args.out) if args.resume else set()
    if args.resume:
        print(f"skipped {len(done)} caches already converted in {args.out}")
    todo = [(token, path) for token, path in caches if token not in done]
    failed, written = [], set(done)  # skipped files were written by this conversion too: no warning names them

    def converted():
        for token, path in tqdm(todo, unit="cache", disable=args.no_progress, desc="from-navsim"):
            try:
                yield token, read_cache_scene(path, token)
            except (CacheFileError, UnsafeCacheError) as e:
                failed.append(str(e))

    try:
        if args.store:
            try:
                write_store((scene for _, scene in converted()), args.out)
            except ValueError:  # no scene to write: every cache refused (named below)
                if len(failed) < len(caches):
                    raise
        else:
            for token, scene in converted():
                write_scene(scene, args.out / f"{token}.json")
                written.add(token)
    except KeyboardInterrupt:
        kept = (f"converted scenes are kept in {args.out}; continue with the same arguments plus --resume"
                if not args.store else "the store is written whole at the end, so none was kept; run the same "
                "command again")
        print(f"\ninterrupted: {kept}", file=sys.stderr)
        return EXIT_INTERRUPTED
    for msg in failed:
        print(f"jaxdrive scenes from-navsim: not converted: {msg}", file=sys.stderr)
    print(f"wrote {len(todo) - len(failed)} scenes to {args.out} ({len(failed)} caches not converted)")
    others = [] if args.store else other_scene_files(args.out, written)
    if others:
        print(f"jaxdrive scenes from-navsim: warning: --out {args.out} also holds {len(others)} scene file(s) this "
              f"run did not write (e.g. {others[0]}), which every command reading the folder reads too; convert into "
              f"a new folder to keep them apart", file=sys.stderr)
    return 3 if failed else 0


def converted_tokens(caches: list[tuple[str, Path]], out: Path) -> set[str]:
    """The tokens of ``caches`` (``find_caches``) whose ``out/<token>.json`` exists and is not older (mtime) than the
    cache file: what ``--resume`` skips. Scene files are written whole (``write_scene``), so one that exists is
    complete."""
    done = set()
    for token, path in caches:
        try:
            if (out / f"{token}.json").stat().st_mtime_ns >= path.stat().st_mtime_ns:
                done.add(token)
        except FileNotFoundError:
            continue
    return done


def other_scene_files(out: Path, written: set[str]) -> list[Path]:
    """The scene files under ``out`` (``scene_json.scene_files``) other than the ``<token>.json`` of ``written``: an
    earlier conversion's, or the old file of a cache refused this time."""
    from jaxdrive.data.scene_json import scene_files

    return [p for p in scene_files(out) if p.parent != out or p.stem not in written]

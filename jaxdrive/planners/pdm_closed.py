"""PDM-Closed, NAVSIM's reference planner, on a jaxdrive scene: ``plan(host_scene) -> dict``.

Stages (NAVSIM's ``AbstractPDMClosedPlanner._get_closed_loop_trajectory``; parameters in
``shared/fixtures/pdm_closed/README.md``):

1. planner view (host): three paths (the route centreline and its parallels at -1 m and +1 m, + = left), the objects
   observed at t = 0 within 100 m of the ego centre (nearest 50 vehicles, 25 pedestrians, 10 bicycles, 50 static
   objects) forecast at constant velocity along their heading on a 0.2 s grid, the on-route connectors red at t = 0 as
   obstacles; objects overlapping the ego at t = 0 (a red light: containing it) are not leaders;
2. IDM unrolling of 3 x 5 proposals (``idm_unroll.unroll``, jitted, float64 re-centred on the ego);
3. NAVSIM's LQR + bicycle tracking of every proposal's 41 poses from the real ego state (``jaxdrive.sim``);
4. scoring on the planner view with the EPDMS kernels: EP normalised over the 15, history comfort 1 (the planner
   passes no history), ``pdm_score`` = M x (5 EP + 5 TTC + 2 LK + 2 HC) / 14, raw progress and EP in float64 (the
   fast proposals often differ by micrometres of progress; the argmax must break those near-ties like NAVSIM);
5. ``np.argmax`` (first best).

``plan_batch`` runs many scenes: stage 2 vmapped over chunks of scenes padded to common sizes, stages 3-4 batched.
Parity: equal to NAVSIM's planner on all 61 fixture scenes (``tests/test_pdm_closed.py``), every stage to the
fixtures' 6-decimal rounding.

The trajectory NAVSIM then scores (its metric cache's ``trajectory``) is the selected proposal's first 41 poses
re-simulated from the ego state, i.e. stage 3's row: returned as ``states``.

Where the scene stands in for nuPlan's map API (the fixtures' S1-S6): the route is ``route.lane_ids`` (no route
correction), the centreline is ``route.centerline`` as given, the speed limit is an argument (None -> NAVSIM's 15 m/s
fallback), the drivable map is every scene polygon.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jaxdrive.constants import EGO_LENGTH, EGO_REAR_AXLE_TO_CENTER, EGO_WIDTH, NUM_STEPS
from jaxdrive.errors import UserInputError
from jaxdrive.planners.idm_unroll import (IDMParams, PlannerInputs, Unrolled, corridor_window, extend_batch,
                                         unroll_batch)
from jaxdrive.rules.epdms import PROGRESS_THRESHOLD, score as score_batch
from jaxdrive.scene import STATE_DIM, Agent, AgentType, HostScene, LaneKind, PadSpec, batch_scenes
from jaxdrive.sim.reference import track_poses

LATERAL_OFFSETS = (0.0, -1.0, 1.0)  # path order: centreline, then NAVSIM's lateral_offsets [-1, +1] (m, + = left)
SPEED_LIMIT_FRACTIONS = (0.2, 0.4, 0.6, 0.8, 1.0)
FALLBACK_TARGET_VELOCITY = 15.0  # m/s, used when the speed limit is unknown
MAP_RADIUS = 100.0  # m, objects farther from the ego centre are not observed
MAX_DYNAMIC = {AgentType.VEHICLE: 50, AgentType.PEDESTRIAN: 25, AgentType.BICYCLE: 10}
MAX_STATIC = 50
_MIN_SCORE_PAD = PadSpec(proposals=16, agents=32, areas=32, area_vertices=128, lanes=64, lane_vertices=128,
                         centerline=512)  # the scoring view's least padded sizes (few compiled shapes)
_unroll_batch_jit = jax.jit(unroll_batch, static_argnums=(1, 2))
_extend_batch_jit = jax.jit(extend_batch, static_argnums=(3, 4))
_score_jit = jax.jit(score_batch)


def _bucket(n: int, least: int = 8) -> int:
    """Padded size: the next power of two, at least ``least`` (few compiled shapes)."""
    return max(least, 1 << max(n - 1, 0).bit_length())


def _box(center: np.ndarray, heading: float, length: float, width: float) -> np.ndarray:
    """``jaxdrive.geometry.box_corners`` in float64 numpy (global coordinates on the host): [FL, RL, RR, FR]."""
    u = np.array([np.cos(heading), np.sin(heading)])
    n = np.array([-u[1], u[0]])
    hl, hw = 0.5 * length, 0.5 * width
    return np.stack([center + hl * u + hw * n, center - hl * u + hw * n, center - hl * u - hw * n,
                     center + hl * u - hw * n])


def _centroid(polygon: np.ndarray) -> np.ndarray:
    """Area centroid of a simple polygon (shapely ``centroid``)."""
    p = polygon - polygon[0]
    q = np.roll(p, -1, axis=0)
    cross = p[:, 0] * q[:, 1] - q[:, 0] * p[:, 1]
    area = 0.5 * cross.sum()
    c = ((p + q) * cross[:, None]).sum(axis=0) / (6.0 * area)
    return c + polygon[0]


def _paths(centerline: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The three proposal paths [3, C, 3] (x, y, unwrapped heading) and their cumulative progress [3, C]."""
    heading = centerline[:, 2]
    paths, progress = [], []
    for offset in LATERAL_OFFSETS:
        x = centerline[:, 0] + np.cos(heading + np.pi / 2) * offset
        y = centerline[:, 1] + np.sin(heading + np.pi / 2) * offset
        paths.append(np.stack([x, y, np.unwrap(heading)], axis=-1))
        progress.append(np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(x), np.diff(y)))]))
    return np.stack(paths), np.stack(progress)


@dataclasses.dataclass
class _Observed:
    """The planner's objects at t = 0 (global frame), in NAVSIM's token order: static, dynamic by type, red lights."""

    ids: list[str]
    polygons: list[np.ndarray]
    dxy: np.ndarray  # [N, 2]
    heading: np.ndarray  # [N]
    speed: np.ndarray  # [N]
    is_agent: np.ndarray  # [N] bool
    is_red_light: np.ndarray  # [N] bool
    agents: list[Agent]  # the observed scene agents (for the scoring view)


def _observe(scene: HostScene) -> _Observed:
    """``PDMObservation.update`` at t = 0: the objects present (``track[0]`` not null) within ``MAP_RADIUS`` of the
    ego centre, the nearest per class up to NAVSIM's caps, moving along their heading (reversed when the velocity
    points backwards) at their speed; then the on-route connectors red at t = 0."""
    ego = scene.history_states[-1]
    ego_center = ego[:2] + EGO_REAR_AXLE_TO_CENTER * np.array([np.cos(ego[2]), np.sin(ego[2])])
    seen = [a for a in scene.agents if not np.isnan(a.track[0]).any()
            and np.hypot(*(a.track[0, :2] - ego_center)) <= MAP_RADIUS]
    dist = lambda a: np.hypot(*(a.track[0, :2] - ego_center))  # noqa: E731
    static = sorted([a for a in seen if not a.type.is_agent], key=dist)[:MAX_STATIC]
    dynamic = [a for kind, cap in MAX_DYNAMIC.items()
               for a in sorted([b for b in seen if b.type == kind], key=dist)[:cap]]
    kept = static + dynamic
    ids, polygons, dxy, heading, speed = [], [], [], [], []
    for a in kept:
        x, y, h, vx, vy = a.track[0]
        ids.append(a.id)
        polygons.append(_box(np.array([x, y]), h, a.length, a.width))
        v = float(np.hypot(vx, vy))
        forward = abs(np.arctan2(np.sin(h - np.arctan2(vy, vx)), np.cos(h - np.arctan2(vy, vx)))) < np.pi / 2
        track_heading = h if forward else h + np.pi
        dxy.append([np.cos(track_heading) * v, np.sin(track_heading) * v] if a.type.is_agent else [0.0, 0.0])
        heading.append(h)
        speed.append(v)
    lanes = {lane.id: lane for lane in scene.lanes}
    red = [lc for lc, status in scene.traffic_lights.items()
           if status[0] == "R" and lc in lanes and lanes[lc].on_route and lanes[lc].kind == LaneKind.LANE_CONNECTOR]
    for lc in red:
        ids.append(f"red_light_{lc}")
        polygons.append(np.asarray(lanes[lc].polygon, np.float64))
        dxy.append([0.0, 0.0])
        heading.append(0.0)
        speed.append(0.0)
    n_obj = len(kept)
    return _Observed(ids=ids, polygons=polygons, dxy=np.asarray(dxy, np.float64).reshape(-1, 2),
                     heading=np.asarray(heading, np.float64), speed=np.asarray(speed, np.float64),
                     is_agent=np.array([a.type.is_agent for a in kept] + [False] * len(red), bool),
                     is_red_light=np.array([False] * n_obj + [True] * len(red), bool), agents=kept)


def str_tree_order(envelopes: np.ndarray, capacity: int = 10) -> list[int]:
    """The order in which shapely's ``STRtree(geoms, node_capacity)`` (GEOS sort-tile-recursive) visits its items
    in a query: leaves packed bottom-up, each level sorted by envelope-centre x into ceil(sqrt(ceil(n / capacity)))
    vertical slices, each slice sorted by centre y and cut into nodes of ``capacity``; depth-first in node order.

    Args: envelopes [N, 4] (min x, min y, max x, max y). Returns item indices in visiting order.
    """
    level = [(np.asarray(e, np.float64), [i]) for i, e in enumerate(envelopes)]
    while len(level) > 1:
        n = len(level)
        slices = int(np.ceil(np.sqrt(np.ceil(n / capacity))))
        per = int(np.ceil(n / slices))
        level.sort(key=lambda node: node[0][0] + node[0][2])
        parents = []
        for start in range(0, n, per):
            part = sorted(level[start:start + per], key=lambda node: node[0][1] + node[0][3])
            for c in range(0, len(part), capacity):
                kids = part[c:c + capacity]
                env = np.concatenate([np.min([k[0][:2] for k in kids], axis=0),
                                      np.max([k[0][2:] for k in kids], axis=0)])
                parents.append((env, [i for k in kids for i in k[1]]))
        level = parents
    return level[0][1] if level else []


def _ranks(observed: "_Observed", frames: int, update_rate: int, dt: float, size: int) -> np.ndarray:
    """[frames, size] int32: each object's position in the query order of every observation frame (padding last)."""
    ranks = np.full((frames, size), size, np.int32)
    for m in range(frames):
        shift = m * update_rate * dt * observed.dxy
        env = np.array([np.concatenate([(p + d).min(axis=0), (p + d).max(axis=0)])
                        for p, d in zip(observed.polygons, shift)]).reshape(-1, 4)
        for position, i in enumerate(str_tree_order(env)):
            ranks[m, i] = position
    return ranks


def _collided(ego: np.ndarray, observed: _Observed) -> np.ndarray:
    """Objects NAVSIM's observation records as collided at t = 0 (overlapping the ego box; a red light: containing
    it): never leaders. [N] bool."""
    from jaxdrive.geometry import box_in_polygon, box_intersects_polygon

    box = _box(ego[:2] + EGO_REAR_AXLE_TO_CENTER * np.array([np.cos(ego[2]), np.sin(ego[2])]), ego[2], EGO_LENGTH,
               EGO_WIDTH)
    out = []
    with jax.enable_x64(True):
        for poly, red in zip(observed.polygons, observed.is_red_light):
            out.append(bool(box_in_polygon(box, poly)) if red else bool(box_intersects_polygon(box, poly)))
    return np.array(out, bool)


@dataclasses.dataclass(frozen=True)
class PlannerSizes:
    """Padded sizes of the unrolling kernel's inputs (one compiled program per sizes and chunk)."""

    centerline: int = 512
    objects: int = 32
    vertices: int = 64

    def grown(self, scene_sizes: "PlannerSizes") -> "PlannerSizes":
        """These sizes, grown (to powers of two) where ``scene_sizes`` needs more."""
        return PlannerSizes(*(max(a, _bucket(b, a)) for a, b in zip(dataclasses.astuple(self),
                                                                      dataclasses.astuple(scene_sizes))))


def _needed(scene: HostScene, observed: _Observed) -> PlannerSizes:
    return PlannerSizes(len(scene.centerline), len(observed.ids), max([len(p) for p in observed.polygons] + [4]))


def planner_inputs(scene: HostScene, observed: _Observed, sizes: PlannerSizes,
                   speed_limit: float | None = None) -> tuple[PlannerInputs, np.ndarray]:
    """The unrolling kernel's inputs (float64, re-centred on the ego rear axle, padded to ``sizes``) and the origin."""
    ego = np.asarray(scene.history_states[-1], np.float64)
    origin = ego[:2].copy()
    paths, progress = _paths(np.asarray(scene.centerline, np.float64))
    c, n, v = sizes.centerline, sizes.objects, sizes.vertices
    paths = np.concatenate([paths, np.repeat(paths[:, -1:], c - paths.shape[1], axis=1)], axis=1)
    progress = np.concatenate([progress, np.repeat(progress[:, -1:], c - progress.shape[1], axis=1)], axis=1)
    paths[..., :2] -= origin
    polygons = np.full((n, v, 2), 1e6)  # padding: far away, never valid
    centroids = np.zeros((n, 2))
    for i, poly in enumerate(observed.polygons):
        polygons[i] = np.concatenate([poly, np.repeat(poly[:1], v - len(poly), axis=0)]) - origin
        centroids[i] = _centroid(poly) - origin
    valid = np.zeros(n, bool)
    valid[: len(observed.ids)] = ~_collided(ego, observed)

    def pad(a, fill=0):
        return np.concatenate([a, np.full((n - len(a),) + a.shape[1:], fill, a.dtype)])

    limit = FALLBACK_TARGET_VELOCITY if speed_limit is None else float(speed_limit)
    local_ego = ego.copy()
    local_ego[:2] = 0.0
    params = IDMParams()
    frames = params.trajectory_steps // params.update_rate + 1
    inputs = PlannerInputs(paths=paths, progress=progress, ego=local_ego, obj_polygons=polygons,
                           obj_centroids=centroids, obj_dxy=pad(observed.dxy), obj_heading=pad(observed.heading),
                           obj_speed=pad(observed.speed), obj_is_agent=pad(observed.is_agent, False),
                           obj_is_red_light=pad(observed.is_red_light, False), obj_valid=valid,
                           obj_rank=_ranks(observed, frames, params.update_rate, params.dt, n),
                           target_velocities=np.asarray(SPEED_LIMIT_FRACTIONS, np.float64) * limit)
    return inputs, origin


def scoring_view(scene: HostScene, observed: _Observed, states: np.ndarray) -> HostScene:
    """The scene as PDM-Closed's scorer sees it, with ``states`` [K, 41, 11] as proposals: the observed objects
    forecast at constant velocity (frame k at 0.2 s x k // 2), light states of t = 0 held, no human."""
    frames = (np.arange(NUM_STEPS) // 2) * 0.2
    agents = []
    for a in observed.agents:
        x, y, h, vx, vy = a.track[0]
        d = observed.dxy[observed.ids.index(a.id)]
        track = np.stack([x + frames * d[0], y + frames * d[1], np.full(NUM_STEPS, h), np.full(NUM_STEPS, vx),
                          np.full(NUM_STEPS, vy)], axis=-1)
        agents.append(dataclasses.replace(a, track=track))
    k = states.shape[0]
    return dataclasses.replace(
        scene, agents=agents, traffic_lights={lc: s[0] * NUM_STEPS for lc, s in scene.traffic_lights.items()},
        proposal_states=states, proposal_names=[f"pdm{i}" for i in range(k)], proposal_families=[""] * k,
        previous_states=None, previous_kinds=None, human_states=None, expected=None)


def _project(points: np.ndarray, line: np.ndarray) -> np.ndarray:
    """shapely ``LineString.project`` in float64: arc length of the nearest point (first nearest segment) [n]."""
    a, d = line[:-1], np.diff(line, axis=0)
    seg_len2 = np.sum(d * d, axis=-1)
    rel = points[:, None, :] - a[None]
    t = np.clip(np.sum(rel * d[None], axis=-1) / np.where(seg_len2 > 0, seg_len2, 1.0), 0.0, 1.0)
    t = np.where(seg_len2 > 0, t, 0.0)
    dist2 = np.sum((rel - t[..., None] * d[None]) ** 2, axis=-1)
    i = np.argmin(dist2, axis=-1)
    seg_len = np.sqrt(seg_len2)
    start = np.concatenate([[0.0], np.cumsum(seg_len)])
    return start[i] + seg_len[i] * t[np.arange(len(points)), i]


def raw_progress(states: np.ndarray, centerline: np.ndarray) -> np.ndarray:
    """NAVSIM's raw ego progress [K] (float64): box-centre projection on the centreline, end minus start, >= 0 [m]."""
    h = states[:, [0, -1], 2]
    centers = states[:, [0, -1], :2] + EGO_REAR_AXLE_TO_CENTER * np.stack([np.cos(h), np.sin(h)], axis=-1)
    arc = _project(centers.reshape(-1, 2), np.asarray(centerline, np.float64)[:, :2]).reshape(-1, 2)
    return np.maximum(arc[:, 1] - arc[:, 0], 0.0)


def score_spec(views: list[HostScene]) -> PadSpec:
    """The padded sizes that hold every view of ``views`` (powers of two, at least ``_MIN_SCORE_PAD``): only the
    views' maps, agents and proposal counts matter, not their proposals' states."""
    from jaxdrive.vocab.core import pad_for

    spec = None
    for view in views:
        spec = pad_for(view, _bucket(view.num_proposals, 16), spec)
    return PadSpec(**{f.name: max(getattr(spec, f.name), getattr(_MIN_SCORE_PAD, f.name))
                      for f in dataclasses.fields(PadSpec)})


def score_views(views: list[HostScene], spec: PadSpec | None = None) -> list[dict[str, np.ndarray]]:
    """PDM-Closed's scoring of each view's proposals (one padded batch, of ``spec``'s sizes; default
    ``score_spec(views)``): sub-scores and ``pdm_score`` (float64, HC = 1) per proposal."""
    scene, props, _ = batch_scenes(views, spec or score_spec(views), validate=False)
    out = jax.device_get(_score_jit(scene, props))
    results = []
    for b, view in enumerate(views):
        k = view.num_proposals
        sub = {f: np.asarray(getattr(out, f), np.float64)[b, :k]
               for f in ("nc", "dac", "ddc", "tlc", "ttc", "lk")}
        sub["hc"] = np.ones(k)
        multiplier = sub["nc"] * sub["dac"] * sub["ddc"] * sub["tlc"]
        # EP in float64 (NAVSIM's numbers): PDM-Closed's fast proposals often differ by micrometres of progress,
        # below float32's resolution, and the argmax must break those near-ties like NAVSIM.
        sub["raw_progress"] = raw_progress(view.proposal_states, view.centerline)
        normaliser = np.max(sub["raw_progress"] * multiplier)
        sub["ep"] = (np.clip(sub["raw_progress"] / normaliser, 0.0, 1.0) if normaliser > PROGRESS_THRESHOLD
                     else np.ones(k))
        sub["pdm_score"] = multiplier * (5 * sub["ep"] + 5 * sub["ttc"] + 2 * sub["lk"] + 2 * sub["hc"]) / 14.0
        results.append(sub)
    return results


def plan_batch(scenes: list[HostScene], speed_limits: list[float | None] | None = None, *, chunk: int = 8,
               sizes: PlannerSizes = PlannerSizes(), progress: bool = False) -> list[dict]:
    """``plan`` for many scenes: the unrolling runs vmapped over chunks of ``chunk`` scenes padded to common
    ``sizes`` (grown to fit), the tracking and scoring as one batch per chunk, at one ``score_spec`` for all scenes;
    a short last chunk is filled with copies of its first scene: each stage compiles once per call."""
    speed_limits = list(speed_limits) if speed_limits is not None else [None] * len(scenes)
    if len(speed_limits) != len(scenes):
        raise UserInputError(f"speed_limits: expected {len(scenes)} entries (one per scene), got {len(speed_limits)}")
    for limit in speed_limits:
        if limit is not None and not (np.isfinite(limit) and limit > 0):
            raise UserInputError(f"speed_limit: expected a positive finite speed in m/s or None, got {limit!r}")
    observed = [_observe(s) for s in scenes]
    for s, o in zip(scenes, observed):
        sizes = sizes.grown(_needed(s, o))
    params = IDMParams()
    window = 64
    for s, limit in zip(scenes, speed_limits):
        horizon = max(SPEED_LIMIT_FRACTIONS) * (FALLBACK_TARGET_VELOCITY if limit is None else limit) \
            * params.trajectory_steps * params.dt
        needed = max(corridor_window(p, horizon) for p in _paths(np.asarray(s.centerline, np.float64))[1])
        window = max(window, _bucket(needed))
    window = None if window >= sizes.centerline else window
    num = len(LATERAL_OFFSETS) * len(SPEED_LIMIT_FRACTIONS)  # proposals per scene
    blank = np.zeros((num, NUM_STEPS, STATE_DIM))
    spec = score_spec([scoring_view(s, o, blank) for s, o in zip(scenes, observed)])
    results: list[dict] = []
    starts = range(0, len(scenes), chunk)
    if progress:
        from tqdm import tqdm

        starts = tqdm(starts, desc="PDM-Closed", unit="chunk")
    for start in starts:
        part = list(range(start, min(start + chunk, len(scenes))))
        built = [planner_inputs(scenes[i], observed[i], sizes, speed_limits[i]) for i in part]
        fill = list(range(len(part))) + [0] * (chunk - len(part))  # rows of the chunk: a short one repeats its first
        part = [part[j] for j in fill]
        stacked = jax.tree.map(lambda *xs: np.stack(xs), *[built[j][0] for j in fill])
        with jax.enable_x64(True):
            unrolled = jax.device_get(_unroll_batch_jit(stacked, params, window))
        egos = np.stack([np.asarray(scenes[i].history_states[-1], np.float64) for i in part])
        poses = np.asarray(unrolled.poses, np.float64).copy()
        poses[..., :2] += np.stack([built[j][1] for j in fill])[:, None, None, :]
        simulated = track_poses(np.repeat(egos, num, axis=0), poses.reshape(-1, *poses.shape[2:]))
        simulated = simulated.reshape(chunk, num, *simulated.shape[1:])
        scores = score_views([scoring_view(scenes[i], observed[i], simulated[j]) for j, i in enumerate(part)], spec)
        selected = np.array([int(np.argmax(sc["pdm_score"])) for sc in scores])  # np.argmax: the first best
        rows = np.arange(chunk)
        last = jax.tree.map(lambda a: np.asarray(a)[rows, selected, -1], unrolled)
        with jax.enable_x64(True):
            tail = jax.device_get(_extend_batch_jit(stacked, selected, Unrolled(*last), params, window))
        for j in range(len(built)):
            sel = int(selected[j])
            trajectory = np.concatenate([poses[j, sel], np.asarray(tail.poses[j], np.float64)])
            trajectory[poses.shape[2]:, :2] += built[j][1]
            results.append({"selected_proposal": sel, "states": simulated[j, sel], "trajectory": trajectory,
                            "trajectory_idm_states": np.concatenate([np.asarray(unrolled.idm_states[j, sel]),
                                                                     np.asarray(tail.idm_states[j])]),
                            "idm_states": np.asarray(unrolled.idm_states[j], np.float64),
                            "leading_agent": np.asarray(unrolled.leading_agent[j], np.float64),
                            "proposal_poses": poses[j], "simulated_states": simulated[j], "scores": scores[j],
                            "pdm_scores": scores[j]["pdm_score"]})
    return results


def plan(host_scene: HostScene, speed_limit: float | None = None) -> dict:
    """NAVSIM's PDM-Closed on one scene (module docstring).

    Args:
      host_scene: a scene (``jaxdrive.data.scene_json.read_scene``); its proposals are ignored.
      speed_limit: the ego lane's speed limit [m/s]; None: NAVSIM's fallback (target speeds 3 .. 15 m/s).

    Returns:
      dict with ``selected_proposal`` (int, 5 x lateral_idx + longitudinal_idx; lateral 0 = centreline, 1 = -1 m,
      2 = +1 m), ``states`` [41, 11] (the selected proposal re-simulated from the ego state: what NAVSIM scores,
      global frame, float64), ``trajectory`` [51, 3] (the planner's output: the selected proposal unrolled on to
      5 s, global), ``trajectory_idm_states`` [51, 2], and the stages: ``idm_states`` [15, 41, 2], ``leading_agent`` [15, 41, 3],
      ``proposal_poses`` [15, 41, 3] (global), ``simulated_states`` [15, 41, 11], ``scores`` (sub-score name ->
      [15]) and ``pdm_scores`` [15].
    """
    return plan_batch([host_scene], [speed_limit], chunk=1)[0]

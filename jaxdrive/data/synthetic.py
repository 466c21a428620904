"""Seeded synthetic driving scenes: the built-in default input of ``jaxdrive score``.

``generate_scene(seed)`` returns a ``HostScene`` (float64, global frame) with the structure of the ``epdms-scene/1``
fixtures: a road map (straight / curved multi-lane roads with opposite carriageways, medians, shoulders, carparks, or a
3/4-arm junction with lane connectors and traffic lights), agents and static objects, the ego history (4 states at
2 Hz), K dynamically consistent proposals with family labels and previous plans, and a human trajectory. The same seed
always gives the bit-identical scene. ``iter_scenes`` streams scenes; ``iter_batches`` streams fixed-shape padded
batches (one ``PadSpec``, so one compile) with O(batch) memory, for scoring millions of proposals.

Module map: ``synthetic_roads`` (maps), ``synthetic_actors`` (agents), ``synthetic_motion`` (paths and kinematics),
``synthetic_proposals`` (candidate families, history, human, previous plans); this module picks the scenario,
assembles it and moves it to a random global frame (rotation, optional mirroring = left-hand traffic, optional
UTM-scale offset).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterator

import numpy as np

from jaxdrive.data import synthetic_proposals as props
from jaxdrive.data.synthetic_actors import build_actors
from jaxdrive.data.synthetic_roads import RoadMap, build_junction, build_linear
from jaxdrive.errors import UserInputError
from jaxdrive.scene import (Agent, Area, HostScene, Lane, PadSpec, StateIndex, batch_scenes, validate_host_scene,
                            wrap_angle)

FAMILIES = props.FAMILIES
GENERATOR_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Profile:
    """Scenario mix. Probabilities per scene unless stated; tuples of choices are sampled uniformly."""

    p_intersection: float = 0.35
    road_kinds: tuple = (0.35, 0.4, 0.25)  # straight, arc, s-curve
    forward_lanes: tuple = (1, 2, 2, 3, 3, 4)
    opposite_lanes: tuple = (0, 1, 1, 2, 2)
    p_median: float = 0.25
    p_shoulder: float = 0.4
    p_carpark: float = 0.2
    r_min: float = 40.0  # m, smallest road radius
    p_four_arm: float = 0.6
    light_phases: tuple = (0.35, 0.35, 0.15, 0.15)  # green, red, yellow_to_red, red_to_green
    history_kinds: tuple = (0.4, 0.2, 0.25, 0.15)  # cruise, accel, decel, harsh_brake
    p_utm: float = 0.25
    p_mirror: float = 0.2
    p_lead: float = 0.6
    p_blocker: float = 0.35
    p_cut_in: float = 0.3
    p_pedestrian: float = 0.35
    p_follower: float = 0.3
    p_bicycle: float = 0.3
    max_oncoming: int = 2
    max_adjacent: int = 2
    max_cross: int = 4
    max_agents: int = 24
    background_vehicles: int = 0  # extra vehicles anywhere on the lanes (dense-traffic load)
    road_segments: int = 0  # > 0: roads cut lengthwise into this many roadblocks (0: by length)
    arm_segments: int = 0  # > 0: junction arms cut lengthwise into this many roadblocks (0: by length)


PROFILES = {
    "default": Profile(),
    # denser traffic, tighter curves, more junctions and UTM-scale frames (like the held-out fixture set)
    "hard": Profile(p_intersection=0.45, road_kinds=(0.2, 0.4, 0.4), r_min=18.0, p_four_arm=0.5, p_utm=0.4,
                    p_lead=0.75, p_blocker=0.5, p_cut_in=0.45, p_pedestrian=0.5, max_oncoming=3, max_adjacent=3,
                    max_cross=6, max_agents=30),
    # the throughput benchmark's reference mix: 32 agents (dense background traffic), the generator's largest maps
    # (4-arm junctions with arms of 2 roadblocks, or 7-lane divided roads with shoulders and car parks cut into 6
    # roadblocks along their length: ~60 polygons)
    "reference": Profile(p_intersection=0.7, forward_lanes=(4,), opposite_lanes=(3,), p_median=1.0, p_shoulder=1.0,
                         p_carpark=1.0, p_four_arm=1.0, p_lead=1.0, p_blocker=0.5, p_pedestrian=0.8, max_oncoming=4,
                         max_adjacent=4, max_cross=8, max_agents=32, background_vehicles=40, road_segments=6, arm_segments=2),
}


def pad_spec(num_proposals: int = 16) -> PadSpec:
    """A ``PadSpec`` that holds every generated scene (any profile) with ``num_proposals`` proposals."""
    return PadSpec(proposals=max(num_proposals, 1), agents=32, areas=24, area_vertices=96, lanes=64,
                   lane_vertices=96, centerline=512)


def _profile(profile: str | Profile) -> Profile:
    if isinstance(profile, Profile):
        return profile
    if profile not in PROFILES:
        raise UserInputError(f"profile: expected one of {sorted(PROFILES)}, got {profile!r}")
    return PROFILES[profile]


class _Frame:
    """Local -> global: optional mirror (y -> -y), rotation by ``theta``, translation."""

    def __init__(self, theta: float, mirror: bool, offset: np.ndarray):
        c, s = math.cos(theta), math.sin(theta)
        self.m = np.array([[c, -s], [s, c]]) @ np.diag([1.0, -1.0 if mirror else 1.0])
        self.theta, self.mirror, self.offset = theta, mirror, offset

    def points(self, p: np.ndarray) -> np.ndarray:
        return p @ self.m.T + self.offset

    def heading(self, h: np.ndarray) -> np.ndarray:
        return wrap_angle(self.theta + (-h if self.mirror else h))

    def states(self, st: np.ndarray) -> np.ndarray:
        out = st.copy()
        out[..., :2] = self.points(st[..., :2])
        out[..., StateIndex.HEADING] = self.heading(st[..., StateIndex.HEADING])
        if self.mirror:  # body-frame lateral quantities change sign under a reflection
            for f in (StateIndex.ACCELERATION_Y, StateIndex.STEERING_ANGLE, StateIndex.STEERING_RATE,
                      StateIndex.ANGULAR_VELOCITY, StateIndex.ANGULAR_ACCELERATION):
                out[..., f] = -out[..., f]
        return out

    def track(self, tr: np.ndarray) -> np.ndarray:
        out = np.empty_like(tr)
        out[:, :2] = self.points(tr[:, :2])
        out[:, 2] = self.heading(tr[:, 2])
        out[:, 3:5] = tr[:, 3:5] @ self.m.T
        return out


def _centerline(road: RoadMap) -> np.ndarray:
    r = road.route
    q = np.arange(0.0, r.sigma[0, -1], 1.0)
    return np.stack([np.interp(q, r.sigma[0], r.xy[0, :, 0]), np.interp(q, r.sigma[0], r.xy[0, :, 1]),
                     np.interp(q, r.sigma[0], r.heading[0])], axis=-1)


def scene_id(seed: int, profile_name: str = "default") -> str:
    """The id ``generate_scene`` gives the scene of ``seed`` under the profile named ``profile_name`` ("custom" for a
    ``Profile`` object)."""
    return f"syn_{profile_name}_{int(seed)}"


def generate_scene(seed: int, *, num_proposals: int = 16, profile: str | Profile = "default",
                   validate: bool = True) -> HostScene:
    """One synthetic scene, bit-identical for the same (seed, num_proposals, profile).

    Returns a ``HostScene`` with ``num_proposals`` proposals (``follow_nominal`` first), previous plans and a human
    trajectory, checked by ``validate_host_scene`` unless ``validate=False`` (the test suite proves generated scenes
    valid; skipping the check roughly doubles throughput). Raises ``ValueError`` for an unknown profile,
    ``num_proposals < 1`` or ``seed < 0``.
    """
    if num_proposals < 1:
        raise UserInputError(f"num_proposals: expected >= 1, got {num_proposals}")
    if seed < 0:  # numpy's SeedSequence said only "expected non-negative integer"
        raise UserInputError(f"seed: expected a non-negative integer, got {seed}")
    prof = _profile(profile)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), GENERATOR_VERSION]))
    road = build_junction(rng, prof) if rng.random() < prof.p_intersection else build_linear(rng, prof)
    motion = props.choose_motion(rng, road, prof)
    actors = build_actors(road, rng, motion.v0, prof)
    paths = {"route": road.route, **road.others}
    pdm, special = props.candidates(rng, road, motion, actors)
    specs = props.select(rng, road, pdm, special, num_proposals, paths)
    ego = props.realise(rng, road, motion, actors, specs, paths)

    frame = _Frame(rng.uniform(-math.pi, math.pi), bool(rng.random() < prof.p_mirror),
                   np.array([rng.uniform(3e5, 7e5), rng.uniform(3e6, 5e6)]) if rng.random() < prof.p_utm
                   else rng.uniform(-500.0, 500.0, size=2))
    tags = list(road.tags) + [f"history:{motion.history}"]
    if frame.mirror:
        tags.append("mirrored_left_hand_traffic")
    if np.abs(frame.offset).max() > 1e5:
        tags.append("utm_like_offset")
    cl = _centerline(road)
    name = profile if isinstance(profile, str) else "custom"
    scene = HostScene(
        id=scene_id(seed, name),
        history_states=frame.states(ego.history_states),
        areas=[Area(a.id, a.kind, frame.points(a.polygon)) for a in road.areas],
        lanes=[Lane(l.id, l.kind, l.on_route, l.parent_id, frame.points(l.polygon)) for l in road.lanes],
        centerline=np.concatenate([frame.points(cl[:, :2]), frame.heading(cl[:, 2:])], axis=-1),
        traffic_lights=dict(road.lights),
        agents=[Agent(a.id, a.type, a.length, a.width, a.height, frame.track(a.track), a.role) for a in actors.agents],
        proposal_states=frame.states(ego.states),
        proposal_names=[s.name for s in specs],
        proposal_families=[s.family for s in specs],
        previous_states=frame.states(ego.previous),
        previous_kinds=ego.previous_kinds,
        human_states=frame.states(ego.human),
        generator={"script": "jaxdrive.data.synthetic", "version": GENERATOR_VERSION, "profile": name,
                   "seed": int(seed), "layout": road.layout, "tags": tags},
    )
    return validate_host_scene(scene) if validate else scene


def iter_scenes(count: int, seed: int = 0, num_proposals: int = 16, profile: str | Profile = "default",
                start: int = 0, validate: bool = True) -> Iterator[HostScene]:
    """Stream ``count`` scenes: scene i is ``generate_scene(seed + start + i)`` (so any one can be regenerated alone,
    and a run can resume from ``start``). Memory is O(1 scene)."""
    for i in range(start, start + count):
        yield generate_scene(seed + i, num_proposals=num_proposals, profile=profile, validate=validate)


def iter_batches(count: int, batch_size: int, seed: int = 0, num_proposals: int = 16,
                 profile: str | Profile = "default", start: int = 0, spec: PadSpec | None = None,
                 validate: bool = False):
    """Stream padded batches ``(Scene[B], Proposals[B, K], BatchInfo)`` of a fixed ``PadSpec`` (one compile).

    Memory is O(batch). The last batch may be smaller than ``batch_size``; callers that need a fixed B pad it
    (``BatchInfo.scene_ids`` says which rows are real). ``PadSpec.check`` still runs on every scene; the full
    ``validate_host_scene`` is off by default for throughput (the test suite validates generated scenes).
    """
    spec = spec or pad_spec(num_proposals)
    buf: list[HostScene] = []
    for scene in iter_scenes(count, seed, num_proposals, profile, start, validate=validate):
        buf.append(scene)
        if len(buf) == batch_size:
            yield batch_scenes(buf, spec, validate=False)
            buf = []
    if buf:
        yield batch_scenes(buf, spec, validate=False)

"""Device pytrees of padded, ego-centred batches (``Scene``, ``Proposals``), their fixed sizes (``PadSpec``) and the
padding of host scenes into them (``pad_scene``, ``batch_scenes``; ``grow_batch`` re-pads a batch to a larger
``PadSpec``). Conventions: see ``jaxdrive.scene``. Import these names from ``jaxdrive.scene``."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
from jaxdrive import pytree as struct
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.errors import UserInputError
from jaxdrive.scene.host import (NUM_HISTORY_PADDED, NUM_STEPS, STATE_DIM, HostScene, SceneValidationError, _fail,
                                 concat_rows, pad_history, validate_host_scene)

FAR = 1.0e6  # coordinate of padding geometry (metres, in the ego-centred frame)


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
    has_human: Bool[Array, "*b"]  # the human filter applies (``HostScene.filters_human``: an ORIGINAL scene's human)


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

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise UserInputError(f"PadSpec: {f.name}: expected a positive integer size, got {value!r}")

    @staticmethod
    def fit(scenes: Sequence[HostScene], multiple: int = 8) -> "PadSpec":
        """The smallest spec holding every scene, each size rounded up to a multiple of ``multiple``."""
        check_scene_list(scenes, "PadSpec.fit")

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

    def union(self, *others: "PadSpec") -> "PadSpec":
        """The field-wise maximum of this spec and ``others`` (a padded shape that holds every one of them)."""
        return PadSpec(**{f.name: max(getattr(x, f.name) for x in (self, *others))
                          for f in dataclasses.fields(PadSpec)})

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
    """(count, verts, 2) float64 vertices re-centred on ``origin`` (padded vertices repeat a polygon's first one,
    padded polygons sit at FAR), their vertex mask and polygon mask."""
    v = np.full((count, verts, 2), FAR, np.float64)
    vm = np.zeros((count, verts), bool)
    valid = np.zeros((count,), bool)
    if polys:
        pts, sizes, starts = concat_rows(polys)
        local = pts - origin
        real = np.arange(verts) < sizes[:, None]
        v[: len(polys)] = local[starts[:, None] + np.where(real, np.arange(verts), 0)]
        vm[: len(polys)] = real
        valid[: len(polys)] = True
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
    if scene.agents:
        a = len(scene.agents)
        tracks = np.stack([ag.track for ag in scene.agents])
        pres = ~np.isnan(tracks).any(axis=2)
        present[:a] = pres
        center[:a] = np.where(pres[..., None], tracks[..., :2] - o, FAR)
        heading[:a] = np.where(pres, tracks[..., 2], 0.0)
        velocity[:a] = np.where(pres[..., None], tracks[..., 3:5], 0.0)
        length[:a] = [ag.length for ag in scene.agents]
        width[:a] = [ag.width for ag in scene.agents]
        atype[:a] = [int(ag.type) for ag in scene.agents]
        avalid_[:a] = True

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
        history_padded=pad_history(_to_local_states(scene.history_states, o)).astype(f32),  # frame-invariant
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
        has_human=np.asarray(scene.filters_human),
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


def check_scene_list(scenes, what: str) -> None:
    """A non-empty list of ``HostScene``s, or an error saying what was given instead."""
    if isinstance(scenes, (HostScene, str, bytes)) or not isinstance(scenes, Sequence):
        raise TypeError(f"{what}: expected a list of HostScene (e.g. [read_scene(path)]), got "
                        f"{type(scenes).__name__}")
    if not scenes:
        raise SceneValidationError(f"{what}: expected at least one scene, got an empty list")
    bad = next((s for s in scenes if not isinstance(s, HostScene)), None)
    if bad is not None:
        raise TypeError(f"{what}: expected HostScene items (jaxdrive.data.scene_json.read_scene(path) reads a file), "
                        f"got a {type(bad).__name__}")


def batch_scenes(scenes: Sequence[HostScene], spec: PadSpec | None = None,
                 validate: bool = True) -> tuple[Scene, Proposals, BatchInfo]:
    """Pad and stack host scenes into one batch: ``Scene[B]``, ``Proposals[B, K]`` (numpy leaves) and ``BatchInfo``."""
    import jax

    check_scene_list(scenes, "batch_scenes")
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


def _grow(x: np.ndarray, axis: int, size: int, fill) -> np.ndarray:
    """``x`` grown along ``axis`` (counted from the batch's first axis) to ``size`` entries: ``fill`` a scalar, or
    "first" / "last" to repeat that entry (the padding conventions of ``pad_scene``)."""
    have = x.shape[axis]
    if size <= have:
        return x
    shape = list(x.shape)
    shape[axis] = size - have
    if fill in ("first", "last"):
        edge = np.take(x, [0 if fill == "first" else have - 1], axis=axis)
        extra = np.broadcast_to(edge, shape)
    else:
        extra = np.full(shape, fill, x.dtype)
    return np.concatenate([x, extra], axis=axis)


def grow_batch(scene: Scene, proposals: Proposals, spec: PadSpec) -> tuple[Scene, Proposals]:
    """A padded host batch (numpy ``Scene[B]``, ``Proposals[B, K]`` of ``batch_scenes``: one batch axis) re-padded
    to the larger ``spec``: bit for bit what ``batch_scenes`` gives at ``spec`` (same padding values), without the
    host scenes. Axes already at least ``spec``'s size are kept. The scoring job uses it when a later scene grows
    the run's ``PadSpec`` after batches were padded at the old one."""
    def polygons(p: Polygons, count: int, verts: int) -> Polygons:
        v = _grow(p.vertices, 2, verts, "first")  # padded vertices repeat a polygon's first (FAR for padded ones)
        vm = _grow(p.vertex_valid, 2, verts, False)
        return Polygons(vertices=_grow(v, 1, count, FAR), vertex_valid=_grow(vm, 1, count, False),
                        valid=_grow(p.valid, 1, count, False))

    m, a = scene.map, scene.agents
    grown_map = MapData(
        areas=polygons(m.areas, spec.areas, spec.area_vertices), area_kind=_grow(m.area_kind, 1, spec.areas, 0),
        lanes=polygons(m.lanes, spec.lanes, spec.lane_vertices), lane_kind=_grow(m.lane_kind, 1, spec.lanes, 0),
        lane_on_route=_grow(m.lane_on_route, 1, spec.lanes, False), lane_red=_grow(m.lane_red, 1, spec.lanes, False),
        centerline=_grow(m.centerline, 1, spec.centerline, "last"),
        centerline_valid=_grow(m.centerline_valid, 1, spec.centerline, False))
    n = spec.agents
    agents = Agents(center=_grow(a.center, 1, n, FAR), heading=_grow(a.heading, 1, n, 0),
                    velocity=_grow(a.velocity, 1, n, 0), length=_grow(a.length, 1, n, 1), width=_grow(a.width, 1, n, 1),
                    type=_grow(a.type, 1, n, 0), present=_grow(a.present, 1, n, False),
                    valid=_grow(a.valid, 1, n, False))
    k = spec.proposals
    grown = Proposals(states=_grow(proposals.states, 1, k, "first"),  # padded proposals copy proposal 0
                      previous=_grow(proposals.previous, 1, k, 0),
                      has_previous=_grow(proposals.has_previous, 1, k, False),
                      valid=_grow(proposals.valid, 1, k, False))
    return scene.replace(map=grown_map, agents=agents), grown


SHARED_DIMS = {"T": NUM_STEPS}  # named dims of one known size across a whole pytree; other names: per dataclass


def check_leaf_shapes(tree, name: str, batch: tuple[int, ...], shared: dict[str, int] | None = None) -> None:
    """Every leaf of the dataclass pytree ``tree`` (``Scene``, ``Proposals``, ...) against its jaxtyping annotation:
    the batch dims ``*b`` equal ``batch``, fixed sizes match, each named size is one size within its dataclass (``T``
    everywhere: ``SHARED_DIMS``), the dtype is of the annotated kind; a ``SceneValidationError`` naming the
    leaf's path (``name.field...``), what was expected and what it got. Reads shapes and dtypes only (a traced
    ``jax.jit`` argument passes through). A ``Polygons``' count ``P`` equals its kind array's (``area_kind`` A,
    ``lane_kind`` L): checked for ``MapData``."""
    import typing

    shared = dict(SHARED_DIMS) if shared is None else shared
    local: dict[str, int] = {}
    hints = typing.get_type_hints(type(tree))
    for field in dataclasses.fields(tree):
        value, hint, path = getattr(tree, field.name), hints[field.name], f"{name}.{field.name}"
        if dataclasses.is_dataclass(value):
            check_leaf_shapes(value, path, batch, shared)
            continue
        array = value if hasattr(value, "shape") and hasattr(value, "dtype") else np.asarray(value)  # jax, tracer
        shape, dtype = tuple(array.shape), str(array.dtype)
        tokens = hint.dim_str.split()
        expected = " ".join(["*b" + str(list(batch))] + tokens[1:])
        if shape[:len(batch)] != batch or len(shape) != len(batch) + len(tokens) - 1:
            raise SceneValidationError(f"{path}: expected shape [{expected}], got {list(shape)}")
        for token, size in zip(tokens[1:], shape[len(batch):]):
            bound = shared if token in SHARED_DIMS else local
            if token.isdigit() and int(token) != size or bound.setdefault(token, size) != size:
                raise SceneValidationError(f"{path}: expected shape [{expected}] with {token} = "
                                           f"{token if token.isdigit() else bound[token]}, got {list(shape)}")
        if dtype not in hint.dtypes:
            raise SceneValidationError(f"{path}: expected a {hint.__name__.split('[')[0]} dtype, got {dtype}")
    if isinstance(tree, MapData):
        for polys, kind in (("areas", "area_kind"), ("lanes", "lane_kind")):
            count, want = getattr(tree, polys).valid.shape[-1], getattr(tree, kind).shape[-1]
            if count != want:
                raise SceneValidationError(f"{name}.{polys}: expected {want} polygons (as {name}.{kind}), got {count}")


def check_batch_shapes(scene: Scene, proposals: Proposals, who: str) -> None:
    """Shapes of a padded batch ``Scene[B]``, ``Proposals[B, K]`` (B, K >= 1): ``states`` [B, K, T, 11], ``valid`` and
    ``has_previous`` [B, K], ``previous`` as ``states``, every scene leaf as annotated (``check_leaf_shapes``); a
    ``ValueError`` starting with ``who`` and naming the leaf. Reads shapes and dtypes only (a traced ``jax.jit``
    argument passes through)."""
    shape = tuple(np.shape(proposals.states))
    if len(shape) != 4 or shape[2:] != (NUM_STEPS, STATE_DIM):
        raise UserInputError(f"{who}: proposals.states: expected shape (B, K, {NUM_STEPS}, {STATE_DIM}), got {shape}")
    if 0 in shape[:2]:
        raise UserInputError(f"{who}: proposals.states: expected at least one scene and one proposal (B, K >= 1), "
                         f"got shape {shape}")
    for name, want, what in (("valid", shape[:2], "one flag per proposal"),
                             ("has_previous", shape[:2], "one flag per proposal"),
                             ("previous", shape, "the states' shape: zeros where has_previous is False")):
        got = tuple(np.shape(getattr(proposals, name)))
        if got != want:
            raise UserInputError(f"{who}: proposals.{name}: expected shape {want} ({what}), got {got}")
    try:
        check_leaf_shapes(scene, "scene", shape[:1])  # the proposals' B scenes, every leaf as annotated
    except SceneValidationError as e:
        raise UserInputError(f"{who}: {e}") from None


def validate_batch(scene: Scene, proposals: Proposals) -> None:
    """Host-side check of a padded batch built outside ``batch_scenes`` (shapes consistent, values finite)."""
    states = np.asarray(proposals.states)
    if states.ndim < 3 or states.shape[-2:] != (NUM_STEPS, STATE_DIM):
        raise SceneValidationError(f"proposals.states: expected shape (..., K, {NUM_STEPS}, {STATE_DIM}), got {states.shape}")
    batch = states.shape[:-3]
    check_leaf_shapes(proposals, "proposals", batch)
    check_leaf_shapes(scene, "scene", batch)
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

"""Exact host-side broad phase: the map edges and agents each proposal can touch, packed for the kernels.

Every map predicate of the EPDMS rules tests ego geometry *at the proposal's own states*: strict point-in-polygon of
the four corners, the box centre and the rear axle (area flags for DAC / DDC / LK / NC / TTC), and TLC's closed
box-polygon contact. All of these lie inside the ego footprints. ``pack_map`` cuts each proposal's 41 steps into
chunks of 14 (``MAP_CHUNK_STEPS``) and keeps, per (proposal, chunk), the polygons whose bbox overlaps the chunk's
footprint bbox (plus ``MARGIN_M``), and of each such polygon only the ring edges that reach that bbox: an edge
entirely above or below it never straddles the +x ray of, nor holds, any of the chunk's points, and one entirely to
its left (by more than the margin) cannot be rounded into a crossing (``_edge_units``). The kept edges of every
(proposal, chunk, polygon) unit are cut into tiles of 8 for the whole batch (``EdgeTiles``): the kernels test each
chunk's points against the few dozen edges near them, padding is paid once per batch, and per-step flags are sorted
segment sums over the units of each (proposal, chunk) slot. TLC gets its own tiles with only the on-route lanes
that are red at some step (a box-edge contact needs an edge point in the box, so the same edges serve it).

Exactness (flags identical to the unculled map's, tested bit for bit): kept edges are the padded ring's edges
(``start = v[j]``, ``end = v[(j + 1) % V]``) in ring order, and a dropped edge adds 0 to every crossing and
boundary count of the unit's points, so every count equals the whole ring's. The bboxes are computed in float64 from
the float32 states with a margin far above the float32 rounding of the device's corner computation. The centreline
is trimmed to the longest real one of the batch plus one padded point (the first zero-length segment stays, so
``project_to_polyline`` picks the same segment on ties); progress projects onto the whole of it, while LK measures
only the segments within 0.5 m of a proposal's swept bbox (``near_segments``): LK only asks whether the centre is
more than 0.5 m away.

Agents are culled per scene (``cull_agents``): NC and TTC only ever act on an agent whose box touches an ego box, or
an ego box translated forward by speed x 0.9 s (TTC), so an agent whose box never comes near the swept bbox of any
proposal, widened by that projection, is dropped; the survivors (order kept) are padded to a bucketed count with
``jaxdrive.scene``'s conventions (absent, at ``FAR``). Then NC and TTC each get the (proposal, agent, chunk of 8
steps) triples whose boxes can touch (``ContactPairs``, ``contact_pairs``): their kernels test only those.

Layout: ``PackedMap`` replaces ``Scene.map`` and ``PackedAgents`` ``Scene.agents`` (``pack_batch``); the map
predicates (area flags and TLC's red-light contacts) are computed for the whole batch by
``jaxdrive.rules.areas.batch_ego_areas``, NC and TTC by ``batch_no_at_fault_collisions`` / ``batch_time_to_collision``;
the centreline leaves keep ``MapData``'s names, so LK and progress read it unchanged. Sizes are bucketed and never
shrink below a ``PackSpec`` (grow it like a ``PadSpec`` to keep one compiled shape per run).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from jaxdrive import pytree as struct
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.constants import (EGO_LENGTH, EGO_REAR_AXLE_TO_CENTER, EGO_WIDTH, LK_DEVIATION_M, NC_STEPS,
                                TTC_FRAMES_AHEAD, TTC_HORIZON_S, TTC_STEPS)
from jaxdrive.errors import UserInputError
from jaxdrive.scene import FAR, Agents, AreaKind, Polygons, Scene

MARGIN_M = 0.05  # added to the swept bbox; device rounding of ego corners is ~1e-5 m at ego-centred scales
EGO_RADIUS_M = math.hypot(0.5 * EGO_LENGTH, 0.5 * EGO_WIDTH)  # box centre to corner (covers corners and rear axle)
CENTERLINE_REACH_M = LK_DEVIATION_M  # LK only asks whether the centre is within 0.5 m of the centreline
SEGMENT_MULTIPLE = 32
AGENT_MULTIPLE = 8  # kept agents per scene round up to this (NC / TTC work is linear in it)
TILE_EDGES = 8  # edges per tile of ``EdgeTiles`` (one (proposal, polygon, chunk) per tile)
MAP_CHUNK_STEPS = 14  # ego steps per chunk of the map's edge tiles (41 steps -> 3 chunks, one padded step)
TILE_MULTIPLE = 16  # a group's tile count rounds up to this x its scene count (whole rows of tiles per scene)
CONTACT_STEPS = 8  # ego steps per chunk of a ``ContactPairs`` triple (TTC's whole chunks: divides TTC_STEPS)
if TTC_STEPS % CONTACT_STEPS:
    raise ImportError(f"CONTACT_STEPS {CONTACT_STEPS} must divide TTC's {TTC_STEPS} ego steps")
CONTACT_MULTIPLE = 16  # a group's contact-pair count rounds up to this x its scene count


@struct.dataclass
class EdgeTiles:
    """The edges each (scene, proposal, polygon, chunk) of a batch must test, cut into tiles of ``TILE_EDGES`` edges.

    Chunk c is ego steps [14c, 14c + 14) (``MAP_CHUNK_STEPS``). A unit ("pair") keeps only the ring edges that can
    change a predicate at its chunk's points (``_edge_units``); units with none are dropped. A batch-level structure,
    in ``groups`` groups of B / G consecutive scenes (one per device the batch is sharded over, so nothing crosses
    devices). Within a group, pair i is (slot ``pair_slot[i]`` = (b * K + k) * C + c within the group, polygon
    ``pair_poly[i]`` of that scene; -1 pads), pairs sorted by (slot, polygon); tile j holds 8 kept edges of pair
    ``tile_pair[j]``, in ring order, tiles sorted by pair. Pairs and tiles are stored as [B, n / B] rows only so the
    leaves batch (and shard) like the rest of ``Scene``: group g's fill its scenes' rows, but row b is *not* scene b's
    (read a group flattened, see ``jaxdrive.rules.areas.batch_ego_areas``). Unused edges sit at ``FAR`` with zero
    length (never a crossing, never "on"); empty tiles belong to the group's last pair (sums unchanged, order kept).
    """

    start: Float[Array, "B NTb TILE 2"]
    end: Float[Array, "B NTb TILE 2"]
    tile_pair: Int[Array, "B NTb"]
    pair_slot: Int[Array, "B Pb"]
    pair_poly: Int[Array, "B Pb"]
    groups: int = struct.field(pytree_node=False, default=1)


@struct.dataclass
class PackedMap:
    """A scene map culled per (proposal, chunk of steps) and cut into edge tiles (stands in for ``MapData`` in
    ``Scene.map``).

    Per-pair attributes follow the pair rows of their ``EdgeTiles``.
    """

    areas: EdgeTiles  # every drivable polygon near each proposal
    junction: Bool[Array, "B Pa"]  # the pair's polygon is an intersection
    lanes: EdgeTiles  # lanes and lane connectors near each proposal
    lane_on_route: Bool[Array, "B Pl"]
    red_lanes: EdgeTiles  # on-route lanes red at some step, near each proposal (TLC)
    red_first: Float[Array, "B Pr 2"]  # first ring vertex of the pair's lane (TLC's vertex-in-box test)
    red: Bool[Array, "B Pr L"]  # the pair's light is red at its chunk's step l
    centerline: Float[Array, "*b C 2"]
    centerline_valid: Bool[Array, "*b C"]
    near_segments: Int[Array, "*b K S"]  # centreline segments (i -> i + 1) within LK's reach of the proposal; -1 pads


@struct.dataclass
class ContactPairs:
    """The (proposal, agent, chunk) triples of a batch that one collision rule (NC or TTC) must test, per group.

    Chunk c is ego steps [8c, 8c + 8) (``CONTACT_STEPS``). A triple is kept when the bbox of the proposal's ego boxes
    at those steps (for TTC widened by its forward projection) overlaps the bbox of the agent's present boxes at the
    object frames the rule pairs with them (NC: the same frames; TTC: up to 9 frames later), so no triple that can
    hold a contact is dropped. Rows as in ``EdgeTiles``: group g's triples fill its scenes' rows [B, Pb], sorted by
    (proposal ``owner``: flat b * K + k within the group, ``agent``: index into the scene's culled agents, ``chunk``);
    ``run`` numbers the (proposal, agent) runs of a group in that order (a pair's first contact is the first over its
    run's chunks). Padding triples are invalid, owned by the group's last proposal, in a run of their own.
    """

    owner: Int[Array, "B Pb"]
    agent: Int[Array, "B Pb"]
    chunk: Int[Array, "B Pb"]
    run: Int[Array, "B Pb"]
    valid: Bool[Array, "B Pb"]
    groups: int = struct.field(pytree_node=False, default=1)


@struct.dataclass
class PackedAgents:
    """A batch's agents culled per scene (``cull_agents``) with NC's and TTC's contact triples (stands in for
    ``Agents`` in ``Scene.agents``; ``jaxdrive.rules.nc`` / ``ttc``'s batch functions read it)."""

    agents: Agents
    nc: ContactPairs
    ttc: ContactPairs


@dataclasses.dataclass(frozen=True)
class PackSpec:
    """Smallest packed sizes: per scene of the batch (pairs, tiles, agents, contact triples, centreline points), per
    proposal (LK's centreline segments).

    Larger needs round up (pairs and tiles to multiples of ``TILE_MULTIPLE`` x scenes per group, contact triples to
    multiples of ``CONTACT_MULTIPLE`` x scenes per group, agents to multiples of ``AGENT_MULTIPLE``, segments to
    multiples of ``SEGMENT_MULTIPLE``).
    """

    area_pairs: int = 16  # (proposal, polygon) pairs and edge tiles, per scene of the batch
    area_tiles: int = 32
    lane_pairs: int = 32
    lane_tiles: int = 64
    red_pairs: int = 2
    red_tiles: int = 2
    centerline: int = 64  # points (real ones + at least one padded), rounded up to a multiple of 64
    agents: int = 4
    near_segments: int = 32  # centreline segments per proposal for LK, rounded up to a multiple of 32
    nc_pairs: int = 16  # NC's / TTC's (proposal, agent, chunk) triples per scene of the batch
    ttc_pairs: int = 16

    def union(self, *others: "PackSpec") -> "PackSpec":
        """The field-wise maximum of this spec and ``others`` (capacities that fit every one of them)."""
        return PackSpec(**{f.name: max(getattr(x, f.name) for x in (self, *others))
                           for f in dataclasses.fields(PackSpec)})


def swept_bboxes(states: np.ndarray, margin: float = MARGIN_M) -> np.ndarray:
    """[..., K, 4] (xmin, ymin, xmax, ymax) (m) bounding every ego footprint of each proposal over all steps.

    ``states`` [..., K, T, 11] rear-axle states. A footprint lies in the disc of radius ``EGO_RADIUS_M`` around its
    box centre; the rear axle lies inside the footprint.
    """
    s = np.asarray(states, np.float64)
    h = s[..., 2]
    cx = s[..., 0] + EGO_REAR_AXLE_TO_CENTER * np.cos(h)
    cy = s[..., 1] + EGO_REAR_AXLE_TO_CENTER * np.sin(h)
    r = EGO_RADIUS_M + margin
    return np.stack([cx.min(-1) - r, cy.min(-1) - r, cx.max(-1) + r, cy.max(-1) + r], axis=-1)


def polygon_bboxes(polys: Polygons) -> np.ndarray:
    """[..., P, 4] (xmin, ymin, xmax, ymax) of each polygon's vertices (padded vertices repeat a real one)."""
    v = np.ascontiguousarray(np.moveaxis(np.asarray(polys.vertices), -1, -2))  # [..., P, 2, V], contiguous V
    return np.concatenate([v.min(-1), v.max(-1)], axis=-1).astype(np.float64)  # min / max of floats are exact


def overlaps(swept: np.ndarray, boxes: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """[B, ..., P] closed bbox overlap of each bbox ``swept`` [B, ..., 4] (a proposal's, or a proposal chunk's) with
    each valid polygon ([B, P, 4])."""
    lead = lambda x: x.reshape((x.shape[0],) + (1,) * (swept.ndim - 2) + x.shape[1:])
    s, p = swept[..., None, :], lead(boxes)
    hit = (s[..., 0] <= p[..., 2]) & (p[..., 0] <= s[..., 2]) & (s[..., 1] <= p[..., 3]) & (p[..., 1] <= s[..., 3])
    return hit & lead(np.asarray(valid))


def group_rows(x, groups: int):
    """A batch-level leaf stored as rows [B, n, ...] (``EdgeTiles``, ``ContactPairs``) read per group of scenes:
    [G, B / G * n, ...]."""
    return x.reshape((groups, -1) + x.shape[2:])


def _select(keep: np.ndarray, minimum: int, multiple: int) -> np.ndarray:
    """[B, K, M] indices of the kept items in their original order; -1 fills the unused slots.

    M is the largest kept count rounded up to ``multiple``, at least ``minimum``.
    """
    count = max(minimum, -(-int(keep.sum(-1).max(initial=0)) // multiple) * multiple)
    if count > keep.shape[-1]:
        keep = np.concatenate([keep, np.zeros(keep.shape[:-1] + (count - keep.shape[-1],), bool)], axis=-1)
    order = np.argsort(~keep, axis=-1, kind="stable")[..., :count]
    return np.where(np.take_along_axis(keep, order, axis=-1), order, -1)


def _gather(leaf: np.ndarray, idx: np.ndarray, fill) -> np.ndarray:
    """leaf [B, P, ...] gathered at idx [B, K, M] -> [B, K, M, ...]; -1 slots get ``fill``."""
    b = np.arange(leaf.shape[0])[:, None, None]
    out = leaf[b, np.maximum(idx, 0)]
    mask = (idx < 0).reshape(idx.shape + (1,) * (leaf.ndim - 2))
    return np.where(mask, np.asarray(fill, leaf.dtype), out)


def kept_edges(polys: Polygons, keep: np.ndarray, box: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every kept (scene, proposal, chunk, polygon) unit of ``keep`` [B, K, C, P], in that order: (b, k, c, p) [U]
    each, and the edges [U, E] of each unit's ring (edge j: v[j] -> v[(j + 1) % V]; E = most edges of any polygon)
    able to change a predicate at points inside the unit's chunk bbox (``box`` [B, K, C, 4], margin included).

    An edge entirely above or below the bbox (in y) never straddles a point's ray nor holds a point; an edge entirely
    left of it (in x) holds no point and, by more than the margin, cannot be rounded into a crossing of a ray towards
    +x (the two products of the crossing test then differ by far more than float32 rounding). TLC's box-edge contacts
    need an edge point inside the box, so they keep the same edges.
    """
    verts = np.asarray(polys.vertices)  # [B, P, V, 2] float32
    nv = verts.shape[2]
    n_edges = np.minimum(np.asarray(polys.vertex_valid).sum(-1) + 1, nv)  # + one degenerate v0 -> v0 if padded
    ne = int(n_edges.max(initial=1))
    a = verts[:, :, :ne].astype(np.float64)
    e = verts[:, :, (np.arange(ne) + 1) % nv].astype(np.float64)
    ymin, ymax = np.minimum(a[..., 1], e[..., 1]), np.maximum(a[..., 1], e[..., 1])  # [B, P, E]
    xmax = np.maximum(a[..., 0], e[..., 0])
    ub, uk, uc, up = np.nonzero(keep)
    bx = box[ub, uk, uc]  # [U, 4]
    poly = ub * verts.shape[1] + up  # flat (scene, polygon)
    flat = lambda x: x.reshape((-1,) + x.shape[2:])[poly]
    edge = ((np.arange(ne) < flat(n_edges)[:, None]) & (flat(ymin) <= bx[:, 3:4]) & (flat(ymax) >= bx[:, 1:2])
            & (flat(xmax) >= bx[:, 0:1]))
    return ub, uk, uc, up, edge


def _edge_units(polys: Polygons, keep: np.ndarray, box: np.ndarray) -> tuple[np.ndarray, ...]:
    """``kept_edges`` less the units without a kept edge (they hold no point)."""
    ub, uk, uc, up, edge = kept_edges(polys, keep, box)
    live = edge.any(-1)
    return ub[live], uk[live], uc[live], up[live], edge[live]


def _tile(polys: Polygons, units: tuple[np.ndarray, ...], shape: tuple[int, int, int], min_pairs: int,
          min_tiles: int, groups: int) -> tuple[EdgeTiles, np.ndarray, np.ndarray, np.ndarray]:
    """Edge tiles of ``_edge_units`` (a batch of shape (B, K, C)), per group of B / ``groups`` scenes.

    Returns the tiles and, per pair row [B, Pb], the scene, polygon (-1 for padding pairs) and chunk index.
    """
    verts = np.asarray(polys.vertices)  # [B, P, V, 2] float32
    nv = verts.shape[2]
    nb, k, nc = shape
    ub, uk, uc, up, edge = units
    per_group = nb // groups
    count = edge.sum(-1)
    group = ub // per_group
    slot = ((ub % per_group) * k + uk) * nc + uc
    tiles = -(-count // TILE_EDGES)
    step = TILE_MULTIPLE * per_group
    pairs_g = np.bincount(group, minlength=groups)
    tiles_g = np.bincount(group, weights=tiles, minlength=groups).astype(np.int64)
    npair = max(min_pairs * per_group, -(-int(pairs_g.max(initial=0)) // step) * step)
    nt = max(min_tiles * per_group, -(-int(tiles_g.max(initial=0)) // step) * step)
    first_tile = np.cumsum(tiles) - tiles  # over the batch
    pos = np.arange(len(ub)) - (np.cumsum(pairs_g) - pairs_g)[group]  # pair index within the group
    tile0 = first_tile - (np.cumsum(tiles_g) - tiles_g)[group]  # first tile within the group

    pair_slot = np.full((groups, npair), per_group * k * nc - 1, np.int64)
    pair_poly = np.full((groups, npair), -1, np.int64)
    pair_scene, pair_chunk = np.zeros((groups, npair), np.int64), np.zeros((groups, npair), np.int64)
    pair_slot[group, pos], pair_poly[group, pos], pair_scene[group, pos], pair_chunk[group, pos] = slot, up, ub, uc
    tile_pair = np.full((groups, nt), npair - 1, np.int64)  # empty tiles: the group's last pair
    unit = np.repeat(np.arange(len(ub)), tiles)
    tile_pair[group[unit], tile0[unit] + np.arange(len(unit)) - first_tile[unit]] = pos[unit]
    eu, ee = np.nonzero(edge)  # kept edges in (unit, ring) order
    j = np.arange(len(eu)) - (np.cumsum(count) - count)[eu]  # rank within the unit
    at = (group[eu], tile0[eu] + j // TILE_EDGES, j % TILE_EDGES)
    start = np.full((groups, nt, TILE_EDGES, 2), FAR, np.float32)
    end = np.full((groups, nt, TILE_EDGES, 2), FAR, np.float32)
    start[at] = verts[ub[eu], up[eu], ee]
    end[at] = verts[ub[eu], up[eu], (ee + 1) % nv]
    rows = lambda x: x.reshape((nb, -1) + x.shape[2:])  # group g's tiles / pairs fill its scenes' rows
    out = EdgeTiles(start=rows(start), end=rows(end), tile_pair=rows(tile_pair.astype(np.int32)),
                    pair_slot=rows(pair_slot.astype(np.int32)), pair_poly=rows(pair_poly.astype(np.int32)),
                    groups=groups)
    return out, rows(pair_scene), rows(pair_poly), rows(pair_chunk)


def _pair_values(leaf: np.ndarray, scene: np.ndarray, poly: np.ndarray, fill) -> np.ndarray:
    """leaf [B, P, ...] at each pair's (scene, polygon) -> [B, Pb, ...]; padding pairs get ``fill``."""
    out = np.asarray(leaf)[scene, np.maximum(poly, 0)]
    return np.where((poly < 0).reshape(poly.shape + (1,) * (out.ndim - 2)), np.asarray(fill, out.dtype), out)


def pack_map(scene: Scene, states: np.ndarray, spec: PackSpec = PackSpec(),
             groups: int = 1) -> tuple[PackedMap, PackSpec]:
    """Per-proposal packed map of a padded host batch (numpy leaves) and the sizes used.

    ``scene`` is a ``Scene[B]`` with numpy leaves (``jaxdrive.scene.batch_scenes``), ``states`` the proposals'
    [B, K, T, 11] states. Every rule result computed on ``scene.replace(map=packed)`` equals the unculled one.
    ``groups``: edge tiles are laid out per group of B / groups consecutive scenes (pass the number of devices the
    batch is sharded over, so each device's tiles are its own scenes'); B must be a multiple of it.
    """
    m = scene.map
    states = np.asarray(states)
    if states.ndim != 4:
        raise UserInputError(f"pack_map: states: expected shape (B, K, T, 11), got {states.shape}")
    if not hasattr(m, "area_kind") or np.asarray(m.area_kind).ndim != 2:
        raise UserInputError(f"pack_map: scene.map: expected an unpacked batch MapData (area_kind [B, A]), got {type(m)}")
    if groups < 1 or states.shape[0] % groups:
        raise UserInputError(f"pack_map: groups: expected a positive divisor of the batch size {states.shape[0]}, "
                         f"got {groups}")
    box = ego_chunk_bboxes(states, MAP_CHUNK_STEPS)  # [B, K, C, 4]
    shape = box.shape[:3]
    area_units = _edge_units(m.areas, overlaps(box, polygon_bboxes(m.areas), m.areas.valid), box)
    lane_units = _edge_units(m.lanes, overlaps(box, polygon_bboxes(m.lanes), m.lanes.valid), box)
    red_any = np.asarray(m.lane_on_route) & np.asarray(m.lane_red).any(-1)
    red_units = tuple(x[red_any[lane_units[0], lane_units[3]]] for x in lane_units)
    areas, a_scene, a_poly, _ = _tile(m.areas, area_units, shape, spec.area_pairs, spec.area_tiles, groups)
    lanes, l_scene, l_poly, _ = _tile(m.lanes, lane_units, shape, spec.lane_pairs, spec.lane_tiles, groups)
    red_lanes, r_scene, r_poly, r_chunk = _tile(m.lanes, red_units, shape, spec.red_pairs, spec.red_tiles, groups)
    red = np.asarray(m.lane_red)  # [B, L, T] -> the pair's chunk's steps [B, Pr, MAP_CHUNK_STEPS]
    chunks = box.shape[2]
    red = np.pad(red, ((0, 0), (0, 0), (0, chunks * MAP_CHUNK_STEPS - red.shape[-1])))
    red = red.reshape(red.shape[:2] + (chunks, MAP_CHUNK_STEPS))[r_scene, np.maximum(r_poly, 0), r_chunk]
    red &= (r_poly >= 0)[..., None]

    centerline = np.asarray(m.centerline)
    real = int(np.asarray(m.centerline_valid).sum(-1).max())
    c = min(centerline.shape[-2], max(spec.centerline, -(-(real + 1) // 64) * 64))
    centerline = centerline[..., :c, :]
    near = near_segments(centerline, swept_bboxes(states), spec.near_segments)
    packed = PackedMap(
        areas=areas, junction=_pair_values(m.area_kind, a_scene, a_poly, 0) == AreaKind.INTERSECTION,
        lanes=lanes, lane_on_route=_pair_values(m.lane_on_route, l_scene, l_poly, False),
        red_lanes=red_lanes,
        red_first=_pair_values(np.asarray(m.lanes.vertices)[:, :, 0], r_scene, r_poly, FAR).astype(np.float32),
        red=red,
        centerline=centerline, centerline_valid=np.asarray(m.centerline_valid)[..., :c], near_segments=near)
    pairs, tiles = (lambda t: t.pair_slot.shape[1]), (lambda t: t.start.shape[1])  # per scene of the batch
    used = PackSpec(area_pairs=pairs(areas), area_tiles=tiles(areas), lane_pairs=pairs(lanes), lane_tiles=tiles(lanes),
                    red_pairs=pairs(red_lanes), red_tiles=tiles(red_lanes), centerline=c, agents=spec.agents,
                    near_segments=near.shape[-1], nc_pairs=spec.nc_pairs, ttc_pairs=spec.ttc_pairs)
    return packed, used


def near_segments(centerline: np.ndarray, swept: np.ndarray, minimum: int = PackSpec.near_segments) -> np.ndarray:
    """[B, K, S] indices i of the centreline segments (i -> i + 1) whose bbox comes within ``CENTERLINE_REACH_M`` of
    each proposal's swept bbox, in order; -1 pads. S is the batch maximum rounded up to ``SEGMENT_MULTIPLE``.

    ``centerline`` [B, C, 2], ``swept`` [B, K, 4] (``swept_bboxes``). Every segment (padded zero-length ones
    included) within 0.5 m of a proposal's box centre is kept, so LK's "more than 0.5 m from the centreline" is
    decided on the same minimum distance as over the whole polyline.
    """
    pts = np.asarray(centerline, np.float64)
    lo, hi = np.minimum(pts[:, :-1], pts[:, 1:]), np.maximum(pts[:, :-1], pts[:, 1:])  # [B, C-1, 2]
    boxes = np.concatenate([lo, hi], axis=-1)
    reach = swept + np.array([-1.0, -1.0, 1.0, 1.0]) * (CENTERLINE_REACH_M + MARGIN_M)
    keep = overlaps(reach, boxes, np.ones(boxes.shape[:2], bool))
    return _select(keep, minimum, SEGMENT_MULTIPLE).astype(np.int32)


def agent_bboxes(agents: Agents) -> np.ndarray:
    """[B, N, 4] bbox (m) of each agent's boxes over its present steps (empty box far away if never present)."""
    live = np.asarray(agents.present) & np.asarray(agents.valid)[..., None]  # [B, N, T]
    c = np.ascontiguousarray(np.moveaxis(np.asarray(agents.center, np.float64), -1, -2))  # [B, N, 2, T]
    r = 0.5 * np.hypot(np.asarray(agents.length, np.float64), np.asarray(agents.width, np.float64))[..., None]
    lo = np.where(live[..., None, :], c, np.inf).min(-1) - r
    hi = np.where(live[..., None, :], c, -np.inf).max(-1) + r
    return np.concatenate([lo, hi], axis=-1)


def cull_agents(agents: Agents, states: np.ndarray, minimum: int = PackSpec.agents) -> Agents:
    """Agents [B, N] reduced to those that can touch some proposal's ego box or TTC projection (see module doc)."""
    s = np.asarray(states, np.float64)
    speed = np.hypot(s[..., 3], s[..., 4]).max(-1)  # [B, K]
    swept = swept_bboxes(s)
    reach = (TTC_HORIZON_S * speed)[..., None] * np.array([-1.0, -1.0, 1.0, 1.0])
    keep = overlaps(swept + reach, agent_bboxes(agents), agents.valid).any(1)  # [B, N]
    idx = _select(keep[:, None, :], minimum, AGENT_MULTIPLE)[:, 0]  # [B, N']
    take = lambda leaf, fill: _gather(np.asarray(leaf), idx[:, None, :], fill)[:, 0]
    return Agents(center=take(agents.center, FAR), heading=take(agents.heading, 0),
                  velocity=take(agents.velocity, 0), length=take(agents.length, 1), width=take(agents.width, 1),
                  type=take(agents.type, 0), present=take(agents.present, False), valid=take(agents.valid, False))


def _chunked(x: np.ndarray, fill: float, reduce, size: int) -> np.ndarray:
    """x [..., T] reduced over chunks of ``size`` steps -> [..., ceil(T / size)] (``fill`` pads)."""
    n = -(-x.shape[-1] // size)
    padded = np.concatenate([x, np.full(x.shape[:-1] + (n * size - x.shape[-1],), fill)], axis=-1)
    return reduce(padded.reshape(x.shape[:-1] + (n, size)), axis=-1)


def ego_chunk_bboxes(states: np.ndarray, size: int, steps: int | None = None, reach_s: float = 0.0) -> np.ndarray:
    """[B, K, C, 4] bbox (m) of each proposal's ego footprints at the steps (< ``steps``) of each chunk of ``size``
    steps, each footprint swept forward along its heading by up to speed x ``reach_s`` (TTC's translation of the box
    by speed x 0.1 s x s, s <= 9), plus ``MARGIN_M``. Every point the rules test (corners, centre, rear axle) lies in
    a footprint, whose x extent about its centre is |hl cos h| + |hw sin h| (y: |hl sin h| + |hw cos h|); float64."""
    s = np.asarray(states, np.float64)[..., :steps, :]
    c, sn = np.cos(s[..., 2]), np.sin(s[..., 2])
    cx, cy = s[..., 0] + EGO_REAR_AXLE_TO_CENTER * c, s[..., 1] + EGO_REAR_AXLE_TO_CENTER * sn
    hl, hw = 0.5 * EGO_LENGTH, 0.5 * EGO_WIDTH
    ex, ey = np.abs(hl * c) + np.abs(hw * sn), np.abs(hl * sn) + np.abs(hw * c)
    reach = reach_s * np.hypot(s[..., 3], s[..., 4])
    dx, dy = reach * c, reach * sn
    low = lambda x: _chunked(x, np.inf, np.min, size) - MARGIN_M
    high = lambda x: _chunked(x, -np.inf, np.max, size) + MARGIN_M
    return np.stack([low(cx - ex + np.minimum(dx, 0.0)), low(cy - ey + np.minimum(dy, 0.0)),
                     high(cx + ex + np.maximum(dx, 0.0)), high(cy + ey + np.maximum(dy, 0.0))], axis=-1)


def agent_chunk_bboxes(agents: Agents, chunks: int, ahead: int = 0) -> np.ndarray:
    """[B, N, C, 4] bbox (m) of each agent's present boxes at the frames of chunk c: [8c, 8c + 8 + ``ahead``)
    (an empty box far away where it is absent throughout)."""
    live = (np.asarray(agents.present) & np.asarray(agents.valid)[..., None])[:, :, None]  # [B, N, 1, T]
    c = np.moveaxis(np.asarray(agents.center, np.float64), -1, -2)  # [B, N, 2, T]
    r = 0.5 * np.hypot(np.asarray(agents.length, np.float64), np.asarray(agents.width, np.float64))[..., None, None]
    lo, hi = np.where(live, c - r, np.inf), np.where(live, c + r, -np.inf)
    windows = [slice(i * CONTACT_STEPS, (i + 1) * CONTACT_STEPS + ahead) for i in range(chunks)]
    return np.stack([np.concatenate([lo[..., w].min(-1), hi[..., w].max(-1)], axis=-1) for w in windows], axis=-2)


def contact_pairs(agents: Agents, states: np.ndarray, steps: int, ahead: int = 0, reach_s: float = 0.0,
                  minimum: int = PackSpec.nc_pairs, groups: int = 1) -> ContactPairs:
    """The (proposal, agent, chunk) triples whose ego boxes (ego steps < ``steps``, widened by speed x ``reach_s``)
    and agent boxes (frames up to ``ahead`` later) can touch (``ContactPairs``), for ``groups`` groups of scenes.

    ``agents`` [B, N] (the culled agents the rules will read), ``states`` [B, K, T, 11].
    """
    ego = ego_chunk_bboxes(states, CONTACT_STEPS, steps, reach_s)[:, :, None]  # [B, K, 1, C, 4]
    obj = agent_chunk_bboxes(agents, ego.shape[-2], ahead)[:, None]  # [B, 1, N, C, 4]
    keep = ((ego[..., 0] <= obj[..., 2]) & (obj[..., 0] <= ego[..., 2]) & (ego[..., 1] <= obj[..., 3])
            & (obj[..., 1] <= ego[..., 3]) & np.asarray(agents.valid)[:, None, :, None])  # [B, K, N, C]
    nb, k, n, nc = keep.shape
    per_group = nb // groups
    flat = keep.reshape(groups, -1)  # (scene in group, proposal, agent, chunk) order
    count = flat.sum(-1)
    step = CONTACT_MULTIPLE * per_group
    npair = max(minimum * per_group, -(-int(count.max(initial=0)) // step) * step)
    owner = np.full((groups, npair), per_group * k - 1, np.int32)
    agent, chunk = np.zeros((groups, npair), np.int32), np.zeros((groups, npair), np.int32)
    run = np.full((groups, npair), npair - 1, np.int32)
    for g in range(groups):
        idx = np.flatnonzero(flat[g])
        m = len(idx)
        owner[g, :m], agent[g, :m], chunk[g, :m] = idx // (n * nc), idx // nc % n, idx % nc
        key = idx // nc  # (proposal, agent)
        run[g, :m] = np.cumsum(np.concatenate([[True], key[1:] != key[:-1]])[:m]) - 1
    valid = np.arange(npair)[None] < count[:, None]
    rows = lambda x: x.reshape(nb, -1)
    return ContactPairs(owner=rows(owner), agent=rows(agent), chunk=rows(chunk), run=rows(run), valid=rows(valid),
                        groups=groups)


def pack_batch(scene: Scene, states: np.ndarray, spec: PackSpec = PackSpec(),
               groups: int = 1) -> tuple[Scene, PackSpec]:
    """``scene`` with its map packed (``pack_map``, ``groups`` tile groups), its agents culled (``cull_agents``) and
    NC's and TTC's contact triples listed (``PackedAgents``), and the sizes used.

    Host numpy, before ``device_put``. ``spec`` is a floor: pass every batch the same capacities, ones that cover
    its ``used`` (``jaxdrive.scorer.capacity_for`` of a few batches' needs), to keep shapes stable.
    """
    packed, used = pack_map(scene, states, spec, groups)
    agents = cull_agents(scene.agents, states, spec.agents)
    nc = contact_pairs(agents, states, NC_STEPS, minimum=spec.nc_pairs, groups=groups)
    ttc = contact_pairs(agents, states, TTC_STEPS, TTC_FRAMES_AHEAD, TTC_HORIZON_S, spec.ttc_pairs, groups)
    per_scene = lambda pairs: pairs.owner.shape[1]
    used = dataclasses.replace(used, agents=agents.valid.shape[-1], nc_pairs=per_scene(nc), ttc_pairs=per_scene(ttc))
    return scene.replace(map=packed, agents=PackedAgents(agents=agents, nc=nc, ttc=ttc)), used

"""The exact broad phase (``jaxdrive.broadphase``): packing the map per proposal never changes a result.

* every area flag, DAC / DDC / TLC / LK / NC / TTC value and first-violation step and raw progress computed on the
  packed batch (packed map, culled agents) is identical (bitwise) to the dense padded batch's, on all 61 fixture
  scenes and 200 synthetic scenes (the other sub-scores, comfort and the aggregation, never read the map or agents);
* soundness of the culling criteria against shapely: no polygon dropped for a proposal is touched (closed
  intersection) by any of that proposal's 41 ego footprints, so no reference test (strict point-in-polygon of corners,
  centre, rear axle, closed box contact) could hit it; no dropped agent is touched by any ego box or any of TTC's
  forward-translated ego boxes;
* the packed edge lists are the polygons' ring edges bit for bit, and the packing actually culls;
* bad inputs fail with a message naming the argument.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import sys

import jax
import numpy as np
import pytest
import shapely

sys.path.insert(0, os.path.dirname(__file__))
from reference_rules import ego_center_and_corners  # noqa: E402

from jaxdrive.broadphase import (MAP_CHUNK_STEPS, MARGIN_M, TILE_EDGES, PackSpec, contact_pairs,  # noqa: E402
                                 cull_agents, ego_chunk_bboxes, group_rows, overlaps, pack_batch, pack_map,
                                 polygon_bboxes)
from jaxdrive.data.scene_json import read_scene  # noqa: E402
from jaxdrive.data.synthetic import generate_scene  # noqa: E402
from jaxdrive.rules.areas import batch_ego_areas  # noqa: E402
from jaxdrive.rules.dac import drivable_area_compliance  # noqa: E402
from jaxdrive.rules.ddc import driving_direction_compliance  # noqa: E402
from jaxdrive.rules.lk import lane_keeping  # noqa: E402
from jaxdrive.rules.nc import batch_no_at_fault_collisions, no_at_fault_collisions  # noqa: E402
from jaxdrive.rules.progress import raw_progress  # noqa: E402
from jaxdrive.rules.tlc import traffic_light_compliance  # noqa: E402
from jaxdrive.rules.ttc import batch_time_to_collision  # noqa: E402
from jaxdrive.scene import FAR, PadSpec, batch_scenes  # noqa: E402
from conftest import EPDMS_FIXTURES, PRODUCT_CODEGEN

FIXTURES = str(EPDMS_FIXTURES)
FLAGS = ("multiple_lanes", "non_drivable", "oncoming", "center_in_intersection", "rear_axle_in_intersection",
         "red_light")
NUM_SYNTHETIC = 200


def _rules(scene, states, areas):
    """Every kernel that reads the map (one scene; its area flags given)."""
    out = {name: getattr(areas, name) for name in FLAGS}
    for name, fn in (("dac", drivable_area_compliance), ("ddc", driving_direction_compliance),
                     ("tlc", traffic_light_compliance), ("lk", lane_keeping)):
        out[name], out[name + "_step"] = fn(scene, states, areas)
    out["raw_progress"] = raw_progress(scene, states, areas)
    return out


def _all_rules(scene, states):
    """Every kernel that reads the map or the agents, on a batch (dense, or packed by ``pack_batch``)."""
    areas = batch_ego_areas(scene.map, states)
    out = jax.vmap(_rules)(scene.replace(agents=None), states, areas)
    for name, fn in (("nc", batch_no_at_fault_collisions), ("ttc", batch_time_to_collision)):
        out[name], out[name + "_step"] = fn(scene, states, areas)
    return out


RULES = jax.jit(_all_rules, compiler_options=PRODUCT_CODEGEN)  # bit for bit: as users compile it


@pytest.fixture(scope="module")
def fixture_scenes():
    files = sorted(glob.glob(f"{FIXTURES}/scene_*.json")) + sorted(glob.glob(f"{FIXTURES}/sanity/*.json"))
    assert len(files) == 61, f"expected 61 fixture scenes, found {len(files)}"
    return [read_scene(f) for f in files]


@pytest.fixture(scope="module")
def synthetic_scenes():
    return [generate_scene(seed, num_proposals=2) for seed in range(NUM_SYNTHETIC)]


def _assert_identical(scenes, packed_rules=RULES):
    spec = dataclasses.replace(PadSpec.fit(scenes), proposals=max(s.num_proposals for s in scenes))
    scene, props, _ = batch_scenes(scenes, spec, validate=False)
    dense = jax.device_get(RULES(scene, props.states))
    packed_scene, used = pack_batch(scene, props.states)
    packed = jax.device_get(packed_rules(packed_scene, props.states))
    valid = np.asarray(props.valid)
    for name, want in dense.items():
        got = packed[name]
        assert got.shape == want.shape, name
        bad = np.argwhere((got != want) & valid.reshape(valid.shape + (1,) * (want.ndim - 2)))
        assert bad.size == 0, f"{name}: packed differs from dense at (scene, proposal, ...) {bad[:5].tolist()}"
    # The packing must actually cull: fewer (proposal, polygon) pairs than every proposal with every polygon.
    real_pairs = (np.asarray(packed_scene.map.lanes.pair_poly) >= 0).sum()
    assert real_pairs < sum(s.num_proposals * len(s.lanes) for s in scenes)
    assert np.asarray(packed_scene.agents.agents.valid).sum() < sum(len(s.agents) for s in scenes)
    return used


def test_packed_identical_on_fixtures(fixture_scenes):
    _assert_identical(fixture_scenes)


def test_packed_identical_on_synthetic(synthetic_scenes):
    _assert_identical(synthetic_scenes)


@pytest.mark.slow  # the rules traced and compiled again
def test_segment_reductions_by_scans_score_identically(fixture_scenes, synthetic_scenes, monkeypatch):
    """``JAXDRIVE_SEGMENTS=scan`` (``broadphase.segments``: the tile and slot sums as differenced prefix sums, the
    contact rules' minima as segmented running minima; no scatter), traced as for an accelerator (loops of at most
    ``ACCELERATOR_TRIPS`` steps over capacity-sized blocks, where it is meant to run): every packed flag, value and
    step of the 61 fixtures and 50 synthetic scenes equals the dense batch's."""
    monkeypatch.setenv("JAXDRIVE_SEGMENTS", "scan")
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    rules = jax.jit(lambda scene, states: _all_rules(scene, states),  # a new function: traced under these settings
                    compiler_options=PRODUCT_CODEGEN)
    _assert_identical(fixture_scenes, rules)
    _assert_identical(synthetic_scenes[:50], rules)


def test_sorted_segment_reductions_by_scans_equal_the_scatters(monkeypatch):
    """``sorted_segment_sum`` / ``sorted_segment_min`` by scans equal numpy loops (and ``jax.ops.segment_sum`` /
    ``segment_min``) on sorted ids with empty segments (minimum: the dtype's largest value) and ids outside [0, S)
    (they count nowhere); sums of values whose running total wraps around int32; minima of ints and floats."""
    from jaxdrive.broadphase import segments

    rng = np.random.default_rng(0)
    ids = np.sort(rng.integers(-3, 60, 400)).astype(np.int32)  # 0..49 kept; -3..-1 and 50..59 dropped
    ids[ids == 13] = 12  # segment 13 empty
    x = rng.integers(-2 ** 24, 2 ** 27, (400, 3)).astype(np.int32)  # mostly positive: the running total wraps
    want = np.zeros((50, 3), np.int64)
    for i, v in zip(ids, x):
        if 0 <= i < 50:
            want[i] += v
    assert np.abs(want).max() < 2 ** 31 and np.abs(np.cumsum(x, axis=0, dtype=np.int64)).max() >= 2 ** 31
    low_int = np.full(50, np.iinfo(np.int32).max)
    low_float = np.full(50, np.inf, np.float32)
    y = rng.normal(size=400).astype(np.float32)
    for i, v, f in zip(ids, x[:, 0], y):
        if 0 <= i < 50:
            low_int[i], low_float[i] = min(low_int[i], v), min(low_float[i], f)
    assert (low_int == np.iinfo(np.int32).max).any()  # an empty segment
    for impl in segments.IMPLEMENTATIONS:
        monkeypatch.setenv("JAXDRIVE_SEGMENTS", impl)
        got = jax.jit(lambda v, i: segments.sorted_segment_sum(v, i, 50))(x, ids)
        np.testing.assert_array_equal(got, want, err_msg=impl)
        for values, low in ((x[:, 0], low_int), (y, low_float)):
            got = jax.jit(lambda v, i: segments.sorted_segment_min(v, i, 50))(values, ids)
            np.testing.assert_array_equal(got, low, err_msg=impl)
    monkeypatch.setenv("JAXDRIVE_SEGMENTS", "atomic")
    with pytest.raises(ValueError, match="JAXDRIVE_SEGMENTS"):
        segments.sorted_segment_sum(x, ids, 50)


def test_packed_identical_on_dense_traffic_in_groups():
    """The reference mix (~32 agents, the largest maps, 16 proposals) packed in 4 groups (as for 4 devices): every
    flag, value and step equals the dense batch's, and the collision rules fire often enough to be tested."""
    scenes = [generate_scene(seed, profile="reference") for seed in range(8)]
    spec = dataclasses.replace(PadSpec.fit(scenes), proposals=16)
    scene, props, _ = batch_scenes(scenes, spec, validate=False)
    dense = jax.device_get(RULES(scene, props.states))
    packed_scene, _ = pack_batch(scene, props.states, groups=4)
    packed = jax.device_get(RULES(packed_scene, props.states))
    for name, want in dense.items():
        np.testing.assert_array_equal(packed[name], want, err_msg=name)
    assert (dense["nc"] < 1).sum() >= 5 and (dense["ttc"] < 1).sum() >= 10, (dense["nc"], dense["ttc"])


def test_loops_over_used_tiles_triples_and_segments_only_at_generous_capacities(monkeypatch):
    """The tile sums, the contact tests and LK's near segments visit blocks up to the last used entry: with blocks of
    8 (many steps, partial last blocks) and every capacity 3x the batch's needs, every flag, value and step still
    equals the dense batch's; ``used_blocks`` counts exactly the blocks that hold used tiles / valid triples."""
    from jaxdrive.broadphase import contacts, tiles
    from jaxdrive.rules import lk

    monkeypatch.setattr(tiles, "TILE_BLOCK", 8)
    monkeypatch.setattr(contacts, "TRIPLE_BLOCK", 8)
    monkeypatch.setattr(lk, "NEAR_BLOCK", 8)
    scenes = [generate_scene(seed, profile="reference") for seed in range(8, 14)]
    spec = dataclasses.replace(PadSpec.fit(scenes), proposals=16)
    scene, props, _ = batch_scenes(scenes, spec, validate=False)
    dense = jax.device_get(RULES(scene, props.states))
    _, used = pack_batch(scene, props.states, groups=2)
    generous = PackSpec(**{f.name: 3 * getattr(used, f.name) for f in dataclasses.fields(PackSpec)})
    packed_scene, _ = pack_batch(scene, props.states, generous, groups=2)
    rules = jax.jit(lambda s, x: _all_rules(s, x), compiler_options=PRODUCT_CODEGEN)  # traced anew
    packed = jax.device_get(rules(packed_scene, props.states))
    for name, want in dense.items():
        np.testing.assert_array_equal(packed[name], want, err_msg=name)
    assert (dense["nc"] < 1).sum() >= 3 and (dense["ttc"] < 1).sum() >= 3, (dense["nc"], dense["ttc"])
    assert (dense["lk"] < 1).sum() >= 3, dense["lk"]
    # LK's distances: the minimum over every listed near segment (numpy, float64), not over the first blocks only.
    from jaxdrive.rules.areas import ego_centers

    got = np.asarray(jax.jit(jax.vmap(lambda s, x: lk.centerline_deviation(s, x)))(packed_scene, props.states))
    c = np.asarray(jax.vmap(ego_centers)(props.states), np.float64)[..., None, :]  # [B, K, T, 1, 2]
    idx = np.asarray(packed_scene.map.near_segments)  # [B, K, S]
    line = np.asarray(packed_scene.map.centerline, np.float64)  # [B, C, 2]
    take = lambda i: np.take_along_axis(line[:, None], np.maximum(i, 0)[..., None], axis=2)[:, :, None]  # [B,K,1,S,2]
    a, d = take(idx), take(idx + 1) - take(idx)
    t = np.clip(((c - a) * d).sum(-1) / np.maximum((d * d).sum(-1), 1e-12), 0, 1)
    dist = np.linalg.norm(a + t[..., None] * d - c, axis=-1)  # [B, K, T, S]
    want = np.where((idx >= 0)[:, :, None], dist, np.inf).min(-1)
    assert (idx >= 0).sum(-1).max() > 16  # more than two blocks of 8
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    for name in ("areas", "lanes", "red_lanes"):
        t = getattr(packed_scene.map, name)
        grouped = jax.tree_util.tree_map(lambda x: group_rows(x, 2), t)
        real = np.asarray(grouped.start)[..., 0, 0] < FAR  # [G, NT]: a used tile's first edge is a real one
        last = max((np.flatnonzero(r)[-1] + 1 if r.any() else 0) for r in real)
        assert last < real.shape[1] // 2, name  # the capacities are generous: most tiles are unused
        assert int(tiles.used_blocks(grouped)) == -(-last // 8), name
    for name in ("nc", "ttc"):
        grouped = jax.tree_util.tree_map(lambda x: group_rows(x, 2), getattr(packed_scene.agents, name))
        valid = np.asarray(grouped.valid)
        last = max((np.flatnonzero(r)[-1] + 1 if r.any() else 0) for r in valid)
        assert 0 < last < valid.shape[1] // 2, name
        assert int(contacts.used_blocks(grouped)) == -(-last // 8), name


def test_loop_blocks_are_larger_on_accelerators(monkeypatch):
    from jaxdrive.broadphase import blocks

    assert blocks.block_size(512, 100_000) == 512 and blocks.block_size(512, 40) == 40  # CPU (this suite)
    monkeypatch.setattr(blocks.jax, "default_backend", lambda: "gpu")
    assert blocks.block_size(512, 10 ** 5) == 512 * blocks.ACCELERATOR_FACTOR  # more than 10 ** 5 / 8
    assert blocks.block_size(512, 10 ** 6) == -(-10 ** 6 // blocks.ACCELERATOR_TRIPS)  # at most 8 steps over it all
    assert blocks.block_size(16, 100) == 100


def _dropped_never_touched(scene):
    """For every proposal and every polygon the broad phase drops: no ego footprint touches it (shapely, float64)."""
    batch, props, _ = batch_scenes([scene], PadSpec.fit([scene]), validate=False)
    k = scene.num_proposals
    boxes = np.array([[ego_center_and_corners(s)[1] for s in traj] for traj in scene.proposal_states])  # [K,T,4,2]
    footprints = shapely.polygons(boxes.reshape(-1, 4, 2)).reshape(k, -1)
    checked = 0
    # Agents: every present box vs every ego box and TTC's translations of it by speed x 0.1 s x {0, 3, 6, 9}.
    kept = np.asarray(cull_agents(batch.agents, props.states).valid).sum()
    dropped_ids = set(range(len(scene.agents))) - set(_kept_agents(batch, props.states))
    assert len(dropped_ids) == len(scene.agents) - kept
    states = scene.proposal_states
    speed = np.hypot(states[..., 3], states[..., 4])
    for i in sorted(dropped_ids):
        agent = scene.agents[i]
        for t, row in enumerate(agent.track):
            if np.any(np.isnan(row)):
                continue
            u, n = np.array([np.cos(row[2]), np.sin(row[2])]), np.array([-np.sin(row[2]), np.cos(row[2])])
            hl, hw = 0.5 * agent.length, 0.5 * agent.width
            obj = shapely.Polygon([row[:2] + hl * u + hw * n, row[:2] - hl * u + hw * n, row[:2] - hl * u - hw * n,
                                   row[:2] + hl * u - hw * n])
            for s in (0, 3, 6, 9):
                if t - s < 0:
                    continue
                h = states[:, t - s, 2]
                shift = (speed[:, t - s] * 0.1 * s)[:, None] * np.stack([np.cos(h), np.sin(h)], -1)  # [K, 2]
                moved = shapely.polygons(boxes[:, t - s] + shift[:, None, :])
                assert not shapely.intersects(moved, obj).any(), \
                    f"scene {scene.id}: dropped agent {agent.id} touches an ego box at step {t - s} (+{s})"
                checked += 1
    chunk = MAP_CHUNK_STEPS
    for polys, host in ((batch.map.areas, scene.areas), (batch.map.lanes, scene.lanes)):
        keep = overlaps(ego_chunk_bboxes(np.asarray(props.states), chunk), polygon_bboxes(polys), polys.valid)[0]
        for p, item in enumerate(host):
            poly = shapely.Polygon(item.polygon)
            for j, c in np.argwhere(~keep[:k, :, p]):
                assert not shapely.intersects(footprints[j, c * chunk:(c + 1) * chunk], poly).any(), \
                    f"scene {scene.id}: proposal {j} touches dropped polygon {item.id} in chunk {c}"
                checked += 1
    return checked


def _kept_agents(batch, states):
    """Original indices of the agents ``cull_agents`` keeps, via a marker in ``type`` (not read by the culling)."""
    marked = batch.agents.replace(type=np.arange(batch.agents.type.shape[-1], dtype=np.int32)[None])
    culled = cull_agents(marked, states)
    return [int(v) for v, ok in zip(culled.type[0], culled.valid[0]) if ok]


def test_dropped_contact_triples_never_touch():
    """Soundness of the contact triples against shapely: for every (proposal, agent, chunk) the broad phase drops,
    no ego box at the chunk's steps touches the agent's box at the same frame (NC), and no TTC translation of it
    (speed x 0.1 s x {0, 3, 6, 9}) touches the agent's box at frame t + s."""
    from jaxdrive.broadphase import CONTACT_STEPS, NC_STEPS, TTC_FRAMES_AHEAD, TTC_HORIZON_S, TTC_STEPS

    checked = 0
    for seed in range(3):
        scene = generate_scene(seed, profile="reference")
        batch, props, _ = batch_scenes([scene], PadSpec.fit([scene]), validate=False)
        states = np.asarray(props.states, np.float64)[0]  # ego-centred, as the packing sees them
        agents = batch.agents
        center, heading = np.asarray(agents.center, np.float64)[0], np.asarray(agents.heading, np.float64)[0]
        live = np.asarray(agents.present)[0] & np.asarray(agents.valid)[0][:, None]
        length, width = np.asarray(agents.length)[0], np.asarray(agents.width)[0]
        ego = np.array([[ego_center_and_corners(st)[1] for st in traj] for traj in states])  # [K, T, 4, 2]
        speed = np.hypot(states[..., 3], states[..., 4])

        def agent_box(n, f):
            u = np.array([np.cos(heading[n, f]), np.sin(heading[n, f])])
            v = np.array([-u[1], u[0]])
            hl, hw = 0.5 * length[n], 0.5 * width[n]
            return shapely.Polygon([center[n, f] + hl * u + hw * v, center[n, f] - hl * u + hw * v,
                                    center[n, f] - hl * u - hw * v, center[n, f] + hl * u - hw * v])

        for steps, ahead, reach, offsets in ((NC_STEPS, 0, 0.0, (0,)), (TTC_STEPS, TTC_FRAMES_AHEAD, TTC_HORIZON_S,
                                                                        (0, 3, 6, 9))):
            pairs = contact_pairs(agents, props.states, steps, ahead, reach)
            kept = {(int(o), int(a), int(c)) for o, a, c, ok in zip(pairs.owner[0], pairs.agent[0], pairs.chunk[0],
                                                                    pairs.valid[0]) if ok}
            for j in range(scene.num_proposals):
                for n in np.flatnonzero(np.asarray(agents.valid)[0]):
                    for c in range(-(-steps // CONTACT_STEPS)):
                        if (j, n, c) in kept:
                            continue
                        for t in range(c * CONTACT_STEPS, min(steps, (c + 1) * CONTACT_STEPS)):
                            h = states[j, t, 2]
                            for s in offsets:
                                if t + s >= live.shape[1] or not live[n, t + s]:
                                    continue
                                shift = speed[j, t] * 0.1 * s * np.array([np.cos(h), np.sin(h)])
                                assert not shapely.intersects(shapely.Polygon(ego[j, t] + shift), agent_box(n, t + s)), \
                                    f"dropped triple (proposal {j}, agent {n}, chunk {c}) touches at step {t} (+{s})"
                                checked += 1
    assert checked > 10000


def test_dropped_polygons_and_agents_are_never_touched(fixture_scenes, synthetic_scenes):
    checked = sum(_dropped_never_touched(s) for s in fixture_scenes + synthetic_scenes[:60])
    assert checked > 1000  # the criterion was exercised on many dropped (proposal, polygon) pairs


def _chunk_points(states: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
    """Footprints [L, 4, 2] and every tested point (corners, centre, rear axle) [L * 6, 2] of one proposal's chunk c,
    in float64 from the reference geometry."""
    steps = states[c * MAP_CHUNK_STEPS:(c + 1) * MAP_CHUNK_STEPS].astype(np.float64)
    geo = [ego_center_and_corners(st) for st in steps]
    boxes = np.stack([corners for _, corners in geo])
    points = np.concatenate([boxes.reshape(-1, 2), np.stack([centre for centre, _ in geo]), steps[:, :2]])
    return boxes, points


def test_packed_edges_are_the_kept_ring_edges(fixture_scenes):
    """Each (scene, proposal, chunk, lane) pair's tiles hold exactly the ring edges that reach its chunk's footprints
    (y-range within the chunk's y-range +- margin, not entirely left of it), in ring order, bit for bit; units
    without such edges are dropped."""
    scenes = fixture_scenes[:6]
    batch, props, _ = batch_scenes(scenes, PadSpec.fit(scenes), validate=False)
    packed, _ = pack_map(batch, props.states)
    states = np.asarray(props.states)
    keep = overlaps(ego_chunk_bboxes(states, MAP_CHUNK_STEPS), polygon_bboxes(batch.map.lanes),
                    batch.map.lanes.valid)  # [B, K, C, P]
    verts = np.asarray(batch.map.lanes.vertices)
    nv, k, nc = verts.shape[2], states.shape[1], keep.shape[2]
    tiles = packed.lanes
    start, end = tiles.start.reshape(-1, TILE_EDGES, 2), tiles.end.reshape(-1, TILE_EDGES, 2)
    tile_pair, slot, poly = tiles.tile_pair.reshape(-1), tiles.pair_slot.reshape(-1), tiles.pair_poly.reshape(-1)
    assert np.all(np.diff(tile_pair) >= 0) and np.all(np.diff(slot) >= 0)  # sorted for the segment sums
    real = poly >= 0
    checked = 0
    for b, scene in enumerate(scenes):
        for j in range(scene.num_proposals):
            for c in range(nc):
                footprints, _ = _chunk_points(states[b, j], c)
                lo, hi = footprints.reshape(-1, 2).min(0) - MARGIN_M, footprints.reshape(-1, 2).max(0) + MARGIN_M
                mine = np.flatnonzero(real & (slot == (b * k + j) * nc + c))
                expected = {}
                for p in np.flatnonzero(keep[b, j, c]):
                    n = min(len(scene.lanes[p].polygon) + 1, nv)
                    a, e = verts[b, p, :n].astype(np.float64), verts[b, p, (np.arange(n) + 1) % nv].astype(np.float64)
                    reach = ((np.minimum(a[:, 1], e[:, 1]) <= hi[1]) & (np.maximum(a[:, 1], e[:, 1]) >= lo[1])
                             & (np.maximum(a[:, 0], e[:, 0]) >= lo[0]))
                    if reach.any():
                        expected[p] = np.flatnonzero(reach)
                np.testing.assert_array_equal(poly[mine], sorted(expected))
                for i in mine:
                    edges = expected[poly[i]]
                    got_start, got_end = start[tile_pair == i].reshape(-1, 2), end[tile_pair == i].reshape(-1, 2)
                    np.testing.assert_array_equal(got_start[:len(edges)], verts[b, poly[i], edges])
                    np.testing.assert_array_equal(got_end[:len(edges)], verts[b, poly[i], (edges + 1) % nv])
                    # The rest of the pair's last tile is zero-length padding at FAR.
                    assert np.all(got_start[len(edges):] == FAR) and np.all(got_end[len(edges):] == FAR)
                    assert len(got_start) == -(-len(edges) // TILE_EDGES) * TILE_EDGES
                    checked += 1
    assert checked > 500


def test_dropped_edges_never_matter(fixture_scenes, synthetic_scenes):
    """Soundness of the edge rule in float64: every ring edge a (proposal, chunk, lane / area) unit drops neither
    straddles the horizontal ray of nor holds any point the chunk tests (or, straddling, lies on its -x side), and
    touches none of the chunk's footprints (shapely), so no per-edge predicate could differ."""
    scenes = fixture_scenes[:20] + synthetic_scenes[:20]
    dropped = 0
    for scene in scenes:
        batch, props, _ = batch_scenes([scene], PadSpec.fit([scene]), validate=False)
        states = np.asarray(props.states)[0]
        box = ego_chunk_bboxes(states[None], MAP_CHUNK_STEPS)[0]  # [K, C, 4]
        for polys in (batch.map.areas, batch.map.lanes):
            verts = np.asarray(polys.vertices)[0].astype(np.float64)
            counts = np.asarray(polys.vertex_valid)[0].sum(-1)
            for p in np.flatnonzero(np.asarray(polys.valid)[0]):
                a = verts[p, :counts[p]]
                e = np.roll(a, -1, axis=0)
                for j in range(scene.num_proposals):
                    for c in range(box.shape[1]):
                        bx = box[j, c]
                        keep = ((np.minimum(a[:, 1], e[:, 1]) <= bx[3]) & (np.maximum(a[:, 1], e[:, 1]) >= bx[1])
                                & (np.maximum(a[:, 0], e[:, 0]) >= bx[0]))
                        if keep.all():
                            continue
                        footprints, pts = _chunk_points(states[j], c)
                        da, de = a[~keep][:, None], e[~keep][:, None]  # [E, 1, 2] against points [N, 2]
                        px, py = pts[None, :, 0], pts[None, :, 1]
                        straddle = (da[..., 1] > py) != (de[..., 1] > py)
                        cross = (de[..., 0] - da[..., 0]) * (py - da[..., 1]) - (de[..., 1] - da[..., 1]) * (px - da[..., 0])
                        crossing = straddle & (cross * np.sign(de[..., 1] - da[..., 1]) > 0)
                        on = ((cross == 0) & (np.minimum(da[..., 0], de[..., 0]) <= px) & (px <= np.maximum(da[..., 0], de[..., 0]))
                              & (np.minimum(da[..., 1], de[..., 1]) <= py) & (py <= np.maximum(da[..., 1], de[..., 1])))
                        assert not (crossing | on).any(), f"scene {scene.id}: a dropped edge of polygon {p} matters"
                        lines = shapely.linestrings(np.stack([a[~keep], e[~keep]], axis=1))
                        assert not shapely.intersects(lines[:, None], shapely.polygons(footprints)[None]).any()
                        dropped += int((~keep).sum())
    assert dropped > 10000  # the rule was exercised on many dropped edges


def test_bad_inputs_name_the_argument(fixture_scenes):
    batch, props, _ = batch_scenes(fixture_scenes[:1], validate=False)
    with pytest.raises(ValueError, match="states"):
        pack_map(batch, np.asarray(props.states)[0])
    packed, _ = pack_batch(batch, props.states)
    with pytest.raises(ValueError, match="scene.map"):
        pack_map(packed, props.states)
    from jaxdrive.rules.areas import ego_areas

    with pytest.raises(ValueError, match="batch_ego_areas"):
        ego_areas(jax.tree_util.tree_map(lambda x: x[0], packed.map), props.states[0])
    with pytest.raises(ValueError, match="pack the map for these states"):
        batch_ego_areas(packed.map, np.concatenate([props.states, props.states], axis=1))
    from jaxdrive.rules.epdms import score

    areas = batch_ego_areas(packed.map, props.states)
    with pytest.raises(ValueError, match="pack the batch for these states"):
        batch_no_at_fault_collisions(packed, np.concatenate([props.states, props.states]), areas)
    with pytest.raises(ValueError, match="batch_no_at_fault_collisions"):
        jax.vmap(no_at_fault_collisions)(packed, props.states, areas)
    with pytest.raises(ValueError, match=r"areas: expected flags of shape \(B, K, T\)"):
        score(packed, props, areas=jax.tree_util.tree_map(lambda x: x[:, :, :-1], areas))


def test_near_segments_keep_every_distance_lk_can_see(synthetic_scenes):
    """Packed LK distances equal the whole polyline's (to rounding) wherever that is <= 0.5 m, and exceed 0.5 m
    elsewhere."""
    from jaxdrive.rules.lk import DEVIATION_M, centerline_deviation

    scenes = synthetic_scenes[:64]
    scene, props, _ = batch_scenes(scenes, dataclasses.replace(PadSpec.fit(scenes), proposals=2), validate=False)
    packed_scene, used = pack_batch(scene, props.states)
    dev = jax.jit(jax.vmap(centerline_deviation))
    dense, packed = np.asarray(dev(scene, props.states)), np.asarray(dev(packed_scene, props.states))
    near = dense <= DEVIATION_M
    assert near.sum() > 1000 and (~near).sum() > 100  # both sides of the threshold are exercised
    # The same segments' minimum; XLA may round the two fusions differently (float32 at ego-centred scales).
    np.testing.assert_allclose(packed[near], dense[near], rtol=0, atol=1e-5)
    assert np.all(packed[dense > DEVIATION_M + 1e-5] > DEVIATION_M)
    assert used.near_segments < np.asarray(scene.map.centerline).shape[-2] - 1  # it culls


def test_pack_spec_union_is_the_fieldwise_maximum():
    a = PackSpec(lane_pairs=4, lane_tiles=16, agents=9)
    b = PackSpec(lane_pairs=32, lane_tiles=8, nc_pairs=3)
    c = PackSpec(area_pairs=100)
    u = a.union(b, c)
    assert (u.lane_pairs, u.agents, u.area_pairs) == (32, 9, 100)
    assert u.lane_tiles == 64 and u.nc_pairs == 16  # c's defaults exceed a's 16 and b's 3
    assert a.union() == a and a.union(b) == b.union(a)

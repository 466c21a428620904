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

from jaxdrive.broadphase import (TILE_EDGES, PackSpec, cull_agents, overlaps, pack_batch, pack_map,  # noqa: E402
                                 polygon_bboxes, swept_bboxes)
from jaxdrive.data.scene_json import read_scene  # noqa: E402
from jaxdrive.data.synthetic import generate_scene  # noqa: E402
from jaxdrive.rules.areas import batch_ego_areas  # noqa: E402
from jaxdrive.rules.dac import drivable_area_compliance  # noqa: E402
from jaxdrive.rules.ddc import driving_direction_compliance  # noqa: E402
from jaxdrive.rules.lk import lane_keeping  # noqa: E402
from jaxdrive.rules.nc import batch_no_at_fault_collisions  # noqa: E402
from jaxdrive.rules.progress import raw_progress  # noqa: E402
from jaxdrive.rules.tlc import traffic_light_compliance  # noqa: E402
from jaxdrive.rules.ttc import batch_time_to_collision  # noqa: E402
from jaxdrive.scene import FAR, PadSpec, batch_scenes  # noqa: E402

FIXTURES = "/work/shared/fixtures/epdms"
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


@jax.jit
def RULES(scene, states):
    """Every kernel that reads the map or the agents, on a batch (dense, or packed by ``pack_batch``)."""
    areas = batch_ego_areas(scene.map, states)
    out = jax.vmap(_rules)(scene.replace(agents=None), states, areas)
    for name, fn in (("nc", batch_no_at_fault_collisions), ("ttc", batch_time_to_collision)):
        out[name], out[name + "_step"] = fn(scene, states, areas)
    return out


@pytest.fixture(scope="module")
def fixture_scenes():
    files = sorted(glob.glob(f"{FIXTURES}/scene_*.json")) + sorted(glob.glob(f"{FIXTURES}/sanity/*.json"))
    assert len(files) == 61, f"expected 61 fixture scenes, found {len(files)}"
    return [read_scene(f) for f in files]


@pytest.fixture(scope="module")
def synthetic_scenes():
    return [generate_scene(seed, num_proposals=2) for seed in range(NUM_SYNTHETIC)]


def _assert_identical(scenes):
    spec = dataclasses.replace(PadSpec.fit(scenes), proposals=max(s.num_proposals for s in scenes))
    scene, props, _ = batch_scenes(scenes, spec, validate=False)
    dense = jax.device_get(RULES(scene, props.states))
    packed_scene, used = pack_batch(scene, props.states)
    packed = jax.device_get(RULES(packed_scene, props.states))
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


def _dropped_never_touched(scene):
    """For every proposal and every polygon the broad phase drops: no ego footprint touches it (shapely, float64)."""
    batch, props, _ = batch_scenes([scene], PadSpec.fit([scene]), validate=False)
    swept = swept_bboxes(np.asarray(props.states))
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
    for polys, host in ((batch.map.areas, scene.areas), (batch.map.lanes, scene.lanes)):
        keep = overlaps(swept, polygon_bboxes(polys), polys.valid)[0]
        for p, item in enumerate(host):
            poly = shapely.Polygon(item.polygon)
            for j in np.flatnonzero(~keep[:k, p]):
                assert not shapely.intersects(footprints[j], poly).any(), \
                    f"scene {scene.id}: proposal {j} touches dropped polygon {item.id}"
                checked += 1
    return checked


def _kept_agents(batch, states):
    """Original indices of the agents ``cull_agents`` keeps, via a marker in ``type`` (not read by the culling)."""
    marked = batch.agents.replace(type=np.arange(batch.agents.type.shape[-1], dtype=np.int32)[None])
    culled = cull_agents(marked, states)
    return [int(v) for v, ok in zip(culled.type[0], culled.valid[0]) if ok]


def test_dropped_polygons_and_agents_are_never_touched(fixture_scenes, synthetic_scenes):
    checked = sum(_dropped_never_touched(s) for s in fixture_scenes + synthetic_scenes[:60])
    assert checked > 1000  # the criterion was exercised on many dropped (proposal, polygon) pairs


def test_packed_edges_are_the_ring_edges(fixture_scenes):
    """Each kept (scene, proposal, lane) pair's tiles hold exactly its ring's edges, in order, bit for bit."""
    scenes = fixture_scenes[:6]
    batch, props, _ = batch_scenes(scenes, PadSpec.fit(scenes), validate=False)
    packed, _ = pack_map(batch, props.states)
    keep = overlaps(swept_bboxes(np.asarray(props.states)), polygon_bboxes(batch.map.lanes), batch.map.lanes.valid)
    verts = np.asarray(batch.map.lanes.vertices)
    nv, k = verts.shape[2], props.states.shape[1]
    tiles = packed.lanes
    start, end = tiles.start.reshape(-1, TILE_EDGES, 2), tiles.end.reshape(-1, TILE_EDGES, 2)
    tile_pair, owner, poly = tiles.tile_pair.reshape(-1), tiles.pair_owner.reshape(-1), tiles.pair_poly.reshape(-1)
    assert np.all(np.diff(tile_pair) >= 0) and np.all(np.diff(owner) >= 0)  # sorted for the segment sums
    real = poly >= 0
    assert real.sum() == keep.sum()  # one pair per kept (scene, proposal, lane)
    for b, scene in enumerate(scenes):
        for j in range(scene.num_proposals):
            mine = np.flatnonzero(real & (owner == b * k + j))
            np.testing.assert_array_equal(poly[mine], np.flatnonzero(keep[b, j]))
            for i in mine:
                p = poly[i]
                got_start, got_end = start[tile_pair == i].reshape(-1, 2), end[tile_pair == i].reshape(-1, 2)
                n = min(len(scene.lanes[p].polygon) + 1, nv)
                np.testing.assert_array_equal(got_start[:n], verts[b, p, :n])
                np.testing.assert_array_equal(got_end[:n], verts[b, p, (np.arange(n) + 1) % nv])
                # The rest of the polygon's last tile is zero-length padding at FAR.
                assert np.all(got_start[n:] == FAR) and np.all(got_end[n:] == FAR)
                assert len(got_start) == -(-n // TILE_EDGES) * TILE_EDGES


def test_pack_spec_is_a_floor_and_grows():
    spec = PackSpec(lane_pairs=4, lane_tiles=16)
    big = PackSpec(lane_pairs=32, lane_tiles=8)
    grown = spec.grow(big)
    assert grown.lane_pairs == 32 and grown.lane_tiles == 16
    roomy = spec.grow(big, headroom=1.25)
    assert roomy.lane_pairs == 40 and roomy.lane_tiles == 16 and roomy.agents == spec.agents
    assert roomy.grow(roomy, headroom=1.25) == roomy  # a batch that fits never grows the spec (no recompiles)


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

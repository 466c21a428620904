"""BEV rasteriser: pixels equal a slow per-pixel reference (matplotlib paths, float64) on synthetic scenes; a known
layout (agent ahead, its heading, the ego footprint); deterministic; the batch equals single renders."""
import math

import jax
import numpy as np
import pytest
from matplotlib.path import Path as MplPath

from jaxdrive.data.synthetic import generate_scene
from jaxdrive.judge import bev
from jaxdrive.scene import AreaKind, batch_scenes

CFG = bev.BevConfig(size=48, ahead=40.0, behind=8.0)


@pytest.fixture(scope="module")
def batch():
    scenes = [generate_scene(s, num_proposals=3) for s in (0, 3, 5)]
    sc, pr, _ = batch_scenes(scenes)
    traj = pr.states[:, 1]
    return sc, traj, np.asarray(bev.render_bev_batch(sc, traj, CFG))


def _box(c, h, length, width):
    u, n = np.array([math.cos(h), math.sin(h)]), np.array([-math.sin(h), math.cos(h)])
    return np.array([c + sl * length / 2 * u + sw * width / 2 * n for sl, sw in ((1, 1), (-1, 1), (-1, -1), (1, -1))])


def _in_box(p, box):
    return MplPath(box).contains_point(p, radius=1e-9) or MplPath(box).contains_point(p, radius=-1e-9)


def _seg_d(p, a, b):
    d = b - a
    t = np.clip(np.dot(p - a, d) / max(np.dot(d, d), 1e-30), 0, 1) if np.dot(d, d) > 0 else 0.0
    return np.linalg.norm(p - (a + t * d))


def reference_pixel(sc, b, traj, p):
    """The colour of ego-frame point p, layer by layer in plain numpy / matplotlib."""
    C = bev.COLORS
    m = sc.map
    color = C["off_road"]
    areas = np.asarray(m.areas.vertices[b]); kinds = np.asarray(m.area_kind[b]); av = np.asarray(m.areas.valid[b])
    inside = [av[i] and MplPath(areas[i]).contains_point(p) for i in range(len(av))]
    if any(ins and kinds[i] != AreaKind.INTERSECTION for i, ins in enumerate(inside)):
        color = C["drivable"]
    if any(ins and kinds[i] == AreaKind.INTERSECTION for i, ins in enumerate(inside)):
        color = C["intersection"]
    lanes = np.asarray(m.lanes.vertices[b]); lvalid = np.asarray(m.lanes.valid[b])
    route = np.asarray(m.lane_on_route[b]); red = np.asarray(m.lane_red[b])[:, 0]
    lin = [lvalid[i] and MplPath(lanes[i]).contains_point(p) for i in range(len(lvalid))]
    if any(x and route[i] for i, x in enumerate(lin)):
        color = C["route_lane"]
    if any(x and route[i] and red[i] for i, x in enumerate(lin)):
        color = C["red_light"]
    vv = np.asarray(m.lanes.vertex_valid[b])
    for i in np.flatnonzero(lvalid):
        for j in np.flatnonzero(vv[i]):
            if _seg_d(p, lanes[i, j], lanes[i, (j + 1) % lanes.shape[1]]) <= CFG.line_width:
                color = C["lane_boundary"]
    cl = np.asarray(m.centerline[b]); cv = np.asarray(m.centerline_valid[b])
    if any(cv[j + 1] and _seg_d(p, cl[j], cl[j + 1]) <= CFG.line_width for j in range(len(cl) - 1)):
        color = C["centerline"]
    ag = sc.agents
    types = np.asarray(ag.type[b]); valid = np.asarray(ag.valid[b]); present = np.asarray(ag.present[b])
    cen = np.asarray(ag.center[b]); hd = np.asarray(ag.heading[b]); ln = np.asarray(ag.length[b])
    wd = np.asarray(ag.width[b])
    pal = [C["vehicle"], C["pedestrian"], C["bicycle"], C["static"]]
    for t, tone in [(t, 0.45) for t in (40, 30, 20, 10)] + [(0, 1.0)]:
        for n in range(len(types)):
            if valid[n] and present[n, t] and _in_box(p, _box(cen[n, t], hd[n, t], ln[n], wd[n])):
                color = tuple(int(c * tone) for c in pal[min(types[n], 3)])
                break
    for n in range(len(types)):
        u = np.array([math.cos(hd[n, 0]), math.sin(hd[n, 0])])
        if valid[n] and present[n, 0] and _in_box(p, _box(cen[n, 0] + ln[n] / 3 * u, hd[n, 0], ln[n] / 3, wd[n])):
            color = tuple(int(c * 0.5 + 127.5) for c in pal[min(types[n], 3)])
            break
    from jaxdrive.geometry import EGO_LENGTH, EGO_REAR_AXLE_TO_CENTER, EGO_WIDTH
    steps = bev.EGO_STEPS
    for k, s in enumerate(steps):
        st = traj[s]
        u = np.array([math.cos(st[2]), math.sin(st[2])])
        if _in_box(p, _box(st[:2] + EGO_REAR_AXLE_TO_CENTER * u, st[2], EGO_LENGTH, EGO_WIDTH)):
            f = k / (len(steps) - 1)
            a, z = np.array(C["trajectory_start"], np.float32), np.array(C["trajectory_end"], np.float32)
            color = tuple((a + np.float32(f) * (z - a)).astype(np.uint8))
    st = traj[0]
    u = np.array([math.cos(st[2]), math.sin(st[2])])
    c0 = st[:2] + EGO_REAR_AXLE_TO_CENTER * u
    if _in_box(p, _box(c0, st[2], EGO_LENGTH, EGO_WIDTH)):
        color = C["ego"]
    if _in_box(p, _box(c0 + EGO_LENGTH / 3 * u, st[2], EGO_LENGTH / 3, EGO_WIDTH)):
        color = C["ego_front"]
    return tuple(int(c) for c in color)


def test_matches_slow_reference(batch):
    sc, traj, images = batch
    rng = np.random.default_rng(0)
    mismatches, checked = 0, 0
    for b in range(images.shape[0]):
        pts = np.asarray(bev.pixel_points(np.asarray(sc.history)[b, -1, 2], CFG), np.float64)
        # random pixels plus the pixels under the ego trajectory (the busiest layers)
        pix = [tuple(x) for x in rng.integers(0, CFG.size, (60, 2))]
        pix += [(r, CFG.size // 2) for r in range(0, CFG.size, 3)]
        for r, c in pix:
            checked += 1
            want = reference_pixel(sc, b, np.asarray(traj[b], np.float64), pts[r, c])
            mismatches += tuple(images[b, r, c]) != want
    # float32 vs float64 can flip a pixel centre lying on an edge; nothing else may differ
    print(f'{mismatches} of {checked} pixels differ')
    assert mismatches <= 0.01 * checked, (mismatches, checked)
    assert len({tuple(x) for x in images.reshape(-1, 3)}) >= 6  # several layers visible


def test_known_layout(batch):
    sc, traj, _ = batch
    one = jax.tree.map(lambda x: np.array(x[0]), sc)
    ag = one.agents
    ag.valid[:] = False
    ag.valid[0] = True
    ag.present[0] = True
    ag.type[0] = 0
    ag.length[0], ag.width[0] = 4.0, 2.0
    h0 = float(one.history[-1, 2])
    u = np.array([math.cos(h0), math.sin(h0)])
    ag.center[0] = 20.0 * u  # 20 m straight ahead at every step
    ag.heading[0] = h0
    t = np.array(traj[0])
    t[:] = 0.0
    t[:, 2] = h0  # ego stands still
    img = np.asarray(bev.render_bev(one, t, CFG))
    row = lambda fwd: int((CFG.ahead - fwd) / CFG.resolution)  # noqa: E731
    col = CFG.size // 2
    front_tone = tuple(int(c * 0.5 + 127.5) for c in bev.COLORS["vehicle"])
    assert tuple(img[row(21.5), col]) == front_tone  # front third of the agent: towards the top
    assert tuple(img[row(18.5), col]) == bev.COLORS["vehicle"]
    assert tuple(img[row(0.5), col]) == bev.COLORS["ego"]
    assert tuple(img[row(3.5), col]) == bev.COLORS["ego_front"]
    # turning the agent around moves its light front third to the bottom
    ag.heading[0] = h0 + math.pi
    img2 = np.asarray(bev.render_bev(one, t, CFG))
    assert tuple(img2[row(18.5), col]) == front_tone and tuple(img2[row(21.5), col]) == bev.COLORS["vehicle"]


def test_deterministic_and_batched(batch):
    sc, traj, images = batch
    again = np.asarray(bev.render_bev_batch(sc, traj, CFG))
    np.testing.assert_array_equal(images, again)
    single = np.asarray(bev.render_bev(jax.tree.map(lambda x: x[2], sc), traj[2], CFG))
    np.testing.assert_array_equal(images[2], single)
    assert images.dtype == np.uint8 and images.shape == (3, CFG.size, CFG.size, 3)


def test_save_png(tmp_path, batch):
    out = bev.save_png(batch[2][0], tmp_path / "a.png")
    from PIL import Image

    np.testing.assert_array_equal(np.asarray(Image.open(out)), batch[2][0])


@pytest.mark.parametrize("size", [48, 64])
def test_tiles_equal_the_plain_render(size):
    """``render_bev_batch`` tests each 8 x 8 pixel tile against the map elements near it only, on polygons and agents
    trimmed of trailing padding: the same pixels as every pixel against every element, on busy judge scenes (many
    lanes, agents, a junction) with several trajectories each, and the culling leaves most lanes out of a tile."""
    from jaxdrive.data.synthetic import pad_spec
    from jaxdrive.judge import synthetic

    cfg = bev.BevConfig(size=size)
    scenes = [generate_scene(s, num_proposals=8, profile=synthetic.PROFILE) for s in range(10_000, 10_006)]
    sc, pr, _ = batch_scenes(scenes, pad_spec(8))
    rows, ks = np.repeat(np.arange(6), 3), np.tile([0, 3, 7], 6)
    sc, traj = jax.tree.map(lambda x: x[rows], sc), pr.states[rows, ks]
    plain = np.asarray(bev._render_plain_batch(sc, traj, cfg))
    np.testing.assert_array_equal(np.asarray(bev.render_bev_batch(sc, traj, cfg)), plain)
    cand = bev.candidates(bev.trim_padding(sc), cfg)
    lanes_per_tile = (cand.lanes >= 0).sum(-1)
    assert lanes_per_tile.mean() < 0.5 * np.asarray(sc.map.lanes.valid).sum(-1).mean()
    trimmed = bev.trim_padding(sc)
    assert trimmed.map.lanes.vertices.shape[2] <= sc.map.lanes.vertices.shape[2]


def test_size_not_a_multiple_of_the_tile_renders_plainly(batch):
    sc, traj, _ = batch
    cfg = bev.BevConfig(size=44)  # not a multiple of TILE: every pixel against every element
    images = np.asarray(bev.render_bev_batch(sc, traj, cfg))
    np.testing.assert_array_equal(images[1], np.asarray(bev.render_bev(jax.tree.map(lambda x: x[1], sc), traj[1], cfg)))

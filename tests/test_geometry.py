"""Geometry kernels vs shapely (the predicates NAVSIM asks shapely), >= 20,000 seeded cases per predicate.

Cases mix random, touching (shared edges / corners on an integer grid, exactly representable), nested, degenerate-thin
and far-from-origin geometry. Everything is exact except rotated configurations within ~1e-6 m of touching, which the
random draws do not produce (documented tolerance in jaxdrive/geometry.py); any disagreement is reported with its case.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import shapely
from shapely.geometry import LineString, Polygon

from jaxdrive import geometry as g

N = 20_000


def _boxes(rng, n, spread=4.0, offset=(0.0, 0.0)):
    c = rng.uniform(-spread, spread, (n, 2)) + np.asarray(offset)
    h = rng.uniform(-np.pi, np.pi, n)
    length = rng.uniform(0.3, 6.0, n)
    width = rng.uniform(0.2, 3.0, n)
    thin = rng.random(n) < 0.1  # degenerate-thin boxes
    width = np.where(thin, 1e-3, width)
    return c, h, length, width


def _corners(c, h, length, width):
    f = jax.jit(jax.vmap(g.box_corners))
    return np.asarray(f(*(np.asarray(a, np.float32) for a in (c, h, length, width))))


def _grid_boxes(rng, n):
    """Axis-aligned integer boxes: shared edges, shared corners, nesting and disjoint, all exact in float32."""
    lo = rng.integers(-3, 3, (n, 2))
    size = rng.integers(1, 4, (n, 2))
    hi = lo + size
    return np.stack([np.stack([hi[:, 0], hi[:, 1]], 1), np.stack([lo[:, 0], hi[:, 1]], 1),
                     np.stack([lo[:, 0], lo[:, 1]], 1), np.stack([hi[:, 0], lo[:, 1]], 1)], 1).astype(np.float32)


def _shapely_polys(arr):
    return shapely.polygons(np.asarray(arr, np.float64))


TOL_M = 1e-5  # documented tolerance: float32 cross products decide cases this close to a boundary


def _report(name, ours, ref, cases, boundary_distance=None):
    """Assert agreement; disagreements are allowed only within TOL_M of a boundary (if distances are given)."""
    bad = ours != ref
    if boundary_distance is not None:
        explained = bad & (boundary_distance < TOL_M)
        bad = bad & ~explained
    bad = np.flatnonzero(bad)
    assert bad.size == 0, f"{name}: {bad.size}/{ours.size} disagreements, first case {cases(bad[0])}"


def test_boxes_intersect_vs_shapely():
    rng = np.random.default_rng(0)
    a_rand = _corners(*_boxes(rng, N // 2))
    b_rand = _corners(*_boxes(rng, N // 2))
    a_grid, b_grid = _grid_boxes(rng, N // 2), _grid_boxes(rng, N // 2)
    a = np.concatenate([a_rand, a_grid])
    b = np.concatenate([b_rand, b_grid])
    ours = np.asarray(jax.jit(jax.vmap(g.boxes_intersect))(a, b))
    ref = shapely.intersects(_shapely_polys(a), _shapely_polys(b))
    touching = shapely.touches(_shapely_polys(a_grid), _shapely_polys(b_grid))
    assert touching.sum() > 500, "the grid cases must include many exactly-touching pairs"
    assert 0.2 < ref.mean() < 0.8
    _report("boxes_intersect", ours, ref, lambda i: (a[i].tolist(), b[i].tolist()))
    # The coordinate-split, corners-leading form the collision kernels use decides every case the same way.
    split = lambda boxes: [jnp.moveaxis(jnp.asarray(boxes[..., i]), -1, 0) for i in range(2)]
    ours_xy = np.asarray(jax.jit(g.boxes_intersect_xy)(*split(a), *split(b)))
    np.testing.assert_array_equal(ours_xy, ours)


def test_boxes_intersect_far_from_origin_after_recentring():
    """UTM-scale boxes (x~5e5, y~4e6): re-centred in float64 then cast, the float32 kernel matches float64 shapely."""
    rng = np.random.default_rng(1)
    origin = np.array([512_345.678, 4_012_345.678])
    c1, h1, l1, w1 = _boxes(rng, N, offset=origin)
    c2, h2, l2, w2 = _boxes(rng, N, offset=origin)

    def corners64(c, h, length, width):
        u = np.stack([np.cos(h), np.sin(h)], -1)
        n = np.stack([-u[:, 1], u[:, 0]], -1)
        hl, hw = (length / 2)[:, None], (width / 2)[:, None]
        return np.stack([c + hl * u + hw * n, c - hl * u + hw * n, c - hl * u - hw * n, c + hl * u - hw * n], 1)

    a64, b64 = corners64(c1, h1, l1, w1), corners64(c2, h2, l2, w2)
    ref = shapely.intersects(_shapely_polys(a64), _shapely_polys(b64))
    a32 = (a64 - origin).astype(np.float32)
    b32 = (b64 - origin).astype(np.float32)
    ours = np.asarray(jax.jit(jax.vmap(g.boxes_intersect))(a32, b32))
    # Without re-centring float32 cannot even represent the corners to 0.25 m:
    assert np.abs(a64.astype(np.float32).astype(np.float64) - a64).max() > 0.05
    _report("boxes_intersect (far)", ours, ref, lambda i: (a64[i].tolist(), b64[i].tolist()))


def _star(rng, center, n_tips):
    ang = np.sort(rng.uniform(0, 2 * np.pi, 2 * n_tips))
    r = np.where(np.arange(2 * n_tips) % 2 == 0, rng.uniform(3, 6, 2 * n_tips), rng.uniform(0.5, 2.5, 2 * n_tips))
    return np.stack([center[0] + r * np.cos(ang), center[1] + r * np.sin(ang)], 1)


def test_point_in_polygon_vs_shapely_contains():
    """Strict interior on non-convex polygons, with points exactly on vertices and axis-aligned edges (boundary = out)."""
    rng = np.random.default_rng(2)
    pip = jax.jit(jax.vmap(g.point_in_polygon, in_axes=(0, None)))
    total = 0
    for k in range(20):
        poly = _star(rng, rng.uniform(-5, 5, 2), rng.integers(3, 9)).astype(np.float32)
        pts = rng.uniform(-8, 8, (800, 2)).astype(np.float32)
        pts = np.concatenate([pts, poly, (poly[:4] + poly[1:5]) / 2])  # vertices: boundary; midpoints: near boundary
        ours = np.asarray(pip(pts, poly))
        sp = Polygon(poly.astype(np.float64))
        ref = shapely.contains_xy(sp, pts[:, 0].astype(np.float64), pts[:, 1].astype(np.float64))
        dist = shapely.distance(sp.exterior, shapely.points(pts.astype(np.float64)))
        _report("point_in_polygon", ours, ref, lambda i: (pts[i].tolist(), poly.tolist()), dist)
        total += len(pts)
    # axis-aligned L-shaped polygon with points on a grid: many exactly on edges
    poly = np.array([[0, 0], [4, 0], [4, 1], [1, 1], [1, 3], [0, 3]], np.float32)
    xs, ys = np.meshgrid(np.arange(-1, 5.01, 0.25), np.arange(-1, 4.01, 0.25))
    pts = np.stack([xs.ravel(), ys.ravel()], 1).astype(np.float32)
    pts = np.concatenate([pts] * 25)
    ours = np.asarray(pip(pts, poly))
    ref = shapely.contains_xy(Polygon(poly.astype(float)), pts[:, 0].astype(float), pts[:, 1].astype(float))
    on_boundary = shapely.touches(Polygon(poly.astype(float)), shapely.points(pts.astype(float)))
    assert on_boundary.sum() > 1000
    _report("point_in_polygon (grid)", ours, ref, lambda i: pts[i].tolist())
    total += len(pts)
    assert total >= N


def test_box_intersects_polygon_vs_shapely():
    rng = np.random.default_rng(3)
    f = jax.jit(jax.vmap(g.box_intersects_polygon, in_axes=(0, None)))
    total = 0
    for k in range(10):
        poly = _star(rng, rng.uniform(-3, 3, 2), rng.integers(3, 8)).astype(np.float32)
        # padding convention: extra vertices repeat the first one
        padded = np.concatenate([poly, np.repeat(poly[:1], 5, 0)])
        boxes = _corners(*_boxes(rng, 1800, spread=9.0))
        ours = np.asarray(f(boxes, padded))
        ref = shapely.intersects(_shapely_polys(boxes), Polygon(poly.astype(np.float64)))
        _report("box_intersects_polygon", ours, ref, lambda i: (boxes[i].tolist(), poly.tolist()))
        total += len(boxes)
    # touching on a grid: a box sharing an edge or a corner with an L polygon, nested boxes, containing boxes
    poly = np.array([[0, 0], [4, 0], [4, 1], [1, 1], [1, 3], [0, 3]], np.float32)
    boxes = _grid_boxes(rng, 2500) + np.float32(1)
    boxes = np.concatenate([boxes, np.array([[[5, 5], [-1, 5], [-1, -1], [5, -1]]], np.float32)])  # contains poly
    ours = np.asarray(f(boxes, poly))
    ref = shapely.intersects(_shapely_polys(boxes), Polygon(poly.astype(float)))
    assert shapely.touches(_shapely_polys(boxes), Polygon(poly.astype(float))).sum() > 100
    _report("box_intersects_polygon (grid)", ours, ref, lambda i: boxes[i].tolist())
    total += len(boxes)
    assert total >= N


def test_box_in_polygon_vs_shapely():
    rng = np.random.default_rng(4)
    f = jax.jit(jax.vmap(g.box_in_polygon, in_axes=(0, None)))
    total = 0
    for k in range(10):
        poly = _star(rng, (0.0, 0.0), rng.integers(3, 8)).astype(np.float32)
        c, h, length, width = _boxes(rng, 2000, spread=4.0)
        boxes = _corners(c, h, length * 0.4, width * 0.4)
        ours = np.asarray(f(boxes, poly))
        sp = Polygon(poly.astype(float))
        ref = np.all(shapely.contains_xy(sp, boxes[..., 0].astype(float), boxes[..., 1].astype(float)), axis=1)
        _report("box_in_polygon", ours, ref, lambda i: boxes[i].tolist())
        total += len(boxes)
    assert total >= N


def test_segment_intersects_box_vs_shapely():
    rng = np.random.default_rng(5)
    boxes = np.concatenate([_corners(*_boxes(rng, N // 2)), _grid_boxes(rng, N // 2)])
    p = np.concatenate([rng.uniform(-6, 6, (N // 2, 2)), rng.integers(-4, 5, (N // 2, 2))]).astype(np.float32)
    q = np.concatenate([rng.uniform(-6, 6, (N // 2, 2)), rng.integers(-4, 5, (N // 2, 2))]).astype(np.float32)
    ours = np.asarray(jax.jit(jax.vmap(g.segment_intersects_box))(p, q, boxes))
    ref = shapely.intersects(shapely.linestrings(np.stack([p, q], 1).astype(float)), _shapely_polys(boxes))
    _report("segment_intersects_box", ours, ref, lambda i: (p[i].tolist(), q[i].tolist(), boxes[i].tolist()))


def test_project_to_polyline_vs_shapely():
    rng = np.random.default_rng(6)
    f = jax.jit(jax.vmap(g.project_to_polyline, in_axes=(0, None)))
    worst_arc = worst_dist = 0.0
    total = 0
    for k in range(10):
        t = np.linspace(0, 1, 60)
        radius = rng.uniform(15, 80)
        line = np.stack([radius * np.sin(t * 2.5), radius * (1 - np.cos(t * 2.5))], 1)
        line = np.concatenate([line, np.repeat(line[-1:], 8, 0)])  # padding repeats the last point
        pts = rng.uniform(-20, 90, (2000, 2))
        arc, dist, lat, _ = map(np.asarray, f(pts.astype(np.float32), line.astype(np.float32)))
        ls = LineString(line[:60])
        ref_arc = shapely.line_locate_point(ls, shapely.points(pts))
        ref_dist = shapely.distance(ls, shapely.points(pts))
        # near-ties (points close to a centre of curvature, equidistant from far-apart segments) may pick another
        # nearest point; the property that must hold everywhere: the point at our arc length is a nearest point.
        at_arc = shapely.line_interpolate_point(ls, arc.astype(np.float64))
        gap = shapely.distance(at_arc, shapely.points(pts)) - ref_dist
        assert gap.max() < 1e-4, gap.max()
        unambiguous = np.abs(arc - ref_arc) < 1e-3
        assert unambiguous.mean() >= 0.995
        worst_arc = max(worst_arc, float(np.abs(arc - ref_arc)[unambiguous].max()))
        worst_dist = max(worst_dist, float(np.abs(dist - ref_dist).max()))
        np.testing.assert_allclose(np.abs(lat), dist, atol=1e-5)
        # The many-points form (progress) picks the same segment: equal arcs up to float32 rounding.
        arcs = np.asarray(jax.jit(g.polyline_arc_lengths)(*pts.astype(np.float32).T, line.astype(np.float32)))
        np.testing.assert_allclose(arcs, arc, rtol=0, atol=1e-4)
        # Vertex points: exact ties between neighbouring segments are resolved like project_to_polyline.
        verts = line[1:59].astype(np.float32)
        np.testing.assert_allclose(np.asarray(jax.jit(g.polyline_arc_lengths)(*verts.T, line.astype(np.float32))),
                                   np.asarray(f(verts, line.astype(np.float32))[0]), rtol=0, atol=1e-4)
        total += len(pts)
    assert total >= N
    # float32 on a polyline up to ~150 m long: ~1e-5 relative
    assert worst_arc < 2e-3 and worst_dist < 2e-3, (worst_arc, worst_dist)


def test_signed_lateral_offset_sign():
    line = jnp.array([[0.0, 0.0], [10.0, 0.0]])
    assert float(g.project_to_polyline(jnp.array([5.0, 2.0]), line)[2]) == pytest.approx(2.0)
    assert float(g.project_to_polyline(jnp.array([5.0, -3.0]), line)[2]) == pytest.approx(-3.0)
    arc, dist, _, heading = g.project_to_polyline(jnp.array([-4.0, 1.0]), line)
    assert float(arc) == 0.0 and float(heading) == 0.0 and float(dist) == pytest.approx(np.hypot(4, 1))


def test_ego_corners_known_answer():
    state = jnp.zeros(11).at[2].set(np.pi / 2)  # heading north, rear axle at origin
    c = np.asarray(g.ego_corners(state))
    # centre 1.461 m ahead; FL = centre + 2.588 forward + 1.1485 left (left of north is -x)
    np.testing.assert_allclose(c[0], [-1.1485, 1.461 + 2.588], atol=1e-5)
    np.testing.assert_allclose(c[2], [1.1485, 1.461 - 2.588], atol=1e-5)


@pytest.mark.parametrize("prefix", [(), (3,), (2, 3)])
def test_shapes_over_batch_prefixes(prefix):
    rng = np.random.default_rng(7)
    a = rng.normal(size=prefix + (4, 2)).astype(np.float32)
    b = rng.normal(size=prefix + (4, 2)).astype(np.float32)
    poly = rng.normal(size=prefix + (7, 2)).astype(np.float32)
    p = rng.normal(size=prefix + (2,)).astype(np.float32)
    line = rng.normal(size=prefix + (9, 2)).astype(np.float32)
    state = rng.normal(size=prefix + (11,)).astype(np.float32)

    def batched(fn, nargs):
        for _ in prefix:
            fn = jax.vmap(fn)
        return fn

    assert batched(g.boxes_intersect, 2)(a, b).shape == prefix
    assert batched(g.point_in_polygon, 2)(p, poly).shape == prefix
    assert batched(g.box_intersects_polygon, 2)(a, poly).shape == prefix
    assert batched(g.box_in_polygon, 2)(a, poly).shape == prefix
    assert batched(g.segment_intersects_box, 3)(p, p + 1, a).shape == prefix
    assert batched(g.ego_corners, 1)(state).shape == prefix + (4, 2)
    outs = batched(g.project_to_polyline, 2)(p, line)
    assert all(o.shape == prefix for o in outs)
    assert batched(g.point_on_boundary, 2)(p, poly).shape == prefix

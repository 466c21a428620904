"""Planar geometry kernels: oriented boxes, polygon predicates, polyline projection.

Every function is written for ONE example (no batch dims) in pure jnp and is meant to be batched with ``jax.vmap``.
Boundary conventions mirror what NAVSIM asks shapely:

* ``point_in_polygon`` is *strict* (``shapely.vectorized.contains``: a point on the boundary is outside);
* every box / polygon / segment *intersection* is *closed* (``intersects``: touching counts).

Exactness: predicates are decided by the signs of 2x2 cross products, so configurations that are exactly representable
(e.g. axis-aligned boxes sharing an edge) are decided exactly. For rotated geometry the float rounding of the cross
products (about 1e-7 relative in float32, i.e. ~1e-6 m for ego-centred scenes) decides cases closer than that to
touching; shapely decides them in float64. Tests document this tolerance.

Padding conventions (see ``jaxdrive.scene``): padded polygon vertices repeat the first vertex (degenerate edges), and
padded centreline points repeat the last one (zero-length segments), so no vertex masks are needed here.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from jaxdrive.constants import EGO_LENGTH, EGO_REAR_AXLE_TO_CENTER, EGO_WHEEL_BASE, EGO_WIDTH  # noqa: F401 (re-exported)


def _cross(a: Float[Array, "... 2"], b: Float[Array, "... 2"]) -> Float[Array, "..."]:
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def box_corners(center: Float[Array, "2"], heading: Float[Array, ""], length: Float[Array, ""],
                width: Float[Array, ""]) -> Float[Array, "4 2"]:
    """Corners of an oriented box in nuPlan order [FL, RL, RR, FR] (m)."""
    return box_corners_along(center, heading_unit(heading), length, width)


def heading_unit(heading: Float[Array, "*s"]) -> Float[Array, "*s 2"]:
    """(cos, sin) of ``heading`` (rad): the unit vector along it."""
    return jnp.stack([jnp.cos(heading), jnp.sin(heading)], axis=-1)


def box_corners_along(center: Float[Array, "2"], u: Float[Array, "2"], length: Float[Array, ""],
                      width: Float[Array, ""]) -> Float[Array, "4 2"]:
    """``box_corners`` from the heading's unit vector ``u`` (``heading_unit``)."""
    n = jnp.stack([-u[1], u[0]])
    hl, hw = 0.5 * length, 0.5 * width
    return jnp.stack([center + hl * u + hw * n, center - hl * u + hw * n,
                      center - hl * u - hw * n, center + hl * u - hw * n])


def ego_center(state: Float[Array, "11"], u: Float[Array, "2"] | None = None) -> Float[Array, "2"]:
    """Box centre of the ego for a rear-axle state (x, y, heading, ...): (x, y) + 1.461 m along the heading
    (``u``: the heading's ``heading_unit`` if already computed)."""
    u = heading_unit(state[2]) if u is None else u
    return state[:2] + EGO_REAR_AXLE_TO_CENTER * u


def ego_corners(state: Float[Array, "11"], u: Float[Array, "2"] | None = None) -> Float[Array, "4 2"]:
    """Ego footprint [FL, RL, RR, FR] for a rear-axle state (Pacifica, 5.176 m x 2.297 m); ``u`` as in
    ``ego_center``."""
    u = heading_unit(state[2]) if u is None else u
    return box_corners_along(ego_center(state, u), u, jnp.asarray(EGO_LENGTH, state.dtype),
                             jnp.asarray(EGO_WIDTH, state.dtype))


def segments_intersect(p1: Float[Array, "2"], p2: Float[Array, "2"], q1: Float[Array, "2"],
                       q2: Float[Array, "2"]) -> Bool[Array, ""]:
    """Closed segment intersection (touching endpoints and collinear overlap count; zero-length segments are points)."""
    d1 = jnp.sign(_cross(q2 - q1, p1 - q1))
    d2 = jnp.sign(_cross(q2 - q1, p2 - q1))
    d3 = jnp.sign(_cross(p2 - p1, q1 - p1))
    d4 = jnp.sign(_cross(p2 - p1, q2 - p1))
    proper = (d1 * d2 <= 0) & (d3 * d4 <= 0)
    collinear = (d1 == 0) & (d2 == 0) & (d3 == 0) & (d4 == 0)
    lo_p, hi_p = jnp.minimum(p1, p2), jnp.maximum(p1, p2)
    lo_q, hi_q = jnp.minimum(q1, q2), jnp.maximum(q1, q2)
    bbox_overlap = jnp.all((lo_p <= hi_q) & (lo_q <= hi_p))
    return jnp.where(collinear, bbox_overlap, proper)


def _edges(verts: Float[Array, "V 2"]) -> tuple[Float[Array, "V 2"], Float[Array, "V 2"]]:
    return verts, jnp.roll(verts, -1, axis=0)


def point_on_boundary(p: Float[Array, "2"], verts: Float[Array, "V 2"]) -> Bool[Array, ""]:
    """True if ``p`` lies on an edge of the closed ring ``verts``."""
    a, b = _edges(verts)
    on_line = _cross(b - a, p - a) == 0
    within = jnp.all((jnp.minimum(a, b) <= p) & (p <= jnp.maximum(a, b)), axis=-1)
    return jnp.any(on_line & within)


def point_in_polygon(p: Float[Array, "2"], verts: Float[Array, "V 2"]) -> Bool[Array, ""]:
    """Strict interior test (even-odd crossings) of a simple polygon; boundary points are outside (shapely contains)."""
    a, b = _edges(verts)
    straddles = (a[:, 1] > p[1]) != (b[:, 1] > p[1])
    side = _cross(b - a, p - a) * jnp.sign(b[:, 1] - a[:, 1])
    crossings = jnp.sum(straddles & (side > 0))
    return (crossings % 2 == 1) & ~point_on_boundary(p, verts)


def points_in_polygon(points: Float[Array, "N 2"], verts: Float[Array, "V 2"]) -> Bool[Array, "N"]:
    """``point_in_polygon`` for several points of one polygon."""
    import jax

    return jax.vmap(point_in_polygon, in_axes=(0, None))(points, verts)


def point_in_box(p: Float[Array, "2"], box: Float[Array, "4 2"]) -> Bool[Array, ""]:
    """Closed point-in-convex-quad test (boundary counts) for a box with corners in ring order."""
    a, b = _edges(box)
    c = _cross(b - a, p - a)
    return jnp.all(c >= 0) | jnp.all(c <= 0)


def boxes_intersect(a: Float[Array, "4 2"], b: Float[Array, "4 2"]) -> Bool[Array, ""]:
    """Closed intersection of two oriented rectangles (separating-axis test on their 4 edge normals; touching counts)."""
    axes = jnp.concatenate([a[1:3] - a[0:2], b[1:3] - b[0:2]], axis=0)  # two edge directions of each box
    normals = jnp.stack([-axes[:, 1], axes[:, 0]], axis=-1)  # (4, 2)
    pa = a @ normals.T  # (4 corners, 4 axes)
    pb = b @ normals.T
    separated = (pa.max(0) < pb.min(0)) | (pb.max(0) < pa.min(0))
    return ~jnp.any(separated)


def boxes_intersect_xy(ax: Float[Array, "4 *b"], ay: Float[Array, "4 *b"], bx: Float[Array, "4 *b"],
                       by: Float[Array, "4 *b"]) -> Bool[Array, "*b"]:
    """``boxes_intersect`` on corner coordinates split by axis, corners leading: ax[i] is the x of box a's corner i.

    The trailing dims broadcast (e.g. ego [4, K, 1, T] against objects [4, 1, N, T]), so the test vectorises over
    the batch instead of over 4 x 2 corner blocks (several times faster on CPU). Same products and comparisons as
    ``boxes_intersect``, so the same decisions (tested).
    """
    separated = None
    for cx, cy, i in ((ax, ay, 0), (ax, ay, 1), (bx, by, 0), (bx, by, 1)):
        nx, ny = -(cy[i + 1] - cy[i]), cx[i + 1] - cx[i]  # normal of the box edge i -> i + 1
        pa = [ax[k] * nx + ay[k] * ny for k in range(4)]
        pb = [bx[k] * nx + by[k] * ny for k in range(4)]
        a_lo, a_hi = _min4(pa), _max4(pa)
        b_lo, b_hi = _min4(pb), _max4(pb)
        axis_separates = (a_hi < b_lo) | (b_hi < a_lo)
        separated = axis_separates if separated is None else separated | axis_separates
    return ~separated


def _min4(v: list[Array]) -> Array:
    return jnp.minimum(jnp.minimum(v[0], v[1]), jnp.minimum(v[2], v[3]))


def _max4(v: list[Array]) -> Array:
    return jnp.maximum(jnp.maximum(v[0], v[1]), jnp.maximum(v[2], v[3]))


def _segment_foot(px, py, ax, ay, dx, dy) -> tuple[Array, Array]:
    """(unclipped foot parameter t, squared distance to the clipped foot) of point p on segment a -> a + d, elementwise.

    ``project_to_polyline``'s expressions; a zero-length segment has t = 0 (it is its point).
    """
    len2 = dx * dx + dy * dy
    t_raw = jnp.where(len2 > 0, ((px - ax) * dx + (py - ay) * dy) / jnp.where(len2 > 0, len2, 1.0), 0.0)
    t = jnp.clip(t_raw, 0.0, 1.0)
    ex, ey = px - (ax + t * dx), py - (ay + t * dy)
    return t_raw, ex * ex + ey * ey


def segments_distance2(px: Float[Array, "*b"], py: Float[Array, "*b"], ax: Float[Array, "*b"], ay: Float[Array, "*b"],
                       bx: Float[Array, "*b"], by: Float[Array, "*b"]) -> Float[Array, "*b"]:
    """Squared distance (m^2) from point p to segment ab, elementwise over broadcast coordinates."""
    return _segment_foot(px, py, ax, ay, bx - ax, by - ay)[1]


def segment_intersects_box(p: Float[Array, "2"], q: Float[Array, "2"], box: Float[Array, "4 2"]) -> Bool[Array, ""]:
    """Closed intersection of segment pq with a (convex) box: an edge crossing or p inside the box."""
    import jax

    a, b = _edges(box)
    hits = jax.vmap(segments_intersect, in_axes=(None, None, 0, 0))(p, q, a, b)
    return jnp.any(hits) | point_in_box(p, box)


def box_intersects_polygon(box: Float[Array, "4 2"], verts: Float[Array, "V 2"]) -> Bool[Array, ""]:
    """Closed intersection of a box with a simple (possibly non-convex) polygon.

    True if any box edge meets any polygon edge, or one shape contains a vertex of the other.
    """
    import jax

    ba, bb = _edges(box)
    pa, pb = _edges(verts)
    pair = jax.vmap(jax.vmap(segments_intersect, in_axes=(None, None, 0, 0)), in_axes=(0, 0, None, None))
    edge_hit = jnp.any(pair(ba, bb, pa, pb))
    return edge_hit | point_in_polygon(box[0], verts) | point_in_box(verts[0], box)


def box_in_polygon(box: Float[Array, "4 2"], verts: Float[Array, "V 2"]) -> Bool[Array, ""]:
    """All four corners strictly inside the polygon (NAVSIM's corner test; edges are not checked)."""
    return jnp.all(points_in_polygon(box, verts))


def project_to_polyline(p: Float[Array, "2"], pts: Float[Array, "C 2"]) -> tuple[
        Float[Array, ""], Float[Array, ""], Float[Array, ""], Float[Array, ""]]:
    """Nearest point of polyline ``pts`` to ``p`` (shapely ``project``/``distance`` semantics; first segment on ties).

    Returns (arc length of the nearest point in [0, length] (m), distance (m), signed lateral offset (m, positive to
    the left of the travel direction), heading of the nearest segment (rad)).
    """
    a, b = pts[:-1], pts[1:]
    d = b - a
    seg_len2 = jnp.sum(d * d, axis=-1)
    safe = jnp.where(seg_len2 > 0, seg_len2, 1.0)
    t_raw = jnp.where(seg_len2 > 0, jnp.sum((p - a) * d, axis=-1) / safe, 0.0)
    t = jnp.clip(t_raw, 0.0, 1.0)
    nearest = a + t[:, None] * d
    dist2 = jnp.sum((p - nearest) ** 2, axis=-1)
    i = jnp.argmin(dist2)
    # Near-ties at a shared vertex: if the winner is clamped to its end (start) while the next (previous) segment has
    # its perpendicular foot inside, that neighbour is at least as near in exact arithmetic; float rounding of the two
    # almost equal distances must not pick the clamped one.
    n = t.shape[0]
    nxt, prv = jnp.minimum(i + 1, n - 1), jnp.maximum(i - 1, 0)
    take_next = (t_raw[i] >= 1.0) & (i + 1 < n) & (t_raw[nxt] >= 0.0) & (t_raw[nxt] <= 1.0) & (seg_len2[nxt] > 0)
    take_prev = (t_raw[i] <= 0.0) & (i > 0) & (t_raw[prv] >= 0.0) & (t_raw[prv] <= 1.0) & (seg_len2[prv] > 0)
    i = jnp.where(take_next, nxt, jnp.where(take_prev, prv, i))
    seg_len = jnp.sqrt(seg_len2)
    arc = jnp.concatenate([jnp.zeros((1,), seg_len.dtype), jnp.cumsum(seg_len)])[i] + t[i] * seg_len[i]
    dist = jnp.sqrt(dist2[i])
    side = jnp.sign(_cross(d[i], p - nearest[i]))
    heading = jnp.arctan2(d[i, 1], d[i, 0])
    return arc, dist, side * dist, heading


def polyline_arc_lengths(px: Float[Array, "*n"], py: Float[Array, "*n"],
                         pts: Float[Array, "C 2"]) -> Float[Array, "*n"]:
    """Arc length (m) of the nearest polyline point of many points: ``project_to_polyline(p, pts)[0]`` for each.

    The segment data (directions, lengths, cumulative arc) are computed once and the points broadcast against them
    with coordinates split by axis; the nearest segment is the first minimum with ``project_to_polyline``'s
    vertex-tie rule, so the same segment is chosen.
    """
    ax, ay, dx, dy = pts[:-1, 0], pts[:-1, 1], pts[1:, 0] - pts[:-1, 0], pts[1:, 1] - pts[:-1, 1]
    seg_len2 = dx * dx + dy * dy
    t_raw, dist2 = _segment_foot(px[..., None], py[..., None], ax, ay, dx, dy)  # [*n, S]
    n = dist2.shape[-1]
    iota = jnp.arange(n, dtype=jnp.int32)
    # First minimum (argmin's choice) as two plain reductions, which vectorise on CPU.
    i = jnp.min(jnp.where(dist2 == jnp.min(dist2, axis=-1, keepdims=True), iota, n), axis=-1)
    take = lambda v, j: jnp.take_along_axis(v, j[..., None], axis=-1)[..., 0]
    nxt, prv = jnp.minimum(i + 1, n - 1), jnp.maximum(i - 1, 0)
    t_i, t_nxt, t_prv = take(t_raw, i), take(t_raw, nxt), take(t_raw, prv)
    take_next = (t_i >= 1.0) & (i + 1 < n) & (t_nxt >= 0.0) & (t_nxt <= 1.0) & (seg_len2[nxt] > 0)
    take_prev = (t_i <= 0.0) & (i > 0) & (t_prv >= 0.0) & (t_prv <= 1.0) & (seg_len2[prv] > 0)
    i = jnp.where(take_next, nxt, jnp.where(take_prev, prv, i))
    seg_len = jnp.sqrt(seg_len2)
    start = jnp.concatenate([jnp.zeros((1,), seg_len.dtype), jnp.cumsum(seg_len)])[i]
    return start + jnp.clip(take(t_raw, i), 0.0, 1.0) * seg_len[i]


def polyline_distance(p: Float[Array, "2"], pts: Float[Array, "C 2"]) -> Float[Array, ""]:
    """Euclidean distance from ``p`` to the polyline (shapely ``Point.distance(LineString)``)."""
    return project_to_polyline(p, pts)[1]

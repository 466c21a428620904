"""Exact host-side broad phase: per-proposal culling of map polygons before the EPDMS kernels.

Every map predicate of the rules (area flags for DAC / DDC / LK / NC / TTC, and TLC's box-polygon contact) tests
ego points or the ego box *at the proposal's own states*: the four corners, the box centre and the rear axle, all
inside the footprint. A polygon whose bounding box misses the bounding box of all 41 footprints of a proposal
therefore cannot change any of its results: strict point-in-polygon needs the point inside the polygon's bbox, a
closed box-polygon contact needs the bboxes to touch. ``cull_map`` keeps, per proposal, only the polygons whose bbox
overlaps (with a margin) the proposal's swept bbox, padded to a small bucketed count, and trims the vertex padding to
the longest kept ring (bucketed), so the kernels test a few polygons of a few dozen vertices instead of every padded
polygon x 96 vertices.

Exactness: the kept polygons are copied bit for bit (same float32 vertices, same padding that repeats the first
vertex, so dropped vertex slots were degenerate edges), only polygons that cannot be hit are dropped, and padded slots
follow ``jaxdrive.scene``'s conventions (at ``FAR``, ``valid = False``). The swept bbox is computed in float64 from
the float32 states with a margin (``MARGIN_M``) far above the float32 rounding of the device's corner computation.
The centreline is trimmed to the longest real one of the batch plus one padded point (the first zero-length segment
is kept, so ``project_to_polyline`` picks the same segment on ties).

The culled ``MapData`` has polygon leaves with a proposal axis (``areas.vertices`` [B, K, A', V', 2], ``area_kind``
[B, K, A'], ``lane_red`` [B, K, L', T], ...); ``jaxdrive.rules.areas.ego_areas`` and ``jaxdrive.rules.tlc`` accept
both layouts. Shapes are bucketed (powers of two) so a run compiles only a few shapes.
"""

from __future__ import annotations

import math

import numpy as np

from jaxdrive.geometry import EGO_LENGTH, EGO_REAR_AXLE_TO_CENTER, EGO_WIDTH
from jaxdrive.scene import FAR, MapData, Polygons, Scene

MARGIN_M = 0.05  # added to the swept bbox; device rounding of corners is ~1e-5 m at ego-centred scales
EGO_RADIUS_M = math.hypot(0.5 * EGO_LENGTH, 0.5 * EGO_WIDTH)  # box centre to corner (covers corners and rear axle)


def _bucket(n: int, minimum: int = 1) -> int:
    p = minimum
    while p < n:
        p *= 2
    return p


def swept_bboxes(states: np.ndarray, margin: float = MARGIN_M) -> np.ndarray:
    """[..., K, 4] (xmin, ymin, xmax, ymax) (m) bounding every ego footprint of each proposal over all steps.

    ``states`` [..., K, T, 11] rear-axle states. Each footprint lies in the disc of radius ``EGO_RADIUS_M`` around
    its box centre; the rear axle lies inside the footprint.
    """
    s = np.asarray(states, np.float64)
    h = s[..., 2]
    cx = s[..., 0] + EGO_REAR_AXLE_TO_CENTER * np.cos(h)
    cy = s[..., 1] + EGO_REAR_AXLE_TO_CENTER * np.sin(h)
    r = EGO_RADIUS_M + margin
    return np.stack([cx.min(-1) - r, cy.min(-1) - r, cx.max(-1) + r, cy.max(-1) + r], axis=-1)


def polygon_bboxes(polys: Polygons) -> np.ndarray:
    """[..., P, 4] (xmin, ymin, xmax, ymax) of each polygon's vertices (padded vertices repeat a real one)."""
    v = np.asarray(polys.vertices, np.float64)
    return np.concatenate([v.min(-2), v.max(-2)], axis=-1)


def overlaps(swept: np.ndarray, boxes: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """[B, K, P] closed bbox overlap of each proposal's swept bbox ([B, K, 4]) with each valid polygon ([B, P, 4])."""
    s, p = swept[:, :, None, :], boxes[:, None, :, :]
    hit = (s[..., 0] <= p[..., 2]) & (p[..., 0] <= s[..., 2]) & (s[..., 1] <= p[..., 3]) & (p[..., 1] <= s[..., 3])
    return hit & np.asarray(valid)[:, None, :]


def _select(keep: np.ndarray, count: int) -> np.ndarray:
    """[B, K, count] indices of the kept polygons in their original order; -1 fills the unused slots."""
    order = np.argsort(~keep, axis=-1, kind="stable")[..., :count]
    taken = np.take_along_axis(keep, order, axis=-1)
    return np.where(taken, order, -1)


def _gather(leaf: np.ndarray, idx: np.ndarray, fill) -> np.ndarray:
    """leaf [B, P, ...] gathered at idx [B, K, M] -> [B, K, M, ...]; -1 slots get ``fill``."""
    b = np.arange(leaf.shape[0])[:, None, None]
    out = leaf[b, np.maximum(idx, 0)]
    mask = (idx < 0).reshape(idx.shape + (1,) * (leaf.ndim - 2))
    return np.where(mask, np.asarray(fill, leaf.dtype), out)


def _cull_polygons(polys: Polygons, idx: np.ndarray, vertex_multiple: int) -> Polygons:
    vv = np.asarray(polys.vertex_valid)
    counts = vv.sum(-1)  # [B, P]
    kept_counts = np.where(idx >= 0, np.take_along_axis(counts, np.maximum(idx, 0).reshape(idx.shape[0], -1),
                                                        axis=1).reshape(idx.shape), 0)
    nv = max(3, int(kept_counts.max(initial=0)))
    nv = min(-(-nv // vertex_multiple) * vertex_multiple, vv.shape[-1])
    verts = _gather(np.asarray(polys.vertices)[..., :nv, :], idx, FAR)
    return Polygons(vertices=verts, vertex_valid=_gather(vv[..., :nv], idx, False),
                    valid=_gather(np.asarray(polys.valid), idx, False))


def cull_map(scene: Scene, states: np.ndarray, *, min_slots: int = 2, vertex_multiple: int = 8) -> MapData:
    """Per-proposal culled map of a host batch (numpy leaves).

    ``scene`` is a padded ``Scene[B]`` with numpy leaves (``jaxdrive.scene.batch_scenes``), ``states`` the proposals'
    [B, K, T, 11] states. Returns a ``MapData`` whose polygon leaves carry a proposal axis (see the module docstring);
    pass it as ``scene.replace(map=...)`` to ``jaxdrive.rules.epdms.score``. Every result is identical to the unculled
    map's.
    """
    m = scene.map
    states = np.asarray(states)
    if states.ndim != 4:
        raise ValueError(f"cull_map: states: expected shape (B, K, T, 11), got {states.shape}")
    if np.asarray(m.area_kind).ndim != 2:
        raise ValueError(f"cull_map: scene.map: expected an unculled batch map (area_kind [B, A]), "
                         f"got area_kind of shape {np.asarray(m.area_kind).shape}")
    swept = swept_bboxes(states)
    keep_a = overlaps(swept, polygon_bboxes(m.areas), m.areas.valid)
    keep_l = overlaps(swept, polygon_bboxes(m.lanes), m.lanes.valid)
    ia = _select(keep_a, _bucket(int(keep_a.sum(-1).max(initial=0)), min_slots))
    il = _select(keep_l, _bucket(int(keep_l.sum(-1).max(initial=0)), min_slots))

    centerline = np.asarray(m.centerline)
    real = int(np.asarray(m.centerline_valid).sum(-1).max())
    c = min(centerline.shape[-2], _bucket(real + 1, 8))
    return MapData(
        areas=_cull_polygons(m.areas, ia, vertex_multiple),
        area_kind=_gather(np.asarray(m.area_kind), ia, 0),
        lanes=_cull_polygons(m.lanes, il, vertex_multiple),
        lane_kind=_gather(np.asarray(m.lane_kind), il, 0),
        lane_on_route=_gather(np.asarray(m.lane_on_route), il, False),
        lane_red=_gather(np.asarray(m.lane_red), il, False),
        centerline=centerline[..., :c, :],
        centerline_valid=np.asarray(m.centerline_valid)[..., :c],
    )


def cull_batch(scene: Scene, states: np.ndarray, **kwargs) -> Scene:
    """``scene`` with its map replaced by ``cull_map(scene, states)`` (host numpy, before ``device_put``)."""
    return scene.replace(map=cull_map(scene, states, **kwargs))

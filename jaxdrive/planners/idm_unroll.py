"""PDM-Closed's proposal unrolling as a jittable kernel: IDM policies along centreline paths against leading objects.

NAVSIM's ``PDMGenerator.generate_proposals`` for one scene: P = L x S proposals (L lateral paths, S IDM target speeds,
index ``S * lateral + longitudinal``). For every path and 0.1 s step t = 1..T:

1. leading object (every ``update_rate`` steps, else the previous step's row; step 1 therefore reads the all-zero row
   of t = 0, NAVSIM's braking first step): objects whose polygon at the observation frame of t meets the path's
   driving corridor (the path vertices between the ego's projection and ``max target speed x horizon`` ahead, buffered
   by half the ego width with square caps), ahead of the proposal's progress at t - 1 (their centroid's projection);
   the nearest by polygon distance to the ego box at t - 1 (ties: the first in shapely's STRtree order, ``obj_rank``)
   gives (progress + distance, speed projected on the ego heading (0 for static objects and red lights)); with
   nothing ahead the path end is a stopped obstacle (path length, rear length = half the ego length). NAVSIM fills
   one row per step and path and walks the proposals in order, so a field a proposal does not set keeps the previous
   proposal's value; this kernel copies that.
2. IDM step (forward Euler) of (progress, speed).
3. pose = the path interpolated at the new progress.

Written for one scene (vmap for batches), in the dtype of its inputs; feed coordinates re-centred on the ego rear
axle (the host entry point ``jaxdrive.planners.pdm_closed`` runs it in float64). Shapes: L paths of C vertices
(padded by repeating the last vertex), N objects of V vertices (padded by repeating the first vertex, ``obj_valid``
False for padding), S policies.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.constants import EGO_LENGTH, EGO_REAR_AXLE_TO_CENTER, EGO_WIDTH
from jaxdrive.geometry import box_corners, box_intersects_polygon, point_in_polygon, polyline_arc_lengths, \
    segments_distance2, segments_intersect


@dataclasses.dataclass(frozen=True)
class IDMParams:
    """NAVSIM's ``BatchIDMPolicy`` / ``PDMGenerator`` defaults (static: they shape the compiled program)."""

    min_gap: float = 1.0  # m
    headway: float = 1.5  # s
    accel_max: float = 1.5  # m/s^2
    decel_max: float = 3.0  # m/s^2 (positive)
    exponent: int = 10
    update_rate: int = 2  # steps between leading-object searches (and the observation's frame spacing)
    dt: float = 0.1  # s
    proposal_steps: int = 40
    trajectory_steps: int = 50  # the planner's full horizon; sets the corridor length


class PlannerInputs(NamedTuple):
    """One scene's planner view, re-centred on the ego rear axle at t = 0."""

    paths: Float[Array, "L C 3"]  # x, y, heading (unwrapped) of each lateral path [m, m, rad]
    progress: Float[Array, "L C"]  # cumulative arc length of each path's vertices [m]
    ego: Float[Array, "11"]  # ego state at t = 0 (``StateIndex`` layout)
    obj_polygons: Float[Array, "N V 2"]  # object polygons at t = 0 (boxes, red-light connector polygons) [m]
    obj_centroids: Float[Array, "N 2"]  # polygon centroids at t = 0 [m]
    obj_dxy: Float[Array, "N 2"]  # constant-velocity forecast velocity (0 for static objects, red lights) [m/s]
    obj_heading: Float[Array, "N"]  # box heading at t = 0 [rad]
    obj_speed: Float[Array, "N"]  # speed at t = 0 [m/s]
    obj_is_agent: Bool[Array, "N"]  # vehicle / pedestrian / bicycle (its speed counts for a leader)
    obj_is_red_light: Bool[Array, "N"]
    obj_valid: Bool[Array, "N"]  # observed, not padding, not overlapping the ego at t = 0
    obj_rank: Int[Array, "M N"]  # per observation frame: position in NAVSIM's query order (shapely STRtree), for ties
    target_velocities: Float[Array, "S"]  # IDM target speeds [m/s]


class Unrolled(NamedTuple):
    """NAVSIM's generator arrays for P = L x S proposals over T + 1 steps."""

    idm_states: Float[Array, "P T1 2"]  # progress [m], speed [m/s]
    leading_agent: Float[Array, "P T1 3"]  # progress [m], speed [m/s], rear length [m]
    poses: Float[Array, "P T1 3"]  # x, y, heading on the path (heading in (-pi, pi])


def interpolate_path(path: Float[Array, "C 3"], progress: Float[Array, "C"], distance: Float[Array, "*q"]
                     ) -> Float[Array, "*q 3"]:
    """``PDMPath.interpolate``: the pose at ``distance`` (clipped to [1e-5, length]), heading normalised."""
    length = progress[-1]
    d = jnp.clip(distance, 1e-5, length)
    hi = jnp.clip(jnp.searchsorted(progress, d, side="left"), 1, progress.shape[0] - 1)
    lo = hi - 1
    span = progress[hi] - progress[lo]
    w = jnp.where(span > 0, (d - progress[lo]) / jnp.where(span > 0, span, 1.0), 0.0)
    pose = path[lo] + w[..., None] * (path[hi] - path[lo])
    heading = jnp.arctan2(jnp.sin(pose[..., 2]), jnp.cos(pose[..., 2]))
    return jnp.concatenate([pose[..., :2], heading[..., None]], axis=-1)


def _project(points: Float[Array, "*n 2"], path: Float[Array, "C 3"]) -> Float[Array, "*n"]:
    """shapely ``LineString.project``: arc length of the nearest path point."""
    return polyline_arc_lengths(points[..., 0], points[..., 1], path[:, :2])


def _edge_distance2(a: Float[Array, "A 2"], b: Float[Array, "B 2"]) -> Float[Array, ""]:
    """Squared distance between the closed rings ``a`` and ``b`` when they do not cross (vertex-to-edge minimum)."""
    a_next, b_next = jnp.roll(a, -1, axis=0), jnp.roll(b, -1, axis=0)
    d_ab = segments_distance2(a[:, None, 0], a[:, None, 1], b[None, :, 0], b[None, :, 1], b_next[None, :, 0],
                              b_next[None, :, 1])
    d_ba = segments_distance2(b[:, None, 0], b[:, None, 1], a[None, :, 0], a[None, :, 1], a_next[None, :, 0],
                              a_next[None, :, 1])
    return jnp.minimum(jnp.min(d_ab), jnp.min(d_ba))


def box_polygon_distance(box: Float[Array, "4 2"], polygon: Float[Array, "V 2"]) -> Float[Array, ""]:
    """shapely ``Polygon.distance`` between a box and a simple polygon: 0 when they meet [m]."""
    meet = box_intersects_polygon(box, polygon)
    return jnp.where(meet, 0.0, jnp.sqrt(_edge_distance2(box, polygon)))


def _corridor(path: Float[Array, "C 3"], progress: Float[Array, "C"], start: Float[Array, ""], end: Float[Array, ""]):
    """Segments of ``PDMPath.substring(start, end)`` (vertices with progress in [start, end]) and its two square caps.

    Returns (segment starts [C-1, 2], segment ends [C-1, 2], segment mask [C-1], start cap box [4, 2], end cap box
    [4, 2], first vertex [2]).
    """
    half = 0.5 * EGO_WIDTH
    length = progress[-1]
    s0, s1 = jnp.clip(start, 0.0, length), jnp.clip(end, 0.0, length)
    inside = (s0 <= progress) & (progress <= s1)
    a, b = path[:-1, :2], path[1:, :2]
    seg = b - a
    seg_len = jnp.sqrt(jnp.sum(seg * seg, axis=-1))
    mask = inside[:-1] & inside[1:] & (seg_len > 0)
    n = mask.shape[0]
    iota = jnp.arange(n)
    first = jnp.min(jnp.where(mask, iota, n - 1))
    last = jnp.max(jnp.where(mask, iota, 0))

    def cap(point, direction, outward):
        u = direction / jnp.maximum(jnp.sqrt(jnp.sum(direction * direction)), 1e-12)
        nrm = jnp.stack([-u[1], u[0]])
        tip = point + outward * half * u
        return jnp.stack([point + half * nrm, tip + half * nrm, tip - half * nrm, point - half * nrm])

    start_cap = cap(a[first], seg[first], -1.0)
    end_cap = cap(b[last], seg[last], 1.0)
    return a, b, mask, start_cap, end_cap, a[first]


def _meets_corridor(polygon: Float[Array, "V 2"], corridor) -> Bool[Array, ""]:
    """Closed intersection of a polygon with the corridor (round-joined buffer of the segments, square caps)."""
    a, b, mask, start_cap, end_cap, first = corridor
    half = 0.5 * EGO_WIDTH
    p, q = polygon, jnp.roll(polygon, -1, axis=0)
    # vertex -> segment distances both ways, masked to the corridor's segments
    pv = segments_distance2(p[:, None, 0], p[:, None, 1], a[None, :, 0], a[None, :, 1], b[None, :, 0], b[None, :, 1])
    av = segments_distance2(a[None, :, 0], a[None, :, 1], p[:, None, 0], p[:, None, 1], q[:, None, 0], q[:, None, 1])
    bv = segments_distance2(b[None, :, 0], b[None, :, 1], p[:, None, 0], p[:, None, 1], q[:, None, 0], q[:, None, 1])
    d2 = jnp.minimum(jnp.minimum(pv, av), bv)  # [V, C-1]
    near = jnp.any(mask[None, :] & (d2 <= half * half))
    cross = jax.vmap(jax.vmap(segments_intersect, in_axes=(None, None, 0, 0)), in_axes=(0, 0, None, None))(p, q, a, b)
    crossing = jnp.any(cross & mask[None, :])
    inside = point_in_polygon(first, polygon) & jnp.any(mask)
    caps = (box_intersects_polygon(start_cap, polygon) | box_intersects_polygon(end_cap, polygon)) & jnp.any(mask)
    return near | crossing | inside | caps


def _leader_row(row, cur, pose, meet, prog, polys, ranks, inputs: PlannerInputs, path_length):
    """One proposal's leading-object row (module docstring, step 1) from the row the previous proposal left."""
    dtype = pose.dtype
    ahead = meet & (prog > cur)
    u = jnp.stack([jnp.cos(pose[2]), jnp.sin(pose[2])])
    ego_box = box_corners(pose[:2] + EGO_REAR_AXLE_TO_CENTER * u, pose[2], jnp.asarray(EGO_LENGTH, dtype),
                          jnp.asarray(EGO_WIDTH, dtype))
    dist = jax.vmap(box_polygon_distance, in_axes=(None, 0))(ego_box, polys)
    nearest = jnp.min(jnp.where(ahead, dist, jnp.inf))
    # equal distances (several objects touching the ego): NAVSIM takes the first in its query order
    k = jnp.argmin(jnp.where(ahead & (dist == nearest), ranks, jnp.iinfo(jnp.int32).max))
    rel = inputs.obj_heading[k] - pose[2]
    speed = jnp.where(inputs.obj_is_agent[k], inputs.obj_speed[k] * jnp.cos(jnp.arctan2(jnp.sin(rel), jnp.cos(rel))),
                      0.0)
    with_leader = row.at[0].set(cur + dist[k])
    with_leader = jnp.where(inputs.obj_is_red_light[k], with_leader, with_leader.at[1].set(speed))
    free = row.at[0].set(path_length).at[2].set(0.5 * EGO_LENGTH)
    return jnp.where(jnp.any(ahead), with_leader, free)


def _idm_step(idm, lead, target, params: IDMParams):
    """``BatchIDMPolicy.propagate``: one forward-Euler step of (progress, speed) [..., 2] behind ``lead`` [..., 3]."""
    g0, hw, a_max, b_max = params.min_gap, params.headway, params.accel_max, params.decel_max
    x, v = idm[..., 0], idm[..., 1]
    x_lead, v_lead, rear = lead[..., 0], lead[..., 1], lead[..., 2]
    s_star = g0 + v * hw + v * (v - v_lead) / (2.0 * jnp.sqrt(a_max * b_max))
    s_alpha = jnp.maximum(x_lead - x - rear, g0)
    v_dot = a_max * (1.0 - (v / target) ** params.exponent - (s_star / s_alpha) ** 2)
    v_dot = jnp.clip(v_dot, -b_max, a_max)
    return jnp.stack([x + params.dt * v, v + params.dt * v_dot], axis=-1)


class _View(NamedTuple):
    start_progress: Array  # [L]
    meets: Array  # [L, M, N] object meets the path's corridor at frame m
    obj_progress: Array  # [L, M, N] centroid projection on the path at frame m
    polygons: Array  # [M, N, V, 2]


def _view(inputs: PlannerInputs, params: IDMParams, window: int | None, frames: list[int],
          path_ids: list[int] | None = None) -> _View:
    """Objects at the observation ``frames`` (frame m: forecast at m x update_rate x dt) against the corridors of
    ``path_ids`` (default all)."""
    paths, progress = inputs.paths, inputs.progress
    if path_ids is not None:
        paths, progress = paths[jnp.asarray(path_ids)], progress[jnp.asarray(path_ids)]
    dtype = paths.dtype
    start_progress = jax.vmap(_project, in_axes=(None, 0))(inputs.ego[:2], paths)  # [L]
    shift = (jnp.asarray(frames, dtype) * params.update_rate * params.dt)[:, None, None]  # [M, 1, 1]
    centroids = inputs.obj_centroids[None] + shift * inputs.obj_dxy[None]  # [M, N, 2]
    polygons = inputs.obj_polygons[None] + (shift * inputs.obj_dxy[None])[:, :, None, :]  # [M, N, V, 2]
    horizon = jnp.max(jnp.abs(inputs.target_velocities)) * params.trajectory_steps * params.dt
    if window is None or window >= paths.shape[1]:
        win_paths, win_progress = paths, progress
    else:  # the corridor's vertices lie in [first vertex at or after the start, + window)
        first = jax.vmap(lambda p, s: jnp.searchsorted(p, jnp.clip(s, 0.0, p[-1]), side="left"))(progress,
                                                                                                 start_progress)
        win_paths = jax.vmap(lambda p, f: jax.lax.dynamic_slice_in_dim(p, f, window))(paths, first)
        win_progress = jax.vmap(lambda p, f: jax.lax.dynamic_slice_in_dim(p, f, window))(progress, first)
    corridors = jax.vmap(_corridor)(win_paths, win_progress, start_progress, start_progress + horizon)

    def frame_view(path_idx, frame_idx):
        corridor = jax.tree.map(lambda c: c[path_idx], corridors)
        meets = jax.vmap(_meets_corridor, in_axes=(0, None))(polygons[frame_idx], corridor) & inputs.obj_valid
        return meets, _project(centroids[frame_idx], paths[path_idx])

    num_paths, num_frames = paths.shape[0], len(frames)
    grid_l, grid_m = jnp.meshgrid(jnp.arange(num_paths), jnp.arange(num_frames), indexing="ij")
    meets, obj_progress = jax.lax.map(lambda lm: frame_view(lm[0], lm[1]), (grid_l.ravel(), grid_m.ravel()))
    return _View(start_progress, meets.reshape(num_paths, num_frames, -1),
                 obj_progress.reshape(num_paths, num_frames, -1), polygons)


def unroll(inputs: PlannerInputs, params: IDMParams = IDMParams(), window: int | None = None) -> Unrolled:
    """NAVSIM's proposal unrolling for one scene (module docstring); P = L x S proposals over T = proposal_steps.

    ``window`` (static): at least the number of path vertices within any ``max target speed x horizon`` stretch
    (``corridor_window``); the corridor tests then run on that many vertices instead of C. None: all C.
    """
    paths, progress = inputs.paths, inputs.progress
    num_paths, num_speeds = paths.shape[0], inputs.target_velocities.shape[0]
    steps = params.proposal_steps
    dtype = paths.dtype
    lengths = progress[:, -1]
    view = _view(inputs, params, window, list(range(steps // params.update_rate + 1)))

    # t = 0: the ego's projection onto each path, the ego's longitudinal speed.
    start_pose = jax.vmap(interpolate_path)(paths, progress, view.start_progress)  # [L, 3]
    idm0 = jnp.broadcast_to(jnp.stack([view.start_progress, jnp.full_like(view.start_progress, inputs.ego[3])],
                                      -1)[:, None], (num_paths, num_speeds, 2))
    pose0 = jnp.broadcast_to(start_pose[:, None], (num_paths, num_speeds, 3))
    lead0 = jnp.zeros((num_paths, num_speeds, 3), dtype)

    def search(path_idx, frame_idx, idm_prev, pose_prev):
        """Leading-object rows of one path's S proposals (walked in order, sharing one row like NAVSIM)."""
        def one(row, inp):
            row = _leader_row(row, inp[0], inp[1], view.meets[path_idx, frame_idx],
                              view.obj_progress[path_idx, frame_idx], view.polygons[frame_idx],
                              inputs.obj_rank[frame_idx], inputs, lengths[path_idx])
            return row, row

        return jax.lax.scan(one, jnp.zeros((3,), dtype), (idm_prev[:, 0], pose_prev))[1]  # [S, 3]

    def step(carry, t):
        idm, pose, lead = carry
        fresh = jax.vmap(search, in_axes=(0, None, 0, 0))(jnp.arange(num_paths), t // params.update_rate, idm, pose)
        lead = jnp.where(t % params.update_rate == 0, fresh, lead)
        idm = _idm_step(idm, lead, inputs.target_velocities, params)
        pose = jax.vmap(interpolate_path)(paths, progress, idm[..., 0])
        return (idm, pose, lead), (idm, pose, lead)

    _, (idm_t, pose_t, lead_t) = jax.lax.scan(step, (idm0, pose0, lead0), jnp.arange(1, steps + 1))

    def stack(first, rest):  # [L, S, ...] + [T, L, S, ...] -> [L * S, T + 1, ...]
        both = jnp.concatenate([first[None], rest], axis=0)
        return jnp.moveaxis(both, 0, 2).reshape((num_paths * num_speeds, steps + 1) + first.shape[2:])

    return Unrolled(idm_states=stack(idm0, idm_t), leading_agent=stack(lead0, lead_t), poses=stack(pose0, pose_t))


def extend(inputs: PlannerInputs, selected: Int[Array, ""], last: Unrolled, params: IDMParams = IDMParams(),
           window: int | None = None) -> Unrolled:
    """``PDMGenerator.generate_trajectory``: the selected proposal unrolled on from step ``proposal_steps`` to
    ``trajectory_steps`` (its leading-object row fresh at every search: NAVSIM walks only this proposal).

    Args:
      inputs: the scene's planner view (as for ``unroll``).
      selected: proposal index (S x lateral + longitudinal).
      last: the selected proposal's state at step ``proposal_steps``: ``idm_states`` [2], ``leading_agent`` [3],
        ``poses`` [3].

    Returns:
      ``Unrolled`` of steps proposal_steps + 1 .. trajectory_steps ([T2, 2], [T2, 3], [T2, 3]).
    """
    num_speeds = inputs.target_velocities.shape[0]
    lateral, longitudinal = selected // num_speeds, selected % num_speeds
    first, last_frame = params.proposal_steps // params.update_rate + 1, params.trajectory_steps // params.update_rate
    frames = list(range(first, last_frame + 1))
    views = [_view(inputs, params, window, frames, [i]) for i in range(inputs.paths.shape[0])]
    pick = lambda *xs: jnp.stack(xs)[lateral]  # noqa: E731
    view = jax.tree.map(pick, *views)  # the selected path's view ([1, ...] leading path axis)
    path, progress = inputs.paths[lateral], inputs.progress[lateral]
    target = inputs.target_velocities[longitudinal]

    def step(carry, t):
        idm, pose, lead = carry
        m = t // params.update_rate - first
        fresh = _leader_row(jnp.zeros_like(lead), idm[0], pose, view.meets[0, m], view.obj_progress[0, m],
                            view.polygons[m], inputs.obj_rank[t // params.update_rate], inputs, progress[-1])
        lead = jnp.where(t % params.update_rate == 0, fresh, lead)
        idm = _idm_step(idm, lead, target, params)
        pose = interpolate_path(path, progress, idm[0])
        return (idm, pose, lead), (idm, pose, lead)

    carry = (last.idm_states, last.poses, last.leading_agent)
    _, (idm_t, pose_t, lead_t) = jax.lax.scan(step, carry, jnp.arange(params.proposal_steps + 1,
                                                                     params.trajectory_steps + 1))
    return Unrolled(idm_states=idm_t, leading_agent=lead_t, poses=pose_t)


def corridor_window(progress: np.ndarray, horizon: float) -> int:
    """Host helper: the most vertices of the cumulative-progress array ``progress`` [C] within any stretch of
    ``horizon`` metres, + 2 (the ``window`` argument of ``unroll``)."""
    ends = np.searchsorted(progress, progress + horizon, side="right")
    return int(np.max(ends - np.arange(progress.shape[0]))) + 2


def unroll_batch(inputs: PlannerInputs, params: IDMParams = IDMParams(), window: int | None = None) -> Unrolled:
    """``unroll`` over a leading scene axis of every ``PlannerInputs`` field (same padded shapes)."""
    return jax.vmap(lambda i: unroll(i, params, window))(inputs)


def extend_batch(inputs: PlannerInputs, selected: Int[Array, "B"], last: Unrolled, params: IDMParams = IDMParams(),
                 window: int | None = None) -> Unrolled:
    """``extend`` over a leading scene axis."""
    return jax.vmap(lambda i, s, l: extend(i, s, l, params, window))(inputs, selected, last)
"""``unroll`` over a leading scene axis of every ``PlannerInputs`` field (same padded shapes)."""

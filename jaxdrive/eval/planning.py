"""nuScenes open-loop planning metrics: L2 at 1/2/3 s and the GT-filtered box collision rate (UniAD's
``PlanningMetric``), vectorised in jnp, with the averaging conventions by name (``spec/eval-protocols.md`` §B):

* "uniad": the value *at* 1/2/3 s (steps 1, 3, 5), over every sample (UniAD's default printer);
* "stp3": the mean over the steps *up to* 1/2/3 s, over every sample (UniAD's "stp3" printer, Agent-Driver, OpenREAD);
* "vad": the mean up to 1/2/3 s over the samples whose GT future is complete only (``gt_mask`` all 1: VAD's
  ``fut_valid_flag``); the others leave the numerator and the denominator. Only the averaging: VAD's own occupancy
  rasterisation and image frame are not reproduced.

Frame and layout (exactly UniAD's native ones, fixed here once and tested with asymmetric occupancies):

* trajectories ``[N, 6, 2]`` in metres, BEV frame of the current sample (nuScenes LIDAR_TOP, ego at the origin):
  ``[..., 0] = x`` lateral (+x = ego's right), ``[..., 1] = y`` forward; step ``t`` is at ``(t + 1) * 0.5 s``.
* occupancy ``bool [N, 6, 200, 200]``: ``occupancy[n, t, i, j]`` is the 0.5 m cell centred at ``y = -49.75 + 0.5 i``
  (rows, forward) and ``x = -49.75 + 0.5 j`` (columns, rightwards). No flips: a point with x < 0 is looked up in
  columns j < 100.

The ego box (1.85 m wide, 4.084 m long, centred 0.5 m ahead of the trajectory point) is rasterised once into UniAD's
32-pixel footprint (rows 97..104, cols 98..101 at the origin, the pixel centres inside the box as ``skimage.draw.polygon``
gives them). A point moves it by ``trunc(2 y)``, ``trunc(2 x)`` pixels the way UniAD does (``astype(int32)`` of
``point / 0.5 + footprint``), then indices are clipped to [0, 199] *before* the lookup, so a footprint leaving the grid
is tested against the border cells (UniAD's quirk, reproduced). ``floor(2 v) + pixel`` equals UniAD's
``trunc(2 v + pixel)`` for every non-negative sum, and both clip to 0 otherwise; ``2 v`` is exact in float32.

Collision at step t counts a sample when the predicted box hits ``occupancy[n, t]`` and the GT box does not (the
GT-collision filter); the denominator is every sample, and ``gt_mask`` only affects L2, as in UniAD.
"""
from __future__ import annotations

import numbers
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.errors import UserInputError

GRID = 200
RESOLUTION = 0.5  # m per cell
ORIGIN = -49.75  # centre of cell 0, both axes (m)
EGO_WIDTH = 1.85
EGO_LENGTH = 4.084
EGO_FORWARD_SHIFT = 0.5  # m, box centre ahead of the trajectory point
STEPS = 6
STEP_SECONDS = 0.5
CONVENTIONS = ("uniad", "stp3", "vad")
HORIZONS = (1, 2, 3)  # seconds


def ego_footprint(
    width: float = EGO_WIDTH, length: float = EGO_LENGTH, shift: float = EGO_FORWARD_SHIFT
) -> Int[np.ndarray, "P 2"]:
    """(row, col) pixels of the ego box at the origin: pixel centres inside the axis-aligned box, as
    ``skimage.draw.polygon(rows=long_px, cols=lat_px)`` rasterises UniAD's corners. ``[32, 2]`` for the defaults."""
    lon = (np.array([-length / 2 + shift, length / 2 + shift]) - ORIGIN) / RESOLUTION
    lat = (np.array([-width / 2, width / 2]) - ORIGIN) / RESOLUTION
    rows = np.arange(int(np.ceil(lon[0])), int(np.floor(lon[1])) + 1)
    cols = np.arange(int(np.ceil(lat[0])), int(np.floor(lat[1])) + 1)
    rr, cc = np.meshgrid(rows, cols, indexing="ij")
    return np.stack([rr.reshape(-1), cc.reshape(-1)], -1).astype(np.int32)


FOOTPRINT = ego_footprint()


def box_collides(
    points: Float[Array, "T 2"], occupancy: Bool[Array, "T H W"], footprint: Int[Array, "P 2"]
) -> Bool[Array, "T"]:
    """Per step: does the ego footprint moved to ``points[t]`` (x right, y forward) touch ``occupancy[t]``?"""
    shift = jnp.floor(points / RESOLUTION).astype(jnp.int32)  # [T, 2] (x, y) -> columns, rows
    rows = jnp.clip(footprint[None, :, 0] + shift[:, 1:2], 0, occupancy.shape[1] - 1)  # [T, P]
    cols = jnp.clip(footprint[None, :, 1] + shift[:, 0:1], 0, occupancy.shape[2] - 1)
    steps = jnp.arange(points.shape[0])[:, None]
    return occupancy[steps, rows, cols].any(-1)


@jax.jit
def _per_sample(pred, gt, occupancy, gt_mask, footprint):
    """(masked L2 [N, T], predicted-box collision not shared by GT [N, T]) for a batch."""
    l2 = jnp.sqrt(jnp.sum(jnp.square(pred - gt), -1) * gt_mask)
    coll = jax.vmap(box_collides, in_axes=(0, 0, None))
    hit = coll(pred, occupancy, footprint) & ~coll(gt, occupancy, footprint)
    return l2, hit


def _validate(pred, gt, occupancy, gt_mask) -> tuple[np.ndarray, ...]:
    pred, gt = np.asarray(pred), np.asarray(gt)
    for name, a in (("pred", pred), ("gt", gt)):
        if not np.issubdtype(a.dtype, np.number):
            raise UserInputError(f"{name}: expected float coordinates (metres), got dtype {a.dtype}")
    if pred.ndim != 3 or pred.shape[2] != 2:
        raise UserInputError(f"pred: expected float [N, T, 2] (metres, x right / y forward), got shape {pred.shape}")
    if pred.shape[0] == 0:
        raise UserInputError("pred: no samples (N = 0): the rates would divide by zero")
    if pred.shape[1] < STEPS:
        raise UserInputError(f"pred: expected {STEPS} steps (0.5 .. 3.0 s) per trajectory, got {pred.shape[1]}")
    if gt.shape != pred.shape:
        raise UserInputError(f"gt: expected shape {pred.shape} (as pred), got {gt.shape}")
    n, t = pred.shape[:2]
    occ = np.asarray(occupancy)
    if occ.shape != (n, t, GRID, GRID):
        raise UserInputError(f"occupancy: expected bool [{n}, {t}, {GRID}, {GRID}], got shape {occ.shape}")
    if occ.dtype != bool:
        if not np.isin(occ, (0, 1)).all():
            raise UserInputError(f"occupancy: expected bool (or 0/1) cells, got dtype {occ.dtype} with other values")
        occ = occ.astype(bool)
    mask = np.ones((n, t), np.float32) if gt_mask is None else np.asarray(gt_mask, np.float32)
    if mask.shape != (n, t):
        raise UserInputError(f"gt_mask: expected [{n}, {t}] (1 = GT step valid), got shape {mask.shape}")
    if not np.isin(mask, (0, 1)).all():  # a NaN made every L2 NaN, a 2 scaled an error: both silently
        raise UserInputError(f"gt_mask: expected 0/1 (1 = GT step valid), got values {np.unique(mask)[:5]}")
    for name, a in (("pred", pred), ("gt", gt)):
        if not np.isfinite(a).all():
            raise UserInputError(f"{name}: non-finite coordinates at sample {int(np.argwhere(~np.isfinite(a))[0, 0])}")
    return pred.astype(np.float32), gt.astype(np.float32), occ, mask


def _footprint(footprint) -> np.ndarray:
    """``footprint`` (default ``FOOTPRINT``) checked: integer (row, col) pixel offsets [P >= 1, 2]."""
    if footprint is None:
        return FOOTPRINT
    fp = np.asarray(footprint)
    if fp.ndim != 2 or fp.shape[0] == 0 or fp.shape[1] != 2:
        raise UserInputError(f"footprint: expected [P >= 1, 2] (row, col) ego pixels at the origin, got shape {fp.shape}")
    if not np.issubdtype(fp.dtype, np.integer):
        raise UserInputError(f"footprint: expected integer pixel offsets, got dtype {fp.dtype}")
    return fp


def horizon_values(per_step: Float[np.ndarray, "T"], convention: str) -> dict[int, float]:
    """{seconds: value} for 1, 2, 3 s: "uniad" takes the value at step 2s-1 (indices 1, 3, 5), "stp3" and "vad" the
    mean of steps 0..2s-1."""
    if convention not in CONVENTIONS:
        raise UserInputError(f"convention: expected one of {CONVENTIONS}, got {convention!r}")
    v = np.asarray(per_step, np.float64)
    k = int(round(1 / STEP_SECONDS))
    if convention == "uniad":
        return {s: float(v[k * s - 1]) for s in HORIZONS}
    return {s: float(v[: k * s].mean()) for s in HORIZONS}


def planning_metrics(
    pred: Float[np.ndarray, "N T 2"],
    gt: Float[np.ndarray, "N T 2"],
    occupancy: Bool[np.ndarray, "N T 200 200"],
    gt_mask: Float[np.ndarray, "N T"] | None = None,
    convention: Literal["uniad", "stp3", "vad"] = "uniad",
    *,
    footprint: Int[np.ndarray, "P 2"] | None = None,
    chunk: int = 256,
    l2_masked: bool = True,
) -> dict:
    """UniAD's L2 and GT-filtered box collision rate, plus the 1/2/3 s values of ``convention``.

    Args:
      pred, gt: [N, 6, 2] metres, x right / y forward (module docstring); step t at (t + 1) * 0.5 s.
      occupancy: bool [N, 6, 200, 200], rows forward, columns rightwards, cell (i, j) centred at
        (x, y) = (-49.75 + 0.5 j, -49.75 + 0.5 i).
      gt_mask: [N, 6] (1 = GT valid; default all valid); scales the squared error of L2 only.
      convention: "uniad" (value at 1/2/3 s), "stp3" (mean up to 1/2/3 s) or "vad" (mean up to 1/2/3 s over the
        samples whose ``gt_mask`` is all 1; ValueError when there is none).
      footprint: [P, 2] (row, col) ego pixels at the origin (default: UniAD's 32-pixel box).
      chunk: samples per device call (bounds memory for large N).
      l2_masked: False: L2 ignores ``gt_mask`` as ST-P3's own ``PlanningMetric`` does (an invalid GT step's error
        counts); "vad"'s choice of complete samples still reads it.
    Returns:
      {"l2": [6] (sum_n sqrt(mask |pred - gt|^2) / N), "collision": [6] (#GT-filtered box collisions / N),
       "collision_count": [6] int, "l2_1s", "l2_2s", "l2_3s", "collision_1s", "collision_2s", "collision_3s"
       (floats), "num_samples" (N; "vad": the complete samples), "num_excluded" (samples "vad" left out, else 0)}.
    """
    if convention not in CONVENTIONS:
        raise UserInputError(f"convention: expected one of {CONVENTIONS}, got {convention!r}")
    pred, gt, occ, mask = _validate(pred, gt, occupancy, gt_mask)
    fp = jnp.asarray(_footprint(footprint), jnp.int32)
    if isinstance(chunk, bool) or not isinstance(chunk, numbers.Integral) or chunk < 1:
        raise UserInputError(f"chunk: expected a positive number of samples per device call, got {chunk!r}")
    total = len(pred)
    if convention == "vad":  # VAD averages over the samples with fut_valid_flag (all future steps present) only
        complete = (mask == 1).all(1)
        if not complete.any():
            raise UserInputError("gt_mask: no sample has a complete GT future (all steps 1), VAD's mean is over none")
        pred, gt, occ, mask = pred[complete], gt[complete], occ[complete], mask[complete]
    n, t = pred.shape[:2]
    l2_sum = np.zeros(t, np.float64)
    counts = np.zeros(t, np.int64)
    for s in range(0, n, chunk):
        sl = slice(s, s + chunk)
        l2, hit = _per_sample(pred[sl], gt[sl], occ[sl], mask[sl] if l2_masked else np.ones_like(mask[sl]), fp)
        l2_sum += np.asarray(l2, np.float64).sum(0)
        counts += np.asarray(hit).sum(0)
    out = {"l2": l2_sum / n, "collision": counts / n, "collision_count": counts, "num_samples": n,
           "num_excluded": total - n}
    for name in ("l2", "collision"):
        for sec, v in horizon_values(out[name], convention).items():
            out[f"{name}_{sec}s"] = v
    return out


# ---------------------------------------------------------------- obstacle classes and frames

OBSTACLE_VARIANTS = {
    "vehicle": ("vehicle",),  # UniAD (occ-flow GT of vehicles); OpenREAD's "only_vehicle"
    "vehicle+pedestrian": ("vehicle", "pedestrian"),  # ST-P3 (segmentation OR pedestrian); VAD's boxes
}


def obstacle_occupancy(layers: dict[str, np.ndarray], variant: str = "vehicle") -> np.ndarray:
    """The occupancy of an obstacle-class variant: the OR of the class layers it names (each bool [N, 6, 200, 200]).

    ``variant``: "vehicle" (UniAD, vehicle-only) or "vehicle+pedestrian" (ST-P3). A missing layer is an error."""
    if variant not in OBSTACLE_VARIANTS:
        raise UserInputError(f"obstacles: expected one of {sorted(OBSTACLE_VARIANTS)}, got {variant!r}")
    missing = [c for c in OBSTACLE_VARIANTS[variant] if c not in layers]
    if missing:
        raise UserInputError(f"obstacles {variant!r}: needs occupancy layers {missing}, have {sorted(layers)}")
    out = None
    for c in OBSTACLE_VARIANTS[variant]:
        layer = np.asarray(layers[c]).astype(bool)
        out = layer if out is None else out | layer
    return out


def text_to_lidar(traj: Float[np.ndarray, "... 2"]) -> np.ndarray:
    """OpenREAD text frame (x forward, y left; ``"(x1, y1), ..."``) -> metric frame (x right, y forward).

    The map of OpenREAD's ``str_to_numpy``: (a, b) -> (-b, a)."""
    traj = np.asarray(traj)
    return np.stack([-traj[..., 1], traj[..., 0]], -1)


def lidar_to_text(traj: Float[np.ndarray, "... 2"]) -> np.ndarray:
    """Metric frame (x right, y forward; UniAD/VAD LiDAR files) -> OpenREAD text frame (x forward, y left)."""
    traj = np.asarray(traj)
    return np.stack([traj[..., 1], -traj[..., 0]], -1)


#: stored occupancy layouts of the public GT caches -> (flip rows, flip columns, negate x): what the pipeline that
#: publishes numbers on them does before its box lookup (spec ``eval-protocols.md``, "Sign and frame juggling").
#: UniAD's caches are read as stored by UniAD's metric (which sees the original x). OpenREAD flips
#: ``planing_gt_segmentation_val`` on the last axis (``only_vehicle=True``) or ``vad_gt_seg.pkl`` on both axes, and
#: feeds the ST-P3 metric variant (eval_share ``metric.py``), whose lookup sees x negated. A flip and a negation do
#: not cancel: the lookup truncates ``-2 x + col`` where the mirror of the original truncates ``2 x + col``, one
#: column (0.5 m) apart wherever 2 x is not a whole number, so both are reproduced as such.
OCCUPANCY_LAYOUTS = {
    "uniad": (False, False, False),
    "openread_vehicle": (False, True, True),
    "openread_vad": (True, True, True),
}


def in_layout(pred: Float[np.ndarray, "N T 2"], gt: Float[np.ndarray, "N T 2"], occupancy: np.ndarray,
              layout: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(pred, gt, occupancy)`` as ``planning_metrics`` must see them to give the numbers of the pipeline that uses
    a GT occupancy stored in ``layout`` (:data:`OCCUPANCY_LAYOUTS`): its flips of the stored ``[..., 200, 200]``
    grid and, for the ST-P3 variant, x negated in both trajectories (L2 is unchanged by that)."""
    if layout not in OCCUPANCY_LAYOUTS:
        raise UserInputError(f"occupancy layout: expected one of {sorted(OCCUPANCY_LAYOUTS)}, got {layout!r}")
    for name, traj in (("pred", pred), ("gt", gt)):
        if np.ndim(traj) < 1 or np.shape(traj)[-1] != 2:  # a [N, T, 1] array broadcast to (x, x) silently
            raise UserInputError(f"{name}: expected [..., 2] (x, y) points, got shape {np.shape(traj)}")
    flip_rows, flip_cols, negate_x = OCCUPANCY_LAYOUTS[layout]
    occ = np.asarray(occupancy)
    if flip_rows:
        occ = occ[..., ::-1, :]
    if flip_cols:
        occ = occ[..., ::-1]
    sign = np.array([-1.0 if negate_x else 1.0, 1.0], np.float32)
    return np.asarray(pred) * sign, np.asarray(gt) * sign, np.ascontiguousarray(occ)

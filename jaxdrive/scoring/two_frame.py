"""NAVSIM's one-stage aggregation after ``pdm_score``: two-frame extended comfort (EC) and the final ``score``.

``navsim/planning/script/run_pdm_score_one_stage.py`` (``spec/epdms.md`` §3.9, §4.3):

* ``infer_start_adjacent_mapping``: per log, the ORIGINAL frames sorted by start time; each frame is paired with the
  one before it when the two start at most 0.55 s apart (``adjacent_mapping``);
* ``SceneAggregator._compute_two_frame_comfort``: the agent's simulated states of the two frames, compared over their
  overlap, ``current[:-k]`` vs ``previous[k:]`` with k = round(Δstart / 0.1) (5 for log frames 0.5 s apart); NAVSIM
  asserts 0 < Δstart < 0.55 (``two_frame_extended_comfort``);
* ``compute_final_scores``: ``score = multiplier x Σ w m / Σ w`` over (EP 5, TTC 5, LK 2, HC 2, EC 2), the EC value and
  weight set to 0 where EC is NaN (``final_scores``).
"""

from __future__ import annotations

import numpy as np

from jaxdrive.rules.comfort import extended_comfort_rms, EC_ACCEL, EC_JERK, EC_YAW_RATE, EC_YAW_ACCEL

TIME_GAP_THRESHOLD_S = 0.55  # infer_start_adjacent_mapping's default
INTERVAL_S = 0.1  # the simulator's proposal sampling
WEIGHTS = np.array([5.0, 5.0, 2.0, 2.0, 2.0])  # EP, TTC, LK, HC, EC (weighted_metrics_array)
ORIGINAL = 0  # SceneFrameType.ORIGINAL


def adjacent_mapping(frames: list[tuple[str, str, int, float]],
                     threshold_s: float = TIME_GAP_THRESHOLD_S) -> dict[str, str]:
    """``infer_start_adjacent_mapping``: ``frames`` = (token, log_name, frame_type, start_time_s); returns current
    token -> previous token for ORIGINAL frames of one log at most ``threshold_s`` apart (sorted by start time; ties
    keep the given order)."""
    by_log: dict[str, list[tuple[float, int, str]]] = {}
    for i, (token, log, frame_type, start) in enumerate(frames):
        if frame_type == ORIGINAL and start is not None and np.isfinite(start):
            by_log.setdefault(log, []).append((start, i, token))
    mapping = {}
    for group in by_log.values():
        group.sort()
        for (t_prev, _, prev), (t_cur, _, cur) in zip(group, group[1:]):
            if abs(t_cur - t_prev) <= threshold_s:
                mapping[cur] = prev
    return mapping


def overlap_steps(interval_s: float) -> int | None:
    """SceneAggregator's overlap k = round(Δstart / 0.1), or None where NAVSIM's assert 0 < Δstart < 0.55 fails."""
    if not 0 < interval_s < TIME_GAP_THRESHOLD_S:
        return None
    return int(round(interval_s / INTERVAL_S))


def two_frame_extended_comfort(current: np.ndarray, previous: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """EC per row: ``ego_is_two_frame_extended_comfort(current[:-k], previous[k:])`` as 1.0 / 0.0 (float64 states
    [N, 41, 11], ``shift`` [N] = k), NaN where k <= 0 (no previous frame)."""
    current, previous = np.asarray(current, np.float64), np.asarray(previous, np.float64)
    shift = np.asarray(shift, np.int64)
    ec = np.full(len(shift), np.nan)
    limits = np.array([EC_ACCEL, EC_JERK, EC_YAW_RATE, EC_YAW_ACCEL])
    for k in sorted(set(shift[shift > 0].tolist())):
        rows = np.flatnonzero(shift == k)
        rms = np.asarray(extended_comfort_rms(current[rows], previous[rows], shift=k))
        ec[rows] = np.all(rms <= limits, axis=-1).astype(np.float64)
    return ec


def final_scores(multiplier: np.ndarray, weighted: np.ndarray, ec: np.ndarray) -> np.ndarray:
    """``compute_final_scores``: ``weighted`` [N, 4] = (EP, TTC, LK, HC) after the human filter, ``ec`` [N] (NaN:
    value and weight dropped)."""
    weighted = np.asarray(weighted, np.float64)
    ec = np.asarray(ec, np.float64)
    missing = np.isnan(ec)
    values = np.concatenate([weighted, np.where(missing, 0.0, ec)[:, None]], axis=1)
    weights = np.broadcast_to(WEIGHTS, values.shape).copy()
    weights[missing, 4] = 0.0
    total = weights.sum(axis=1)
    total[total == 0.0] = np.nan
    return np.asarray(multiplier, np.float64) * (values * weights).sum(axis=1) / total
